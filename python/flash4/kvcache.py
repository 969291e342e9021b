"""flash_attn_with_kvcache: attention of a few new query tokens against a KV cache, FlashAttention's signature.

    out = flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens, causal=True)

q is (batch, seqlen_q, heads_q, head_dim); the cache is (cache_batch, capacity, heads_kv, head_dim), or, with
block_table (batch, max_pages_per_seq) int32, paged as (num_pages, page_size, heads_kv, head_dim); v_cache
and v may have a head dim of their own (head_dim_v, e.g. 128 with q's 192). When k and v (batch, seqlen_new,
heads_kv, head_dim) are given they are written into the cache in place at cache_seqlens[b], and the queries
attend to the cache's first cache_seqlens[b] + seqlen_new keys; causal and windows are bottom-right aligned to
that length (query i's diagonal is key i + cache_seqlens[b] + seqlen_new - seqlen_q). Returns out (batch,
seqlen_q, heads_q, head_dim_v), and with return_softmax_lse=True also the natural-log LSE (batch, heads_q,
seqlen_q) fp32. No gradient. The C ABI is include/flash4/flash4_kvcache.h.

Arguments are checked here before anything is launched, each message naming the argument. In eager mode the
device-side values (a tensor cache_seqlens, cache_batch_idx and the block_table entries each sequence uses) are
also checked on the host, which copies them from the device and so waits for the stream; a call with none of
them (cache_seqlens an int or None, no cache_batch_idx, no block_table) has nothing there to check and does
not wait. Under torch.compile and CUDA graph capture that check is skipped, and the kernel's own rule applies:
a sequence with unusable values gets NaN output rows, and nothing is read or written outside the cache.
"""

import ctypes
import functools
from typing import Optional

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from . import _checks, _kvcache_abi, _launch
from ._checks import DTYPES, HEAD_DIMS
from ._checks import check_int as _check_int
from ._loader import load_library
from .interface import _values_readable, make_options

MAX_SPLITS = 128
_CHUNK_BYTES = 16  # the kernels move 16-byte chunks: pointers and strides must be multiples of it
_NOT_SUPPORTED = ("rotary_cos", "rotary_sin", "cache_leftpad", "alibi_slopes")
# FlashAttention-3's keywords that change the result and have no flash4 counterpart, at their neutral values.
_FA3_NOT_SUPPORTED = {"qv": None, "q_descale": None, "k_descale": None, "v_descale": None, "rotary_seqlens": None,
                      "cu_seqlens_q": None, "cu_seqlens_k_new": None, "max_seqlen_q": None, "attention_chunk": 0}


def flash_attn_with_kvcache(
    q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
    cache_leftpad=None, block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
    rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *, page_table=None,
    pack_gqa=None, sm_margin=0, scheduler_metadata=None, **flash_attn_3_kwargs,
):
    """FlashAttention's flash_attn_with_kvcache (FlashAttention-2's argument order), on flash4's decode kernel.

    bf16 or fp16 CUDA tensors, head dims (q and k's, v's) multiples of 8 up to 256, heads_q a multiple of
    heads_kv (GQA/MQA: the query heads of a KV head are processed together, so each cache byte is read once).
    cache_seqlens: an int or an int32
    (batch,) tensor, the keys already in each sequence's cache (default: the whole capacity; required to
    append). cache_batch_idx (int32 (batch,), not paged): which cache sequence each sequence uses.
    num_splits: 0 lets a heuristic split each sequence's keys over several kernel blocks when the batch is too
    small to fill the GPU; n >= 1 asks for n splits (at most 128, and one per 64 keys). rotary embeddings,
    cache_leftpad and alibi_slopes are not supported (NotImplementedError). The cache must be 16-byte aligned
    with strides of 16-byte multiples (it is written in place, so it is never copied); q, k and v may have any
    strides (a layout the kernel cannot read, a strided last dimension included, is copied first).

    FlashAttention-3's keywords, keyword-only here (its positional order differs): page_table is block_table
    (passing both is an error); pack_gqa, sm_margin and scheduler_metadata are performance hints, accepted and
    ignored; qv, q_descale, k_descale, v_descale, rotary_seqlens, cu_seqlens_q, cu_seqlens_k_new and
    max_seqlen_q other than None, and attention_chunk other than 0, raise NotImplementedError.

    Outside CUDA graph capture and torch.compile, the values of a tensor cache_seqlens, cache_batch_idx and
    block_table are checked against the cache on the host (check_device_values): one device-to-host copy, so
    the call waits for the stream. An int cache_seqlens is checked on the host as it is, so a call with
    neither cache_batch_idx nor block_table does not wait. A serving loop avoids that wait by capturing its
    step in a CUDA graph or by calling torch.ops.flash4.kvcache, which does not read them: there a bad value
    gives NaN rows of out and lse and nothing written outside the cache.
    """
    for name, value in zip(_NOT_SUPPORTED, (rotary_cos, rotary_sin, cache_leftpad, alibi_slopes)):
        if value is not None:
            raise NotImplementedError(f"flash4.flash_attn_with_kvcache does not support {name}; pass None")
    block_table = _fa3_keywords(block_table, page_table, pack_gqa, sm_margin, flash_attn_3_kwargs)
    if scheduler_metadata is not None and not isinstance(scheduler_metadata, torch.Tensor):
        raise TypeError(f"scheduler_metadata must be None or a tensor, got {type(scheduler_metadata).__name__}")
    del rotary_interleaved, scheduler_metadata  # rotary_interleaved: only meaningful with rotary_cos / rotary_sin
    paged = block_table is not None
    _check_tensors(q, k_cache, v_cache, k, v, paged)
    batch = q.shape[0]
    seqlen_new = 0 if k is None else k.shape[1]
    _check_index_tensor("cache_batch_idx", cache_batch_idx, q, rows=batch)
    if paged:
        _check_index_tensor("block_table", block_table, q, rows=batch, dim=2)
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx cannot be used with block_table: a paged cache selects each "
                             "sequence's pages through its block_table row")
    elif cache_batch_idx is None and k_cache.shape[0] < batch:
        raise ValueError(f"k_cache holds {k_cache.shape[0]} sequences but q has batch {batch}; without "
                         f"cache_batch_idx sequence b uses cache sequence b")
    capacity = k_cache.shape[1] * (block_table.shape[1] if paged else 1)
    if seqlen_new > capacity:
        raise ValueError(f"k and v append {seqlen_new} rows per sequence but the cache holds {capacity}")
    # _cache_seqlens_tensor range-checks an int cache_seqlens on the host: only tensors given need the copy.
    device_values = isinstance(cache_seqlens, torch.Tensor) or cache_batch_idx is not None or paged
    cache_seqlens = _cache_seqlens_tensor(cache_seqlens, q, capacity, seqlen_new)
    _check_int("num_splits", num_splits, low=0, high=MAX_SPLITS)
    if device_values and _values_readable(q):
        check_device_values(cache_seqlens, seqlen_new, capacity, k_cache.shape[0], cache_batch_idx, block_table,
                            k_cache.shape[1] if paged else 0)
    # flash_attn_func's checks; the last of its options (deterministic) concerns only a backward.
    options = make_options(q.shape[-1], softmax_scale, causal, window_size, softcap, False)[:5]
    out, lse = torch.ops.flash4.kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                                        *options, num_splits)
    return (out, lse) if return_softmax_lse else out


def _fa3_keywords(block_table, page_table, pack_gqa, sm_margin, extra_kwargs):
    """block_table after FlashAttention-3's keywords are checked: page_table is its FA3 name, pack_gqa and
    sm_margin are performance hints (ignored once checked), and those in _FA3_NOT_SUPPORTED must be neutral."""
    _checks.check_hint("pack_gqa", pack_gqa)
    _checks.check_hint("sm_margin", sm_margin)
    for name, value in extra_kwargs.items():
        if name not in _FA3_NOT_SUPPORTED:
            raise TypeError(f"unexpected keyword argument {name!r} (not a FlashAttention-2/3 argument)")
        neutral = _FA3_NOT_SUPPORTED[name]
        if not (value is neutral or type(value) is type(neutral) and value == neutral):
            raise NotImplementedError(f"flash4.flash_attn_with_kvcache does not support {name}; pass {neutral!r}")
    if page_table is None:
        return block_table
    if block_table is not None:
        raise ValueError("block_table and page_table are one argument (FlashAttention-2's and -3's names for the "
                         "paged cache's table); pass one of them")
    return page_table


def check_device_values(cache_seqlens, seqlen_new, capacity, cache_slots, cache_batch_idx=None, block_table=None,
                        page_size=0):
    """Check the device-side int32 tensors against the cache (one copy to the host, so the stream is waited
    for): every sequence's appended rows fit its capacity, cache_batch_idx names one of the cache_slots cache
    sequences, and the block_table entries of the pages a sequence uses name one of the cache_slots pages
    (entries past them are never read and may hold anything). cache_seqlens None: every sequence is full."""
    if cache_seqlens is None:
        reference = block_table if block_table is not None else cache_batch_idx
        cache_seqlens = torch.full((reference.shape[0],), capacity, dtype=torch.int32, device=reference.device)
    lengths = cache_seqlens.long()
    bad = {"cache_seqlens": (lengths < 0) | (lengths > capacity - seqlen_new)}
    if cache_batch_idx is not None:
        bad["cache_batch_idx"] = (cache_batch_idx < 0) | (cache_batch_idx >= cache_slots)
    if block_table is not None:
        pages_used = (lengths.clamp(min=0) + seqlen_new + page_size - 1) // page_size
        used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages_used[:, None]
        bad["block_table"] = used & ((block_table < 0) | (block_table >= cache_slots))
    flags = torch.stack([b.any() for b in bad.values()]).tolist()
    if not any(flags):
        return
    name = list(bad)[flags.index(True)]
    where = tuple(torch.nonzero(bad[name])[0].tolist())
    index = "".join(f"[{i}]" for i in where)
    value = {"cache_seqlens": cache_seqlens, "cache_batch_idx": cache_batch_idx, "block_table": block_table}[name][where]
    allowed = {
        "cache_seqlens": f"[0, {capacity - seqlen_new}] (the cache holds {capacity} keys per sequence and "
                         f"{seqlen_new} are appended)",
        "cache_batch_idx": f"[0, {cache_slots}) (the sequences of k_cache)",
        "block_table": f"[0, {cache_slots}) (the pages of k_cache) for the pages sequence {where[0]} uses",
    }[name]
    raise ValueError(f"{name}{index} = {int(value)}; it must lie in {allowed}")


def _has_address(t):
    """False for the fake tensors of tracing (torch.compile, FakeTensorMode), which have no address; checked
    for compiling first, since dynamo refuses to trace is_fake."""
    return not torch.compiler.is_compiling() and not is_fake(t)


def _check_tensors(q, k_cache, v_cache, k, v, paged):
    layout = "(num_pages, page_size, heads_kv, head_dim)" if paged else "(cache_batch, capacity, heads_kv, head_dim)"
    named = [("q", q, "(batch, seqlen_q, heads_q, head_dim)"), ("k_cache", k_cache, layout),
             ("v_cache", v_cache, layout)]
    if (k is None) != (v is None):
        raise ValueError("k and v: pass both (to append them to the cache) or neither")
    if k is not None:
        named += [("k", k, "(batch, seqlen_new, heads_kv, head_dim)"), ("v", v, "(batch, seqlen_new, heads_kv, head_dim)")]
    for name, t, shape in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda" or t.device != q.device:
            raise ValueError(f"{name} is on {t.device}; flash4 runs on CUDA tensors, all on q's device ({q.device})")
        if t.dtype not in DTYPES or t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype}; flash4 supports torch.bfloat16 and torch.float16, one "
                            f"dtype for all tensors (q has {q.dtype})")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D {shape}, got shape {tuple(t.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):  # written in place, so never copied
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dimension, got strides {t.stride()}; it is "
                             f"updated in place, so flash4 cannot copy it")
    batch, _, heads_q, head_dim = q.shape
    head_dim_v = v_cache.shape[-1]
    if min(q.shape) < 1 or min(k_cache.shape) < 1:
        raise ValueError(f"q {tuple(q.shape)} and k_cache {tuple(k_cache.shape)} must have no empty dimension")
    for name, dim in (("q", head_dim), ("v_cache", head_dim_v)):
        if dim not in HEAD_DIMS:
            raise ValueError(f"{name} has head_dim {dim}; flash_attn_with_kvcache supports head dims that are "
                             f"multiples of 8 from 8 to 256")
    if v_cache.shape[:-1] != k_cache.shape[:-1] or k_cache.shape[-1] != head_dim:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must have one shape "
                         f"but for v's head dim, with q's head_dim {head_dim} in k_cache")
    heads_kv = k_cache.shape[2]
    if heads_q % heads_kv != 0:
        raise ValueError(f"q has {heads_q} heads, not a multiple of the cache's {heads_kv} (GQA/MQA)")
    if k is not None and (k.shape[:-1] != v.shape[:-1] or k.shape[0] != batch or k.shape[2:] != k_cache.shape[2:]
                          or v.shape[-1] != head_dim_v):
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (batch={batch}, seqlen_new, "
                         f"heads_kv={heads_kv}, head_dim={head_dim} for k and {head_dim_v} for v)")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        step = _CHUNK_BYTES // t.element_size()
        misaligned = _has_address(t) and t.data_ptr() % _CHUNK_BYTES
        if misaligned or any(size > 1 and (s <= 0 or s % step) for size, s in zip(t.shape[:-1], t.stride()[:-1])):
            raise ValueError(f"{name} must start at a 16-byte aligned address and have strides that are positive "
                             f"multiples of {step} elements (got strides {t.stride()}); it is updated in place, so "
                             f"flash4 cannot copy it")


def _cache_seqlens_tensor(cache_seqlens, q, capacity, seqlen_new):
    """cache_seqlens as an int32 (batch,) tensor on q's device, or None (every sequence fills the cache)."""
    if cache_seqlens is None:
        if seqlen_new > 0:
            raise ValueError("cache_seqlens is None but k and v are given: appending needs cache_seqlens (where the "
                             "new rows go)")
        return None
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        _check_int("cache_seqlens", cache_seqlens, low=0, high=capacity - seqlen_new)
        return torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    _check_index_tensor("cache_seqlens", cache_seqlens, q, rows=q.shape[0])
    return cache_seqlens


def _check_index_tensor(name, t, q, rows, dim=1):
    """An int32 tensor on q's device with `rows` rows, `dim` dimensions and a contiguous last dimension."""
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (int32), got {type(t).__name__}")
    if t.device != q.device or t.dtype != torch.int32:
        raise TypeError(f"{name} must be an int32 tensor on {q.device}, got {t.dtype} on {t.device}")
    if t.dim() != dim or t.shape[0] != rows or t.stride(-1) != 1 or min(t.shape) < 1:
        raise ValueError(f"{name} must be {dim}-D with {rows} (batch) rows and a contiguous last dimension, got "
                         f"shape {tuple(t.shape)} with strides {t.stride()}")


def kvcache_params(q, k_cache, v_cache, k, v, out, lse, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
                   causal, window_left, window_right, softcap, num_splits):
    """flash4_kvcache_params for these tensors (any device: the CPU tests fill it from CPU tensors)."""
    p = _kvcache_abi.KvcacheParams()
    p.struct_size = ctypes.sizeof(p)
    p.dtype = DTYPES[q.dtype]
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("o", out)):
        setattr(p, name, t.data_ptr())
        setattr(p, f"{name}_strides", _launch._strides(t))
    p.lse = lse.data_ptr()
    p.batch, p.seqlen_q, p.heads_q, p.head_dim = q.shape
    p.head_dim_v = v_cache.shape[-1]
    p.heads_kv = k_cache.shape[2]
    if k is not None:
        p.k_new, p.v_new = k.data_ptr(), v.data_ptr()
        p.k_new_strides, p.v_new_strides = _launch._strides(k), _launch._strides(v)
        p.seqlen_new = k.shape[1]
    if block_table is not None:
        p.block_table = block_table.data_ptr()
        p.block_table_stride = block_table.stride(0)
        p.max_pages_per_seq = block_table.shape[1]
        p.num_pages, p.page_size = k_cache.shape[0], k_cache.shape[1]
    else:
        p.cache_batch, p.cache_seqlen = k_cache.shape[0], k_cache.shape[1]
    p.cache_seqlens = None if cache_seqlens is None else cache_seqlens.data_ptr()
    p.cache_batch_idx = None if cache_batch_idx is None else cache_batch_idx.data_ptr()
    p.softmax_scale, p.causal, p.softcap = softmax_scale, int(causal), softcap
    p.window_left, p.window_right = window_left, window_right
    p.num_splits = num_splits
    return p


@functools.cache
def _library():
    """The opened library with the kvcache entry points declared (once; a failure is not cached)."""
    return _kvcache_abi.bind(load_library())


def _empty_outputs(q, v_cache):
    """out (B, Sq, Hq, v's head dim) and lse (B, Hq, Sq)."""
    out = q.new_empty((*q.shape[:-1], v_cache.shape[-1]))
    return out, q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("flash4::kvcache", mutates_args=("k_cache", "v_cache"), device_types="cuda")
def kvcache(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
    cache_seqlens: Optional[Tensor], cache_batch_idx: Optional[Tensor], block_table: Optional[Tensor],
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float, num_splits: int,
) -> tuple[Tensor, Tensor]:
    """The append (into k_cache / v_cache, in place) and the attention; out (B, Sq, Hq, Dv), lse (B, Hq, Sq)."""
    q, _ = _launch.tma_ready(q)  # 16-byte aligned with 16-byte strides, else a packed copy (the cache never is)
    if k is not None:
        (k, _), (v, _) = _launch.tma_ready(k), _launch.tma_ready(v)
    out, lse = _empty_outputs(q, v_cache)
    params = kvcache_params(q, k_cache, v_cache, k, v, out, lse, cache_seqlens, cache_batch_idx, block_table,
                            softmax_scale, causal, window_left, window_right, softcap, num_splits)
    lib = _library()
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        error, workspace = _launch.call_library(
            lib, "kvcache", params, stream, lambda size: torch.empty(size, dtype=torch.uint8, device=q.device)
        )
        del workspace
    if error is not None:
        raise error
    return out, lse


@kvcache.register_fake
def _(q, k_cache, v_cache, *rest):
    return _empty_outputs(q, v_cache)
