"""Ring attention on 2 (or more) GPUs against flash4 on one GPU: out, lse, dq, dk, dv.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
        torchrun --nproc-per-node 2 tests/python/gpu/dist_ring_check.py [--require-backward]

(tools/gpu-ring.sh runs it so.) Every rank draws the same full-sequence inputs, runs
flash4.distributed.ring_flash_attn_func on its zig-zag shard, and all-gathers the results. Each rank then
checks the gathered result with the project's tolerance rule, applied to merged and ring results as
tests/python/gpu/test_ring_one_gpu.py does (ring_tolerance.py, shared by both): error against an fp32
reference at most 2 x the larger of two naive bf16 errors + a floor, those of the naive computation in one
piece and of the same ring with the naive kernel in flash4's place (NaiveLocal: each step's out and
gradients rounded to bf16, then merged / summed by the same code; summing W rounded partial gradients costs
more than one rounded result, which the one-piece rule does not allow for). The error of single-GPU flash4
on the gathered sequence is printed beside it with its one-piece budget. Also checks, on one GPU, the LSE
merge of flash4's results over key chunks against one flash4 call over all keys, by the same rule.

Exits 1 on any mismatch. While flash4_bwd reports FLASH4_ERROR_NOT_IMPLEMENTED the gradient checks are
skipped with a message (exit 0), unless --require-backward.

--cpu-smoke runs the same script without a GPU (gloo, CPU tensors, sequences 16x shorter, ReferenceLocal in
fp32 as the ring's local kernel and the fp32 reference as "single-GPU flash4"; NaiveLocal as on GPU): it
checks this script's plumbing, not flash4.
`torchrun --nproc-per-node 2 tests/python/gpu/dist_ring_check.py --cpu-smoke`
"""

import argparse
import os
import sys
import traceback

import torch
import torch.distributed as dist

from flash4 import Flash4NotImplementedError, flash_attn_func
from flash4.distributed import (
    ReferenceLocal,
    merge_attention_list,
    ring_flash_attn_func,
    zigzag_shard,
    zigzag_unshard,
)
from ring_tolerance import FLOOR, LSE_FLOOR, budgets, max_error, naive_forward, naive_gradients, NaiveLocal, reference

BF16 = torch.bfloat16
# (causal, batch, heads_q, heads_kv, head_dim, total seqlen); seqlens are multiples of 2 * world_size * 128.
CASES = [
    (False, 2, 8, 8, 128, 4096),
    (True, 2, 8, 8, 128, 4096),
    (True, 1, 8, 2, 128, 4096),  # GQA
    (False, 1, 16, 4, 64, 2048),  # GQA, D = 64
    (True, 1, 4, 1, 64, 1536),  # MQA, chunks of 384 rows: not a multiple of the 128-row tiles for W = 2
]


class Target:
    """Where the check runs: flash4 on CUDA (the real check) or plain torch on CPU (--cpu-smoke)."""

    def __init__(self, cpu_smoke):
        self.cpu_smoke = cpu_smoke
        self.device = "cpu" if cpu_smoke else "cuda"
        self.backend = "gloo" if cpu_smoke else "nccl"
        self.local = ReferenceLocal(torch.float32) if cpu_smoke else None  # None: Flash4Local
        self.seqlen_divisor = 16 if cpu_smoke else 1

    def attention(self, q, k, v, causal=False):
        """(out, lse) of one-piece attention: flash4, or for --cpu-smoke the fp32 reference rounded to bf16."""
        if not self.cpu_smoke:
            return flash_attn_func(q, k, v, causal=causal, return_lse=True)
        out, lse = reference(q, k, v, causal)
        return out.to(q.dtype), lse


class Report:
    def __init__(self, rank):
        self.rank, self.failures = rank, 0

    def check(self, label, ring, ref, naive, naive_split, single, floor):
        """ring: the ring's (or merge's) result; naive, naive_split: the naive computation in one piece and
        split as `ring`; single: single-GPU flash4 (printed with its one-piece budget, not checked)."""
        rule = budgets(ref, naive, naive_split, floor)
        error = max_error(ring, ref)
        ok = ring.shape == ref.shape and bool(torch.isfinite(ring).all()) and error <= rule.split
        self.failures += 0 if ok else 1
        if self.rank == 0 or not ok:
            print(f"[rank {self.rank}] {'ok  ' if ok else 'FAIL'} {label}: ring err {error:.3g} (budget "
                  f"{rule.split:.3g}), naive {rule.naive_error:.3g}, naive split {rule.split_error:.3g}, "
                  f"single-GPU flash4 err {max_error(single, ref):.3g} (budget {rule.one_piece:.3g}), "
                  f"ring vs single {max_error(ring, single):.3g}", flush=True)


def gather(shard, dim, world_size):
    parts = [torch.empty_like(shard) for _ in range(world_size)]
    dist.all_gather(parts, shard.contiguous())
    return zigzag_unshard(parts, dim=dim)


def check_case(target, report, case, rank, world_size, require_backward):
    causal, batch, heads_q, heads_kv, head_dim, seqlen = case
    seqlen //= target.seqlen_divisor
    label = f"causal={causal} B={batch} Hq={heads_q} Hkv={heads_kv} D={head_dim} S={seqlen}"
    gen = torch.Generator(device=target.device).manual_seed(1234)
    q, k, v = (torch.randn(batch, seqlen, h, head_dim, device=target.device, dtype=BF16, generator=gen)
               for h in (heads_q, heads_kv, heads_kv))
    dout = torch.randn(batch, seqlen, heads_q, head_dim, device=target.device, dtype=BF16, generator=gen)

    def ring(local):
        """(shards with requires_grad, out shard, gathered out, gathered lse) of the ring with `local`."""
        shards = [zigzag_shard(t, rank, world_size).requires_grad_() for t in (q, k, v)]
        out_local, lse_local = ring_flash_attn_func(*shards, None, causal=causal, return_lse=True, local=local)
        return shards, out_local, gather(out_local.detach(), 1, world_size), gather(lse_local, 2, world_size)

    shards, out_local, out, lse = ring(target.local)
    split_shards, split_out_local, split_out, split_lse = ring(NaiveLocal())

    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    single_out, single_lse = target.attention(*inputs, causal=causal)
    ref_inputs = [t.float().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = reference(*ref_inputs, causal)
    naive_out, naive_lse = naive_forward(q, k, v, causal)
    report.check(f"{label} out", out, ref_out, naive_out, split_out, single_out, FLOOR)
    report.check(f"{label} lse", lse, ref_lse, naive_lse, split_lse, single_lse, LSE_FLOOR)

    dout_local = zigzag_shard(dout, rank, world_size)
    try:
        out_local.backward(dout_local)
        single_grads = torch.autograd.grad(single_out, inputs, dout)
    except Flash4NotImplementedError as err:
        print(f"[rank {rank}] {'FAIL' if require_backward else 'SKIP'} {label} backward: {err}", flush=True)
        report.failures += int(require_backward)
        return
    ref_grads = torch.autograd.grad(ref_out, ref_inputs, dout.float())
    naive_grads = naive_gradients(dout, q, k, v, causal)
    split_out_local.backward(dout_local)
    for name, shard, ref, naive, split_shard, single in zip(("dq", "dk", "dv"), shards, ref_grads, naive_grads,
                                                             split_shards, single_grads):
        report.check(f"{label} {name}", gather(shard.grad, 1, world_size), ref, naive,
                     gather(split_shard.grad, 1, world_size), single, FLOOR)


def check_merge(target, report):
    """One GPU: flash4 over 4 key chunks, merged through the LSE, against flash4 and fp32 over all keys."""
    gen = torch.Generator(device=target.device).manual_seed(99)
    seqlen = 2048 // target.seqlen_divisor
    q, k, v = (torch.randn(2, seqlen, 8, 128, device=target.device, dtype=BF16, generator=gen) for _ in range(3))

    def merged(kernel):
        parts = [kernel(q, kc, vc, False) for kc, vc in zip(k.chunk(4, dim=1), v.chunk(4, dim=1))]
        return merge_attention_list([p[0] for p in parts], [p[1] for p in parts])

    out, lse = merged(target.attention)
    split_out, split_lse = merged(naive_forward)
    single_out, single_lse = target.attention(q, k, v)
    ref_out, ref_lse = reference(q, k, v, causal=False)
    naive_out, naive_lse = reference(q, k, v, causal=False, precise=False)
    report.check("merge of 4 key chunks out", out, ref_out, naive_out, split_out, single_out, FLOOR)
    report.check("merge of 4 key chunks lse", lse, ref_lse, naive_lse, split_lse, single_lse, LSE_FLOOR)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--require-backward", action="store_true", help="fail, not skip, without flash4_bwd")
    parser.add_argument("--cpu-smoke", action="store_true", help="gloo on CPU with the reference kernel")
    args = parser.parse_args()
    target = Target(args.cpu_smoke)
    for name, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
        if os.environ.get(name) != value:
            print(f"warning: {name} should be {value} to keep NVLink multicast off (tools/gpu-ring.sh sets it)",
                  flush=True)
    if args.cpu_smoke:
        dist.init_process_group("gloo")
    else:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    report = Report(rank)
    try:
        if rank == 0:
            check_merge(target, report)
        for case in CASES:
            check_case(target, report, case, rank, world_size, args.require_backward)
    except Exception:  # noqa: BLE001 - a rank that fails mid-case must not wait in a collective
        traceback.print_exc()
        os._exit(1)  # torchrun then stops the other ranks
    failures = torch.tensor([report.failures], device=target.device)
    dist.all_reduce(failures)
    dist.destroy_process_group()
    if rank == 0:
        print(f"dist_ring_check: world size {world_size}, {failures.item()} failed checks", flush=True)
    return 1 if failures.item() else 0


if __name__ == "__main__":
    sys.exit(main())
