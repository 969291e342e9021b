// Random inputs for tests and the benchmark: unit-normal values, as attention inputs typically are
// after layer norm, rounded to the kernel's input precision so that the reference sees exactly what the
// kernel sees.
#include <cerrno>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

#include "reference/reference.hpp"

namespace flash4::ref {
namespace {

void append_normal(std::vector<float>& out, std::size_t n, Precision precision, std::mt19937_64& engine) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  out.reserve(out.size() + n);
  for (std::size_t e = 0; e < n; ++e) out.push_back(round_to(precision, normal(engine)));
}

}  // namespace

std::uint64_t fresh_seed() {
  // FLASH4_SEED (a test's reported seed, decimal) replays that test's inputs; empty counts as unset.
  if (const char* replay = std::getenv("FLASH4_SEED"); replay != nullptr && *replay != '\0') {
    char* end = nullptr;
    errno = 0;
    const unsigned long long seed = std::strtoull(replay, &end, 10);
    if (*replay < '0' || *replay > '9' || *end != '\0' || errno == ERANGE) {
      throw std::invalid_argument(std::string("FLASH4_SEED: not a decimal 64-bit seed: '") + replay + "'");
    }
    return seed;
  }
  std::random_device device;
  // random_device yields 32 bits per call; two calls fill the 64-bit seed.
  return (static_cast<std::uint64_t>(device()) << 32) | device();
}

std::vector<float> random_tensor(std::size_t n, Precision precision, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<float> out;
  append_normal(out, n, precision, engine);
  return out;
}

Inputs random_inputs(const Problem& problem, Precision precision, std::uint64_t seed) {
  validate(problem);
  std::mt19937_64 engine(seed);
  Inputs inputs;
  append_normal(inputs.q, problem.q_elements(), precision, engine);
  append_normal(inputs.k, problem.kv_elements(), precision, engine);
  append_normal(inputs.v, problem.v_elements(), precision, engine);
  append_normal(inputs.dout, problem.o_elements(), precision, engine);
  return inputs;
}

}  // namespace flash4::ref
