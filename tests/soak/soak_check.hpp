// One soak problem: the GPU part (flash4_fwd and flash4_bwd through the C ABI on poisoned, guarded buffers:
// tests/gpu/backward_case.hpp) on the main thread, the fp64 reference and the tolerance rule (tests/tolerance.hpp)
// on a worker thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/backward_case.hpp"
#include "reference/reference.hpp"

namespace flash4::soak {

// What the GPU wrote, with the inputs it was given.
struct GpuRun {
  std::uint64_t index = 0;
  test::BackwardCase problem;
  ref::Inputs inputs;
  std::vector<float> o, lse, dq, dk, dv;
  std::string failure;      // a call that failed, a CUDA error, or a guard or input that changed; empty if none
  bool unavailable = false;  // this build lacks the problem's kernel (or flash4_bwd answered NO_KERNEL)
};

GpuRun run_on_gpu(const test::BackwardCase& problem, std::uint64_t seed, std::uint64_t index);

// The tolerance rule on each output: ratio = kernel max |error| / the rule's bound (pass: <= 1).
struct OutputCheck {
  const char* name;
  double error;
  double bound;
  std::size_t nans;  // NaN values in the kernel's output

  double ratio() const { return error / bound; }
};

struct ProblemCheck {
  std::vector<OutputCheck> outputs;  // O, LSE, dQ, dK, dV
  bool mismatch() const;
  std::size_t nans() const;
  const OutputCheck& worst() const;  // the largest ratio
};

ProblemCheck check_against_reference(const GpuRun& run);

}  // namespace flash4::soak
