"""flash_attn_with_kvcache on the GPU (H200): against an fp32 torch computation on the gathered cache (the
tolerance rule of test_gpu_ops.py), appends landing in the cache in place, paged caches, splits, head dims
served by a wider kernel and v's head dim apart from q's (on rows padded with NaN that must stay unread and
unwritten), the host check of device values, CUDA graph capture and torch.compile. Skipped without a CUDA
device.
"""

import pytest
import torch

from flash4 import Flash4Error, flash_attn_with_kvcache

from test_gpu_ops import NOT_BUILT, assert_within_rule, attention, keep_mask, LSE_FLOOR

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

BF16 = torch.bfloat16


@pytest.fixture(scope="module", autouse=True)
def hopper():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"flash4's kernels need sm_90 (Hopper); this is {torch.cuda.get_device_name()}")


def run(*args, **kwargs):
    try:
        return flash_attn_with_kvcache(*args, **kwargs)
    except Flash4Error as err:
        if err.status in NOT_BUILT:
            pytest.skip(f"not in this build: {err}")
        raise


def randn(*shape, pad=0, dtype=BF16):
    """A random CUDA tensor of `shape`; with pad > 0 a view of rows of shape[-1] + pad elements whose padding
    is NaN (padding(t) returns it)."""
    full = torch.randn(*shape[:-1], shape[-1] + pad, dtype=dtype, device="cuda")
    full[..., shape[-1]:] = float("nan")
    return full[..., : shape[-1]]


def padding(t):
    """The NaN padding past t's rows (empty when t was made without one)."""
    return t._base[..., t.shape[-1]:] if t._base is not None else t[..., :0]


def make_cache(batch, capacity, heads_kv, head_dim, page_size, dtype=BF16, head_dim_v=None, pad=0):
    """(k_cache, v_cache, block_table or None, gather) where gather(cache, b, n) is sequence b's first n rows."""
    dims = (head_dim, head_dim_v or head_dim)
    if not page_size:
        k, v = (randn(batch, capacity, heads_kv, d, pad=pad, dtype=dtype) for d in dims)
        return k, v, None, lambda cache, b, n: cache[b, :n]
    pages_per_seq = -(-capacity // page_size)
    num_pages = batch * pages_per_seq + 3
    k, v = (randn(num_pages, page_size, heads_kv, d, pad=pad, dtype=dtype) for d in dims)
    table = torch.randperm(num_pages, device="cuda")[: batch * pages_per_seq].view(batch, pages_per_seq).int()

    def gather(cache, b, n):
        return cache[table[b].long()].flatten(0, 1)[:n]

    return k, v, table, gather


def check_case(batch=3, seqlen_q=1, seqlen_new=1, heads_q=8, heads_kv=2, head_dim=128, capacity=300, page_size=0,
               lens=(0, 37, 250), causal=False, window=(-1, -1), softcap=0.0, num_splits=0, head_dim_v=None, pad=0):
    torch.manual_seed(0)
    head_dim_v = head_dim_v or head_dim
    k_cache, v_cache, table, gather = make_cache(batch, capacity, heads_kv, head_dim, page_size,
                                                 head_dim_v=head_dim_v, pad=pad)
    q = randn(batch, seqlen_q, heads_q, head_dim, pad=pad)
    k_new = randn(batch, seqlen_new, heads_kv, head_dim, pad=pad)
    v_new = randn(batch, seqlen_new, heads_kv, head_dim_v, pad=pad)
    cache_seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    k_before, v_before = k_cache.clone(), v_cache.clone()
    out, lse = run(q, k_cache, v_cache, k=k_new if seqlen_new else None, v=v_new if seqlen_new else None,
                   cache_seqlens=cache_seqlens, block_table=table, causal=causal, window_size=window, softcap=softcap,
                   num_splits=num_splits, return_softmax_lse=True)
    assert tuple(out.shape) == (batch, seqlen_q, heads_q, head_dim_v)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        assert padding(t).isnan().all(), f"the padding past {name}'s rows was written"
    scale = head_dim**-0.5
    for b in range(batch):
        n = lens[b]
        keys = torch.cat([gather(k_before, b, n), k_new[b]]) if seqlen_new else gather(k_before, b, n)
        values = torch.cat([gather(v_before, b, n), v_new[b]]) if seqlen_new else gather(v_before, b, n)
        # The appended rows are in the cache now, right after the cached ones.
        torch.testing.assert_close(gather(k_cache, b, n + seqlen_new), keys, rtol=0, atol=0)
        torch.testing.assert_close(gather(v_cache, b, n + seqlen_new), values, rtol=0, atol=0)
        keep = keep_mask(seqlen_q, keys.shape[0], causal, window)
        ref = attention(q[b:b + 1], keys[None], values[None], scale, keep, softcap)
        naive = attention(q[b:b + 1], keys[None], values[None], scale, keep, softcap, precise=False)
        assert_within_rule(f"out[{b}]", out[b:b + 1], ref[0], naive[0])
        assert_within_rule(f"lse[{b}]", lse[b:b + 1], ref[1], naive[1], LSE_FLOOR)
    return out


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("page_size", [0, 16, 64, 256])
def test_decode_step_with_append(head_dim, page_size):
    check_case(head_dim=head_dim, page_size=page_size, capacity=512, lens=(0, 63, 511))


# Head dims without a decode kernel of their own (40 -> 64, 80/96 -> 128, 136 -> 192, 200 -> 256), the full
# widths 192 and 256, and v's head dim apart from q's; rows padded with NaN, appends, paged or not, split or not.
@pytest.mark.parametrize("head_dim, head_dim_v, page_size, num_splits", [
    (40, None, 0, 1), (80, None, 16, 3), (96, None, 0, 0), (136, None, 64, 2), (192, None, 0, 3),
    (200, None, 48, 1), (256, None, 0, 4), (192, 128, 16, 1), (192, 128, 0, 3), (64, 256, 0, 2),
])
def test_head_dims_on_padded_rows(head_dim, head_dim_v, page_size, num_splits):
    check_case(head_dim=head_dim, head_dim_v=head_dim_v, page_size=page_size, num_splits=num_splits, pad=8,
               seqlen_q=2, seqlen_new=2, causal=True, capacity=400, lens=(0, 100, 398))


@pytest.mark.parametrize("num_splits", [1, 2, 7, 64])
def test_split_counts(num_splits):
    check_case(capacity=4096, lens=(4000, 100, 2048), num_splits=num_splits, page_size=64)


def test_speculative_causal_gqa_window_softcap():
    check_case(seqlen_q=4, seqlen_new=4, heads_q=32, heads_kv=4, causal=True, window=(50, 0), softcap=20.0,
               capacity=700, page_size=32, lens=(10, 300, 600))


def test_mqa_without_append_and_full_cache():
    torch.manual_seed(1)
    q = torch.randn(2, 1, 8, 64, dtype=BF16, device="cuda")
    k, v = (torch.randn(2, 100, 1, 64, dtype=BF16, device="cuda") for _ in range(2))
    out, lse = run(q, k, v, return_softmax_lse=True)  # cache_seqlens None: every sequence holds 100 keys
    keep = keep_mask(1, 100, False, (-1, -1))
    ref, naive = attention(q, k, v, 64**-0.5, keep), attention(q, k, v, 64**-0.5, keep, precise=False)
    assert_within_rule("out", out, ref[0], naive[0])
    assert_within_rule("lse", lse, ref[1], naive[1], LSE_FLOOR)


def test_out_of_range_values_are_refused_in_eager_mode():
    q = torch.randn(2, 1, 8, 64, dtype=BF16, device="cuda")
    k, v = (torch.randn(2, 100, 2, 64, dtype=BF16, device="cuda") for _ in range(2))
    new = torch.randn(2, 1, 2, 64, dtype=BF16, device="cuda")
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] = 100"):
        flash_attn_with_kvcache(q, k, v, k=new, v=new, cache_seqlens=torch.tensor([5, 100], dtype=torch.int32,
                                                                                  device="cuda"))


def test_an_int_cache_seqlens_does_not_wait_for_the_stream():
    # Nothing device-side to check: an int cache_seqlens is checked on the host as it is.
    q = torch.randn(2, 1, 8, 64, dtype=BF16, device="cuda")
    k, v = (torch.randn(2, 100, 2, 64, dtype=BF16, device="cuda") for _ in range(2))
    new = torch.randn(2, 1, 2, 64, dtype=BF16, device="cuda")
    lens = torch.tensor([7, 7], dtype=torch.int32, device="cuda")
    run(q, k, v, k=new, v=new, cache_seqlens=5)  # opens the library outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        flash_attn_with_kvcache(q, k, v, k=new, v=new, cache_seqlens=6)
        with pytest.raises(RuntimeError, match="synchroniz"):  # a tensor is checked on the host: the check can fail
            flash_attn_with_kvcache(q, k, v, k=new, v=new, cache_seqlens=lens)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_strided_q_and_appended_rows_are_copied_and_page_table_is_block_table():
    torch.manual_seed(4)
    q = torch.randn(2, 3, 8, 256, dtype=BF16, device="cuda")[..., ::2]
    new = [torch.randn(2, 3, 2, 256, dtype=BF16, device="cuda")[..., ::2] for _ in "kv"]
    caches = [torch.randn(8, 64, 2, 128, dtype=BF16, device="cuda") for _ in "kv"]
    table = torch.randperm(8, device="cuda")[:6].view(2, 3).int()
    copies = [t.clone() for t in caches]
    lens = torch.tensor([10, 100], dtype=torch.int32, device="cuda")
    out = run(q, *caches, k=new[0], v=new[1], cache_seqlens=lens, page_table=table, causal=True, pack_gqa=True)
    expected = run(q.contiguous(), *copies, k=new[0].contiguous(), v=new[1].contiguous(), cache_seqlens=lens,
                   block_table=table, causal=True)
    assert torch.equal(out, expected) and all(torch.equal(a, b) for a, b in zip(caches, copies))


def test_cuda_graph_replays_decode_steps():
    torch.manual_seed(2)
    q = torch.randn(2, 1, 8, 128, dtype=BF16, device="cuda")
    k_cache, v_cache = (torch.zeros(2, 64, 2, 128, dtype=BF16, device="cuda") for _ in range(2))
    new = torch.randn(2, 1, 2, 128, dtype=BF16, device="cuda")
    lens = torch.zeros(2, dtype=torch.int32, device="cuda")
    run(q, k_cache, v_cache, k=new, v=new, cache_seqlens=lens)  # warm-up (loads the library)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k=new, v=new, cache_seqlens=lens)
    for step in range(1, 4):  # each replay appends at the next position
        lens.fill_(step)
        new.normal_()
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(k_cache[:, step], new[:, 0], rtol=0, atol=0)
    assert torch.isfinite(out).all()


def test_torch_compile_fullgraph():
    torch.manual_seed(3)
    q = torch.randn(2, 1, 8, 128, dtype=BF16, device="cuda")
    k_cache, v_cache = (torch.randn(2, 64, 2, 128, dtype=BF16, device="cuda") for _ in range(2))
    lens = torch.tensor([3, 40], dtype=torch.int32, device="cuda")
    compiled = torch.compile(lambda q, k, v, n: flash_attn_with_kvcache(q, k, v, cache_seqlens=n), fullgraph=True)
    eager = run(q, k_cache, v_cache, cache_seqlens=lens)
    torch.testing.assert_close(compiled(q, k_cache, v_cache, lens), eager, rtol=0, atol=0)
