// Implements contract_check.hpp.
#include "contract/contract_check.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "api/entry.hpp"
#include "api/validate.hpp"
#include "contract/contract_oracle.hpp"
#include "host/bwd_planner.hpp"
#include "host/empty_problem.hpp"
#include "host/kernel_choice.hpp"
#include "host/planner.hpp"
#include "kernels/common/mask.hpp"
#include "kernels/common/tile_order.hpp"

namespace flash4::contract {
namespace {

using Int = __int128;
constexpr Int kInt32Max = std::numeric_limits<std::int32_t>::max();
// A device as the forward planner sees it: the H200's SMs and L2.
const host::DeviceInfo kDevice{0, 132, std::size_t{60} << 20, 9, 0};

std::string text(Int value) { return std::to_string(static_cast<long long>(value)); }

Int ceil_div(Int a, Int b) { return (a + b - 1) / b; }

// The lengths that bound every sequence, as flash4.h reads valid params.
template <class Params>
Int longest(const Params& p, bool query) {
  if (p.cu_seqlens_q == nullptr) return query ? p.seqlen_q : p.seqlen_k;
  return query ? std::min(p.max_seqlen_q, p.total_q) : std::min(p.max_seqlen_k, p.total_k);
}

template <class Params>
Int rows(const Params& p, bool query) {
  if (p.cu_seqlens_q != nullptr) return query ? p.total_q : p.total_k;
  return Int{p.batch} * (query ? p.seqlen_q : p.seqlen_k);
}

// The validator's answer against the oracle's: the same status, and a message that starts with the argument.
std::string compare_with_oracle(const api::Check& got, const Verdict& expected) {
  if (got.status != expected.status) {
    return "validator answered " + std::to_string(got.status) + " (\"" + got.message + "\"), the rules give " +
           std::to_string(expected.status) + " (" + (expected.argument.empty() ? "accept" : expected.argument) + ")";
  }
  if (got.ok()) return got.message.empty() ? "" : "an accepted call left the message \"" + got.message + "\"";
  const std::string& name = expected.argument;
  const bool named = got.message.compare(0, name.size(), name) == 0 &&
                     (got.message.size() == name.size() ||
                      !(std::isalnum(static_cast<unsigned char>(got.message[name.size()])) || got.message[name.size()] == '_'));
  return named ? "" : "the message \"" + got.message + "\" does not start with the argument " + name;
}

api::Check validate(const flash4_fwd_params& p) { return api::validate_fwd(p); }
api::Check validate(const flash4_bwd_params& p) { return api::validate_bwd(p); }

// The header's reading of valid params (flash4.h, "How valid params are read").
template <class Params>
std::string check_canonical(const Params& p, const Params& c) {
  Params again = api::canonicalize(c);
  if (std::memcmp(&again, &c, sizeof(c)) != 0) return "canonicalize is not idempotent";
  if (const api::Check check = validate(c); !check.ok()) {
    return "canonical params fail validation: " + check.message;
  }
  const Int lq = longest(p, true), lk = longest(p, false);
  if (p.cu_seqlens_q != nullptr && (c.max_seqlen_q != std::min(p.max_seqlen_q, std::max(p.total_q, 1)) ||
                                    c.max_seqlen_k != std::min(p.max_seqlen_k, std::max(p.total_k, 1)))) {
    return "canonical max_seqlen is not max_seqlen bounded by the total";
  }
  const Int left = p.window_left >= lk ? -1 : p.window_left;
  const Int right = p.causal == 1 ? 0 : p.window_right >= lq ? -1 : p.window_right;
  if (c.window_left != left || c.window_right != right) {
    return "canonical window (" + text(c.window_left) + ", " + text(c.window_right) + "), the header reads (" +
           text(left) + ", " + text(right) + ")";
  }
  return "";
}

// The mask arithmetic the kernels run, on the longest sequences and the extreme ones beside them. Only its
// overflow (undefined behaviour, caught by the sanitizer build) and its range are checked here.
std::string check_mask(Int lq, Int lk, int window_left, int window_right, int block_m, int block_n) {
  for (const auto& [sq, sk] : {std::pair{lq, lk}, std::pair{Int{1}, lk}, std::pair{lq, Int{1}}, std::pair{lq, Int{0}}}) {
    if (sq < 1) continue;
    const MaskSpec mask{static_cast<int>(sq), static_cast<int>(sk), window_left, window_right};
    const int last_m0 = static_cast<int>((sq - 1) / block_m * block_m);
    const KeyBlockRange keys = key_block_range(mask, last_m0, block_m, block_n);
    if (keys.count() > ceil_div(sk, block_n)) return "key_block_range visits more blocks than there are";
    if (sk < 1) continue;
    const int last_n0 = static_cast<int>((sk - 1) / block_n * block_n);
    const QueryBlockRange queries = query_block_range(mask, last_n0, block_n, block_m);
    if (queries.count() > ceil_div(sq, block_m)) return "query_block_range visits more blocks than there are";
    const RowSpan span = rows_seeing_key(mask, static_cast<int>(sk - 1), last_m0, block_m);
    if (span.first < 0 || span.last > block_m - 1) return "rows_seeing_key left its block";
  }
  return "";
}

// The head dim of the kernel that serves c in a build of every head dim: the smallest >= both of c's.
int kernel_head_dim(int needed) {
  for (int d : {64, 96, 128, 192, 256}) {
    if (d >= needed) return d;
  }
  return 0;
}

std::string check_plan(const flash4_fwd_params& c) {
  const host::FwdPlan plan = host::plan_forward(c, kDevice, kernel_head_dim(host::needed_head_dim(c)));
  const Int tiles = Int{c.batch} * c.heads_q * ceil_div(longest(c, true), plan.tile.block_m());
  if (plan.order.num_tiles() != tiles) {
    return "forward plan has " + text(plan.order.num_tiles()) + " tiles, the problem " + text(tiles);
  }
  if (plan.num_ctas < 1 || plan.num_ctas > std::min<Int>(tiles, kDevice.sm_count)) return "forward grid out of range";
  if (tiles - 1 + plan.num_ctas > kInt32Max) return "a CTA's next tile index overflows int32";
  for (const Int linear : {Int{0}, tiles - 1}) {
    const Tile tile = tile_at(plan.order, static_cast<int>(linear));
    if (tile.batch < 0 || tile.batch >= c.batch || tile.head < 0 || tile.head >= c.heads_q || tile.m_block < 0 ||
        tile.m_block >= plan.order.num_m_blocks) {
      return "tile_at(" + text(linear) + ") lies outside the problem";
    }
  }
  return check_mask(longest(c, true), longest(c, false), plan.window_left, plan.window_right, plan.tile.block_m(),
                    plan.tile.block_n);
}

std::string check_plan(const flash4_bwd_params& c) {
  const int kernel = kernel_head_dim(host::needed_head_dim(c));
  const host::BwdPlan plan = host::plan_backward(c, kernel);
  const Int tiles = ceil_div(longest(c, false), plan.tile.block_n) * c.batch * c.heads_kv;
  if (plan.num_tiles != tiles) return "backward plan has " + text(plan.num_tiles) + " tiles, the problem " + text(tiles);
  if (plan.m_blocks_max != ceil_div(longest(c, true), plan.tile.block_m)) return "backward query blocks miscounted";
  const Int accumulator = Int{plan.dq_copies} * c.heads_q * rows(c, true) * kernel * 4;
  if (plan.workspace.dq_accum_bytes < accumulator || plan.workspace.total < plan.workspace.dq_accum_bytes) {
    return "workspace of " + text(plan.workspace.total) + " bytes, the dQ accumulator alone needs " + text(accumulator);
  }
  const int grid = host::bwd_grid_ctas(plan, kDevice.sm_count, c.softcap > 0);
  if (grid < 1 || grid > plan.num_tiles) return "backward grid out of range";
  return check_mask(longest(c, true), longest(c, false), plan.window_left, plan.window_right, plan.tile.block_m,
                    plan.tile.block_n);
}

// An empty problem writes its outputs only: o and lse, or dq, dk, dv and dsink.
template <class Params>
std::string check_fills(const Params& c, std::initializer_list<const void*> outputs, const float* dsink) {
  const host::FillPlan fills = host::empty_problem_fills(c);
  for (const host::ZeroFill& fill : fills.zeros) {
    if (std::find(outputs.begin(), outputs.end(), fill.data) == outputs.end()) return std::string("fill of a non-output: ") + fill.name;
  }
  for (const host::FloatFill& fill : fills.floats) {
    const bool lse = static_cast<const void*>(fill.data) == static_cast<const void*>(c.lse) &&
                     fill.count == rows(c, true) * c.heads_q;
    const bool sinks = dsink != nullptr && fill.data == dsink && fill.count == c.heads_q && fill.per_head == nullptr &&
                       fill.value == 0.0f;
    if (!lse && !sinks) return std::string("bad float fill: ") + fill.name;
  }
  return "";
}

std::string fills_of(const flash4_fwd_params& c) { return check_fills(c, {c.o}, nullptr); }
std::string fills_of(const flash4_bwd_params& c) { return check_fills(c, {c.dq, c.dk, c.dv}, c.dsink); }

template <class Params>
CallResult check(const Params& p) {
  std::string broken;
  flash4_status status = FLASH4_ERROR_INTERNAL;
  try {
    // As the C ABI reads it: only struct_size bytes of a known layout (api/entry.hpp).
    const Params loaded = api::load(p);
    const api::Check got = validate(loaded);
    status = got.status;
    broken = compare_with_oracle(got, expected_verdict(p));
    if (broken.empty() && got.ok()) {
      const Params c = api::canonicalize(loaded);
      broken = check_canonical(loaded, c);
      if (broken.empty()) broken = api::is_empty(c) ? fills_of(c) : check_plan(c);
    }
  } catch (const std::exception& e) {
    broken = std::string("exception: ") + e.what();
  }
  return {status, broken.empty() ? "" : broken + "\n  params: " + describe(p)};
}

std::string pointer(const void* p) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%#llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buffer;
}

std::string exact(float value) {
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "%a", static_cast<double>(value));
  return buffer;
}

std::string strides(const char* name, const flash4_strides& s) {
  return std::string(" ") + name + "_strides={" + std::to_string(s.batch) + "," + std::to_string(s.seq) + "," +
         std::to_string(s.head) + "}";
}

template <class Params>
std::string shared_fields(const Params& p) {
  std::int32_t dtype = 0;
  std::memcpy(&dtype, &p.dtype, sizeof(dtype));
  return "struct_size=" + std::to_string(p.struct_size) + " dtype=" + std::to_string(dtype) +
         " batch=" + std::to_string(p.batch) + " seqlen_q=" + std::to_string(p.seqlen_q) +
         " seqlen_k=" + std::to_string(p.seqlen_k) + " heads_q=" + std::to_string(p.heads_q) +
         " heads_kv=" + std::to_string(p.heads_kv) + " head_dim=" + std::to_string(p.head_dim) +
         " softmax_scale=" + exact(p.softmax_scale) + " softcap=" + exact(p.softcap) +
         " causal=" + std::to_string(p.causal) + " window=(" + std::to_string(p.window_left) + "," +
         std::to_string(p.window_right) + ") cu_seqlens_q=" + pointer(p.cu_seqlens_q) +
         " cu_seqlens_k=" + pointer(p.cu_seqlens_k) + " max_seqlen_q=" + std::to_string(p.max_seqlen_q) +
         " max_seqlen_k=" + std::to_string(p.max_seqlen_k) + " total_q=" + std::to_string(p.total_q) +
         " total_k=" + std::to_string(p.total_k) + " q=" + pointer(p.q) + " k=" + pointer(p.k) + " v=" + pointer(p.v) +
         " lse=" + pointer(p.lse) + strides("q", p.q_strides) + strides("k", p.k_strides) + strides("v", p.v_strides) +
         strides("o", p.o_strides);
}

}  // namespace

CallResult check_call(const flash4_fwd_params& params) { return check(params); }
CallResult check_call(const flash4_bwd_params& params) { return check(params); }

std::string describe(const flash4_fwd_params& p) {
  return "fwd " + shared_fields(p) + " o=" + pointer(p.o) + " block_table=" + pointer(p.block_table) +
         " block_table_stride=" + std::to_string(p.block_table_stride) + " page_size=" + std::to_string(p.page_size) +
         " num_pages=" + std::to_string(p.num_pages);
}

std::string describe(const flash4_bwd_params& p) {
  return "bwd " + shared_fields(p) + " deterministic=" + std::to_string(p.deterministic) + " o=" + pointer(p.o) +
         " dout=" + pointer(p.dout) + " dq=" + pointer(p.dq) + " dk=" + pointer(p.dk) + " dv=" + pointer(p.dv) +
         strides("dout", p.dout_strides) + strides("dq", p.dq_strides) + strides("dk", p.dk_strides) +
         strides("dv", p.dv_strides);
}

}  // namespace flash4::contract
