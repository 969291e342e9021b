// Forward kernel against the fp64 reference (tolerance rule of tests/tolerance.hpp) over the grid of
// issue 4: head dims x dtypes x masks x GQA/MQA x odd sequence lengths x Sq != Sk x varlen, with
// poisoned outputs inside guard regions, skewed varlen batches with seqused; and the same kernel on paged K/V
// caches (Paged/ForwardGrid).
// Kernels not compiled into this build are skipped.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "gpu/built_kernel_list.hpp"
#include "gpu/forward_case.hpp"
#include "gpu/gpu_available.hpp"

namespace flash4::test {
namespace {

std::vector<BuiltKernel> built_kernels() { return built_forward_kernels(); }

// The default case on one built kernel.
ForwardCase on_kernel(const BuiltKernel& kernel) {
  ForwardCase c;
  c.dtype = kernel.dtype;
  c.head_dim = kernel.head_dim;
  return c;
}

// Sequence lengths from the FA3/FA4 test suites: tails of every size around the 128-row tiles.
const std::vector<int> kOddLengths = {1, 17, 113, 239, 512, 799, 1023};

std::vector<ForwardCase> forward_grid() {
  std::vector<ForwardCase> cases;
  for (const BuiltKernel& kernel : built_kernels()) {
    const ForwardCase base = on_kernel(kernel);
    for (int length : kOddLengths) {
      for (bool causal : {false, true}) {
        ForwardCase c = base;
        c.seqlen_q = c.seqlen_k = length;
        c.causal = causal;
        cases.push_back(c);
      }
    }
    // Sq != Sk both ways, causal bottom-right (Sq > Sk leaves fully masked top rows).
    for (auto [sq, sk] : {std::pair{113, 203}, std::pair{239, 1}, std::pair{799, 3}, std::pair{1023, 1024},
                          std::pair{300, 128}}) {
      for (bool causal : {false, true}) {
        ForwardCase c = base;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.causal = causal;
        cases.push_back(c);
      }
    }
    // GQA 4:1 and MQA, batch 2.
    for (int heads_kv : {1, 2}) {
      ForwardCase c = base;
      c.batch = 2;
      c.heads_q = 8;
      c.heads_kv = heads_kv;
      c.seqlen_q = c.seqlen_k = 257;
      c.causal = heads_kv == 2;
      cases.push_back(c);
    }
    // Sliding windows, softcap.
    for (auto [left, right] : {std::pair{64, 0}, std::pair{100, 37}, std::pair{-1, 50}}) {
      ForwardCase c = base;
      c.seqlen_q = c.seqlen_k = 600;
      c.window_left = left;
      c.window_right = right;
      cases.push_back(c);
    }
    ForwardCase capped = base;
    capped.seqlen_q = capped.seqlen_k = 333;
    capped.softcap = 30.0f;
    capped.causal = true;
    cases.push_back(capped);
    // Varlen with an empty sequence, causal and not.
    for (bool causal : {false, true}) {
      ForwardCase c = base;
      c.varlen_q = {100, 0, 300, 7};
      c.varlen_k = {120, 5, 300, 0};
      c.heads_q = 4;
      c.heads_kv = 2;
      c.causal = causal;
      cases.push_back(c);
    }
    // More tiles than SMs, so every CTA runs several: the tile hand-out's slots are reused, the K/V ring
    // runs on across tiles, and (causal, varlen) tiles are claimed from the workspace counter. The varlen
    // batch has many short sequences under one long max_seqlen: most tiles lie past their sequence's end.
    for (bool causal : {false, true}) {
      ForwardCase c = base;
      c.batch = 4;
      c.heads_q = 12;
      c.heads_kv = 4;
      c.seqlen_q = c.seqlen_k = 640;
      c.causal = causal;
      cases.push_back(c);
    }
    ForwardCase many = base;
    many.heads_q = many.heads_kv = 3;
    many.causal = true;
    for (int b = 0; b < 40; ++b) {
      many.varlen_q.push_back(b == 7 ? 900 : (37 * b + 11) % 230);
      many.varlen_k.push_back(b == 7 ? 900 : (53 * b + 5) % 260);
    }
    cases.push_back(many);
    // Non-contiguous q/k/v: strided views of one packed qkv buffer.
    ForwardCase packed = base;
    packed.batch = 2;
    packed.seqlen_q = packed.seqlen_k = 200;
    packed.packed_qkv = true;
    cases.push_back(packed);
  }
  // Long sequences for the main configuration only (the CPU reference is the slow part).
  for (const BuiltKernel& kernel : built_kernels()) {
    if (kernel.dtype != FLASH4_DTYPE_BF16 || kernel.head_dim != 128) continue;
    for (int length : {2048, 4224}) {
      ForwardCase c;
      c.head_dim = 128;
      c.seqlen_q = c.seqlen_k = length;
      c.heads_q = c.heads_kv = 1;
      c.causal = length == 4224;
      cases.push_back(c);
    }
    // A skewed varlen batch: one long sequence among many short and empty ones, so that almost every tile of
    // the batch x heads x longest-sequence grid lies past its sequence's end and the forward walks the
    // prepare kernel's list of the others (kernels/common/varlen_tiles.hpp). With seqused the used rows
    // decide the tiles, some sequences using none.
    for (bool causal : {false, true}) {
      for (bool used : {false, true}) {
        ForwardCase c;
        c.batch = 101;  // the sequences below: named _b101
        c.heads_q = 4;
        c.heads_kv = 2;
        c.causal = causal;
        for (int b = 0; b < c.batch; ++b) {
          const int length = b == 37 ? 1500 : b % 9 == 0 ? 0 : (29 * b) % 100 + 1;
          c.varlen_q.push_back(length);
          c.varlen_k.push_back(b % 13 == 5 ? length + 40 : length);
          if (used) {
            c.seqused_q.push_back(b % 11 == 3 ? 0 : length - length / 3);
            c.seqused_k.push_back(c.varlen_k.back() - c.varlen_k.back() / 5);
          }
        }
        cases.push_back(c);
      }
    }
    // More sequences than the prepare kernel has threads, and a max_seqlen_q (a loose bound) with more block
    // counts than it has threads: its passes over the batch and over the counts each take several rounds.
    ForwardCase wide;
    wide.batch = 1300;
    wide.heads_q = wide.heads_kv = 2;
    wide.causal = true;
    for (int b = 0; b < wide.batch; ++b) {
      wide.varlen_q.push_back(b % 7 == 0 ? 0 : 1 + (31 * b) % 128);
      wide.varlen_k.push_back(1 + (17 * b) % 128);
    }
    wide.varlen_max_q = 80000;  // the canonical bound is then total_q, about 71K rows: over 1024 counts of 64 rows
    cases.push_back(wide);
  }
  return cases;
}

// The forward on a paged K/V cache (flash4_fwd_params.block_table), against the reference on the gathered
// cache: page sizes that divide block_n, that it divides, and that do neither (48), ragged varlen lengths with
// empty sequences, causal and windows, GQA and MQA, shuffled pages, a table entry out of range (its keys read
// as zeros), junk in the rows and table entries no sequence uses, NaN guard regions around the cache.
// Ragged lengths: empty sequences, ends inside a page and on a page boundary, more than one key block.
const std::vector<int> kRaggedQ = {37, 0, 129, 64, 300, 1};
const std::vector<int> kRaggedK = {100, 5, 0, 256, 517, 48};

std::vector<ForwardCase> paged_grid() {
  std::vector<ForwardCase> cases;
  for (const BuiltKernel& kernel : built_kernels()) {
    ForwardCase base = on_kernel(kernel);
    base.varlen_q = kRaggedQ;
    base.varlen_k = kRaggedK;
    base.heads_q = 4;
    base.heads_kv = 2;
    for (int page_size : {16, 48, 64, 128, 256}) {
      for (bool causal : {false, true}) {
        ForwardCase c = base;
        c.page_size = page_size;
        c.causal = causal;
        c.shuffle_pages = true;
        cases.push_back(c);
      }
    }
    ForwardCase ascending = base;  // pages in order: the layout a contiguous cache cut into pages has
    ascending.page_size = 64;
    cases.push_back(ascending);
    for (auto [left, right] : {std::pair{40, 0}, std::pair{100, 37}}) {
      ForwardCase c = base;
      c.page_size = 16;
      c.shuffle_pages = true;
      c.window_left = left;
      c.window_right = right;
      c.causal = right == 0;
      cases.push_back(c);
    }
    ForwardCase mqa = base;  // MQA with softcap
    mqa.heads_q = 8;
    mqa.heads_kv = 1;
    mqa.page_size = 32;
    mqa.shuffle_pages = true;
    mqa.softcap = 30.0f;
    cases.push_back(mqa);
    ForwardCase bad = base;
    bad.page_size = 16;
    bad.shuffle_pages = true;
    bad.bad_page = true;
    cases.push_back(bad);
    ForwardCase fixed = on_kernel(kernel);  // fixed length: every sequence has seqlen_k keys
    fixed.batch = 3;
    fixed.seqlen_q = 200;
    fixed.seqlen_k = 333;
    fixed.causal = true;
    fixed.page_size = 64;
    fixed.shuffle_pages = true;
    cases.push_back(fixed);
  }
  return cases;
}

class ForwardGrid : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardGrid, MatchesReference) {
  FLASH4_REQUIRE_GPU();
  const ForwardOutcome outcome = run_forward_case(GetParam());
  EXPECT_TRUE(outcome.o);
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.guards);
}

std::string case_name(const ::testing::TestParamInfo<ForwardCase>& info) {
  std::string name = info.param.name();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Sm90, ForwardGrid, ::testing::ValuesIn(forward_grid()), case_name);
INSTANTIATE_TEST_SUITE_P(Paged, ForwardGrid, ::testing::ValuesIn(paged_grid()), case_name);

}  // namespace
}  // namespace flash4::test
