"""flash4 against its peers in one run: `python -m flash4.bench`.

Providers, each timed on the same inputs, case after case:
    flash4            flash4.flash_attn_func on (B, N, H, D) strided views of the (B, H, N, D) tensors
    sdpa_cudnn        torch SDPA, cuDNN backend
    sdpa_flash(FA2)   torch SDPA, flash backend (FlashAttention-2)
    flex              torch FlexAttention, compiled (a block mask for causal)
Shapes follow the anchors (shared/anchors/*.json): bf16, total tokens B * N = 16K, H = 2048 / D, N from 512
to 16K, D in {64, 128}, causal and not, forward and backward. Timing is triton.testing.do_bench's median
(warm-up 50 ms, repeat 200 ms), as for the anchors.

Writes JSON (a header with date, commit, device and software, then one row per measurement) and a PNG of
TFLOPS against N per case. Needs a CUDA device, the library, triton (ships with torch on Linux), tqdm and
matplotlib (`pip install ./python[bench]`).
"""

import argparse
import contextlib
import datetime
import json
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import flash4

PROVIDERS = ("flash4", "sdpa_cudnn", "sdpa_flash(FA2)", "flex")
SDPA_BACKENDS = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash(FA2)": SDPBackend.FLASH_ATTENTION}
BWD_FLOPS_FACTOR = 2.5  # backward = 2.5 x forward FLOPs (two matmuls forward, five backward)
WARMUP_MS, REPEAT_MS = 50, 200
HOST_CALLS = 20  # calls averaged for the host (enqueue) time of one call


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flash4.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=("fwd", "bwd"), default=["fwd", "bwd"])
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--seqlens", nargs="+", type=int, default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS))
    parser.add_argument("--total-tokens", type=int, default=16384, help="B * N of every case")
    parser.add_argument("--model-dim", type=int, default=2048, help="H * D of every case")
    parser.add_argument("--out", type=Path, help="JSON path (default flash4-bench-<date>.json); the PNG goes beside it")
    args = parser.parse_args(argv)
    args.causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    return args


def fwd_flops(batch, heads, seqlen, head_dim, causal):
    return 4 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)


def forward_fn(provider, q, k, v, causal):
    """A zero-argument callable running `provider`'s forward on (B, H, N, D) q, k, v."""
    if provider == "flash4":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, N, H, D) views, last dim contiguous
        return lambda: flash4.flash_attn_func(q, k, v, causal=causal)
    if provider in SDPA_BACKENDS:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch._dynamo.reset()  # a fresh compile per shape: never a recompile limit, never a stale graph
    block_mask = None
    if causal:
        seqlen = q.shape[2]
        block_mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, seqlen, seqlen, device=q.device)
    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda: compiled(q, k, v, block_mask=block_mask)


def timed_fn(provider, mode, q, k, v, causal):
    """The callable to time: the forward, or one backward through a retained forward graph."""
    forward = forward_fn(provider, q, k, v, causal)
    if mode == "fwd":
        return forward
    out = forward()
    dout = torch.randn_like(out)
    return lambda: out.backward(dout, retain_graph=True)


def host_us(fn):
    """Host time to enqueue one call, in microseconds: when it exceeds the GPU time, the row measures Python."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / HOST_CALLS * 1e6


def measure(provider, mode, q, k, v, causal):
    """(median ms, host us) of one provider on one case."""
    from triton.testing import do_bench  # imported here: it needs a CUDA device to import cleanly

    backend = SDPA_BACKENDS.get(provider)
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        fn = timed_fn(provider, mode, q, k, v, causal)
        fn()  # the first call compiles (flex), opens the library (flash4) or raises for an unsupported case
        ms = do_bench(fn, warmup=WARMUP_MS, rep=REPEAT_MS, grad_to_none=[q, k, v] if mode == "bwd" else None,
                      return_mode="median")
        return ms, host_us(fn)


def max_abs_diff_vs_sdpa(q, k, v, causal):
    """A guard against a fast wrong kernel: flash4's forward against SDPA's default backend."""
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
        got = flash4.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal)
    return (got.float() - expected.float()).abs().max().item()


def run_cases(args, progress):
    rows, skipped = [], []
    for mode in args.modes:
        for head_dim in args.head_dims:
            for causal in args.causals:
                for seqlen in args.seqlens:
                    batch, heads = max(1, args.total_tokens // seqlen), args.model_dim // head_dim
                    torch.manual_seed(0)
                    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, dtype=torch.bfloat16, device="cuda",
                                           requires_grad=mode == "bwd") for _ in "qkv")
                    case = {"mode": mode, "D": head_dim, "causal": causal, "N": seqlen, "B": batch, "H": heads}
                    flops = fwd_flops(batch, heads, seqlen, head_dim, causal)
                    flops *= BWD_FLOPS_FACTOR if mode == "bwd" else 1
                    for provider in args.providers:
                        progress.set_postfix_str(f"{mode} D={head_dim} causal={causal} N={seqlen} {provider}")
                        try:
                            ms, host = measure(provider, mode, q, k, v, causal)
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
        "timing": f"triton.testing.do_bench median, warmup {WARMUP_MS} ms, rep {REPEAT_MS} ms; host_us = host time "
                  f"to enqueue one call (mean of {HOST_CALLS}), the floor of ms when the GPU waits for Python",
    }


def plot(rows, args, path):
    import matplotlib

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


def main(argv=None):
    from tqdm import tqdm

    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("flash4.bench needs a CUDA device")
    out = args.out or Path(f"flash4-bench-{datetime.date.today().isoformat()}.json")
    meta = header(args)  # opens the library first: a missing one stops the run before any timing
    total = len(args.modes) * len(args.head_dims) * len(args.causals) * len(args.seqlens) * len(args.providers)
    with tqdm(total=total, unit="run") as progress:
        rows, skipped = run_cases(args, progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": {**meta, "skipped": skipped}, "rows": rows}, indent=1) + "\n")
    png = out.with_suffix(".png")
    plot(rows, args, png)
    print(f"wrote {out} ({len(rows)} rows, {len(skipped)} skipped) and {png}")


if __name__ == "__main__":
    main()
