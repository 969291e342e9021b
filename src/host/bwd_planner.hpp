// The backward planner: from validated params to the launch shape (grid, effective window) and the
// layout of the device workspace the backward needs. Pure host arithmetic, unit-tested without a GPU.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "kernels/common/bwd_tile_config.hpp"

namespace flash4::host {

// Byte offsets of the workspace arrays (each 256-byte aligned) and the total.
struct BwdWorkspaceLayout {
  std::size_t dq_accum = 0;    // fp32 [dq_copies][heads_q][rows_per_head][head_dim], blocks in staging order
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
  int n_blocks_max = 0;  // key blocks of the longest sequence (rounded up to whole clusters)
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
BwdPlan plan_backward(const flash4_bwd_params& params);

// The grid. Persistent: min(tiles, the CTAs that fit at once), one CTA per SM (the kernel's shared memory
// allows no second), a whole number of clusters; the CTAs claim the tiles in order (kernel.cuh), so tiles
// of different lengths (causal, window, varlen) balance across them. One CTA per tile for the kernels
// that are not persistent (bwd_persistent_kernel) and in a FLASH4_BWD_PERSISTENT=OFF build (for A/B
// runs). The launcher may lower the grid further for paired CTAs (clusters a GPC cannot host).
//
// H200, bf16, tokens 16K = B x N, one run of 6451bbf with two repeats (tools/gpu-ab.sh grid): with the
// late claim (bwd_tile_handout.hpp) the persistent grid is within -1.2% .. +0.5% of the best other
// variant non-causal and ahead causal, +1% to +4% over the former policy (persistent only up to 1K
// masked rows, early claim) from 2K to 16K tokens (D = 128 16K causal 468.9 vs 450.7 TFLOPS, D = 64
// 458.5 vs 447.6). With the early claim, long causal problems had lost on it (D = 128 4K: -12.5% in an
// earlier run against one CTA per tile).
int bwd_grid_ctas(const BwdPlan& plan, int sm_count, bool softcap);
bool bwd_persistent_grid();  // false in a FLASH4_BWD_PERSISTENT=OFF build

}  // namespace flash4::host
