// The backward planner: from validated params to the launch shape (grid, effective window) and the
// layout of the device workspace the backward needs. Pure host arithmetic, unit-tested without a GPU.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "launch/bwd_tile_config.hpp"

namespace flash4::host {

// Byte offsets of the workspace arrays (each 256-byte aligned) and the total.
struct BwdWorkspaceLayout {
  std::size_t dq_accum = 0;    // fp32 [dq_copies][heads_q][rows_per_head][kernel head dim], blocks in staging order
  std::size_t lse_log2 = 0;    // fp32 [heads_q][rows_per_head]
  std::size_t dsum = 0;        // fp32 [heads_q][rows_per_head]
  std::size_t semaphores = 0;  // int32 [dq_copies][heads_q][batch][m_blocks_max]
  std::size_t tile_counter = 0;  // int32: the persistent grid's tiles claimed (zeroed by the preprocess)
  std::size_t dq_accum_bytes = 0;
  std::size_t semaphore_bytes = 0;
  std::size_t total = 0;
};

struct BwdPlan {
  BwdTileConfig tile;
  int m_blocks_max = 0;  // query blocks of the longest sequence
  int n_blocks_max = 0;  // key blocks of the longest sequence
  int num_tiles = 0;     // one per (key block, sequence, kv head)
  long long rows_per_head = 0;
  int dq_copies = 1;     // of the dQ accumulator: bwd_dq_copies (more than one only in deterministic mode)
  int window_left = -1;  // effective window after folding causal in
  int window_right = -1;
  BwdWorkspaceLayout workspace;
};

// For validated, canonical params (api/validate.hpp). Every count is computed in 64 bits and checked to fit
// the int the kernels take; a count past that (which validation's size limits exclude) throws
// std::length_error, which the C ABI reports as FLASH4_ERROR_INTERNAL.
// kernel_head_dim: the head dim of the kernel that serves the call (host/kernel_choice.hpp), which sizes the
// tiles and the dQ accumulator's rows; 0 takes params.head_dim, for params whose head dims are a kernel's own.
BwdPlan plan_backward(const flash4_bwd_params& params, int kernel_head_dim = 0);

// The grid. Persistent: min(tiles, the CTAs that fit at once), one CTA per SM (the kernel's shared memory
// allows no second); the CTAs claim the tiles in order (kernel.cuh), so tiles of different lengths
// (causal, window, varlen) balance across them, with no launch per tile (docs/experiments.md,
// "persistent grid"). One CTA per tile for the kernels that are not persistent (bwd_persistent_kernel).
int bwd_grid_ctas(const BwdPlan& plan, int sm_count, bool softcap);

}  // namespace flash4::host
