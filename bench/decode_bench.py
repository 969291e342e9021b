#!/usr/bin/env python3
"""Decoding benchmark (issue 30): flash4.flash_attn_with_kvcache against its peers, in one run.

    FLASH4_LIBRARY=build/libflash4.so python3 bench/decode_bench.py --out bench/results/h200-<date>-decode.json

Shapes: bf16, heads_q 32, heads_kv 8, head_dim 128; seqlen_q 1 and 4 (speculative decoding); batch 1..128;
context N 1K..128K keys per sequence (every sequence full: cache_seqlens = N, nothing appended); the cache
contiguous (batch, N, heads_kv, D) or paged in pages of 64 rows, randomly placed. Cases whose K + V exceed
--max-cache-gb are skipped (listed in the header). Providers, each on the same keys:
    flash4          torch.ops.flash4.kvcache, the op flash_attn_with_kvcache launches: the function's eager
                    check of the device values copies them to the host (a sync per call), which a serving loop
                    avoids under CUDA graphs; num_splits = 0 (the library's heuristic)
    sdpa_<backend>  torch SDPA restricted to one backend (flash, efficient, cudnn) on the gathered contiguous
                    cache, (B, H, N, D) strided views; enable_gqa=True, or K / V repeated per query head when a
                    backend refuses that (then it reads heads_q / heads_kv times the bytes; the row says so).
                    The fastest of them is the "SDPA fastest backend" peer (the summary names it)
    fa4_cute        FlashAttention-4's CuTe package (flash_attn.cute, tools/fa4-peer.sh) where it imports and runs
                    the shape on this GPU: flash_attn_varlen_func with seqused_k (and page_table when paged),
                    num_splits = 0 (its heuristic); a failure is recorded in the header, not fatal
Each row: mode "decode", D, causal (false: with N >> seqlen_q the mask changes nothing measurable, and SDPA's
is_causal would align it top-left), N, B, H (heads_q), Hkv, Sq, page_size (0: contiguous), provider, ms,
tflops (4 B H Sq N D / time), bandwidth_tbs (K and V bytes read, B N Hkv D 2 x 2 bytes, / time). flash4 rows
also carry max_abs_diff, against the first SDPA backend that ran, and host_us, the host time to enqueue one
call (the Python op fills the C struct through ctypes: a row whose ms is near it measures the host). Timing:
triton.testing.do_bench's median (it zeroes a 256 MB buffer between calls, so the cache is not served from
L2). Every provider is timed twice: eager (ms), each call launched from Python, as above; and replayed from
a CUDA graph (graph_ms, graph_bandwidth_tbs), as a serving loop runs its step, which leaves the host out: the
graph holds one call on each of enough copies of the case (their K + V together at least twice the L2) that
no call finds its cache in L2, and graph_ms is the replay's median over the number of calls. A provider that
cannot be captured has no graph figures (the header's failures say why; --no-graph skips them). The summary
lists, per case, flash4 / fastest SDPA / fa4_cute and the ratios, eager and under the graph.
"""

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the checkout's package

import flash4  # noqa: E402
from flash4 import bench as py_bench  # noqa: E402  (git_commit, device_text, software_text)

HEADS_Q, HEADS_KV, HEAD_DIM, PAGE = 32, 8, 128, 64
SDPA_BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=ints, default=[1, 8, 32, 128])
    parser.add_argument("--contexts", type=ints, default=[1024, 8192, 32768, 131072])
    parser.add_argument("--seqlens-q", type=ints, default=[1, 4])
    parser.add_argument("--page-sizes", type=ints, default=[0, PAGE], help="0: contiguous cache")
    parser.add_argument("--max-cache-gb", type=float, default=40.0, help="skip cases whose K + V are larger")
    parser.add_argument("--warmup-ms", type=float, default=20)
    parser.add_argument("--repeat-ms", type=float, default=80)
    parser.add_argument("--no-fa4", action="store_true", help="leave fa4_cute out")
    parser.add_argument("--no-graph", action="store_true", help="time eager calls only")
    return parser.parse_args(argv)


def kv_bytes(batch, context):
    return batch * context * HEADS_KV * HEAD_DIM * 2 * 2


class Case:
    """The tensors of one shape: q, the cache as flash4 sees it, and the gathered contiguous cache."""

    def __init__(self, batch, context, seqlen_q, page_size):
        self.batch, self.context, self.seqlen_q, self.page_size = batch, context, seqlen_q, page_size
        bf16 = dict(dtype=torch.bfloat16, device="cuda")
        self.q = torch.randn(batch, seqlen_q, HEADS_Q, HEAD_DIM, **bf16)
        self.lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
        if page_size:
            pages = batch * context // page_size
            self.k_cache, self.v_cache = (torch.randn(pages, page_size, HEADS_KV, HEAD_DIM, **bf16) for _ in range(2))
            self.table = torch.randperm(pages, device="cuda").view(batch, -1).int()
            gather = lambda c: c[self.table.long()].view(batch, context, HEADS_KV, HEAD_DIM)  # noqa: E731
            self.k, self.v = gather(self.k_cache), gather(self.v_cache)
        else:
            self.k_cache, self.v_cache = (torch.randn(batch, context, HEADS_KV, HEAD_DIM, **bf16) for _ in range(2))
            self.table = None
            self.k, self.v = self.k_cache, self.v_cache

    def flops(self):
        return 4 * self.batch * HEADS_Q * self.seqlen_q * self.context * HEAD_DIM


def flash4_fn(case):
    scale = HEAD_DIM**-0.5
    return lambda: torch.ops.flash4.kvcache(case.q, case.k_cache, case.v_cache, None, None, case.lens, None,
                                            case.table, scale, False, -1, -1, 0.0, 0)[0]


def sdpa_fn(case, backend, max_bytes):
    """(callable, how GQA is served) on (B, H, N, D) views of the gathered cache; K / V are repeated per query
    head only when a backend refuses enable_gqa and the copies stay within max_bytes."""
    q, k, v = (t.transpose(1, 2) for t in (case.q, case.k, case.v))

    def native():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    try:
        native()
        return native, "enable_gqa"
    except RuntimeError:
        pass
    groups = HEADS_Q // HEADS_KV
    if kv_bytes(case.batch, case.context) * groups > max_bytes:
        raise RuntimeError("refuses enable_gqa, and K / V repeated per query head would exceed --max-cache-gb")
    k_rep, v_rep = (t.repeat_interleave(groups, dim=1) for t in (k, v))

    def repeated():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k_rep, v_rep)

    repeated()
    return repeated, "repeated_kv"


def fa4_fn(case):
    from flash_attn.cute.interface import flash_attn_varlen_func

    kwargs = dict(seqused_k=case.lens, num_splits=0)
    if case.table is not None:
        kwargs["page_table"] = case.table
    run = lambda: flash_attn_varlen_func(case.q, case.k_cache, case.v_cache, **kwargs)  # noqa: E731
    out = run()
    return (lambda: run()) if not isinstance(out, tuple) else (lambda: run()[0])


def median_ms(fn, args):
    from triton.testing import do_bench

    return do_bench(fn, warmup=args.warmup_ms, rep=args.repeat_ms, return_mode="median")


def graph_copies(case):
    """How many copies of a case the graph timing rotates through: their K + V together at least twice the L2."""
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    return max(1, math.ceil(2 * l2_bytes / kv_bytes(case.batch, case.context)))


def graph_ms(fns, args):
    """Per-call median ms of fns (one call each, on distinct copies of a case) replayed from one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capturing stream, as CUDA graph capture asks
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    return median_ms(graph.replay, args) / len(fns)


def with_graph(row_, case, make_fn, copies, args, failures):
    """row_ with graph_ms / graph_bandwidth_tbs from make_fn(copy) over the copies, or unchanged (the failure
    recorded) when the provider cannot be captured."""
    if args.no_graph:
        return row_
    try:
        ms = graph_ms([make_fn(c) for c in copies], args)
    except Exception as error:  # a provider that syncs or allocates on the host while capturing
        failures.setdefault(f"{row_['provider']} graph", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
        torch.cuda.synchronize()
        return row_
    tbs = kv_bytes(case.batch, case.context) / ms / 1e9
    return row_ | dict(graph_ms=round(ms, 5), graph_bandwidth_tbs=round(tbs, 3))


def row(case, provider, ms, **extra):
    return dict(mode="decode", dtype="bf16", D=HEAD_DIM, causal=False, N=case.context, B=case.batch, H=HEADS_Q,
                Hkv=HEADS_KV, Sq=case.seqlen_q, page_size=case.page_size, provider=provider, ms=round(ms, 5),
                tflops=round(case.flops() / ms / 1e9, 2),
                bandwidth_tbs=round(kv_bytes(case.batch, case.context) / ms / 1e9, 3), **extra)


def run_case(case, copies, args, failures):
    """The rows of one case; copies: the case and its copies for the graph timing (graph_copies)."""
    rows, reference = [], None
    max_bytes = args.max_cache_gb * 1e9
    for name, backend in SDPA_BACKENDS.items():
        try:
            fn, gqa = sdpa_fn(case, backend, max_bytes)
            if reference is None:
                reference = fn().transpose(1, 2).float()
            timed = row(case, name, median_ms(fn, args), gqa=gqa)
        except RuntimeError as error:
            failures.setdefault(name, str(error).split("\n")[0][:300])
            continue
        rows.append(with_graph(timed, case, lambda c, b=backend: sdpa_fn(c, b, max_bytes)[0], copies, args, failures))
    fn = flash4_fn(case)
    diff = None if reference is None else round((fn().float() - reference).abs().max().item(), 5)
    timed = row(case, "flash4", median_ms(fn, args), max_abs_diff=diff, host_us=round(py_bench.host_us(fn), 1))
    rows.append(with_graph(timed, case, flash4_fn, copies, args, failures))
    if not args.no_fa4 and "fa4_cute_import" not in failures:
        try:
            timed = row(case, "fa4_cute", median_ms(fa4_fn(case), args))
            rows.append(with_graph(timed, case, fa4_fn, copies, args, failures))
        except ImportError as error:
            failures["fa4_cute_import"] = str(error)[:300]
        except Exception as error:  # its compile or a shape it does not run on this GPU: record, go on
            failures.setdefault(f"fa4_cute page_size={case.page_size}", f"{type(error).__name__}: {str(error)[:300]}")
    return rows


def summary_table(lines):
    """The summary as a short text table: per case, flash4's TB/s and its ratios to the fastest SDPA backend and
    to fa4_cute, eager and under the graph ('-' where a figure is missing)."""
    columns = (("flash4_tbs", "TB/s"), ("flash4_vs_sdpa", "/sdpa"), ("flash4_vs_fa4", "/fa4"),
               ("flash4_graph_tbs", "graph TB/s"), ("flash4_vs_sdpa_graph", "/sdpa"), ("flash4_vs_fa4_graph", "/fa4"))
    header = f"{'B':>4} {'N':>7} {'Sq':>3} {'page':>4} " + " ".join(f"{title:>10}" for _, title in columns)
    table = [header]
    for line in lines:
        cells = " ".join(f"{line[key]:>10}" if key in line else f"{'-':>10}" for key, _ in columns)
        table.append(f"{line['B']:>4} {line['N']:>7} {line['Sq']:>3} {line['page_size']:>4} {cells}")
    return "\n".join(table)


def timing_columns(group, by, timing=""):
    """One case's summary columns for one timing ("": eager, "_graph": replayed from the graph): flash4's
    bandwidth, and its ratio to the fastest SDPA backend and to fa4_cute, where they have that timing."""
    ms, tbs = {"": ("ms", "bandwidth_tbs"), "_graph": ("graph_ms", "graph_bandwidth_tbs")}[timing]
    flash4 = by.get("flash4", {})
    if ms not in flash4:
        return {}
    line = {f"flash4{timing}_tbs": flash4[tbs]}
    sdpa = min((r for r in group if r["provider"].startswith("sdpa") and ms in r), key=lambda r: r[ms], default=None)
    if sdpa is not None:
        line |= {f"sdpa{timing}_fastest": sdpa["provider"], f"sdpa{timing}_tbs": sdpa[tbs],
                 f"flash4_vs_sdpa{timing}": round(sdpa[ms] / flash4[ms], 3)}
    if ms in by.get("fa4_cute", {}):
        line |= {f"fa4{timing}_tbs": by["fa4_cute"][tbs],
                 f"flash4_vs_fa4{timing}": round(by["fa4_cute"][ms] / flash4[ms], 3)}
    return line


def summary(rows):
    cases = {}
    for r in rows:
        cases.setdefault((r["B"], r["N"], r["Sq"], r["page_size"]), []).append(r)
    lines = []
    for (batch, context, seqlen_q, page), group in sorted(cases.items()):
        by = {r["provider"]: r for r in group}
        line = dict(B=batch, N=context, Sq=seqlen_q, page_size=page)
        lines.append(line | timing_columns(group, by) | timing_columns(group, by, "_graph"))
    return lines


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("decode_bench needs a CUDA device")
    meta = dict(date=datetime.date.today().isoformat(), commit=py_bench.git_commit(), device=py_bench.device_text(),
                software=py_bench.software_text(), method=__doc__.split("\n\n", 2)[2].strip())
    rows, skipped, failures = [], [], {}
    for page in args.page_sizes:
        for seqlen_q in args.seqlens_q:
            for batch in args.batches:
                for context in args.contexts:
                    shape = f"B={batch} N={context} Sq={seqlen_q} page={page}"
                    if kv_bytes(batch, context) > args.max_cache_gb * 1e9:
                        skipped.append(f"{shape}: K+V {kv_bytes(batch, context) / 1e9:.1f} GB > --max-cache-gb")
                        continue
                    case = Case(batch, context, seqlen_q, page)
                    copies = [case] + [Case(batch, context, seqlen_q, page)
                                       for _ in range(0 if args.no_graph else graph_copies(case) - 1)]
                    new = run_case(case, copies, args, failures)
                    rows += new
                    for r in new:
                        graph = f", graph {r['graph_bandwidth_tbs']:.2f} TB/s" if "graph_ms" in r else ""
                        print(f"{shape} {r['provider']:>15}: {r['ms']:.4f} ms {r['bandwidth_tbs']:.2f} TB/s{graph}",
                              flush=True)
                    del case, copies
                    torch.cuda.empty_cache()
    meta |= dict(skipped=skipped, failures=failures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary(rows)}, indent=1) + "\n")
    print(f"decode_bench: {len(rows)} rows -> {args.out}")
    print(summary_table(summary(rows)))


if __name__ == "__main__":
    main()
