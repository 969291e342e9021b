"""flash4's torch operators: flash4::fwd, flash4::bwd, flash4::varlen_fwd, flash4::varlen_bwd.

Each op is a torch.library.custom_op whose CUDA implementation checks its arguments (flash4._checks) and
calls the C ABI through flash4._launch on torch's current stream; register_fake gives the output shapes to
FakeTensorMode and torch.compile, and register_autograd connects the forward ops to the backward ones.
Nothing here links against libtorch, so the package works with any torch that has torch.library (2.4+).

The public functions (flash4.interface) reach these ops when torch has to see the call: under torch.compile,
fake tensors, tensor subclasses, dispatch modes and functorch transforms. Plain eager calls take
flash4._eager instead, which launches the same C calls without the dispatcher's per-call cost.

The trailing scalar arguments are the same for every op (flash4._launch.Options):
    softmax_scale, causal, window_left, window_right, softcap, deterministic
(`deterministic` only affects the backward; the forward ops carry it so their autograd formula can pass it on).
"""

import torch
from torch import Tensor

from . import _checks, _launch
from ._checks import DTYPES, HEAD_DIMS  # noqa: F401  (what the library accepts, for the ops' users)
from ._launch import Options, Varlen

__all__ = ["DTYPES", "HEAD_DIMS", "Options", "Varlen", "bwd", "fwd", "varlen_bwd", "varlen_fwd"]


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
) -> tuple[Tensor, Tensor]:
    """q (B, Sq, Hq, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv) -> out (B, Sq, Hq, Dv), lse (B, Hq, Sq) fp32."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    options = _check(q, k, v, options, None)
    return _launch.forward(q, k, v, options)


@torch.library.custom_op("flash4::bwd", mutates_args=(), device_types="cuda")
def bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) shaped like (q, k, v), from flash4::fwd's out and lse."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    options = _check(q, k, v, options, None)
    _check_backward(dout, q, v, out, lse)
    return _launch.backward(dout, q, k, v, out, lse, options)


@torch.library.custom_op("flash4::varlen_fwd", mutates_args=(), device_types="cuda")
def varlen_fwd(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor]:
    """q (total_q, Hq, D), k (total_k, Hkv, D), v (total_k, Hkv, Dv) -> out (total_q, Hq, Dv), lse (Hq, total_q)."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = _check(q, k, v, options, varlen)
    return _launch.forward(q, k, v, options, varlen)


@torch.library.custom_op("flash4::varlen_bwd", mutates_args=(), device_types="cuda")
def varlen_bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) of flash4::varlen_fwd."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    options = _check(q, k, v, options, varlen)
    _check_backward(dout, q, v, out, lse)
    return _launch.backward(dout, q, k, v, out, lse, options, varlen)


# The fake kernels check as the real ones do, so that a bad direct call fails the same way under tracing.


@fwd.register_fake
def _(q, k, v, *options):
    _check(q, k, v, Options(*options), None, need_cuda=False)
    return _launch.empty_outputs(q, v)


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *options):
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _check(q, k, v, Options(*options), varlen, need_cuda=False)
    return _launch.empty_outputs(q, v)


@bwd.register_fake
def _(dout, q, k, v, out, lse, *options):
    _check(q, k, v, Options(*options), None, need_cuda=False)
    _check_backward(dout, q, v, out, lse)
    return _launch.empty_grads(q, k, v)


@varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *options):
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _check(q, k, v, Options(*options), varlen, need_cuda=False)
    _check_backward(dout, q, v, out, lse)
    return _launch.empty_grads(q, k, v)


def _register_autograd(forward_op, backward_op, tensor_inputs):
    """Make `backward_op` the gradient of `forward_op`.

    forward_op's inputs are q, k, v, then tensor_inputs - 3 more tensors (the cu_seqlens), then
    non-tensor arguments; backward_op takes (dout, q, k, v, out, lse, <those tensors>, <those arguments>).
    """

    def setup_context(ctx, inputs, output):
        out, lse = output
        # lse is an auxiliary output, as in FlashAttention: the backward kernel takes no gradient for it,
        # so it is marked non-differentiable rather than silently dropping a gradient sent into it.
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(*inputs[:3], out, lse, *inputs[3:tensor_inputs])
        ctx.arguments = inputs[tensor_inputs:]

    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, *metadata = ctx.saved_tensors
        dq, dk, dv = backward_op(dout, q, k, v, out, lse, *metadata, *ctx.arguments)
        return dq, dk, dv, *[None] * (tensor_inputs - 3 + len(ctx.arguments))

    forward_op.register_autograd(backward, setup_context=setup_context)


_register_autograd(fwd, bwd, tensor_inputs=3)
_register_autograd(varlen_fwd, varlen_bwd, tensor_inputs=5)
