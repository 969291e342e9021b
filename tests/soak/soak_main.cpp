// flash4_soak: random valid problems (soak_problems.hpp), forward and backward on the GPU, each checked against
// the fp64 reference with the tolerance rule on a pool of CPU threads; a JSON summary (problems run,
// mismatches, NaNs, the worst error / bound ratio and where it was, the features drawn).
//   flash4_soak --problems N --seed S --json PATH [--first I] [--threads T]
//   flash4_soak --sample --json PATH        10 small problems covering every feature, for compute-sanitizer
// Problem i of seed S replays alone with --seed S --first i --problems 1. Exits 0 only when every problem
// ran and passed; 77 without a Hopper GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "soak/soak_check.hpp"
#include "soak/soak_problems.hpp"
#include "soak/soak_summary.hpp"

namespace flash4::soak {
namespace {

struct Options {
  std::uint64_t problems = 10000;
  std::uint64_t seed = 1;
  std::uint64_t first = 0;
  // Every core but the one driving the GPU checks references.
  unsigned threads = std::max(2u, std::thread::hardware_concurrency()) - 1;
  bool sample = false;
  std::string json;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--sample") {
      o.sample = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--problems") o.problems = std::strtoull(value, nullptr, 10);
    else if (flag == "--seed") o.seed = std::strtoull(value, nullptr, 10);
    else if (flag == "--first") o.first = std::strtoull(value, nullptr, 10);
    else if (flag == "--threads") o.threads = std::max(1u, static_cast<unsigned>(std::strtoul(value, nullptr, 10)));
    else if (flag == "--json") o.json = value;
    else return false;
  }
  return !o.json.empty();
}

bool hopper_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  return major == 9;
}

// GPU runs waiting for their reference check; bounded, so that the GPU stays only a little ahead of the CPUs.
class Queue {
 public:
  explicit Queue(std::size_t capacity) : capacity_(capacity) {}
  void push(GpuRun run) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return runs_.size() < capacity_; });
    runs_.push_back(std::move(run));
    not_empty_.notify_one();
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
  }
  bool pop(GpuRun& run) {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return !runs_.empty() || closed_; });
    if (runs_.empty()) return false;
    run = std::move(runs_.front());
    runs_.pop_front();
    not_full_.notify_one();
    return true;
  }

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<GpuRun> runs_;
  bool closed_ = false;
};

}  // namespace
}  // namespace flash4::soak

int main(int argc, char** argv) {
  using namespace flash4::soak;
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr, "usage: %s (--problems N --seed S | --sample) --json PATH [--first I] [--threads T]\n", argv[0]);
    return 2;
  }
  if (!hopper_available()) {
    std::fprintf(stderr, "flash4_soak: no CUDA device (sm_90 Hopper needed)\n");
    return 77;
  }
  const std::uint64_t count = options.sample ? kSampleProblems : options.problems;
  Summary summary(options.seed, options.first, options.sample);
  Queue queue(2 * options.threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < options.threads; ++t) {
    workers.emplace_back([&] {
      GpuRun run;
      while (queue.pop(run)) summary.add(run, run.failure.empty() && !run.unavailable ? check_against_reference(run) : ProblemCheck{});
    });
  }
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = options.first; i < options.first + count; ++i) {
    const flash4::test::BackwardCase problem =
        options.sample ? sample_problem(static_cast<int>(i % kSampleProblems)) : soak_problem(options.seed, i);
    queue.push(run_on_gpu(problem, input_seed(options.seed, i), i));
  }
  const double gpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  queue.close();
  for (std::thread& worker : workers) worker.join();
  const double wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summary.write(options.json, gpu_seconds, wall_seconds, options.threads);
  std::printf("%s\n", summary.line().c_str());
  return summary.passed() ? 0 : 1;
}
