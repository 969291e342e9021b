// The forward planner: from validated params and device properties to the launch shape (tile config,
// persistent tile order, grid size, scheduling mode). Pure host arithmetic, unit-tested without a GPU.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "host/device_info.hpp"
#include "kernels/common/tile_order.hpp"
#include "launch/fwd_tile_config.hpp"

namespace flash4::host {

// The forward's workspace: its tile counter, in a block of the alignment the C ABI promises callers. Varlen
// adds the prepare kernel's compact tile space (kernels/common/varlen_tiles.hpp) after it.
inline constexpr std::size_t kFwdWorkspaceBytes = 256;

// Where the varlen tile space lies in the workspace. Sized from the params alone (flash4_fwd_workspace_size
// knows no device and no kernel): blocks of kRowsPerConsumerWarpgroup rows, the smallest block_m of the
// tile table, bound every kernel's block counts.
struct VarlenWorkspace {
  std::size_t num_tiles = 0;  // the listed tile count's int, in the counter's block
  std::size_t bins = 0;
  int num_bins = 0;  // one per block count a sequence can have: 0 ... ceil(max_seqlen_q / 64)
  std::size_t units = 0;
  int unit_capacity = 0;  // sum over sequences of ceil(rows / 64): at most total_q / 64 + batch
  std::size_t bytes = 0;
};

// For canonical varlen params (max_seqlen_q no larger than total_q).
VarlenWorkspace varlen_workspace(const flash4_fwd_params& params);

struct FwdPlan {
  FwdTileConfig tile;
  TileOrder order;
  int num_ctas = 0;      // persistent grid: min(tiles, SMs)
  bool dynamic = false;  // tiles claimed from a counter in the workspace (fwd_params.hpp); only when the
                         // tiles differ in cost and outnumber the CTAs
  int l2_kv_rows = 0;    // varlen: key rows whose K and V (one head) fit the L2 share of a head group
  int window_left = -1;  // effective window after folding causal in
  int window_right = -1;
};

// True when the forward's tiles differ in cost (causal, a window, varlen sequences of different lengths,
// or seqused): a static walk then leaves SMs idle at the end, so the kernel claims tiles dynamically from a
// counter in the workspace. Tiles of equal cost take the static walk, which needs no workspace. The
// workspace is sized by this rule alone, plus the varlen tile space (the device is not known then); the
// plan uses the counter only where there are more tiles than CTAs.
bool forward_schedules_dynamically(const flash4_fwd_params& params);

// kernel_head_dim: the head dim of the kernel that serves the call (host/kernel_choice.hpp); 0 takes
// params.head_dim, for params whose head dims are a kernel's own.
FwdPlan plan_forward(const flash4_fwd_params& params, const DeviceInfo& device, int kernel_head_dim = 0);

}  // namespace flash4::host
