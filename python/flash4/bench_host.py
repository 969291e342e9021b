"""Host time per call at a tiny shape, flash4 against SDPA in the same run: `python -m flash4.bench --host-overhead`.

At small shapes (decoding, batches of short sequences) the GPU finishes a call before Python has enqueued the
next one, so the time to enqueue a call sets the speed. Each row is the median over repeats of (wall time of
`calls` back-to-back calls) / calls, the stream synchronized between repeats and not timed. The GPU time per
call (the same loop enqueued behind a spin kernel, timed with CUDA events) is printed beside it: the host
time is the bottleneck where it is the larger one. Modes:
    fwd        forward, inputs without gradients (inference, decoding)
    fwd_grad   forward of a training step: inputs require gradients, so autograd records the graph
    bwd        torch.autograd.grad through one retained forward graph (the backward alone)
Providers, each on its own layout (no transposes in the timed call):
    flash4             flash4.flash_attn_func, q/k/v (B, N, H, D): the eager path
    flash4_op          torch.ops.flash4.fwd directly: the torch.library path that torch.compile uses
    flash4_c           the two C calls alone (workspace size, launch) on a prebuilt params struct: the library's
                       own host time, the floor of the two above (fwd only)
    sdpa               F.scaled_dot_product_attention, q/k/v (B, H, N, D), torch's own backend choice
    sdpa_flash(FA2), sdpa_cudnn   the same under sdpa_kernel(backend), as the throughput sweep calls them
"""

import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash4
from flash4 import _launch

MODES = ("fwd", "fwd_grad", "bwd")
PROVIDERS = ("flash4", "flash4_op", "flash4_c", "sdpa", "sdpa_flash(FA2)", "sdpa_cudnn")
_SDPA_BACKENDS = {"sdpa_flash(FA2)": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}


def add_arguments(parser):
    group = parser.add_argument_group("host overhead (--host-overhead)")
    group.add_argument("--host-overhead", action="store_true",
                       help="measure the host time per call at a tiny shape instead of the throughput sweep")
    group.add_argument("--host-shape", nargs=4, type=int, default=[1, 128, 8, 128], metavar=("B", "N", "H", "D"))
    group.add_argument("--host-calls", type=int, default=100, help="calls per timed loop")
    group.add_argument("--host-repeats", type=int, default=15, help="timed loops per row (the median is kept)")


def _inputs(provider, mode, shape):
    batch, seqlen, heads, head_dim = shape
    generator = torch.Generator(device="cuda").manual_seed(0)
    layout = (batch, heads, seqlen, head_dim) if provider.startswith("sdpa") else (batch, seqlen, heads, head_dim)
    return [torch.randn(layout, dtype=torch.bfloat16, device="cuda", generator=generator)
            .requires_grad_(mode != "fwd") for _ in "qkv"]


def _forward(provider, q, k, v):
    """A zero-argument callable: one causal forward of `provider`."""
    if provider == "flash4":
        return lambda: flash4.flash_attn_func(q, k, v, causal=True)
    if provider == "flash4_op":
        options = (q.shape[-1] ** -0.5, True, -1, 0, 0.0, False)
        return lambda: torch.ops.flash4.fwd(q, k, v, *options)[0]
    if provider == "flash4_c":
        options = _launch.Options(q.shape[-1] ** -0.5, True, -1, 0, 0.0, False)
        out, lse = _launch.empty_outputs(q, v)
        params = _launch.fwd_params(q, k, v, out, lse, options)
        return lambda: _launch.run("fwd", params, q.device)
    if provider == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    backend = _SDPA_BACKENDS[provider]

    def sdpa_with_backend():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return sdpa_with_backend


def timed_call(provider, mode, shape):
    """The callable a row times, or None where the provider has no such mode."""
    if provider == "flash4_c" and mode != "fwd":
        return None
    q, k, v = _inputs(provider, mode, shape)
    forward = _forward(provider, q, k, v)
    if mode != "bwd":
        return forward
    out = forward()
    dout = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def host_us(fn, calls, repeats):
    """Median over `repeats` loops of the host time per call of `calls` back-to-back calls. The GPU work of a
    loop stays far below the launch queue's depth, so the host never waits for the device inside a loop."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def gpu_us(fn, calls, host_us_per_call):
    """GPU time per call, back to back: a spin kernel keeps the device busy while the loop is enqueued, so the
    events around the loop time the calls' kernels without the gaps the host would leave between them."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(4 * calls * host_us_per_call * _SPIN_CYCLES_PER_US))
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


_SPIN_CYCLES_PER_US = 2000  # about the H200's SM clock in MHz; the spin only has to outlast the enqueueing


def measure(args):
    """Rows {mode, provider, host_us, gpu_us} for every mode and provider, in one process and one run."""
    shape = tuple(args.host_shape)
    rows, skipped = [], []
    for mode in MODES:
        for provider in PROVIDERS:
            try:
                fn = timed_call(provider, mode, shape)
                if fn is None:
                    continue
                for _ in range(20):  # warm-up: the library opened, the allocator's pools filled, autotuning done
                    fn()
                host = host_us(fn, args.host_calls, args.host_repeats)
                gpu = gpu_us(fn, args.host_calls, host)
            except Exception as err:  # a backend that refuses the case must not end the run
                skipped.append({"mode": mode, "provider": provider, "reason": f"{type(err).__name__}: {err}"})
                continue
            rows.append({"mode": mode, "provider": provider, "host_us": round(host, 1), "gpu_us": round(gpu, 1)})
    return rows, skipped


def table(rows):
    """Text table: one line per mode, host us per provider, then flash4's ratio to SDPA's default."""
    by_mode = {}
    for row in rows:
        by_mode.setdefault(row["mode"], {})[row["provider"]] = row
    lines = [f"{'mode':9}" + "".join(f"{p:>17}" for p in PROVIDERS) + f"{'flash4 / sdpa':>15}"]
    for mode, cells in by_mode.items():
        line = f"{mode:9}"
        for provider in PROVIDERS:
            cell = cells.get(provider)
            line += f"{cell['host_us']:>8.1f} ({cell['gpu_us']:>5.1f})" if cell else f"{'-':>17}"
        if "flash4" in cells and "sdpa" in cells:
            line += f"{cells['flash4']['host_us'] / cells['sdpa']['host_us']:>15.2f}"
        lines.append(line)
    lines.append("host us per call (GPU us per call); the host time sets the speed where it is the larger")
    return "\n".join(lines)
