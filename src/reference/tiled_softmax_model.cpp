#include "reference/tiled_softmax_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <stdexcept>

#include "kernels/common/soft_exp2.hpp"

namespace flash4::ref {
namespace {

// The kernel works in log2 units: exp(scale * s) = 2^(scale * log2(e) * s).
constexpr float kLog2e = std::numbers::log2e_v<float>;
constexpr float kLn2 = std::numbers::ln2_v<float>;
// The exp2 split repeats every 8 columns (soft_exp2_eighths is counted in eighths).
constexpr int kExp2SplitPeriod = 8;

void validate(const TiledModelOptions& options, int sq, int sk, int d, std::span<const float> q,
              std::span<const float> k, std::span<const float> v) {
  if (sq < 0 || sk < 0 || d < 1) throw std::invalid_argument("tiled model: need sq >= 0, sk >= 0, d >= 1");
  if (options.block_n < 1) throw std::invalid_argument("tiled model: block_n must be >= 1");
  if (!(options.threshold >= 0.0f)) throw std::invalid_argument("tiled model: threshold must be >= 0");
  if (options.soft_exp2_eighths < 0 || options.soft_exp2_eighths > kExp2SplitPeriod) {
    throw std::invalid_argument("tiled model: soft_exp2_eighths must be in [0, 8]");
  }
  if (!(options.scale > 0.0f)) throw std::invalid_argument("tiled model: scale must be > 0");
  const auto rows = [d](int n) { return static_cast<std::size_t>(n) * static_cast<std::size_t>(d); };
  if (q.size() != rows(sq) || k.size() != rows(sk) || v.size() != rows(sk)) {
    throw std::invalid_argument("tiled model: q must hold sq * d floats, k and v sk * d");
  }
}

// One query row's state across key tiles: the running max (log2 units, possibly stale), the row sum and
// the unnormalized output, all relative to the same max.
struct RowState {
  float max = kNegInf;
  float sum = 0.0f;
  std::vector<float> acc;
};

class RowRecurrence {
 public:
  RowRecurrence(const TiledModelOptions& options, int sk, int d, std::span<const float> k,
                std::span<const float> v, TiledModelResult& counters)
      : options_(options), sk_(sk), d_(d), k_(k), v_(v), counters_(counters),
        scale_log2_(options.scale * kLog2e), scores_(static_cast<std::size_t>(options.block_n)) {}

  // Runs all key tiles for one query row (whose last visible key is `last_key`, -1 for none) and writes
  // its normalized output and LSE.
  void run(std::span<const float> q_row, int last_key, std::span<float> o_row, float& lse) {
    RowState state;
    state.acc.assign(static_cast<std::size_t>(d_), 0.0f);
    for (int tile_start = 0; tile_start < sk_; tile_start += options_.block_n) {
      const int tile_cols = std::min(options_.block_n, sk_ - tile_start);
      const float tile_max = load_scores(q_row, tile_start, tile_cols, last_key);
      update_max(state, tile_max);
      accumulate(state, tile_start, tile_cols);
    }
    finish(state, o_row, lse);
  }

 private:
  // Raw scores q . k in float (masked ones -inf) into scores_; returns the tile max in log2 units.
  float load_scores(std::span<const float> q_row, int tile_start, int tile_cols, int last_key) {
    float raw_max = kNegInf;
    for (int c = 0; c < tile_cols; ++c) {
      const int key = tile_start + c;
      float s = kNegInf;
      if (key <= last_key) {
        const float* k_row = k_.data() + static_cast<std::size_t>(key) * d_;
        s = 0.0f;
        for (int i = 0; i < d_; ++i) s += q_row[i] * k_row[i];
      }
      scores_[c] = s;
      raw_max = std::max(raw_max, s);
    }
    // The max of the raw scores, scaled afterwards (same order since scale > 0), as the kernel does.
    return raw_max * scale_log2_;
  }

  // The lazy-rescaling decision, as the kernel takes it once per row and tile.
  void update_max(RowState& state, float tile_max) {
    if (!(tile_max > state.max)) return;
    if (!needs_rescale(state.max, tile_max, options_.threshold)) {
      ++counters_.rescales_skipped;
      return;
    }
    // A row that saw only masked keys has O = l = 0: moving its max is initialization, not a rescale.
    if (state.max != kNegInf) {
      const float factor = std::exp2(state.max - tile_max);
      for (float& a : state.acc) a *= factor;
      state.sum *= factor;
      ++counters_.rescales_done;
    }
    state.max = tile_max;
  }

  // P = 2^(scale_log2 * s - max) (up to 2^threshold with a stale max), the row sum from the float P,
  // and PV from P rounded to 16 bits, as the kernel feeds P to the tensor cores. The exponent is one
  // FFMA on the raw score, as in the kernel: with huge scores its rounding (about |scale_log2 * s| *
  // 2^-24) exceeds that of subtracting the max before scaling.
  void accumulate(RowState& state, int tile_start, int tile_cols) {
    const float offset = exponent_offset(state.max);
    for (int c = 0; c < tile_cols; ++c) {
      const float x = std::fma(scores_[c], scale_log2_, -offset);
      const bool on_fma_pipe = c % kExp2SplitPeriod < options_.soft_exp2_eighths;
      const float p = on_fma_pipe ? soft_exp2(x) : std::exp2(x);
      state.sum += p;
      const float p16 = round_to(options_.precision, p);
      const float* v_row = v_.data() + static_cast<std::size_t>(tile_start + c) * d_;
      for (int i = 0; i < d_; ++i) state.acc[i] += p16 * v_row[i];
    }
  }

  void finish(const RowState& state, std::span<float> o_row, float& lse) const {
    if (state.max == kNegInf) {  // no visible key: the kernel's defined output for a fully masked row
      std::fill(o_row.begin(), o_row.end(), 0.0f);
      lse = kNegInf;
      return;
    }
    for (int i = 0; i < d_; ++i) o_row[i] = round_to(options_.precision, state.acc[i] / state.sum);
    lse = (state.max + std::log2(state.sum)) * kLn2;
  }

  const TiledModelOptions& options_;
  int sk_;
  int d_;
  std::span<const float> k_;
  std::span<const float> v_;
  TiledModelResult& counters_;
  float scale_log2_;
  std::vector<float> scores_;
};

}  // namespace

TiledModelResult run_tiled_softmax_model(const TiledModelOptions& options, int sq, int sk, int d,
                                         std::span<const float> q, std::span<const float> k,
                                         std::span<const float> v) {
  validate(options, sq, sk, d, q, k, v);
  TiledModelResult result;
  result.o.resize(static_cast<std::size_t>(sq) * d);
  result.lse.resize(static_cast<std::size_t>(sq));
  RowRecurrence recurrence(options, sk, d, k, v, result);
  // Bottom-right causal alignment: the last query row sees every key.
  const int causal_shift = sk - sq;
  for (int row = 0; row < sq; ++row) {
    const int last_key = options.causal ? std::min(sk - 1, row + causal_shift) : sk - 1;
    const std::size_t offset = static_cast<std::size_t>(row) * d;
    recurrence.run(q.subspan(offset, d), last_key, std::span<float>(result.o).subspan(offset, d),
                   result.lse[row]);
  }
  return result;
}

}  // namespace flash4::ref
