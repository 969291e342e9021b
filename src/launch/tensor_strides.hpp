// Element strides of one (batch, seq, head, dim) tensor as both directions' kernel params carry them; the dim
// axis is contiguous, and batch is ignored in varlen mode.
#pragma once

#include <cstdint>

namespace flash4 {

struct TensorStrides {
  int64_t batch;
  int64_t seq;
  int64_t head;
};

}  // namespace flash4
