// One forward test case run end to end on the GPU: random inputs, a poisoned output with guard regions,
// flash4_fwd through the C ABI, then O and LSE against the fp64 reference with the tolerance rule. Paged
// cases scatter k / v into a paged cache and compare against the reference on the gathered cache. With
// seqused, the unused rows must keep their poison and the used ones are compared.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "flash4/flash4.h"
#include "reference/reference.hpp"

namespace flash4::test {

struct ForwardCase {
  flash4_dtype dtype = FLASH4_DTYPE_BF16;
  int head_dim = 128;
  int batch = 1;  // fixed length (varlen: the sequences of varlen_q; batch only names the case)
  int seqlen_q = 128;
  int seqlen_k = 128;
  int heads_q = 2;
  int heads_kv = 2;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;
  std::vector<int> varlen_q = {};  // per-sequence lengths; empty: fixed length
  std::vector<int> varlen_k = {};
  int varlen_max_q = 0;  // > 0: the max_seqlen_q passed, a looser bound than the longest sequence
  // Rows each sequence uses (flash4_fwd_params.seqused_q / seqused_k); empty: all of them. Unused rows of o
  // and lse must keep their poison.
  std::vector<int> seqused_q = {};
  std::vector<int> seqused_k = {};
  bool packed_qkv = false;  // q/k/v as strided views of one (B, S, 3, H, D) buffer
  // > 0: k/v live in a paged cache of pages of this many rows (flash4_fwd_params.block_table), with spare
  // pages, junk in every row no sequence uses, NaN guard regions around it, and junk table entries past
  // each sequence's pages.
  int page_size = 0;
  bool shuffle_pages = false;  // the pages of the sequences in a random order (else ascending)
  bool bad_page = false;       // the longest sequence's first table entry outside [0, num_pages): zero keys

  std::string name() const;
};

// gtest prints parameters with this instead of dumping their bytes.
inline void PrintTo(const ForwardCase& c, std::ostream* os) { *os << c.name(); }

struct ForwardOutcome {
  ::testing::AssertionResult o = ::testing::AssertionSuccess();
  ::testing::AssertionResult lse = ::testing::AssertionSuccess();
  ::testing::AssertionResult guards = ::testing::AssertionSuccess();
};

ForwardOutcome run_forward_case(const ForwardCase& c);

}  // namespace flash4::test
