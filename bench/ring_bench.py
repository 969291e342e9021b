"""Ring attention throughput: flash4 on 1 GPU against flash4.distributed on W GPUs, forward and forward+backward.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
        torchrun --nproc-per-node 2 bench/ring_bench.py --out bench/results/h200-DATE-ring.json

(tools/gpu-ring.sh runs it so.) Cases: total sequence N in {32K, 64K, 128K}, B = 1, H = 16, D = 128, bf16,
causal and not. Rank 0 first times flash4 on the whole sequence alone (the other ranks wait), then every rank
times ring_flash_attn_func on its zig-zag shard of N / W rows. One iteration is a forward (mode "fwd") or a
forward plus out.backward (mode "fwd+bwd"); the ring's time of an iteration is the slowest rank's (CUDA events
per rank, all-reduced with max); ms is the median over --iters iterations after --warmup.

Rows follow the anchors' format (shared/anchors/*.json) plus: gpus, tokens_per_s (B * N / time) and for the
ring speedup = its tokens_per_s / the 1-GPU row's. tflops counts the whole problem (fwd = 4*B*H*N*N*D, x0.5
causal; bwd = 2.5 x fwd) over the wall time, so the ring's figure is the W GPUs' together. The issue's goal:
speedup >= 1.8 on 2 GPUs at N = 128K causal, fwd+bwd. A library without a backward (NOT_IMPLEMENTED or
NO_KERNEL at this head dim) gets its fwd+bwd rows left out and listed under meta.skipped.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
from pathlib import Path

import torch
import torch.distributed as dist

import flash4
from flash4 import Flash4Error, flash_attn_func
from flash4._abi import Status
from flash4.distributed import ring_flash_attn_func, zigzag_shard

BWD_FLOPS_FACTOR = 2.5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqlens", nargs="+", type=int, default=[32768, 65536, 131072], help="total N")
    parser.add_argument("--modes", nargs="+", choices=("fwd", "fwd+bwd"), default=["fwd", "fwd+bwd"])
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--heads-kv", type=int, help="default: --heads")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", type=Path, help="JSON path (rank 0 writes it); default bench/results/ring-DATE.json")
    args = parser.parse_args(argv)
    args.causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    args.heads_kv = args.heads_kv or args.heads
    return args


def flops(args, seqlen, causal, mode):
    fwd = 4 * args.batch * args.heads * seqlen * seqlen * args.head_dim * (0.5 if causal else 1.0)
    return fwd * (1 + BWD_FLOPS_FACTOR if mode == "fwd+bwd" else 1)


def inputs(args, seqlen, rank=None, world_size=None):
    """q, k, v (leaves, requires_grad) and dout: the whole sequence, or rank's zig-zag shard of it."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(args.batch, seqlen, h, args.head_dim) for h in (args.heads, args.heads_kv, args.heads_kv, args.heads)]
    tensors = [torch.randn(*s, dtype=torch.bfloat16, device="cuda", generator=gen) for s in shapes]
    if rank is not None:
        tensors = [zigzag_shard(t, rank, world_size) for t in tensors]
    *qkv, dout = tensors
    return [t.requires_grad_() for t in qkv], dout


def time_iterations(step, args, group_max):
    """Median ms of step() over args.iters runs after args.warmup; with group_max, each run's slowest rank."""
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.iters):
        if group_max:
            dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    if group_max:
        all_times = torch.tensor(times, device="cuda")
        dist.all_reduce(all_times, op=dist.ReduceOp.MAX)
        times = all_times.tolist()
    return statistics.median(times)


def make_step(attention, qkv, dout, mode):
    def step():
        for t in qkv:
            t.grad = None
        out = attention(*qkv)
        if mode == "fwd+bwd":
            out.backward(dout)

    return step


def row(args, mode, seqlen, causal, provider, gpus, ms):
    return {
        "mode": mode, "dtype": "bf16", "D": args.head_dim, "causal": causal, "N": seqlen, "B": args.batch,
        "H": args.heads, "Hkv": args.heads_kv, "provider": provider, "gpus": gpus, "ms": round(ms, 4),
        "tflops": round(flops(args, seqlen, causal, mode) / (ms * 1e-3) / 1e12, 1),
        "tokens_per_s": round(args.batch * seqlen / (ms * 1e-3)), "iters": args.iters,
    }


def git_commit():
    if os.environ.get("FLASH4_COMMIT"):
        return os.environ["FLASH4_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(args, world_size):
    props = torch.cuda.get_device_properties(0)
    return {
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "device": f"{world_size} x {props.name} ({props.multi_processor_count} SMs)",
        "software": f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
                    f"{'.'.join(map(str, torch.cuda.nccl.version()))}, flash4 library {flash4.library_version()}",
        "env": {name: os.environ.get(name) for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
        "shape_rule": f"B = {args.batch}, H = {args.heads}, Hkv = {args.heads_kv}, D = {args.head_dim}, bf16, N total "
                      f"sequence; the ring splits N over the GPUs in zig-zag shards of N / W",
        "flops": f"fwd = 4*B*H*N*N*D (x0.5 causal); bwd = {BWD_FLOPS_FACTOR} x fwd; whole problem over wall time",
        "timing": f"CUDA events around each iteration (barrier first for the ring; slowest rank), median of "
                  f"{args.iters} after {args.warmup} warm-up",
        "goal": "fwd+bwd speedup >= 1.8 on 2 GPUs at N = 128K causal (issue 7)",
    }


def main(argv=None):
    args = parse_args(argv)
    for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
        if os.environ.get(name) != value:
            raise SystemExit(f"set {name}={value}: NVLink multicast stays off in multi-GPU runs (tools/gpu-ring.sh)")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows, skipped, single = [], [], {}
    for seqlen in args.seqlens:
        if seqlen % (2 * world_size):
            raise SystemExit(f"--seqlens: {seqlen} is not a multiple of 2 * world size = {2 * world_size}")
        for causal in args.causals:
            for mode in args.modes:
                case = f"{mode} N={seqlen} causal={causal}"
                ok = torch.ones(1, device="cuda")
                if rank == 0:  # the 1-GPU baseline, the other ranks waiting
                    qkv, dout = inputs(args, seqlen)
                    try:
                        ms = time_iterations(make_step(lambda q, k, v: flash_attn_func(q, k, v, causal=causal), qkv,
                                                       dout, mode), args, group_max=False)
                        single[case] = row(args, mode, seqlen, causal, "flash4", 1, ms)
                    except Flash4Error as err:
                        if err.status not in (Status.ERROR_NOT_IMPLEMENTED, Status.ERROR_NO_KERNEL):
                            raise
                        skipped.append(f"{case}: {err}")
                        ok.zero_()
                    del qkv, dout
                dist.broadcast(ok, src=0)
                if not ok.item():
                    continue
                qkv, dout = inputs(args, seqlen, rank, world_size)
                step = make_step(lambda q, k, v: ring_flash_attn_func(q, k, v, None, causal=causal), qkv, dout, mode)
                ms = time_iterations(step, args, group_max=True)
                del qkv, dout
                if rank == 0:
                    ring = row(args, mode, seqlen, causal, f"flash4_ring{world_size}", world_size, ms)
                    ring["speedup"] = round(ring["tokens_per_s"] / single[case]["tokens_per_s"], 3)
                    rows += [single[case], ring]
                    print(f"{case}: 1 GPU {single[case]['ms']:.2f} ms, {world_size} GPUs {ms:.2f} ms, "
                          f"speedup {ring['speedup']:.2f}x", flush=True)
                torch.cuda.empty_cache()
    if rank == 0:
        out = args.out or Path(f"bench/results/ring-{datetime.date.today().isoformat()}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": {**header(args, world_size), "skipped": skipped}, "rows": rows},
                                  indent=1) + "\n")
        print(f"wrote {out} ({len(rows)} rows, {len(skipped)} skipped)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
