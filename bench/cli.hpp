// flash4-bench's command line: the flags (parsed with CLI11), what they mean, and the exit statuses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reference/precision.hpp"

namespace flash4::bench {

enum class Mode { fwd, bwd };

// Exit statuses of flash4-bench, also listed in its --help.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;           // a flash4 or CUDA call failed
inline constexpr int kExitNotImplemented = 2;  // flash4 answered FLASH4_ERROR_NOT_IMPLEMENTED (older libraries)
inline constexpr int kExitVerifyFailed = 3;    // --verify found an output outside its tolerance
inline constexpr int kExitNoDevice = 4;        // --json without a CUDA device (there is nothing to measure)
inline constexpr int kExitUsage = 64;          // bad flags (EX_USAGE of sysexits.h)

// Unbounded window edge and no softcap, as in the C ABI.
inline constexpr int kNoWindow = -1;

struct Options {
  std::vector<Mode> modes = {Mode::fwd};  // --mode fwd|bwd|fwd,bwd: every case in each mode, in this order
  ref::Precision dtype = ref::Precision::bf16;
  std::optional<int> head_dim;  // --D: 128 for one case; --all sweeps {64, 128} unless given
  bool causal = false;
  int window_left = kNoWindow;  // --window L,R
  int window_right = kNoWindow;
  double softcap = 0;
  std::optional<int> seqlen;  // --N: Sq = Sk
  std::optional<int> seqlen_q, seqlen_k, batch, heads_q, heads_kv;
  // --varlen: one packed batch of sequences of these query lengths; --varlen-k: their key lengths (default
  // the same). Empty: fixed length.
  std::vector<int> varlen_q, varlen_k;
  int iters = 30;
  int warmup = 10;
  bool verify = false;
  bool deterministic = false;  // backward: deterministic = 1 (bit-identical gradients across runs)
  bool flush_l2 = false;       // overwrite a buffer larger than L2 before each timed launch
  bool json = false;
  bool all = false;
};

// What the command line asks for: the options to run with, or an exit status with the text to print (the help
// on stdout, or an error on stderr).
struct Parsed {
  std::optional<Options> options;
  int exit_code = kExitOk;
  std::string out;
  std::string err;
};
Parsed parse_options(int argc, const char* const* argv);

}  // namespace flash4::bench
