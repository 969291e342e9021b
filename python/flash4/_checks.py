"""Argument checks shared by the public functions (interface.py) and the torch ops (ops.py).

Plain Python on tensor metadata: no GPU, no library, and they run on fake tensors (FakeTensorMode,
torch.compile tracing) without specializing symbolic sizes. Every failure names the argument: TypeError for
a wrong type, ValueError for a wrong value, NotImplementedError for a FlashAttention feature flash4 lacks.
The C ABI validates again before it launches anything; the checks here catch what it cannot see (a Python
bool given as an int, a float that float32 cannot hold) and give Python's exception types.

They run on every eager call, so each reads a tensor's metadata once and the common case takes the
shortest branch.
"""

import ctypes
import math

import torch

from ._abi import DType

# What the library accepts. Kernels are built for head dims 64, 96, 128, 192 and 256; every multiple of 8 up
# to 256 (rows of whole 16-byte units, as TMA reads them) is served by the smallest one at least as wide,
# for q's and v's head dims alike (v's may differ from q's). CMake's FLASH4_DTYPES / FLASH4_HEAD_DIMS can
# build fewer kernels; the C ABI then reports FLASH4_ERROR_NO_KERNEL with the missing case.
DTYPES = {torch.bfloat16: DType.BF16, torch.float16: DType.FP16}
HEAD_DIM_STEP, MAX_HEAD_DIM = 8, 256
HEAD_DIMS = tuple(range(HEAD_DIM_STEP, MAX_HEAD_DIM + 1, HEAD_DIM_STEP))
INT32_MAX = 2**31 - 1

# float32's range: the C ABI takes softmax_scale and softcap as float, and the kernels form
# softmax_scale * log2(e), softcap * log2(e) and softmax_scale / softcap in float32. A value there that
# is 0, subnormal (flushed to 0 on the GPU) or infinite would silently change the attention.
FLOAT32_MIN_NORMAL = 2.0**-126
FLOAT32_MAX = (2 - 2.0**-23) * 2.0**127
LOG2_E = 1.0 / math.log(2.0)


def check_tensor_type(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def check_qkv(q, k, v, varlen, need_cuda=True):
    """q, k, v of one attention call: (B, S, H, D) each, or (total, H, D) each when varlen, v's D possibly
    another (head_dim_v). need_cuda=False for shape inference, which also serves meta tensors. Any strides
    pass: the launch copies what TMA cannot read in place (flash4._launch.tma_ready), a strided last dimension
    included, as FlashAttention's maybe_contiguous does."""
    if not _plainly_valid(q, k, v, varlen, need_cuda):
        _explain_qkv(q, k, v, varlen, need_cuda)


def _plainly_valid(q, k, v, varlen, need_cuda):
    """True only if every check of _explain_qkv passes: the common case in one expression (one read of each
    piece of metadata, sizes compared one by one and head dims by arithmetic, the cheapest forms); False sends
    the call to _explain_qkv, which names what is wrong."""
    try:
        if varlen:
            (q_rows, heads_q, head_dim), (k_rows, heads_kv, k_head_dim) = q.shape, k.shape
            v_rows, v_heads, v_head_dim = v.shape
            batch = k_batch = v_batch = 1
        else:
            (batch, q_rows, heads_q, head_dim), (k_batch, k_rows, heads_kv, k_head_dim) = q.shape, k.shape
            v_batch, v_rows, v_heads, v_head_dim = v.shape
        dtype, device = q.dtype, q.get_device()
        return (
            k_batch == batch and v_batch == batch and 1 <= batch <= INT32_MAX
            and v_rows == k_rows and v_heads == heads_kv
            and HEAD_DIM_STEP <= v_head_dim <= MAX_HEAD_DIM and v_head_dim % HEAD_DIM_STEP == 0
            and dtype in DTYPES and k.dtype == dtype and v.dtype == dtype
            and (q.is_cuda and k.is_cuda and v.is_cuda or not need_cuda)
            and k.get_device() == device and v.get_device() == device
            and HEAD_DIM_STEP <= head_dim <= MAX_HEAD_DIM and head_dim % HEAD_DIM_STEP == 0 and k_head_dim == head_dim
            and 0 <= q_rows <= INT32_MAX and 0 <= k_rows <= INT32_MAX and 1 <= heads_kv <= heads_q <= INT32_MAX
            and heads_q % heads_kv == 0
        )
    except (AttributeError, TypeError, ValueError):  # not a tensor, or a tensor of another rank
        return False


def _explain_qkv(q, k, v, varlen, need_cuda):
    rank = 3 if varlen else 4
    layout = "(total_tokens, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor_type(name, t)
        if t.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D {layout}, got shape {tuple(t.shape)}")
        _check_placement(name, t, q, need_cuda)
    q_shape, k_shape, v_shape = q.shape, k.shape, v.shape
    head_dim = q_shape[-1]
    for name, dim in (("q", head_dim), ("v", v_shape[-1])):
        if dim not in HEAD_DIMS:
            raise NotImplementedError(
                f"{name} has head_dim {dim}; flash4 implements head dims that are multiples of 8 from 8 to 256"
            )
    if k_shape[-1] != head_dim:
        raise ValueError(f"k has head_dim {k_shape[-1]} but q has {head_dim}; q . k needs the same head_dim")
    if v_shape[:-1] != k_shape[:-1]:
        raise ValueError(f"v has shape {tuple(v_shape)} but k has {tuple(k_shape)}; they must match but for the "
                         f"last (head_dim) dimension")
    if not varlen and k_shape[0] != q_shape[0]:
        raise ValueError(f"k has batch size {k_shape[0]} but q has {q_shape[0]}")
    for name, shape in (("q", q_shape), ("k", k_shape)):
        _check_sizes(name, shape, varlen)
    heads_q, heads_kv = q_shape[-2], k_shape[-2]
    if heads_q % heads_kv != 0:
        raise ValueError(
            f"q has {heads_q} heads, not a multiple of k's {heads_kv} (GQA/MQA need heads_q % heads_kv == 0)"
        )


PAGE_SIZE_MULTIPLE = 16  # flash4.h, rule 6: a paged cache's pages hold a multiple of 16 rows


def check_paged_qkv(q, k, v, block_table):
    """q (total_q, Hq, D) and a paged cache k, v (num_pages, page_size, Hkv, D) with block_table
    (batch, max_pages) int32 on q's device."""
    for name, t, rank, layout in (("q", q, 3, "(total_tokens, heads, head_dim)"),
                                  ("k", k, 4, "(num_pages, page_size, heads, head_dim)"),
                                  ("v", v, 4, "(num_pages, page_size, heads, head_dim)")):
        check_tensor_type(name, t)
        if t.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D {layout} with block_table, got shape {tuple(t.shape)}")
        _check_placement(name, t, q, need_cuda=True)
    for name, t in (("k", k), ("v", v)):  # the cache is read in place (a copy would cost more than the call)
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last (head_dim) dimension, got strides {t.stride()}")
    head_dim = q.shape[-1]
    if head_dim not in HEAD_DIMS:
        raise NotImplementedError(
            f"q has head_dim {head_dim}; flash4 implements head dims that are multiples of 8 from 8 to 256"
        )
    if k.shape[-1] != head_dim:
        raise ValueError(f"k has head_dim {k.shape[-1]} but q has {head_dim}; q . k needs the same head_dim")
    if v.shape != k.shape:
        raise ValueError(f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; they must match")
    num_pages, page_size, heads_kv = k.shape[0], k.shape[1], k.shape[2]
    if num_pages < 1 or heads_kv < 1 or page_size < 1 or page_size % PAGE_SIZE_MULTIPLE:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; a paged cache needs num_pages >= 1, heads >= 1 and a page_size that "
            f"is a positive multiple of {PAGE_SIZE_MULTIPLE}"
        )
    if q.shape[-2] % heads_kv != 0:
        raise ValueError(
            f"q has {q.shape[-2]} heads, not a multiple of k's {heads_kv} (GQA/MQA need heads_q % heads_kv == 0)"
        )
    check_tensor_type("block_table", block_table)
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table must have dtype torch.int32, got {block_table.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] < 1:
        raise ValueError(f"block_table must be 2-D (batch, max_pages) with batch >= 1, got {tuple(block_table.shape)}")
    if not block_table.is_cuda or block_table.get_device() != q.get_device():
        raise ValueError(f"block_table is on {block_table.device} but q is on {q.device}")
    if block_table.stride(1) != 1 and block_table.shape[1] > 1:
        raise ValueError(f"block_table must be contiguous in its last dimension, got strides {block_table.stride()}")


def _check_placement(name, t, q, need_cuda):
    """dtype and device, one for every tensor of a call."""
    dtype = t.dtype
    if dtype not in DTYPES:
        raise TypeError(f"{name} has dtype {dtype}; flash4 supports torch.bfloat16 and torch.float16")
    if dtype != q.dtype:
        raise TypeError(f"{name} has dtype {dtype} but q has {q.dtype}")
    if need_cuda and not t.is_cuda:
        raise ValueError(f"{name} is on {t.device}; flash4 runs on CUDA tensors")
    if t.get_device() != q.get_device():
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")


def _check_sizes(name, shape, varlen):
    """Sequence lengths (and varlen totals) may be 0, an empty problem; batch and heads may not."""
    rows_axis = 0 if varlen else 1
    for axis, size in enumerate(shape[:-1]):
        low = 0 if axis == rows_axis else 1
        if not low <= size <= INT32_MAX:
            raise ValueError(
                f"{name} has shape {tuple(shape)}; its {_axis_name(axis, varlen)} must be in [{low}, 2**31 - 1]"
            )


def _axis_name(axis, varlen):
    return (("total_tokens", "heads") if varlen else ("batch", "seqlen", "heads"))[axis]


def check_cu_seqlens(name, t, q, need_cuda=True):
    check_tensor_type(name, t)
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype torch.int32, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] < 2:
        raise ValueError(f"{name} must be 1-D with batch + 1 >= 2 offsets, got shape {tuple(t.shape)}")
    if t.get_device() != q.get_device() or need_cuda and not t.is_cuda:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")


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


def check_int(name, value, low, high=INT32_MAX):
    # bool is an int subclass but never a meaningful size or window.
    if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def check_flag(name, value):
    """Flags are bool: an int, a string or a tensor in their place is far more often a mistake than a wish."""
    if type(value) is not bool:
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} {value!r}")


def _check_float32(name, value, what):
    """`what` (= value > 0, computed from argument `name`) must stay a normal finite number in float32."""
    single = ctypes.c_float(value).value
    if not FLOAT32_MIN_NORMAL <= single <= FLOAT32_MAX:
        raise ValueError(
            f"{name} = {value!r} gives {what} = {single!r} in float32, the precision the kernels use; it must be "
            f"a normal float32 number in [{FLOAT32_MIN_NORMAL:.4g}, {FLOAT32_MAX:.4g}]"
        )


def _check_positive_real(name, value, allow_zero):
    if type(value) is not float and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0 (0 turns it off)" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")


def check_scales(softmax_scale, softcap):
    """softmax_scale > 0 and softcap >= 0, each representable, and so the float32 values the kernels derive."""
    _check_positive_real("softmax_scale", softmax_scale, allow_zero=False)
    _check_positive_real("softcap", softcap, allow_zero=True)
    _check_float32("softmax_scale", softmax_scale, "softmax_scale")
    _check_float32("softmax_scale", softmax_scale * LOG2_E, "softmax_scale * log2(e)")
    if softcap:
        _check_float32("softcap", softcap, "softcap")
        _check_float32("softcap", softcap * LOG2_E, "softcap * log2(e)")
        _check_float32("softcap", softmax_scale / softcap, "softmax_scale / softcap")


def window_edges(window_size, causal):
    """(left, right) of FlashAttention's window_size, -1 for unbounded: any negative edge, as FlashAttention-2
    and -3 read it, and None, as FlashAttention-4 writes it. causal=True makes the right edge 0 and keeps the
    left (local causal attention)."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair (left, right), got {window_size!r}")
    left, right = window_size
    left = _window_edge("window_size[0]", left)
    right = _window_edge("window_size[1]", right)
    return left, 0 if causal else right


def _window_edge(name, value):
    """-1 for None and every negative int (the C ABI takes only -1 for unbounded), else the checked int."""
    if value is None or isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return -1
    check_int(name, value, low=0)
    return value


def reject_unsupported(name, value, neutral):
    """NotImplementedError unless `value` is one of the `neutral` values (same type and value): a
    FlashAttention argument flash4 cannot honour."""
    if not any(value is n or (type(value) is type(n) and value == n) for n in neutral):
        accepted = " or ".join(repr(n) for n in neutral)
        raise NotImplementedError(f"{name}={value!r} is not supported by flash4 (only {accepted})")


_POSITIONAL_HINT = ("FlashAttention-2's positional order is q, k, v, dropout_p, softmax_scale, causal; pass "
                    "FlashAttention-3's softmax_scale by keyword")


def check_dropout(dropout_p):
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a number, got {type(dropout_p).__name__} ({_POSITIONAL_HINT})")
    if dropout_p != 0:
        raise NotImplementedError(
            f"dropout_p={dropout_p!r}: flash4 has no attention dropout, only dropout_p=0.0 ({_POSITIONAL_HINT})"
        )


def check_hint(name, value):
    """FlashAttention-3's performance hints, which change no result and which flash4 ignores once checked:
    pack_gqa None or a bool, num_splits and sm_margin ints >= 0."""
    if name == "pack_gqa":
        if value is not None:
            check_flag(name, value)
    else:
        check_int(name, value, low=0)


SINK_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # FlashAttention-4's; the kernels read float32


def check_sink(sink, q, need_cuda=True):
    """learnable_sink: None, or one logit per query head, FlashAttention-4's shape (Hq,), on q's device."""
    if sink is None:
        return
    check_tensor_type("learnable_sink", sink)
    if sink.dtype not in SINK_DTYPES:
        raise TypeError(f"learnable_sink has dtype {sink.dtype}; it must be torch.float32, bfloat16 or float16")
    heads_q = q.shape[-2]
    if tuple(sink.shape) != (heads_q,):
        raise ValueError(f"learnable_sink has shape {tuple(sink.shape)}; it must be (heads_q,) = ({heads_q},)")
    if sink.get_device() != q.get_device() or need_cuda and not sink.is_cuda:
        raise ValueError(f"learnable_sink is on {sink.device} but q is on {q.device}")


def check_seqused(name, t, q, batch, need_cuda=True):
    """seqused_q / seqused_k: None, or int32 (batch,) on q's device, the rows each sequence uses."""
    if t is None:
        return
    check_tensor_type(name, t)
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype torch.int32, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] != batch:
        raise ValueError(f"{name} must be 1-D with one entry per sequence ({batch}), got shape {tuple(t.shape)}")
    if t.get_device() != q.get_device() or need_cuda and not t.is_cuda:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")


def check_dsink(dsink, sink32):
    """The backward ops' dsink: given exactly with a sink, float32 and shaped like it, contiguous."""
    if (dsink is None) != (sink32 is None):
        raise ValueError("dsink must be given exactly when sink is (the backward writes the sinks' gradient there)")
    if dsink is not None:
        check_tensor_type("dsink", dsink)
        if dsink.dtype != torch.float32 or dsink.shape != sink32.shape or dsink.stride(0) != 1:
            raise ValueError(f"dsink must be a contiguous float32 tensor of shape {tuple(sink32.shape)}, got "
                             f"{dsink.dtype} {tuple(dsink.shape)}")
