// The soak's problems: random valid attention problems, forward and backward, drawn from (seed, index) so that
// any one replays alone. Every feature the C ABI offers is drawn: dtype, head dim, causal, sliding windows
// (with causal too, where window_right reads as 0), softcap, MHA / GQA / MQA, varlen with empty sequences,
// Sq != Sk, strided tensors, deterministic mode. Sizes stay small (a few hundred rows, up to 4 query heads,
// a bounded amount of work) so that the fp64 CPU reference keeps up with the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/backward_case.hpp"

namespace flash4::soak {

// Multiply-adds of one attention pass over all (sequence, head) pairs, B x Hq x Sq x Sk x D: what the CPU
// reference's cost scales with. Problems are redrawn until they are at most kMaxWork.
inline constexpr double kMaxWork = 4.0e7;
inline constexpr int kMaxSeqlen = 512;
inline constexpr int kMaxHeadsQ = 4;

test::BackwardCase soak_problem(std::uint64_t seed, std::uint64_t index);

// The problems of --sample (for compute-sanitizer): one per head dim, each with a different mix of features,
// all small.
test::BackwardCase sample_problem(int index);
inline constexpr int kSampleProblems = 10;

double work_of(const test::BackwardCase& c);

// The features a problem exercises ("bf16", "d128", "causal", "varlen_empty_sequence", ...): the soak's
// summary counts them, and the generator's test checks that every one is drawn.
std::vector<std::string> features_of(const test::BackwardCase& c);

// The seed of the problem's random inputs.
std::uint64_t input_seed(std::uint64_t seed, std::uint64_t index);

}  // namespace flash4::soak
