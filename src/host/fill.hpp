// The fills an empty problem writes instead of running a kernel (host/empty_problem.hpp decides which tensors
// get which value), and their launcher. Plain C++: the fill kernels (src/kernels/util/fill.cu) and this
// launcher (src/host/dispatch/fill.cpp) are compiled into the shared library only.
#pragma once

#include <vector>

#include "flash4/flash4.h"
#include "launch/fill.hpp"
#include "launch/launch_result.hpp"

namespace flash4::host {

using flash4::FloatFill;
using flash4::ZeroFill;

struct FillPlan {
  std::vector<ZeroFill> zeros;
  std::vector<FloatFill> floats;

  bool empty() const { return zeros.empty() && floats.empty(); }
};

// Enqueues every fill of the plan on `stream`; never synchronizes. An empty plan makes no CUDA call at all
// (so it succeeds without a device); otherwise FLASH4_ERROR_NO_DEVICE without a Hopper device, and
// FLASH4_ERROR_CUDA, naming the tensor, when a launch fails.
LaunchResult launch_fills(const FillPlan& plan, flash4_stream_t stream);

}  // namespace flash4::host
