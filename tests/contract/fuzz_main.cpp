// flash4_fuzz: the contract fuzz test as CI runs it (tools/fuzz-ci.sh, in a build with ASan and UBSan). The
// seed cases, then random params structs (random_params.hpp) of both directions, each checked by check_call
// (contract_check.hpp). Prints a summary; exits 1 at the first broken call, printing it.
//   flash4_fuzz [--calls N] [--seed S] [--write-corpus DIR]
// --write-corpus writes the seed cases as libFuzzer inputs into DIR and exits.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "contract/contract_check.hpp"
#include "contract/random_params.hpp"
#include "contract/seed_cases.hpp"

namespace {

using namespace flash4::contract;

struct Options {
  std::uint64_t calls = 1000000;
  std::uint64_t seed = 1;
  std::string corpus_dir;
};

bool parse(int argc, char** argv, Options& options) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--calls") options.calls = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--seed") options.seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--write-corpus") options.corpus_dir = argv[i + 1];
    else return false;
  }
  return argc % 2 == 1;
}

int write_corpus(const std::string& dir) {
  int index = 0;
  for (const SeedCase& c : seed_cases()) {
    const std::vector<unsigned char> bytes = encode(c);
    std::ofstream(dir + "/seed-" + std::to_string(index++), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::printf("flash4_fuzz: wrote %d seed inputs to %s\n", index, dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr, "usage: %s [--calls N] [--seed S] [--write-corpus DIR]\n", argv[0]);
    return 2;
  }
  if (!options.corpus_dir.empty()) return write_corpus(options.corpus_dir);
  const auto start = std::chrono::steady_clock::now();
  for (const SeedCase& c : seed_cases()) {
    const std::string broken = std::visit([](const auto& p) { return check_call(p).broken; }, c.params);
    if (!broken.empty()) {
      std::printf("flash4_fuzz: seed case \"%s\": %s\n", c.name.c_str(), broken.c_str());
      return 1;
    }
  }
  RandomParams random(options.seed);
  std::map<int, std::uint64_t> statuses;  // how often the validator answered each status
  for (std::uint64_t call = 0; call < options.calls; ++call) {
    const CallResult result = call % 2 == 0 ? check_call(random.fwd()) : check_call(random.bwd());
    ++statuses[result.status];
    if (!result.broken.empty()) {
      std::printf("flash4_fuzz: call %llu of seed %llu: %s\n", static_cast<unsigned long long>(call),
                  static_cast<unsigned long long>(options.seed), result.broken.c_str());
      return 1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("flash4_fuzz: %llu random calls (seed %llu) and %zu seed cases in %.1f s, 0 mismatches; statuses:",
              static_cast<unsigned long long>(options.calls), static_cast<unsigned long long>(options.seed),
              seed_cases().size(), seconds);
  for (const auto& [status, count] : statuses) std::printf(" %d:%llu", status, static_cast<unsigned long long>(count));
  std::printf("\n");
  return 0;
}
