// The start of the contract fuzz test's corpus: the findings of issue 28 (an adversarial test of the C ABI)
// and the edges of the rules that came with their fixes, as named params structs. The seeded test runs them
// first; flash4_fuzz --write-corpus writes them as libFuzzer inputs (a direction byte, then the struct).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "flash4/flash4.h"

namespace flash4::contract {

struct SeedCase {
  std::string name;
  std::variant<flash4_fwd_params, flash4_bwd_params> params;
};

std::vector<SeedCase> seed_cases();

// A libFuzzer input: byte 0 picks the direction (even: forward), the rest are the struct's first bytes
// (zeros past the input's end).
std::vector<unsigned char> encode(const SeedCase& c);
std::variant<flash4_fwd_params, flash4_bwd_params> decode(const unsigned char* data, std::size_t size);

}  // namespace flash4::contract
