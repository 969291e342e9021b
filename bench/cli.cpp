// flash4-bench's flags, declared with CLI11: it writes --help, refuses unknown flags and missing values, and
// checks each value against its validator before anything runs.
#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>

namespace flash4::bench {
namespace {

constexpr const char* kDescription =
    "flash4-bench: times flash4's forward and/or backward (median of per-launch CUDA event pairs after a warm-up)\n"
    "and prints one line per case, or one JSON object per case with --json. TFLOPS use the anchors' FLOP count\n"
    "(forward 4*B*H*Sq*Sk*D, halved when causal; backward 2.5x) where there is no window; with a window, the\n"
    "count of visible (query, key) pairs. Without a CUDA device it runs a small CPU reference demo instead.";

constexpr const char* kFooter =
    "Exit status: 0 ok, 1 a flash4 or CUDA error, 2 not implemented (older libraries), 3 --verify failed,\n"
    "4 --json without a CUDA device, 64 bad flags. A progress line per case goes to stderr when there are several.";

// An integer of at least `minimum`, with a message that says so.
CLI::Validator at_least(int minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        int value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc{} || end != text.data() + text.size() || value < minimum) {
          return "must be an integer >= " + std::to_string(minimum) + ", got '" + text + "'";
        }
        return "";
      },
      "INT>=" + std::to_string(minimum));
}

// A finite number >= 0.
CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) || value < 0) {
          return "must be a finite number >= 0, got '" + text + "'";
        }
        return "";
      },
      "NUMBER>=0");
}

// The sizes of a single case; --all and --varlen set them their own way.
struct SizeFlags {
  int seqlen = 0, seqlen_q = 0, seqlen_k = 0, batch = 0, heads_q = 0, heads_kv = 0;
  CLI::Option *n, *sq, *sk, *b, *h, *hkv;
};

std::optional<int> given(const CLI::Option* option, int value) {
  return option->count() > 0 ? std::optional<int>(value) : std::nullopt;
}

// Checks that need more than one flag; an empty string when the options are consistent.
std::string check_combination(const Options& o, const std::vector<std::string>& modes) {
  for (std::size_t i = 0; i < modes.size(); ++i) {
    if (std::find(modes.begin() + i + 1, modes.end(), modes[i]) != modes.end()) {
      return "--mode: " + modes[i] + " is given twice";
    }
  }
  if (!o.varlen_k.empty() && o.varlen_q.empty()) return "--varlen-k needs --varlen (the query lengths)";
  if (!o.varlen_k.empty() && o.varlen_k.size() != o.varlen_q.size()) {
    return "--varlen-k: " + std::to_string(o.varlen_k.size()) + " key lengths for " +
           std::to_string(o.varlen_q.size()) + " sequences in --varlen";
  }
  return "";
}

}  // namespace

Parsed parse_options(int argc, const char* const* argv) {
  CLI::App app{kDescription, "flash4-bench"};
  app.footer(kFooter);
  app.get_formatter()->column_width(28);
  Options o;

  std::vector<std::string> modes = {"fwd"};
  app.add_option("--mode", modes,
                 "fwd, bwd, or both comma-separated (default fwd); every case runs in each mode. The backward's "
                 "timed launches are flash4_bwd alone (the forward runs once before, for O and LSE)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "bwd"}));
  std::string dtype = "bf16";
  app.add_option("--dtype", dtype, "input type (default bf16)")->check(CLI::IsMember({"bf16", "fp16"}));
  int head_dim = 0;
  CLI::Option* head_dim_flag = app.add_option("--D", head_dim, "head dim (default 128)")->check(at_least(1));
  int causal = 0;
  CLI::Option* causal_flag = app.add_option("--causal", causal, "causal mask, bottom-right aligned (default 0)")
                                 ->check(CLI::IsMember({0, 1}));
  std::vector<int> window;
  app.add_option("--window", window,
                 "sliding window L,R: query i sees keys i+Sk-Sq-L .. i+Sk-Sq+R; -1 is unbounded "
                 "(with --causal 1 the right edge is 0, as FlashAttention reads causal)")
      ->expected(2)
      ->delimiter(',')
      ->check(at_least(kNoWindow));
  app.add_option("--softcap", o.softcap, "score cap: s -> softcap * tanh(s / softcap); 0 is off (default)")
      ->check(non_negative());

  SizeFlags s;
  s.n = app.add_option("--N", s.seqlen, "Sq = Sk = N (default 4096)")->check(at_least(1));
  s.sq = app.add_option("--Sq", s.seqlen_q, "query length (overrides --N)")->check(at_least(1));
  s.sk = app.add_option("--Sk", s.seqlen_k, "key length (overrides --N)")->check(at_least(1));
  s.b = app.add_option("--B", s.batch, "batch (default 16384 / Sq)")->check(at_least(1));
  s.h = app.add_option("--H", s.heads_q, "query heads (default 2048 / D)")->check(at_least(1));
  s.hkv = app.add_option("--Hkv", s.heads_kv, "key/value heads, dividing H: GQA when fewer, MQA at 1 (default H)")
              ->check(at_least(1));
  CLI::Option* varlen_flag =
      app.add_option("--varlen", o.varlen_q,
                     "variable-length batch: the query lengths of its packed sequences, comma-separated (0 allowed)")
          ->delimiter(',')
          ->check(at_least(0));
  CLI::Option* varlen_k_flag =
      app.add_option("--varlen-k", o.varlen_k, "key lengths of the --varlen sequences (default: the query lengths)")
          ->delimiter(',')
          ->check(at_least(0));

  app.add_option("--iters", o.iters, "timed launches, the median is reported (default 30)")->check(at_least(1));
  app.add_option("--warmup", o.warmup,
                 "untimed launches first, repeated until they took 100 ms (default 10; 0: none)")
      ->check(at_least(0));
  app.add_flag("--verify", o.verify,
               "fwd: sampled rows of O and LSE against the fp64 CPU reference; bwd: sampled rows of dQ, dK and dV "
               "against an fp64 backward from the same O and LSE (--verify=0 turns it off)");
  app.add_flag("--deterministic", o.deterministic, "bwd: deterministic = 1 (bit-identical gradients across runs)");
  app.add_flag("--flush-l2", o.flush_l2,
               "zero a 256 MB buffer before each timed launch, outside its events (as triton's do_bench does for "
               "the peers): every launch starts from a cold L2");
  app.add_flag("--json", o.json, "one JSON object per case instead of a text line (needs a CUDA device)");
  CLI::Option* all_flag =
      app.add_flag("--all", o.all,
                   "the anchors' sweep: D in {64, 128} (or --D), causal 0 and 1, N in {512, ..., 16384}, "
                   "B = 16384 / N, H = 2048 / D; --dtype, --window, --softcap and --mode apply to every case");
  for (CLI::Option* size : {s.n, s.sq, s.sk, s.b, s.h, s.hkv, causal_flag, varlen_flag, varlen_k_flag}) {
    size->excludes(all_flag);
  }
  for (CLI::Option* size : {s.n, s.sq, s.sk, s.b}) size->excludes(varlen_flag);

  Parsed parsed;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    parsed.out = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    parsed.exit_code = kExitUsage;
    parsed.err = std::string("flash4-bench: ") + e.what() + "\nRun with --help for the flags.\n";
    return parsed;
  }

  const std::map<std::string, Mode> mode_of = {{"fwd", Mode::fwd}, {"bwd", Mode::bwd}};
  o.modes.clear();
  for (const std::string& mode : modes) o.modes.push_back(mode_of.at(mode));
  o.dtype = dtype == "bf16" ? ref::Precision::bf16 : ref::Precision::fp16;
  o.head_dim = given(head_dim_flag, head_dim);
  o.causal = causal == 1;
  if (!window.empty()) {
    o.window_left = window[0];
    o.window_right = window[1];
  }
  o.seqlen = given(s.n, s.seqlen);
  o.seqlen_q = given(s.sq, s.seqlen_q);
  o.seqlen_k = given(s.sk, s.seqlen_k);
  o.batch = given(s.b, s.batch);
  o.heads_q = given(s.h, s.heads_q);
  o.heads_kv = given(s.hkv, s.heads_kv);
  if (const std::string problem = check_combination(o, modes); !problem.empty()) {
    parsed.exit_code = kExitUsage;
    parsed.err = "flash4-bench: " + problem + "\nRun with --help for the flags.\n";
    return parsed;
  }
  parsed.options = o;
  return parsed;
}

}  // namespace flash4::bench
