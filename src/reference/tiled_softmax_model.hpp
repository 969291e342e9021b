// CPU model of the forward kernel's per-row tile recurrence: the online softmax over key blocks with
// FA4's lazy rescaling, in the kernel's float32 arithmetic. It exists to show, without a GPU, that the
// kernel's numerics (stale max kept while the growth is <= threshold, software exp2 on a share of the
// columns, P rounded to 16 bits before PV) stay within the tolerance of the fp64 reference, and to count
// how many rescales the lazy rule saves.
//
// Query rows are independent in the recurrence, so the query block size does not change any result and
// is not modelled; the key block size does (it decides which scores share a tile max).
#pragma once

#include <span>
#include <vector>

#include "kernels/common/online_softmax.hpp"
#include "reference/precision.hpp"

namespace flash4::ref {

struct TiledModelOptions {
  int block_n = 128;                              // keys per tile
  float threshold = kLazyRescaleThresholdLog2;     // log2 units; 0 gives the classic recurrence
  // Column c of a tile (0 <= c < block_n) uses soft_exp2 when (c % 8) < soft_exp2_eighths, exp2f
  // otherwise: the kernel's compile-time split of fragment columns between the FMA pipe and MUFU.
  int soft_exp2_eighths = 0;
  // The kernel's 16-bit dtype: P is rounded to it before the PV matmul, and O when written.
  Precision precision = Precision::bf16;
  bool causal = false;  // bottom-right aligned: query i sees key j iff j <= i + (sk - sq)
  float scale = 1.0f;   // softmax scale multiplying Q K^T (> 0); callers usually pass 1/sqrt(d)
};

struct TiledModelResult {
  std::vector<float> o;    // sq x d, row-major, rounded to the precision; 0 for rows that see no key
  std::vector<float> lse;  // sq, natural log of the row sum of exp(scale * score); -inf for rows that see no key
  // Per (row, tile) where the tile max exceeded the running max of a row that had already seen a key:
  // done = the max moved and O, l were multiplied; skipped = the lazy rule kept the stale max.
  long rescales_done = 0;
  long rescales_skipped = 0;
};

// q: sq x d, k and v: sk x d, row-major. Throws std::invalid_argument on inconsistent sizes or options.
TiledModelResult run_tiled_softmax_model(const TiledModelOptions& options, int sq, int sk, int d,
                                         std::span<const float> q, std::span<const float> k,
                                         std::span<const float> v);

}  // namespace flash4::ref
