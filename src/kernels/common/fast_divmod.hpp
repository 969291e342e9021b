// Division by a run-time divisor that stays fixed for a whole kernel (the KV cache's page size), as a
// multiply-high and a shift instead of the ~20 instructions of an integer division: the decode kernel
// splits every key index it loads into (page, row in page).
//
// For a divisor d >= 1 let s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1 (< 2^32). Then for every
// 0 <= n < 2^31, n / d = (umulhi(n, m) + n) >> s (Granlund and Montgomery's round-up method; umulhi(n, m)
// <= n, so the sum stays below 2^32). Exhaustively and randomly checked against / in
// tests/cpu/test_kvcache_plan.cpp.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"

namespace flash4 {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;  // m above; 1 with shift 0 for d = 1 (q = umulhi(n, 1) + n = n)
  uint32_t shift = 0;

  // Host-side set-up; divisor must be in [1, 2^31).
  static FastDivmod make(uint32_t divisor) {
    FastDivmod f;
    f.divisor = divisor;
    uint32_t shift = 0;
    while ((uint64_t{1} << shift) < divisor) ++shift;
    f.shift = shift;
    f.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
    return f;
  }

  // n / divisor for 0 <= n < 2^31.
  FLASH4_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const uint32_t high = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }

  // quotient and remainder of n / divisor.
  FLASH4_HD void divmod(uint32_t n, uint32_t& quotient, uint32_t& remainder) const {
    quotient = div(n);
    remainder = n - quotient * divisor;
  }
};

}  // namespace flash4
