"""flash4 against its peers in one run: `python -m flash4.bench`.

Providers, each timed on the same inputs, case after case:
    flash4            flash4.flash_attn_func on (B, N, H, D) strided views of the (B, H, N, D) tensors
    sdpa_cudnn        torch SDPA, cuDNN backend
    sdpa_flash(FA2)   torch SDPA, flash backend (FlashAttention-2)
    fa4_cute          FlashAttention-4's CuTe-DSL kernels on their SM90 path (where installed)
    flex_attention    torch FlexAttention, compiled (a block mask for causal)
Shapes follow the anchors (shared/anchors/*.json): bf16, total tokens B * N = 16K, H = 2048 / D, N from 512
to 16K, D in {64, 128}, causal and not, forward and backward. Timing is triton.testing.do_bench's median
(warm-up 50 ms, repeat 200 ms by default), as for the anchors, on random normal inputs (never zeros). The
backward is timed alone: the forward runs once outside the timed region and each timed call is
torch.autograd.grad through its retained graph.

Writes JSON (a header with date, commit, device and software, then one row per measurement) and a PNG of
TFLOPS against N per case. Needs a CUDA device, the library and triton (ships with torch on Linux); tqdm
and matplotlib (`pip install ./python[bench]`) give the progress bar and the plot, and are imported only
when used: without tqdm the progress is printed line by line, without matplotlib the PNG is skipped.
--host-overhead measures instead the host time per call at a tiny shape, flash4 against SDPA in the same run
(flash4.bench_host), and writes its rows and a text table.
bench/peers.py reuses this module's runners for the C++ benchmark's peer rows.
"""

import argparse
import datetime
import json
import subprocess
import time
from pathlib import Path

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash4
from flash4 import bench_host

# Provider names as in the anchors (shared/anchors/*.json).
PROVIDERS = ("flash4", "sdpa_cudnn", "sdpa_flash(FA2)", "fa4_cute", "flex_attention")
PEERS = PROVIDERS[1:]
SDPA_BACKENDS = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash(FA2)": SDPBackend.FLASH_ATTENTION}
BWD_FLOPS_FACTOR = 2.5  # backward = 2.5 x forward FLOPs (two matmuls forward, five backward)
WARMUP_MS, REPEAT_MS = 50, 200
HOST_CALLS = 20  # calls averaged for the host (enqueue) time of one call
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flash4.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=("fwd", "bwd"), default=["fwd", "bwd"])
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--seqlens", nargs="+", type=int, default=list(SEQLENS))
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS))
    parser.add_argument("--total-tokens", type=int, default=16384, help="B * N of every case")
    parser.add_argument("--model-dim", type=int, default=2048, help="H * D of every case")
    parser.add_argument("--out", type=Path, help="JSON path (default flash4-bench-<date>.json); the PNG goes beside it")
    parser.add_argument("--warmup-ms", type=float, default=WARMUP_MS, help="do_bench warm-up per measurement")
    parser.add_argument("--repeat-ms", type=float, default=REPEAT_MS, help="do_bench timed span per measurement")
    parser.add_argument("--time-budget-s", type=float, default=None,
                        help="stop measuring after this many seconds; later runs are listed as skipped")
    bench_host.add_arguments(parser)
    args = parser.parse_args(argv)
    args.causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    return args


def fwd_flops(batch, heads, seqlen, head_dim, causal):
    return 4 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)


def _causal(batch, head, query, key):
    return key <= query


_flex_compiled = None


def _flex():
    """flex_attention compiled once per process; torch.compile recompiles per new shape and, from the
    second shape on, marks the sequence length dynamic, so a sweep costs a few compiles, not one per case."""
    global _flex_compiled
    if _flex_compiled is None:
        from torch.nn.attention.flex_attention import flex_attention

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        # The backward is timed by replaying it on a retained graph; a compiled backward that donates its
        # saved buffers refuses that (H200 run of 2026-12-02: every flex backward row was skipped so).
        torch._functorch.config.donated_buffer = False
        _flex_compiled = torch.compile(flex_attention)
    return _flex_compiled


def forward_fn(provider, q, k, v, causal):
    """A zero-argument callable running `provider`'s forward on (B, H, N, D) q, k, v."""
    if provider == "flash4":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, N, H, D) views, last dim contiguous
        return lambda: flash4.flash_attn_func(q, k, v, causal=causal)
    if provider in SDPA_BACKENDS:
        backend = SDPA_BACKENDS[provider]

        def sdpa():
            with sdpa_kernel(backend):  # only this backend: an unsupported case raises, never falls back
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return sdpa
    if provider == "fa4_cute":
        # FlashAttention-4's CuTe-DSL package on its SM90 path (../shared/tools/fa4-peer.sh installs it); its
        # flash_attn_func takes (B, N, H, D) like flash4's and returns the output, or (out, lse).
        from flash_attn.cute.interface import flash_attn_func as fa4_func

        q, k, v = (t.transpose(1, 2) for t in (q, k, v))

        def fa4():
            result = fa4_func(q, k, v, causal=causal)
            return result[0] if isinstance(result, tuple) else result

        return fa4
    if provider != "flex_attention":
        raise ValueError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
    from torch.nn.attention.flex_attention import create_block_mask

    compiled = _flex()
    block_mask = None
    if causal:
        block_mask = create_block_mask(_causal, None, None, q.shape[2], k.shape[2], device=q.device)
    return lambda: compiled(q, k, v, block_mask=block_mask)


def timed_fn(provider, mode, q, k, v, causal):
    """The callable to time: the forward, or the backward alone (autograd.grad through the graph of one
    forward run here, outside the timed region, and retained for every timed call)."""
    forward = forward_fn(provider, q, k, v, causal)
    if mode == "fwd":
        return forward
    out = forward()
    dout = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def host_us(fn):
    """Host time to enqueue one call, in microseconds: when it exceeds the GPU time, the row measures Python."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e6


def measure(provider, mode, q, k, v, causal, warmup_ms=WARMUP_MS, repeat_ms=REPEAT_MS):
    """(median ms, host us) of one provider on one case."""
    from triton.testing import do_bench  # imported here: it needs a CUDA device to import cleanly

    fn = timed_fn(provider, mode, q, k, v, causal)
    fn()  # the first call compiles (flex), opens the library (flash4) or raises for an unsupported case
    ms = do_bench(fn, warmup=warmup_ms, rep=repeat_ms, return_mode="median")
    return ms, host_us(fn)


def case_inputs(mode, head_dim, seqlen, total_tokens=16384, model_dim=2048, seed=0):
    """The anchors' case: (case dict, fwd FLOPs of the mode, q, k, v) with q, k, v (B, H, N, D) bf16."""
    batch, heads = max(1, total_tokens // seqlen), model_dim // head_dim
    generator = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, dtype=torch.bfloat16, device="cuda", generator=generator)
               .requires_grad_(mode == "bwd") for _ in "qkv")
    case = {"mode": mode, "D": head_dim, "N": seqlen, "B": batch, "H": heads}
    return case, q, k, v


def case_flops(case, causal):
    flops = fwd_flops(case["B"], case["H"], case["N"], case["D"], causal)
    return flops * (BWD_FLOPS_FACTOR if case["mode"] == "bwd" else 1)


def max_abs_diff_vs_sdpa(q, k, v, causal):
    """A guard against a fast wrong kernel: flash4's forward against SDPA's default backend."""
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
        got = flash4.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal)
    return (got.float() - expected.float()).abs().max().item()


def run_cases(args, progress):
    rows, skipped = [], []
    deadline = None if args.time_budget_s is None else time.monotonic() + args.time_budget_s
    for mode in args.modes:
        for head_dim in args.head_dims:
            for causal in args.causals:
                for seqlen in args.seqlens:
                    case, q, k, v = case_inputs(mode, head_dim, seqlen, args.total_tokens, args.model_dim)
                    case = {"mode": mode, "D": head_dim, "causal": causal, **case}
                    flops = case_flops(case, causal)
                    for provider in args.providers:
                        progress.set_postfix_str(f"{mode} D={head_dim} causal={causal} N={seqlen} {provider}")
                        if deadline is not None and time.monotonic() > deadline:
                            skipped.append({**case, "provider": provider,
                                            "reason": f"time budget of {args.time_budget_s:g} s spent"})
                            progress.update()
                            continue
                        try:
                            ms, host = measure(provider, mode, q, k, v, causal, args.warmup_ms, args.repeat_ms)
                        except Exception as err:  # one provider's failure must not end the whole run
                            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                            skipped.append({**case, "provider": provider, "reason": reason})
                            progress.write(f"skipped {provider} {case}: {reason}")
                        else:
                            row = {**case, "provider": provider, "ms": round(ms, 4),
                                   "tflops": round(flops / ms / 1e9, 1), "host_us": round(host, 1)}
                            if provider == "flash4" and mode == "fwd":
                                row["max_abs_diff_vs_sdpa"] = max_abs_diff_vs_sdpa(q, k, v, causal)
                            rows.append(row)
                        progress.update()
                    del q, k, v
                    torch.cuda.empty_cache()
    return rows, skipped


class LineProgress:
    """The subset of tqdm's interface run_cases uses, printing one line per step (when tqdm is missing)."""

    def __init__(self, total, stream=sys.stderr):
        self.total, self.done, self.postfix, self.stream = total, 0, "", stream

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_postfix_str(self, text):
        self.postfix = text

    def update(self, n=1):
        self.done += n
        print(f"[{self.done}/{self.total}] {self.postfix}", file=self.stream, flush=True)

    def write(self, text):
        print(text, file=self.stream, flush=True)


def progress_bar(total):
    try:
        from tqdm import tqdm
    except ImportError:
        return LineProgress(total)
    return tqdm(total=total, unit="run")


def git_commit():
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not run inside a git checkout)"
    return commit + ("-dirty" if dirty else "")


def device_text():
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        driver = "unknown"
    return f"{props.name} ({props.multi_processor_count} SMs), driver {driver}"


def software_text():
    import triton

    return (f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
            f"Triton {triton.__version__}, flash4 library {flash4.library_version()} (package {flash4.__version__})")


def header(args):
    return {
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "device": device_text(),
        "software": software_text(),
        "shape_rule": f"total tokens B*N = {args.total_tokens}, H = {args.model_dim}/D, dtype bf16, q/k/v (B,H,N,D) "
                      "random normal; flash4 gets (B,N,H,D) strided views of the same tensors",
        "flops": f"fwd = 4*B*H*N*N*D (x0.5 causal); bwd = {BWD_FLOPS_FACTOR} x fwd; TFLOPS = flops / median time",
        "timing": f"triton.testing.do_bench median, warmup {args.warmup_ms:g} ms, rep {args.repeat_ms:g} ms, random "
                  f"normal inputs; bwd: torch.autograd.grad through a retained graph, the forward outside the "
                  f"timed region; host_us = host time to enqueue one call (mean of {HOST_CALLS}), the floor of "
                  f"ms when the GPU waits for Python",
    }


def plot(rows, args, path):
    """A PNG of TFLOPS against N, one panel per (mode, D) row and causal column; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")  # files only: no display on a GPU node
    import matplotlib.pyplot as plt

    panels = [(mode, d) for mode in args.modes for d in args.head_dims]
    fig, axes = plt.subplots(len(panels), len(args.causals), figsize=(6 * len(args.causals), 4 * len(panels)),
                             squeeze=False)
    for (mode, head_dim), axes_row in zip(panels, axes):
        for causal, ax in zip(args.causals, axes_row):
            for provider in args.providers:
                points = sorted((r["N"], r["tflops"]) for r in rows if r["provider"] == provider and r["mode"] == mode
                                and r["D"] == head_dim and r["causal"] == causal)
                if points:  # a fixed color per provider, whichever subset was run
                    ax.plot(*zip(*points), marker="o", label=provider, color=f"C{PROVIDERS.index(provider)}")
            ax.set_xscale("log", base=2)
            ax.set_xticks(args.seqlens, [str(n) for n in args.seqlens])
            ax.set_title(f"{mode} D={head_dim} {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length N")
            ax.set_ylabel("TFLOPS")
            ax.grid(True, alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("flash4.bench needs a CUDA device")
    out = args.out or Path(f"flash4-bench-{datetime.date.today().isoformat()}.json")
    meta = header(args)  # opens the library first: a missing one stops the run before any timing
    if args.host_overhead:
        return host_overhead(args, meta, out)
    total = len(args.modes) * len(args.head_dims) * len(args.causals) * len(args.seqlens) * len(args.providers)
    with progress_bar(total) as progress:
        rows, skipped = run_cases(args, progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": {**meta, "skipped": skipped}, "rows": rows}, indent=1) + "\n")
    png = out.with_suffix(".png")
    plotted = plot(rows, args, png)
    print(f"wrote {out} ({len(rows)} rows, {len(skipped)} skipped)"
          + (f" and {png}" if plotted else "; no plot: matplotlib is not installed"))


def host_overhead(args, meta, out):
    rows, skipped = bench_host.measure(args)
    batch, seqlen, heads, head_dim = args.host_shape
    meta |= {"shape_rule": f"B={batch} N={seqlen} H={heads} D={head_dim} bf16 causal, each provider on its own layout",
             "timing": f"host_us: median over {args.host_repeats} loops of {args.host_calls} calls of the loop's wall "
                       f"time per call; gpu_us: the same loop behind a spin kernel, CUDA events",
             "skipped": skipped}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(bench_host.table(rows))
    for row in skipped:
        print(f"skipped {row['mode']} {row['provider']}: {row['reason']}")
    print(f"wrote {out} ({len(rows)} rows, {len(skipped)} skipped)")


if __name__ == "__main__":
    main()
