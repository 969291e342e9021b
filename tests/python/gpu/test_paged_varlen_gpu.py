"""flash_attn_varlen_func with block_table on the GPU (H200): against the fp32 reference on the gathered
cache (the tolerance rule of test_gpu_ops.py), and bit for bit against the same call on the contiguous
keys (the kernel sees the same key blocks either way: the tail rows differ but are masked). Skipped without
a CUDA device.
"""

import pytest
import torch

from flash4 import flash_attn_varlen_func

from test_gpu_ops import LSE_FLOOR, assert_within_rule, run, varlen_attention, varlen_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(scope="module", autouse=True)
def hopper():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"flash4's kernels need sm_90 (Hopper); this is {torch.cuda.get_device_name()}")


def paged(k, v, cu_k, page_size, spare_pages=3):
    """k, v scattered into shuffled pages of a cache full of junk: (k_pages, v_pages, block_table)."""
    lengths = (cu_k[1:] - cu_k[:-1]).tolist()
    pages = [-(-n // page_size) for n in lengths]
    num_pages = sum(pages) + spare_pages
    order = torch.randperm(num_pages, device="cuda")
    table = torch.full((len(lengths), max(pages) + 1), -1, dtype=torch.int32, device="cuda")  # -1: never read
    caches = [8 * torch.randn(num_pages, page_size, *k.shape[1:], dtype=k.dtype, device="cuda") for _ in "kv"]
    start, used = 0, 0
    for b, n in enumerate(lengths):
        table[b, : pages[b]] = order[used: used + pages[b]].int()
        used += pages[b]
        for cache, source in zip(caches, (k, v)):
            rows = cache[table[b, : pages[b]].long()].flatten(0, 1)
            rows[:n] = source[start: start + n]
            cache[table[b, : pages[b]].long()] = rows.view(pages[b], page_size, *k.shape[1:])
        start += n
    return caches[0], caches[1], table


@pytest.mark.parametrize("head_dim", [128, 192])
@pytest.mark.parametrize("page_size", [16, 48, 64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_varlen_forward(head_dim, page_size, causal):
    torch.manual_seed(page_size + head_dim)
    lengths_q, lengths_k = [5, 0, 300, 1, 129], [0, 7, 200, 64, 517]  # empty sequences on either side
    q, k, v, cu_q, cu_k = varlen_inputs(lengths_q, lengths_k, head_dim=head_dim)
    k_pages, v_pages, table = paged(k, v, cu_k, page_size)
    k_before = k_pages.clone()
    out, lse = run(flash_attn_varlen_func, q, k_pages, v_pages, cu_q, cu_k, max(lengths_q), max(lengths_k),
                   causal=causal, block_table=table, return_lse=True)
    assert out.shape == q.shape and lse.shape == (8, q.shape[0])
    assert torch.equal(k_pages, k_before), "the cache was written"
    ref_out, ref_lse = varlen_attention(q, k, v, cu_q, cu_k, causal)
    naive_out, naive_lse = varlen_attention(q, k, v, cu_q, cu_k, causal, precise=False)
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, LSE_FLOOR)
    contiguous_out, contiguous_lse = run(flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lengths_q),
                                         max(lengths_k), causal=causal, return_lse=True)
    assert torch.equal(out, contiguous_out) and torch.equal(lse, contiguous_lse)


def test_bounds_read_from_the_offsets():
    lengths_q, lengths_k = [3, 40], [70, 33]
    q, k, v, cu_q, cu_k = varlen_inputs(lengths_q, lengths_k)
    k_pages, v_pages, table = paged(k, v, cu_k, 16)
    out = run(flash_attn_varlen_func, q, k_pages, v_pages, cu_q, cu_k, None, None, block_table=table)
    expected = run(flash_attn_varlen_func, q, k, v, cu_q, cu_k, 40, 70)
    assert torch.equal(out, expected)


def test_a_gradient_through_the_cache_is_refused():
    q, k, v, cu_q, cu_k = varlen_inputs([4], [20], requires_grad=True)
    k_pages, v_pages, table = paged(k.detach(), v.detach(), cu_k, 16)
    with pytest.raises(NotImplementedError, match="no backward through a paged KV cache"):
        flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 4, 20, block_table=table)


@pytest.mark.parametrize("page_size", [16, 64])
def test_sinks_and_seqused_with_a_paged_cache_equal_the_contiguous_call(page_size):
    # The paged producer delivers the same key blocks as the contiguous one, and sinks and seqused act in the
    # consumers and the sequence bounds, so the two calls agree bit for bit on the rows seqused_q keeps.
    torch.manual_seed(page_size)
    lengths_q, lengths_k = [5, 0, 300, 129], [40, 7, 200, 517]
    used_q, used_k = [5, 0, 170, 1], [33, 0, 200, 260]
    q, k, v, cu_q, cu_k = varlen_inputs(lengths_q, lengths_k)
    k_pages, v_pages, table = paged(k, v, cu_k, page_size)
    extras = {"learnable_sink": torch.randn(8, device="cuda"),
              "seqused_q": torch.tensor(used_q, dtype=torch.int32, device="cuda"),
              "seqused_k": torch.tensor(used_k, dtype=torch.int32, device="cuda")}
    bounds = (cu_q, cu_k, max(lengths_q), max(lengths_k))
    out, lse = run(flash_attn_varlen_func, q, k_pages, v_pages, *bounds, causal=True, block_table=table,
                   return_lse=True, **extras)
    expected_out, expected_lse = run(flash_attn_varlen_func, q, k, v, *bounds, causal=True, return_lse=True,
                                     **extras)
    kept = torch.cat([torch.arange(n, device="cuda") < u for n, u in zip(lengths_q, used_q)])
    assert torch.equal(out[kept], expected_out[kept]) and torch.equal(lse[:, kept], expected_lse[:, kept])
