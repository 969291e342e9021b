// The host plan of a flash4_kvcache call: how the packed query rows are tiled, how many splits the key
// range gets (the split-KV heuristic), the grid, and the workspace of the split partials. Pure host code,
// unit-tested without a GPU (tests/cpu/test_kvcache_plan.cpp); the kernels count blocks the same way
// (launch/decode_config.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "flash4/flash4_kvcache.h"

namespace flash4::host {

struct KvcachePlan {
  int width = 0;        // the decode kernel's width (launch/decode_config.hpp): >= head_dim and head_dim_v
  int group = 1;        // heads_q / heads_kv
  int rows = 0;         // packed query rows per (sequence, KV head): seqlen_q * group
  int row_tiles = 1;    // 16-row tiles per CTA (1, 2 or 4; selects the kernel instantiation)
  int row_blocks = 1;   // CTAs along the packed rows
  int capacity = 0;     // keys a sequence can hold
  int key_blocks = 0;   // 64-key blocks of the capacity
  int splits = 1;       // pieces of every sequence's key range
  std::int64_t ctas = 0;  // the main grid: row_blocks * splits * heads_kv * batch

  // Workspace (splits > 1): fp32 partial O (head_dim_v columns), then fp32 partial LSE, each at a 256-byte
  // aligned offset.
  std::size_t partial_o_bytes = 0;
  std::size_t partial_lse_offset = 0;
  std::size_t workspace_bytes = 0;
};

// Keys a sequence can hold: cache_seqlen, or max_pages_per_seq * page_size when paged (validated params).
std::int64_t kvcache_capacity(const flash4_kvcache_params& params);

// Whether the plan depends on the device (num_splits = 0 asks the heuristic, which reads the SM count).
bool kvcache_plan_needs_device(const flash4_kvcache_params& params);

// The split-KV heuristic. ctas_per_split: CTAs of the unsplit grid; key_blocks: 64-key blocks of the
// capacity. A wave is sm_count * ctas_per_sm CTAs (the CTAs that stream at once: decode::ctas_per_sm of the
// kernel's width). Splitting pays only while the unsplit grid leaves part of a wave idle: 1 when it fills at
// least 80% of one or the keys are too few to share. Otherwise the fewest splits whose grid fills its last
// wave within 85% as well as the best choice does, with at least kMinBlocksPerSplit blocks per split and at
// most kMaxSplits splits (and one wave).
inline constexpr int kMinBlocksPerSplit = 4;
int choose_splits(std::int64_t ctas_per_split, int key_blocks, int sm_count, int ctas_per_sm);

// The plan for validated params on the decode kernel of `width` (one of decode::is_kernel_width, at least the
// larger head dim: host/kernel_choice.hpp picks it). sm_count is read only when num_splits is 0.
KvcachePlan plan_kvcache(const flash4_kvcache_params& params, int width, int sm_count);

}  // namespace flash4::host
