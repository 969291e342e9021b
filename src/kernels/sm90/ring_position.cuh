// Position in a ring of shared-memory stages guarded by full/empty mbarrier pairs: the stage index and
// the parity of the barrier phase that stage is in. Producer and consumers each keep one and advance it
// in the same order.
#pragma once

#include <cstdint>

namespace flash4::sm90 {

template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// The same position kept as the number of stages taken so far: one register, from which the position of
// any earlier stage also follows (the forward's consumer reads V one key block behind K). A power-of-two
// ring keeps stage and parity right when the 32-bit count wraps.
template <int kStages>
struct RingCount {
  static_assert((kStages & (kStages - 1)) == 0, "the count wraps consistently only for a power-of-two ring");
  uint32_t taken = 0;

  // The position `behind` stages before the next one.
  __device__ __forceinline__ RingPosition<kStages> position(uint32_t behind = 0) const {
    const uint32_t n = taken - behind;
    return {int(n % kStages), (n / kStages) & 1};
  }
  __device__ __forceinline__ void advance() { ++taken; }
};

}  // namespace flash4::sm90
