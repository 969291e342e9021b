// The fill kernels' ABI (src/kernels/util/fill.cu): constant fills of device memory that an empty problem
// writes instead of running an attention kernel. The host plans them (host/empty_problem.hpp) and launches
// them through launch_fills (host/fill.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flash4 {

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

// Enqueue one fill on `stream`; the launch's status.
cudaError_t launch_zero_fill(const ZeroFill& fill, cudaStream_t stream);
cudaError_t launch_float_fill(const FloatFill& fill, cudaStream_t stream);

}  // namespace flash4
