// --verify: sampled rows of a forward's O and LSE against the fp64 CPU reference.
#pragma once

#include <cstdint>
#include <span>

#include "cases.hpp"

namespace flash4::bench {

struct Verification {
  bool ok = true;
  double max_err_o = 0;    // max |O - O_fp64| over the sampled rows
  double max_err_lse = 0;  // max |LSE - LSE_fp64| / max(1, |LSE_fp64|) over the sampled rows
};

// q, k, v: the dense (B, S, H, D) inputs the kernel saw, as floats; o: the kernel's output as 16-bit patterns;
// lse: the kernel's (B, Hq, Sq) log-sum-exp.
Verification verify_forward(const Case& c, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<const std::uint16_t> o,
                            std::span<const float> lse);

}  // namespace flash4::bench
