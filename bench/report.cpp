// flash4-bench's output formats. JSON goes through nlohmann::json, which writes NaN and infinity as null.
#include "report.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace flash4::bench {
namespace {

// x rounded to `decimals` places (the JSON keeps what the text line shows, not 17 digits of noise).
double rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

// x to three significant digits (error magnitudes).
double significant3(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", x);
  return std::strtod(text, nullptr);
}

const char* mode_name(Mode mode) { return mode == Mode::fwd ? "fwd" : "bwd"; }

std::string join(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

const char* verify_word(const Measurement& m) {
  if (m.verification == nullptr) return "skipped";
  return m.verification->ok ? "ok" : "fail";
}

double tflops_of(const Case& c, double ms) { return flops(c) / (ms * 1e-3) / 1e12; }
double gbps_of(const Case& c, double ms) { return bytes_moved(c) / (ms * 1e-3) / 1e9; }

}  // namespace

nlohmann::ordered_json json_row(const Case& c, const Measurement& m) {
  nlohmann::ordered_json row;
  row["mode"] = mode_name(c.mode);
  row["dtype"] = std::string(ref::name(c.dtype));
  row["D"] = c.head_dim;
  row["causal"] = c.causal ? 1 : 0;
  row["N"] = c.seqlen_q;
  row["Sq"] = c.seqlen_q;
  row["Sk"] = c.seqlen_k;
  row["B"] = c.batch;
  row["H"] = c.heads_q;
  row["Hkv"] = c.heads_kv;
  row["window_left"] = c.window_left;
  row["window_right"] = c.window_right;
  row["softcap"] = c.softcap;
  if (c.is_varlen()) {
    row["seqlens_q"] = c.varlen_q;
    row["seqlens_k"] = c.varlen_k;
  }
  row["provider"] = "flash4";
  row["ms"] = rounded(m.ms, 5);
  row["tflops"] = rounded(tflops_of(c, m.ms), 1);
  row["gbps"] = rounded(gbps_of(c, m.ms), 1);
  row["iters"] = m.iters;
  row["verify"] = verify_word(m);
  if (c.mode == Mode::bwd) row["deterministic"] = c.deterministic ? 1 : 0;
  if (const Verification* v = m.verification) {
    if (c.mode == Mode::fwd) {
      row["max_err_o"] = significant3(v->max_err_o);
      row["max_err_lse"] = significant3(v->max_err_lse);
    } else {
      row["max_rel_err_dq"] = significant3(v->max_err_dq);
      row["max_rel_err_dk"] = significant3(v->max_err_dk);
      row["max_rel_err_dv"] = significant3(v->max_err_dv);
    }
  }
  return row;
}

std::string describe(const Case& c) {
  char text[160];
  std::snprintf(text, sizeof text, "%s %s D=%d causal=%d B=%d Sq=%d Sk=%d H=%d Hkv=%d", mode_name(c.mode),
                std::string(ref::name(c.dtype)).c_str(), c.head_dim, c.causal ? 1 : 0, c.batch, c.seqlen_q,
                c.seqlen_k, c.heads_q, c.heads_kv);
  std::string out = text;
  if (c.window_left >= 0 || c.window_right >= 0) {
    out += " window=" + std::to_string(c.window_left) + "," + std::to_string(c.window_right);
  }
  if (c.softcap > 0) {
    std::snprintf(text, sizeof text, " softcap=%g", c.softcap);
    out += text;
  }
  if (c.is_varlen()) out += " varlen=" + join(c.varlen_q) + (c.varlen_k == c.varlen_q ? "" : " k=" + join(c.varlen_k));
  if (c.mode == Mode::bwd && c.deterministic) out += " deterministic";
  return out;
}

std::string text_line(const Case& c, const Measurement& m) {
  char text[256];
  std::snprintf(text, sizeof text, ": %.4f ms, %.1f TFLOPS, %.0f GB/s, verify %s", m.ms, tflops_of(c, m.ms),
                gbps_of(c, m.ms), verify_word(m));
  std::string out = describe(c) + text;
  if (const Verification* v = m.verification) {
    if (c.mode == Mode::fwd) {
      std::snprintf(text, sizeof text, " (max |dO| %.2e, max rel |dLSE| %.2e)", v->max_err_o, v->max_err_lse);
    } else {
      std::snprintf(text, sizeof text, " (max rel err dQ %.2e, dK %.2e, dV %.2e)", v->max_err_dq, v->max_err_dk,
                    v->max_err_dv);
    }
    out += text;
  }
  return out;
}

std::string progress_line(std::size_t index, std::size_t count, const Case& c, double elapsed_s) {
  char text[64];
  std::snprintf(text, sizeof text, "[%zu/%zu] ", index + 1, count);
  std::string out = text;
  out += describe(c);
  std::snprintf(text, sizeof text, " (%.0f s so far)", elapsed_s);
  return out + text;
}

}  // namespace flash4::bench
