// The kvcache reference: a model of the append and of paged addressing, then forward_fp64 / forward_naive.
#include "reference/kvcache.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "reference/check_inputs.hpp"

namespace flash4::ref {
namespace {

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument("flash4::ref::KvcacheProblem: " + message);
}

// The varlen forward problem: sequence b has seqlen_q queries and keys(b) keys.
Problem forward_problem(const KvcacheProblem& p) {
  Problem f;
  f.batch = p.batch;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.head_dim_v = p.dim_v();
  f.scale = p.scale;
  f.causal = p.causal;
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  f.softcap = p.softcap;
  f.cu_seqlens_q = {0};
  f.cu_seqlens_k = {0};
  for (int b = 0; b < p.batch; ++b) {
    f.cu_seqlens_q.push_back(f.cu_seqlens_q.back() + p.seqlen_q);
    f.cu_seqlens_k.push_back(f.cu_seqlens_k.back() + p.keys(b));
  }
  return f;
}

// Varlen LSE (heads_q, batch * seqlen_q) to the call's (batch, heads_q, seqlen_q).
template <class Real>
std::vector<Real> call_lse_layout(const KvcacheProblem& p, const std::vector<Real>& varlen_lse) {
  std::vector<Real> lse(p.lse_elements());
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.seqlen_q;
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < p.seqlen_q; ++i) {
        lse[(static_cast<std::size_t>(b) * p.heads_q + h) * p.seqlen_q + i] =
            varlen_lse[h * rows + static_cast<std::size_t>(b) * p.seqlen_q + i];
      }
    }
  }
  return lse;
}

void check_inputs(const KvcacheProblem& p, const KvcacheInputs& in) {
  validate(p);
  detail::check_size(in.q, p.q_elements(), "q");
  detail::check_size(in.k_cache, p.k_cache_elements(), "k_cache");
  detail::check_size(in.v_cache, p.v_cache_elements(), "v_cache");
  detail::check_size(in.k_new, p.k_new_elements(), "k_new");
  detail::check_size(in.v_new, p.v_new_elements(), "v_new");
}

// The appended cache gathered into a forward problem, with inputs rounded by `round` (identity for fp64).
template <class Round>
GatheredKv appended_and_gathered(const KvcacheProblem& p, const KvcacheInputs& in, Round round) {
  std::vector<float> k_cache = round(in.k_cache);
  std::vector<float> v_cache = round(in.v_cache);
  append_new_rows(p, k_cache, v_cache, round(in.k_new), round(in.v_new));
  return gather_keys(p, k_cache, v_cache);
}

}  // namespace

std::size_t KvcacheProblem::q_elements() const {
  return static_cast<std::size_t>(batch) * seqlen_q * heads_q * head_dim;
}
std::size_t KvcacheProblem::o_elements() const {
  return static_cast<std::size_t>(batch) * seqlen_q * heads_q * dim_v();
}
std::size_t KvcacheProblem::k_new_elements() const {
  return static_cast<std::size_t>(batch) * seqlen_new * heads_kv * head_dim;
}
std::size_t KvcacheProblem::v_new_elements() const {
  return static_cast<std::size_t>(batch) * seqlen_new * heads_kv * dim_v();
}
std::size_t KvcacheProblem::k_cache_elements() const {
  const std::size_t slots = paged() ? num_pages : cache_batch;
  const std::size_t rows = paged() ? page_size : cache_seqlen;
  return slots * rows * heads_kv * head_dim;
}
std::size_t KvcacheProblem::v_cache_elements() const { return k_cache_elements() / head_dim * dim_v(); }
std::size_t KvcacheProblem::lse_elements() const { return static_cast<std::size_t>(batch) * heads_q * seqlen_q; }

std::size_t KvcacheProblem::cache_row(int b, int key, int h) const {
  std::size_t slot = 0;
  std::size_t row = 0;
  std::size_t rows_per_slot = 0;
  if (paged()) {
    slot = block_table[static_cast<std::size_t>(b) * max_pages_per_seq + key / page_size];
    row = key % page_size;
    rows_per_slot = page_size;
  } else {
    slot = cache_batch_idx.empty() ? b : cache_batch_idx[b];
    row = key;
    rows_per_slot = cache_seqlen;
  }
  return (slot * rows_per_slot + row) * heads_kv + h;
}

void validate(const KvcacheProblem& p) {
  require(p.batch >= 1 && p.seqlen_q >= 1 && p.seqlen_new >= 0, "batch and seqlen_q must be >= 1, seqlen_new >= 0");
  require(p.heads_q >= 1 && p.heads_kv >= 1 && p.heads_q % p.heads_kv == 0,
          "heads_q must be a positive multiple of heads_kv");
  require(p.head_dim >= 1 && p.head_dim_v >= 0, "head_dim must be >= 1, head_dim_v >= 1 or 0 (equal to head_dim)");
  require(p.softcap >= 0 && p.window_left >= -1 && p.window_right >= -1, "softcap >= 0, windows >= -1");
  if (p.paged()) {
    require(p.num_pages >= 1 && p.max_pages_per_seq >= 1, "num_pages and max_pages_per_seq must be >= 1");
    require(p.block_table.size() == static_cast<std::size_t>(p.batch) * p.max_pages_per_seq,
            "block_table must hold batch * max_pages_per_seq entries");
    require(p.cache_batch_idx.empty(), "cache_batch_idx must be empty with a paged cache");
  } else {
    require(p.cache_batch >= 1 && p.cache_seqlen >= 0, "cache_batch >= 1 and cache_seqlen >= 0");
    require(p.cache_batch_idx.empty() || p.cache_batch_idx.size() == static_cast<std::size_t>(p.batch),
            "cache_batch_idx must be empty or hold batch entries");
    for (int index : p.cache_batch_idx) require(index >= 0 && index < p.cache_batch, "cache_batch_idx out of range");
    require(!p.cache_batch_idx.empty() || p.cache_batch >= p.batch, "cache_batch must be >= batch");
  }
  require(p.cache_seqlens.empty() || p.cache_seqlens.size() == static_cast<std::size_t>(p.batch),
          "cache_seqlens must be empty or hold batch entries");
  require(!p.cache_seqlens.empty() || p.seqlen_new == 0, "appending needs cache_seqlens");
  for (int b = 0; b < p.batch; ++b) {
    require(p.cached(b) >= 0 && p.keys(b) <= p.capacity(),
            "cache_seqlens[" + std::to_string(b) + "] + seqlen_new must lie in [0, capacity]");
    if (!p.paged()) continue;
    for (int page = 0; page * p.page_size < p.keys(b); ++page) {
      const int entry = p.block_table[static_cast<std::size_t>(b) * p.max_pages_per_seq + page];
      require(entry >= 0 && entry < p.num_pages, "block_table entry of sequence " + std::to_string(b) + ", page " +
                                                     std::to_string(page) + " is outside [0, num_pages)");
    }
  }
}

void append_new_rows(const KvcacheProblem& p, std::span<float> k_cache, std::span<float> v_cache,
                     std::span<const float> k_new, std::span<const float> v_new) {
  validate(p);
  const std::size_t d = p.head_dim, dv = p.dim_v();
  for (int b = 0; b < p.batch; ++b) {
    for (int t = 0; t < p.seqlen_new; ++t) {
      for (int h = 0; h < p.heads_kv; ++h) {
        const std::size_t from = (static_cast<std::size_t>(b) * p.seqlen_new + t) * p.heads_kv + h;
        const std::size_t to = p.cache_row(b, p.cached(b) + t, h);
        std::copy_n(k_new.begin() + from * d, d, k_cache.begin() + to * d);
        std::copy_n(v_new.begin() + from * dv, dv, v_cache.begin() + to * dv);
      }
    }
  }
}

GatheredKv gather_keys(const KvcacheProblem& p, std::span<const float> k_cache, std::span<const float> v_cache) {
  validate(p);
  GatheredKv gathered{forward_problem(p), {}, {}};
  const std::size_t d = p.head_dim, dv = p.dim_v();
  gathered.k.reserve(gathered.problem.kv_elements());
  gathered.v.reserve(gathered.problem.v_elements());
  for (int b = 0; b < p.batch; ++b) {
    for (int key = 0; key < p.keys(b); ++key) {
      for (int h = 0; h < p.heads_kv; ++h) {
        const std::size_t at = p.cache_row(b, key, h);
        gathered.k.insert(gathered.k.end(), k_cache.begin() + at * d, k_cache.begin() + (at + 1) * d);
        gathered.v.insert(gathered.v.end(), v_cache.begin() + at * dv, v_cache.begin() + (at + 1) * dv);
      }
    }
  }
  return gathered;
}

ForwardResult64 kvcache_fp64(const KvcacheProblem& p, const KvcacheInputs& in) {
  check_inputs(p, in);
  const auto copy = [](std::span<const float> t) { return std::vector<float>(t.begin(), t.end()); };
  const GatheredKv g = appended_and_gathered(p, in, copy);
  ForwardResult64 result = forward_fp64(g.problem, in.q, g.k, g.v);
  result.lse = call_lse_layout(p, result.lse);
  return result;
}

ForwardResult32 kvcache_naive(const KvcacheProblem& p, Precision precision, const KvcacheInputs& in) {
  check_inputs(p, in);
  const auto rounded = [precision](std::span<const float> t) { return round_all(precision, t); };
  const GatheredKv g = appended_and_gathered(p, in, rounded);
  ForwardResult32 result = forward_naive(g.problem, precision, in.q, g.k, g.v);
  result.lse = call_lse_layout(p, result.lse);
  return result;
}

}  // namespace flash4::ref
