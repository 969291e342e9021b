"""flash4's torch operators: flash4::fwd, flash4::bwd, flash4::varlen_fwd, flash4::varlen_bwd.

Each op is a torch.library.custom_op whose CUDA implementation fills the C ABI's params struct and calls
the shared library through ctypes on torch's current stream; register_fake gives the output shapes to
FakeTensorMode and torch.compile, and register_autograd connects the forward ops to the backward ones.
Nothing here links against libtorch, so the package works with any torch that has torch.library (2.4+).

The ops trust their arguments' shapes: flash4.interface checks them first, and the C ABI checks again
before it launches anything. The trailing scalar arguments are the same for every op:
    softmax_scale, causal, window_left, window_right, softcap, deterministic
(`deterministic` only affects the backward; the forward ops carry it so their autograd formula can pass it on).
"""

import ctypes
from typing import NamedTuple

import torch
from torch import Tensor

from . import _abi
from ._loader import load_library

# What the kernels are built for (CMake's FLASH4_DTYPES / FLASH4_HEAD_DIMS can build fewer; the C ABI then
# reports FLASH4_ERROR_NO_KERNEL with the missing case).
DTYPES = {torch.bfloat16: _abi.DType.BF16, torch.float16: _abi.DType.FP16}
HEAD_DIMS = (64, 96, 128, 192, 256)


class Options(NamedTuple):
    """The trailing scalar arguments of every op, in schema order."""

    softmax_scale: float
    causal: bool
    window_left: int
    window_right: int
    softcap: float
    deterministic: bool


class Varlen(NamedTuple):
    """Varlen metadata: batch + 1 int32 row offsets per side and the longest sequence per side."""

    cu_seqlens_q: Tensor
    cu_seqlens_k: Tensor
    max_seqlen_q: int
    max_seqlen_k: int


def _tma_ready(t):
    """`t` itself when the kernel's TMA loads can read it in place, else a packed copy.

    TMA needs a 16-byte aligned base address, a contiguous last dimension and positive 16-byte multiples
    for the other strides. Legal torch views break that (a column slice of a wider buffer, the stride-0
    expand that autograd hands the backward for out.sum()); copying those is better than refusing them.
    clone(contiguous_format) rather than contiguous(): the latter keeps odd strides on size-1 dimensions.
    """
    step = 16 // t.element_size()
    strides = t.stride()
    if t.data_ptr() % 16 == 0 and strides[-1] == 1 and all(s > 0 and s % step == 0 for s in strides[:-1]):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _strides(t):
    if t.dim() == 4:
        return _abi.Strides(t.stride(0), t.stride(1), t.stride(2))
    return _abi.Strides(0, t.stride(0), t.stride(1))  # varlen rows: the batch stride is ignored


def _set_problem(params, q, k, options, varlen):
    """Fill the fields that flash4_fwd_params and flash4_bwd_params share."""
    params.struct_size = ctypes.sizeof(params)
    params.dtype = DTYPES[q.dtype]
    params.heads_q, params.head_dim = q.shape[-2], q.shape[-1]
    params.heads_kv = k.shape[-2]
    if varlen is None:
        params.batch, params.seqlen_q = q.shape[0], q.shape[1]
        params.seqlen_k = k.shape[1]
    else:
        params.batch = varlen.cu_seqlens_q.shape[0] - 1
        params.cu_seqlens_q = varlen.cu_seqlens_q.data_ptr()
        params.cu_seqlens_k = varlen.cu_seqlens_k.data_ptr()
        params.max_seqlen_q, params.max_seqlen_k = varlen.max_seqlen_q, varlen.max_seqlen_k
        params.total_q, params.total_k = q.shape[0], k.shape[0]
    params.softmax_scale = options.softmax_scale
    params.causal = int(options.causal)
    params.window_left, params.window_right = options.window_left, options.window_right
    params.softcap = options.softcap


def fwd_params(q, k, v, out, lse, options, varlen=None):
    """flash4_fwd_params for these tensors (any device: the tests fill it from CPU tensors)."""
    params = _abi.FwdParams()
    _set_problem(params, q, k, options, varlen)
    params.q, params.k, params.v = q.data_ptr(), k.data_ptr(), v.data_ptr()
    params.o, params.lse = out.data_ptr(), lse.data_ptr()
    params.q_strides, params.k_strides = _strides(q), _strides(k)
    params.v_strides, params.o_strides = _strides(v), _strides(out)
    return params


def bwd_params(dout, q, k, v, out, lse, dq, dk, dv, options, varlen=None):
    """flash4_bwd_params for these tensors."""
    params = _abi.BwdParams()
    _set_problem(params, q, k, options, varlen)
    params.deterministic = int(options.deterministic)
    named = {"q": q, "k": k, "v": v, "o": out, "dout": dout, "dq": dq, "dk": dk, "dv": dv}
    for name, t in named.items():
        setattr(params, name, t.data_ptr())
        setattr(params, f"{name}_strides", _strides(t))
    params.lse = lse.data_ptr()
    return params


def call_library(lib, direction, params, stream, allocate):
    """Size the workspace, allocate it and enqueue flash4_{direction} on `stream` (an int handle, 0 for
    the legacy stream). Returns (error, workspace): error is None or the exception to raise, built from
    the library's message right after the failing call; workspace is what `allocate(bytes)` returned
    (None when no bytes are needed), which the caller keeps until the launch is enqueued.

    Needs neither torch nor a GPU (the CPU tests drive it with a stub library). It never raises for a
    failing status: the caller raises once it has left every context it entered (see _launch).
    """
    size_entry, launch_entry = f"flash4_{direction}_workspace_size", f"flash4_{direction}"
    size = ctypes.c_size_t(0)
    status = getattr(lib, size_entry)(ctypes.byref(params), ctypes.byref(size))
    if status != _abi.Status.SUCCESS:
        return _abi.error(lib, size_entry, status), None
    workspace = allocate(size.value) if size.value else None
    params.workspace = workspace.data_ptr() if workspace is not None else None
    params.workspace_bytes = size.value
    # The handle travels as a pointer-sized void*: an int passed without argtypes would be cut to 32 bits.
    status = getattr(lib, launch_entry)(ctypes.byref(params), ctypes.c_void_p(stream or None))
    if status != _abi.Status.SUCCESS:
        return _abi.error(lib, launch_entry, status), workspace
    return None, workspace


def _launch(direction, params, device):
    """Validate, size the workspace and launch flash4_{direction} on torch's current stream of `device`.

    A failing status is raised only after the device guard is left, as an exception that holds plain
    strings: nothing raised from this custom op refers to ctypes objects, the library's buffers or an
    open context.
    """
    lib = load_library()
    # The library launches on the calling thread's current device; make it the tensors' device.
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        # From torch's caching allocator on the launch stream: stream-ordered reuse makes freeing it right
        # after the launch safe, and it lands in the graph's pool under CUDA graph capture. The library
        # zeroes what it needs of it on the stream.
        error, workspace = call_library(
            lib, direction, params, stream, lambda size: torch.empty(size, dtype=torch.uint8, device=device)
        )
        del workspace
    if error is not None:
        raise error


def _empty_outputs(q):
    """out like q, packed; lse fp32 as (B, Hq, Sq), or (Hq, total_q) for varlen rows."""
    lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else (q.shape[1], q.shape[0])
    return q.new_empty(q.shape), q.new_empty(lse_shape, dtype=torch.float32)


def _empty_grads(q, k, v):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _forward(q, k, v, options, varlen):
    q, k, v = (_tma_ready(t) for t in (q, k, v))
    out, lse = _empty_outputs(q)
    _launch("fwd", fwd_params(q, k, v, out, lse, options, varlen), q.device)
    return out, lse


def _backward(dout, q, k, v, out, lse, options, varlen):
    dout, q, k, v, out = (_tma_ready(t) for t in (dout, q, k, v, out))
    dq, dk, dv = _empty_grads(q, k, v)
    params = bwd_params(dout, q, k, v, out, lse.contiguous(), dq, dk, dv, options, varlen)
    _launch("bwd", params, q.device)
    return dq, dk, dv


@torch.library.custom_op("flash4::fwd", mutates_args=(), device_types="cuda")
def fwd(
    q: Tensor, k: Tensor, v: Tensor,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor]:
    """q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D) -> out (B, Sq, Hq, D), lse (B, Hq, Sq) fp32."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    return _forward(q, k, v, options, None)


@torch.library.custom_op("flash4::bwd", mutates_args=(), device_types="cuda")
def bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) shaped like (q, k, v), from flash4::fwd's out and lse."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    return _backward(dout, q, k, v, out, lse, options, None)


@torch.library.custom_op("flash4::varlen_fwd", mutates_args=(), device_types="cuda")
def varlen_fwd(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor]:
    """q (total_q, Hq, D), k/v (total_k, Hkv, D) -> out (total_q, Hq, D), lse (Hq, total_q) fp32."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    return _forward(q, k, v, options, Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


@torch.library.custom_op("flash4::varlen_bwd", mutates_args=(), device_types="cuda")
def varlen_bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) of flash4::varlen_fwd."""
    options = Options(softmax_scale, causal, window_left, window_right, softcap, deterministic)
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return _backward(dout, q, k, v, out, lse, options, varlen)


@fwd.register_fake
def _(q, k, v, *options):
    return _empty_outputs(q)


@varlen_fwd.register_fake
def _(q, k, v, *metadata_and_options):
    return _empty_outputs(q)


@bwd.register_fake
def _(dout, q, k, v, out, lse, *options):
    return _empty_grads(q, k, v)


@varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, *metadata_and_options):
    return _empty_grads(q, k, v)


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
