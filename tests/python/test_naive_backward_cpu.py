"""tests/python/gpu/naive_backward.py on the CPU: without rounding (fp32 inputs, whose dtype the naive rounds
to) it is the exact gradient, so the GPU tests' budgets come from the right formulas; with bf16 inputs it
makes the roundings a kernel makes (rounded O in delta), which autograd through the naive forward does not."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

from naive_backward import naive_backward  # noqa: E402
from test_distributed_cpu import attention, causal_keep  # noqa: E402


@pytest.mark.parametrize("seqlen_q, seqlen_k, causal, softcap", [
    (13, 21, True, 0.0), (21, 13, True, 0.0),  # the first 8 rows of the second see no key
    (17, 17, False, 3.0),
])
def test_without_rounding_it_is_the_exact_gradient(seqlen_q, seqlen_k, causal, softcap):
    gen = torch.Generator().manual_seed(seqlen_q)
    q = torch.randn(2, seqlen_q, 4, 16, generator=gen, requires_grad=True)
    k, v = (torch.randn(2, seqlen_k, 2, 16, generator=gen, requires_grad=True) for _ in "kv")
    dout = torch.randn(2, seqlen_q, 4, 16, generator=gen)
    keep = causal_keep(seqlen_q, seqlen_k) if causal else torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    out, lse = attention(q, k, v, keep, 0.3, softcap)
    exact = torch.autograd.grad(out, (q, k, v), dout)
    naive = naive_backward(dout, q, k, v, out, lse, keep, 0.3, softcap)
    for name, got, want in zip(("dq", "dk", "dv"), naive, exact):
        assert got.dtype == torch.float32 and got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_bf16_delta_comes_from_the_rounded_output():
    # Two keys per row: dS = P (dP - delta) cancels, so delta's input decides dS. Given the exact fp32 out
    # instead of the rounded one, the naive dq moves; autograd through a rounding forward cannot see this.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 1, 64, generator=gen).bfloat16() for _ in "qkv")
    dout = torch.randn(1, 2, 1, 64, generator=gen).bfloat16()
    keep = torch.ones(2, 2, dtype=torch.bool)
    out, lse = attention(q, k, v, keep, 0.125, 0.0)
    from_rounded = naive_backward(dout, q, k, v, out.bfloat16(), lse, keep, 0.125)[0]
    from_exact = naive_backward(dout, q, k, v, out, lse, keep, 0.125)[0]
    assert from_rounded.dtype == torch.bfloat16 and not torch.equal(from_rounded, from_exact)
