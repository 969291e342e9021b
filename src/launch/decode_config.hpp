// The decode kernel's tile configuration (src/kernels/sm90/decode, docs/design.md "The decode kernel"),
// shared by the host planner (grid, splits, workspace) and the kernel, so that both count the same blocks.
//
// One CTA of 4 warps handles, for one (sequence, KV head, split), up to 64 packed query rows: row
// r = i * group + h is query row i of the group's query head h (group = heads_q / heads_kv). Each warp owns
// one 16-row mma tile; with fewer than 4 row tiles the warps of one row tile split every key block between
// them (key groups), and their partial results are merged at the end of the CTA. Keys stream through a
// ring of shared-memory stages of 64 keys each.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4::decode {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kTileRows = 16;  // rows of one mma.sync m16n8k16 tile
inline constexpr int kMaxRowTiles = kWarps;
inline constexpr int kMaxRowsPerCta = kTileRows * kMaxRowTiles;
inline constexpr int kBlockKeys = 64;     // keys per pipeline stage
inline constexpr int kChunkBytes = 16;    // one cp.async / vector access
inline constexpr int kElementBytes = 2;   // bf16 and fp16
inline constexpr int kMaxSplits = 128;    // the largest num_splits a call may ask for
// CTAs meant to share an SM: a CTA keeps at most kStages - 1 key blocks in flight (64 KiB at head_dim 128),
// and two of them keep enough bytes in flight to stream an SM's share of the DRAM bandwidth. So the ring's K
// and V stages take at most kStageBudgetBytes, which lets two CTAs fit with Q and the slack the driver keeps
// per CTA (2 x (96 + 16 + 1) KiB <= 228 KiB at head_dim 128), and the split heuristic counts kCtasPerSm
// CTAs per SM.
inline constexpr int kCtasPerSm = 2;
inline constexpr int kStageBudgetBytes = 96 * 1024;

FLASH4_HD constexpr bool supports_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

// Row tiles per CTA for `rows` packed query rows: the fewest that cover them, as a divisor of kWarps (each
// row tile gets kWarps / row_tiles warps).
FLASH4_HD constexpr int row_tiles_for(int rows) {
  return rows <= kTileRows ? 1 : rows <= 2 * kTileRows ? 2 : kMaxRowTiles;
}

template <int kHeadDim>
struct Config {
  static_assert(supports_head_dim(kHeadDim), "decode kernels exist for head_dim 64 and 128");
  static constexpr int kChunksPerRow = kHeadDim * kElementBytes / kChunkBytes;  // 8 or 16
  // The shared-memory swizzle XORs a row's chunk index with row % 8, which must stay inside the row.
  static_assert(kChunksPerRow % 8 == 0, "rows of at least 8 chunks");
  static constexpr int kTileBytes = kBlockKeys * kHeadDim * kElementBytes;  // one K or V stage
  static constexpr int kStages = kStageBudgetBytes / (2 * kTileBytes);       // 6 at D = 64, 3 at D = 128
  static_assert(kStages >= 2, "a ring needs two stages");
  static constexpr int kQBytes = kMaxRowsPerCta * kHeadDim * kElementBytes;
  static constexpr int kRingBytes = kStages * 2 * kTileBytes;
  // The end-of-CTA merge reuses the ring: per warp 16 rows of fp32 O (padded by 8 floats per row so that
  // the float2 stores of a half warp hit distinct banks), then the row max and sum of every warp.
  static constexpr int kMergeRowFloats = kHeadDim + 8;
  static constexpr int kMergeBytes = kWarps * kTileRows * (kMergeRowFloats + 2) * 4;
  static_assert(kMergeBytes <= kRingBytes, "the merge reuses the ring's shared memory");
  static constexpr int kSharedBytes = kRingBytes + kQBytes;
};

}  // namespace flash4::decode
