"""flash_attn_func and flash_attn_varlen_func: FlashAttention's Python signatures over flash4's ops.

Every argument is checked here, in plain Python, before anything is launched: the checks need neither a
GPU nor the shared library, they run on fake tensors (FakeTensorMode, torch.compile tracing), and each
message names the argument at fault. The C ABI validates again and its messages come through as
flash4.Flash4Error.

Masking follows FlashAttention: causal is aligned to the bottom right when seqlen_q != seqlen_k, and
window_size = (left, right) keeps key j for query i iff i + Sk - Sq - left <= j <= i + Sk - Sq + right,
-1 meaning unbounded; causal=True is the window (left, 0).
"""

import math

import torch
from torch._subclasses.fake_tensor import is_fake

from . import ops

_INT32_MAX = 2**31 - 1


def flash_attn_func(
    q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, deterministic=False,
    return_lse=False,
):
    """Exact attention over q (B, Sq, Hq, D) and k, v (B, Sk, Hkv, D).

    bf16 or fp16 CUDA tensors, any strides with a contiguous last dimension (views of a packed qkv work),
    D in {64, 96, 128, 192, 256}, Hq a multiple of Hkv (GQA/MQA). softmax_scale defaults to 1/sqrt(D);
    softcap > 0 replaces each score s by softcap * tanh(s / softcap); deterministic=True asks the backward
    for bit-identical gradients across runs. The backward (autograd) exists for every D; a (dtype, D) the
    library was built without raises Flash4Error with the library's FLASH4_ERROR_NO_KERNEL message.

    Returns out (B, Sq, Hq, D), or (out, lse) with return_lse: lse (B, Hq, Sq) fp32, the natural-log
    sum of exp of each query row's scores (-inf for a fully masked row, whose out is 0). lse carries no
    gradient.
    """
    _check_qkv(q, k, v, rank=4, layout="(batch, seqlen, heads, head_dim)")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k has batch size {k.shape[0]} but q has {q.shape[0]}")
    options = _options(q, softmax_scale, causal, window_size, softcap, deterministic)
    out, lse = torch.ops.flash4.fwd(q, k, v, *options)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=False,
    window_size=(-1, -1), softcap=0.0, deterministic=False, return_lse=False,
):
    """Exact attention over a batch of sequences of different lengths, packed row after row.

    q is (total_q, Hq, D) and k, v are (total_k, Hkv, D); sequence b holds rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q and cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k and v.
    cu_seqlens_* are int32 CUDA tensors of batch + 1 non-decreasing offsets from 0 to the total;
    max_seqlen_* (Python ints) bound every sequence's length. Other arguments as flash_attn_func.

    In eager mode the offsets are also checked on the host, which copies them from the device and so waits
    for the stream; under torch.compile and CUDA graph capture that check is skipped (it cannot run there)
    and only the C ABI's checks remain.

    Returns out (total_q, Hq, D), or (out, lse) with return_lse: lse (Hq, total_q) fp32.
    """
    _check_qkv(q, k, v, rank=3, layout="(total_tokens, heads, head_dim)")
    for name, offsets in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        _check_cu_seqlens_tensor(name, offsets, q)
    if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
        raise ValueError(
            f"cu_seqlens_k has {cu_seqlens_k.shape[0]} offsets but cu_seqlens_q has {cu_seqlens_q.shape[0]}; "
            f"both hold batch + 1"
        )
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        _check_int(name, value, low=1)
    if _values_readable(cu_seqlens_q):
        # One copy for both, so one wait on the stream.
        offsets_q, offsets_k = torch.stack([cu_seqlens_q, cu_seqlens_k]).tolist()
        check_cu_seqlens_values("cu_seqlens_q", offsets_q, "q", q.shape[0], "max_seqlen_q", max_seqlen_q)
        check_cu_seqlens_values("cu_seqlens_k", offsets_k, "k", k.shape[0], "max_seqlen_k", max_seqlen_k)
    options = _options(q, softmax_scale, causal, window_size, softcap, deterministic)
    out, lse = torch.ops.flash4.varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *options)
    return (out, lse) if return_lse else out


def check_cu_seqlens_values(name, offsets, rows_name, rows, max_name, max_seqlen):
    """Check host-side offsets (a list of ints) against the packed tensor's row count and max_seqlen."""
    if offsets[0] != 0:
        raise ValueError(f"{name}[0] must be 0, got {offsets[0]}")
    for i in range(1, len(offsets)):
        if offsets[i] < offsets[i - 1]:
            raise ValueError(
                f"{name} must be non-decreasing, but {name}[{i}] = {offsets[i]} < {name}[{i - 1}] = {offsets[i - 1]}"
            )
    if offsets[-1] != rows:
        raise ValueError(f"{name}[-1] = {offsets[-1]} but {rows_name} has {rows} rows; the last offset is the total")
    longest = max(end - start for start, end in zip(offsets, offsets[1:]))
    if longest > max_seqlen:
        raise ValueError(f"{max_name} = {max_seqlen} but the longest sequence in {name} has {longest} rows")


def _values_readable(t):
    """Whether `t`'s values can be read on the host here: not while tracing (torch.compile, fake tensors)
    and not while capturing a CUDA graph, where the device-to-host copy is forbidden."""
    return not torch.compiler.is_compiling() and not is_fake(t) and not torch.cuda.is_current_stream_capturing()


def _check_qkv(q, k, v, rank, layout):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; flash4 runs on CUDA tensors")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
        if t.dtype not in ops.DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; flash4 supports torch.bfloat16 and torch.float16")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}")
        if t.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D {layout}, got shape {tuple(t.shape)}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last (head_dim) dimension, got strides {t.stride()}")
        if not all(1 <= size <= _INT32_MAX for size in t.shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; every size must be in [1, 2**31 - 1]")
    head_dim = q.shape[-1]
    if head_dim not in ops.HEAD_DIMS:
        raise ValueError(f"q has head_dim {head_dim}; flash4 supports {', '.join(map(str, ops.HEAD_DIMS))}")
    if k.shape[-1] != head_dim:
        raise ValueError(f"k has head_dim {k.shape[-1]} but q has {head_dim}")
    if v.shape != k.shape:
        raise ValueError(f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; they must match")
    heads_q, heads_kv = q.shape[-2], k.shape[-2]
    if heads_q % heads_kv != 0:
        raise ValueError(
            f"q has {heads_q} heads, not a multiple of k's {heads_kv} (GQA/MQA need heads_q % heads_kv == 0)"
        )


def _check_cu_seqlens_tensor(name, t, q):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype torch.int32, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] < 2:
        raise ValueError(f"{name} must be 1-D with batch + 1 >= 2 offsets, got shape {tuple(t.shape)}")
    if t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")


def _check_int(name, value, low, high=_INT32_MAX):
    # bool is an int subclass but never a meaningful size or window.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def _check_real(name, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")


def _options(q, softmax_scale, causal, window_size, softcap, deterministic):
    """The ops' trailing arguments, checked and normalized."""
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        _check_real("softmax_scale", softmax_scale)
        if softmax_scale <= 0:
            raise ValueError(f"softmax_scale must be positive, got {softmax_scale}")
    _check_real("softcap", softcap)
    if softcap < 0:
        raise ValueError(f"softcap must be >= 0 (0 turns it off), got {softcap}")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair (left, right), got {window_size!r}")
    left, right = window_size
    _check_int("window_size[0]", left, low=-1)
    _check_int("window_size[1]", right, low=-1)
    if causal:
        if right not in (-1, 0):
            raise ValueError(f"window_size[1] = {right} contradicts causal=True, which means a right window of 0")
        right = 0
    return ops.Options(float(softmax_scale), bool(causal), left, right, float(softcap), bool(deterministic))
