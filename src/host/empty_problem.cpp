// Implements host/empty_problem.hpp.
#include "host/empty_problem.hpp"

#include <cstdint>
#include <limits>

#include "host/kernel_choice.hpp"

namespace flash4::host {
namespace {

constexpr std::int64_t kElementBytes = 2;  // bf16 and fp16 alike

// The rows of the query-shaped and key-shaped tensors, and the batch axis they are laid out with.
struct Rows {
  std::int64_t batch;  // 1 for varlen: packed (total, heads, dim) tensors
  std::int64_t q;      // per batch entry
  std::int64_t k;

  bool empty() const { return q == 0 || k == 0; }
};

template <class Params>
Rows rows_of(const Params& p) {
  if (p.cu_seqlens_q != nullptr) return Rows{1, p.total_q, p.total_k};
  return Rows{p.batch, p.seqlen_q, p.seqlen_k};
}

// head_dim: the tensor's own (head_dim or head_dim_v), so that no column past it is written.
ZeroFill zero_fill(const char* name, void* data, const flash4_strides& strides, std::int64_t batch,
                   std::int64_t rows, std::int64_t heads, std::int64_t head_dim) {
  return ZeroFill{name,
                  data,
                  kElementBytes,
                  {batch, rows, heads, head_dim},
                  {batch > 1 ? strides.batch : 0, strides.seq, strides.head}};
}

// Appends the fill unless it writes nothing (a zero extent).
void add(FillPlan& plan, const ZeroFill& fill) {
  if (fill.elements() > 0) plan.zeros.push_back(fill);
}

}  // namespace

bool is_empty_problem(const flash4_fwd_params& params) { return rows_of(params).empty(); }
bool is_empty_problem(const flash4_bwd_params& params) { return rows_of(params).empty(); }

FillPlan empty_problem_fills(const flash4_fwd_params& p) {
  FillPlan plan;
  const Rows rows = rows_of(p);
  if (!rows.empty() || rows.q == 0) return plan;
  add(plan, zero_fill("o", p.o, p.o_strides, rows.batch, rows.q, p.heads_q, value_head_dim(p)));
  const std::int64_t lse_count = rows.batch * rows.q * p.heads_q;
  if (p.lse != nullptr && lse_count > 0) {
    // A row without keys has LSE = -inf, or its head's sink logit when there are sinks.
    plan.floats.push_back(
        FloatFill{"lse", p.lse, lse_count, -std::numeric_limits<float>::infinity(), p.sink, rows.q, p.heads_q});
  }
  return plan;
}

FillPlan empty_problem_fills(const flash4_bwd_params& p) {
  FillPlan plan;
  const Rows rows = rows_of(p);
  if (!rows.empty()) return plan;
  if (rows.k == 0) add(plan, zero_fill("dq", p.dq, p.dq_strides, rows.batch, rows.q, p.heads_q, p.head_dim));
  if (rows.q == 0) {
    add(plan, zero_fill("dk", p.dk, p.dk_strides, rows.batch, rows.k, p.heads_kv, p.head_dim));
    add(plan, zero_fill("dv", p.dv, p.dv_strides, rows.batch, rows.k, p.heads_kv, value_head_dim(p)));
  }
  // No row passes a gradient to the sinks: without queries there are none, without keys O = 0.
  if (p.dsink != nullptr) plan.floats.push_back(FloatFill{"dsink", p.dsink, p.heads_q, 0.0f, nullptr, 1, 1});
  return plan;
}

}  // namespace flash4::host
