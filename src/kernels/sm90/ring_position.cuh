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

}  // namespace flash4::sm90
