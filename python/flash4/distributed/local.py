"""The local attention of one ring step, behind a two-method interface the ring calls.

    forward(q, k, v, causal, softmax_scale, softcap) -> (out, lse)
        q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D); out like q, lse (B, Hq, Sq) fp32 or wider, natural log,
        -inf (and out = 0) for a row that sees no key. causal is bottom-right aligned (the ring only asks
        for it with Sq == Sk).
    backward(dout, q, k, v, out, lse, causal, softmax_scale, softcap) -> (dq, dk, dv)
        The gradient contribution of this K/V block, given the *global* out and lse of the rows: with
        P = exp(scores - lse) and Delta = rowsum(dout * out), dS = P * (dout V^T - Delta). Summing these over
        the blocks gives the exact gradient (FlashAttention's backward recomputes P the same way).

Flash4Local runs flash4's torch ops on CUDA tensors; ReferenceLocal is plain torch math (fp64 by default) on
any device, so the ring is tested on CPU with the same code path.
"""

import torch

from .. import ops

__all__ = ["Flash4Local", "ReferenceLocal"]


class Flash4Local:
    """flash4::fwd / flash4::bwd (torch.ops.flash4) as the local kernel."""

    def __init__(self, deterministic=False):
        self.deterministic = bool(deterministic)

    def _options(self, causal, softmax_scale, softcap):
        # flash4's causal is the window (left -1, right 0); no window otherwise (interface._options does the same).
        return float(softmax_scale), bool(causal), -1, 0 if causal else -1, float(softcap), self.deterministic

    def check(self, q, k, v):
        """flash4's requirements the ring does not check itself; the C ABI checks everything again."""
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.device.type != "cuda":
                raise ValueError(f"{name} is on {t.device}; flash4's local kernel runs on CUDA tensors")
            if t.dtype not in ops.DTYPES:
                raise TypeError(f"{name} has dtype {t.dtype}; flash4 supports torch.bfloat16 and torch.float16")
        if q.shape[-1] not in ops.HEAD_DIMS:
            raise ValueError(f"q has head_dim {q.shape[-1]}; flash4 supports multiples of 8 from 8 to 256")

    def forward(self, q, k, v, causal, softmax_scale, softcap):
        return torch.ops.flash4.fwd(q, k, v, *self._options(causal, softmax_scale, softcap))

    def backward(self, dout, q, k, v, out, lse, causal, softmax_scale, softcap):
        return _flash4_bwd(dout, q, k, v, out, lse, self._options(causal, softmax_scale, softcap))


def _flash4_bwd(dout, q, k, v, out, lse, options):
    """The one place that knows flash4::bwd's schema: (dout, q, k, v, out, lse, *Options) -> (dq, dk, dv),
    dq/dk/dv in the inputs' dtype, lse (B, Hq, Sq) fp32 as flash4::fwd returned it."""
    return torch.ops.flash4.bwd(dout, q, k, v, out, lse, *options, None)  # no sinks: dsink None


class ReferenceLocal:
    """Attention in plain torch, computed in `compute_dtype` (fp64 by default) on any device.

    out is returned in q's dtype (as a kernel would), lse and gradients in compute_dtype, which the ring's
    accumulators take as they are.
    """

    def __init__(self, compute_dtype=torch.float64):
        self.compute_dtype = compute_dtype

    def check(self, q, k, v):
        pass

    def _scores(self, q, k, causal, softmax_scale, softcap):
        """(scores (B, Hq, Sq, Sk) with -inf where masked, keep mask, tanh of the capped scores or None)."""
        groups = q.shape[2] // k.shape[2]
        qf = q.to(self.compute_dtype).transpose(1, 2)
        kf = k.to(self.compute_dtype).repeat_interleave(groups, dim=2).transpose(1, 2)
        scores = qf @ kf.transpose(-1, -2) * softmax_scale
        capped = None
        if softcap:
            capped = torch.tanh(scores / softcap)
            scores = softcap * capped
        seqlen_q, seqlen_k = q.shape[1], k.shape[1]
        keep = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
        if causal:  # bottom-right aligned: query i sees key j iff j <= i + Sk - Sq
            row = torch.arange(seqlen_q, device=q.device)[:, None] + (seqlen_k - seqlen_q)
            keep = torch.arange(seqlen_k, device=q.device)[None, :] <= row
        return scores.masked_fill(~keep, float("-inf")), keep, capped

    def _expand(self, v, groups):
        return v.to(self.compute_dtype).repeat_interleave(groups, dim=2).transpose(1, 2)

    def forward(self, q, k, v, causal, softmax_scale, softcap):
        scores, keep, _ = self._scores(q, k, causal, softmax_scale, softcap)
        lse = torch.logsumexp(scores, dim=-1)
        p = torch.exp(scores - _finite_or_zero(lse)[..., None]).masked_fill(~keep, 0.0)
        out = (p @ self._expand(v, q.shape[2] // k.shape[2])).transpose(1, 2)
        return out.to(q.dtype), lse

    def backward(self, dout, q, k, v, out, lse, causal, softmax_scale, softcap):
        groups = q.shape[2] // k.shape[2]
        scores, keep, capped = self._scores(q, k, causal, softmax_scale, softcap)
        lse = lse.to(self.compute_dtype)
        p = torch.exp(scores - _finite_or_zero(lse)[..., None]).masked_fill(~keep, 0.0)
        do = dout.to(self.compute_dtype).transpose(1, 2)  # (B, Hq, Sq, D)
        delta = (do * out.to(self.compute_dtype).transpose(1, 2)).sum(-1, keepdim=True)
        dv = p.transpose(-1, -2) @ do  # (B, Hq, Sk, D)
        ds = p * (do @ self._expand(v, groups).transpose(-1, -2) - delta)
        if capped is not None:
            ds = ds * (1 - capped * capped)
        qf = q.to(self.compute_dtype).transpose(1, 2)
        dq = ds @ self._expand(k, groups) * softmax_scale
        dk = ds.transpose(-1, -2) @ qf * softmax_scale

        def per_kv_head(t):  # (B, Hq, Sk, D) -> (B, Sk, Hkv, D), summing each group's query heads
            b, h, s, d = t.shape
            return t.view(b, h // groups, groups, s, d).sum(2).transpose(1, 2)

        return dq.transpose(1, 2), per_kv_head(dk), per_kv_head(dv)


def _finite_or_zero(lse):
    return torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
