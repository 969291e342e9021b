"""flash_attn_func and flash_attn_varlen_func: FlashAttention's Python signatures over flash4's kernels.

The positional order is FlashAttention-2's: (q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
alibi_slopes, deterministic, return_attn_probs). FlashAttention-3's and -4's extra arguments are accepted by
keyword at their neutral values (they ask nothing of flash4) and raise NotImplementedError naming them
otherwise, as do dropout_p != 0, alibi_slopes and return_attn_probs=True (flash4 computes no attention
probabilities; return_lse=True gives (out, lse)). FlashAttention-3's performance hints (num_splits, pack_gqa,
sm_margin) change no result: they are checked and ignored. The packed forms are in flash4.packed.

Every argument is checked here, in plain Python, before anything is launched (flash4._checks): the checks
need neither a GPU nor the shared library and run on fake tensors, and each message names the argument at
fault. The C ABI validates again and its messages come through as flash4.Flash4Error.

Masking follows FlashAttention: causal is aligned to the bottom right when seqlen_q != seqlen_k, and
window_size = (left, right) keeps key j for query i iff i + Sk - Sq - left <= j <= i + Sk - Sq + right,
a negative edge (or None) meaning unbounded; causal=True sets the right edge to 0 and keeps the left (local
causal attention). A query row that sees no key (a fully masked row, or a sequence without keys) gets out = 0
and lse = -inf (its sink with learnable_sink), and passes no gradient to q, k and v.
"""

import torch
from torch._subclasses.fake_tensor import is_fake

from . import _checks, _eager, _launch, ops  # noqa: F401  (ops registers torch.ops.flash4.*, which run() calls)
from ._launch import Options, Varlen

# FlashAttention-3/-4 keyword arguments that change the result, and the values at which they ask nothing of
# flash4.
_NEUTRAL = {
    "qv": (None,),  # FA3: an extra query-value product
    "q_descale": (None,), "k_descale": (None,), "v_descale": (None,),  # FA3: fp8 scales
    "attention_chunk": (0,),  # FA3: chunked attention
    "learnable_sink": (None,),  # FA4: attention sinks (taken by flash_attn_func and flash_attn_varlen_func)
}
_VARLEN_NEUTRAL = _NEUTRAL | {"seqused_q": (None,), "seqused_k": (None,)}  # FA3: used rows per sequence
# FlashAttention-3's performance hints (split-KV count, GQA packing, SMs left free for other work): they change
# no result, so any valid value is accepted and ignored (flash4 plans its own launches).
HINTS = ("num_splits", "pack_gqa", "sm_margin")


def flash_attn_func(
    q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
    deterministic=False, return_attn_probs=False, *, return_lse=False, learnable_sink=None, **flash_attn_3_kwargs,
):
    """Exact attention over q (B, Sq, Hq, D), k (B, Sk, Hkv, D) and v (B, Sk, Hkv, Dv).

    bf16 or fp16 CUDA tensors, any strides (views of a packed qkv work in place; a layout the kernels cannot
    read, such as a strided last dimension, is copied first, gradients flowing back to the original),
    D and Dv multiples of 8 from 8 to 256 (Dv = D usually; e.g. 192 and 128 too), Hq a multiple of Hkv
    (GQA/MQA), Sq and Sk >= 0 (a sequence without keys gives out = 0, lse = -inf). softmax_scale defaults to
    1/sqrt(D); softcap > 0 replaces each score s by
    softcap * tanh(s / softcap); deterministic=True asks the backward for bit-identical gradients across runs.
    learnable_sink (FlashAttention-4's): None, or one logit per query head, shape (Hq,), float32 (or bf16 /
    fp16), joining every row's softmax as a column without a value; it is not multiplied by softmax_scale, a
    row without keys then gets out = 0 and lse = its sink, and it receives a gradient when it requires one.
    dropout_p must be 0, alibi_slopes None, return_attn_probs False; FlashAttention-3/-4 keywords (qv,
    q_descale, k_descale, v_descale, attention_chunk) only at their neutral values; FlashAttention-3's
    performance hints (num_splits and sm_margin ints >= 0, pack_gqa None or a bool) are accepted and ignored.
    window_size edges: ints, any negative one (or None) unbounded. causal, deterministic and the return flags
    must be bools.

    Returns out (B, Sq, Hq, Dv), as FlashAttention does, or (out, lse) with return_lse: lse (B, Hq, Sq) fp32,
    the natural-log sum of exp of each query row's scores. lse carries no gradient.
    """
    _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, flash_attn_3_kwargs, _NEUTRAL)
    _checks.check_qkv(q, k, v, varlen=False)
    _checks.check_sink(learnable_sink, q)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    return run((q, k, v), _eager.unpacked, options, None, return_lse, learnable_sink)


def flash_attn_varlen_func(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
    block_table=None, *, return_lse=False, seqused_q=None, seqused_k=None, learnable_sink=None, **flash_attn_3_kwargs,
):
    """Exact attention over a batch of sequences of different lengths, packed row after row.

    q is (total_q, Hq, D), k is (total_k, Hkv, D) and v (total_k, Hkv, Dv); sequence b holds rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q and cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k and v.
    cu_seqlens_* are int32 CUDA tensors of batch + 1 non-decreasing offsets from 0 to the total; sequences may
    be empty, and so may q or k (total 0). max_seqlen_* (ints) bound every sequence's length. Other arguments
    as flash_attn_func (learnable_sink included).

    seqused_q / seqused_k (FlashAttention-3's): None, or int32 CUDA tensors of one entry per sequence: sequence
    b uses only its first seqused[b] rows (in [0, its length]; not checked, device memory); the masks align
    to the used lengths. Rows of out and lse past seqused_q are left as allocated (torch.empty, as in
    FlashAttention 3); the gradients of unused rows are 0. Unused rows of q, k, v must hold finite values.

    block_table (FlashAttention-2's paged KV cache, for prefill against it): an int32 CUDA tensor
    (batch, max_pages); k and v are then the cache's pages (num_pages, page_size, Hkv, D), read in place (a
    contiguous last dimension), page_size a multiple of 16, and key t of sequence b is row t % page_size of
    page block_table[b, t // page_size].
    cu_seqlens_k then gives the key lengths only. Forward only: with a gradient required of q, k or v it
    raises NotImplementedError (flash4 has no backward through a paged cache), as it does under
    torch.compile, fake tensors and the other modes that need the torch ops. A table entry outside
    [0, num_pages) is never dereferenced: its page reads as zeros (flash4.h). Rows of a sequence's last page
    past its length are read and masked, so they must hold finite values (a zeroed cache does).
    learnable_sink and seqused_q / seqused_k combine with block_table as without it (seqused_k counts the
    sequence's first keys, in its pages).

    With max_seqlen_q and max_seqlen_k given, nothing is read back from the device: the offsets are not
    checked on the host and the call never waits for the stream (their consistency is the caller's promise,
    as in FlashAttention). With either of them None, both offset tensors are copied to the host once (a
    wait on the stream, impossible under torch.compile and CUDA graph capture), checked, and the missing
    bound is taken from them.

    Returns out (total_q, Hq, Dv), or (out, lse) with return_lse: lse (Hq, total_q) fp32.
    """
    _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, flash_attn_3_kwargs, _VARLEN_NEUTRAL)
    if block_table is not None:
        return _paged_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                             window_size, softcap, deterministic, block_table, return_lse,
                             _launch.Extras(learnable_sink, seqused_q, seqused_k))
    _checks.check_qkv(q, k, v, varlen=True)
    varlen = make_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _checks.check_sink(learnable_sink, q)
    for name, used in (("seqused_q", seqused_q), ("seqused_k", seqused_k)):
        _checks.check_seqused(name, used, q, cu_seqlens_q.shape[0] - 1)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    return run((q, k, v), _eager.unpacked, options, varlen, return_lse, learnable_sink, (seqused_q, seqused_k))


def _paged_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size,
                  softcap, deterministic, block_table, return_lse, extras):
    """flash_attn_varlen_func on a paged cache: checked here, launched eagerly (forward only). extras: the
    learnable sink logits and seqused_q / seqused_k as the caller gave them."""
    if type(return_lse) is not bool:
        _checks.check_flag("return_lse", return_lse)
    _checks.check_paged_qkv(q, k, v, block_table)
    _checks.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q)
    _checks.check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, q)
    if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0] or block_table.shape[0] != cu_seqlens_q.shape[0] - 1:
        raise ValueError(
            f"cu_seqlens_q has {cu_seqlens_q.shape[0]} offsets, cu_seqlens_k {cu_seqlens_k.shape[0]} and block_table "
            f"{block_table.shape[0]} rows; they must be batch + 1, batch + 1 and batch"
        )
    for name, bound in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if bound is not None:
            _checks.check_int(name, bound, low=0)
    if max_seqlen_k is not None:
        _check_table_capacity(max_seqlen_k, block_table, k)
    _checks.check_sink(extras.sink, q)
    for name, used in (("seqused_q", extras.seqused_q), ("seqused_k", extras.seqused_k)):
        _checks.check_seqused(name, used, q, cu_seqlens_q.shape[0] - 1)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, extras.sink)):
        raise NotImplementedError(
            "block_table: flash4 has no backward through a paged KV cache (paged caches serve inference); "
            "call it under torch.no_grad() or pass tensors that do not require grad"
        )
    if not _eager.eager_call(q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, *(t for t in extras if t is not None)):
        raise NotImplementedError(
            "block_table is supported in eager mode only: not under torch.compile, fake tensors, tensor "
            "subclasses, dispatch modes or functorch transforms"
        )
    if max_seqlen_q is None or max_seqlen_k is None:
        max_seqlen_q, max_seqlen_k = _paged_bounds(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        _check_table_capacity(max_seqlen_k, block_table, k)
    varlen = Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    extras = extras._replace(sink=_eager.kernel_sinks(extras.sink))
    out, lse = _launch.forward(q, k, v, options, varlen, block_table, extras)
    return (out, lse) if return_lse else out


def _check_table_capacity(max_seqlen_k, block_table, k):
    """A block_table row must hold the pages of the longest key sequence."""
    capacity = block_table.shape[1] * k.shape[1]
    if max_seqlen_k > capacity:
        raise ValueError(
            f"max_seqlen_k = {max_seqlen_k} but a block_table row holds {block_table.shape[1]} pages of "
            f"{k.shape[1]} keys = {capacity}"
        )


def _paged_bounds(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """(max_seqlen_q, max_seqlen_k) of a paged call, the missing ones read from the offsets (one wait)."""
    offsets_q, offsets_k = torch.stack([cu_seqlens_q, cu_seqlens_k]).tolist()
    longest_q = max(end - start for start, end in zip(offsets_q, offsets_q[1:]))
    longest_k = max(end - start for start, end in zip(offsets_k, offsets_k[1:]))
    bound_q = longest_q if max_seqlen_q is None else max_seqlen_q
    bound_k = longest_k if max_seqlen_k is None else max_seqlen_k
    _checks.check_cu_seqlens_values("cu_seqlens_q", offsets_q, "q", q.shape[0], "max_seqlen_q", bound_q)
    # The keys are not packed rows of k: their total is whatever the lengths sum to.
    _checks.check_cu_seqlens_values("cu_seqlens_k", offsets_k, "the keys", offsets_k[-1], "max_seqlen_k", bound_k)
    return bound_q, bound_k


def run(inputs, split, options, varlen, return_lse, sink=None, seqused=(None, None)):
    """out, or (out, lse), of the checked call on `inputs` (differentiable tensors that split(*inputs) turns
    into q, k, v) and the optional sink logits (differentiable too) and seqused tensors: eagerly through
    flash4._eager, or through the torch ops when torch has to see the call."""
    if type(return_lse) is not bool:
        _checks.check_flag("return_lse", return_lse)
    tensors = inputs if varlen is None else (*inputs, varlen.cu_seqlens_q, varlen.cu_seqlens_k)
    if sink is not None or seqused[0] is not None or seqused[1] is not None:  # the common case builds nothing
        tensors += tuple(t for t in (sink, *seqused) if t is not None)
    if _eager.eager_call(*tensors):
        out, lse = _eager.attention(_eager.Call(options, varlen, split, seqused), *inputs, sink=sink)
    elif varlen is None:
        out, lse = torch.ops.flash4.fwd(*split(*inputs), *options, sink)
    else:
        out, lse = torch.ops.flash4.varlen_fwd(*split(*inputs), *varlen, *options, sink, *seqused)
    return (out, lse) if return_lse else out


def make_options(head_dim, softmax_scale, causal, window_size, softcap, deterministic):
    """The ops' trailing arguments, checked and normalized; the common case takes the shortest branch."""
    if type(causal) is not bool or type(deterministic) is not bool:
        _checks.check_flag("causal", causal)
        _checks.check_flag("deterministic", deterministic)
    scale = head_dim**-0.5 if softmax_scale is None else softmax_scale  # FlashAttention's default, bit for bit
    if softmax_scale is not None or type(softcap) is not float or softcap != 0.0:
        _checks.check_scales(scale, softcap)
    if type(window_size) is tuple and window_size == (-1, -1):
        left, right = -1, 0 if causal else -1
    else:
        left, right = _checks.window_edges(window_size, causal)
    return Options(float(scale), causal, left, right, float(softcap), deterministic)


def make_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """Varlen metadata, checked; the host reads the offsets only when a max_seqlen is missing (None)."""
    _checks.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q)
    _checks.check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, q)
    if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
        raise ValueError(
            f"cu_seqlens_k has {cu_seqlens_k.shape[0]} offsets but cu_seqlens_q has {cu_seqlens_q.shape[0]}; "
            f"both hold batch + 1"
        )
    if max_seqlen_q is None or max_seqlen_k is None:
        max_seqlen_q, max_seqlen_k = _bounds_from_offsets(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                          max_seqlen_k)
    _checks.check_int("max_seqlen_q", max_seqlen_q, low=0)
    _checks.check_int("max_seqlen_k", max_seqlen_k, low=0)
    return Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def _bounds_from_offsets(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """(max_seqlen_q, max_seqlen_k), the missing ones the longest sequence, after checking the offsets."""
    if not _values_readable(cu_seqlens_q):
        raise ValueError(
            "max_seqlen_q and max_seqlen_k must be ints under torch.compile, fake tensors and CUDA graph capture: "
            "None asks the host to read cu_seqlens, which cannot happen there"
        )
    offsets_q, offsets_k = torch.stack([cu_seqlens_q, cu_seqlens_k]).tolist()  # one copy, so one wait
    bounds = []
    for side, offsets, rows, given in (("q", offsets_q, q.shape[0], max_seqlen_q), ("k", offsets_k, k.shape[0],
                                                                                      max_seqlen_k)):
        longest = max(end - start for start, end in zip(offsets, offsets[1:]))
        bound = longest if given is None else given
        _checks.check_cu_seqlens_values(f"cu_seqlens_{side}", offsets, side, rows, f"max_seqlen_{side}", bound)
        bounds.append(bound)
    return tuple(bounds)


def _values_readable(t):
    """Whether `t`'s values can be read on the host here: not while tracing (torch.compile, fake tensors)
    and not while capturing a CUDA graph, where the device-to-host copy is forbidden."""
    return not torch.compiler.is_compiling() and not is_fake(t) and not torch.cuda.is_current_stream_capturing()


def _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, extra_kwargs, neutral):
    """FlashAttention arguments flash4 cannot honour: NotImplementedError naming them (TypeError for a
    keyword no FlashAttention version has, or a flag that is not a bool)."""
    if type(dropout_p) is not float or dropout_p != 0.0:
        _checks.check_dropout(dropout_p)
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes is not supported by flash4; pass None")
    if return_attn_probs is not False:
        _checks.check_flag("return_attn_probs", return_attn_probs)
        raise NotImplementedError(
            "return_attn_probs=True is not supported by flash4: it computes no attention probabilities "
            "(FlashAttention-2's S_dmask); pass return_lse=True for (out, lse)"
        )
    if extra_kwargs:
        for name, value in extra_kwargs.items():
            if name in HINTS:
                _checks.check_hint(name, value)
                continue
            if name not in neutral:
                raise TypeError(f"unexpected keyword argument {name!r} (not a FlashAttention-2/3/4 argument)")
            _checks.reject_unsupported(name, value, neutral[name])
