// Implements soak_problems.hpp.
#include "soak/soak_problems.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace flash4::soak {
namespace {

constexpr int kHeadDims[] = {64, 96, 128, 192, 256};
constexpr float kSoftcaps[] = {5.0f, 10.0f, 30.0f, 50.0f};

// splitmix64: a well-mixed stream seed per (seed, index, purpose).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  // 1..hi, log-uniform: short sequences (tails below one tile) as often as long ones.
  int length(int hi) {
    const double x = std::uniform_real_distribution<double>(0.0, std::log(static_cast<double>(hi) + 1))(rng_);
    return std::clamp(static_cast<int>(std::exp(x)), 1, hi);
  }
  template <class T, std::size_t N>
  T pick(const T (&values)[N]) {
    return values[static_cast<std::size_t>(uniform(0, static_cast<int>(N) - 1))];
  }

 private:
  std::mt19937_64 rng_;
};

void draw_lengths(Draw& d, test::BackwardCase& c) {
  if (d.chance(0.35)) {  // varlen, with empty sequences and sequences of one side only
    const int sequences = d.uniform(1, 4);
    c.varlen_q.clear();
    c.varlen_k.clear();
    for (int b = 0; b < sequences; ++b) {
      c.varlen_q.push_back(d.chance(0.15) ? 0 : d.length(kMaxSeqlen));
      c.varlen_k.push_back(d.chance(0.15) ? 0 : d.length(kMaxSeqlen));
    }
    c.batch = sequences;
    return;
  }
  c.varlen_q.clear();
  c.varlen_k.clear();
  c.batch = d.uniform(1, 3);
  c.seqlen_q = d.length(kMaxSeqlen);
  c.seqlen_k = d.chance(0.2) ? c.seqlen_q : d.length(kMaxSeqlen);
}

void draw_mask(Draw& d, test::BackwardCase& c) {
  c.causal = d.chance(0.4);
  c.window_left = c.window_right = -1;
  if (d.chance(0.3)) {
    c.window_left = d.chance(0.8) ? d.uniform(0, 300) : -1;
    // With causal, any right edge reads as 0 (FlashAttention's meaning): draw it anyway.
    c.window_right = d.chance(0.8) ? d.uniform(0, 300) : -1;
  }
}

}  // namespace

double work_of(const test::BackwardCase& c) {
  double pairs = 0;
  if (c.varlen_q.empty()) {
    pairs = double(c.batch) * c.seqlen_q * c.seqlen_k;
  } else {
    for (std::size_t b = 0; b < c.varlen_q.size(); ++b) pairs += double(c.varlen_q[b]) * c.varlen_k[b];
  }
  return pairs * c.heads_q * c.head_dim;
}

namespace {

bool has_empty_sequence(const std::vector<int>& lengths) {
  return std::find(lengths.begin(), lengths.end(), 0) != lengths.end();
}

}  // namespace

std::vector<std::string> features_of(const test::BackwardCase& c) {
  const bool varlen = !c.varlen_q.empty();
  std::string head_dim = "d";  // appended: GCC 12 warns falsely (-Wrestrict) on "d" + to_string(...)
  head_dim += std::to_string(c.head_dim);
  const std::pair<std::string, bool> features[] = {
      {c.dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16", true},
      {head_dim, true},
      {"causal", c.causal},
      {"window", c.window_left >= 0 || c.window_right >= 0},
      {"causal_with_window_right", c.causal && c.window_right > 0},
      {"softcap", c.softcap > 0},
      {"mha", c.heads_q == c.heads_kv},
      {"gqa", c.heads_kv > 1 && c.heads_q > c.heads_kv},
      {"mqa", c.heads_kv == 1 && c.heads_q > 1},
      {"varlen", varlen},
      {"varlen_empty_sequence", varlen && (has_empty_sequence(c.varlen_q) || has_empty_sequence(c.varlen_k))},
      {"sq_ne_sk", varlen ? c.varlen_q != c.varlen_k : c.seqlen_q != c.seqlen_k},
      {"strided", c.strided},
      {"deterministic", c.deterministic}};
  std::vector<std::string> present;
  for (const auto& [name, here] : features) {
    if (here) present.push_back(name);
  }
  return present;
}

std::uint64_t input_seed(std::uint64_t seed, std::uint64_t index) { return mix(mix(seed) ^ mix(index) ^ 1); }

test::BackwardCase soak_problem(std::uint64_t seed, std::uint64_t index) {
  Draw d(mix(mix(seed) ^ mix(index)));
  test::BackwardCase c;
  c.dtype = d.chance(0.5) ? FLASH4_DTYPE_BF16 : FLASH4_DTYPE_FP16;
  c.head_dim = d.pick(kHeadDims);
  // MHA, GQA and MQA with up to kMaxHeadsQ query heads.
  c.heads_kv = d.chance(0.7) ? 1 : 2;
  c.heads_q = c.heads_kv * d.uniform(1, kMaxHeadsQ / c.heads_kv);
  draw_mask(d, c);
  c.softcap = d.chance(0.2) ? d.pick(kSoftcaps) : 0.0f;
  c.strided = d.chance(0.3);
  c.deterministic = d.chance(0.15);
  do {
    draw_lengths(d, c);
  } while (work_of(c) > kMaxWork);
  return c;
}

test::BackwardCase sample_problem(int index) {
  test::BackwardCase c;
  c.head_dim = kHeadDims[index % 5];
  c.dtype = index % 2 ? FLASH4_DTYPE_FP16 : FLASH4_DTYPE_BF16;
  c.seqlen_q = 77 + 13 * index;
  c.seqlen_k = 140 - 9 * index;
  c.heads_kv = index % 3 == 0 ? 1 : 2;  // MQA, MHA, GQA in turn
  c.heads_q = index % 3 == 2 ? 4 : 2;
  c.causal = index % 2 == 0;
  if (index % 4 == 1) c.window_left = 40, c.window_right = 24;
  if (index % 5 == 2) c.softcap = 30.0f;
  c.strided = index % 3 == 1;
  c.deterministic = index == 4;
  if (index >= 5) {  // varlen with an empty sequence on each side
    c.varlen_q = {c.seqlen_q, 0, 33};
    c.varlen_k = {c.seqlen_k, 17, 0};
    c.batch = 3;
  }
  return c;
}

}  // namespace flash4::soak
