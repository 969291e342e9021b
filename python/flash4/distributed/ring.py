"""Ring attention: the sequence is sharded over the ranks of a group, K/V shards travel around the ring.

Forward, on every rank r of W: W steps; at step s the rank holds the K/V shard of rank (r - s) mod W, starts
sending it to rank r + 1 (and receiving the next one from rank r - 1) with one batch_isend_irecv, runs the
local attention of its queries against the shard it holds (flash4 by default) while the transfer is in
flight, and merges the step's (out, lse) into its running result through merge_attention (exact).

Backward: with the global out and lse of its rows saved, the gradient of a K/V block is a sum of independent
per-step terms (see local.py). The K/V shards go around the ring again; each shard carries an fp32 dK/dV
accumulator that every rank adds its term to, and after W hops the accumulator arrives back at the shard's
owner. dQ never leaves its rank. Each step's transfer of the next K/V and of the accumulator overlaps the
local backward: the accumulator is received into a fresh buffer while the term is computed, then added.

Causal attention uses the zig-zag layout (zigzag.py), so every step costs every rank the same.
"""

import math

import torch
import torch.distributed as dist

from .local import Flash4Local
from .merge import merge_attention
from .zigzag import Step, step_kind

__all__ = ["DistRing", "ring_flash_attn_func"]


class DistRing:
    """The ring's communication over a torch.distributed group (NCCL on GPUs, gloo on CPU).

    Any object with the same three members (rank, world_size, exchange) can stand in for it, e.g. a
    single-process simulation in tests.
    """

    def __init__(self, group=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("group: torch.distributed is not initialized; call init_process_group first")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._next = self._global((self.rank + 1) % self.world_size)
        self._prev = self._global((self.rank - 1) % self.world_size)

    def _global(self, group_rank):
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def exchange(self, send, recv):
        """Start sending `send` to the next rank and receiving the previous rank's into `recv`; returns an
        object whose wait() makes later work (the current CUDA stream, or the host on CPU) wait for both."""
        requests = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, send, self._next, self.group),
            dist.P2POp(dist.irecv, recv, self._prev, self.group),
        ])
        return _Pending(requests)


class _Pending:
    def __init__(self, requests):
        self.requests = requests

    def wait(self):
        for request in self.requests:
            request.wait()


def _step_slices(kind, half):
    """(query rows, key rows) of the local shard and the visiting shard that a step computes on."""
    everything = slice(None)
    if kind is Step.FIRST_KEYS:
        return everything, slice(0, half)
    if kind is Step.SECOND_QUERIES:
        return slice(half, None), everything
    return everything, everything


def _accumulator_dtype(dtype):
    return torch.promote_types(dtype, torch.float32)


def ring_forward(q, k, v, ring, causal, softmax_scale, softcap, local):
    """(out, lse) of this rank's queries against the whole sequence, both in the accumulator precision
    (fp32, or fp64 for fp64 inputs): out (B, S, Hq, D), lse (B, Hq, S)."""
    world_size, rank, half = ring.world_size, ring.rank, q.shape[1] // 2
    kv = torch.stack([k, v])
    out = lse = None
    for step in range(world_size):
        if step + 1 < world_size:
            kv_next = torch.empty_like(kv)
            pending = ring.exchange(kv, kv_next)
        kind = step_kind(rank, (rank - step) % world_size, causal)
        rows, keys = _step_slices(kind, half)
        part_out, part_lse = local.forward(q[:, rows], kv[0][:, keys], kv[1][:, keys], kind is Step.DIAGONAL,
                                           softmax_scale, softcap)
        if out is None:  # step 0 covers every row (FULL or DIAGONAL)
            dtype = _accumulator_dtype(q.dtype)
            out, lse = part_out.to(dtype), part_lse.to(dtype)
        else:
            out[:, rows], lse[..., rows] = merge_attention(out[:, rows], lse[..., rows], part_out, part_lse)
        if step + 1 < world_size:
            pending.wait()
            kv = kv_next
    return out, lse


def ring_backward(dout, q, k, v, out, lse, ring, causal, softmax_scale, softcap, local):
    """(dq, dk, dv) of this rank's shards, in the accumulator precision, from the global out and lse."""
    world_size, rank, half = ring.world_size, ring.rank, q.shape[1] // 2
    dtype = _accumulator_dtype(q.dtype)
    kv = torch.stack([k, v])
    dq = torch.zeros(q.shape, dtype=dtype, device=q.device)
    dkv = dkv_pending = dkv_received = None
    for step in range(world_size):
        if step + 1 < world_size:
            kv_next = torch.empty_like(kv)
            kv_pending = ring.exchange(kv, kv_next)
        kind = step_kind(rank, (rank - step) % world_size, causal)
        rows, keys = _step_slices(kind, half)
        part_dq, part_dk, part_dv = local.backward(dout[:, rows], q[:, rows], kv[0][:, keys], kv[1][:, keys],
                                                   out[:, rows], lse[..., rows], kind is Step.DIAGONAL,
                                                   softmax_scale, softcap)
        dq[:, rows] += part_dq
        if dkv_pending is None:  # step 0 covers every key row
            dkv = torch.stack([part_dk, part_dv]).to(dtype)
        else:
            dkv_pending.wait()
            dkv = dkv_received
            dkv[0][:, keys] += part_dk
            dkv[1][:, keys] += part_dv
        if world_size > 1:  # the accumulator follows its K/V shard; after W hops it is home
            dkv_received = torch.empty_like(dkv)
            dkv_pending = ring.exchange(dkv, dkv_received)
        if step + 1 < world_size:
            kv_pending.wait()
            kv = kv_next
    if world_size > 1:
        dkv_pending.wait()
        dkv = dkv_received
    return dq, dkv[0], dkv[1]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring, causal, softmax_scale, softcap, local):
        out, lse = ring_forward(q, k, v, ring, causal, softmax_scale, softcap, local)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.arguments = ring, causal, softmax_scale, softcap, local
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(dout, q, k, v, out, lse, *ctx.arguments)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def ring_flash_attn_func(q, k, v, group=None, causal=False, softmax_scale=None, softcap=0.0, deterministic=False,
                         return_lse=False, local=None):
    """Exact attention over a sequence sharded across the ranks of `group` (context parallelism).

    Every rank passes its shard q (B, S_local, Hq, D), k and v (B, S_local, Hkv, D), the same shapes on
    every rank. With causal=True the shards must be the zig-zag split (flash4.distributed.zigzag_shard: rank
    r holds chunks r and 2W-1-r of 2W), and S_local must be even; without causal any split works and each
    rank gets the outputs of the rows it holds. Hq must be a multiple of Hkv (GQA/MQA).

    group: a torch.distributed process group (None: the default group), or a ring object with rank,
    world_size and exchange(send, recv) like DistRing. local: the per-step kernel (default
    Flash4Local(deterministic), i.e. torch.ops.flash4 on CUDA; ReferenceLocal for plain torch math).
    softmax_scale (default 1/sqrt(D)) and softcap as flash_attn_func. Differentiable in q, k, v.

    Returns out (B, S_local, Hq, D), or (out, lse) with return_lse: lse (B, Hq, S_local) fp32 (fp64 for fp64
    inputs), natural log, the row's log-sum-exp over the whole sequence; lse carries no gradient.
    """
    _check_shards(q, k, v, causal)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    _check_positive("softmax_scale", softmax_scale)
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap must be a finite number >= 0 (0 turns it off), got {softcap!r}")
    ring = group if hasattr(group, "exchange") else DistRing(group)
    local = Flash4Local(deterministic) if local is None else local
    local.check(q, k, v)
    out, lse = _RingAttention.apply(q, k, v, ring, bool(causal), float(softmax_scale), float(softcap), local)
    return (out, lse) if return_lse else out


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_shards(q, k, v, causal):
    layout = "(batch, seqlen_local, heads, head_dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D {layout}, got shape {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}")
        if 0 in t.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; every size must be >= 1")
    if v.shape != k.shape:
        raise ValueError(f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; they must match")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k has batch size {k.shape[0]} but q has {q.shape[0]}")
    if k.shape[1] != q.shape[1]:
        raise ValueError(
            f"k has {k.shape[1]} rows but q has {q.shape[1]}: ring attention needs q, k and v shards of one "
            f"sequence split (self-attention)"
        )
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k has head_dim {k.shape[3]} but q has {q.shape[3]}")
    if q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"q has {q.shape[2]} heads, not a multiple of k's {k.shape[2]} (GQA/MQA need "
                         f"heads_q % heads_kv == 0)")
    if causal and q.shape[1] % 2 != 0:
        raise ValueError(
            f"q has {q.shape[1]} rows per rank; causal ring attention needs an even number (the zig-zag split "
            f"gives every rank two chunks of equal length)"
        )
