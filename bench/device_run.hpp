// flash4-bench on a CUDA device: inputs, the timed launches and --verify.
#pragma once

#include "cli.hpp"

namespace flash4::bench {

// Runs every case the options describe and prints a line (or JSON object) per case on stdout, with a progress
// line per case on stderr when there are several. Returns the exit status; throws CudaError or Flash4Error (see
// cuda_util.hpp) when a call fails.
int run_on_device(const Options& options);

}  // namespace flash4::bench
