// The CPU forward reference (src/reference): mask semantics, hand-computed cases, and consistency
// properties (one row vs all rows, varlen vs separate problems, GQA vs repeated heads, naive vs fp64).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "reference/reference.hpp"

namespace flash4::ref {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// The visibility matrix of one sequence as text, one string per query row: '1' visible, '0' masked.
std::vector<std::string> mask_pattern(const Problem& p, int sq, int sk) {
  std::vector<std::string> rows;
  for (int i = 0; i < sq; ++i) {
    std::string row;
    for (int j = 0; j < sk; ++j) row += key_visible(p, sq, sk, i, j) ? '1' : '0';
    rows.push_back(row);
  }
  return rows;
}

std::string seed_trace(std::uint64_t seed) { return "seed " + std::to_string(seed); }

TEST(KeyVisible, CausalIsBottomRightAligned) {
  const Problem causal{.causal = true};
  // Sq < Sk: the last query sees every key.
  EXPECT_EQ(mask_pattern(causal, 3, 5), (std::vector<std::string>{"11100", "11110", "11111"}));
  // Sq > Sk: the first Sq - Sk queries see nothing.
  EXPECT_EQ(mask_pattern(causal, 4, 2), (std::vector<std::string>{"00", "00", "10", "11"}));
  EXPECT_EQ(mask_pattern(Problem{}, 2, 3), (std::vector<std::string>{"111", "111"}));
}

TEST(KeyVisible, SlidingWindow) {
  const Problem local{.window_left = 1, .window_right = 0};
  EXPECT_EQ(mask_pattern(local, 4, 4), (std::vector<std::string>{"1000", "1100", "0110", "0011"}));
  const Problem band{.window_left = 1, .window_right = 1};
  EXPECT_EQ(mask_pattern(band, 4, 4), (std::vector<std::string>{"1100", "1110", "0111", "0011"}));
  const Problem left_only{.window_left = 2};
  EXPECT_EQ(mask_pattern(left_only, 4, 4), (std::vector<std::string>{"1111", "1111", "1111", "0111"}));
  // Bottom-right aligned like causal: with Sk - Sq = 2, query i is centred on key i + 2.
  const Problem diagonal_only{.window_left = 0, .window_right = 0};
  EXPECT_EQ(mask_pattern(diagonal_only, 2, 4), (std::vector<std::string>{"0010", "0001"}));
}

TEST(KeyVisible, CausalEqualsWindowMinusOneZero) {
  constexpr int kMaxLength = 6;
  const Problem causal{.causal = true};
  const Problem window{.window_left = -1, .window_right = 0};
  for (int sq = 0; sq <= kMaxLength; ++sq) {
    for (int sk = 0; sk <= kMaxLength; ++sk) {
      EXPECT_EQ(mask_pattern(causal, sq, sk), mask_pattern(window, sq, sk)) << "sq " << sq << " sk " << sk;
    }
  }
}

// One query, two keys, scale 1: scores q.k0 = 0 and q.k1 = 1, so P = (1, e) / (1 + e).
TEST(ForwardFp64, TwoKeysKnownSoftmax) {
  const Problem p{.seqlen_q = 1, .seqlen_k = 2, .head_dim = 2, .scale = 1.0};
  const std::vector<float> q{1.0f, 0.5f};
  const std::vector<float> k{0.0f, 0.0f, 0.5f, 1.0f};
  const std::vector<float> v{2.0f, -1.0f, 4.0f, 3.0f};
  const double e = std::exp(1.0);
  const ForwardResult64 result = forward_fp64(p, q, k, v);
  EXPECT_DOUBLE_EQ(result.o[0], (2 + 4 * e) / (1 + e));
  EXPECT_DOUBLE_EQ(result.o[1], (-1 + 3 * e) / (1 + e));
  EXPECT_DOUBLE_EQ(result.lse[0], std::log(1 + e));
}

// softcap 2, scale 1: raw scores 2 and 6 become 2 tanh(1) and 2 tanh(3).
TEST(ForwardFp64, SoftcapAppliesTanh) {
  const Problem p{.seqlen_q = 1, .seqlen_k = 2, .head_dim = 1, .scale = 1.0, .softcap = 2.0};
  const std::vector<float> q{2.0f};
  const std::vector<float> k{1.0f, 3.0f};
  const std::vector<float> v{1.0f, -1.0f};
  const double e0 = std::exp(2 * std::tanh(1.0));
  const double e1 = std::exp(2 * std::tanh(3.0));
  const ForwardResult64 result = forward_fp64(p, q, k, v);
  EXPECT_DOUBLE_EQ(result.o[0], (e0 - e1) / (e0 + e1));
  EXPECT_DOUBLE_EQ(result.lse[0], std::log(e0 + e1));
}

// Causal with Sq = 5 > Sk = 3: queries 0 and 1 see no key.
TEST(ForwardFp64, FullyMaskedRowsGiveZeroAndMinusInfinity) {
  const Problem p{.batch = 2, .seqlen_q = 5, .seqlen_k = 3, .heads_q = 2, .heads_kv = 2, .head_dim = 8,
                  .causal = true};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  const ForwardResult64 exact = forward_fp64(p, in.q, in.k, in.v);
  const ForwardResult32 naive = forward_naive(p, Precision::bf16, in.q, in.k, in.v);
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < p.seqlen_q; ++i) {
        const bool masked = i < p.seqlen_q - p.seqlen_k;
        const std::size_t lse = p.lse_index(b, h, i);
        EXPECT_EQ(exact.lse[lse] == kMinusInf, masked) << "row " << i;
        EXPECT_EQ(naive.lse[lse] == kMinusInf, masked) << "row " << i;
        if (!masked) continue;
        for (int d = 0; d < p.head_dim; ++d) {
          EXPECT_EQ(exact.o[p.q_index(b, i, h) + d], 0.0);
          EXPECT_EQ(naive.o[p.q_index(b, i, h) + d], 0.0f);
        }
      }
    }
  }
}

// Varlen sequences of lengths (q, k) = (2, 3), (0, 2), (3, 0): the empty query sequence produces
// nothing, the empty key sequence masks all of its queries.
TEST(ForwardFp64, EmptyVarlenSequences) {
  const Problem p{.batch = 3, .heads_q = 2, .heads_kv = 1, .head_dim = 4,
                  .cu_seqlens_q = {0, 2, 2, 5}, .cu_seqlens_k = {0, 3, 5, 5}};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  const ForwardResult64 result = forward_fp64(p, in.q, in.k, in.v);
  ASSERT_EQ(result.o.size(), 5u * 2 * 4);
  ASSERT_EQ(result.lse.size(), 5u * 2);
  for (int h = 0; h < p.heads_q; ++h) {
    for (int i = 0; i < p.seq_q(0); ++i) EXPECT_TRUE(std::isfinite(result.lse[p.lse_index(0, h, i)]));
    for (int i = 0; i < p.seq_q(2); ++i) {
      EXPECT_EQ(result.lse[p.lse_index(2, h, i)], kMinusInf);
      for (int d = 0; d < p.head_dim; ++d) EXPECT_EQ(result.o[p.q_index(2, i, h) + d], 0.0);
    }
  }
}

// A sink is a column with logit sink_h and no value: against the same problem without it, each row's
// LSE becomes log(exp(LSE) + exp(sink_h)) and O shrinks by the sink's share exp(sink_h - LSE_sink). A
// row that sees no key gets O = 0 and LSE = sink_h (causal with Sq > Sk masks the first rows).
TEST(ForwardFp64, SinkIsAColumnWithoutValue) {
  Problem p{.batch = 2, .seqlen_q = 5, .seqlen_k = 3, .heads_q = 2, .heads_kv = 1, .head_dim = 8, .scale = 0.5,
            .causal = true};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  const ForwardResult64 plain = forward_fp64(p, in.q, in.k, in.v);
  p.sink = {0.75f, -2.5f};
  const ForwardResult64 sunk = forward_fp64(p, in.q, in.k, in.v);
  const ForwardResult32 naive = forward_naive(p, Precision::bf16, in.q, in.k, in.v);
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < p.seqlen_q; ++i) {
        const std::size_t lse = p.lse_index(b, h, i);
        const double sink = p.sink[h];
        if (plain.lse[lse] == kMinusInf) {
          EXPECT_EQ(sunk.lse[lse], sink) << "row " << i;
          EXPECT_EQ(naive.lse[lse], p.sink[h]) << "row " << i;
        } else {
          EXPECT_NEAR(sunk.lse[lse], std::log(std::exp(plain.lse[lse]) + std::exp(sink)), 1e-12) << "row " << i;
        }
        const double kept = 1 - std::exp(sink - sunk.lse[lse]);
        for (int d = 0; d < p.head_dim; ++d) {
          const std::size_t e = p.q_index(b, i, h) + d;
          EXPECT_NEAR(sunk.o[e], plain.o[e] * kept, 1e-12) << "row " << i;
          EXPECT_NEAR(naive.o[e], sunk.o[e], 0.05) << "row " << i;
        }
      }
    }
  }
}

// seqused: sequence b is the problem of its first seqused rows (the masks align to them); the unused
// query rows hold 0 in the results.
TEST(ForwardFp64, SequsedEqualsTheShorterProblem) {
  for (const bool varlen : {false, true}) {
    Problem p{.batch = 3, .seqlen_q = 5, .seqlen_k = 6, .heads_q = 2, .heads_kv = 1, .head_dim = 4, .causal = true,
              .seqused_q = {3, 0, 5}, .seqused_k = {2, 4, 0}};
    if (varlen) {
      p.cu_seqlens_q = {0, 5, 10, 15};
      p.cu_seqlens_k = {0, 6, 12, 18};
    }
    SCOPED_TRACE(to_string(p));
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed_trace(seed));
    const Inputs in = random_inputs(p, Precision::bf16, seed);
    const ForwardResult64 result = forward_fp64(p, in.q, in.k, in.v);
    for (int b = 0; b < p.batch; ++b) {
      Problem single{.seqlen_q = p.seqused_q[b], .seqlen_k = p.seqused_k[b], .heads_q = 2, .heads_kv = 1,
                     .head_dim = 4, .causal = true};
      const auto rows = [](const std::vector<float>& x, std::size_t first, std::size_t count) {
        return std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(first),
                                  x.begin() + static_cast<std::ptrdiff_t>(first + count));
      };
      const ForwardResult64 alone = forward_fp64(single, rows(in.q, p.q_index(b, 0, 0), single.q_elements()),
                                                 rows(in.k, p.kv_index(b, 0, 0), single.kv_elements()),
                                                 rows(in.v, p.kv_index(b, 0, 0), single.kv_elements()));
      for (int h = 0; h < p.heads_q; ++h) {
        for (int i = 0; i < p.seqlen_q; ++i) {
          const bool used = i < p.seqused_q[b];
          const double lse = result.lse[p.lse_index(b, h, i)];
          EXPECT_EQ(lse, used ? alone.lse[single.lse_index(0, h, i)] : 0.0) << "sequence " << b << " row " << i;
          for (int d = 0; d < p.head_dim; ++d) {
            const double o = result.o[p.q_index(b, i, h) + d];
            EXPECT_EQ(o, used ? alone.o[single.q_index(0, i, h) + d] : 0.0) << "sequence " << b << " row " << i;
          }
        }
      }
    }
  }
}

TEST(ForwardFp64, RejectsInconsistentArguments) {
  const Problem p{.seqlen_q = 2, .seqlen_k = 3, .heads_q = 3, .heads_kv = 2, .head_dim = 4};
  const std::vector<float> q(p.q_elements()), kv(p.kv_elements());
  EXPECT_THROW(forward_fp64(p, q, kv, kv), std::invalid_argument);  // 3 % 2 != 0
  const Problem mha{.seqlen_q = 2, .seqlen_k = 3, .head_dim = 4};
  const std::vector<float> short_q(mha.q_elements() - 1), good_kv(mha.kv_elements());
  EXPECT_THROW(forward_fp64(mha, short_q, good_kv, good_kv), std::invalid_argument);
  Problem varlen = mha;
  varlen.cu_seqlens_q = {0, 2};  // cu_seqlens_k missing
  EXPECT_THROW(validate(varlen), std::invalid_argument);
  varlen.cu_seqlens_k = {0, 3, 4};  // batch + 2 offsets
  EXPECT_THROW(validate(varlen), std::invalid_argument);
  Problem used = mha;
  used.seqused_q = {3};  // more rows than the span's 2
  EXPECT_THROW(validate(used), std::invalid_argument);
  used.seqused_q = {1, 1};  // batch + 1 entries
  EXPECT_THROW(validate(used), std::invalid_argument);
  used.seqused_q = {};
  used.seqused_k = {-1};
  EXPECT_THROW(validate(used), std::invalid_argument);
  Problem sunk = mha;
  sunk.sink = {0.0f, 1.0f};  // heads_q = 1
  EXPECT_THROW(validate(sunk), std::invalid_argument);
}

// The property tests below run over these configurations, which cover every option.
struct Config {
  const char* name;
  Problem problem;
};

const std::vector<Config>& configs() {
  static const std::vector<Config> all{
      {"plain", {.batch = 2, .seqlen_q = 17, .seqlen_k = 23, .heads_q = 2, .heads_kv = 2, .head_dim = 16}},
      {"causal_sq_lt_sk", {.batch = 2, .seqlen_q = 13, .seqlen_k = 29, .heads_q = 2, .heads_kv = 2, .head_dim = 16,
                           .causal = true}},
      {"causal_sq_gt_sk", {.batch = 1, .seqlen_q = 31, .seqlen_k = 11, .heads_q = 2, .heads_kv = 1, .head_dim = 16,
                           .causal = true}},
      {"window", {.batch = 1, .seqlen_q = 37, .seqlen_k = 37, .heads_q = 2, .heads_kv = 2, .head_dim = 16,
                  .window_left = 5, .window_right = 3}},
      {"softcap", {.batch = 1, .seqlen_q = 19, .seqlen_k = 21, .heads_q = 2, .heads_kv = 2, .head_dim = 16,
                   .scale = 0.5, .softcap = 3.0}},
      {"gqa", {.batch = 2, .seqlen_q = 9, .seqlen_k = 14, .heads_q = 6, .heads_kv = 2, .head_dim = 16}},
      {"mqa_causal", {.batch = 1, .seqlen_q = 15, .seqlen_k = 15, .heads_q = 4, .heads_kv = 1, .head_dim = 16,
                      .causal = true}},
      {"varlen_causal_window", {.batch = 5, .heads_q = 4, .heads_kv = 2, .head_dim = 16, .causal = true,
                                .window_left = 4, .cu_seqlens_q = {0, 7, 7, 12, 20, 23},
                                .cu_seqlens_k = {0, 9, 13, 13, 20, 31}}},
      {"varlen_softcap", {.batch = 3, .heads_q = 2, .heads_kv = 2, .head_dim = 16, .scale = 0.5, .softcap = 4.0,
                          .cu_seqlens_q = {0, 0, 4, 9}, .cu_seqlens_k = {0, 3, 3, 12}}},
  };
  return all;
}

// The configurations that have a property, for the tests that only apply to those.
template <typename Predicate>
std::vector<Config> configs_where(Predicate predicate) {
  std::vector<Config> selected;
  std::copy_if(configs().begin(), configs().end(), std::back_inserter(selected),
               [&](const Config& config) { return predicate(config.problem); });
  return selected;
}

std::string config_name(const ::testing::TestParamInfo<Config>& instance) { return instance.param.name; }

class ForwardProperty : public ::testing::TestWithParam<Config> {};
INSTANTIATE_TEST_SUITE_P(Configs, ForwardProperty, ::testing::ValuesIn(configs()), config_name);

class VarlenForward : public ::testing::TestWithParam<Config> {};
INSTANTIATE_TEST_SUITE_P(Configs, VarlenForward,
                         ::testing::ValuesIn(configs_where([](const Problem& p) { return p.is_varlen(); })),
                         config_name);

class GqaForward : public ::testing::TestWithParam<Config> {};
INSTANTIATE_TEST_SUITE_P(Configs, GqaForward,
                         ::testing::ValuesIn(configs_where([](const Problem& p) { return p.heads_kv < p.heads_q; })),
                         config_name);

TEST_P(ForwardProperty, RowFunctionMatchesFullForward) {
  const Problem& p = GetParam().problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  const ForwardResult64 full = forward_fp64(p, in.q, in.k, in.v);
  std::vector<double> o_row(p.head_dim);
  double lse = 0;
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < p.seq_q(b); ++i) {
        forward_fp64_row(p, in.q, in.k, in.v, b, h, i, o_row.data(), &lse);
        ASSERT_EQ(lse, full.lse[p.lse_index(b, h, i)]);
        ASSERT_TRUE(std::equal(o_row.begin(), o_row.end(), full.o.begin() + p.q_index(b, i, h)));
      }
    }
  }
  EXPECT_THROW(forward_fp64_row(p, in.q, in.k, in.v, p.batch, 0, 0, o_row.data(), &lse), std::out_of_range);
}

// Poisoning every key a row cannot see with NaN must leave that row's result untouched.
TEST_P(ForwardProperty, MaskedKeysHaveNoInfluence) {
  const Problem& p = GetParam().problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  const ForwardResult64 full = forward_fp64(p, in.q, in.k, in.v);
  std::vector<double> o_row(p.head_dim);
  double lse = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int sq = p.seq_q(b);
    const int sk = p.seq_k(b);
    for (int i = 0; i < sq; ++i) {
      std::vector<float> k = in.k;
      std::vector<float> v = in.v;
      for (int j = 0; j < sk; ++j) {
        if (key_visible(p, sq, sk, i, j)) continue;
        for (int h_kv = 0; h_kv < p.heads_kv; ++h_kv) {
          const auto first = static_cast<std::ptrdiff_t>(p.kv_index(b, j, h_kv));
          std::fill_n(k.begin() + first, p.head_dim, std::numeric_limits<float>::quiet_NaN());
          std::fill_n(v.begin() + first, p.head_dim, std::numeric_limits<float>::quiet_NaN());
        }
      }
      for (int h = 0; h < p.heads_q; ++h) {
        forward_fp64_row(p, in.q, k, v, b, h, i, o_row.data(), &lse);
        ASSERT_EQ(lse, full.lse[p.lse_index(b, h, i)]) << "batch " << b << " head " << h << " row " << i;
        ASSERT_TRUE(std::equal(o_row.begin(), o_row.end(), full.o.begin() + p.q_index(b, i, h)));
      }
    }
  }
}

// Each varlen sequence, run alone as a fixed-length problem of batch 1, gives the same rows.
TEST_P(VarlenForward, EqualsSeparateProblems) {
  const Problem& p = GetParam().problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  const ForwardResult64 varlen = forward_fp64(p, in.q, in.k, in.v);
  for (int b = 0; b < p.batch; ++b) {
    Problem single = p;
    single.batch = 1;
    single.seqlen_q = p.seq_q(b);
    single.seqlen_k = p.seq_k(b);
    single.cu_seqlens_q.clear();
    single.cu_seqlens_k.clear();
    // Sequence b is a contiguous block of rows in the varlen tensors.
    const auto q_first = in.q.begin() + static_cast<std::ptrdiff_t>(p.q_index(b, 0, 0));
    const auto k_first = in.k.begin() + static_cast<std::ptrdiff_t>(p.kv_index(b, 0, 0));
    const auto v_first = in.v.begin() + static_cast<std::ptrdiff_t>(p.kv_index(b, 0, 0));
    const std::vector<float> q(q_first, q_first + static_cast<std::ptrdiff_t>(single.q_elements()));
    const std::vector<float> k(k_first, k_first + static_cast<std::ptrdiff_t>(single.kv_elements()));
    const std::vector<float> v(v_first, v_first + static_cast<std::ptrdiff_t>(single.kv_elements()));
    const ForwardResult64 alone = forward_fp64(single, q, k, v);
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < single.seqlen_q; ++i) {
        ASSERT_EQ(alone.lse[single.lse_index(0, h, i)], varlen.lse[p.lse_index(b, h, i)]) << "sequence " << b;
        for (int d = 0; d < p.head_dim; ++d) {
          ASSERT_EQ(alone.o[single.q_index(0, i, h) + d], varlen.o[p.q_index(b, i, h) + d]) << "sequence " << b;
        }
      }
    }
  }
}

// GQA equals MHA whose K/V heads are the GQA heads repeated over each group.
TEST_P(GqaForward, EqualsMhaWithRepeatedKvHeads) {
  const Problem& p = GetParam().problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, Precision::bf16, seed);
  Problem mha = p;
  mha.heads_kv = p.heads_q;
  std::vector<float> k(mha.kv_elements()), v(mha.kv_elements());
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < p.seq_k(b); ++j) {
      for (int h = 0; h < p.heads_q; ++h) {
        const auto from = static_cast<std::ptrdiff_t>(p.kv_index(b, j, p.kv_head(h)));
        const auto to = static_cast<std::ptrdiff_t>(mha.kv_index(b, j, h));
        std::copy_n(in.k.begin() + from, p.head_dim, k.begin() + to);
        std::copy_n(in.v.begin() + from, p.head_dim, v.begin() + to);
      }
    }
  }
  const ForwardResult64 gqa = forward_fp64(p, in.q, in.k, in.v);
  const ForwardResult64 repeated = forward_fp64(mha, in.q, k, v);
  EXPECT_EQ(gqa.o, repeated.o);
  EXPECT_EQ(gqa.lse, repeated.lse);
}

// The naive forward makes two roundings of relative size u per output: P before P @ V (at most
// u * sum_j P_j |v_j| <= u max|v|) and O itself (at most u |O| <= u max|v|). fp32 arithmetic adds ~1e-7
// relative, so 3 u max|v| bounds the error with margin while catching any error of a larger order.
constexpr double kNaiveOUnitRoundoffs = 3.0;
// LSE is fp32 arithmetic on O(10) values (dot products of 16 terms, exp, log): errors ~1e-6.
constexpr double kNaiveLseTolerance = 1e-4;

class NaiveForward : public ::testing::TestWithParam<std::tuple<Precision, Config>> {};

INSTANTIATE_TEST_SUITE_P(Configs, NaiveForward,
                         ::testing::Combine(::testing::Values(Precision::bf16, Precision::fp16),
                                            ::testing::ValuesIn(configs())),
                         [](const auto& instance) {
                           const Precision precision = std::get<0>(instance.param);
                           return std::string(name(precision)) + "_" + std::get<1>(instance.param).name;
                         });

TEST_P(NaiveForward, AgreesWithFp64WithinFewUnitRoundoffs) {
  const auto& [precision, config] = GetParam();
  const Problem& p = config.problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, precision, seed);
  const ForwardResult64 exact = forward_fp64(p, in.q, in.k, in.v);
  const ForwardResult32 naive = forward_naive(p, precision, in.q, in.k, in.v);
  ASSERT_EQ(naive.o.size(), exact.o.size());
  ASSERT_EQ(naive.lse.size(), exact.lse.size());

  double max_v = 0;
  for (float x : in.v) max_v = std::max(max_v, static_cast<double>(std::fabs(x)));
  const double o_bound = kNaiveOUnitRoundoffs * unit_roundoff(precision) * max_v;
  for (std::size_t e = 0; e < exact.o.size(); ++e) {
    ASSERT_NEAR(naive.o[e], exact.o[e], o_bound) << "O element " << e;
  }
  for (std::size_t e = 0; e < exact.lse.size(); ++e) {
    if (exact.lse[e] == kMinusInf) {
      ASSERT_EQ(naive.lse[e], kMinusInf) << "LSE element " << e;
    } else {
      ASSERT_NEAR(naive.lse[e], exact.lse[e], kNaiveLseTolerance) << "LSE element " << e;
    }
  }
}

}  // namespace
}  // namespace flash4::ref
