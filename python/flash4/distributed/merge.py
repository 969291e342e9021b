"""Exact merge of partial attention results through their log-sum-exp.

Attention of a query row over the union of key blocks A and B is a weighted sum of the attention over each:
with lse_x = log sum_{j in x} exp(s_j) (natural log, as flash4 returns it) and out_x the softmax-weighted
mean of V over x,

    lse = log(exp(lse_a) + exp(lse_b))
    out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b

A row that sees no key of a block has lse_x = -inf and out_x = 0 (flash4's convention for fully masked rows);
its weight is then 0. A row that sees no key at all keeps lse = -inf and out = 0: the -inf - (-inf) = NaN of
the textbook formula is avoided by subtracting 0 instead of -inf there.

Layouts follow flash4: out (B, S, H, D), lse (B, H, S); the varlen layout out (T, H, D), lse (H, T) works too.
"""

import torch

__all__ = ["merge_attention", "merge_attention_list"]


def _check_pair(out, lse, out_name, lse_name):
    if out.dim() not in (3, 4):
        raise ValueError(f"{out_name} must be (B, S, H, D) or (T, H, D), got shape {tuple(out.shape)}")
    expected = (out.shape[0], out.shape[2], out.shape[1]) if out.dim() == 4 else (out.shape[1], out.shape[0])
    if tuple(lse.shape) != expected:
        raise ValueError(f"{lse_name} has shape {tuple(lse.shape)} but {out_name} {tuple(out.shape)} needs {expected}")


def _rows_last(lse, out):
    """lse (B, H, S) -> (B, S, H, 1), or (H, T) -> (T, H, 1): broadcastable against out."""
    return (lse.transpose(-1, -2) if out.dim() == 4 else lse.transpose(0, 1)).unsqueeze(-1)


def _safe(lse):
    """lse with -inf replaced by 0, to subtract from another lse: exp(-inf - 0) = 0, never NaN."""
    return torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)


def merge_attention(out_a, lse_a, out_b, lse_b):
    """(out, lse) of attention over the union of the key sets behind (out_a, lse_a) and (out_b, lse_b).

    Computes in fp32, or fp64 when an input is fp64; out comes back in that precision (cast it down once, after
    the last merge). Differentiable in torch's sense, though the ring's backward does not go through it.
    """
    _check_pair(out_a, lse_a, "out_a", "lse_a")
    _check_pair(out_b, lse_b, "out_b", "lse_b")
    if out_a.shape != out_b.shape:
        raise ValueError(f"out_b has shape {tuple(out_b.shape)} but out_a has {tuple(out_a.shape)}")
    dtype = torch.promote_types(torch.promote_types(out_a.dtype, out_b.dtype), torch.float32)
    lse_a, lse_b = lse_a.to(dtype), lse_b.to(dtype)
    lse = torch.logaddexp(lse_a, lse_b)  # -inf when both are -inf
    base = _safe(lse)
    weight_a = _rows_last(torch.exp(lse_a - base), out_a)
    weight_b = _rows_last(torch.exp(lse_b - base), out_b)
    return weight_a * out_a.to(dtype) + weight_b * out_b.to(dtype), lse


def merge_attention_list(outs, lses):
    """merge_attention over any number of partial results at once (one logsumexp, no running rescale)."""
    if len(outs) != len(lses) or not outs:
        raise ValueError(f"outs and lses must be non-empty and of one length, got {len(outs)} and {len(lses)}")
    for i, (out, lse) in enumerate(zip(outs, lses)):
        _check_pair(out, lse, f"outs[{i}]", f"lses[{i}]")
        if out.shape != outs[0].shape:
            raise ValueError(f"outs[{i}] has shape {tuple(out.shape)} but outs[0] has {tuple(outs[0].shape)}")
    dtype = torch.float32
    for out in outs:
        dtype = torch.promote_types(dtype, out.dtype)
    stacked = torch.stack([lse.to(dtype) for lse in lses])
    lse = torch.logsumexp(stacked, dim=0)  # -inf where every part is -inf
    base = _safe(lse)
    out = sum(_rows_last(torch.exp(part - base), o) * o.to(dtype) for part, o in zip(stacked, outs))
    return out, lse
