// The contract fuzz test as a libFuzzer target (built where the compiler is clang): each input is a direction
// byte and a params struct's bytes (seed_cases.hpp), checked by check_call; a broken call aborts with its report.
//   flash4_contract_libfuzzer CORPUS_DIR -runs=N     (tools/fuzz-ci.sh starts the corpus with the seed cases)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <variant>

#include "contract/contract_check.hpp"
#include "contract/seed_cases.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto params = flash4::contract::decode(data, size);
  const std::string broken = std::visit([](const auto& p) { return flash4::contract::check_call(p).broken; }, params);
  if (!broken.empty()) {
    std::fprintf(stderr, "flash4 contract broken: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
