"""Head dims no kernel has (every multiple of 8 up to 256, served by the smallest built kernel at least as wide)
and v's head dim apart from q's, on the GPU (H200): forward and gradients through flash_attn_func,
flash_attn_varlen_func and a packed form against the fp32 reference, with the tolerance rule and helpers of
tests/python/gpu/test_gpu_ops.py. The columns past the true head dim are checked by the C++ GPU tests
(tests/gpu/test_head_dims.cpp), which give every tensor padded rows. A case this build has no kernel wide
enough for skips with the library's message.
"""

import pytest
import torch

import flash4
import test_gpu_ops as gpu
from test_gpu_ops import backward_missing, hopper, needs_backward  # noqa: F401  (fixtures: the skips)
from test_gpu_ops import assert_within_rule, randn, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

NEW_DIMS = [8, 40, 72, 80, 120, 136, 160, 200, 248]


def check(q, k, v, causal):
    """Forward (out, lse) and gradients of flash_attn_func against the reference; dout is out-shaped."""
    out, lse = run(flash4.flash_attn_func, q, k, v, causal=causal, return_lse=True)
    assert out.shape == (*q.shape[:-1], v.shape[-1]) and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    scale = q.shape[-1] ** -0.5  # the default: 1/sqrt(q's head dim)
    keep = gpu.keep_mask(q.shape[1], k.shape[1], causal, (-1, -1))
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    naive_inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = gpu.attention(*ref_inputs, scale, keep)
    naive_out, naive_lse = gpu.attention(*naive_inputs, scale, keep, precise=False)
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, gpu.LSE_FLOOR)
    dout = torch.randn_like(out)
    grads = run(torch.autograd.grad, out, (q, k, v), dout)
    ref_grads = torch.autograd.grad(ref_out, ref_inputs, dout.float())
    naive_grads = torch.autograd.grad(naive_out, naive_inputs, dout)
    for name, got, ref, naive in zip(("dq", "dk", "dv"), grads, ref_grads, naive_grads):
        assert got.shape == ref.shape and got.dtype == q.dtype
        assert_within_rule(name, got, ref, naive)


@pytest.mark.parametrize("head_dim", NEW_DIMS)
def test_head_dims_no_kernel_has(needs_backward, head_dim):
    q = randn(2, 113, 4, head_dim, requires_grad=True)
    k, v = (randn(2, 203, 2, head_dim, requires_grad=True) for _ in "kv")
    check(q, k, v, causal=NEW_DIMS.index(head_dim) % 2 == 1)


@pytest.mark.parametrize("head_dim, head_dim_v", [(192, 128), (64, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_value_head_dim_of_its_own(needs_backward, head_dim, head_dim_v, causal):
    q = randn(2, 113, 4, head_dim, requires_grad=True)
    k = randn(2, 203, 2, head_dim, requires_grad=True)
    v = randn(2, 203, 2, head_dim_v, requires_grad=True)
    check(q, k, v, causal)


def test_default_scale_is_one_over_sqrt_of_q_s_head_dim():
    q, k, v = randn(1, 64, 2, 192), randn(1, 64, 2, 192), randn(1, 64, 2, 128)
    by_default = run(flash4.flash_attn_func, q, k, v)
    assert torch.equal(by_default, run(flash4.flash_attn_func, q, k, v, softmax_scale=192**-0.5))


@pytest.mark.parametrize("head_dim, head_dim_v", [(80, 80), (192, 128)])
def test_varlen(needs_backward, head_dim, head_dim_v):
    lengths_q, lengths_k = [113, 40, 1], [203, 77, 9]
    cu_q = torch.tensor([0, *lengths_q], device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0, *lengths_k], device="cuda").cumsum(0).to(torch.int32)
    q = randn(sum(lengths_q), 4, head_dim, requires_grad=True)
    k = randn(sum(lengths_k), 2, head_dim, requires_grad=True)
    v = randn(sum(lengths_k), 2, head_dim_v, requires_grad=True)
    out = run(flash4.flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=True)
    assert out.shape == (q.shape[0], 4, head_dim_v)
    dout = torch.randn_like(out)
    grads = run(torch.autograd.grad, out, (q, k, v), dout)
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    naive_inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_out = gpu.varlen_attention(*ref_inputs, cu_q, cu_k, True)[0]
    naive_out = gpu.varlen_attention(*naive_inputs, cu_q, cu_k, True, precise=False)[0]
    assert_within_rule("out", out, ref_out, naive_out)
    ref_grads = torch.autograd.grad(ref_out, ref_inputs, dout.float())
    naive_grads = torch.autograd.grad(naive_out, naive_inputs, dout)
    for name, got, ref, naive in zip(("dq", "dk", "dv"), grads, ref_grads, naive_grads):
        assert_within_rule(name, got, ref, naive)


def test_packed_qkv_of_a_head_dim_no_kernel_has(needs_backward):
    qkv = randn(2, 113, 3, 4, 40, requires_grad=True)
    out = run(flash4.flash_attn_qkvpacked_func, qkv, causal=True, deterministic=True)
    q, k, v = (t.detach().requires_grad_() for t in qkv.unbind(2))
    unpacked = run(flash4.flash_attn_func, q, k, v, causal=True, deterministic=True)
    assert torch.equal(out, unpacked)
    dout = torch.randn_like(out)
    (dqkv,) = torch.autograd.grad(out, (qkv,), dout)
    assert torch.equal(dqkv, torch.stack(torch.autograd.grad(unpacked, (q, k, v), dout), dim=2))
