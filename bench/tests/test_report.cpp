// flash4-bench's output: JSON rows that always parse (NaN and infinity as null), the anchors' row keys, the
// text line, the progress line, and the run without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "cpu_demo.hpp"
#include "report.hpp"

namespace flash4::bench {
namespace {

Case sample_case(Mode mode) { return Case{mode, ref::Precision::bf16, 128, true, 4, 4096, 4096, 16, 4}; }

// The row as a program reading flash4-bench's output gets it.
nlohmann::json reparsed(const Case& c, const Measurement& m) { return nlohmann::json::parse(json_row(c, m).dump()); }

TEST(BenchReport, RowHasTheAnchorsKeys) {
  const nlohmann::json row = reparsed(sample_case(Mode::fwd), {.ms = 1.5, .iters = 30});
  for (const char* key : {"mode", "D", "causal", "N", "B", "H", "provider", "ms", "tflops"}) {
    EXPECT_TRUE(row.contains(key)) << key;
  }
  EXPECT_EQ(row["provider"], "flash4");
  EXPECT_EQ(row["mode"], "fwd");
  EXPECT_EQ(row["Hkv"], 4);
  EXPECT_EQ(row["verify"], "skipped");
  EXPECT_DOUBLE_EQ(row["ms"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(row["tflops"].get<double>(), std::round(flops(sample_case(Mode::fwd)) / 1.5e-3 / 1e12 * 10) / 10);
  EXPECT_FALSE(row.contains("max_err_o"));
}

TEST(BenchReport, NotFiniteValuesAreNull) {
  Verification v;
  v.ok = false;
  v.max_err_dq = std::numeric_limits<double>::quiet_NaN();
  v.max_err_dk = std::numeric_limits<double>::infinity();
  v.max_err_dv = 1.23456e-3;
  const std::string text =
      json_row(sample_case(Mode::bwd), {.ms = std::numeric_limits<double>::quiet_NaN(), .iters = 3, .verification = &v})
          .dump();
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos) << text;
  const nlohmann::json row = nlohmann::json::parse(text);
  EXPECT_TRUE(row["ms"].is_null());
  EXPECT_TRUE(row["tflops"].is_null());
  EXPECT_TRUE(row["max_rel_err_dq"].is_null());
  EXPECT_TRUE(row["max_rel_err_dk"].is_null());
  EXPECT_DOUBLE_EQ(row["max_rel_err_dv"].get<double>(), 1.23e-3);
  EXPECT_EQ(row["verify"], "fail");
  EXPECT_EQ(row["deterministic"], 0);
}

TEST(BenchReport, VarlenAndWindowAreReported) {
  Case c = sample_case(Mode::fwd);
  c.varlen_q = {3, 5};
  c.varlen_k = {4, 6};
  c.window_left = 8;
  c.softcap = 30;
  const nlohmann::json row = reparsed(c, {.ms = 1, .iters = 1});
  EXPECT_EQ(row["seqlens_q"], nlohmann::json({3, 5}));
  EXPECT_EQ(row["seqlens_k"], nlohmann::json({4, 6}));
  EXPECT_EQ(row["window_left"], 8);
  EXPECT_EQ(row["window_right"], -1);
  EXPECT_EQ(row["softcap"], 30.0);
  const std::string line = text_line(c, {.ms = 1, .iters = 1});
  EXPECT_NE(line.find("window=8,-1 softcap=30 varlen=3,5 k=4,6"), std::string::npos) << line;
}

TEST(BenchReport, ProgressLineCountsFromOne) {
  const std::string line = progress_line(2, 24, sample_case(Mode::bwd), 12.4);
  EXPECT_EQ(line.rfind("[3/24] bwd bf16 D=128 causal=1", 0), 0u) << line;
  EXPECT_NE(line.find("(12 s so far)"), std::string::npos) << line;
}

TEST(BenchReport, WithoutADeviceJsonIsAnError) {
  Options o;
  o.json = true;
  EXPECT_EQ(run_without_device(o), kExitNoDevice);
  o.json = false;
  o.head_dim = 64;
  EXPECT_EQ(run_without_device(o), kExitOk);  // the CPU demo
}

}  // namespace
}  // namespace flash4::bench
