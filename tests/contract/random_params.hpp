// Random params structs for the contract fuzz test, from a seed. Most are built as a problem would be (sizes,
// layouts, pointers to distinct buffers) with a few fields then set to edge values (limits, off-by-one sizes,
// NaN, aliasing or overlapping outputs, misaligned or NULL pointers), so that about half pass validation
// and reach the planners; a few are raw random bytes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>

#include "flash4/flash4.h"

namespace flash4::contract {

class RandomParams {
 public:
  explicit RandomParams(std::uint64_t seed) : rng_(seed) {}

  flash4_fwd_params fwd();
  flash4_bwd_params bwd();

 private:
  struct Shape;
  template <class Params>
  Params make();
  Shape shape();
  template <class Params>
  void fill(Params& p, const Shape& s);
  void fill_paged(flash4_fwd_params& p, const Shape& s);
  template <class Params>
  void mutate(Params& p);
  std::int32_t length(bool allow_huge);
  std::int32_t edge_int();
  float scale();
  flash4_strides layout(const Shape& s, bool query, bool value);
  const void* pointer(int slot);
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T>
  T pick(std::initializer_list<T> values) {
    return values.begin()[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng_)];
  }
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_); }

  std::mt19937_64 rng_;
};

}  // namespace flash4::contract
