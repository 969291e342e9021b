// --verify: sampled rows of a forward's O and LSE, or of a backward's dQ, dK and dV, against fp64 on the CPU.
#pragma once

#include <cstdint>
#include <span>

#include "cases.hpp"

namespace flash4::bench {

struct Verification {
  bool ok = true;
  double max_err_o = 0;    // max |O - O_fp64| over the sampled rows
  double max_err_lse = 0;  // max |LSE - LSE_fp64| / max(1, |LSE_fp64|) over the sampled rows
  // Backward: max |dX - dX_fp64| / max |dX_fp64| over the sampled rows of each gradient.
  double max_err_dq = 0;
  double max_err_dk = 0;
  double max_err_dv = 0;
};

// q, k, v: the dense (B, S, H, D) inputs the kernel saw (packed (total, H, D) when varlen), as floats; o: the
// kernel's output as 16-bit patterns; lse: the kernel's (B, Hq, Sq) log-sum-exp ((Hq, total_q) when varlen).
Verification verify_forward(const Case& c, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<const std::uint16_t> o,
                            std::span<const float> lse);

// The backward, given the forward's outputs it read: sampled query rows of dq and key rows of dk and dv against an
// fp64 backward that takes P = exp(score - lse) and delta = rowsum(dout * o) from the kernel's own o and lse (so
// that the forward's rounding is not charged to the backward). q, k, v, dout as floats in the layout of
// verify_forward's inputs; o, dq, dk, dv as 16-bit patterns in the same layout; lse as there.
struct BackwardData {
  std::span<const float> q, k, v, dout;
  std::span<const std::uint16_t> o;
  std::span<const float> lse;
  std::span<const std::uint16_t> dq, dk, dv;
};
Verification verify_backward(const Case& c, const BackwardData& t);

}  // namespace flash4::bench
