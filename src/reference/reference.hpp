// The CPU reference for attention (DESIGN.md section 4):
//  - forward_fp64 / backward_fp64: the exact answer (fp64 arithmetic on the given float inputs) that
//    every kernel is measured against;
//  - forward_naive / backward_naive: a naive implementation in the kernel's precision, whose error
//    against fp64 sets the tolerance (tests/tolerance.hpp).
// Plain loops, written for clarity: tests use small sizes, and the benchmark verifies sampled rows of
// large problems with forward_fp64_row. Every entry point validates its arguments and throws
// std::invalid_argument (or std::out_of_range for a row index) on a mistake.
//
// Layouts and mask semantics are those of the C ABI (include/flash4/flash4.h), with dense tensors:
//   fixed length: q, dq (B, Sq, Hq, D); o, dout (B, Sq, Hq, Dv); k, dk (B, Sk, Hkv, D); v, dv (B, Sk, Hkv, Dv);
//                 lse (B, Hq, Sq)
//   varlen:       the same with (total_q, ...) for (B, Sq, ...) and (total_k, ...) for (B, Sk, ...);
//                 lse (Hq, total_q)
// where D is head_dim and Dv is head_dim_v (head_dim unless set).
// A query row that sees no key gets O = 0, LSE = -inf (the sink logit with a sink), and zero gradients.
// With seqused_q / seqused_k, sequence b uses the first seqused[b] rows of its span: the other query rows
// are not computed (the results hold 0 there, and so do the gradients of the unused key rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/precision.hpp"

namespace flash4::ref {

struct Problem {
  int batch = 1;
  int seqlen_q = 1;  // ignored when varlen
  int seqlen_k = 1;  // ignored when varlen
  int heads_q = 1;
  int heads_kv = 1;  // divides heads_q; query head h reads kv head h / (heads_q / heads_kv)
  int head_dim = 64;    // of q and k
  int head_dim_v = 0;   // of v and o (and dout, dv); 0: head_dim
  double scale = 0.125;  // softmax scale applied to q.k
  bool causal = false;   // bottom-right aligned
  int window_left = -1;  // -1 = unbounded
  int window_right = -1;
  double softcap = 0.0;  // 0 = off; else score = softcap * tanh(scale * q.k / softcap)
  // Empty: fixed length. Else batch + 1 row offsets each (starting at 0, non-decreasing). The "= {}"
  // lets designated initializers leave them out without a -Wmissing-field-initializers warning.
  std::vector<int> cu_seqlens_q = {};
  std::vector<int> cu_seqlens_k = {};
  // Empty: every row of a sequence's span is used. Else batch entries: sequence b uses the first
  // seqused[b] rows of its span (0 <= seqused[b] <= the span's rows), fixed length or varlen.
  std::vector<int> seqused_q = {};
  std::vector<int> seqused_k = {};
  // Empty: no sink. Else one logit per query head, in natural-log units and not multiplied by scale,
  // that joins every row's softmax as a column without a value (FlashAttention's learnable_sink).
  std::vector<float> sink = {};

  bool is_varlen() const { return !cu_seqlens_q.empty(); }
  bool has_sink() const { return !sink.empty(); }
  // Rows of sequence b's span in q / k.
  int span_q(int b) const { return is_varlen() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seqlen_q; }
  int span_k(int b) const { return is_varlen() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seqlen_k; }
  // Rows sequence b uses: the masks align to these.
  int seq_q(int b) const { return seqused_q.empty() ? span_q(b) : seqused_q[b]; }
  int seq_k(int b) const { return seqused_k.empty() ? span_k(b) : seqused_k[b]; }
  // First row of sequence b in the (rows, heads, head_dim) view of q / k.
  int offset_q(int b) const { return is_varlen() ? cu_seqlens_q[b] : b * seqlen_q; }
  int offset_k(int b) const { return is_varlen() ? cu_seqlens_k[b] : b * seqlen_k; }
  int rows_q() const { return is_varlen() ? cu_seqlens_q.back() : batch * seqlen_q; }
  int rows_k() const { return is_varlen() ? cu_seqlens_k.back() : batch * seqlen_k; }
  int kv_head(int h) const { return h / (heads_q / heads_kv); }
  int dim_v() const { return head_dim_v != 0 ? head_dim_v : head_dim; }

  // Element counts of the dense tensors: q and dq; o and dout; k and dk; v and dv.
  std::size_t q_elements() const { return static_cast<std::size_t>(rows_q()) * heads_q * head_dim; }
  std::size_t o_elements() const { return static_cast<std::size_t>(rows_q()) * heads_q * dim_v(); }
  std::size_t kv_elements() const { return static_cast<std::size_t>(rows_k()) * heads_kv * head_dim; }
  std::size_t v_elements() const { return static_cast<std::size_t>(rows_k()) * heads_kv * dim_v(); }
  std::size_t lse_elements() const { return static_cast<std::size_t>(rows_q()) * heads_q; }

  // Index of the first of the head_dim elements of query row i, head h, of sequence b (q, dq).
  std::size_t q_index(int b, int i, int h) const {
    return (static_cast<std::size_t>(offset_q(b) + i) * heads_q + h) * head_dim;
  }
  // The same for the dim_v() elements of o and dout.
  std::size_t o_index(int b, int i, int h) const {
    return (static_cast<std::size_t>(offset_q(b) + i) * heads_q + h) * dim_v();
  }
  // The same for key row j of kv head h_kv: head_dim elements of k and dk, dim_v() of v and dv.
  std::size_t kv_index(int b, int j, int h_kv) const {
    return (static_cast<std::size_t>(offset_k(b) + j) * heads_kv + h_kv) * head_dim;
  }
  std::size_t v_index(int b, int j, int h_kv) const {
    return (static_cast<std::size_t>(offset_k(b) + j) * heads_kv + h_kv) * dim_v();
  }
  std::size_t lse_index(int b, int h, int i) const {
    return is_varlen() ? static_cast<std::size_t>(h) * rows_q() + offset_q(b) + i
                       : (static_cast<std::size_t>(b) * heads_q + h) * seqlen_q + i;
  }
};

// Throws std::invalid_argument naming the field when the problem is inconsistent.
void validate(const Problem& problem);

// One line describing the problem, for test traces and messages.
std::string to_string(const Problem& problem);

// Within one sequence of sq queries and sk keys: query i sees key j iff j < sk and
//   (not causal or j <= i + sk - sq) and (window_left < 0 or j >= i + sk - sq - window_left)
//   and (window_right < 0 or j <= i + sk - sq + window_right).
bool key_visible(const Problem& problem, int sq, int sk, int i, int j);

struct ForwardResult64 {
  std::vector<double> o, lse;
};
ForwardResult64 forward_fp64(const Problem& problem, std::span<const float> q, std::span<const float> k,
                             std::span<const float> v);

// One query row (row `row` of sequence `batch`, query head `head`): writes dim_v() values to o_row and
// one to *lse. Costs O(seq_k * head_dim), so huge problems can be checked on a sample of rows.
void forward_fp64_row(const Problem& problem, std::span<const float> q, std::span<const float> k,
                      std::span<const float> v, int batch, int head, int row, double* o_row, double* lse);

// The naive same-precision forward: q, k, v rounded to `precision` (a no-op for inputs that already
// are), scores, softmax and sums in fp32, P rounded to `precision` before P @ V, fp32 accumulation,
// O rounded to `precision`; LSE stays fp32, as kernels write it.
struct ForwardResult32 {
  std::vector<float> o, lse;
};
ForwardResult32 forward_naive(const Problem& problem, Precision precision, std::span<const float> q,
                              std::span<const float> k, std::span<const float> v);

// Gradients of sum(O * dout). dk and dv of a kv head sum the contributions of all query heads of its
// GQA group. dsink (heads_q values, empty without a sink): d sum(O * dout) / d sink_h
// = -sum over the used rows i of head h of exp(sink_h - LSE_i) * (dout_i . O_i).
struct BackwardResult64 {
  std::vector<double> dq, dk, dv, dsink;
};
BackwardResult64 backward_fp64(const Problem& problem, std::span<const float> q, std::span<const float> k,
                               std::span<const float> v, std::span<const float> dout);

// The naive same-precision backward: inputs rounded to `precision`, fp32 math, P and dS rounded to
// `precision` before the matmuls that consume them, dq/dk/dv rounded to `precision` at the end. delta =
// dout . O takes O from its own rounded forward, or, when `o` is given (laid out as dout), from that: the
// forward output a kernel's backward received, so that the baseline starts from the same O. Where dS
// cancels (rows that see one to three keys) O's rounding is most of dS's error, and two forwards that
// round O differently made the comparison a coin toss (a kernel at 2-3x the baseline's error in about one
// run in a few hundred, with identical gradients from two library versions).
struct BackwardResult32 {
  std::vector<float> dq, dk, dv, dsink;
};
BackwardResult32 backward_naive(const Problem& problem, Precision precision, std::span<const float> q,
                                std::span<const float> k, std::span<const float> v,
                                std::span<const float> dout, std::span<const float> o = {});

// A nondeterministic seed (std::random_device); tests print it so that a failure can be replayed: with
// the environment variable FLASH4_SEED set (decimal), every call returns that value instead, so every
// tensor drawn with a default seed is then the same draw. A value that is not a decimal 64-bit number
// throws std::invalid_argument naming it.
std::uint64_t fresh_seed();

// n values drawn from normal(0, 1), rounded to `precision`; the same seed gives the same values.
std::vector<float> random_tensor(std::size_t n, Precision precision, std::uint64_t seed = fresh_seed());

// Random q, k, v and dout for a problem, as random_tensor makes them, from one seed.
struct Inputs {
  std::vector<float> q, k, v, dout;
};
Inputs random_inputs(const Problem& problem, Precision precision, std::uint64_t seed = fresh_seed());

}  // namespace flash4::ref
