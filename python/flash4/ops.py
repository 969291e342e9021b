"""flash4's torch operators: flash4::fwd, flash4::bwd, flash4::varlen_fwd, flash4::varlen_bwd.

Each op is a torch.library.custom_op whose CUDA implementation checks its arguments (flash4._checks) and
calls the C ABI through flash4._launch on torch's current stream; register_fake gives the output shapes to
FakeTensorMode and torch.compile, and register_autograd connects the forward ops to the backward ones.
Nothing here links against libtorch, so the package works with any torch that has torch.library (2.4+).

The public functions (flash4.interface) reach these ops when torch has to see the call: under torch.compile,
fake tensors, tensor subclasses, dispatch modes and functorch transforms. Plain eager calls take
flash4._eager instead, which launches the same C calls without the dispatcher's per-call cost.

The scalar arguments that follow the tensors are the same for every op (flash4._launch.Options):
    softmax_scale, causal, window_left, window_right, softcap, deterministic
(`deterministic` only affects the backward; the forward ops carry it so their autograd formula can pass it on).
After them come the optional tensors: sink (learnable sink logits, (Hq,), float32/bf16/fp16; its gradient
flows through the forward ops), for the varlen ops seqused_q and seqused_k, and for the backward ops dsink,
the float32 (Hq,) tensor they write the sinks' gradient into.
"""

from typing import Optional

import torch
from torch import Tensor

from . import _checks, _launch
from ._checks import DTYPES, HEAD_DIMS  # noqa: F401  (what the library accepts, for the ops' users)
from ._launch import Options, Varlen

__all__ = ["DTYPES", "HEAD_DIMS", "Options", "Varlen", "bwd", "fwd", "varlen_bwd", "varlen_fwd"]


def _extras(q, sink, seqused_q=None, seqused_k=None, need_cuda=True):
    """flash4._launch.Extras after checking the sink: as the kernels read it (float32, contiguous)."""
    _checks.check_sink(sink, q, need_cuda)
    sink32 = None if sink is None else sink.to(torch.float32).contiguous()
    return _launch.Extras(sink32, seqused_q, seqused_k)


def _check(q, k, v, options, varlen, need_cuda=True):
    """The options with causal's right edge 0, after what an op's caller may have skipped (torch.ops.flash4.*
    is public): the checks of the public functions, so that a bad argument is a TypeError / ValueError /
    NotImplementedError naming it, never a KeyError or an IndexError. need_cuda=False in the fake kernels,
    which also serve meta tensors."""
    _checks.check_qkv(q, k, v, varlen is not None, need_cuda)
    for name in ("causal", "deterministic"):
        _checks.check_flag(name, getattr(options, name))
    _checks.check_scales(options.softmax_scale, options.softcap)
    left, right = _checks.window_edges((options.window_left, options.window_right), options.causal)
    if varlen is not None:
        _checks.check_cu_seqlens("cu_seqlens_q", varlen.cu_seqlens_q, q, need_cuda)
        _checks.check_cu_seqlens("cu_seqlens_k", varlen.cu_seqlens_k, q, need_cuda)
        for name in ("max_seqlen_q", "max_seqlen_k"):
            _checks.check_int(name, getattr(varlen, name), low=0)
    return options._replace(window_left=left, window_right=right)


def _check_backward(dout, q, v, out, lse):
    out_shape = _launch.out_shape(q, v)
    for name, t in (("dout", dout), ("out", out)):
        _checks.check_tensor_type(name, t)
        if tuple(t.shape) != out_shape or t.dtype != q.dtype:
            raise ValueError(f"{name} has shape {tuple(t.shape)} and dtype {t.dtype}; it must be the forward's out, "
                             f"{out_shape} (q's with v's head_dim) and {q.dtype}")
    _checks.check_tensor_type("lse", lse)
    if tuple(lse.shape) != _launch.lse_shape(q) or lse.dtype != torch.float32:
        raise ValueError(f"lse has shape {tuple(lse.shape)} and dtype {lse.dtype}; the backward needs the forward's "
                         f"float32 lse of shape {_launch.lse_shape(q)}")


@torch.library.custom_op("flash4::fwd", mutates_args=(), device_types="cuda")
def fwd(
    q: Tensor, k: Tensor, v: Tensor,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
    sink: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """q (B, Sq, Hq, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv) -> out (B, Sq, Hq, Dv), lse (B, Hq, Sq) fp32."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    options = _check(q, k, v, options, None)
    return _launch.forward(q, k, v, options, extras=_extras(q, sink))


@torch.library.custom_op("flash4::bwd", mutates_args=("dsink",), device_types="cuda")
def bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
    dsink: Optional[Tensor], sink: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) shaped like (q, k, v), from flash4::fwd's out and lse; with sink, the sinks'
    gradient into dsink. dsink has no default: the dispatcher drops trailing arguments left at their
    defaults, and a mutated argument dropped so breaks torch's in-place bookkeeping."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    options = _check(q, k, v, options, None)
    _check_backward(dout, q, v, out, lse)
    extras = _extras(q, sink)
    _checks.check_dsink(dsink, extras.sink)
    return _launch.backward(dout, q, k, v, out, lse, options, None, extras, dsink)


@torch.library.custom_op("flash4::varlen_fwd", mutates_args=(), device_types="cuda")
def varlen_fwd(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
    sink: Optional[Tensor] = None, seqused_q: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """q (total_q, Hq, D), k (total_k, Hkv, D), v (total_k, Hkv, Dv) -> out (total_q, Hq, Dv), lse (Hq, total_q)."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = _check(q, k, v, options, varlen)
    extras = _varlen_extras(q, cu_seqlens_q, sink, seqused_q, seqused_k)
    return _launch.forward(q, k, v, options, varlen, extras=extras)


def _varlen_extras(q, cu_seqlens_q, sink, seqused_q, seqused_k, need_cuda=True):
    batch = cu_seqlens_q.shape[0] - 1
    for name, t in (("seqused_q", seqused_q), ("seqused_k", seqused_k)):
        _checks.check_seqused(name, t, q, batch, need_cuda)
    return _extras(q, sink, seqused_q, seqused_k, need_cuda)


@torch.library.custom_op("flash4::varlen_bwd", mutates_args=("dsink",), device_types="cuda")
def varlen_bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
    dsink: Optional[Tensor], sink: Optional[Tensor] = None, seqused_q: Optional[Tensor] = None,
    seqused_k: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) of flash4::varlen_fwd; with sink, the sinks' gradient into dsink (no default,
    as in flash4::bwd)."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = _check(q, k, v, options, varlen)
    _check_backward(dout, q, v, out, lse)
    extras = _varlen_extras(q, cu_seqlens_q, sink, seqused_q, seqused_k)
    _checks.check_dsink(dsink, extras.sink)
    return _launch.backward(dout, q, k, v, out, lse, options, varlen, extras, dsink)


# The fake kernels check as the real ones do, so that a bad direct call fails the same way under tracing.


@fwd.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap, deterministic, sink=None):
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    _check(q, k, v, options, None, need_cuda=False)
    _extras(q, sink, need_cuda=False)
    return _launch.empty_outputs(q, v)


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
      window_right, softcap, deterministic, sink=None, seqused_q=None, seqused_k=None):
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    _check(q, k, v, options, varlen, need_cuda=False)
    _varlen_extras(q, cu_seqlens_q, sink, seqused_q, seqused_k, need_cuda=False)
    return _launch.empty_outputs(q, v)


@bwd.register_fake
def _(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap, deterministic, dsink,
      sink=None):
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    _check(q, k, v, options, None, need_cuda=False)
    _check_backward(dout, q, v, out, lse)
    _checks.check_dsink(dsink, _extras(q, sink, need_cuda=False).sink)
    return _launch.empty_grads(q, k, v)


@varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, softcap, deterministic, dsink, sink=None, seqused_q=None, seqused_k=None):
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    _check(q, k, v, options, varlen, need_cuda=False)
    _check_backward(dout, q, v, out, lse)
    _checks.check_dsink(dsink, _varlen_extras(q, cu_seqlens_q, sink, seqused_q, seqused_k, need_cuda=False).sink)
    return _launch.empty_grads(q, k, v)


def _register_autograd(forward_op, backward_op, tensor_inputs, extras):
    """Make `backward_op` the gradient of `forward_op`.

    forward_op's inputs are q, k, v, then tensor_inputs - 3 more tensors (the cu_seqlens), then non-tensor
    arguments, then `extras` optional tensors (sink first); backward_op takes (dout, q, k, v, out, lse, <those
    tensors>, <those arguments>, dsink, <the optional tensors>).
    """

    def setup_context(ctx, inputs, output):
        out, lse = output
        # lse is an auxiliary output, as in FlashAttention: the backward kernel takes no gradient for it,
        # so it is marked non-differentiable rather than silently dropping a gradient sent into it.
        ctx.mark_non_differentiable(lse)
        first_extra = len(inputs) - extras
        ctx.save_for_backward(*inputs[:3], out, lse, *inputs[3:tensor_inputs], *inputs[first_extra:])
        ctx.arguments = inputs[tensor_inputs:first_extra]

    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, *saved = ctx.saved_tensors
        metadata, optional = saved[:tensor_inputs - 3], saved[tensor_inputs - 3:]
        sink = optional[0]
        dsink = None if sink is None else torch.empty(sink.shape, dtype=torch.float32, device=sink.device)
        dq, dk, dv = backward_op(dout, q, k, v, out, lse, *metadata, *ctx.arguments, dsink, *optional)
        sink_grad = None if sink is None else dsink.to(sink.dtype)
        return dq, dk, dv, *[None] * (tensor_inputs - 3 + len(ctx.arguments)), sink_grad, *[None] * (extras - 1)

    forward_op.register_autograd(backward, setup_context=setup_context)


_register_autograd(fwd, bwd, tensor_inputs=3, extras=1)
_register_autograd(varlen_fwd, varlen_bwd, tensor_inputs=5, extras=3)
