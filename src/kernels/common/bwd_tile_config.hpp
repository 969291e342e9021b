// The backward kernel's tile shape, shared-memory layout and workspace layout. Host (planner, workspace
// size) and device (kernel) read the same constants.
//
// One CTA owns block_n = 128 keys of one (batch, kv head): each of its two consumer warpgroups holds the
// dK and dV accumulators of 64 keys in registers for the whole loop over query blocks of block_m = 64
// rows (and, under GQA, over every query head of the group, so dK/dV are summed in registers).
#pragma once

#include "kernels/common/fwd_tile_config.hpp"
#include "kernels/common/host_device.hpp"

namespace flash4 {

struct BwdTileConfig {
  int head_dim;
  int block_m = 64;   // query rows per step: the N of S^T = K Q^T, kept at 64 so S^T and dP^T are 32 registers each
  int block_n = 128;  // keys per CTA: 64 per consumer warpgroup (the wgmma M)
  int stages = 2;     // Q / dO / LSE / D stages in flight
  int consumer_warpgroups = 2;
  // 128-byte swizzle: a 64-column box of a 16-bit tile is exactly one swizzle row.
  int swizzle_bytes = 128;

  FLASH4_HD constexpr int box_cols() const { return swizzle_bytes / kElementBytes; }
  FLASH4_HD constexpr int col_blocks() const { return head_dim / box_cols(); }
  FLASH4_HD constexpr int keys_per_warpgroup() const { return block_n / consumer_warpgroups; }
  // dQ = dS K is split by columns: each warpgroup computes head_dim / 2 of them over all block_n keys.
  FLASH4_HD constexpr int dq_cols_per_warpgroup() const { return head_dim / consumer_warpgroups; }

  FLASH4_HD constexpr int kv_bytes() const { return block_n * head_dim * kElementBytes; }      // K or V
  FLASH4_HD constexpr int q_bytes() const { return block_m * head_dim * kElementBytes; }       // Q or dO
  FLASH4_HD constexpr int row_stat_bytes() const { return block_m * int(sizeof(float)); }      // LSE or D
  FLASH4_HD constexpr int stage_bytes() const { return 2 * q_bytes() + 2 * row_stat_bytes(); }  // TMA bytes
  FLASH4_HD constexpr int stage_stride() const { return round_up_to_alignment(stage_bytes()); }
  FLASH4_HD constexpr int ds_bytes() const { return block_n * block_m * kElementBytes; }
  // fp32 dQ staging rows, padded by 8 floats: the float2 stores of a half warp (4 rows x 4 lanes) then hit
  // 32 distinct banks.
  FLASH4_HD constexpr int dq_row_floats() const { return head_dim + 8; }
  FLASH4_HD constexpr int dq_stage_bytes() const { return block_m * dq_row_floats() * int(sizeof(float)); }

  // Layout (offsets from the 1 KiB-aligned base): K, V, the Q/dO/LSE/D stages, two dS buffers, dQ staging,
  // barriers. Every tile that wgmma or TMA reads with a swizzle starts on a 1 KiB boundary.
  FLASH4_HD constexpr int k_offset() const { return 0; }
  FLASH4_HD constexpr int v_offset() const { return k_offset() + kv_bytes(); }
  FLASH4_HD constexpr int stage_offset(int stage) const { return v_offset() + kv_bytes() + stage * stage_stride(); }
  FLASH4_HD constexpr int q_offset(int stage) const { return stage_offset(stage); }
  FLASH4_HD constexpr int do_offset(int stage) const { return stage_offset(stage) + q_bytes(); }
  FLASH4_HD constexpr int lse_offset(int stage) const { return stage_offset(stage) + 2 * q_bytes(); }
  FLASH4_HD constexpr int dsum_offset(int stage) const { return lse_offset(stage) + row_stat_bytes(); }
  FLASH4_HD constexpr int ds_offset(int buffer) const {
    return round_up_to_alignment(stage_offset(stages)) + buffer * ds_bytes();
  }
  FLASH4_HD constexpr int dq_offset() const { return ds_offset(2); }
  FLASH4_HD constexpr int barrier_offset() const { return dq_offset() + dq_stage_bytes(); }
  FLASH4_HD constexpr int smem_bytes() const { return kSmemAlignment + barrier_offset() + kSmemBarrierBytes; }
  FLASH4_HD constexpr int threads() const { return (1 + consumer_warpgroups) * kWarpgroupThreads; }

  FLASH4_HD static constexpr int round_up_to_alignment(int bytes) {
    return (bytes + kSmemAlignment - 1) / kSmemAlignment * kSmemAlignment;
  }
};

// Head dims with a backward kernel: the dK + dV accumulators of 64 keys take head_dim registers per
// thread, which leaves room for S^T, dP^T and the dQ slice only up to 128. 96 is left out because its
// 64-byte swizzle does not split dQ's columns evenly between the two warpgroups.
FLASH4_HD constexpr bool bwd_supports_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

FLASH4_HD constexpr BwdTileConfig bwd_tile_config(int head_dim) {
  BwdTileConfig cfg{};
  cfg.head_dim = head_dim;
  return cfg;
}

static_assert(bwd_tile_config(128).smem_bytes() <= kSmemBytesPerBlockMax, "backward smem over budget at D=128");
static_assert(bwd_tile_config(64).q_bytes() % kSmemAlignment == 0, "dO must start on a swizzle atom");
static_assert(bwd_tile_config(64).dq_row_floats() * 4 % 16 == 0, "bulk reductions need 16-byte aligned staging rows");

// Workspace rows: the per-head fp32 arrays (dQ accumulator, LSE in log2 units, D = rowsum(dO * O)) give
// every sequence block_m padding rows after its last, so that a query block never needs a bounds check,
// and start every sequence on a multiple of 4 rows, so that a block's 64 LSE / D floats are a 16-byte
// aligned bulk copy:
// fixed length: batch b, row i -> b * round_up(seqlen_q, block_m) + i;
// varlen: sequence b, row i -> round_up(cu_seqlens_q[b], 4) + b * (block_m + 4) + i. Sequence b then ends
// (padding included) at most at round_up(cu_seqlens_q[b + 1], 4) + b * (block_m + 4) + block_m + 3, before
// sequence b + 1 starts.
struct BwdWorkspaceRows {
  static constexpr int kRowAlignment = 4;  // 16 bytes of fp32
  int block_m;
  int seqlen_q;      // fixed length only
  bool varlen;

  FLASH4_HD static long long align_rows(long long rows) {
    return (rows + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
  }
  FLASH4_HD int padded_seqlen() const { return (seqlen_q + block_m - 1) / block_m * block_m; }
  FLASH4_HD long long first_row(int batch, const int* cu_seqlens_q) const {
    return varlen ? align_rows(cu_seqlens_q[batch]) + (long long)batch * (block_m + kRowAlignment)
                  : (long long)batch * padded_seqlen();
  }
  // Rows per head (a multiple of 4, so every head's rows start 16-byte aligned too).
  FLASH4_HD long long rows_per_head(int batch, int total_q) const {
    return varlen ? align_rows(total_q) + (long long)batch * (block_m + kRowAlignment)
                  : (long long)batch * padded_seqlen();
  }
};

}  // namespace flash4
