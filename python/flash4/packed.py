"""FlashAttention's packed call forms: q, k and v (or k and v) stacked in one tensor.

    flash_attn_qkvpacked_func(qkv, ...)              qkv (B, S, 3, H, D), or (B, S, Hq + 2 Hkv, D) with num_heads_q
    flash_attn_kvpacked_func(q, kv, ...)             kv (B, Sk, 2, Hkv, D)
    flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, ...)                  qkv (total, 3, H, D)
    flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
                                                                                         kv (total_k, 2, Hkv, D)

The remaining arguments, the checks and the results are flash_attn_func's / flash_attn_varlen_func's
(flash4.interface), FlashAttention-2's positional order included, and so are the keyword-only
learnable_sink and, in the varlen forms, seqused_q / seqused_k (one `seqused` for both sides of the
self-attention form). The kernels read the packed tensor in
place (q, k and v are views of it), and in eager mode the gradient of a packed input is written as one packed
tensor, without the concatenation that autograd would otherwise add.
"""

from . import _checks
from .interface import _NEUTRAL, _VARLEN_NEUTRAL, _reject_unsupported, make_options, make_varlen, run


def flash_attn_qkvpacked_func(
    qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
    deterministic=False, return_attn_probs=False, *, return_lse=False, num_heads_q=None, learnable_sink=None,
    **flash_attn_3_kwargs,
):
    """Self-attention over qkv (B, S, 3, H, D), or FlashAttention-3's (B, S, Hq + 2 Hkv, D) with num_heads_q = Hq
    (GQA). Returns out (B, S, Hq, D), or (out, lse) with return_lse."""
    _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, flash_attn_3_kwargs, _NEUTRAL)
    split = _qkv_split(qkv, num_heads_q, varlen=False)
    q, k, v = split(qkv)
    _checks.check_qkv(q, k, v, varlen=False)
    _checks.check_sink(learnable_sink, q)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    return run((qkv,), split, options, None, return_lse, learnable_sink)


def flash_attn_kvpacked_func(
    q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
    deterministic=False, return_attn_probs=False, *, return_lse=False, learnable_sink=None, **flash_attn_3_kwargs,
):
    """Attention of q (B, Sq, Hq, D) over kv (B, Sk, 2, Hkv, D). Returns out (B, Sq, Hq, D), or (out, lse)."""
    _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, flash_attn_3_kwargs, _NEUTRAL)
    _check_stacked("kv", kv, rank=5, axis=2, count=2)
    k, v = _unbind_kv(q, kv)[1:]
    _checks.check_qkv(q, k, v, varlen=False)
    _checks.check_sink(learnable_sink, q)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    return run((q, kv), _unbind_kv, options, None, return_lse, learnable_sink)


def flash_attn_varlen_qkvpacked_func(
    qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, return_lse=False, seqused=None,
    learnable_sink=None, **flash_attn_3_kwargs,
):
    """Self-attention over varlen rows qkv (total, 3, H, D), one cu_seqlens and max_seqlen for both sides.
    Returns out (total, H, D), or (out, lse) with return_lse: lse (H, total)."""
    _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, flash_attn_3_kwargs, _VARLEN_NEUTRAL)
    split = _qkv_split(qkv, None, varlen=True)
    q, k, v = split(qkv)
    _checks.check_qkv(q, k, v, varlen=True)
    varlen = make_varlen(q, k, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)
    _checks.check_sink(learnable_sink, q)
    _checks.check_seqused("seqused", seqused, q, cu_seqlens.shape[0] - 1)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    return run((qkv,), split, options, varlen, return_lse, learnable_sink, (seqused, seqused))


def flash_attn_varlen_kvpacked_func(
    q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
    return_lse=False, seqused_q=None, seqused_k=None, learnable_sink=None, **flash_attn_3_kwargs,
):
    """Attention of varlen rows q (total_q, Hq, D) over kv (total_k, 2, Hkv, D). Returns out (total_q, Hq, D), or
    (out, lse) with return_lse: lse (Hq, total_q)."""
    _reject_unsupported(dropout_p, alibi_slopes, return_attn_probs, flash_attn_3_kwargs, _VARLEN_NEUTRAL)
    _check_stacked("kv", kv, rank=4, axis=1, count=2)
    k, v = _unbind_varlen_kv(q, kv)[1:]
    _checks.check_qkv(q, k, v, varlen=True)
    varlen = make_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _checks.check_sink(learnable_sink, q)
    for name, used in (("seqused_q", seqused_q), ("seqused_k", seqused_k)):
        _checks.check_seqused(name, used, q, cu_seqlens_q.shape[0] - 1)
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, deterministic)
    return run((q, kv), _unbind_varlen_kv, options, varlen, return_lse, learnable_sink, (seqused_q, seqused_k))


def _check_stacked(name, t, rank, axis, count):
    _checks.check_tensor_type(name, t)
    if t.dim() != rank or t.shape[axis] != count:
        rows = "total_tokens" if rank == 4 else "batch, seqlen"
        raise ValueError(f"{name} must be {rank}-D ({rows}, {count}, heads, head_dim), got shape {tuple(t.shape)}")


def _qkv_split(qkv, num_heads_q, varlen):
    """The function that splits a packed qkv (and its gradient) into q, k, v views."""
    axis = 1 if varlen else 2
    if num_heads_q is None:
        _check_stacked("qkv", qkv, rank=4 if varlen else 5, axis=axis, count=3)
        return _unbind_varlen_qkv if varlen else _unbind_qkv
    # FlashAttention-3's GQA layout: the heads axis holds Hq query heads, then Hkv key and Hkv value heads.
    _checks.check_tensor_type("qkv", qkv)
    if qkv.dim() != 4:
        raise ValueError(f"qkv with num_heads_q must be 4-D (batch, seqlen, heads_q + 2 * heads_kv, head_dim), got "
                         f"shape {tuple(qkv.shape)}")
    _checks.check_int("num_heads_q", num_heads_q, low=1)
    heads = qkv.shape[2]
    heads_kv = (heads - num_heads_q) // 2
    if heads_kv < 1 or num_heads_q + 2 * heads_kv != heads:
        raise ValueError(f"qkv has {heads} heads, which is not num_heads_q = {num_heads_q} plus twice a positive "
                         f"number of key/value heads")

    def split(packed):
        return packed.split((num_heads_q, heads_kv, heads_kv), dim=2)

    return split


def _unbind_qkv(qkv):
    return qkv.unbind(2)


def _unbind_varlen_qkv(qkv):
    return qkv.unbind(1)


def _unbind_kv(q, kv):
    return (q, *kv.unbind(2))


def _unbind_varlen_kv(q, kv):
    return (q, *kv.unbind(1))
