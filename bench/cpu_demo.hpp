// What flash4-bench does on a machine without a CUDA device: a small problem through the CPU reference.
#pragma once

#include "cases.hpp"

namespace flash4::bench {

// Runs the naive same-precision forward against the fp64 one on a small problem of the options' dtype, head
// dim and mask, and prints their difference: the baseline of the tolerance rule. Returns the exit status.
int run_cpu_demo(const Options& options);

}  // namespace flash4::bench
