// The forward kernel's tile table: one constexpr function from head dim to tile shape and tuning knobs,
// with the shared-memory and register budgets checked next to it. Host (planner) and device (kernel
// layout) read the same table.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

inline constexpr int kSmemBytesPerBlockMax = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)
inline constexpr int kSmemAlignment = 1024;           // 128-byte swizzle atoms repeat every 8 rows x 128 B
inline constexpr int kSmemBarrierBytes = 512;         // room for the pipeline's mbarriers and tile slots
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kElementBytes = 2;               // bf16 and fp16
inline constexpr int kRegisterFileSize = 65536;       // 32-bit registers per SM
inline constexpr int kMaxRegistersPerThread = 255;
inline constexpr int kRowsPerConsumerWarpgroup = 64;  // the M of one wgmma
// The producer warpgroup only issues TMA loads and claims tiles: setmaxnreg gives the rest of its
// registers to the consumers.
inline constexpr int kFwdProducerRegisters = 32;

struct FwdTileConfig {
  int head_dim;
  int block_n;             // keys per pipeline stage
  int stages;              // K/V stages in flight
  int consumer_warpgroups; // each owns 64 query rows of the tile
  int swizzle_bytes;       // TMA / wgmma swizzle width: 128 when head_dim is a multiple of 64, else 64
  // Tuning knobs; docs/experiments.md has the A/B behind each value.
  // Consumer warpgroups take turns issuing their wgmmas (a ring of named barriers), so one warpgroup's
  // softmax runs under the others' products. Pays where the softmax is a large share of a step (small
  // head dims); at 192 and 256 the products dominate and the turns only delay issue.
  bool ping_pong;
  // n8 column blocks (of each 8) whose exp2 runs on the FMA polynomial instead of MUFU.
  int soft_exp2_eighths;

  FLASH4_HD constexpr int block_m() const { return consumer_warpgroups * kRowsPerConsumerWarpgroup; }
  FLASH4_HD constexpr int box_cols() const { return swizzle_bytes / kElementBytes; }
  FLASH4_HD constexpr int col_blocks() const { return head_dim / box_cols(); }
  FLASH4_HD constexpr int q_bytes() const { return block_m() * head_dim * kElementBytes; }
  FLASH4_HD constexpr int kv_stage_bytes() const { return block_n * head_dim * kElementBytes; }
  FLASH4_HD constexpr int mainloop_smem_bytes() const {
    return kSmemAlignment + q_bytes() + 2 * stages * kv_stage_bytes() + kSmemBarrierBytes;
  }
  // The epilogue stages O (block_m x head_dim, the size of Q) in shared memory for a TMA store where it
  // fits beside the main loop's buffers; otherwise O is stored from registers.
  FLASH4_HD constexpr int o_bytes() const { return q_bytes(); }
  FLASH4_HD constexpr bool stages_output() const { return mainloop_smem_bytes() + o_bytes() <= kSmemBytesPerBlockMax; }
  FLASH4_HD constexpr int smem_bytes() const { return mainloop_smem_bytes() + (stages_output() ? o_bytes() : 0); }
  FLASH4_HD constexpr int threads() const { return (1 + consumer_warpgroups) * kWarpgroupThreads; }
  // Registers per thread at launch (__launch_bounds__(threads, 1)): the file split evenly, in the
  // allocation granule of 8. setmaxnreg can only redistribute this pool: a split that asks for more
  // makes setmaxnreg.inc wait forever.
  FLASH4_HD constexpr int registers_at_launch() const { return kRegisterFileSize / threads() / 8 * 8; }
  FLASH4_HD constexpr int consumer_registers() const {
    const int pool = registers_at_launch() * threads() - kFwdProducerRegisters * kWarpgroupThreads;
    const int even = pool / (consumer_warpgroups * kWarpgroupThreads) / 8 * 8;
    return even < 240 ? even : 240;  // setmaxnreg's largest value that is a multiple of 8 below 255
  }
};

// Why each row: the softmax of a 64 x block_n tile costs block_n exponentials per row on MUFU (16 per
// clock per SM) whatever the head dim, while the products scale with the head dim. Small head dims
// therefore need more warpgroups to hide the softmax; large ones need every register for O.
FLASH4_HD constexpr FwdTileConfig fwd_tile_config(int head_dim) {
  switch (head_dim) {
    // Three consumer warpgroups on 192 rows: at D = 64 a warpgroup's exponentials take as long as its
    // products, so each softmax needs two other warpgroups' products to hide under. 160 registers: S 64,
    // O 32, P 32. Q 24 KiB + 2 x 32 KiB of K/V + 24 KiB of O staging.
    case 64: return FwdTileConfig{64, 128, 2, 3, 128, true, 0};
    // 96 is not a multiple of 64: three 32-column boxes with 64-byte swizzle. S 64 + O 48 + P 32 leave
    // no room under a third warpgroup's 160 registers.
    case 96: return FwdTileConfig{96, 128, 2, 2, 64, true, 0};
    // 128 x 128: Q 32 KiB + 2 x 64 KiB = 160 KiB; S 64 + O 64 registers.
    case 128: return FwdTileConfig{128, 128, 2, 2, 128, true, 0};
    // 112 keys: Q 48 KiB + 2 x 84 KiB = 216 KiB; S 56 + O 96 + P 28 registers.
    case 192: return FwdTileConfig{192, 112, 2, 2, 128, false, 0};
    // 80 keys: Q 64 KiB + 2 x 80 KiB = 224 KiB, the most that fits; O is 128 registers.
    case 256: return FwdTileConfig{256, 80, 2, 2, 128, false, 0};
    default: return FwdTileConfig{0, 0, 0, 0, 0, false, 0};
  }
}

#define FLASH4_CHECK_TILE(D)                                                                                      \
  static_assert(fwd_tile_config(D).smem_bytes() <= kSmemBytesPerBlockMax, "smem over budget");                    \
  static_assert(fwd_tile_config(D).head_dim % fwd_tile_config(D).box_cols() == 0, "head dim not whole boxes");     \
  static_assert(fwd_tile_config(D).block_n % 16 == 0 && fwd_tile_config(D).block_n <= 256, "wgmma N out of range"); \
  static_assert(fwd_tile_config(D).consumer_registers() >= 160, "consumer register budget too small");
FLASH4_CHECK_TILE(64)
FLASH4_CHECK_TILE(96)
FLASH4_CHECK_TILE(128)
FLASH4_CHECK_TILE(192)
FLASH4_CHECK_TILE(256)
#undef FLASH4_CHECK_TILE
static_assert(fwd_tile_config(128).stages_output(), "D = 128 is meant to store O with TMA");

}  // namespace flash4
