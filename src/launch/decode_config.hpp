// The decode kernel's tile configuration (src/kernels/sm90/decode, docs/design.md "The decode kernel"),
// shared by the host planner (grid, splits, workspace) and the kernel, so that both count the same blocks.
//
// One CTA of 4 warps handles, for one (sequence, KV head, split), up to 64 packed query rows: row
// r = i * group + h is query row i of the group's query head h (group = heads_q / heads_kv). Each warp owns
// one 16-row mma tile; with fewer than 4 row tiles the warps of one row tile split every key block between
// them (key groups), and their partial results are merged at the end of the CTA. Keys stream through a
// ring of shared-memory stages of 64 keys each.
//
// A kernel has a width (its head dim: 64, 128, 192 or 256) and serves every head_dim and head_dim_v up to
// it: loads zero-fill the columns past the call's true head dims and stores stop at them.
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
inline constexpr int kChunkElements = kChunkBytes / kElementBytes;
inline constexpr int kMaxSplits = 128;    // the largest num_splits a call may ask for
// The shared-memory swizzle XORs a row's 16-byte chunk index with row % 8, which must stay inside the row:
// kernel widths are whole multiples of 8 chunks (64 elements).
inline constexpr int kSwizzleChunks = 8;
inline constexpr int kWidthStep = kSwizzleChunks * kChunkElements;
inline constexpr int kMaxWidth = 256;

// sm_90's shared memory: per SM, the most one CTA may ask for, and what the driver keeps per CTA.
inline constexpr int kSharedPerSm = 228 * 1024;
inline constexpr int kMaxSharedPerCta = 227 * 1024;
inline constexpr int kReservedSharedPerCta = 1024;
inline constexpr int kSharedAlignmentSlack = 128;  // the kernel aligns its dynamic shared memory to 128 bytes

// The K and V ring bytes of one SM. A CTA keeps kStages - 1 key blocks in flight, and an SM's CTAs together
// keep at least 128 KiB in flight, enough to stream an SM's share of the DRAM bandwidth.
inline constexpr int kRingBytesPerSm = 192 * 1024;

FLASH4_HD constexpr bool is_kernel_width(int width) {
  return width >= kWidthStep && width <= kMaxWidth && width % kWidthStep == 0;
}

// CTAs meant to share an SM, which the split heuristic counts as one wave: two up to width 128 (each with
// half the ring budget and its Q tile: 2 x (96 + 16 + 1) KiB <= 228 KiB at 128); wider kernels take the SM
// alone, as two would not fit with their Q tiles (2 x (96 + 24 + 1) KiB > 228 KiB at 192).
FLASH4_HD constexpr int ctas_per_sm(int width) { return width <= 128 ? 2 : 1; }

// Row tiles per CTA for `rows` packed query rows: the fewest that cover them, as a divisor of kWarps (each
// row tile gets kWarps / row_tiles warps).
FLASH4_HD constexpr int row_tiles_for(int rows) {
  return rows <= kTileRows ? 1 : rows <= 2 * kTileRows ? 2 : kMaxRowTiles;
}

template <int kWidth>
struct Config {
  static_assert(is_kernel_width(kWidth), "decode kernels are 64, 128, 192 or 256 columns wide");
  static constexpr int kChunksPerRow = kWidth / kChunkElements;  // 8, 16, 24 or 32
  static_assert(kChunksPerRow % kSwizzleChunks == 0, "rows of whole swizzle atoms");
  static constexpr int kCtasPerSm = ctas_per_sm(kWidth);
  static constexpr int kTileBytes = kBlockKeys * kWidth * kElementBytes;  // one K or V stage
  // 6 at width 64, 3 at 128, 4 at 192, 3 at 256.
  static constexpr int kStages = kRingBytesPerSm / kCtasPerSm / (2 * kTileBytes);
  static_assert(kStages >= 3, "a ring that keeps two blocks in flight");
  static constexpr int kQBytes = kMaxRowsPerCta * kWidth * kElementBytes;
  static constexpr int kRingBytes = kStages * 2 * kTileBytes;
  // Q's mma fragments stay in registers beside O up to width 128; wider kernels hold twice the O
  // accumulators and re-read Q from its shared tile at every k16 step instead (registers would spill).
  static constexpr bool kQInRegisters = kWidth <= 128;
  // The key-block loads' passes issued back to back: each pass's page lookup is a global load whose result
  // (two row offsets) stays live until its copies issue. All of them up to width 128; at wider kernels,
  // beside twice the O accumulators, that many would spill.
  static constexpr int kLoadPasses = kBlockKeys * kChunksPerRow / kThreads;
  static constexpr int kLoadPassesUnrolled = kWidth <= 128 ? kLoadPasses : 4;
  // The k16 steps of S = Q K^T unrolled: all of them (Q's fragments in registers must be indexed by constants),
  // except at 192, where full unrolling spilled with two row tiles and four at a time does not (ptxas picks
  // how far ahead it loads K fragments; at 256 the same four spilled, full unrolling does not).
  static constexpr int kScoreStepsUnrolled = kWidth == 192 ? 4 : kWidth / 16;
  // The end-of-CTA merge reuses the ring: per warp 16 rows of fp32 O (padded by 8 floats per row so that
  // the float2 stores of a half warp hit distinct banks), then the row max and sum of every warp.
  static constexpr int kMergeRowFloats = kWidth + 8;
  static constexpr int kMergeBytes = kWarps * kTileRows * (kMergeRowFloats + 2) * 4;
  static_assert(kMergeBytes <= kRingBytes, "the merge reuses the ring's shared memory");
  static constexpr int kSharedBytes = kRingBytes + kQBytes;
  static constexpr int kLaunchSharedBytes = kSharedBytes + kSharedAlignmentSlack;
  static_assert(kLaunchSharedBytes <= kMaxSharedPerCta, "one CTA's shared memory");
  static_assert(kCtasPerSm * (kLaunchSharedBytes + kReservedSharedPerCta) <= kSharedPerSm,
                "kCtasPerSm CTAs share an SM");
};

}  // namespace flash4::decode
