"""Shape inference of flash4's ops without a GPU or the library: register_fake under FakeTensorMode and
symbolic tracing, every public call form, and the register_autograd wiring (autograd runs on fake tensors).
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import flash4
from flash4 import _launch, flash_attn_func, flash_attn_varlen_func

OPTIONS = _launch.Options(softmax_scale=0.125, causal=True, window_left=-1, window_right=0, softcap=0.0,
                      deterministic=False)


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def launched():
        raise AssertionError("shape inference reached the library")

    monkeypatch.setattr(_launch, "load_library", launched)


@pytest.mark.parametrize(
    "batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype",
    [
        (2, 128, 128, 16, 16, 64, torch.bfloat16),
        (1, 113, 239, 8, 2, 128, torch.float16),  # GQA, Sq != Sk
        (3, 1, 4224, 12, 1, 256, torch.bfloat16),  # MQA, one query row
        (4, 17, 17, 6, 3, 96, torch.float16),
        (1, 799, 3, 4, 4, 192, torch.bfloat16),
        (1, 113, 203, 4, 2, 40, torch.bfloat16),  # head dims no kernel has: served by a wider one
        (2, 5, 7, 2, 1, 8, torch.float16),
        (1, 33, 17, 2, 2, 248, torch.bfloat16),
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
        dq, dk, dv = torch.ops.flash4.bwd(q, q, k, v, q, lse, *OPTIONS, None)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        varlen = torch.ops.flash4.varlen_bwd(q[0], q[0], k[0], v[0], q[0], lse[0], cu, cu, 60, 50, *OPTIONS, None)
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


def test_value_head_dim_of_its_own():
    # DeepSeek's shape: q and k 192 wide, v 128; out and its gradient are v's width.
    with FakeTensorMode():
        q = torch.empty(2, 113, 8, 192, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 203, 2, 192, dtype=torch.bfloat16, device="cuda")
        v = torch.empty(2, 203, 2, 128, dtype=torch.bfloat16, device="cuda")
        out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
        dq, dk, dv = torch.ops.flash4.bwd(out, q, k, v, out, lse, *OPTIONS, None)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        varlen_out = flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 60, 120)
        with pytest.raises(ValueError, match=r"dout has shape \(2, 113, 8, 192\).*\(2, 113, 8, 128\)"):
            torch.ops.flash4.bwd(q, q, k, v, out, lse, *OPTIONS, None)
    assert out.shape == (2, 113, 8, 128) and lse.shape == (2, 8, 113)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    assert varlen_out.shape == (113, 8, 128)


def meta_inputs(*shapes):
    return [torch.randn(*shape, dtype=torch.bfloat16, device="meta", requires_grad=True) for shape in shapes]


def test_autograd_connects_fwd_to_bwd():
    # Meta tensors: autograd on fake CUDA tensors would need a CUDA context for its device thread.
    q, k, v = meta_inputs((2, 64, 8, 64), (2, 32, 2, 64), (2, 32, 2, 64))
    out, lse = torch.ops.flash4.fwd(q, k, v, *OPTIONS)
    assert out.requires_grad and not lse.requires_grad  # lse is an auxiliary output, as in FlashAttention
    out.sum().backward()
    assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)


def test_autograd_reaches_inputs_with_a_strided_last_dimension():
    # The ops accept them (their launch copies them, as FlashAttention's maybe_contiguous does) and the
    # gradients go back to the tensors they are views of.
    bases = meta_inputs((2, 64, 8, 128), (2, 32, 2, 128), (2, 32, 2, 128))
    q, k, v = (base[..., ::2] for base in bases)
    out, _ = torch.ops.flash4.fwd(q, k, v, *OPTIONS)
    out.sum().backward()
    assert all(base.grad.shape == base.shape for base in bases)
    bases = meta_inputs((100, 8, 128), (60, 4, 128), (60, 4, 128))
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    out, _ = torch.ops.flash4.varlen_fwd(*(base[..., ::2] for base in bases), cu, cu, 64, 32, *OPTIONS)
    out.sum().backward()
    assert all(base.grad.shape == base.shape for base in bases)


def test_autograd_with_a_value_head_dim_of_its_own():
    q, k, v = meta_inputs((2, 64, 8, 192), (2, 32, 2, 192), (2, 32, 2, 128))
    out, _ = torch.ops.flash4.fwd(q, k, v, *OPTIONS)
    assert out.shape == (2, 64, 8, 128)
    out.sum().backward()
    assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)


def test_autograd_connects_varlen_fwd_to_varlen_bwd():
    q, k, v = meta_inputs((100, 8, 128), (60, 4, 128), (60, 4, 128))
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    out, lse = torch.ops.flash4.varlen_fwd(q, k, v, cu, cu, 64, 32, *OPTIONS)
    assert lse.shape == (8, 100)
    out.sum().backward()
    assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)


@pytest.mark.parametrize("sink_dtype", [torch.float32, torch.bfloat16])
def test_autograd_gives_the_sink_a_gradient_of_its_dtype(sink_dtype):
    q, k, v = meta_inputs((2, 64, 8, 64), (2, 32, 2, 64), (2, 32, 2, 64))
    sink = torch.zeros(8, dtype=sink_dtype, device="meta", requires_grad=True)
    out, _ = torch.ops.flash4.fwd(q, k, v, *OPTIONS, sink)
    out.sum().backward()
    assert sink.grad.shape == (8,) and sink.grad.dtype == sink_dtype and q.grad.shape == q.shape
    q, k, v = meta_inputs((100, 8, 128), (60, 4, 128), (60, 4, 128))
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    used = torch.empty(2, dtype=torch.int32, device="meta")
    sink = torch.zeros(8, dtype=sink_dtype, device="meta", requires_grad=True)
    out, _ = torch.ops.flash4.varlen_fwd(q, k, v, cu, cu, 64, 32, *OPTIONS, sink, used, used)
    out.sum().backward()
    assert sink.grad.shape == (8,) and sink.grad.dtype == sink_dtype and k.grad.shape == k.shape


def fake_inputs(*shapes):
    return [torch.randn(*shape, dtype=torch.bfloat16, device="cuda", requires_grad=True) for shape in shapes]


# Every public call form: (call on fake inputs, expected out shape, expected lse shape). B = 2, S = 48, Hq = 8,
# Hkv = 2, D = 128; varlen: 100 query rows, 90 key rows, batch 3.
def _cu():
    return torch.empty(4, dtype=torch.int32, device="cuda")


CALL_FORMS = {
    "flash_attn_func": (lambda: flash4.flash_attn_func(*fake_inputs((2, 48, 8, 128), (2, 40, 2, 128), (2, 40, 2, 128)),
                                                       causal=True, return_lse=True), (2, 48, 8, 128), (2, 8, 48)),
    "flash_attn_qkvpacked_func": (
        lambda: flash4.flash_attn_qkvpacked_func(*fake_inputs((2, 48, 3, 8, 128)), return_lse=True),
        (2, 48, 8, 128), (2, 8, 48)),
    "flash_attn_qkvpacked_func(num_heads_q)": (
        lambda: flash4.flash_attn_qkvpacked_func(*fake_inputs((2, 48, 12, 128)), num_heads_q=8, return_lse=True),
        (2, 48, 8, 128), (2, 8, 48)),
    "flash_attn_kvpacked_func": (lambda: flash4.flash_attn_kvpacked_func(
        *fake_inputs((2, 48, 8, 128), (2, 40, 2, 2, 128)), return_lse=True), (2, 48, 8, 128), (2, 8, 48)),
    "flash_attn_varlen_func": (lambda: flash4.flash_attn_varlen_func(
        *fake_inputs((100, 8, 128), (90, 2, 128), (90, 2, 128)), _cu(), _cu(), 60, 50, return_lse=True),
        (100, 8, 128), (8, 100)),
    "flash_attn_varlen_qkvpacked_func": (lambda: flash4.flash_attn_varlen_qkvpacked_func(
        *fake_inputs((100, 3, 8, 128)), _cu(), 60, return_lse=True), (100, 8, 128), (8, 100)),
    "flash_attn_varlen_kvpacked_func": (lambda: flash4.flash_attn_varlen_kvpacked_func(
        *fake_inputs((100, 8, 128), (90, 2, 2, 128)), _cu(), _cu(), 60, 50, return_lse=True), (100, 8, 128), (8, 100)),
    # Head dims that no kernel has (a wider one serves them), and v narrower than q.
    "flash_attn_func(D=72)": (lambda: flash4.flash_attn_func(
        *fake_inputs((2, 48, 8, 72), (2, 40, 2, 72), (2, 40, 2, 72)), return_lse=True), (2, 48, 8, 72), (2, 8, 48)),
    "flash_attn_func(D=192, Dv=128)": (lambda: flash4.flash_attn_func(
        *fake_inputs((2, 48, 8, 192), (2, 40, 2, 192), (2, 40, 2, 128)), return_lse=True), (2, 48, 8, 128), (2, 8, 48)),
    "flash_attn_qkvpacked_func(D=40)": (
        lambda: flash4.flash_attn_qkvpacked_func(*fake_inputs((2, 48, 3, 8, 40)), return_lse=True),
        (2, 48, 8, 40), (2, 8, 48)),
    "flash_attn_varlen_kvpacked_func(D=160)": (lambda: flash4.flash_attn_varlen_kvpacked_func(
        *fake_inputs((100, 8, 160), (90, 2, 2, 160)), _cu(), _cu(), 60, 50, return_lse=True), (100, 8, 160), (8, 100)),
    "flash_attn_varlen_func(D=192, Dv=128)": (lambda: flash4.flash_attn_varlen_func(
        *fake_inputs((100, 8, 192), (90, 2, 192), (90, 2, 128)), _cu(), _cu(), 60, 50, return_lse=True),
        (100, 8, 128), (8, 100)),
}


@pytest.mark.parametrize("form", CALL_FORMS)
def test_every_call_form_has_flash_attention_shapes(form):
    # The gradients of the packed forms are checked on the CPU in test_eager_cpu.py, and on the GPU.
    call, out_shape, lse_shape = CALL_FORMS[form]
    with FakeTensorMode():
        out, lse = call()
    assert out.shape == out_shape and out.dtype == torch.bfloat16 and out.requires_grad
    assert lse.shape == lse_shape and lse.dtype == torch.float32 and not lse.requires_grad


def test_flash_attention_2_positional_order():
    # (q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
    # return_attn_probs); FlashAttention returns out alone.
    with FakeTensorMode():
        q, k, v = (torch.empty(1, 16, 2, 64, dtype=torch.float16, device="cuda") for _ in "qkv")
        out = flash_attn_func(q, k, v, 0.0, 0.2, True, (8, -1), 5.0, None, True, False)
        cu = torch.empty(2, dtype=torch.int32, device="cuda")
        rows = q[0]
        varlen_out = flash_attn_varlen_func(rows, rows, rows, cu, cu, 16, 16, 0.0, None, False, (-1, -1), 0.0, None,
                                            False, False, None)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    assert isinstance(varlen_out, torch.Tensor) and varlen_out.shape == rows.shape


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(0, 32), (32, 0)])
def test_empty_sequences_have_shapes(seqlen_q, seqlen_k):
    with FakeTensorMode():
        q, k, v = fake_inputs((2, seqlen_q, 4, 64), (2, seqlen_k, 4, 64), (2, seqlen_k, 4, 64))
        out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 4, seqlen_q)
    q, k, v = meta_inputs((2, seqlen_q, 4, 64), (2, seqlen_k, 4, 64), (2, seqlen_k, 4, 64))
    grads = torch.autograd.grad(torch.ops.flash4.fwd(q, k, v, *OPTIONS)[0].sum(), (q, k, v))
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
