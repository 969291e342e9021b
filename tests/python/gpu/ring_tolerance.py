"""The tolerance rule for merged and ring results, shared by test_ring_one_gpu.py (pytest, one GPU) and
dist_ring_check.py (torchrun, 2+ GPUs). Plain torch (and naive_backward.py): no pytest, no CUDA needed.

Rule (docs/design.md, as tests/python/gpu/test_gpu_ops.py): the max error against an fp32 reference must be
at most 2 x the max error of the naive bf16 implementation (fp32 scores of the bf16 inputs, P rounded to
bf16, fp32 accumulate, output rounded) + a small floor. For a merged or ring result the naive implementation
is the same split computation with the naive kernel in flash4's place (NaiveLocal: each block's out and
gradients rounded to bf16, as flash4 returns them, then merged / accumulated in fp32 by the same code; its
backward is naive_backward.py's, P and dS rounded and delta from the given rounded out, as a kernel's), and
the budget takes the larger of its error and the one-piece naive error: summing W bf16-rounded partial
gradients costs up to ~W/2 ulp more than one rounded result, which the one-piece rule does not allow for.
A result computed in one piece (single-call flash4) keeps the one-piece budget.
"""

import math
from collections import namedtuple

import torch

from naive_backward import naive_backward

FLOOR, LSE_FLOOR = 1e-4, 1e-3  # as tests/python/gpu/test_gpu_ops.py (see the reasons there)


def reference(q, k, v, causal, precise=True):
    """(out (B, S, Hq, D), lse (B, Hq, S)) of attention over the whole sequence, differentiable.

    precise: fp32 throughout (the reference); otherwise the naive bf16 computation of the tolerance rule.
    causal only for square blocks (Sq == Sk), where flash4's bottom-right alignment is the plain diagonal."""
    assert not causal or q.shape[1] == k.shape[1], "causal reference for a non-square block"
    groups = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(groups, dim=2) for t in (k, v))
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = qf @ kf.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.softmax(scores, dim=-1)
    if not precise:
        p = p.to(q.dtype).float()
    out = (p @ vf).transpose(1, 2)
    return (out if precise else out.to(q.dtype)), lse


def naive_forward(q, k, v, causal):
    """(out, lse) of the naive bf16 computation: out rounded to q's dtype, lse fp32."""
    return reference(q, k, v, causal, precise=False)


def max_error(got, ref):
    return (got.detach().float() - ref.detach().float()).abs().max().item()


class NaiveLocal:
    """The naive bf16 kernel as the ring's local kernel: out and gradients rounded to bf16, as flash4's."""

    def check(self, q, k, v):
        pass

    def forward(self, q, k, v, causal, softmax_scale, softcap):
        assert softcap == 0 and math.isclose(softmax_scale, q.shape[-1] ** -0.5, rel_tol=1e-12)
        return naive_forward(q, k, v, causal)

    def backward(self, dout, q, k, v, out, lse, causal, softmax_scale, softcap):
        return naive_backward(dout, q, k, v, out, lse, keep_mask(q.shape[1], k.shape[1], causal, q.device),
                              softmax_scale, softcap)


def keep_mask(seqlen_q, seqlen_k, causal, device):
    """(Sq, Sk) bool: which keys each query sees (causal bottom-right aligned, as flash4's)."""
    if not causal:
        return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    row = torch.arange(seqlen_q, device=device)[:, None] + (seqlen_k - seqlen_q)
    return torch.arange(seqlen_k, device=device)[None, :] <= row


def naive_gradients(dout, q, k, v, causal):
    """(dq, dk, dv) of the naive bf16 computation in one piece (from its own rounded out)."""
    out, lse = naive_forward(q, k, v, causal)
    return NaiveLocal().backward(dout, q, k, v, out, lse, causal, q.shape[-1] ** -0.5, 0.0)


Budgets = namedtuple("Budgets", "naive_error split_error one_piece split")
Budgets.__doc__ = """naive_error, split_error: max errors of the naive computation in one piece and split as the
checked result; one_piece: the budget of a result computed in one piece; split: of a merged or ring result."""


def budgets(ref, naive, naive_split, floor=FLOOR):
    """The rule's budgets against `ref`, given the naive computation in one piece and split as the result."""
    naive_error, split_error = max_error(naive, ref), max_error(naive_split, ref)
    return Budgets(naive_error, split_error, 2 * naive_error + floor, 2 * max(naive_error, split_error) + floor)
