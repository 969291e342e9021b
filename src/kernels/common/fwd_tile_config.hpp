// The forward kernel's tile table: one constexpr function from head dim to tile shape, with the shared
// memory and register budgets checked next to it. Host (planner) and device (kernel layout) read the
// same table.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

inline constexpr int kSmemBytesPerBlockMax = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)
inline constexpr int kSmemAlignment = 1024;           // 128-byte swizzle atoms repeat every 8 rows x 128 B
inline constexpr int kSmemBarrierBytes = 256;         // room for the pipeline's mbarriers
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kElementBytes = 2;               // bf16 and fp16

struct FwdTileConfig {
  int head_dim;
  int block_m;             // query rows per CTA tile: 64 per consumer warpgroup
  int block_n;             // keys per pipeline stage
  int stages;              // K/V stages in flight
  int consumer_warpgroups;
  int swizzle_bytes;       // TMA / wgmma swizzle width: 128 when head_dim is a multiple of 64, else 64
  // n8 column blocks (of each 8) whose exp2 runs on the FMA polynomial. 0 everywhere for now: the A/B
  // (bench/results/h200-2026-12-02-fwd-ab.json, 16K tokens) measured 1/8 at 1.6-2% slower than 0 at
  // D = 64 and 128, causal and not: in this kernel the FMA pipe is not idle while MUFU works.
  int soft_exp2_eighths;

  FLASH4_HD constexpr int box_cols() const { return swizzle_bytes / kElementBytes; }
  FLASH4_HD constexpr int col_blocks() const { return head_dim / box_cols(); }
  FLASH4_HD constexpr int q_bytes() const { return block_m * head_dim * kElementBytes; }
  FLASH4_HD constexpr int kv_stage_bytes() const { return block_n * head_dim * kElementBytes; }
  FLASH4_HD constexpr int mainloop_smem_bytes() const {
    return kSmemAlignment + q_bytes() + 2 * stages * kv_stage_bytes() + kSmemBarrierBytes;
  }
  // The epilogue stages O (block_m x head_dim, the size of Q) in shared memory for a TMA store where it
  // fits beside the main loop's buffers: up to head dim 128. At 192 and 256 Q and the K/V ring already
  // take 192 and 224 KiB, and the output is stored from registers.
  FLASH4_HD constexpr int o_bytes() const { return q_bytes(); }
  FLASH4_HD constexpr bool stages_output() const { return mainloop_smem_bytes() + o_bytes() <= kSmemBytesPerBlockMax; }
  FLASH4_HD constexpr int smem_bytes() const { return mainloop_smem_bytes() + (stages_output() ? o_bytes() : 0); }
  FLASH4_HD constexpr int threads() const { return (1 + consumer_warpgroups) * kWarpgroupThreads; }
};

// Two consumer warpgroups of 64 rows each (the ping-pong pair) for every head dim; block_n shrinks as
// the head dim grows so that Q plus two K/V stages fit in 227 KiB and S + O fit the 240-register budget.
FLASH4_HD constexpr FwdTileConfig fwd_tile_config(int head_dim) {
  switch (head_dim) {
    // 128 keys: S is 64 registers per thread, O 32; Q 16 KiB + 2 x 32 KiB of K/V.
    case 64: return FwdTileConfig{64, 128, 128, 2, 2, 128, 0};
    // 96 is not a multiple of 64: three 32-column boxes with 64-byte swizzle.
    case 96: return FwdTileConfig{96, 128, 128, 2, 2, 64, 0};
    // 128 x 128: Q 32 KiB + 2 x 64 KiB = 160 KiB; S 64 + O 64 registers.
    case 128: return FwdTileConfig{128, 128, 128, 2, 2, 128, 0};
    // 96 keys: Q 48 KiB + 2 x 72 KiB = 192 KiB; O is 96 registers.
    case 192: return FwdTileConfig{192, 128, 96, 2, 2, 128, 0};
    // 80 keys: Q 64 KiB + 2 x 80 KiB = 224 KiB, the most that fits; O is 128 registers.
    case 256: return FwdTileConfig{256, 128, 80, 2, 2, 128, 0};
    default: return FwdTileConfig{0, 0, 0, 0, 0, 0, 0};
  }
}

#define FLASH4_CHECK_TILE(D)                                                                   \
  static_assert(fwd_tile_config(D).smem_bytes() <= kSmemBytesPerBlockMax, "smem over budget"); \
  static_assert(fwd_tile_config(D).head_dim % fwd_tile_config(D).box_cols() == 0, "head dim not a whole number of boxes");
static_assert(fwd_tile_config(128).stages_output(), "D = 128 is meant to store O with TMA");
FLASH4_CHECK_TILE(64)
FLASH4_CHECK_TILE(96)
FLASH4_CHECK_TILE(128)
FLASH4_CHECK_TILE(192)
FLASH4_CHECK_TILE(256)
#undef FLASH4_CHECK_TILE

}  // namespace flash4
