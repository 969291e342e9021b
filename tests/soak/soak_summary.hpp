// The soak's tally, filled by the worker threads, and its JSON summary (the lead puts it in bench/results/
// with the date, commit and device).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "soak/soak_check.hpp"

namespace flash4::soak {

class Summary {
 public:
  Summary(std::uint64_t seed, std::uint64_t first, bool sample) : seed_(seed), first_(first), sample_(sample) {}

  // One problem: its GPU run and, when that ran, its reference check. Thread-safe.
  void add(const GpuRun& run, const ProblemCheck& check);

  void write(const std::string& path, double gpu_seconds, double wall_seconds, unsigned threads) const;
  std::string line() const;  // one line for the log
  bool passed() const;

 private:
  struct Worst {
    double ratio = 0;
    std::uint64_t index = 0;
    std::string problem;
    double error = 0, bound = 0;
  };

  std::uint64_t seed_, first_;
  bool sample_;
  mutable std::mutex mutex_;
  std::uint64_t problems_ = 0, checked_ = 0, unavailable_ = 0, failed_ = 0, mismatches_ = 0;
  std::uint64_t nan_values_ = 0, problems_with_nan_ = 0;
  std::map<std::string, Worst> worst_by_output_;
  Worst worst_;
  std::string worst_output_;
  std::map<std::string, std::uint64_t> features_;
  std::vector<std::string> failures_;  // the first few, as JSON objects
};

}  // namespace flash4::soak
