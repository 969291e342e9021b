"""The eager path (flash4._eager) on the CPU: which calls may bypass the dispatcher, and the autograd wiring of
every input layout, with flash4._launch's two C calls replaced by plain torch math (fp64).

The C calls themselves are covered by test_launch.py (stub library) and the GPU tests; here the point is what
the eager path hands them and what it returns: outputs, no graph when no gradient is needed, and gradients of
a packed qkv / kv written as one packed tensor, equal to autograd's through the same math.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from flash4 import _eager, _launch, packed
from flash4.distributed import ReferenceLocal

F64 = torch.float64
REFERENCE = ReferenceLocal(F64)


@pytest.fixture
def launches(monkeypatch):
    """_launch.forward / backward as the reference math; records what the backward was asked to write into."""
    written = []

    def forward(q, k, v, options, varlen=None, extras=_launch.NO_EXTRAS):
        assert varlen is None and extras == _launch.NO_EXTRAS
        return REFERENCE.forward(q, k, v, options.causal, options.softmax_scale, options.softcap)

    def backward(dout, q, k, v, out, lse, options, varlen=None, extras=_launch.NO_EXTRAS, dsink=None):
        assert extras == _launch.NO_EXTRAS and dsink is None
        values = REFERENCE.backward(dout, q, k, v, out, lse, options.causal, options.softmax_scale, options.softcap)
        grads = tuple(value.clone() for value in values)  # the launch allocates
        written.append(grads)
        return grads

    monkeypatch.setattr(_launch, "forward", forward)
    monkeypatch.setattr(_launch, "backward", backward)
    return written


OPTIONS = _launch.Options(softmax_scale=0.3, causal=True, window_left=-1, window_right=0, softcap=5.0,
                          deterministic=False)


def reference_grads(q, k, v, dout):
    """Gradients of (q, k, v) by torch autograd through the same math."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, _ = REFERENCE.forward(*leaves, True, OPTIONS.softmax_scale, OPTIONS.softcap)
    return torch.autograd.grad(out, leaves, dout)


LAYOUTS = {
    # name: (differentiable inputs, split)
    "q, k, v": (lambda g: [torch.randn(2, 12, 4, 8, dtype=F64, generator=g) for _ in "qkv"], _eager.unpacked),
    "qkv": (lambda g: [torch.randn(2, 12, 3, 4, 8, dtype=F64, generator=g)], packed._unbind_qkv),
    "q, kv": (lambda g: [torch.randn(2, 12, 4, 8, dtype=F64, generator=g),
                         torch.randn(2, 12, 2, 2, 8, dtype=F64, generator=g)], packed._unbind_kv),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradients_of_every_layout_equal_autograd_through_the_same_math(launches, layout):
    make, split = LAYOUTS[layout]
    inputs = [t.requires_grad_() for t in make(torch.Generator().manual_seed(0))]
    out, lse = _eager.attention(_eager.Call(OPTIONS, None, split), *inputs)
    assert out.requires_grad and not lse.requires_grad
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs, dout)
    q, k, v = split(*inputs)
    expected = reference_grads(q, k, v, dout)
    # One launch, writing dq, dk and dv apart (interleaved in one packed buffer they would be overlapping
    # outputs to the C ABI); a packed input's gradient is then one tensor of its shape.
    (written,) = launches
    assert len({w.data_ptr() for w in written}) == 3 and [g.shape for g in grads] == [t.shape for t in inputs]
    for got, want in zip(split(*grads), expected):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_gradients_reach_inputs_with_a_strided_last_dimension(launches):
    # Views whose last dimension is strided (FlashAttention copies them; flash4's launch does): the gradient of
    # each goes back to the tensor it is a view of.
    g = torch.Generator().manual_seed(2)
    bases = [torch.randn(2, 12, 4, 16, dtype=F64, generator=g).requires_grad_() for _ in "qkv"]
    q, k, v = (base[..., 1::2] for base in bases)
    out, _ = _eager.attention(_eager.Call(OPTIONS, None, _eager.unpacked), q, k, v)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, bases, dout)
    for got_grad, want in zip(got, reference_grads(q, k, v, dout)):
        assert got_grad.shape == (2, 12, 4, 16) and not got_grad[..., ::2].any()
        torch.testing.assert_close(got_grad[..., 1::2], want, rtol=1e-12, atol=1e-12)


def test_no_graph_without_a_gradient(launches):
    q, k, v = (torch.randn(1, 8, 2, 8, dtype=F64) for _ in "qkv")
    out, lse = _eager.attention(_eager.Call(OPTIONS, None, _eager.unpacked), q, k, v)
    assert out.grad_fn is None
    q.requires_grad_()
    with torch.no_grad():
        out, lse = _eager.attention(_eager.Call(OPTIONS, None, _eager.unpacked), q, k, v)
    assert out.grad_fn is None and launches == []


class Subclass(torch.Tensor):
    """A tensor subclass: its __torch_function__ may intercept ops, so torch must see the call."""


def test_plain_tensors_take_the_eager_path():
    t = torch.zeros(2)
    assert _eager.eager_call(t, t, torch.nn.Parameter(torch.zeros(2)))


def test_fake_tensors_and_subclasses_take_the_ops():
    with FakeTensorMode():
        assert not _eager.eager_call(torch.zeros(2))
    assert not _eager.eager_call(torch.zeros(2), torch.zeros(2).as_subclass(Subclass))


def test_functorch_transforms_take_the_ops():
    seen = []

    def record(x):
        seen.append(_eager.eager_call())
        return x

    torch.func.vmap(record)(torch.zeros(3, 2))
    assert seen == [False]


def test_torch_compile_traces_the_ops():
    seen = []

    @torch.compile(backend="eager", fullgraph=True)
    def traced(x):
        seen.append(_eager.eager_call(x))
        return x + 1

    traced(torch.zeros(2))
    assert seen == [False]


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_checks_trace_under_torch_compile_without_graph_breaks(dynamic):
    # flash_attn_func runs its checks while torch.compile traces it (fullgraph: a graph break is an error). CPU
    # tensors here, so the CUDA requirement is left out (the GPU tests compile the whole call).
    from flash4 import _checks, interface

    def checked(q, k, v, cu):
        interface._reject_unsupported(0.0, None, False, {"pack_gqa": None}, interface._VARLEN_NEUTRAL)
        _checks.check_qkv(q, k, v, False, need_cuda=False)
        _checks.check_cu_seqlens("cu_seqlens_q", cu, q, need_cuda=False)
        options = interface.make_options(q.shape[-1], None, True, (64, 3), 0.0, False)
        assert (options.window_left, options.window_right) == (64, 0) and not _eager.eager_call(q, k, v)
        return q * options.softmax_scale

    torch._dynamo.reset()
    q, k, v = (torch.randn(2, 16, 4, 64, dtype=torch.bfloat16) for _ in "qkv")
    cu = torch.tensor([0, 16], dtype=torch.int32)
    out = torch.compile(checked, backend="eager", fullgraph=True, dynamic=dynamic)(q, k, v, cu)
    assert torch.equal(out, q * 64**-0.5)


def _sink_attention(q, k, v, sink, scale):
    """Attention with one sink logit per head as plain torch math (fp64): the sink is a column of the softmax
    without a value, not multiplied by the scale (FlashAttention-4's learnable_sink)."""
    scores = torch.einsum("bshd,bthd->bhst", q, k) * scale
    column = sink.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:3], 1)
    probs = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("bhst,bthd->bshd", probs, v)


@pytest.mark.parametrize("sink_dtype", [torch.float32, torch.bfloat16])
def test_sink_gradient_flows_through_the_eager_path(monkeypatch, sink_dtype):
    # _launch as plain math: the forward takes the float32 sink the kernels read, the backward writes the sinks'
    # gradient into the float32 dsink it is handed; the eager path returns it in the sink's own dtype.
    options = OPTIONS._replace(causal=False, window_right=-1, softcap=0.0)
    seen = {}

    def forward(q, k, v, options_, varlen=None, extras=_launch.NO_EXTRAS):
        seen["sink"] = extras.sink
        out = _sink_attention(q, k, v, extras.sink, options_.softmax_scale)
        return out, torch.zeros(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)

    def backward(dout, q, k, v, out, lse, options_, varlen=None, extras=_launch.NO_EXTRAS, dsink=None):
        leaves = [t.detach().requires_grad_() for t in (q, k, v, extras.sink)]
        with torch.enable_grad():  # autograd runs a backward with gradients off
            grads = torch.autograd.grad(_sink_attention(*leaves, options_.softmax_scale), leaves, dout)
        dsink.copy_(grads[3])
        return grads[:3]

    monkeypatch.setattr(_launch, "forward", forward)
    monkeypatch.setattr(_launch, "backward", backward)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 6, 4, 8, dtype=F64, generator=g).requires_grad_() for _ in "qkv")
    sink = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=sink_dtype, requires_grad=True)
    out, _ = _eager.attention(_eager.Call(options, None, _eager.unpacked), q, k, v, sink=sink)
    assert seen["sink"].dtype == torch.float32 and seen["sink"].is_contiguous()
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, sink), dout)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)] + [sink.detach().to(F64).requires_grad_()]
    want = torch.autograd.grad(_sink_attention(*leaves, options.softmax_scale), leaves, dout)
    assert got[3].dtype == sink_dtype
    for got_grad, want_grad in zip(got, want):
        torch.testing.assert_close(got_grad.to(F64), want_grad, rtol=1e-2, atol=1e-5)
    assert want[3].abs().min() > 0  # the sink's gradient is not trivially zero
