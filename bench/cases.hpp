// flash4-bench command line: the flags, and the list of benchmark cases they describe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reference/precision.hpp"

namespace flash4::bench {

enum class Mode { fwd, bwd };

// Exit statuses of flash4-bench, also listed in its usage text.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;           // a flash4 or CUDA call failed
inline constexpr int kExitNotImplemented = 2;  // flash4 answered FLASH4_ERROR_NOT_IMPLEMENTED (older libraries)
inline constexpr int kExitVerifyFailed = 3;    // --verify found an output outside its tolerance
inline constexpr int kExitUsage = 64;          // bad flags (EX_USAGE of sysexits.h)

struct Options {
  std::vector<Mode> modes = {Mode::fwd};  // --mode fwd|bwd|fwd,bwd: every case in each mode, in this order
  ref::Precision dtype = ref::Precision::bf16;
  std::optional<int> head_dim;  // --D: 128 for one case; --all sweeps {64, 128} unless given
  bool causal = false;
  std::optional<int> seqlen;  // --N: Sq = Sk
  std::optional<int> seqlen_q, seqlen_k, batch, heads_q, heads_kv;
  int iters = 30;
  int warmup = 10;
  bool verify = false;
  bool deterministic = false;  // backward: deterministic = 1 (bit-identical gradients across runs)
  bool flush_l2 = false;       // overwrite a buffer larger than L2 before each timed launch
  bool json = false;
  bool all = false;
  bool help = false;
};

// The flags as parsed, or a message naming the bad flag.
struct Parsed {
  std::optional<Options> options;
  std::string error;
};
Parsed parse_options(int argc, char** argv);

std::string usage();

struct Case {
  Mode mode;
  ref::Precision dtype;
  int head_dim;
  bool causal;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  bool deterministic = false;  // backward only
};

// One case from the flags, or the anchors' sweep for --all; repeated for each mode.
std::vector<Case> cases(const Options& options);

// The FLOP count the anchors use (their meta.flops: "fwd = 4*B*H*N*N*D (x0.5 causal); bwd = 2.5 x fwd"):
// forward 4 * B * H * Sq * Sk * D, halved when causal (not the exact count of the visible entries, so that the
// numbers compare with FA3's and cuDNN's); the backward 2.5x the forward (five matmuls, QK^T, dO V^T, dS K,
// dS^T Q, P^T dO, against the forward's two), halved when causal the same way.
double flops(const Case& c);

// Compulsory DRAM traffic: every input read once and every output written once (q, k, v, o, lse forward;
// q, k, v, o, dout, lse, dq, dk, dv backward).
double bytes_moved(const Case& c);

}  // namespace flash4::bench
