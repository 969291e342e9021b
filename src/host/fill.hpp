// Constant fills of device memory on the caller's stream: what an empty problem writes instead of running
// a kernel (host/empty_problem.hpp decides which tensors get which value). Plain C++: the launcher is
// implemented by src/kernels/util/fill.cu, which is compiled into the shared library only.
#pragma once

#include <cstdint>
#include <vector>

#include "flash4/flash4.h"
#include "launch/launch_result.hpp"

namespace flash4::host {

// A strided 4-D tensor (batch, seq, head, dim) set to all-zero bytes, which is +0 in bf16, fp16 and fp32.
// Strides are in elements; the dim axis is contiguous. Only the extents' elements are written: padding
// between rows, heads or batches (a guard region, the other half of a packed qkv buffer) is left alone.
struct ZeroFill {
  const char* name;  // the params field, for messages
  void* data;
  std::int64_t element_bytes;
  std::int64_t extent[4];  // batch, seq, head, dim
  std::int64_t stride[3];  // batch, seq, head (elements)

  std::int64_t elements() const { return extent[0] * extent[1] * extent[2] * extent[3]; }
};

// `count` contiguous floats set to `value`; or, with per_head set (device memory), each run of `run` floats
// set to the next of `heads` per-head values in turn: an LSE laid out (batch, heads, rows) whose fully masked
// rows take their head's sink logit.
struct FloatFill {
  const char* name;
  float* data;
  std::int64_t count;
  float value;
  const float* per_head;
  std::int64_t run;
  std::int64_t heads;
};

struct FillPlan {
  std::vector<ZeroFill> zeros;
  std::vector<FloatFill> floats;

  bool empty() const { return zeros.empty() && floats.empty(); }
};

// Enqueues every fill of the plan on `stream`; never synchronizes. An empty plan makes no CUDA call at all
// (so it succeeds without a device); otherwise FLASH4_ERROR_NO_DEVICE without a Hopper device, and
// FLASH4_ERROR_CUDA, naming the tensor, when a launch fails.
LaunchResult launch_fills(const FillPlan& plan, flash4_stream_t stream);

}  // namespace flash4::host
