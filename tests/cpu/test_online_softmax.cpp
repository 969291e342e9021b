// The kernel's online softmax with lazy rescaling (src/reference/tiled_softmax_model) against the fp64
// reference, on inputs built to stress the recurrence, under the project's tolerance rule
// (tests/tolerance.hpp: at most 2x the naive same-precision error plus a noise floor).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference/precision.hpp"
#include "reference/reference.hpp"
#include "reference/tiled_softmax_model.hpp"
#include "tolerance.hpp"

namespace {

using flash4::ref::Precision;
using flash4::ref::TiledModelOptions;
using flash4::ref::TiledModelResult;

// One (batch, head) problem: the reference's layouts with B = H = 1 are the model's (rows, d).
struct Case {
  flash4::ref::Problem problem;
  std::vector<float> q, k, v;

  int sq() const { return problem.seqlen_q; }
  int sk() const { return problem.seqlen_k; }
  int d() const { return problem.head_dim; }
};

// Random unit-normal q, k, v in the given precision; q and k are then multiplied by a power of two
// (which keeps them exact) to set the spread of the scores.
Case make_case(int sq, int sk, int d, bool causal, Precision precision, float qk_multiplier, float scale,
               std::uint64_t seed) {
  Case c;
  c.problem.seqlen_q = sq;
  c.problem.seqlen_k = sk;
  c.problem.head_dim = d;
  c.problem.causal = causal;
  c.problem.scale = scale;
  flash4::ref::Inputs inputs = flash4::ref::random_inputs(c.problem, precision, seed);
  for (float& x : inputs.q) x *= qk_multiplier;
  for (float& x : inputs.k) x *= qk_multiplier;
  c.q = std::move(inputs.q);
  c.k = std::move(inputs.k);
  c.v = std::move(inputs.v);
  return c;
}

float default_scale(int d) { return 1.0f / std::sqrt(static_cast<float>(d)); }

// Makes every row's scores grow along the keys by `log2_units_per_key` on top of the random part:
// channel 0 of q becomes 1 and channel 0 of key j the ramp, so the row max rises tile after tile.
void add_score_ramp(Case& c, double log2_units_per_key, Precision precision) {
  const double per_key = log2_units_per_key / (c.problem.scale * std::numbers::log2e);
  for (int i = 0; i < c.sq(); ++i) c.q[static_cast<std::size_t>(i) * c.d()] = 1.0f;
  for (int j = 0; j < c.sk(); ++j) {
    c.k[static_cast<std::size_t>(j) * c.d()] = flash4::ref::round_to(precision, static_cast<float>(per_key * j));
  }
}

TiledModelOptions model_options(const Case& c, Precision precision) {
  TiledModelOptions options;
  options.scale = static_cast<float>(c.problem.scale);
  options.causal = c.problem.causal;
  options.precision = precision;
  return options;
}

double noise_floor(Precision precision) {
  return precision == Precision::bf16 ? flash4::test::kBf16NoiseFloor : flash4::test::kFp16NoiseFloor;
}

double max_abs(std::span<const double> values) {
  double m = 0.0;
  for (const double x : values) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// What the model is measured against: fp64 and the naive baseline's error on the same case.
struct Baseline {
  flash4::ref::ForwardResult64 exact;
  flash4::test::ErrorStats naive_o, naive_lse;
  double o_floor = 0.0, lse_floor = 0.0;
};

Baseline make_baseline(const Case& c, Precision precision) {
  Baseline b;
  b.exact = flash4::ref::forward_fp64(c.problem, c.q, c.k, c.v);
  const flash4::ref::ForwardResult32 naive = flash4::ref::forward_naive(c.problem, precision, c.q, c.k, c.v);
  b.naive_o = flash4::test::compare(naive.o, b.exact.o);
  b.naive_lse = flash4::test::compare(naive.lse, b.exact.lse);
  // O's floor scales with its magnitude (tolerance.hpp); LSE keeps the magnitude-1 floor, since a
  // floor scaled by a large LSE (1e4 for huge logits) would accept anything.
  b.o_floor = noise_floor(precision) * std::max(1.0, max_abs(b.exact.o));
  b.lse_floor = noise_floor(precision);
  return b;
}

TiledModelResult run_model(const Case& c, const TiledModelOptions& options) {
  return flash4::ref::run_tiled_softmax_model(options, c.sq(), c.sk(), c.d(), c.q, c.k, c.v);
}

void expect_within_tolerance(const TiledModelResult& model, const Baseline& b) {
  EXPECT_TRUE(flash4::test::within_tolerance("O", flash4::test::compare(model.o, b.exact.o), b.naive_o, b.o_floor));
  EXPECT_TRUE(
      flash4::test::within_tolerance("LSE", flash4::test::compare(model.lse, b.exact.lse), b.naive_lse, b.lse_floor));
}

void print_counters(const char* what, const TiledModelResult& model) {
  std::printf("%s: rescales done %ld, skipped %ld\n", what, model.rescales_done, model.rescales_skipped);
}

class OnlineSoftmax : public ::testing::Test {
 protected:
  // Fresh inputs every run; the seed is in every failure message and in the XML report.
  void SetUp() override {
    RecordProperty("seed", std::to_string(seed_));
    trace_.emplace(__FILE__, __LINE__, "seed " + std::to_string(seed_));
  }
  std::uint64_t seed_ = flash4::ref::fresh_seed();
  std::optional<::testing::ScopedTrace> trace_;
};

TEST_F(OnlineSoftmax, RandomShapesAndExp2Splits) {
  struct Shape {
    int sq, sk, d, block_n;
    bool causal;
    int soft_exp2_eighths;
    Precision precision;
  };
  const Shape shapes[] = {
      {1, 1, 64, 128, false, 0, Precision::bf16},    {17, 113, 64, 128, false, 3, Precision::bf16},
      {113, 239, 128, 64, true, 3, Precision::bf16}, {239, 113, 64, 128, true, 8, Precision::bf16},
      {128, 512, 96, 128, true, 2, Precision::fp16}, {64, 799, 64, 176, false, 5, Precision::fp16},
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "sq " << s.sq << " sk " << s.sk << " d " << s.d << " block_n " << s.block_n
                                      << " causal " << s.causal << " eighths " << s.soft_exp2_eighths << " "
                                      << flash4::ref::name(s.precision));
    const Case c = make_case(s.sq, s.sk, s.d, s.causal, s.precision, 1.0f, default_scale(s.d), seed_);
    TiledModelOptions options = model_options(c, s.precision);
    options.block_n = s.block_n;
    options.soft_exp2_eighths = s.soft_exp2_eighths;
    expect_within_tolerance(run_model(c, options), make_baseline(c, s.precision));
  }
}

// Small random part (q, k scaled by 1/4) under a ramp: the tile maxima follow the ramp.
constexpr float kQuietScores = 0.25f;

// Row max up 12 log2 units per tile: beyond the threshold every time, so every tile after the first
// really rescales.
TEST_F(OnlineSoftmax, MaxGrowingBeyondThresholdEveryTileRescales) {
  constexpr int kBlockN = 64;
  constexpr int kTiles = 8;
  constexpr double kGrowthPerTile = 12.0;
  Case c = make_case(64, kTiles * kBlockN, 64, false, Precision::bf16, kQuietScores, default_scale(64), seed_);
  add_score_ramp(c, kGrowthPerTile / kBlockN, Precision::bf16);
  TiledModelOptions options = model_options(c, Precision::bf16);
  options.block_n = kBlockN;
  const TiledModelResult model = run_model(c, options);
  expect_within_tolerance(model, make_baseline(c, Precision::bf16));
  print_counters("max +12 per tile", model);
  EXPECT_EQ(model.rescales_done, static_cast<long>(c.sq()) * (kTiles - 1));
  EXPECT_EQ(model.rescales_skipped, 0);
}

// Row max up 7 log2 units over the whole row (1 per tile): within the threshold, so every rescale that
// the classic recurrence does is skipped, and the result is as accurate.
TEST_F(OnlineSoftmax, SlowlyGrowingMaxSkipsEveryRescale) {
  constexpr int kBlockN = 64;
  constexpr int kTiles = 8;
  constexpr double kGrowthPerRow = 7.0;
  Case c = make_case(64, kTiles * kBlockN, 64, false, Precision::bf16, kQuietScores, default_scale(64), seed_);
  add_score_ramp(c, kGrowthPerRow / (kTiles * kBlockN), Precision::bf16);
  const Baseline baseline = make_baseline(c, Precision::bf16);
  TiledModelOptions options = model_options(c, Precision::bf16);
  options.block_n = kBlockN;

  const TiledModelResult lazy = run_model(c, options);
  expect_within_tolerance(lazy, baseline);
  print_counters("max +1 per tile, threshold 8", lazy);
  EXPECT_EQ(lazy.rescales_done, 0);
  EXPECT_GT(lazy.rescales_skipped, 0);

  options.threshold = 0.0f;
  const TiledModelResult classic = run_model(c, options);
  expect_within_tolerance(classic, baseline);
  print_counters("max +1 per tile, threshold 0", classic);
  EXPECT_GT(classic.rescales_done, 0);
  EXPECT_EQ(classic.rescales_skipped, 0);
}

// Growth of 5 per tile: the lazy rule skips some rescales and does others. Threshold 8 and threshold 0
// (the classic recurrence) must agree as closely as the kernel must agree with fp64.
TEST_F(OnlineSoftmax, LazyAndClassicThresholdsAgree) {
  constexpr int kBlockN = 128;
  constexpr int kTiles = 6;
  constexpr double kGrowthPerTile = 5.0;
  Case c = make_case(96, kTiles * kBlockN, 128, false, Precision::bf16, 0.5f, default_scale(128), seed_);
  add_score_ramp(c, kGrowthPerTile / kBlockN, Precision::bf16);
  const Baseline baseline = make_baseline(c, Precision::bf16);
  TiledModelOptions options = model_options(c, Precision::bf16);
  options.block_n = kBlockN;
  options.soft_exp2_eighths = 3;

  const TiledModelResult lazy = run_model(c, options);
  options.threshold = 0.0f;
  const TiledModelResult classic = run_model(c, options);
  expect_within_tolerance(lazy, baseline);
  expect_within_tolerance(classic, baseline);
  print_counters("max +5 per tile, threshold 8", lazy);
  EXPECT_GT(lazy.rescales_skipped, 0);
  EXPECT_GT(lazy.rescales_done, 0);
  EXPECT_EQ(classic.rescales_skipped, 0);
  EXPECT_GT(classic.rescales_done, lazy.rescales_done);

  const std::vector<double> classic_o(classic.o.begin(), classic.o.end());
  const std::vector<double> classic_lse(classic.lse.begin(), classic.lse.end());
  EXPECT_TRUE(flash4::test::within_tolerance("O lazy vs classic", flash4::test::compare(lazy.o, classic_o),
                                             baseline.naive_o, baseline.o_floor));
  EXPECT_TRUE(flash4::test::within_tolerance("LSE lazy vs classic", flash4::test::compare(lazy.lse, classic_lse),
                                             baseline.naive_lse, baseline.lse_floor));
}

// Every key identical: each row's scores are all equal, O is the mean of V, and no max ever moves.
TEST_F(OnlineSoftmax, ConstantRows) {
  Case c = make_case(33, 300, 64, false, Precision::bf16, 1.0f, default_scale(64), seed_);
  for (int j = 1; j < c.sk(); ++j) std::copy_n(c.k.begin(), c.d(), c.k.begin() + static_cast<std::ptrdiff_t>(j) * c.d());
  TiledModelOptions options = model_options(c, Precision::bf16);
  options.soft_exp2_eighths = 3;
  const TiledModelResult model = run_model(c, options);
  expect_within_tolerance(model, make_baseline(c, Precision::bf16));
  EXPECT_EQ(model.rescales_done, 0);
  EXPECT_EQ(model.rescales_skipped, 0);
}

// Causal with sq > sk, bottom-right aligned: the first sq - sk query rows see no key at all.
TEST_F(OnlineSoftmax, FullyMaskedRowsGiveZeroOutputAndMinusInfLse) {
  const Case c = make_case(200, 72, 64, true, Precision::bf16, 1.0f, default_scale(64), seed_);
  TiledModelOptions options = model_options(c, Precision::bf16);
  options.block_n = 32;
  options.soft_exp2_eighths = 8;  // soft_exp2(-inf) must give exactly 0 too
  const TiledModelResult model = run_model(c, options);
  expect_within_tolerance(model, make_baseline(c, Precision::bf16));
  const int masked_rows = c.sq() - c.sk();
  for (int i = 0; i < c.sq(); ++i) {
    const bool masked = i < masked_rows;
    EXPECT_EQ(std::isinf(model.lse[i]) && model.lse[i] < 0, masked) << "row " << i << " lse " << model.lse[i];
    if (!masked) continue;
    for (int col = 0; col < c.d(); ++col) {
      ASSERT_EQ(model.o[static_cast<std::size_t>(i) * c.d() + col], 0.0f) << "row " << i;
    }
  }
}

// Scores of order 1e4 (scale 1, q and k times 32 over 64 channels): nearly one-hot rows, where an
// overflow or a lost max would show.
TEST_F(OnlineSoftmax, HugeLogits) {
  constexpr float kHugeMultiplier = 32.0f;
  const Case c = make_case(64, 500, 64, false, Precision::bf16, kHugeMultiplier, 1.0f, seed_);
  TiledModelOptions options = model_options(c, Precision::bf16);
  options.soft_exp2_eighths = 3;
  const TiledModelResult model = run_model(c, options);
  expect_within_tolerance(model, make_baseline(c, Precision::bf16));
  for (const float lse : model.lse) EXPECT_TRUE(std::isfinite(lse));
}

TEST(TiledSoftmaxModel, RejectsInconsistentArguments) {
  const std::vector<float> q(4 * 8), kv(6 * 8);
  const auto run = [&](const TiledModelOptions& options, int sq, int sk, int d) {
    return flash4::ref::run_tiled_softmax_model(options, sq, sk, d, q, kv, kv);
  };
  const TiledModelOptions valid;
  EXPECT_NO_THROW(run(valid, 4, 6, 8));
  EXPECT_THROW(run(valid, 5, 6, 8), std::invalid_argument);  // q too short
  EXPECT_THROW(run(valid, 4, 6, 0), std::invalid_argument);
  TiledModelOptions bad = valid;
  bad.soft_exp2_eighths = 9;
  EXPECT_THROW(run(bad, 4, 6, 8), std::invalid_argument);
  bad = valid;
  bad.scale = 0.0f;
  EXPECT_THROW(run(bad, 4, 6, 8), std::invalid_argument);
  bad = valid;
  bad.block_n = 0;
  EXPECT_THROW(run(bad, 4, 6, 8), std::invalid_argument);
}

}  // namespace
