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
  std::size_t dq_accum_bytes = 0;
  std::size_t semaphore_bytes = 0;
  std::size_t total = 0;
};

struct BwdPlan {
  BwdTileConfig tile;
  int m_blocks_max = 0;  // query blocks of the longest sequence
  int n_blocks_max = 0;  // key blocks of the longest sequence (rounded up to whole clusters)
  int num_ctas = 0;      // one CTA per (key block, sequence, kv head)
  long long rows_per_head = 0;
  int dq_copies = 1;     // of the dQ accumulator: bwd_dq_copies (more than one only in deterministic mode)
  int window_left = -1;  // effective window after folding causal in
  int window_right = -1;
  BwdWorkspaceLayout workspace;
};

BwdPlan plan_backward(const flash4_bwd_params& params);

}  // namespace flash4::host
