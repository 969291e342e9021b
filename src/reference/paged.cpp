#include "reference/paged.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace flash4::ref {

std::size_t PagedLayout::cache_elements(int heads_kv, int head_dim) const {
  return static_cast<std::size_t>(num_pages) * page_size * heads_kv * head_dim;
}

std::vector<float> gather_pages(const Problem& problem, const PagedLayout& layout, std::span<const float> cache) {
  validate(problem);
  if (layout.page_size < 1 || layout.num_pages < 1) {
    throw std::invalid_argument("page_size and num_pages must be >= 1");
  }
  const std::size_t row_elements = static_cast<std::size_t>(problem.heads_kv) * problem.head_dim;
  if (cache.size() != layout.cache_elements(problem.heads_kv, problem.head_dim)) {
    throw std::invalid_argument("cache holds " + std::to_string(cache.size()) + " elements, not num_pages * page_size * " +
                                "heads_kv * head_dim = " +
                                std::to_string(layout.cache_elements(problem.heads_kv, problem.head_dim)));
  }
  std::vector<float> dense(problem.kv_elements(), 0.0f);
  for (int b = 0; b < problem.batch; ++b) {
    const int pages = (problem.seq_k(b) + layout.page_size - 1) / layout.page_size;
    const std::size_t row_end = static_cast<std::size_t>(b) * layout.table_stride + pages;
    if (pages > layout.table_stride && problem.batch > 1) {
      throw std::invalid_argument("table_stride " + std::to_string(layout.table_stride) + " is shorter than sequence " +
                                  std::to_string(b) + "'s " + std::to_string(pages) + " pages");
    }
    if (row_end > layout.block_table.size()) {
      throw std::invalid_argument("block_table has " + std::to_string(layout.block_table.size()) +
                                  " entries; sequence " + std::to_string(b) + " needs " + std::to_string(row_end));
    }
    for (int j = 0; j < problem.seq_k(b); ++j) {
      const int page = layout.block_table[static_cast<std::size_t>(b) * layout.table_stride + j / layout.page_size];
      if (page < 0 || page >= layout.num_pages) continue;  // zero rows, as the kernel reads them
      const std::size_t source = (static_cast<std::size_t>(page) * layout.page_size + j % layout.page_size) * row_elements;
      std::copy_n(cache.begin() + static_cast<std::ptrdiff_t>(source), row_elements,
                  dense.begin() + static_cast<std::ptrdiff_t>(problem.kv_index(b, j, 0)));
    }
  }
  return dense;
}

}  // namespace flash4::ref
