// flash4-bench's cases: the anchors' sweep, single and varlen cases, and the FLOP and byte counts.
#include <gtest/gtest.h>

#include <vector>

#include "cases.hpp"

namespace flash4::bench {
namespace {

// Visible (query, key) pairs of one sequence by the reference's own mask rule, one pair at a time.
double brute_force_pairs(int sq, int sk, bool causal, int left, int right) {
  ref::Problem problem;
  problem.causal = causal;
  problem.window_left = left;
  problem.window_right = right;
  double pairs = 0;
  for (int i = 0; i < sq; ++i) {
    for (int j = 0; j < sk; ++j) pairs += ref::key_visible(problem, sq, sk, i, j) ? 1 : 0;
  }
  return pairs;
}

TEST(BenchCases, TheAnchorsSweep) {
  Options o;
  o.all = true;
  o.modes = {Mode::fwd, Mode::bwd};
  const std::vector<Case> list = cases(o);
  ASSERT_EQ(list.size(), 2u * 2 * 2 * 6);  // modes x D {64, 128} x causal x N {512 .. 16K}
  for (const Case& c : list) {
    EXPECT_EQ(c.batch * c.seqlen_q, 16384);
    EXPECT_EQ(c.seqlen_q, c.seqlen_k);
    EXPECT_EQ(c.heads_q * c.head_dim, 2048);
    EXPECT_EQ(c.heads_kv, c.heads_q);
    EXPECT_FALSE(c.is_varlen());
  }
  EXPECT_EQ(list.front().mode, Mode::fwd);
  EXPECT_EQ(list.back().mode, Mode::bwd);
  o.head_dim = 256;
  for (const Case& c : cases(o)) EXPECT_EQ(c.head_dim, 256);
}

TEST(BenchCases, OptionsReachEveryCase) {
  Options o;
  o.all = true;
  o.window_left = 128;
  o.window_right = 0;
  o.softcap = 30;
  o.deterministic = true;
  o.modes = {Mode::fwd, Mode::bwd};
  for (const Case& c : cases(o)) {
    EXPECT_EQ(c.window_left, 128);
    EXPECT_EQ(c.window_right, 0);
    EXPECT_EQ(c.softcap, 30);
    EXPECT_EQ(c.deterministic, c.mode == Mode::bwd);  // deterministic is a backward setting
  }
}

TEST(BenchCases, OneCaseFromTheFlags) {
  Options o;
  std::vector<Case> list = cases(o);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].head_dim, 128);
  EXPECT_EQ(list[0].seqlen_q, 4096);
  EXPECT_EQ(list[0].batch, 4);
  EXPECT_EQ(list[0].heads_q, 16);
  o.seqlen_q = 100;
  o.seqlen_k = 300;
  o.heads_q = 8;
  o.heads_kv = 2;
  list = cases(o);
  EXPECT_EQ(list[0].seqlen_q, 100);
  EXPECT_EQ(list[0].seqlen_k, 300);
  EXPECT_EQ(list[0].heads_kv, 2);
  EXPECT_EQ(list[0].rows_q(), 163u * 100);  // B = 16384 / Sq
}

TEST(BenchCases, Varlen) {
  Options o;
  o.varlen_q = {100, 0, 513};
  const std::vector<Case> list = cases(o);
  ASSERT_EQ(list.size(), 1u);
  const Case& c = list[0];
  EXPECT_TRUE(c.is_varlen());
  EXPECT_EQ(c.batch, 3);
  EXPECT_EQ(c.seqlen_q, 513);
  EXPECT_EQ(c.varlen_k, c.varlen_q);  // key lengths default to the query lengths
  EXPECT_EQ(c.rows_q(), 613u);
  const ref::Problem problem = to_problem(c);
  EXPECT_EQ(problem.cu_seqlens_q, (std::vector<int>{0, 100, 100, 613}));
  EXPECT_NO_THROW(ref::validate(problem));
  // FLOPs and bytes count the sequences, not batch x the longest.
  EXPECT_DOUBLE_EQ(flops(c), 4.0 * 16 * 128 * (100.0 * 100 + 513.0 * 513));
  Case padded = c;
  padded.varlen_q = padded.varlen_k = {};
  EXPECT_LT(bytes_moved(c), bytes_moved(padded));
}

TEST(BenchCases, FlopsFollowTheAnchors) {
  Case c{Mode::fwd, ref::Precision::bf16, 128, false, 4, 4096, 4096, 16, 16};
  EXPECT_DOUBLE_EQ(flops(c), 4.0 * 4 * 16 * 4096 * 4096 * 128);
  c.causal = true;
  EXPECT_DOUBLE_EQ(flops(c), 2.0 * 4 * 16 * 4096 * 4096 * 128);
  c.mode = Mode::bwd;
  EXPECT_DOUBLE_EQ(flops(c), 2.5 * 2.0 * 4 * 16 * 4096 * 4096 * 128);
}

TEST(BenchCases, VisiblePairsFollowTheReferenceMask) {
  for (const auto& [sq, sk] : {std::pair{1, 1}, {7, 7}, {13, 40}, {40, 13}, {64, 0}}) {
    for (bool causal : {false, true}) {
      for (int left : {-1, 0, 3, 100}) {
        for (int right : {-1, 0, 5}) {
          if (causal && right > 0) continue;  // the C ABI refuses it
          EXPECT_EQ(visible_pairs(sq, sk, causal, left, right), brute_force_pairs(sq, sk, causal, left, right))
              << sq << "x" << sk << " causal " << causal << " window " << left << "," << right;
        }
      }
    }
  }
}

TEST(BenchCases, AWindowCountsTheVisiblePairs) {
  Case c{Mode::fwd, ref::Precision::bf16, 64, true, 2, 50, 70, 4, 2};
  c.window_left = 9;
  EXPECT_DOUBLE_EQ(flops(c), 4.0 * 4 * 64 * 2 * brute_force_pairs(50, 70, true, 9, -1));
}

}  // namespace
}  // namespace flash4::bench
