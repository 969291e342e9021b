"""Argument checks of flash_attn_func / flash_attn_varlen_func: each bad argument raises before any launch,
with a message that names it. CUDA tensors are fake (FakeTensorMode), so no GPU and no library is needed.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from flash4 import flash_attn_func, flash_attn_varlen_func, ops
from flash4.interface import _values_readable, check_cu_seqlens_values

BF16, FP16 = torch.bfloat16, torch.float16


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """Fail loudly if a check were to let a call reach the library."""

    def launched():
        raise AssertionError("the call reached the library")

    monkeypatch.setattr(ops, "load_library", launched)


@pytest.fixture(autouse=True)
def fake_mode():
    with FakeTensorMode():
        yield


def t(*shape, dtype=BF16, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


def qkv(batch=2, seqlen=64, heads=8, heads_kv=None, head_dim=64, dtype=BF16):
    heads_kv = heads_kv or heads
    q = t(batch, seqlen, heads, head_dim, dtype=dtype)
    return q, t(batch, seqlen, heads_kv, head_dim, dtype=dtype), t(batch, seqlen, heads_kv, head_dim, dtype=dtype)


def call_with(**replace):
    q, k, v = qkv()
    arguments = {"q": q, "k": k, "v": v} | replace
    return flash_attn_func(**arguments)


@pytest.mark.parametrize(
    "replace, error, message",
    [
        (lambda: {"q": [1.0]}, TypeError, "q must be a torch.Tensor, got list"),
        (lambda: {"q": t(2, 64, 8, 64, device="cpu")}, ValueError, "q is on cpu; flash4 runs on CUDA tensors"),
        (lambda: {"k": t(2, 64, 8, 64, device="cpu")}, ValueError, "k is on cpu"),
        pytest.param(lambda: {"v": t(2, 64, 8, 64, device="cuda:1")}, ValueError, "v is on cuda:1 but q is on cuda:0",
                     marks=pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                                              reason="with a real CUDA runtime a (fake) cuda:1 tensor needs a second "
                                                     "device; failed on the one-GPU H200, 2026-12-02")),
        (lambda: {"q": t(2, 64, 8, 64, dtype=torch.float32)}, TypeError,
         "q has dtype torch.float32; flash4 supports torch.bfloat16 and torch.float16"),
        (lambda: {"v": t(2, 64, 8, 64, dtype=FP16)}, TypeError, "v has dtype torch.float16 but q has torch.bfloat16"),
        (lambda: {"q": t(64, 8, 64)}, ValueError,
         r"q must be 4-D \(batch, seqlen, heads, head_dim\), got shape \(64, 8, 64\)"),
        (lambda: {"k": t(2, 64, 64, 8).transpose(-1, -2)}, ValueError, "k must be contiguous in its last"),
        (lambda: {"q": t(2, 0, 8, 64)}, ValueError, r"q has shape \(2, 0, 8, 64\); every size must be in \[1"),
        (lambda: {"q": t(2, 64, 8, 80), "k": t(2, 64, 8, 80), "v": t(2, 64, 8, 80)}, ValueError,
         "q has head_dim 80; flash4 supports 64, 96, 128, 192, 256"),
        (lambda: {"k": t(2, 64, 8, 128)}, ValueError, "k has head_dim 128 but q has 64"),
        (lambda: {"v": t(2, 32, 8, 64)}, ValueError, r"v has shape \(2, 32, 8, 64\) but k has \(2, 64, 8, 64\)"),
        (lambda: {"k": t(2, 64, 3, 64), "v": t(2, 64, 3, 64)}, ValueError, "q has 8 heads, not a multiple of k's 3"),
        (lambda: {"k": t(1, 64, 8, 64), "v": t(1, 64, 8, 64)}, ValueError, "k has batch size 1 but q has 2"),
        (lambda: {"softmax_scale": -0.1}, ValueError, "softmax_scale must be positive, got -0.1"),
        (lambda: {"softmax_scale": float("nan")}, ValueError, "softmax_scale must be finite"),
        (lambda: {"softmax_scale": "0.1"}, TypeError, "softmax_scale must be a number, got str"),
        (lambda: {"softcap": -1.0}, ValueError, "softcap must be >= 0"),
        (lambda: {"window_size": 128}, TypeError, "window_size must be a pair"),
        (lambda: {"window_size": (-2, 0)}, ValueError, r"window_size\[0\] must be in \[-1, "),
        (lambda: {"window_size": (0, 1.5)}, TypeError, r"window_size\[1\] must be an int, got float"),
        (lambda: {"window_size": (-1, 4), "causal": True}, ValueError, r"window_size\[1\] = 4 contradicts causal=True"),
    ],
)
def test_bad_argument(replace, error, message):
    with pytest.raises(error, match=message):
        call_with(**replace())


def test_valid_arguments_pass_gqa_mqa_and_windows():
    for heads_kv in (8, 2, 1):
        q, k, v = qkv(heads=8, heads_kv=heads_kv, head_dim=128, dtype=FP16)
        flash_attn_func(q, k, v, causal=True, window_size=(16, -1), softcap=30.0, softmax_scale=0.1)
    flash_attn_func(*qkv(), causal=True, window_size=(-1, 0))


def varlen_call_with(**replace):
    arguments = {
        "q": t(100, 8, 64), "k": t(90, 2, 64), "v": t(90, 2, 64),
        "cu_seqlens_q": t(4, dtype=torch.int32), "cu_seqlens_k": t(4, dtype=torch.int32),
        "max_seqlen_q": 50, "max_seqlen_k": 40,
    } | replace
    return flash_attn_varlen_func(**arguments)


@pytest.mark.parametrize(
    "replace, error, message",
    [
        (lambda: {"q": t(2, 50, 8, 64)}, ValueError, r"q must be 3-D \(total_tokens, heads, head_dim\)"),
        (lambda: {"cu_seqlens_q": [0, 100]}, TypeError, "cu_seqlens_q must be a torch.Tensor"),
        (lambda: {"cu_seqlens_q": t(4, dtype=torch.int64)}, TypeError,
         "cu_seqlens_q must have dtype torch.int32, got torch.int64"),
        (lambda: {"cu_seqlens_k": t(4, dtype=torch.int32, device="cpu")}, ValueError,
         "cu_seqlens_k is on cpu but q is on cuda:0"),
        (lambda: {"cu_seqlens_q": t(2, 2, dtype=torch.int32)}, ValueError, "cu_seqlens_q must be 1-D with batch"),
        (lambda: {"cu_seqlens_k": t(1, dtype=torch.int32)}, ValueError, "cu_seqlens_k must be 1-D with batch"),
        (lambda: {"cu_seqlens_q": t(8, dtype=torch.int32)[::2]}, ValueError, "cu_seqlens_q must be contiguous"),
        (lambda: {"cu_seqlens_k": t(3, dtype=torch.int32)}, ValueError,
         "cu_seqlens_k has 3 offsets but cu_seqlens_q has 4"),
        (lambda: {"max_seqlen_q": 0}, ValueError, r"max_seqlen_q must be in \[1, "),
        (lambda: {"max_seqlen_k": 40.0}, TypeError, "max_seqlen_k must be an int, got float"),
        (lambda: {"k": t(90, 3, 64), "v": t(90, 3, 64)}, ValueError, "q has 8 heads, not a multiple of k's 3"),
    ],
)
def test_bad_varlen_argument(replace, error, message):
    with pytest.raises(error, match=message):
        varlen_call_with(**replace())


def test_valid_varlen_arguments_pass():
    varlen_call_with(causal=True, return_lse=True)


def test_offsets_of_fake_tensors_are_not_read():
    # Reading them would need data that fake tensors lack; the C ABI and the kernels see the real ones.
    assert not _values_readable(t(4, dtype=torch.int32))


@pytest.mark.parametrize(
    "offsets, message",
    [
        ([1, 5, 9], r"cu_seqlens_q\[0\] must be 0, got 1"),
        ([0, 5, 3, 9], r"cu_seqlens_q must be non-decreasing, but cu_seqlens_q\[2\] = 3 < cu_seqlens_q\[1\] = 5"),
        ([0, 5, 8], r"cu_seqlens_q\[-1\] = 8 but q has 9 rows"),
        ([0, 2, 9], "max_seqlen_q = 6 but the longest sequence in cu_seqlens_q has 7 rows"),
    ],
)
def test_bad_offsets(offsets, message):
    with pytest.raises(ValueError, match=message):
        check_cu_seqlens_values("cu_seqlens_q", offsets, "q", 9, "max_seqlen_q", 6)


def test_offsets_with_empty_sequences_pass():
    check_cu_seqlens_values("cu_seqlens_k", [0, 0, 6, 6, 9], "k", 9, "max_seqlen_k", 6)
