// The forward planner: from validated params and device properties to the launch shape (tile config,
// persistent tile order, grid size). Pure host arithmetic, unit-tested without a GPU.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "host/device_info.hpp"
#include "kernels/common/fwd_tile_config.hpp"
#include "kernels/common/tile_order.hpp"

namespace flash4::host {

struct FwdPlan {
  FwdTileConfig tile;
  TileOrder order;
  int num_ctas = 0;     // persistent grid: min(tiles, SMs)
  int window_left = -1;  // effective window after folding causal in
  int window_right = -1;
};

FwdPlan plan_forward(const flash4_fwd_params& params, const DeviceInfo& device);

}  // namespace flash4::host
