#include "gpu/kvcache_case.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

#include "reference/kvcache.hpp"
#include "tolerance.hpp"

namespace flash4::test {
namespace {

constexpr std::size_t kGuard = 2048;              // poisoned elements on each side of every buffer written
constexpr std::uint16_t kGuard16 = 0xFFFF;        // a NaN in bf16 and fp16
constexpr std::uint32_t kGuard32 = 0xFFFFFFFFu;   // a NaN in fp32
// O and LSE start as finite values no correct output comes near (bf16 ~1.3e7, fp16 ~15.6 against outputs
// bounded by max |v| ~ 5; LSE 1e30): a row the kernel skips fails the tolerance, and a skipped row of a bad
// sequence is not mistaken for the NaN it must write.
constexpr std::uint16_t kUnwritten16 = 0x4B4B;
constexpr float kUnwrittenLse = 1e30f;

ref::Precision precision_of(flash4_dtype dtype) {
  return dtype == FLASH4_DTYPE_BF16 ? ref::Precision::bf16 : ref::Precision::fp16;
}

// A device array of `inner` elements of T between two guard regions; `fill` for the inner elements.
template <class T>
class GuardedArray {
 public:
  GuardedArray(const std::vector<T>& inner, T guard) : inner_(inner.size()), guard_(guard) {
    std::vector<T> all(inner_ + 2 * kGuard, guard);
    std::copy(inner.begin(), inner.end(), all.begin() + kGuard);
    if (cudaMalloc(&base_, all.size() * sizeof(T)) != cudaSuccess) base_ = nullptr;
    if (base_ != nullptr) cudaMemcpy(base_, all.data(), all.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~GuardedArray() { cudaFree(base_); }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;

  T* data() const { return base_ == nullptr ? nullptr : base_ + kGuard; }
  // The inner elements; `guards_ok` turns false when a guard element changed.
  std::vector<T> read(bool& guards_ok) const {
    std::vector<T> all(inner_ + 2 * kGuard);
    cudaMemcpy(all.data(), base_, all.size() * sizeof(T), cudaMemcpyDeviceToHost);
    for (std::size_t i = 0; i < kGuard; ++i) guards_ok &= all[i] == guard_ && all[kGuard + inner_ + i] == guard_;
    return {all.begin() + kGuard, all.begin() + kGuard + inner_};
  }

 private:
  std::size_t inner_;
  T guard_;
  T* base_ = nullptr;
};

std::vector<std::uint16_t> to_bits(ref::Precision precision, const std::vector<float>& values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = ref::to_bits(precision, values[i]);
  return bits;
}

flash4_strides contiguous(std::int64_t seq, std::int64_t heads, std::int64_t row) {
  return {seq * heads * row, heads * row, row};
}

// Rows of `dim` elements spread to rows of dim + pad, the pad elements `poison`.
std::vector<std::uint16_t> padded(const std::vector<std::uint16_t>& dense, int dim, int pad, std::uint16_t poison) {
  std::vector<std::uint16_t> rows;
  rows.reserve(dense.size() / dim * (dim + pad));
  for (std::size_t start = 0; start < dense.size(); start += dim) {
    rows.insert(rows.end(), dense.begin() + start, dense.begin() + start + dim);
    rows.insert(rows.end(), pad, poison);
  }
  return rows;
}

// The inverse of padded(); `pads_ok` turns false when a pad element is no longer `poison`.
std::vector<std::uint16_t> unpadded(const std::vector<std::uint16_t>& rows, int dim, int pad, std::uint16_t poison,
                                    bool& pads_ok) {
  std::vector<std::uint16_t> dense;
  dense.reserve(rows.size() / (dim + pad) * dim);
  for (std::size_t start = 0; start < rows.size(); start += dim + pad) {
    dense.insert(dense.end(), rows.begin() + start, rows.begin() + start + dim);
    pads_ok &= std::all_of(rows.begin() + start + dim, rows.begin() + start + dim + pad,
                           [poison](std::uint16_t x) { return x == poison; });
  }
  return dense;
}

// The reference problem (valid device values only) for the case.
ref::KvcacheProblem reference_problem(const KvcacheCase& c, std::mt19937_64& engine) {
  ref::KvcacheProblem p;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_new = c.seqlen_new;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.head_dim_v = c.head_dim_v;
  p.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  p.cache_seqlens = c.cache_seqlens;
  if (c.page_size > 0) {
    p.page_size = c.page_size;
    p.max_pages_per_seq = (c.capacity + c.page_size - 1) / c.page_size;
    p.num_pages = c.batch * p.max_pages_per_seq + 3;
    std::vector<int> pages(p.num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), engine);
    p.block_table.resize(static_cast<std::size_t>(c.batch) * p.max_pages_per_seq);
    int next = 0;
    for (int b = 0; b < c.batch; ++b) {
      const int used = (p.keys(b) + c.page_size - 1) / c.page_size;
      for (int page = 0; page < p.max_pages_per_seq; ++page) {
        // Entries past the pages a sequence uses are never looked at: make them unusable.
        const int unused = page % 2 == 0 ? -1 : p.num_pages + 1000;
        p.block_table[static_cast<std::size_t>(b) * p.max_pages_per_seq + page] = page < used ? pages[next++] : unused;
      }
    }
  } else {
    p.cache_seqlen = c.capacity;
    p.cache_batch = c.batch + (c.cache_batch_idx ? 2 : 0);
    if (c.cache_batch_idx) {
      for (int b = 0; b < c.batch; ++b) p.cache_batch_idx.push_back(p.cache_batch - 1 - b);
    }
  }
  ref::validate(p);
  return p;
}

// Sequence s's appends alone (what the kernel writes for it).
void append_sequence(const ref::KvcacheProblem& p, int s, std::vector<float>& k_cache, std::vector<float>& v_cache,
                     const std::vector<float>& k_new, const std::vector<float>& v_new) {
  ref::KvcacheProblem one = p;
  one.batch = 1;
  one.cache_seqlens = {p.cached(s)};
  if (p.paged()) {
    const auto row = p.block_table.begin() + static_cast<std::ptrdiff_t>(s) * p.max_pages_per_seq;
    one.block_table.assign(row, row + p.max_pages_per_seq);
  } else {
    one.cache_batch_idx = {p.cache_batch_idx.empty() ? s : p.cache_batch_idx[s]};
  }
  const auto slice = [&](const std::vector<float>& t, std::size_t per_sequence) {
    return std::vector<float>(t.begin() + s * per_sequence, t.begin() + (s + 1) * per_sequence);
  };
  ref::append_new_rows(one, k_cache, v_cache, slice(k_new, one.k_new_elements()), slice(v_new, one.v_new_elements()));
}

// Whether sequence s's appends happen: not for a sequence whose cache_seqlens or cache_batch_idx is bad.
bool appends(const KvcacheCase& c, int s) {
  return !(s == c.bad_sequence && c.bad != BadValue::none && c.bad != BadValue::page_out_of_range);
}

// The elements of `all` outside sequence `skip`'s slice of `per_sequence` elements (all of them for skip < 0).
template <class T>
std::vector<T> without_sequence(const std::vector<T>& all, std::size_t per_sequence, int skip) {
  if (skip < 0) return all;
  std::vector<T> kept(all.begin(), all.begin() + skip * per_sequence);
  kept.insert(kept.end(), all.begin() + (skip + 1) * per_sequence, all.end());
  return kept;
}

const char* bad_name(BadValue bad) {
  switch (bad) {
    case BadValue::none: return "";
    case BadValue::seqlen_past_capacity: return "_bad_seqlen_past_capacity";
    case BadValue::negative_seqlen: return "_bad_negative_seqlen";
    case BadValue::batch_idx_out_of_range: return "_bad_batch_idx";
    case BadValue::page_out_of_range: return "_bad_page";
  }
  return "_bad";
}

}  // namespace

std::string KvcacheCase::name() const {
  std::ostringstream s;
  s << (dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16") << "_d" << head_dim;
  if (head_dim_v != 0) s << "_dv" << head_dim_v;
  if (pad > 0) s << "_pad" << pad;
  s << "_b" << batch << "_sq" << seqlen_q
    << "_new" << seqlen_new << "_h" << heads_q << "x" << heads_kv << "_cap" << capacity;
  if (page_size > 0) s << "_page" << page_size;
  if (!cache_seqlens.empty()) {
    s << "_lens";
    for (int len : cache_seqlens) s << "_" << len;
  }
  if (causal) s << "_causal";
  if (window_left >= 0 || window_right >= 0) s << "_win" << window_left << "_" << window_right;
  if (softcap > 0) s << "_softcap";
  s << "_splits" << num_splits << (cache_batch_idx ? "_batchidx" : "") << (lse ? "" : "_nolse") << (own_stream ? "_stream" : "") << bad_name(bad);
  return s.str();
}

KvcacheOutcome run_kvcache_case(const KvcacheCase& c) {
  KvcacheOutcome outcome;
  const ref::Precision precision = precision_of(c.dtype);
  const std::uint64_t seed = ref::fresh_seed();
  std::mt19937_64 engine(seed);
  const std::string trace = c.name() + " (seed " + std::to_string(seed) + ", replay with FLASH4_SEED)";
  const ref::KvcacheProblem problem = reference_problem(c, engine);
  const bool paged = problem.paged();

  // Inputs, the reference's outputs and the cache it expects.
  const std::vector<float> q = ref::random_tensor(problem.q_elements(), precision, seed + 1);
  const std::vector<float> k_cache = ref::random_tensor(problem.k_cache_elements(), precision, seed + 2);
  const std::vector<float> v_cache = ref::random_tensor(problem.v_cache_elements(), precision, seed + 3);
  const std::vector<float> k_new = ref::random_tensor(problem.k_new_elements(), precision, seed + 4);
  const std::vector<float> v_new = ref::random_tensor(problem.v_new_elements(), precision, seed + 5);
  const ref::KvcacheInputs inputs{q, k_cache, v_cache, k_new, v_new};
  const ref::ForwardResult64 exact = ref::kvcache_fp64(problem, inputs);
  const ref::ForwardResult32 naive = ref::kvcache_naive(problem, precision, inputs);
  std::vector<float> k_expected = k_cache, v_expected = v_cache;
  for (int s = 0; s < c.batch; ++s) {
    if (c.seqlen_new > 0 && appends(c, s)) append_sequence(problem, s, k_expected, v_expected, k_new, v_new);
  }

  // The device-side values, with the case's bad one planted.
  std::vector<int> seqlens = problem.cache_seqlens;
  std::vector<int> batch_idx = problem.cache_batch_idx;
  std::vector<int> table = problem.block_table;
  const int b = c.bad_sequence;
  switch (c.bad) {
    case BadValue::none: break;
    case BadValue::seqlen_past_capacity: seqlens.at(b) = problem.capacity() - c.seqlen_new + 1; break;
    case BadValue::negative_seqlen: seqlens.at(b) = -5; break;
    case BadValue::batch_idx_out_of_range: batch_idx.at(b) = problem.cache_batch; break;
    case BadValue::page_out_of_range:
      // Page 0 must hold cached keys only, so that no append targets it.
      if (!paged || problem.cached(b) < c.page_size) {
        outcome.o = ::testing::AssertionFailure() << trace << ": page_out_of_range needs a paged cache with "
                                                  << "cache_seqlens[b] >= page_size";
        return outcome;
      }
      table.at(static_cast<std::size_t>(b) * problem.max_pages_per_seq) = problem.num_pages;
      break;
  }

  // Device buffers: the cache and the outputs inside guard regions, every row padded by c.pad poisoned elements.
  const int D = c.head_dim;
  const int Dv = problem.dim_v();
  const auto rows_of = [&](const std::vector<float>& dense, int dim) {
    return padded(to_bits(precision, dense), dim, c.pad, kGuard16);
  };
  GuardedArray<std::uint16_t> k_cache_dev(rows_of(k_cache, D), kGuard16);
  GuardedArray<std::uint16_t> v_cache_dev(rows_of(v_cache, Dv), kGuard16);
  GuardedArray<std::uint16_t> o_dev(padded(std::vector<std::uint16_t>(problem.o_elements(), kUnwritten16), Dv, c.pad,
                                           kGuard16),
                                    kGuard16);
  std::vector<std::uint32_t> lse_init(problem.lse_elements());
  std::uint32_t unwritten_lse = 0;
  std::memcpy(&unwritten_lse, &kUnwrittenLse, 4);
  std::fill(lse_init.begin(), lse_init.end(), unwritten_lse);
  GuardedArray<std::uint32_t> lse_dev(lse_init, kGuard32);
  GuardedArray<std::uint16_t> q_dev(rows_of(q, D), kGuard16);
  GuardedArray<std::uint16_t> k_new_dev(rows_of(k_new, D), kGuard16);
  GuardedArray<std::uint16_t> v_new_dev(rows_of(v_new, Dv), kGuard16);
  GuardedArray<int> seqlens_dev(seqlens, 0);
  GuardedArray<int> batch_idx_dev(batch_idx, 0);
  GuardedArray<int> table_dev(table, 0);

  flash4_kvcache_params p{};
  p.struct_size = sizeof(p);
  p.dtype = c.dtype;
  p.q = q_dev.data();
  p.k_cache = k_cache_dev.data();
  p.v_cache = v_cache_dev.data();
  p.o = o_dev.data();
  p.lse = c.lse ? reinterpret_cast<float*>(lse_dev.data()) : nullptr;
  p.q_strides = contiguous(c.seqlen_q, c.heads_q, D + c.pad);
  p.o_strides = contiguous(c.seqlen_q, c.heads_q, Dv + c.pad);
  const std::int64_t cache_rows = paged ? problem.page_size : problem.cache_seqlen;
  p.k_cache_strides = contiguous(cache_rows, c.heads_kv, D + c.pad);
  p.v_cache_strides = contiguous(cache_rows, c.heads_kv, Dv + c.pad);
  if (c.seqlen_new > 0) {
    p.k_new = k_new_dev.data();
    p.v_new = v_new_dev.data();
    p.k_new_strides = contiguous(c.seqlen_new, c.heads_kv, D + c.pad);
    p.v_new_strides = contiguous(c.seqlen_new, c.heads_kv, Dv + c.pad);
  }
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_new = c.seqlen_new;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = D;
  p.head_dim_v = c.head_dim_v;
  if (paged) {
    p.block_table = table_dev.data();
    p.block_table_stride = problem.max_pages_per_seq;
    p.max_pages_per_seq = problem.max_pages_per_seq;
    p.num_pages = problem.num_pages;
    p.page_size = problem.page_size;
  } else {
    p.cache_batch = problem.cache_batch;
    p.cache_seqlen = problem.cache_seqlen;
    p.cache_batch_idx = c.cache_batch_idx ? batch_idx_dev.data() : nullptr;
  }
  p.cache_seqlens = seqlens.empty() ? nullptr : seqlens_dev.data();
  p.softmax_scale = static_cast<float>(problem.scale);
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  p.num_splits = c.num_splits;

  std::size_t workspace_bytes = 0;
  flash4_status status = flash4_kvcache_workspace_size(&p, &workspace_bytes);
  void* workspace = nullptr;
  if (status == FLASH4_SUCCESS && workspace_bytes > 0 && cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) {
    outcome.o = ::testing::AssertionFailure() << trace << ": cudaMalloc of the workspace failed";
    return outcome;
  }
  p.workspace = workspace;
  p.workspace_bytes = workspace_bytes;
  cudaStream_t stream = nullptr;
  if (c.own_stream) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (status == FLASH4_SUCCESS) status = flash4_kvcache(&p, reinterpret_cast<flash4_stream_t>(stream));
  const cudaError_t sync = c.own_stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize();
  if (c.own_stream) cudaStreamDestroy(stream);
  cudaFree(workspace);
  if (status != FLASH4_SUCCESS || sync != cudaSuccess) {
    outcome.o = ::testing::AssertionFailure() << trace << ": " << flash4_status_string(status) << ": "
                                              << flash4_last_error_message() << " / " << cudaGetErrorString(sync);
    return outcome;
  }

  bool guards_ok = true;
  bool pads_ok = true;
  const std::vector<std::uint16_t> o_bits = unpadded(o_dev.read(guards_ok), Dv, c.pad, kGuard16, pads_ok);
  const std::vector<std::uint32_t> lse_bits = lse_dev.read(guards_ok);
  const std::vector<std::uint16_t> k_after = unpadded(k_cache_dev.read(guards_ok), D, c.pad, kGuard16, pads_ok);
  const std::vector<std::uint16_t> v_after = unpadded(v_cache_dev.read(guards_ok), Dv, c.pad, kGuard16, pads_ok);
  if (!guards_ok) outcome.guards = ::testing::AssertionFailure() << trace << ": a guard element was overwritten";
  if (!pads_ok) {
    outcome.guards = ::testing::AssertionFailure() << trace << ": the padding past a row's head dim of O or the "
                                                   << "cache was overwritten";
  }
  if (k_after != to_bits(precision, k_expected) || v_after != to_bits(precision, v_expected)) {
    std::size_t first = 0;
    const std::vector<std::uint16_t> k_want = to_bits(precision, k_expected);
    while (first < k_after.size() && k_after[first] == k_want[first]) ++first;
    outcome.cache = ::testing::AssertionFailure() << trace << ": the cache after the call differs from the reference's "
                                                  << "append (first differing k_cache element: " << first << ")";
  }

  std::vector<float> o(o_bits.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = ref::from_bits(precision, o_bits[i]);
  std::vector<float> lse(lse_bits.size());
  std::memcpy(lse.data(), lse_bits.data(), lse_bits.size() * 4);

  // The bad sequence's rows: NaN everywhere; every other row: the reference.
  const int skip = c.bad == BadValue::none ? -1 : b;
  const std::size_t o_per_sequence = static_cast<std::size_t>(c.seqlen_q) * c.heads_q * Dv;
  const std::size_t lse_per_sequence = static_cast<std::size_t>(c.heads_q) * c.seqlen_q;
  if (skip >= 0) {
    const auto nan = [](float x) { return std::isnan(x); };
    const bool o_nan = std::all_of(o.begin() + skip * o_per_sequence, o.begin() + (skip + 1) * o_per_sequence, nan);
    const bool lse_nan = !c.lse || std::all_of(lse.begin() + skip * lse_per_sequence,
                                               lse.begin() + (skip + 1) * lse_per_sequence, nan);
    if (!o_nan || !lse_nan) {
      outcome.bad_rows = ::testing::AssertionFailure() << trace << ": sequence " << skip << " has a bad device value, "
                                                       << "but its " << (o_nan ? "LSE" : "O") << " is not all NaN";
    }
  }
  const double floor = c.dtype == FLASH4_DTYPE_BF16 ? kBf16NoiseFloor : kFp16NoiseFloor;
  outcome.o = within_tolerance(("O of " + trace).c_str(), compare(without_sequence(o, o_per_sequence, skip),
                                                                   without_sequence(exact.o, o_per_sequence, skip)),
                               compare(without_sequence(naive.o, o_per_sequence, skip),
                                       without_sequence(exact.o, o_per_sequence, skip)),
                               floor);
  if (c.lse) {
    outcome.lse = within_tolerance(("LSE of " + trace).c_str(),
                                   compare(without_sequence(lse, lse_per_sequence, skip),
                                           without_sequence(exact.lse, lse_per_sequence, skip)),
                                   compare(without_sequence(naive.lse, lse_per_sequence, skip),
                                           without_sequence(exact.lse, lse_per_sequence, skip)),
                                   floor);
  } else {
    const bool untouched = std::all_of(lse_bits.begin(), lse_bits.end(), [&](std::uint32_t x) { return x == unwritten_lse; });
    if (!untouched) outcome.lse = ::testing::AssertionFailure() << trace << ": lse is NULL but the LSE buffer changed";
  }
  return outcome;
}

}  // namespace flash4::test
