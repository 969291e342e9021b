// Implements contract_oracle.hpp: rules 1-12 of flash4.h, each a step that either passes or gives the verdict.
#include "contract/contract_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace flash4::contract {
namespace {

using Int = __int128;  // every product of the header's fields fits, so nothing here can overflow

constexpr Int kMaxSeqlen = Int{1} << 29;
constexpr Int kMaxBlocks = Int{1} << 30;
constexpr Int kMaxRowHeads = (Int{1} << 31) - 1;
constexpr Int kMaxStrideElements = Int{1} << 39;
constexpr Int kMaxByteOffset = (Int{1} << 63) - 1;
constexpr Int kAddressEnd = Int{1} << 64;  // one past the last byte of a 64-bit address space
constexpr float kLog2e = 1.4426950408889634f;

using Step = std::optional<Verdict>;
Step reject(flash4_status status, std::string argument) { return Verdict{status, std::move(argument)}; }

Int address(const void* pointer) { return static_cast<Int>(reinterpret_cast<std::uintptr_t>(pointer)); }

// One of the tensors the rules walk, in the header's order.
struct Tensor {
  std::string name;
  const void* data;
  flash4_strides strides;
  bool query;   // query-shaped (rows_q, heads_q) or key-shaped (rows_k, heads_kv)
  bool output;
  bool value;   // v, o, dout, dv: head_dim_v columns (else head_dim)
};

// The params of either direction, as the header describes them.
struct Call {
  bool backward;
  std::size_t struct_size;
  std::vector<std::size_t> known_sizes;  // every released layout, oldest first
  std::size_t first_layout_size;          // the layout before head_dim_v, which reads the fields after it as 0
  std::int32_t deterministic;
  std::int32_t dtype;
  std::int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;
  float softmax_scale, softcap;
  std::int32_t causal, window_left, window_right;
  const std::int32_t* cu_seqlens_q;
  const std::int32_t* cu_seqlens_k;
  std::int32_t max_seqlen_q, max_seqlen_k, total_q, total_k;
  const void* lse;
  const void* sink;
  const void* dsink;
  const std::int32_t* seqused_q;
  const std::int32_t* seqused_k;
  // Forward, paged K/V: NULL / 0 for the backward and for a caller of the layout before these fields.
  const std::int32_t* block_table;
  std::int64_t block_table_stride;
  std::int32_t page_size, num_pages;
  std::vector<Tensor> tensors;

  bool varlen() const { return cu_seqlens_q != nullptr; }
  bool paged() const { return block_table != nullptr; }
  Int rows(bool query) const {
    if (!query && paged()) return Int{num_pages} * page_size;
    if (varlen()) return query ? total_q : total_k;
    return Int{batch} * (query ? seqlen_q : seqlen_k);
  }
  Int heads(bool query) const { return query ? heads_q : heads_kv; }
  Int columns(const Tensor& t) const { return t.value && head_dim_v != 0 ? head_dim_v : head_dim; }
};

template <class Params>
Call common(const Params& p, bool backward) {
  Call c{};
  c.backward = backward;
  c.struct_size = p.struct_size;
  c.first_layout_size = offsetof(Params, head_dim_v);
  c.known_sizes = {c.first_layout_size, sizeof(Params)};
  std::memcpy(&c.dtype, &p.dtype, sizeof(c.dtype));  // rule 3: read as an integer
  c.batch = p.batch;
  c.seqlen_q = p.seqlen_q;
  c.seqlen_k = p.seqlen_k;
  c.heads_q = p.heads_q;
  c.heads_kv = p.heads_kv;
  c.head_dim = p.head_dim;
  c.head_dim_v = p.struct_size == c.first_layout_size ? 0 : p.head_dim_v;
  c.softmax_scale = p.softmax_scale;
  c.softcap = p.softcap;
  c.causal = p.causal;
  c.window_left = p.window_left;
  c.window_right = p.window_right;
  c.cu_seqlens_q = p.cu_seqlens_q;
  c.cu_seqlens_k = p.cu_seqlens_k;
  c.max_seqlen_q = p.max_seqlen_q;
  c.max_seqlen_k = p.max_seqlen_k;
  c.total_q = p.total_q;
  c.total_k = p.total_k;
  c.lse = p.lse;
  // A caller of the first layout has no such fields: they read as NULL.
  if (c.struct_size == c.known_sizes.back()) {
    c.sink = p.sink;
    c.seqused_q = p.seqused_q;
    c.seqused_k = p.seqused_k;
  }
  return c;
}

Call call_of(const flash4_fwd_params& p) {
  Call c = common(p, false);
  // The header's first forward layout ended before head_dim_v; its callers read as not paged.
  if (p.struct_size != c.first_layout_size) {
    c.block_table = p.block_table;
    c.block_table_stride = p.block_table_stride;
    c.page_size = p.page_size;
    c.num_pages = p.num_pages;
  }
  c.tensors = {{"q", p.q, p.q_strides, true, false, false},
               {"k", p.k, p.k_strides, false, false, false},
               {"v", p.v, p.v_strides, false, false, true},
               {"o", p.o, p.o_strides, true, true, true}};
  return c;
}

Call call_of(const flash4_bwd_params& p) {
  Call c = common(p, true);
  c.deterministic = p.deterministic;
  if (c.struct_size == c.known_sizes.back()) c.dsink = p.dsink;
  c.tensors = {{"q", p.q, p.q_strides, true, false, false},         {"k", p.k, p.k_strides, false, false, false},
               {"v", p.v, p.v_strides, false, false, true},          {"o", p.o, p.o_strides, true, false, true},
               {"dout", p.dout, p.dout_strides, true, false, true}, {"dq", p.dq, p.dq_strides, true, true, false},
               {"dk", p.dk, p.dk_strides, false, true, false},      {"dv", p.dv, p.dv_strides, false, true, true}};
  return c;
}

// ---- rules 1-8: values ----------------------------------------------------------------------------------

Int longest(const Call& c, bool query) {
  if (!c.varlen()) return query ? c.seqlen_q : c.seqlen_k;
  return query ? std::min<Int>(c.max_seqlen_q, c.total_q) : std::min<Int>(c.max_seqlen_k, c.total_k);
}

// Rule 6: the entries a block_table row must hold, ceil(Lk / page_size).
Int pages_per_sequence(const Call& c) { return (longest(c, false) + c.page_size - 1) / c.page_size; }

Step rule_struct_and_kind(const Call& c) {
  if (std::find(c.known_sizes.begin(), c.known_sizes.end(), c.struct_size) == c.known_sizes.end()) {
    return reject(FLASH4_ERROR_INVALID_STRUCT_SIZE, "params.struct_size");
  }
  if (c.backward && c.deterministic != 0 && c.deterministic != 1) {
    return reject(FLASH4_ERROR_INVALID_ARGUMENT, "deterministic");
  }
  if (c.dtype != 0 && c.dtype != 1) return reject(FLASH4_ERROR_UNSUPPORTED_DTYPE, "dtype");
  // Rule 3: multiples of 8 in [8, 256]; head_dim_v may also be 0.
  const auto supported = [](std::int32_t d) { return d >= 8 && d <= 256 && d % 8 == 0; };
  if (!supported(c.head_dim)) return reject(FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim");
  if (c.head_dim_v != 0 && !supported(c.head_dim_v)) return reject(FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v");
  return {};
}

Step rule_varlen_fields(const Call& c) {
  if (c.cu_seqlens_q == nullptr && c.cu_seqlens_k != nullptr) return reject(FLASH4_ERROR_INVALID_VARLEN, "cu_seqlens_q");
  if (c.cu_seqlens_q != nullptr && c.cu_seqlens_k == nullptr) return reject(FLASH4_ERROR_INVALID_VARLEN, "cu_seqlens_k");
  if (c.varlen()) {
    if (c.max_seqlen_q < 1) return reject(FLASH4_ERROR_INVALID_VARLEN, "max_seqlen_q");
    if (c.max_seqlen_k < 1) return reject(FLASH4_ERROR_INVALID_VARLEN, "max_seqlen_k");
    if (c.total_q < 0) return reject(FLASH4_ERROR_INVALID_VARLEN, "total_q");
    if (c.total_k < 0) return reject(FLASH4_ERROR_INVALID_VARLEN, "total_k");
    if (address(c.cu_seqlens_q) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "cu_seqlens_q");
    if (address(c.cu_seqlens_k) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "cu_seqlens_k");
  }
  if (address(c.seqused_q) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "seqused_q");
  if (address(c.seqused_k) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "seqused_k");
  return {};
}

Step rule_sizes(const Call& c) {
  if (c.batch < 1) return reject(FLASH4_ERROR_INVALID_SIZE, "batch");
  if (c.heads_q < 1) return reject(FLASH4_ERROR_INVALID_SIZE, "heads_q");
  if (c.heads_kv < 1) return reject(FLASH4_ERROR_INVALID_SIZE, "heads_kv");
  if (!c.varlen() && c.seqlen_q < 0) return reject(FLASH4_ERROR_INVALID_SIZE, "seqlen_q");
  if (!c.varlen() && c.seqlen_k < 0) return reject(FLASH4_ERROR_INVALID_SIZE, "seqlen_k");
  if (c.heads_q % c.heads_kv != 0) return reject(FLASH4_ERROR_HEAD_RATIO, "heads_q");
  if (c.varlen() && c.total_q > Int{c.batch} * c.max_seqlen_q) return reject(FLASH4_ERROR_INVALID_VARLEN, "total_q");
  if (c.varlen() && c.total_k > Int{c.batch} * c.max_seqlen_k) return reject(FLASH4_ERROR_INVALID_VARLEN, "total_k");
  if (c.paged()) {
    if (c.page_size < 16 || c.page_size % 16 != 0) return reject(FLASH4_ERROR_INVALID_SIZE, "page_size");
    if (c.num_pages < 1) return reject(FLASH4_ERROR_INVALID_SIZE, "num_pages");
    if (address(c.block_table) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "block_table");
    if (c.block_table_stride < pages_per_sequence(c)) return reject(FLASH4_ERROR_INVALID_ARGUMENT, "block_table_stride");
  }
  return {};
}

Step rule_scores_and_mask(const Call& c) {
  if (!(std::isfinite(c.softmax_scale) && c.softmax_scale > 0)) return reject(FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale");
  if (!(std::isfinite(c.softcap) && c.softcap >= 0)) return reject(FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
  const bool capped = c.softcap > 0;
  const float scale_log2 = c.softmax_scale * kLog2e;
  if (!capped && std::isinf(scale_log2)) return reject(FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale");
  if (capped) {
    const float cap_log2 = c.softcap * kLog2e;
    const float prescale = c.softmax_scale / c.softcap;
    if (std::isinf(cap_log2) || std::isinf(prescale)) return reject(FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
  }
  if (c.causal != 0 && c.causal != 1) return reject(FLASH4_ERROR_INVALID_MASK, "causal");
  if (c.window_left < -1) return reject(FLASH4_ERROR_INVALID_MASK, "window_left");
  if (c.window_right < -1) return reject(FLASH4_ERROR_INVALID_MASK, "window_right");
  return {};
}

// ---- rules 9-12: memory ---------------------------------------------------------------------------------

Step rule_pointers(const Call& c) {
  for (const Tensor& t : c.tensors) {
    if (c.rows(t.query) == 0) continue;
    if (t.data == nullptr) return reject(FLASH4_ERROR_NULL_POINTER, t.name);
    if (address(t.data) % 16 != 0) return reject(FLASH4_ERROR_MISALIGNED, t.name);
  }
  if (c.backward && c.lse == nullptr && c.rows(true) > 0) return reject(FLASH4_ERROR_NULL_POINTER, "lse");
  if (c.lse != nullptr && address(c.lse) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "lse");
  if (c.backward && c.sink != nullptr && c.dsink == nullptr) return reject(FLASH4_ERROR_NULL_POINTER, "dsink");
  if (c.backward && c.sink == nullptr && c.dsink != nullptr) return reject(FLASH4_ERROR_INVALID_ARGUMENT, "dsink");
  if (address(c.sink) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "sink");
  if (address(c.dsink) % 4 != 0) return reject(FLASH4_ERROR_MISALIGNED, "dsink");
  return {};
}

Step rule_strides(const Call& c) {
  for (const Tensor& t : c.tensors) {
    if (c.rows(t.query) == 0) continue;
    std::vector<std::pair<const char*, std::int64_t>> strides;
    if (!c.varlen() || (!t.query && c.paged())) strides.push_back({"batch", t.strides.batch});
    strides.push_back({"seq", t.strides.seq});
    strides.push_back({"head", t.strides.head});
    for (const auto& [field, stride] : strides) {
      const std::string name = t.name + "_strides." + field;
      if (stride <= 0) return reject(FLASH4_ERROR_INVALID_ARGUMENT, name);
      if (stride >= kMaxStrideElements) return reject(FLASH4_ERROR_SIZE_OVERFLOW, name);
      if (stride % 8 != 0) return reject(FLASH4_ERROR_MISALIGNED, name);
    }
  }
  return {};
}

// (extent, stride) of the batch (fixed length), seq, head and head_dim dimensions.
std::vector<std::pair<Int, Int>> dims_of(const Call& c, const Tensor& t) {
  const Int batch = !t.query && c.paged() ? c.num_pages : c.varlen() ? 1 : c.batch;
  return {{batch, t.strides.batch}, {c.rows(t.query) / batch, t.strides.seq}, {c.heads(t.query), t.strides.head},
          {c.columns(t), 1}};
}

Int last_byte_offset(const Call& c, const Tensor& t) {
  Int elements = 0;
  for (const auto& [extent, stride] : dims_of(c, t)) elements += (extent - 1) * stride;
  return (elements + 1) * 2 - 1;
}

// The arrays of rule 11b / 12b: (name, pointer, bytes, output).
struct Array {
  std::string name;
  const void* data;
  Int bytes;
  bool output;
};

std::vector<Array> arrays_of(const Call& c) {
  std::vector<Array> arrays;
  if (c.lse != nullptr && c.rows(true) * c.heads_q > 0) arrays.push_back({"lse", c.lse, c.rows(true) * c.heads_q * 4, !c.backward});
  if (c.varlen()) {
    arrays.push_back({"cu_seqlens_q", c.cu_seqlens_q, (Int{c.batch} + 1) * 4, false});
    arrays.push_back({"cu_seqlens_k", c.cu_seqlens_k, (Int{c.batch} + 1) * 4, false});
  }
  if (c.paged()) {
    const Int entries = Int{c.batch - 1} * c.block_table_stride + pages_per_sequence(c);
    if (entries > 0) arrays.push_back({"block_table", c.block_table, entries * 4, false});
  }
  if (c.sink != nullptr) arrays.push_back({"sink", c.sink, Int{c.heads_q} * 4, false});
  if (c.dsink != nullptr) arrays.push_back({"dsink", c.dsink, Int{c.heads_q} * 4, true});
  if (c.seqused_q != nullptr) arrays.push_back({"seqused_q", c.seqused_q, Int{c.batch} * 4, false});
  if (c.seqused_k != nullptr) arrays.push_back({"seqused_k", c.seqused_k, Int{c.batch} * 4, false});
  return arrays;
}

Step rule_limits(const Call& c) {
  const std::pair<const char*, Int> lengths[] = {
      {c.varlen() ? "total_q" : "seqlen_q", c.varlen() ? c.total_q : c.seqlen_q},
      {c.varlen() ? "total_k" : "seqlen_k", c.varlen() ? c.total_k : c.seqlen_k}};
  for (const auto& [name, length] : lengths) {
    if (length > kMaxSeqlen) return reject(FLASH4_ERROR_SIZE_OVERFLOW, name);
  }
  for (const Tensor& t : c.tensors) {
    if (c.rows(t.query) == 0) continue;
    if (c.rows(t.query) * c.heads(t.query) > kMaxRowHeads) return reject(FLASH4_ERROR_SIZE_OVERFLOW, t.name);
    const Int last = last_byte_offset(c, t);
    if (last > kMaxByteOffset) return reject(FLASH4_ERROR_SIZE_OVERFLOW, t.name);
    if (address(t.data) + last >= kAddressEnd) return reject(FLASH4_ERROR_SIZE_OVERFLOW, t.name);
  }
  for (const Array& a : arrays_of(c)) {
    if (a.bytes - 1 > kMaxByteOffset) return reject(FLASH4_ERROR_SIZE_OVERFLOW, a.name);
    if (address(a.data) + a.bytes - 1 >= kAddressEnd) return reject(FLASH4_ERROR_SIZE_OVERFLOW, a.name);
  }
  for (const bool query : {true, false}) {
    const Int blocks = Int{c.batch} * c.heads(query) * ((longest(c, query) + 63) / 64);
    if (blocks > kMaxBlocks) {
      return reject(FLASH4_ERROR_SIZE_OVERFLOW, c.varlen() ? (query ? "max_seqlen_q" : "max_seqlen_k")
                                                           : (query ? "seqlen_q" : "seqlen_k"));
    }
  }
  return {};
}

// Rule 12a, stated pairwise: each dimension of extent > 1 must step past everything the other dimensions with
// a stride no larger than its own reach. (Two equal strides fail at both, as in the header's sorted form.)
bool overlaps_itself(const std::vector<std::pair<Int, Int>>& dims) {
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto [extent, stride] = dims[i];
    if (extent <= 1) continue;
    Int reach = 0;
    for (std::size_t j = 0; j < dims.size(); ++j) {
      const auto [other_extent, other_stride] = dims[j];
      if (j != i && other_extent > 1 && other_stride <= stride) reach += (other_extent - 1) * other_stride;
    }
    if (stride <= reach) return true;
  }
  return false;
}

struct Span {
  std::string name;
  Int first, last;
  bool output;
  const Tensor* tensor;
};

Step rule_memory(const Call& c) {
  std::vector<Span> outputs, inputs;
  for (const Tensor& t : c.tensors) {
    if (c.rows(t.query) == 0) continue;
    (t.output ? outputs : inputs).push_back({t.name, address(t.data), address(t.data) + last_byte_offset(c, t), t.output, &t});
  }
  for (const Array& a : arrays_of(c)) {
    (a.output ? outputs : inputs).push_back({a.name, address(a.data), address(a.data) + a.bytes - 1, a.output, nullptr});
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Span& out = outputs[i];
    if (out.tensor != nullptr && overlaps_itself(dims_of(c, *out.tensor))) return reject(FLASH4_ERROR_INVALID_ARGUMENT, out.name);
    std::vector<Span> others(inputs);
    others.insert(others.end(), outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(i));
    for (const Span& other : others) {
      if (out.first <= other.last && other.first <= out.last) return reject(FLASH4_ERROR_INVALID_ARGUMENT, out.name);
    }
  }
  return {};
}

Verdict verdict(const Call& c) {
  for (Step (*rule)(const Call&) : {rule_struct_and_kind, rule_varlen_fields, rule_sizes, rule_scores_and_mask,
                                    rule_pointers, rule_strides, rule_limits, rule_memory}) {
    if (Step step = rule(c)) return *step;
  }
  return {};
}

}  // namespace

Verdict expected_verdict(const flash4_fwd_params& params) { return verdict(call_of(params)); }
Verdict expected_verdict(const flash4_bwd_params& params) { return verdict(call_of(params)); }

}  // namespace flash4::contract
