// The soak's reference check and summary on the CPU, with outputs made here instead of by the GPU: exact outputs
// pass, a corrupted or NaN output is a mismatch, and the summary counts and reports it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "soak/soak_check.hpp"
#include "soak/soak_problems.hpp"
#include "soak/soak_summary.hpp"

namespace flash4::soak {
namespace {

std::vector<float> as_float(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// A run whose outputs are the fp64 reference rounded to float: as good as any kernel can be.
GpuRun exact_run(int sample) {
  GpuRun run;
  run.index = static_cast<std::uint64_t>(sample);
  run.problem = sample_problem(sample);
  const ref::Problem shape = run.problem.problem();
  run.inputs = ref::random_inputs(shape, ref::Precision::bf16, 11);
  const ref::ForwardResult64 forward = ref::forward_fp64(shape, run.inputs.q, run.inputs.k, run.inputs.v);
  const ref::BackwardResult64 backward =
      ref::backward_fp64(shape, run.inputs.q, run.inputs.k, run.inputs.v, run.inputs.dout);
  run.o = as_float(forward.o);
  run.lse = as_float(forward.lse);
  run.dq = as_float(backward.dq);
  run.dk = as_float(backward.dk);
  run.dv = as_float(backward.dv);
  return run;
}

TEST(SoakCheck, ExactOutputsPass) {
  for (const int sample : {0, 7}) {  // fixed length, and varlen with empty sequences
    const ProblemCheck check = check_against_reference(exact_run(sample));
    ASSERT_EQ(check.outputs.size(), 5u);
    EXPECT_FALSE(check.mismatch()) << check.worst().name << " ratio " << check.worst().ratio();
    EXPECT_LT(check.worst().ratio(), 0.5);
    EXPECT_EQ(check.nans(), 0u);
  }
}

TEST(SoakCheck, ACorruptedOrNanOutputIsAMismatch) {
  GpuRun run = exact_run(0);
  run.dq[3] += 1.0f;
  ProblemCheck check = check_against_reference(run);
  EXPECT_TRUE(check.mismatch());
  EXPECT_STREQ(check.worst().name, "dQ");
  run = exact_run(0);
  run.lse[0] = NAN;
  check = check_against_reference(run);
  EXPECT_TRUE(check.mismatch());
  EXPECT_EQ(check.nans(), 1u);
  EXPECT_STREQ(check.worst().name, "LSE");
}

TEST(SoakSummary, CountsMismatchesFailuresAndWritesThem) {
  Summary summary(1, 0, false);
  const GpuRun good = exact_run(0);
  summary.add(good, check_against_reference(good));
  EXPECT_TRUE(summary.passed());
  GpuRun bad = exact_run(1);
  bad.dv[0] += 1.0f;
  summary.add(bad, check_against_reference(bad));
  GpuRun failed = exact_run(2);
  failed.failure = "input k (or its guards) changed";
  summary.add(failed, ProblemCheck{});
  EXPECT_FALSE(summary.passed());
  const std::string path = ::testing::TempDir() + "soak_summary.json";
  summary.write(path, 1.0, 2.0, 3);
  std::stringstream json;
  json << std::ifstream(path).rdbuf();
  for (const char* field : {"\"problems\": 3", "\"checked\": 2", "\"mismatches\": 1", "\"failed\": 1",
                            "\"worst_output\": \"dV\"", "input k (or its guards) changed"}) {
    EXPECT_NE(json.str().find(field), std::string::npos) << field << " not in\n" << json.str();
  }
  EXPECT_NE(summary.line().find("3 problems, 2 checked, 1 mismatches, 1 failed"), std::string::npos) << summary.line();
}

}  // namespace
}  // namespace flash4::soak
