// The backward planner: from validated params to the launch shape (grid, effective window) and the
// layout of the device workspace the backward needs. Pure host arithmetic, unit-tested without a GPU.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "kernels/common/bwd_tile_config.hpp"

namespace flash4::host {

// Byte offsets of the workspace arrays (each 256-byte aligned) and the total.
struct BwdWorkspaceLayout {
  std::size_t dq_accum = 0;    // fp32 [dq_copies][heads_q][rows_per_head][head_dim]
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
  bool uniform_tiles = false;  // every tile runs the same steps: fixed length, no causal mask or window
  int longest_query_rows = 0;  // seqlen_q, or max_seqlen_q in varlen mode
  long long rows_per_head = 0;
  int dq_copies = 1;     // of the dQ accumulator: bwd_dq_copies (more than one only in deterministic mode)
  int window_left = -1;  // effective window after folding causal in
  int window_right = -1;
  BwdWorkspaceLayout workspace;
};

BwdPlan plan_backward(const flash4_bwd_params& params);

// The grid. Persistent: min(tiles, the CTAs that fit at once), one CTA per SM (the kernel's shared memory
// allows no second), a whole number of clusters; the CTAs claim the tiles in order (kernel.cuh). Used for
// uniform tiles, and for tiles of different lengths (causal, window, varlen) up to
// kBwdPersistentMaskedRowsMax query rows; longer masked problems get one CTA per tile (the kernel then
// runs one tile per CTA), as do the kernels that are not persistent (bwd_persistent_kernel) and a
// FLASH4_BWD_PERSISTENT=OFF build (for A/B runs). The launcher may lower the grid further for paired CTAs
// (clusters a GPC cannot host).
//
// Why the limit (H200, bf16, causal, one run: bench/results/h200-2026-12-03-bwd-persistent-ab.md), the
// persistent grid against one CTA per tile: 512 tokens +7.7% at D = 64 (139.8 vs 129.8 TFLOPS) and +3.5%
// at D = 128, 1K +5.3% / +0.7%, 2K +2.5% / -1.5%, 4K -1.3% / -12.5%, 16K -3.2% at D = 64. Short tiles gain
// from sharing one CTA start and end among several. Why long ones lose is not measured; the suspect is
// the early claim: that scheduler claimed two tiles ahead of the one running, so the last long tiles could
// wait behind busy CTAs while other SMs idled. It now claims one ahead (FLASH4_BWD_LATE_CLAIM: later
// still); neither has been measured, so the limit stands until tools/gpu-ab.sh grid says otherwise.
// CMake FLASH4_BWD_PERSISTENT_MASKED_ROWS_MAX moves the limit for A/B runs (tools/gpu-ab.sh grid).
#ifndef FLASH4_BWD_PERSISTENT_MASKED_ROWS_MAX
#define FLASH4_BWD_PERSISTENT_MASKED_ROWS_MAX 1024
#endif
inline constexpr int kBwdPersistentMaskedRowsMax = FLASH4_BWD_PERSISTENT_MASKED_ROWS_MAX;
int bwd_grid_ctas(const BwdPlan& plan, int sm_count, bool softcap);
bool bwd_persistent_grid();  // false in a FLASH4_BWD_PERSISTENT=OFF build

}  // namespace flash4::host
