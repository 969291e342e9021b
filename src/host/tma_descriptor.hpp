// Host-side encoding of TMA tensor maps (CUtensorMap) for the kernels' 4-D (dim, seq, head, batch)
// views. The driver entry point is fetched through the runtime, so the library needs no -lcuda.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <string>

namespace flash4::host {

struct TmaView {
  const void* base;
  CUtensorMapDataType element_type;
  int element_bytes;
  std::array<uint64_t, 4> extent;        // elements: head_dim, seq, heads, batch
  std::array<uint64_t, 3> stride_bytes;  // of dims 1..3 (dim 0 is contiguous)
  uint32_t box_cols;                     // innermost box width (swizzle width / element size when swizzled)
  uint32_t box_rows;
  int swizzle_bytes;                     // 128, 64, or 0 (unswizzled)

  bool operator==(const TmaView&) const = default;
};

// The 4-D view of one attention operand, (batch, seq, head, dim) with dim contiguous. In varlen mode the
// seq axis spans every sequence's rows and the batch axis is a single slice.
struct OperandShape {
  bool is_bf16;
  const void* base;
  int64_t stride_batch;  // elements; ignored in varlen mode
  int64_t stride_seq;
  int64_t stride_head;
  int head_dim;
  int rows;
  int heads;
  int batch;
  bool varlen;
};
TmaView make_operand_view(const OperandShape& shape, int box_rows, int box_cols, int swizzle_bytes);

// Encodes `view` into `map`. Returns false and fills `error` (naming the failing call) on failure.
// Encoded maps are remembered per thread: a training loop calls with the same tensors step after step,
// so most calls copy a remembered map instead of encoding it again.
bool encode_tma_view(const TmaView& view, CUtensorMap* map, std::string& error);

}  // namespace flash4::host
