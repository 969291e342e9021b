// Implements soak_summary.hpp.
#include "soak/soak_summary.hpp"

#include "soak/soak_problems.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>

namespace flash4::soak {
namespace {

constexpr std::size_t kMaxReportedFailures = 20;

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out + "\"";
}

std::string number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "\"nan\"" : "\"inf\"";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

}  // namespace

void Summary::add(const GpuRun& run, const ProblemCheck& check) {
  std::lock_guard lock(mutex_);
  ++problems_;
  for (const std::string& feature : features_of(run.problem)) ++features_[feature];
  const std::string name = run.problem.name();
  const auto report = [&](const std::string& what) {
    if (failures_.size() < kMaxReportedFailures) {
      failures_.push_back("{\"index\": " + std::to_string(run.index) + ", \"problem\": " + quoted(name) +
                          ", \"what\": " + quoted(what) + "}");
    }
  };
  if (run.unavailable) {
    ++unavailable_;
    report("no kernel in this build");
    return;
  }
  if (!run.failure.empty()) {
    ++failed_;
    report(run.failure);
    return;
  }
  ++checked_;
  nan_values_ += check.nans();
  if (check.nans() > 0) ++problems_with_nan_;
  std::string mismatched;
  for (const OutputCheck& output : check.outputs) {
    const double ratio = std::isnan(output.ratio()) ? INFINITY : output.ratio();
    Worst& worst = worst_by_output_[output.name];
    if (ratio >= worst.ratio) worst = Worst{ratio, run.index, name, output.error, output.bound};
    if (ratio >= worst_.ratio) {
      worst_ = Worst{ratio, run.index, name, output.error, output.bound};
      worst_output_ = output.name;
    }
    if (!(ratio <= 1.0)) mismatched += std::string(mismatched.empty() ? "" : ", ") + output.name + " error " +
                                       number(output.error) + " > bound " + number(output.bound);
  }
  if (check.mismatch()) {
    ++mismatches_;
    report(mismatched);
  }
}

bool Summary::passed() const {
  std::lock_guard lock(mutex_);
  return problems_ > 0 && checked_ == problems_ && mismatches_ == 0 && nan_values_ == 0;
}

std::string Summary::line() const {
  std::lock_guard lock(mutex_);
  char text[256];
  std::snprintf(text, sizeof(text),
                "flash4_soak: %llu problems, %llu checked, %llu mismatches, %llu failed, %llu without a kernel, "
                "%llu NaN values; worst error / bound %.4g (%s of problem %llu)",
                static_cast<unsigned long long>(problems_), static_cast<unsigned long long>(checked_),
                static_cast<unsigned long long>(mismatches_), static_cast<unsigned long long>(failed_),
                static_cast<unsigned long long>(unavailable_), static_cast<unsigned long long>(nan_values_),
                worst_.ratio, worst_output_.c_str(), static_cast<unsigned long long>(worst_.index));
  return text;
}

void Summary::write(const std::string& path, double gpu_seconds, double wall_seconds, unsigned threads) const {
  std::lock_guard lock(mutex_);
  const auto worst_json = [](const Worst& w) {
    return "{\"ratio\": " + number(w.ratio) + ", \"index\": " + std::to_string(w.index) + ", \"problem\": " +
           quoted(w.problem) + ", \"error\": " + number(w.error) + ", \"bound\": " + number(w.bound) + "}";
  };
  std::string json = "{\n  \"tool\": \"flash4_soak\",\n";
  json += "  \"mode\": " + quoted(sample_ ? "sample" : "random") + ",\n";
  json += "  \"seed\": " + std::to_string(seed_) + ",\n  \"first_index\": " + std::to_string(first_) + ",\n";
  json += "  \"problems\": " + std::to_string(problems_) + ",\n  \"checked\": " + std::to_string(checked_) + ",\n";
  json += "  \"mismatches\": " + std::to_string(mismatches_) + ",\n  \"failed\": " + std::to_string(failed_) + ",\n";
  json += "  \"without_kernel\": " + std::to_string(unavailable_) + ",\n";
  json += "  \"nan_values\": " + std::to_string(nan_values_) + ",\n";
  json += "  \"problems_with_nan\": " + std::to_string(problems_with_nan_) + ",\n";
  json += "  \"worst_ratio\": " + number(worst_.ratio) + ",\n  \"worst_output\": " + quoted(worst_output_) + ",\n";
  json += "  \"worst\": " + worst_json(worst_) + ",\n  \"worst_by_output\": {";
  std::string separator;
  for (const auto& [output, worst] : worst_by_output_) {
    json += separator + "\n    " + quoted(output) + ": " + worst_json(worst);
    separator = ",";
  }
  json += "\n  },\n  \"features\": {";
  separator.clear();
  for (const auto& [feature, n] : features_) {
    json += separator + "\n    " + quoted(feature) + ": " + std::to_string(n);
    separator = ",";
  }
  json += "\n  },\n  \"rule\": \"ratio = kernel max|err| / (2 * naive max|err| + floor), floor 2^-8 bf16 / 2^-11 fp16, "
          "scaled by max(max|fp64|, 0.1) for gradients (tests/tolerance.hpp)\",\n";
  json += "  \"gpu_loop_s\": " + number(gpu_seconds) + ",\n  \"wall_s\": " + number(wall_seconds) + ",\n";
  json += "  \"reference_threads\": " + std::to_string(threads) + ",\n  \"failures\": [";
  separator.clear();
  for (const std::string& failure : failures_) {
    json += separator + "\n    " + failure;
    separator = ",";
  }
  json += "\n  ]\n}\n";
  std::ofstream(path) << json;
}

}  // namespace flash4::soak
