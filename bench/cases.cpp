// Flag parsing and the case list of flash4-bench.
#include "cases.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <string_view>
#include <utility>

namespace flash4::bench {
namespace {

// The anchors' shapes (DESIGN.md section 5): 16K tokens per batch and 2048 model width, whatever N and D.
constexpr int kAnchorTokens = 16384;
constexpr int kAnchorWidth = 2048;
constexpr int kAnchorHeadDims[] = {64, 128};
constexpr int kAnchorSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr int kDefaultHeadDim = 128;
constexpr int kDefaultSeqlen = 4096;

// The flags without a value.
struct Switch {
  std::string_view name;
  bool Options::*field;
};
constexpr Switch kSwitches[] = {{"--verify", &Options::verify},
                                {"--json", &Options::json},
                                {"--all", &Options::all},
                                {"--deterministic", &Options::deterministic},
                                {"--flush-l2", &Options::flush_l2},
                                {"--help", &Options::help}};

// The flags that set one positive size.
struct SizeFlag {
  std::string_view name;
  std::optional<int> Options::*field;
};
constexpr SizeFlag kSizeFlags[] = {{"--D", &Options::head_dim},  {"--N", &Options::seqlen},
                                   {"--Sq", &Options::seqlen_q}, {"--Sk", &Options::seqlen_k},
                                   {"--B", &Options::batch},     {"--H", &Options::heads_q},
                                   {"--Hkv", &Options::heads_kv}};

std::optional<int> to_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

Case anchor_case(Mode mode, ref::Precision dtype, int head_dim, bool causal, int seqlen) {
  const int heads = kAnchorWidth / head_dim;
  return Case{mode, dtype, head_dim, causal, kAnchorTokens / seqlen, seqlen, seqlen, heads, heads};
}

// "fwd", "bwd" or a comma-separated list of them, each at most once.
std::optional<std::vector<Mode>> parse_modes(std::string_view text) {
  std::vector<Mode> modes;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    if (name != "fwd" && name != "bwd") return std::nullopt;
    const Mode mode = name == "fwd" ? Mode::fwd : Mode::bwd;
    if (std::find(modes.begin(), modes.end(), mode) != modes.end()) return std::nullopt;
    modes.push_back(mode);
    if (comma == std::string_view::npos) return modes;
    text.remove_prefix(comma + 1);
  }
}

// The cases of one mode: one from the flags, or the anchors' sweep for --all.
std::vector<Case> cases_of_mode(const Options& o, Mode mode) {
  std::vector<Case> out;
  if (o.all) {
    for (int head_dim : kAnchorHeadDims) {
      if (o.head_dim && *o.head_dim != head_dim) continue;
      for (bool causal : {false, true}) {
        for (int seqlen : kAnchorSeqlens) out.push_back(anchor_case(mode, o.dtype, head_dim, causal, seqlen));
      }
    }
    // --D outside {64, 128}: the same sweep at that head dim.
    if (out.empty()) {
      for (bool causal : {false, true}) {
        for (int seqlen : kAnchorSeqlens) out.push_back(anchor_case(mode, o.dtype, *o.head_dim, causal, seqlen));
      }
    }
    return out;
  }
  const int head_dim = o.head_dim.value_or(kDefaultHeadDim);
  const int seqlen_q = o.seqlen_q.value_or(o.seqlen.value_or(kDefaultSeqlen));
  const int seqlen_k = o.seqlen_k.value_or(o.seqlen.value_or(kDefaultSeqlen));
  const int heads_q = o.heads_q.value_or(std::max(1, kAnchorWidth / head_dim));
  out.push_back(Case{mode, o.dtype, head_dim, o.causal, o.batch.value_or(std::max(1, kAnchorTokens / seqlen_q)),
                     seqlen_q, seqlen_k, heads_q, o.heads_kv.value_or(heads_q)});
  return out;
}

}  // namespace

std::string usage() {
  return "usage: flash4-bench [flags]\n"
         "  --mode fwd|bwd|fwd,bwd  direction(s) (default fwd); every case is run in each mode. The backward's\n"
         "                      timed launches are flash4_bwd alone (the forward runs once before, for O and LSE)\n"
         "  --dtype bf16|fp16   input type (default bf16)\n"
         "  --D N               head dim (default 128)\n"
         "  --causal 0|1        causal mask, bottom-right aligned (default 0)\n"
         "  --N N               Sq = Sk = N (default 4096)\n"
         "  --Sq N, --Sk N      query / key lengths (override --N)\n"
         "  --B N               batch (default 16384 / Sq)\n"
         "  --H N               query heads (default 2048 / D)\n"
         "  --Hkv N             key/value heads (default H)\n"
         "  --iters N           timed launches, median reported (default 30)\n"
         "  --warmup N          untimed launches first, repeated until they took 100 ms (default 10;\n"
         "                      0: none)\n"
         "  --verify            fwd: compare sampled rows of O and LSE with the fp64 CPU reference;\n"
         "                      bwd: sampled rows of dQ, dK and dV with an fp64 backward from the same O and LSE\n"
         "  --deterministic     bwd: deterministic = 1 (bit-identical gradients across runs)\n"
         "  --flush-l2          zero a 256 MB buffer before each timed launch, outside its events (as\n"
         "                      triton's do_bench does for the peers): every launch starts from a cold L2\n"
         "  --json              one JSON object per case instead of a text line\n"
         "  --all               the anchors' sweep: D in {64, 128} (or --D), causal {0, 1},\n"
         "                      N in {512, ..., 16384}, B = 16384 / N, H = 2048 / D (ignores the size flags);\n"
         "                      forward only unless --mode says otherwise\n"
         "exit status: 0 ok, 1 a flash4 or CUDA error, 2 not implemented (older libraries),\n"
         "             3 --verify failed, 64 bad flags\n"
         "Without a CUDA device it runs a small CPU reference demo instead and exits 0.\n";
}

Parsed parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    std::string_view value;
    // Both "--flag value" and "--flag=value".
    if (const auto equals = flag.find('='); equals != std::string_view::npos) {
      value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
    }
    const auto switch_flag =
        std::find_if(std::begin(kSwitches), std::end(kSwitches), [&](const Switch& f) { return f.name == flag; });
    if (switch_flag != std::end(kSwitches)) {
      o.*switch_flag->field = true;
      continue;
    }
    if (value.empty()) {
      if (i + 1 >= argc) return {std::nullopt, std::string(flag) + " needs a value"};
      value = argv[++i];
    }
    const std::string bad = std::string(flag) + " " + std::string(value) + ": ";
    if (flag == "--mode") {
      std::optional<std::vector<Mode>> modes = parse_modes(value);
      if (!modes) return {std::nullopt, bad + "allowed: fwd, bwd, or both comma-separated (fwd,bwd)"};
      o.modes = std::move(*modes);
      continue;
    }
    if (flag == "--dtype") {
      if (value != "bf16" && value != "fp16") return {std::nullopt, bad + "allowed: bf16, fp16"};
      o.dtype = value == "bf16" ? ref::Precision::bf16 : ref::Precision::fp16;
      continue;
    }
    const std::optional<int> number = to_int(value);
    if (flag == "--causal") {
      if (number != 0 && number != 1) return {std::nullopt, bad + "allowed: 0, 1"};
      o.causal = number == 1;
      continue;
    }
    const auto size_flag = std::find_if(std::begin(kSizeFlags), std::end(kSizeFlags),
                                        [&](const SizeFlag& f) { return f.name == flag; });
    if (size_flag != std::end(kSizeFlags)) {
      if (!number || *number < 1) return {std::nullopt, bad + "must be an integer >= 1"};
      o.*size_flag->field = number;
      continue;
    }
    if (flag == "--iters" || flag == "--warmup") {
      const int minimum = flag == "--iters" ? 1 : 0;
      if (!number || *number < minimum) {
        return {std::nullopt, bad + "must be an integer >= " + std::to_string(minimum)};
      }
      (flag == "--iters" ? o.iters : o.warmup) = *number;
      continue;
    }
    return {std::nullopt, "unknown flag " + std::string(flag)};
  }
  return {o, ""};
}

std::vector<Case> cases(const Options& o) {
  std::vector<Case> out;
  for (Mode mode : o.modes) {
    for (Case c : cases_of_mode(o, mode)) {
      c.deterministic = mode == Mode::bwd && o.deterministic;
      out.push_back(c);
    }
  }
  return out;
}

double flops(const Case& c) {
  constexpr double kMatmulFlopsPerEntry = 4;  // two matmuls (QK^T, PV), 2 flops per multiply-add
  constexpr double kCausalShare = 0.5;
  constexpr double kBackwardFactor = 2.5;
  const double forward = kMatmulFlopsPerEntry * c.batch * c.heads_q * static_cast<double>(c.seqlen_q) *
                         c.seqlen_k * c.head_dim * (c.causal ? kCausalShare : 1.0);
  return c.mode == Mode::fwd ? forward : kBackwardFactor * forward;
}

double bytes_moved(const Case& c) {
  constexpr double kElementBytes = 2;
  constexpr double kLseBytes = 4;
  const double q_like = kElementBytes * c.batch * static_cast<double>(c.seqlen_q) * c.heads_q * c.head_dim;
  const double kv_like = kElementBytes * c.batch * static_cast<double>(c.seqlen_k) * c.heads_kv * c.head_dim;
  const double lse = kLseBytes * c.batch * static_cast<double>(c.seqlen_q) * c.heads_q;
  // Forward: q, o and k, v. Backward: q, o, dout, dq and k, v, dk, dv.
  return c.mode == Mode::fwd ? 2 * q_like + 2 * kv_like + lse : 4 * q_like + 4 * kv_like + lse;
}

}  // namespace flash4::bench
