// One step of the online softmax with FA4's lazy rescaling, per query row, in log2 units.
//
// The classic recurrence moves the running max m to max(m, tile max) every tile and multiplies the
// running output O and sum l by 2^(m_old - m_new). Lazy rescaling keeps a stale m as long as the tile max
// exceeds it by at most `threshold`: the tile's probabilities 2^(s - m) are then at most 2^threshold
// (256 for the default 8), which fp32 O and l absorb, and bf16/fp16 P still represent with full relative
// precision. Because O and l always share the same m, the final O / l is exact; only the rare real
// rescales cost the O multiply. threshold = 0 gives the classic recurrence.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

inline constexpr float kLazyRescaleThresholdLog2 = 8.0f;
inline constexpr float kNegInf = -__builtin_huge_valf();

// True when the row's running max must move to tile_max (and O, l be rescaled).
FLASH4_HD bool needs_rescale(float running_max, float tile_max, float threshold) {
  return tile_max > running_max + threshold;
}

// The max used as the exponent offset: a row that has seen only masked scores (-inf) uses 0 so that
// 2^(-inf - offset) = 0 instead of NaN.
FLASH4_HD float exponent_offset(float running_max) {
  return running_max == kNegInf ? 0.0f : running_max;
}

}  // namespace flash4
