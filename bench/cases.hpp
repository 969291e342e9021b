// The benchmark cases flash4-bench's flags describe, and what each one computes and moves.
#pragma once

#include <cstddef>
#include <vector>

#include "cli.hpp"
#include "reference/precision.hpp"
#include "reference/reference.hpp"

namespace flash4::bench {

struct Case {
  Mode mode;
  ref::Precision dtype;
  int head_dim;
  bool causal;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv;  // varlen: batch = sequences, seqlen_* = their maximum
  int window_left = kNoWindow;
  int window_right = kNoWindow;
  double softcap = 0;
  bool deterministic = false;  // backward only
  // Varlen: the lengths of the packed sequences (batch of each). Empty: fixed length.
  std::vector<int> varlen_q = {};
  std::vector<int> varlen_k = {};

  bool is_varlen() const { return !varlen_q.empty(); }
  // Rows of the (rows, heads, head_dim) views of q and k: batch * seqlen, or the packed total.
  std::size_t rows_q() const;
  std::size_t rows_k() const;
};

// One case from the flags, or the anchors' sweep for --all; repeated for each mode.
std::vector<Case> cases(const Options& options);

// The CPU reference's description of the same problem (softmax scale 1/sqrt(D), as the library's default).
ref::Problem to_problem(const Case& c);

// (query, key) pairs a window leaves visible in one sequence of sq queries and sk keys (causal sets the right
// edge to 0), counted in O(sq): the mask rule of ref::key_visible.
double visible_pairs(int sq, int sk, bool causal, int window_left, int window_right);

// The FLOPs a case is credited with. Without a window, the anchors' count (their meta.flops: "fwd = 4*B*H*N*N*D
// (x0.5 causal); bwd = 2.5 x fwd"): forward 4 * H * Sq * Sk * D summed over the sequences, halved when causal
// (not the exact count of the visible entries, so that the numbers compare with FA3's and cuDNN's). With a
// window, 4 * H * D * the visible pairs (the anchors have no windowed cases). The backward is 2.5x the forward
// (five matmuls, QK^T, dO V^T, dS K, dS^T Q, P^T dO, against the forward's two).
double flops(const Case& c);

// Compulsory DRAM traffic: every input read once and every output written once (q, k, v, o, lse forward;
// q, k, v, o, dout, lse, dq, dk, dv backward).
double bytes_moved(const Case& c);

}  // namespace flash4::bench
