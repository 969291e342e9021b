// What flash4-bench does on a machine without a CUDA device.
#pragma once

#include "cli.hpp"

namespace flash4::bench {

// Runs the naive same-precision forward against the fp64 one on a small problem of the options' dtype, head
// dim, mask and softcap, and prints their difference: the baseline of the tolerance rule. Returns the exit status.
int run_cpu_demo(const Options& options);

// Without a device: with --json, an error on stderr and kExitNoDevice (a caller that asked for JSON must not take
// the demo's text, or nothing, for a measurement); otherwise a note and the CPU demo.
int run_without_device(const Options& options);

}  // namespace flash4::bench
