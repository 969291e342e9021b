// flash4-bench's command line: defaults, every flag, and the errors for what it must refuse.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli.hpp"

namespace flash4::bench {
namespace {

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "flash4-bench");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

// The options of a command line that must parse.
Options options(std::vector<std::string> args) {
  const Parsed parsed = parse(std::move(args));
  EXPECT_TRUE(parsed.options.has_value()) << parsed.err;
  return parsed.options.value_or(Options{});
}

// The error of a command line that must be refused with the usage status.
std::string error(std::vector<std::string> args) {
  const Parsed parsed = parse(std::move(args));
  EXPECT_FALSE(parsed.options.has_value());
  EXPECT_EQ(parsed.exit_code, kExitUsage);
  EXPECT_TRUE(parsed.out.empty());
  return parsed.err;
}

TEST(BenchCli, Defaults) {
  const Options o = options({});
  EXPECT_EQ(o.modes, std::vector<Mode>{Mode::fwd});
  EXPECT_EQ(o.dtype, ref::Precision::bf16);
  EXPECT_FALSE(o.head_dim || o.seqlen || o.batch || o.heads_q || o.heads_kv);
  EXPECT_EQ(o.window_left, kNoWindow);
  EXPECT_EQ(o.window_right, kNoWindow);
  EXPECT_EQ(o.softcap, 0);
  EXPECT_TRUE(o.varlen_q.empty());
  EXPECT_EQ(o.iters, 30);
  EXPECT_EQ(o.warmup, 10);
  EXPECT_FALSE(o.verify || o.json || o.all || o.flush_l2 || o.deterministic || o.causal);
}

TEST(BenchCli, TheGpuScriptsCommandLines) {
  // tools/gpu-run.sh and tools/gpu-ab.sh.
  Options o = options({"--all", "--json", "--flush-l2", "--D", "128"});
  EXPECT_TRUE(o.all && o.json && o.flush_l2);
  EXPECT_EQ(o.head_dim, 128);
  o = options({"--all", "--json", "--mode", "bwd", "--flush-l2", "--D", "64"});
  EXPECT_EQ(o.modes, std::vector<Mode>{Mode::bwd});
  o = options({"--json", "--D", "64", "--N", "16384", "--B", "1", "--H", "32", "--causal", "1", "--iters", "50"});
  EXPECT_TRUE(o.causal);
  EXPECT_EQ(o.seqlen, 16384);
  EXPECT_EQ(o.batch, 1);
  EXPECT_EQ(o.heads_q, 32);
  EXPECT_EQ(o.iters, 50);
}

TEST(BenchCli, EveryFeatureHasAFlag) {
  const Options o = options({"--mode", "fwd,bwd", "--dtype", "fp16", "--D", "96", "--causal", "1", "--window",
                             "256,0", "--softcap", "30", "--H", "16", "--Hkv", "4", "--varlen", "100,0,513",
                             "--varlen-k", "200,7,513", "--deterministic", "--verify", "--warmup", "0"});
  EXPECT_EQ(o.modes, (std::vector<Mode>{Mode::fwd, Mode::bwd}));
  EXPECT_EQ(o.dtype, ref::Precision::fp16);
  EXPECT_EQ(o.head_dim, 96);
  EXPECT_TRUE(o.causal && o.deterministic && o.verify);
  EXPECT_EQ(o.window_left, 256);
  EXPECT_EQ(o.window_right, 0);
  EXPECT_EQ(o.softcap, 30);
  EXPECT_EQ(o.heads_q, 16);
  EXPECT_EQ(o.heads_kv, 4);
  EXPECT_EQ(o.varlen_q, (std::vector<int>{100, 0, 513}));
  EXPECT_EQ(o.varlen_k, (std::vector<int>{200, 7, 513}));
  EXPECT_EQ(o.warmup, 0);
}

TEST(BenchCli, FlagsTakeAnExplicitValue) {
  EXPECT_FALSE(options({"--verify=0"}).verify);
  EXPECT_TRUE(options({"--verify=1"}).verify);
  EXPECT_FALSE(options({"--json=false"}).json);
  EXPECT_EQ(options({"--D=64"}).head_dim, 64);
  EXPECT_EQ(options({"--window", "-1", "8"}).window_right, 8);
}

TEST(BenchCli, HelpListsEveryFlagAndExitsZero) {
  const Parsed parsed = parse({"--help"});
  EXPECT_FALSE(parsed.options.has_value());
  EXPECT_EQ(parsed.exit_code, kExitOk);
  for (const char* flag : {"--mode", "--dtype", "--D", "--causal", "--window", "--softcap", "--N", "--Sq", "--Sk",
                           "--B", "--H", "--Hkv", "--varlen", "--varlen-k", "--iters", "--warmup", "--verify",
                           "--deterministic", "--flush-l2", "--json", "--all", "Exit status"}) {
    EXPECT_NE(parsed.out.find(flag), std::string::npos) << flag;
  }
}

TEST(BenchCli, UnknownFlagsAreNamed) {
  EXPECT_NE(error({"--bogus"}).find("--bogus"), std::string::npos);
  EXPECT_NE(error({"--D", "64", "stray"}).find("stray"), std::string::npos);
}

TEST(BenchCli, MissingAndBadValuesAreNamed) {
  EXPECT_NE(error({"--D"}).find("--D"), std::string::npos);
  EXPECT_NE(error({"--D", "0"}).find(">= 1"), std::string::npos);
  EXPECT_NE(error({"--N", "12x"}).find("12x"), std::string::npos);
  EXPECT_NE(error({"--causal", "2"}).find("--causal"), std::string::npos);
  EXPECT_NE(error({"--dtype", "fp8"}).find("fp8"), std::string::npos);
  EXPECT_NE(error({"--mode", "fwd,sideways"}).find("sideways"), std::string::npos);
  EXPECT_NE(error({"--mode", "bwd,bwd"}).find("twice"), std::string::npos);
  EXPECT_NE(error({"--window", "5"}).find("--window"), std::string::npos);
  EXPECT_NE(error({"--window", "-2,0"}).find(">= -1"), std::string::npos);
  EXPECT_NE(error({"--softcap", "-1"}).find("--softcap"), std::string::npos);
  EXPECT_NE(error({"--softcap", "inf"}).find("finite"), std::string::npos);
  EXPECT_NE(error({"--verify=maybe"}).find("--verify"), std::string::npos);
  EXPECT_NE(error({"--iters", "0"}).find(">= 1"), std::string::npos);
  EXPECT_NE(error({"--varlen", "4,-1"}).find(">= 0"), std::string::npos);
}

TEST(BenchCli, ContradictoryFlagsAreRefused) {
  EXPECT_NE(error({"--all", "--N", "512"}).find("--all"), std::string::npos);
  EXPECT_NE(error({"--all", "--causal", "1"}).find("--all"), std::string::npos);
  EXPECT_NE(error({"--all", "--varlen", "5"}).find("--all"), std::string::npos);
  EXPECT_NE(error({"--varlen", "5,6", "--B", "2"}).find("--varlen"), std::string::npos);
  EXPECT_NE(error({"--varlen-k", "5"}).find("needs --varlen"), std::string::npos);
  EXPECT_NE(error({"--varlen", "5,6", "--varlen-k", "5"}).find("1 key lengths for 2 sequences"), std::string::npos);
}

}  // namespace
}  // namespace flash4::bench
