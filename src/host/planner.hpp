// The forward planner: from validated params and device properties to the launch shape (tile config,
// persistent tile order, grid size, scheduling mode). Pure host arithmetic, unit-tested without a GPU.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "host/device_info.hpp"
#include "kernels/common/tile_order.hpp"
#include "launch/fwd_tile_config.hpp"

namespace flash4::host {

// The forward's workspace: its tile counter, in a block of the alignment the C ABI promises callers.
inline constexpr std::size_t kFwdWorkspaceBytes = 256;

struct FwdPlan {
  FwdTileConfig tile;
  TileOrder order;
  int num_ctas = 0;      // persistent grid: min(tiles, SMs)
  bool dynamic = false;  // tiles claimed from a counter in the workspace (fwd_params.hpp); only when the
                         // tiles differ in cost and outnumber the CTAs
  int window_left = -1;  // effective window after folding causal in
  int window_right = -1;
};

// True when the forward's tiles differ in cost (causal, a window, varlen sequences of different lengths,
// or seqused): a static walk then leaves SMs idle at the end, so the kernel claims tiles dynamically from a
// counter in the workspace. Tiles of equal cost take the static walk, which needs no workspace. The
// workspace is sized by this rule alone (the device is not known then); the plan uses the counter only
// where there are more tiles than CTAs.
bool forward_schedules_dynamically(const flash4_fwd_params& params);

// kernel_head_dim: the head dim of the kernel that serves the call (host/kernel_choice.hpp); 0 takes
// params.head_dim, for params whose head dims are a kernel's own.
FwdPlan plan_forward(const flash4_fwd_params& params, const DeviceInfo& device, int kernel_head_dim = 0);

}  // namespace flash4::host
