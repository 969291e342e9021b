#include "gpu/forward_case.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>

#include "reference/paged.hpp"
#include "tolerance.hpp"

namespace flash4::test {
namespace {

constexpr std::size_t kGuardElements = 4096;  // poisoned elements on each side of every output
constexpr uint16_t kPoison16 = 0xFFFF;         // a NaN in both bf16 and fp16
constexpr uint32_t kPoison32 = 0xFFFFFFFFu;    // a NaN in fp32

ref::Precision precision_of(flash4_dtype dtype) {
  return dtype == FLASH4_DTYPE_BF16 ? ref::Precision::bf16 : ref::Precision::fp16;
}

// Device buffer that frees itself.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

std::vector<uint16_t> to_bits(ref::Precision precision, const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = ref::to_bits(precision, values[i]);
  return bits;
}

::testing::AssertionResult guards_intact(const std::vector<uint16_t>& o_all, const std::vector<uint32_t>& lse_all,
                                         std::size_t o_count, std::size_t lse_count) {
  for (std::size_t i = 0; i < kGuardElements; ++i) {
    if (o_all[i] != kPoison16 || o_all[kGuardElements + o_count + i] != kPoison16)
      return ::testing::AssertionFailure() << "O guard element " << i << " was overwritten";
    if (lse_all[i] != kPoison32 || lse_all[kGuardElements + lse_count + i] != kPoison32)
      return ::testing::AssertionFailure() << "LSE guard element " << i << " was overwritten";
  }
  return ::testing::AssertionSuccess();
}

// A paged copy of k and v: each sequence's pages (shuffled or ascending) among spare ones, junk (finite, large)
// in every row no sequence uses, and junk entries past each sequence's pages in the table.
struct PagedCache {
  ref::PagedLayout layout;
  std::vector<float> k, v;
};

PagedCache make_paged_cache(const ForwardCase& c, const ref::Problem& problem, ref::Precision precision,
                            const ref::Inputs& in) {
  constexpr int kSparePages = 3;
  constexpr int kSpareEntries = 2;
  const int page_size = c.page_size;
  std::vector<int> pages(problem.batch);
  for (int b = 0; b < problem.batch; ++b) pages[b] = (problem.seq_k(b) + page_size - 1) / page_size;
  PagedCache cache;
  ref::PagedLayout& layout = cache.layout;
  layout.page_size = page_size;
  layout.num_pages = std::accumulate(pages.begin(), pages.end(), 0) + kSparePages;
  layout.table_stride = *std::max_element(pages.begin(), pages.end()) + kSpareEntries;
  std::vector<int> order(layout.num_pages);
  std::iota(order.begin(), order.end(), 0);
  const std::uint64_t seed = ref::fresh_seed();
  if (c.shuffle_pages) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  // Never-read entries: past the sequence's pages, out of range in both directions.
  const int junk_entries[] = {-1, layout.num_pages, std::numeric_limits<int>::max()};
  layout.block_table.resize(std::size_t(problem.batch) * layout.table_stride);
  for (std::size_t i = 0; i < layout.block_table.size(); ++i) layout.block_table[i] = junk_entries[i % 3];
  const std::size_t row = std::size_t(c.heads_kv) * c.head_dim;
  const std::size_t count = layout.cache_elements(c.heads_kv, c.head_dim);
  cache.k = ref::random_tensor(count, precision, seed + 1);
  cache.v = ref::random_tensor(count, precision, seed + 2);
  for (std::size_t i = 0; i < count; ++i) {  // junk 8x the data's scale: a leaked row would show
    cache.k[i] = ref::round_to(precision, 8.0f * cache.k[i]);
    cache.v[i] = ref::round_to(precision, 8.0f * cache.v[i]);
  }
  int next = 0;
  int longest = 0;
  for (int b = 0; b < problem.batch; ++b) {
    if (pages[b] > pages[longest]) longest = b;
    for (int s = 0; s < pages[b]; ++s) layout.block_table[std::size_t(b) * layout.table_stride + s] = order[next++];
    for (int j = 0; j < problem.seq_k(b); ++j) {
      const int page = layout.block_table[std::size_t(b) * layout.table_stride + j / page_size];
      const std::size_t to = (std::size_t(page) * page_size + j % page_size) * row;
      std::copy_n(in.k.begin() + std::ptrdiff_t(problem.kv_index(b, j, 0)), row, cache.k.begin() + std::ptrdiff_t(to));
      std::copy_n(in.v.begin() + std::ptrdiff_t(problem.kv_index(b, j, 0)), row, cache.v.begin() + std::ptrdiff_t(to));
    }
  }
  if (c.bad_page && pages[longest] > 0) layout.block_table[std::size_t(longest) * layout.table_stride] = layout.num_pages + 7;
  return cache;
}

// Rows past seqused_q (flash4.h: left untouched) must still hold their poison, a NaN, in o and lse; they
// are then set to the reference's 0, so that the tolerance rule compares the used rows only.
::testing::AssertionResult take_unused_rows(const ref::Problem& p, std::vector<float>& o, std::vector<float>& lse) {
  for (int b = 0; b < p.batch; ++b) {
    for (int i = p.seq_q(b); i < p.span_q(b); ++i) {
      for (int h = 0; h < p.heads_q; ++h) {
        float* const row = &o[p.o_index(b, i, h)];
        float& l = lse[p.lse_index(b, h, i)];
        if (!std::all_of(row, row + p.dim_v(), [](float x) { return std::isnan(x); }) || !std::isnan(l)) {
          return ::testing::AssertionFailure() << "unused row " << i << " of sequence " << b << " was written";
        }
        std::fill(row, row + p.dim_v(), 0.0f);
        l = 0.0f;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// `bits` between two guard regions of NaN.
std::vector<uint16_t> with_guards(const std::vector<uint16_t>& bits) {
  std::vector<uint16_t> all(bits.size() + 2 * kGuardElements, kPoison16);
  std::copy(bits.begin(), bits.end(), all.begin() + kGuardElements);
  return all;
}

}  // namespace

std::string ForwardCase::name() const {
  std::ostringstream s;
  s << (dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16") << "_d" << head_dim << "_b" << batch << "_sq" << seqlen_q
    << "_sk" << seqlen_k << "_h" << heads_q << "x" << heads_kv << (causal ? "_causal" : "")
    << (window_left >= 0 || window_right >= 0 ? "_win" + std::to_string(window_left) + "," + std::to_string(window_right) : "")
    << (softcap > 0 ? "_softcap" : "") << (varlen_q.empty() ? "" : "_varlen")
    << (varlen_max_q > 0 ? "_maxq" + std::to_string(varlen_max_q) : "") << (seqused_q.empty() ? "" : "_usedq")
    << (seqused_k.empty() ? "" : "_usedk") << (packed_qkv ? "_packed" : "");
  if (page_size > 0) s << "_page" << page_size << (shuffle_pages ? "_shuffled" : "") << (bad_page ? "_badpage" : "");
  return s.str();
}

ForwardOutcome run_forward_case(const ForwardCase& c) {
  ForwardOutcome outcome;
  const ref::Precision precision = precision_of(c.dtype);
  ref::Problem problem;
  problem.batch = c.varlen_q.empty() ? c.batch : int(c.varlen_q.size());
  problem.seqlen_q = c.seqlen_q;
  problem.seqlen_k = c.seqlen_k;
  problem.heads_q = c.heads_q;
  problem.heads_kv = c.heads_kv;
  problem.head_dim = c.head_dim;
  problem.scale = 1.0 / std::sqrt(double(c.head_dim));
  problem.causal = c.causal;
  problem.window_left = c.window_left;
  problem.window_right = c.window_right;
  problem.softcap = c.softcap;
  if (!c.varlen_q.empty()) {
    problem.cu_seqlens_q.assign(1, 0);
    problem.cu_seqlens_k.assign(1, 0);
    for (std::size_t b = 0; b < c.varlen_q.size(); ++b) {
      problem.cu_seqlens_q.push_back(problem.cu_seqlens_q.back() + c.varlen_q[b]);
      problem.cu_seqlens_k.push_back(problem.cu_seqlens_k.back() + c.varlen_k[b]);
    }
  }
  problem.seqused_q = c.seqused_q;
  problem.seqused_k = c.seqused_k;
  ref::Inputs in = ref::random_inputs(problem, precision);
  std::optional<PagedCache> paged;
  if (c.page_size > 0) {
    paged = make_paged_cache(c, problem, precision, in);
    // The reference sees what the kernel is given: the cache gathered back (zeros for a bad page).
    in.k = ref::gather_pages(problem, paged->layout, paged->k);
    in.v = ref::gather_pages(problem, paged->layout, paged->v);
  }
  const ref::ForwardResult64 exact = ref::forward_fp64(problem, in.q, in.k, in.v);
  const ref::ForwardResult32 naive = ref::forward_naive(problem, precision, in.q, in.k, in.v);

  const int D = c.head_dim;
  const std::size_t rows_q = problem.rows_q(), rows_k = problem.rows_k();
  const std::size_t o_count = problem.q_elements(), lse_count = problem.lse_elements();
  flash4_fwd_params p{};
  p.struct_size = sizeof(p);
  p.dtype = c.dtype;

  // Inputs: either three dense tensors or one packed (rows, 3, H, D) buffer.
  const bool packed = c.packed_qkv;
  const std::size_t qkv_row = packed ? 3 * std::size_t(c.heads_q) * D : 0;
  DeviceBuffer q_buf(packed ? rows_q * qkv_row * 2 : o_count * 2);
  DeviceBuffer k_buf(packed ? 16 : problem.kv_elements() * 2);
  DeviceBuffer v_buf(packed ? 16 : problem.kv_elements() * 2);
  if (packed) {
    std::vector<uint16_t> all(rows_q * qkv_row);
    const auto qb = to_bits(precision, in.q), kb = to_bits(precision, in.k), vb = to_bits(precision, in.v);
    const std::size_t hd = std::size_t(c.heads_q) * D;
    for (std::size_t r = 0; r < rows_q; ++r) {
      std::memcpy(&all[r * qkv_row], &qb[r * hd], hd * 2);
      std::memcpy(&all[r * qkv_row + hd], &kb[r * hd], hd * 2);
      std::memcpy(&all[r * qkv_row + 2 * hd], &vb[r * hd], hd * 2);
    }
    cudaMemcpy(q_buf.ptr, all.data(), all.size() * 2, cudaMemcpyHostToDevice);
    p.q = q_buf.as<uint16_t>();
    p.k = q_buf.as<uint16_t>() + hd;
    p.v = q_buf.as<uint16_t>() + 2 * hd;
    const flash4_strides s{int64_t(c.seqlen_q) * int64_t(qkv_row), int64_t(qkv_row), D};
    p.q_strides = p.k_strides = p.v_strides = s;
  } else {
    cudaMemcpy(q_buf.ptr, to_bits(precision, in.q).data(), o_count * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(k_buf.ptr, to_bits(precision, in.k).data(), problem.kv_elements() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(v_buf.ptr, to_bits(precision, in.v).data(), problem.kv_elements() * 2, cudaMemcpyHostToDevice);
    p.q = q_buf.ptr;
    p.k = k_buf.ptr;
    p.v = v_buf.ptr;
    p.q_strides = {int64_t(c.seqlen_q) * c.heads_q * D, int64_t(c.heads_q) * D, D};
    p.k_strides = p.v_strides = {int64_t(c.seqlen_k) * c.heads_kv * D, int64_t(c.heads_kv) * D, D};
  }

  // A paged cache inside NaN guard regions: a read of one would reach O, a write would change it.
  const std::size_t cache_count = paged ? paged->k.size() : 0;
  DeviceBuffer k_cache(paged ? (cache_count + 2 * kGuardElements) * 2 : 16);
  DeviceBuffer v_cache(paged ? (cache_count + 2 * kGuardElements) * 2 : 16);
  DeviceBuffer table(paged ? paged->layout.block_table.size() * 4 : 16);
  std::vector<uint16_t> k_cache_all, v_cache_all;
  if (paged) {
    k_cache_all = with_guards(to_bits(precision, paged->k));
    v_cache_all = with_guards(to_bits(precision, paged->v));
    cudaMemcpy(k_cache.ptr, k_cache_all.data(), k_cache_all.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(v_cache.ptr, v_cache_all.data(), v_cache_all.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(table.ptr, paged->layout.block_table.data(), paged->layout.block_table.size() * 4,
               cudaMemcpyHostToDevice);
    p.k = k_cache.as<uint16_t>() + kGuardElements;
    p.v = v_cache.as<uint16_t>() + kGuardElements;
    const int64_t row = int64_t(c.heads_kv) * D;
    p.k_strides = p.v_strides = {int64_t(c.page_size) * row, row, D};
    p.block_table = table.as<int32_t>();
    p.block_table_stride = paged->layout.table_stride;
    p.page_size = c.page_size;
    p.num_pages = paged->layout.num_pages;
  }

  // Outputs inside poisoned guard regions.
  DeviceBuffer o_buf((o_count + 2 * kGuardElements) * 2);
  DeviceBuffer lse_buf((lse_count + 2 * kGuardElements) * 4);
  cudaMemset(o_buf.ptr, 0xFF, (o_count + 2 * kGuardElements) * 2);
  cudaMemset(lse_buf.ptr, 0xFF, (lse_count + 2 * kGuardElements) * 4);
  p.o = o_buf.as<uint16_t>() + kGuardElements;
  p.lse = lse_buf.as<float>() + kGuardElements;
  p.o_strides = {int64_t(c.seqlen_q) * c.heads_q * D, int64_t(c.heads_q) * D, D};

  p.batch = problem.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = D;
  p.softmax_scale = float(problem.scale);
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  DeviceBuffer cu_q((problem.cu_seqlens_q.size() + 1) * 4), cu_k((problem.cu_seqlens_k.size() + 1) * 4);
  if (problem.is_varlen()) {
    cudaMemcpy(cu_q.ptr, problem.cu_seqlens_q.data(), problem.cu_seqlens_q.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(cu_k.ptr, problem.cu_seqlens_k.data(), problem.cu_seqlens_k.size() * 4, cudaMemcpyHostToDevice);
    p.cu_seqlens_q = cu_q.as<int32_t>();
    p.cu_seqlens_k = cu_k.as<int32_t>();
    p.max_seqlen_q = std::max(c.varlen_max_q, *std::max_element(c.varlen_q.begin(), c.varlen_q.end()));
    p.max_seqlen_k = *std::max_element(c.varlen_k.begin(), c.varlen_k.end());
    p.total_q = int(rows_q);
    p.total_k = int(rows_k);
  }

  DeviceBuffer used_q(c.seqused_q.size() * 4 + 4), used_k(c.seqused_k.size() * 4 + 4);
  for (const auto& [buffer, used, field] : {std::tuple{&used_q, &c.seqused_q, &p.seqused_q},
                                            std::tuple{&used_k, &c.seqused_k, &p.seqused_k}}) {
    if (used->empty()) continue;
    cudaMemcpy(buffer->ptr, used->data(), used->size() * 4, cudaMemcpyHostToDevice);
    *field = buffer->as<int32_t>();
  }

  // The workspace (the tile counter; varlen: the tile list) is poisoned: the contract does not promise zeros.
  std::size_t workspace_bytes = 0;
  if (flash4_fwd_workspace_size(&p, &workspace_bytes) != FLASH4_SUCCESS) {
    outcome.o = ::testing::AssertionFailure() << "flash4_fwd_workspace_size: " << flash4_last_error_message();
    return outcome;
  }
  DeviceBuffer workspace(workspace_bytes + kGuardElements);
  cudaMemset(workspace.ptr, 0xFF, workspace_bytes + kGuardElements);
  p.workspace = workspace_bytes > 0 ? workspace.ptr : nullptr;
  p.workspace_bytes = workspace_bytes;
  const flash4_status status = flash4_fwd(&p, nullptr);
  if (status != FLASH4_SUCCESS) {
    outcome.o = ::testing::AssertionFailure() << "flash4_fwd: " << flash4_status_string(status) << ": "
                                              << flash4_last_error_message();
    return outcome;
  }
  const cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) {
    outcome.o = ::testing::AssertionFailure() << "kernel failed: " << cudaGetErrorString(sync);
    return outcome;
  }
  std::vector<uint16_t> o_all(o_count + 2 * kGuardElements);
  std::vector<uint32_t> lse_all(lse_count + 2 * kGuardElements);
  cudaMemcpy(o_all.data(), o_buf.ptr, o_all.size() * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(lse_all.data(), lse_buf.ptr, lse_all.size() * 4, cudaMemcpyDeviceToHost);
  outcome.guards = guards_intact(o_all, lse_all, o_count, lse_count);
  if (paged && outcome.guards) {
    for (const auto& [name, buffer, expected] : {std::tuple{"k", &k_cache, &k_cache_all},
                                                 std::tuple{"v", &v_cache, &v_cache_all}}) {
      std::vector<uint16_t> after(expected->size());
      cudaMemcpy(after.data(), buffer->ptr, after.size() * 2, cudaMemcpyDeviceToHost);
      if (after != *expected) {
        outcome.guards = ::testing::AssertionFailure() << "the paged " << name << " cache or its guards changed";
        break;
      }
    }
  }

  std::vector<float> o(o_count), lse(lse_count);
  for (std::size_t i = 0; i < o_count; ++i) o[i] = ref::from_bits(precision, o_all[kGuardElements + i]);
  std::memcpy(lse.data(), &lse_all[kGuardElements], lse_count * 4);
  if (!c.seqused_q.empty() && outcome.guards) outcome.guards = take_unused_rows(problem, o, lse);
  const double floor = c.dtype == FLASH4_DTYPE_BF16 ? kBf16NoiseFloor : kFp16NoiseFloor;
  outcome.o = within_tolerance("O", compare(o, exact.o), compare(naive.o, exact.o), floor);
  outcome.lse = within_tolerance("LSE", compare(lse, exact.lse), compare(naive.lse, exact.lse), floor);
  return outcome;
}

}  // namespace flash4::test
