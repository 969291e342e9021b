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
  uint32_t box_cols;                     // innermost box width (swizzle width / element size)
  uint32_t box_rows;
  int swizzle_bytes;                     // 64 or 128
};

// Encodes `view` into `map`. Returns false and fills `error` (naming the failing call) on failure.
bool encode_tma_view(const TmaView& view, CUtensorMap* map, std::string& error);

}  // namespace flash4::host
