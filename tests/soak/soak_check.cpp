// Implements soak_check.hpp.
#include "soak/soak_check.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "host/kernel_choice.hpp"
#include "tolerance.hpp"

namespace flash4::soak {
namespace {

ref::Precision precision_of(flash4_dtype dtype) {
  return dtype == FLASH4_DTYPE_BF16 ? ref::Precision::bf16 : ref::Precision::fp16;
}

std::size_t count_nans(const std::vector<float>& values) {
  return static_cast<std::size_t>(std::count_if(values.begin(), values.end(), [](float v) { return std::isnan(v); }));
}

OutputCheck output(const char* name, const std::vector<float>& kernel, const std::vector<float>& naive,
                   const std::vector<double>& exact, double floor) {
  const test::ErrorStats got = test::compare(kernel, exact);
  return OutputCheck{name, got.max_abs, test::tolerance_bound(test::compare(naive, exact), floor), count_nans(kernel)};
}

}  // namespace

GpuRun run_on_gpu(const test::BackwardCase& problem, std::uint64_t seed, std::uint64_t index) {
  GpuRun run;
  run.index = index;
  run.problem = problem;
  const ref::Problem shape = problem.problem();
  run.inputs = ref::random_inputs(shape, precision_of(problem.dtype), seed);
  // A build without the problem's dtype or head dim has neither kernel: the forward would refuse it first.
  const int needed = host::needed_head_dim(problem);
  if (host::serving_head_dim(host::built_forward_kernels(), problem.dtype, needed) == 0 ||
      host::serving_head_dim(host::built_backward_kernels(), problem.dtype, needed) == 0) {
    run.unavailable = true;
    return run;
  }
  test::BackwardDevice device(problem, run.inputs);
  if (const ::testing::AssertionResult forward = device.forward(); !forward) {
    run.failure = forward.message();
    return run;
  }
  const flash4_status status = device.backward();
  if (status == FLASH4_ERROR_NO_KERNEL) {
    run.unavailable = true;
    return run;
  }
  if (status != FLASH4_SUCCESS) {
    run.failure = std::string("flash4_bwd: ") + flash4_status_string(status) + ": " + flash4_last_error_message();
    return run;
  }
  if (const cudaError_t error = cudaDeviceSynchronize(); error != cudaSuccess) {
    run.failure = std::string("backward kernel: ") + cudaGetErrorString(error);
    return run;
  }
  run.o = device.o();
  run.lse = device.lse();
  run.dq = device.dq();
  run.dk = device.dk();
  run.dv = device.dv();
  if (const ::testing::AssertionResult untouched = device.untouched(); !untouched) run.failure = untouched.message();
  return run;
}

ProblemCheck check_against_reference(const GpuRun& run) {
  const ref::Problem shape = run.problem.problem();
  const ref::Precision precision = precision_of(run.problem.dtype);
  const double floor = run.problem.dtype == FLASH4_DTYPE_BF16 ? test::kBf16NoiseFloor : test::kFp16NoiseFloor;
  const ref::Inputs& in = run.inputs;
  ProblemCheck check;
  const ref::ForwardResult64 exact = ref::forward_fp64(shape, in.q, in.k, in.v);
  const ref::ForwardResult32 naive = ref::forward_naive(shape, precision, in.q, in.k, in.v);
  check.outputs.push_back(output("O", run.o, naive.o, exact.o, floor));
  check.outputs.push_back(output("LSE", run.lse, naive.lse, exact.lse, floor));
  const ref::BackwardResult64 grad = ref::backward_fp64(shape, in.q, in.k, in.v, in.dout);
  // The baseline takes delta from the O the kernel's backward was given (ref::backward_naive).
  const ref::BackwardResult32 naive_grad = ref::backward_naive(shape, precision, in.q, in.k, in.v, in.dout, run.o);
  check.outputs.push_back(output("dQ", run.dq, naive_grad.dq, grad.dq, test::gradient_floor(grad.dq, floor)));
  check.outputs.push_back(output("dK", run.dk, naive_grad.dk, grad.dk, test::gradient_floor(grad.dk, floor)));
  check.outputs.push_back(output("dV", run.dv, naive_grad.dv, grad.dv, test::gradient_floor(grad.dv, floor)));
  return check;
}

bool ProblemCheck::mismatch() const {
  // A NaN error (or a size mismatch) is infinite and fails; so does anything past the bound.
  return std::any_of(outputs.begin(), outputs.end(), [](const OutputCheck& c) { return !(c.ratio() <= 1.0); });
}

std::size_t ProblemCheck::nans() const {
  std::size_t total = 0;
  for (const OutputCheck& c : outputs) total += c.nans;
  return total;
}

const OutputCheck& ProblemCheck::worst() const {
  const auto key = [](const OutputCheck& c) { return std::isnan(c.ratio()) ? INFINITY : c.ratio(); };
  return *std::max_element(outputs.begin(), outputs.end(),
                           [&](const OutputCheck& a, const OutputCheck& b) { return key(a) < key(b); });
}

}  // namespace flash4::soak
