// The CPU reference demo of flash4-bench (no CUDA device): prints how far a naive same-precision forward (and,
// with --mode bwd, backward) lands from the exact fp64 one. A kernel passes the project's tolerance rule when its
// error is at most twice that plus a noise floor (tests/tolerance.hpp), so this is the scale of the errors
// --verify reports on a GPU.
#include "cpu_demo.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "reference/reference.hpp"

namespace flash4::bench {
namespace {

// Small enough for the O(S^2) CPU reference to finish in about a second at head dim 256.
constexpr int kDemoBatch = 1;
constexpr int kDemoSeqlen = 256;
constexpr int kDemoHeadsQ = 2;
constexpr int kDemoHeadsKv = 1;
constexpr int kDefaultHeadDim = 128;

template <class Got>
double max_abs_error(const Got& got, const std::vector<double>& want) {
  double max_error = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    // Equal values (the -inf LSE of a fully masked row) agree.
    if (got[e] != want[e]) max_error = std::max(max_error, std::fabs(got[e] - want[e]));
  }
  return max_error;
}

}  // namespace

int run_cpu_demo(const Options& options) {
  ref::Problem problem;
  problem.batch = kDemoBatch;
  problem.seqlen_q = problem.seqlen_k = kDemoSeqlen;
  problem.heads_q = kDemoHeadsQ;
  problem.heads_kv = kDemoHeadsKv;
  problem.head_dim = options.head_dim.value_or(kDefaultHeadDim);
  problem.scale = 1.0 / std::sqrt(static_cast<double>(problem.head_dim));
  problem.causal = options.causal;
  problem.window_left = options.window_left;
  problem.window_right = options.window_right;
  problem.softcap = options.softcap;

  const std::uint64_t seed = ref::fresh_seed();
  const ref::Inputs in = ref::random_inputs(problem, options.dtype, seed);
  const ref::ForwardResult64 exact = ref::forward_fp64(problem, in.q, in.k, in.v);
  const ref::ForwardResult32 naive = ref::forward_naive(problem, options.dtype, in.q, in.k, in.v);

  std::printf("cpu demo (seed %llu): %s, %s\n", static_cast<unsigned long long>(seed),
              std::string(ref::name(options.dtype)).c_str(), ref::to_string(problem).c_str());
  std::printf("naive %s forward vs fp64: max |err O| = %.3e, max |err LSE| = %.3e\n",
              std::string(ref::name(options.dtype)).c_str(), max_abs_error(naive.o, exact.o),
              max_abs_error(naive.lse, exact.lse));
  if (std::find(options.modes.begin(), options.modes.end(), Mode::bwd) != options.modes.end()) {
    const ref::BackwardResult64 exact_grad = ref::backward_fp64(problem, in.q, in.k, in.v, in.dout);
    const ref::BackwardResult32 naive_grad = ref::backward_naive(problem, options.dtype, in.q, in.k, in.v, in.dout);
    std::printf("naive %s backward vs fp64: max |err dQ| = %.3e, max |err dK| = %.3e, max |err dV| = %.3e\n",
                std::string(ref::name(options.dtype)).c_str(), max_abs_error(naive_grad.dq, exact_grad.dq),
                max_abs_error(naive_grad.dk, exact_grad.dk), max_abs_error(naive_grad.dv, exact_grad.dv));
  }
  std::printf("(the tolerance baseline: a kernel may be off by twice this plus a noise floor)\n");
  return kExitOk;
}

int run_without_device(const Options& options) {
  if (options.json) {
    std::fprintf(stderr, "flash4-bench: no CUDA device found; --json reports measurements, so there is nothing to "
                         "write (without --json it runs the CPU reference demo)\n");
    return kExitNoDevice;
  }
  std::printf("flash4-bench: no CUDA device found; running the CPU reference demo instead\n");
  return run_cpu_demo(options);
}

}  // namespace flash4::bench
