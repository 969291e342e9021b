"""The naive same-precision backward of the tolerance rule, as src/reference/reference_backward.cpp's baseline.

Plain torch, no pytest, no CUDA needed. The naive gradients make the roundings any bf16/fp16 backward must
make: P rounded before P^T dO, dS rounded before dS K and dS^T Q, and delta = rowsum(dO * O) taken from O as
the forward stored it (rounded). Autograd through a forward that rounds P does not: it takes delta from its
own fp32 P and dP and never rounds dS. Where dS cancels (rows that see one or a few keys) the rounded O is
most of a kernel's dS error, and gradients summed over few rows (short or causal-edge sequences) then
landed beyond 2 x the autograd baseline's error on some fresh draws.
"""

import torch


@torch.no_grad()
def naive_backward(dout, q, k, v, out, lse, keep, scale, softcap=0.0):
    """(dq, dk, dv) in q's dtype of attention over q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D), keep (Sq, Sk) bool.

    out: the O that delta is taken from (the forward's rounded output); lse (B, Hq, Sq): the rows' log-sum-exp
    that P = exp(scores - lse) is formed with (over all keys of the row, which may be more than these: a
    block of a ring step). Rows with lse = -inf pass no gradient."""
    dtype, groups = q.dtype, q.shape[2] // k.shape[2]

    def rounded(t):
        return t.to(dtype).float()

    qf = q.float().transpose(1, 2)
    kf, vf = (t.float().repeat_interleave(groups, dim=2).transpose(1, 2) for t in (k, v))
    scores = qf @ kf.transpose(-1, -2) * scale
    capped = None
    if softcap:
        capped = torch.tanh(scores / softcap)
        scores = softcap * capped
    lse = lse.float()
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(scores - lse[..., None]).masked_fill(~keep, 0.0)
    do = dout.float().transpose(1, 2)
    delta = (do * out.float().transpose(1, 2)).sum(-1, keepdim=True)
    ds = p * (do @ vf.transpose(-1, -2) - delta)
    if capped is not None:
        ds = ds * (1 - capped * capped)
    ds = rounded(ds)
    dq = ds @ kf * scale
    dk = ds.transpose(-1, -2) @ qf * scale
    dv = rounded(p).transpose(-1, -2) @ do

    def per_kv_head(t):  # (B, Hq, Sk, D) -> (B, Sk, Hkv, D), the group's query heads summed in fp32
        b, h, s, d = t.shape
        return t.view(b, h // groups, groups, s, d).sum(2).transpose(1, 2)

    return dq.transpose(1, 2).to(dtype), per_kv_head(dk).to(dtype), per_kv_head(dv).to(dtype)
