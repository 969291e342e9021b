"""flash_attn_varlen_func with block_table (a paged KV cache) without a GPU: argument checks on fake CUDA
tensors (nothing launched), the refusal of a call that needs a gradient, and the params struct filled from
CPU tensors.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from flash4 import _eager, _launch, flash_attn_varlen_func

BF16 = torch.bfloat16
OPTIONS = _launch.Options(softmax_scale=0.125, causal=True, window_left=-1, window_right=0, softcap=0.0,
                          deterministic=False)


@pytest.fixture
def no_launch(monkeypatch):
    def launched():
        raise AssertionError("the call reached the library")

    monkeypatch.setattr(_launch, "load_library", launched)


def t(*shape, dtype=BF16, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


def paged_call_with(**replace):
    arguments = {
        "q": t(100, 8, 64), "k": t(40, 16, 2, 64), "v": t(40, 16, 2, 64),
        "cu_seqlens_q": t(4, dtype=torch.int32), "cu_seqlens_k": t(4, dtype=torch.int32),
        "max_seqlen_q": 50, "max_seqlen_k": 160, "block_table": t(3, 10, dtype=torch.int32),
    } | replace
    return flash_attn_varlen_func(**arguments)


@pytest.mark.parametrize(
    "replace, error, message",
    [
        (lambda: {"k": t(640, 2, 64), "v": t(640, 2, 64)}, ValueError,
         r"k must be 4-D \(num_pages, page_size, heads, head_dim\) with block_table"),
        (lambda: {"v": t(40, 32, 2, 64)}, ValueError, r"v has shape \(40, 32, 2, 64\) but k has"),
        (lambda: {"k": t(40, 24, 2, 64), "v": t(40, 24, 2, 64)}, ValueError, "page_size that is a positive multiple of 16"),
        (lambda: {"k": t(40, 16, 3, 64), "v": t(40, 16, 3, 64)}, ValueError, "q has 8 heads, not a multiple of k's 3"),
        (lambda: {"k": t(40, 16, 2, 128), "v": t(40, 16, 2, 128)}, ValueError, "k has head_dim 128 but q has 64"),
        (lambda: {"block_table": t(3, 10, dtype=torch.int64)}, TypeError, "block_table must have dtype torch.int32"),
        (lambda: {"block_table": t(30, dtype=torch.int32)}, ValueError, r"block_table must be 2-D \(batch, max_pages\)"),
        (lambda: {"block_table": t(3, 10, dtype=torch.int32, device="cpu")}, ValueError, "block_table is on cpu"),
        (lambda: {"block_table": t(3, 20, dtype=torch.int32)[:, ::2]}, ValueError,
         "block_table must be contiguous in its last dimension"),
        (lambda: {"block_table": t(2, 10, dtype=torch.int32)}, ValueError, "block_table 2 rows; they must be"),
        (lambda: {"max_seqlen_k": 161}, ValueError, "max_seqlen_k = 161 but a block_table row holds 10 pages of 16"),
        (lambda: {"max_seqlen_q": -1}, ValueError, r"max_seqlen_q must be in \[0, "),
        (lambda: {"cu_seqlens_k": t(4, dtype=torch.int64)}, TypeError, "cu_seqlens_k must have dtype torch.int32"),
        (lambda: {"causal": 1}, TypeError, "causal must be a bool"),
        # The pages are read in place (a copy of the cache would cost more than the call): never copied.
        (lambda: {"k": t(40, 16, 2, 128)[..., ::2]}, ValueError, "k must be contiguous in its last"),
        (lambda: {"v": t(40, 16, 2, 128)[..., ::2]}, ValueError, "v must be contiguous in its last"),
    ],
)
def test_bad_paged_argument(no_launch, replace, error, message):
    with FakeTensorMode():
        with pytest.raises(error, match=message):
            paged_call_with(**replace())


def test_a_call_that_needs_a_gradient_is_refused(no_launch):
    with FakeTensorMode():
        q = t(100, 8, 64).requires_grad_()
        with pytest.raises(NotImplementedError, match="no backward through a paged KV cache"):
            paged_call_with(q=q)
        with torch.no_grad():  # the same call without a gradient gets past that check (and stops at the next)
            with pytest.raises(NotImplementedError, match="eager mode only"):
                paged_call_with(q=q)


@pytest.mark.parametrize(
    "replace, error, message",
    [
        (lambda: {"learnable_sink": t(3, dtype=torch.float32)}, ValueError, r"learnable_sink has shape \(3,\)"),
        (lambda: {"seqused_q": t(2, dtype=torch.int32)}, ValueError,
         r"seqused_q must be 1-D with one entry per sequence \(3\)"),
        (lambda: {"seqused_k": t(3, dtype=torch.int64)}, TypeError, "seqused_k must have dtype torch.int32"),
        (lambda: {"learnable_sink": t(8, dtype=torch.float32).requires_grad_()}, NotImplementedError,
         "no backward through a paged KV cache"),
    ],
)
def test_bad_sink_or_seqused_with_a_paged_cache(no_launch, replace, error, message):
    with FakeTensorMode():
        with pytest.raises(error, match=message):
            paged_call_with(**replace())


def test_sink_and_seqused_reach_the_launch_with_a_paged_cache(monkeypatch):
    # The launch sees the sink as the kernels read it (float32, contiguous) and seqused as given, beside the
    # block table.
    seen = {}

    def forward(q, k, v, options, varlen, block_table, extras):
        seen.update(block_table=block_table, extras=extras)
        return torch.empty_like(q), torch.empty(q.shape[1], q.shape[0], device=q.device)

    monkeypatch.setattr(_launch, "forward", forward)
    monkeypatch.setattr(_eager, "eager_call", lambda *tensors: True)
    with FakeTensorMode():
        sink, used_q, used_k = t(8), t(3, dtype=torch.int32), t(3, dtype=torch.int32)
        table = t(3, 10, dtype=torch.int32)
        paged_call_with(block_table=table, learnable_sink=sink, seqused_q=used_q, seqused_k=used_k)
    assert seen["block_table"] is table
    extras = seen["extras"]
    assert extras.sink.dtype == torch.float32 and extras.sink.shape == (8,) and extras.sink.is_contiguous()
    assert extras.seqused_q is used_q and extras.seqused_k is used_k


def test_fake_tensors_are_refused_after_the_argument_checks(no_launch):
    with FakeTensorMode():
        with pytest.raises(NotImplementedError, match="block_table is supported in eager mode only"):
            paged_call_with()
        # q with a strided last dimension passes the checks: the launch copies it (flash4._launch.forward).
        with pytest.raises(NotImplementedError, match="block_table is supported in eager mode only"):
            paged_call_with(q=t(100, 8, 128)[..., ::2])


def test_params_from_tensors():
    q = torch.zeros(100, 8, 64, dtype=BF16)
    k = torch.zeros(40, 16, 2, 64, dtype=BF16)
    table = torch.zeros(3, 10, dtype=torch.int32)
    cu = torch.zeros(4, dtype=torch.int32)
    out, lse = torch.zeros_like(q), torch.zeros(8, 100)
    varlen = _launch.Varlen(cu, cu, 50, 150)
    p = _launch.fwd_params(q, k, k, out, lse, OPTIONS, varlen, block_table=table)
    assert (p.block_table, p.block_table_stride, p.page_size, p.num_pages) == (table.data_ptr(), 10, 16, 40)
    assert (p.k_strides.batch, p.k_strides.seq, p.k_strides.head) == (16 * 2 * 64, 2 * 64, 64)
    # total_k bounds the key lengths (flash4.h): batch * max_seqlen_k, so cu_seqlens_k is never read back.
    assert (p.batch, p.max_seqlen_k, p.total_k, p.total_q) == (3, 150, 3 * 150, 100)
    unpaged = _launch.fwd_params(q, torch.zeros(90, 2, 64, dtype=BF16), k, out, lse, OPTIONS, varlen)
    assert (unpaged.block_table, unpaged.page_size, unpaged.num_pages, unpaged.total_k) == (None, 0, 0, 90)
