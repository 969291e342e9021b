// What flash4-bench prints for a case: a JSON object (--json) or a text line, and the progress line on stderr.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "cases.hpp"
#include "verify.hpp"

namespace flash4::bench {

// One measured case: the median time of `iters` launches and, when --verify ran, its verification.
struct Measurement {
  double ms = 0;
  int iters = 0;
  const Verification* verification = nullptr;  // null: not verified
};

// The row in the anchors' format (mode, D, causal, N, B, H, provider, ms, tflops) plus the case's other fields.
// A value that is not finite (a NaN error, a time that could not be measured) is written as null, so the line is
// always valid JSON.
nlohmann::ordered_json json_row(const Case& c, const Measurement& m);

// The same as one human-readable line.
std::string text_line(const Case& c, const Measurement& m);

// "fwd bf16 D=128 causal=0 B=4 Sq=4096 Sk=4096 H=16 Hkv=16", plus the window, softcap and varlen when set.
std::string describe(const Case& c);

// "[3/24] <describe> (12 s so far)": printed on stderr before each case of a run with several.
std::string progress_line(std::size_t index, std::size_t count, const Case& c, double elapsed_s);

}  // namespace flash4::bench
