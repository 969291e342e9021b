// The paged K/V layout of the forward (flash4_fwd_params with block_table), for the CPU reference: the
// reference computes on dense k / v, so a paged cache is gathered into the contiguous equivalent first.
//
// A cache tensor is (num_pages, page_size, heads_kv, head_dim) floats; key j of sequence b lives in page
// block_table[b * table_stride + j / page_size], row j % page_size. A table entry outside [0, num_pages)
// gathers zero rows, which is what the kernel reads for such a page (flash4.h).
#pragma once

#include <span>
#include <vector>

#include "reference/reference.hpp"

namespace flash4::ref {

struct PagedLayout {
  int page_size = 16;
  int num_pages = 1;
  int table_stride = 0;          // entries between consecutive sequences' rows
  std::vector<int> block_table;  // batch rows of table_stride entries

  std::size_t cache_elements(int heads_kv, int head_dim) const;
};

// Sequence b's keys of `problem` (its seq_k(b) rows, fixed length or varlen), gathered from `cache` into the
// dense (rows_k(), heads_kv, head_dim) layout forward_fp64 reads. Throws std::invalid_argument naming the
// field when the layout cannot hold the problem (a row of the table too short, a cache of the wrong size).
std::vector<float> gather_pages(const Problem& problem, const PagedLayout& layout, std::span<const float> cache);

}  // namespace flash4::ref
