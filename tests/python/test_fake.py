"""Shape inference of flash4's ops without a GPU or the library: register_fake under FakeTensorMode and
symbolic tracing, and the register_autograd wiring on meta tensors (which the fake kernels also serve).
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from flash4 import flash_attn_func, flash_attn_varlen_func, ops

OPTIONS = ops.Options(softmax_scale=0.125, causal=True, window_left=-1, window_right=0, softcap=0.0,
                      deterministic=False)


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def launched():
        raise AssertionError("shape inference reached the library")

    monkeypatch.setattr(ops, "load_library", launched)


@pytest.mark.parametrize(
    "batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype",
    [
        (2, 128, 128, 16, 16, 64, torch.bfloat16),
        (1, 113, 239, 8, 2, 128, torch.float16),  # GQA, Sq != Sk
        (3, 1, 4224, 12, 1, 256, torch.bfloat16),  # MQA, one query row
        (4, 17, 17, 6, 3, 96, torch.float16),
        (1, 799, 3, 4, 4, 192, torch.bfloat16),
    ],
)
def test_fixed_length_shapes(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype):
    with FakeTensorMode():
        q = torch.empty(batch, seqlen_q, heads_q, head_dim, dtype=dtype, device="cuda")
        k, v = (torch.empty(batch, seqlen_k, heads_kv, head_dim, dtype=dtype, device="cuda") for _ in "kv")
        out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
        only_out = flash_attn_func(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
    assert lse.shape == (batch, heads_q, seqlen_q) and lse.dtype == torch.float32
    assert isinstance(only_out, torch.Tensor) and only_out.shape == q.shape


def test_outputs_are_packed_even_for_strided_inputs():
    with FakeTensorMode():
        qkv = torch.empty(2, 64, 3, 8, 128, dtype=torch.bfloat16, device="cuda")
        out, lse = flash_attn_func(*qkv.unbind(2), return_lse=True)
    assert out.is_contiguous() and lse.is_contiguous()


def test_varlen_shapes():
    with FakeTensorMode():
        q = torch.empty(300, 16, 64, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.empty(500, 4, 64, dtype=torch.bfloat16, device="cuda") for _ in "kv")
        cu = torch.empty(5, dtype=torch.int32, device="cuda")
        out, lse = flash_attn_varlen_func(q, k, v, cu, cu, 128, 256, return_lse=True)
    assert out.shape == (300, 16, 64) and out.dtype == torch.bfloat16
    assert lse.shape == (16, 300) and lse.dtype == torch.float32


def test_backward_op_shapes():
    with FakeTensorMode():
        q = torch.empty(2, 100, 8, 64, dtype=torch.float16, device="cuda")
        k, v = (torch.empty(2, 70, 2, 64, dtype=torch.float16, device="cuda") for _ in "kv")
        lse = torch.empty(2, 8, 100, device="cuda")
        dq, dk, dv = torch.ops.flash4.bwd(q, q, k, v, q, lse, *OPTIONS)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        varlen = torch.ops.flash4.varlen_bwd(q[0], q[0], k[0], v[0], q[0], lse[0], cu, cu, 60, 50, *OPTIONS)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    assert [g.shape for g in varlen] == [q[0].shape, k[0].shape, v[0].shape]


def test_dynamic_sequence_lengths_stay_symbolic():
    # As torch.compile(dynamic=True) sees them: every size symbolic.
    with FakeTensorMode():
        plain = [torch.empty(2, seqlen, heads, 64, dtype=torch.bfloat16, device="cuda")
                 for seqlen, heads in ((128, 8), (256, 4), (256, 4))]
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4)
    q, k, v = (mode.from_tensor(t, symbolic_context=dynamic, source=ConstantSource(name))
               for t, name in zip(plain, "qkv"))
    with mode:
        out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    seqlen_q = q.shape[1]
    assert isinstance(seqlen_q, torch.SymInt)  # not specialized to 128 by the checks
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], seqlen_q)
    assert out.shape[-1] == 64  # the head_dim check pins the one size the kernels are built for


def meta_inputs(*shapes):
    return [torch.randn(*shape, dtype=torch.bfloat16, device="meta", requires_grad=True) for shape in shapes]


def test_autograd_connects_fwd_to_bwd():
    q, k, v = meta_inputs((2, 64, 8, 64), (2, 32, 2, 64), (2, 32, 2, 64))
    out, lse = torch.ops.flash4.fwd(q, k, v, *OPTIONS)
    assert out.requires_grad and not lse.requires_grad  # lse is an auxiliary output, as in FlashAttention
    out.sum().backward()
    assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)


def test_autograd_connects_varlen_fwd_to_varlen_bwd():
    q, k, v = meta_inputs((100, 8, 128), (60, 4, 128), (60, 4, 128))
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    out, lse = torch.ops.flash4.varlen_fwd(q, k, v, cu, cu, 64, 32, *OPTIONS)
    assert lse.shape == (8, 100)
    out.sum().backward()
    assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)
