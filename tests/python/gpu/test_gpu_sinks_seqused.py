"""Learnable sinks (FlashAttention-4's learnable_sink) and seqused_q / seqused_k (FlashAttention-3's) on the GPU
(H200): out, lse and the gradients of q, k, v and the sinks against an fp32 reference, with the tolerance rule
of test_gpu_ops.py; unused rows (past seqused) keep what torch.empty left in out and lse (NaN here:
test_gpu_call_forms.nan_allocations), and get zero gradients.

The reference treats a sink as one more column of every row's softmax with logit sink[h] (not multiplied by
softmax_scale) and no value; a row without keys then has out = 0 and lse = sink[h].
"""

import pytest
import torch

import flash4
from naive_backward import naive_backward
from test_gpu_call_forms import nan_allocations
from test_gpu_ops import (  # noqa: F401  (hopper: the module's skip fixture; needs_backward and its source)
    LSE_FLOOR,
    assert_within_rule,
    backward_missing,
    hopper,
    keep_mask,
    needs_backward,
    randn,
    run,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def sink_attention(q, k, v, keep, sink, precise=True):
    """(out (B, Sq, Hq, D), lse (B, Hq, Sq)) of (B, S, H, D) inputs, with a sink column when sink is not None.
    precise: fp32 throughout; otherwise the naive same-precision computation (P rounded to the inputs' dtype).
    Differentiable in every input, the sink included."""
    dtype = q.dtype
    groups = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(groups, dim=2) for t in (k, v))
    q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(~keep, float("-inf"))
    if sink is not None:
        column = sink.float()[None, :, None, None].expand(*scores.shape[:3], 1)
        scores = torch.cat([scores, column], dim=-1)
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows without keys or sink: 0
    if sink is not None:
        p = p[..., :-1]
    if not precise:
        p = p.to(dtype).float()
    out = (p @ v).transpose(1, 2)
    return (out if precise else out.to(dtype)), lse


def reference_and_naive(q, k, v, sink, keep, dout):
    """[(out, lse, (dq, dk, dv, dsink))] of attention with a sink: in fp32 (autograd), then in the naive
    precision. The naive gradients make a kernel's roundings (naive_backward.py: P and dS rounded, delta =
    rowsum(dO * O) from the rounded O); dsink = -sum over rows of p_sink * delta, with that delta too, in the
    sink's dtype. Autograd through the naive forward takes delta from its fp32 O, and its dsink budget missed
    the O rounding a kernel's delta carries."""
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v, sink)]
    out, lse = sink_attention(*leaves[:3], keep, leaves[3], precise=True)
    reference = (out, lse, torch.autograd.grad(out, leaves, dout.float()))
    with torch.no_grad():
        naive_out, naive_lse = sink_attention(q, k, v, keep, sink, precise=False)
        dq, dk, dv = naive_backward(dout, q, k, v, naive_out, naive_lse, keep, q.shape[-1] ** -0.5)
        delta = (dout.float() * naive_out.float()).sum(-1).transpose(1, 2)  # (B, Hq, Sq)
        p_sink = torch.exp(sink.float()[None, :, None] - naive_lse)
        dsink = (-(p_sink * delta).sum((0, 2))).to(sink.dtype)
    return reference, (naive_out, naive_lse, (dq, dk, dv, dsink))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sink_dtype", [torch.float32, torch.bfloat16])
def test_sinks_forward_and_gradients(needs_backward, causal, sink_dtype):
    # Sq > Sk: causal masks the first rows entirely (out = 0, lse = the sink); GQA 4:1.
    q = randn(2, 177, 8, 128, requires_grad=True)
    k, v = (randn(2, 100, 2, 128, requires_grad=True) for _ in "kv")
    sink = (torch.randn(8, device="cuda") * 2).to(sink_dtype).requires_grad_()
    out, lse = run(flash4.flash_attn_func, q, k, v, causal=causal, learnable_sink=sink, return_lse=True)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v, sink), dout)
    keep = keep_mask(177, 100, causal, (-1, -1))
    (ref_out, ref_lse, ref_grads), (naive_out, naive_lse, naive_grads) = reference_and_naive(
        q, k, v, sink, keep, dout)
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, LSE_FLOOR)
    assert grads[3].dtype == sink_dtype
    for name, got, ref, naive in zip(("dq", "dk", "dv", "dsink"), grads, ref_grads, naive_grads):
        assert_within_rule(name, got, ref, naive)
    if causal:  # the fully masked rows
        assert torch.equal(out[:, :77].float(), torch.zeros_like(out[:, :77].float()))
        torch.testing.assert_close(lse[:, :, :77], sink.float()[None, :, None].expand(2, 8, 77))


def test_sinks_deterministic_bit_identical(needs_backward):
    q, k, v = (randn(2, 1024, 8, 128, requires_grad=True) for _ in "qkv")
    sink = torch.randn(8, device="cuda", requires_grad=True)
    dout = torch.randn_like(q)

    def gradients():
        out = run(flash4.flash_attn_func, q, k, v, causal=True, deterministic=True, learnable_sink=sink)
        return torch.autograd.grad(out, (q, k, v, sink), dout)

    first, second = gradients(), gradients()
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_seqused_varlen_with_sinks(needs_backward):
    lengths_q, lengths_k = [130, 64, 200, 10], [150, 90, 40, 70]
    used_q, used_k = [129, 0, 200, 3], [1, 90, 0, 65]
    cu_q, cu_k = (torch.tensor([0, *n], device="cuda").cumsum(0).to(torch.int32) for n in (lengths_q, lengths_k))
    q = randn(sum(lengths_q), 8, 128, requires_grad=True)
    k, v = (randn(sum(lengths_k), 2, 128, requires_grad=True) for _ in "kv")
    sink = torch.randn(8, device="cuda", requires_grad=True)
    seqused_q, seqused_k = (torch.tensor(n, dtype=torch.int32, device="cuda") for n in (used_q, used_k))
    with nan_allocations():
        out, lse = run(flash4.flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k),
                       causal=True, seqused_q=seqused_q, seqused_k=seqused_k, learnable_sink=sink, return_lse=True)
    dout = torch.randn_like(out)
    dq, dk, dv, dsink = torch.autograd.grad(out, (q, k, v, sink), dout)
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    ref_dsink, naive_dsink = torch.zeros(8, device="cuda"), torch.zeros(8, device="cuda")
    for b in range(4):
        rows_q = slice(starts_q[b], starts_q[b] + used_q[b])
        rows_k = slice(starts_k[b], starts_k[b] + used_k[b])
        unused_q = slice(starts_q[b] + used_q[b], starts_q[b + 1])
        unused_k = slice(starts_k[b] + used_k[b], starts_k[b + 1])
        # Left untouched: NaN, as nan_allocations() made them; no gradient for unused rows.
        assert out[unused_q].isnan().all() and lse[:, unused_q].isnan().all(), f"sequence {b}: unused rows written"
        assert not dq[unused_q].any() and not dk[unused_k].any() and not dv[unused_k].any()
        if used_q[b] == 0:
            continue
        keep = keep_mask(used_q[b], used_k[b], True, (-1, -1))
        (ref_out, ref_lse, ref_grads), (naive_out, naive_lse, naive_grads) = reference_and_naive(
            q[None, rows_q], k[None, rows_k], v[None, rows_k], sink, keep, dout[None, rows_q])
        assert_within_rule(f"out of sequence {b}", out[None, rows_q], ref_out, naive_out)
        assert_within_rule(f"lse of sequence {b}", lse[None, :, rows_q], ref_lse, naive_lse, LSE_FLOOR)
        for name, got, ref, naive in zip(("dq", "dk", "dv"), (dq[None, rows_q], dk[None, rows_k], dv[None, rows_k]),
                                         ref_grads, naive_grads):
            assert_within_rule(f"{name} of sequence {b}", got, ref, naive)
        ref_dsink += ref_grads[3]
        naive_dsink += naive_grads[3].float()
    assert_within_rule("dsink", dsink, ref_dsink, naive_dsink)
