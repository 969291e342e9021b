"""Argument checks of the public functions and the ops: each bad argument raises before any launch, with a
message that names it; FlashAttention's arguments flash4 cannot honour raise NotImplementedError naming them.
CUDA tensors are fake (FakeTensorMode), so no GPU and no library is needed.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flash4
from flash4 import _launch, flash_attn_func, flash_attn_varlen_func, ops
from flash4._checks import check_cu_seqlens_values
from flash4.interface import _values_readable, make_options

BF16, FP16 = torch.bfloat16, torch.float16


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """Fail loudly if a check were to let a call reach the library."""

    def launched():
        raise AssertionError("the call reached the library")

    monkeypatch.setattr(_launch, "load_library", launched)


@pytest.fixture(autouse=True)
def fake_mode():
    with FakeTensorMode():
        yield


def t(*shape, dtype=BF16, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


def qkv(batch=2, seqlen=64, heads=8, heads_kv=None, head_dim=64, dtype=BF16, seqlen_k=None):
    heads_kv = heads_kv or heads
    seqlen_k = seqlen if seqlen_k is None else seqlen_k
    q = t(batch, seqlen, heads, head_dim, dtype=dtype)
    return q, t(batch, seqlen_k, heads_kv, head_dim, dtype=dtype), t(batch, seqlen_k, heads_kv, head_dim, dtype=dtype)


def call_with(**replace):
    q, k, v = qkv()
    arguments = {"q": q, "k": k, "v": v} | replace
    return flash_attn_func(**arguments)


ONE_GPU = torch.cuda.is_available() and torch.cuda.device_count() < 2

BAD_ARGUMENTS = [
    (lambda: {"q": [1.0]}, TypeError, "q must be a torch.Tensor, got list"),
    (lambda: {"q": t(2, 64, 8, 64, device="cpu")}, ValueError, "q is on cpu; flash4 runs on CUDA tensors"),
    (lambda: {"k": t(2, 64, 8, 64, device="cpu")}, ValueError, "k is on cpu"),
    pytest.param(lambda: {"v": t(2, 64, 8, 64, device="cuda:1")}, ValueError, "v is on cuda:1 but q is on cuda:0",
                 marks=pytest.mark.skipif(ONE_GPU, reason="with a real CUDA runtime a (fake) cuda:1 tensor needs a "
                                                          "second device; failed on the one-GPU H200, 2026-12-02")),
    (lambda: {"q": t(2, 64, 8, 64, dtype=torch.float32)}, TypeError,
     "q has dtype torch.float32; flash4 supports torch.bfloat16 and torch.float16"),
    (lambda: {"v": t(2, 64, 8, 64, dtype=FP16)}, TypeError, "v has dtype torch.float16 but q has torch.bfloat16"),
    (lambda: {"q": t(64, 8, 64)}, ValueError,
     r"q must be 4-D \(batch, seqlen, heads, head_dim\), got shape \(64, 8, 64\)"),
    (lambda: {"q": t(0, 64, 8, 64), "k": t(0, 64, 8, 64), "v": t(0, 64, 8, 64)}, ValueError,
     r"q has shape \(0, 64, 8, 64\); its batch must be in \[1, 2\*\*31 - 1\]"),
    (lambda: {"k": t(2, 64, 0, 64), "v": t(2, 64, 0, 64)}, ValueError, r"k has shape .*; its heads must be in \[1"),
    (lambda: {"q": t(2, 64, 8, 84), "k": t(2, 64, 8, 84), "v": t(2, 64, 8, 84)}, NotImplementedError,
     "q has head_dim 84; flash4 implements head dims that are multiples of 8 from 8 to 256"),
    (lambda: {"q": t(2, 64, 8, 264), "k": t(2, 64, 8, 264), "v": t(2, 64, 8, 264)}, NotImplementedError,
     "q has head_dim 264; flash4 implements head dims that are multiples of 8 from 8 to 256"),
    (lambda: {"v": t(2, 64, 8, 4)}, NotImplementedError, "v has head_dim 4; flash4 implements head dims"),
    (lambda: {"k": t(2, 64, 8, 128)}, ValueError, "k has head_dim 128 but q has 64"),
    (lambda: {"v": t(2, 32, 8, 64)}, ValueError, r"v has shape \(2, 32, 8, 64\) but k has \(2, 64, 8, 64\)"),
    (lambda: {"v": t(2, 64, 4, 128)}, ValueError, r"v has shape \(2, 64, 4, 128\) but k has \(2, 64, 8, 64\)"),
    (lambda: {"k": t(2, 64, 3, 64), "v": t(2, 64, 3, 64)}, ValueError, "q has 8 heads, not a multiple of k's 3"),
    (lambda: {"k": t(1, 64, 8, 64), "v": t(1, 64, 8, 64)}, ValueError, "k has batch size 1 but q has 2"),
    # Scales: checked in float32, the precision the kernels use.
    (lambda: {"softmax_scale": -0.1}, ValueError, "softmax_scale must be finite and > 0, got -0.1"),
    (lambda: {"softmax_scale": 0.0}, ValueError, "softmax_scale must be finite and > 0, got 0.0"),
    (lambda: {"softmax_scale": float("nan")}, ValueError, "softmax_scale must be finite"),
    (lambda: {"softmax_scale": "0.1"}, TypeError, "softmax_scale must be a number, got str"),
    (lambda: {"softmax_scale": True}, TypeError, "softmax_scale must be a number, got bool"),
    (lambda: {"softmax_scale": 1e39}, ValueError, r"softmax_scale = 1e\+39 gives softmax_scale = inf in float32"),
    (lambda: {"softmax_scale": 3e38}, ValueError, r"gives softmax_scale \* log2\(e\) = inf in float32"),
    (lambda: {"softmax_scale": 1e-45}, ValueError, "softmax_scale = 1e-45 gives softmax_scale = .* in float32"),
    (lambda: {"softcap": -1.0}, ValueError, r"softcap must be finite and >= 0 \(0 turns it off\), got -1.0"),
    (lambda: {"softcap": 1e-50}, ValueError, "softcap = 1e-50 gives softcap = 0.0 in float32"),
    (lambda: {"softcap": 1e38}, ValueError, "gives softmax_scale / softcap = .* in float32"),
    (lambda: {"softcap": "30"}, TypeError, "softcap must be a number, got str"),
    (lambda: {"window_size": 128}, TypeError, "window_size must be a pair"),
    (lambda: {"window_size": (2**31, 0)}, ValueError, r"window_size\[0\] must be in \[0, 2147483647\], got 2147483648"),
    (lambda: {"window_size": ("-2", 0)}, TypeError, r"window_size\[0\] must be an int, got str"),
    (lambda: {"window_size": (0, 1.5)}, TypeError, r"window_size\[1\] must be an int, got float"),
    (lambda: {"window_size": (True, 0)}, TypeError, r"window_size\[0\] must be an int, got bool"),
    # Flags are bools, never coerced.
    (lambda: {"causal": "yes"}, TypeError, "causal must be a bool .*, got str 'yes'"),
    (lambda: {"causal": 1}, TypeError, "causal must be a bool .*, got int 1"),
    (lambda: {"deterministic": 2}, TypeError, "deterministic must be a bool .*, got int 2"),
    (lambda: {"return_lse": 1}, TypeError, "return_lse must be a bool"),
    (lambda: {"return_attn_probs": "no"}, TypeError, "return_attn_probs must be a bool"),
    # FlashAttention-2 arguments flash4 cannot honour.
    (lambda: {"dropout_p": 0.1}, NotImplementedError, r"dropout_p=0.1: flash4 has no attention dropout"),
    (lambda: {"dropout_p": "0"}, TypeError, "dropout_p must be a number, got str"),
    # FlashAttention-3's positional order (q, k, v, softmax_scale, causal) puts these in dropout_p's slot.
    (lambda: {"dropout_p": None}, TypeError,
     r"dropout_p must be a number, got NoneType \(FlashAttention-2's positional order is q, k, v, dropout_p, "
     r"softmax_scale, causal; pass FlashAttention-3's softmax_scale by keyword\)"),
    (lambda: {"dropout_p": 0.125}, NotImplementedError, r"dropout_p=0.125: .*FlashAttention-2's positional order"),
    (lambda: {"alibi_slopes": t(8, dtype=torch.float32)}, NotImplementedError, "alibi_slopes is not supported"),
    (lambda: {"return_attn_probs": True}, NotImplementedError,
     r"return_attn_probs=True is not supported.*return_lse=True for \(out, lse\)"),
    # FlashAttention-3 / -4 keywords away from their neutral values.
    (lambda: {"qv": t(2, 64, 8, 64)}, NotImplementedError, r"qv=.* is not supported by flash4 \(only None\)"),
    (lambda: {"q_descale": t(2, 8, dtype=torch.float32)}, NotImplementedError, "q_descale=.* is not supported"),
    (lambda: {"k_descale": t(2, 8, dtype=torch.float32)}, NotImplementedError, "k_descale=.* is not supported"),
    (lambda: {"v_descale": t(2, 8, dtype=torch.float32)}, NotImplementedError, "v_descale=.* is not supported"),
    (lambda: {"attention_chunk": 128}, NotImplementedError,
     r"attention_chunk=128 is not supported by flash4 \(only 0\)"),
    # FlashAttention-3's performance hints are ignored, but only valid values are.
    (lambda: {"num_splits": -1}, ValueError, r"num_splits must be in \[0, "),
    (lambda: {"pack_gqa": 1}, TypeError, "pack_gqa must be a bool .*, got int 1"),
    (lambda: {"sm_margin": 8.0}, TypeError, "sm_margin must be an int, got float"),
    (lambda: {"learnable_sink": t(3, dtype=torch.float32)}, ValueError,
     r"learnable_sink has shape \(3,\); it must be \(heads_q,\) = \(8,\)"),
    (lambda: {"learnable_sink": t(8, dtype=torch.int32)}, TypeError, "learnable_sink has dtype torch.int32"),
    (lambda: {"learnable_sink": t(8, dtype=torch.float32, device="cpu")}, ValueError, "learnable_sink is on cpu"),
    (lambda: {"num_splits": 1.0}, TypeError, "num_splits must be an int, got float"),
    (lambda: {"seqused_q": t(3, dtype=torch.int32)}, TypeError, "unexpected keyword argument 'seqused_q'"),
    (lambda: {"windowsize": (1, 1)}, TypeError, "unexpected keyword argument 'windowsize'"),
]


@pytest.mark.parametrize("replace, error, message", BAD_ARGUMENTS)
def test_bad_argument(replace, error, message):
    with pytest.raises(error, match=message):
        call_with(**replace())


def test_valid_arguments_pass_gqa_mqa_and_windows():
    for heads_kv in (8, 2, 1):
        q, k, v = qkv(heads=8, heads_kv=heads_kv, head_dim=128, dtype=FP16)
        flash_attn_func(q, k, v, causal=True, window_size=(16, -1), softcap=30.0, softmax_scale=0.1)
    flash_attn_func(*qkv(), causal=True, window_size=(-1, 0))
    flash_attn_func(*qkv(), causal=True, window_size=(64, 8))  # FlashAttention's local causal: right edge 0
    flash_attn_func(*qkv(), window_size=(None, 4))  # FlashAttention-4's None for unbounded
    flash_attn_func(*qkv(), softmax_scale=1, softcap=50)  # ints are numbers


def test_flash_attention_3_and_4_keywords_at_their_neutral_values_pass():
    out = flash_attn_func(*qkv(), causal=True, qv=None, q_descale=None, k_descale=None, v_descale=None,
                          attention_chunk=0, num_splits=1, pack_gqa=None, sm_margin=0, learnable_sink=None)
    assert out.shape == (2, 64, 8, 64)
    flash_attn_func(*qkv(), num_splits=0, dropout_p=0, return_attn_probs=False, alibi_slopes=None)


@pytest.mark.parametrize("hints", [dict(num_splits=4), dict(pack_gqa=True), dict(pack_gqa=False), dict(sm_margin=8),
                                   dict(num_splits=0, pack_gqa=None, sm_margin=0)])
def test_flash_attention_3_performance_hints_are_accepted_and_ignored(hints):
    # They change no result (FlashAttention-3 plans its launch by them); flash4 plans its own.
    assert flash_attn_func(*qkv(), causal=True, **hints).shape == (2, 64, 8, 64)
    assert varlen_call_with(**hints).shape == (100, 8, 64)
    assert flash4.flash_attn_qkvpacked_func(t(2, 64, 3, 8, 64), **hints).shape == (2, 64, 8, 64)


def test_public_names_are_exported():
    exported = set(flash4.__all__)
    public = {name for name, value in vars(flash4).items()  # flash4's own functions and classes, not submodules
              if not name.startswith("_") and getattr(value, "__module__", "").startswith("flash4.")}
    assert exported == public and "flash_attn_with_kvcache" in exported


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(0, 64), (64, 0), (0, 0)])
def test_empty_sequences_pass(seqlen_q, seqlen_k):
    q, k, v = qkv(seqlen=seqlen_q, seqlen_k=seqlen_k)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 8, seqlen_q)


@pytest.mark.parametrize("window, causal, edges", [
    ((-1, -1), False, (-1, -1)),
    ((-1, -1), True, (-1, 0)),
    ((16, 5), True, (16, 0)),  # causal keeps the left edge and makes the right one 0 (local causal attention)
    ((16, 5), False, (16, 5)),
    ((None, None), False, (-1, -1)),
    ([3, None], True, (3, 0)),
    # Any negative edge is unbounded, as FlashAttention-2/-3 read it; the C ABI gets -1.
    ((-2, -7), False, (-1, -1)),
    ((-2, 3), False, (-1, 3)),
    ((5, -100), False, (5, -1)),
    ((-3, -3), True, (-1, 0)),
    ((-2**40, 8), True, (-1, 0)),
    ((16, -2), True, (16, 0)),
])
def test_window_and_causal_follow_flash_attention(window, causal, edges):
    options = make_options(64, None, causal, window, 0.0, False)
    assert (options.window_left, options.window_right) == edges and options.causal is causal
    flash_attn_func(*qkv(), causal=causal, window_size=window)


@pytest.mark.parametrize("left, right, causal, edges", [(-5, -1, False, (-1, -1)), (-1, -9, False, (-1, -1)),
                                                        (4, -2, False, (4, -1)), (-8, 3, True, (-1, 0))])
def test_ops_normalize_negative_window_edges(left, right, causal, edges):
    options = _launch.Options(0.125, causal, left, right, 0.0, False)
    assert ops._check(*qkv(), options, None)[2:4] == edges  # what flash4::fwd and flash4::bwd launch with
    assert make_options(64, 0.125, causal, (left, right), 0.0, False)[2:4] == edges


def strided_last(*shape):
    """A tensor of `shape` whose last dimension is not contiguous (stride 2)."""
    return t(*shape[:-1], 2 * shape[-1])[..., ::2]


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_a_strided_last_dimension_is_accepted(name):
    # FlashAttention copies it (maybe_contiguous); flash4's launch copies what TMA cannot read in place.
    q, k, v = qkv()
    arguments = {"q": q, "k": k, "v": v} | {name: strided_last(*{"q": q, "k": k, "v": v}[name].shape)}
    assert arguments[name].stride(-1) == 2
    assert flash_attn_func(**arguments).shape == (2, 64, 8, 64)
    out, lse = torch.ops.flash4.fwd(*arguments.values(), 0.125, False, -1, -1, 0.0, False)
    assert out.shape == (2, 64, 8, 64) and out.is_contiguous()
    varlen = {"q": strided_last(100, 8, 64)} if name == "q" else {name: strided_last(90, 2, 64)}
    assert varlen_call_with(**varlen).shape == (100, 8, 64)
    assert flash4.flash_attn_qkvpacked_func(strided_last(2, 64, 3, 8, 64)).shape == (2, 64, 8, 64)
    assert flash4.flash_attn_varlen_kvpacked_func(t(100, 8, 64), strided_last(90, 2, 2, 64), t(3, dtype=torch.int32),
                                                  t(3, dtype=torch.int32), 60, 50).shape == (100, 8, 64)


def test_default_scale_and_explicit_values():
    assert make_options(128, None, False, (-1, -1), 0.0, False).softmax_scale == 128 ** -0.5
    options = make_options(64, 2, False, (-1, -1), 30, True)
    assert (options.softmax_scale, options.softcap, options.deterministic) == (2.0, 30.0, True)
    assert type(options.softmax_scale) is float and type(options.softcap) is float


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
        (lambda: {"max_seqlen_q": -1}, ValueError, r"max_seqlen_q must be in \[0, "),
        (lambda: {"max_seqlen_k": 40.0}, TypeError, "max_seqlen_k must be an int, got float"),
        (lambda: {"max_seqlen_k": True}, TypeError, "max_seqlen_k must be an int, got bool"),
        (lambda: {"max_seqlen_q": None}, ValueError, "max_seqlen_q and max_seqlen_k must be ints under torch.compile"),
        (lambda: {"k": t(90, 3, 64), "v": t(90, 3, 64)}, ValueError, "q has 8 heads, not a multiple of k's 3"),
        (lambda: {"block_table": t(3, 4, dtype=torch.int32)}, ValueError,
         r"k must be 4-D \(num_pages, page_size, heads, head_dim\) with block_table"),
        (lambda: {"seqused_q": t(2, dtype=torch.int32)}, ValueError,
         r"seqused_q must be 1-D with one entry per sequence \(3\)"),
        (lambda: {"seqused_k": t(3, dtype=torch.int64)}, TypeError, "seqused_k must have dtype torch.int32"),
        (lambda: {"learnable_sink": t(2, dtype=torch.float32)}, ValueError, "learnable_sink has shape"),
        (lambda: {"dropout_p": 0.5}, NotImplementedError, "dropout_p=0.5"),
        (lambda: {"causal": 0}, TypeError, "causal must be a bool"),
    ],
)
def test_bad_varlen_argument(replace, error, message):
    with pytest.raises(error, match=message):
        varlen_call_with(**replace())


def test_valid_varlen_arguments_pass():
    out, lse = varlen_call_with(causal=True, return_lse=True, seqused_q=None, seqused_k=None, block_table=None)
    assert out.shape == (100, 8, 64) and lse.shape == (8, 100)
    used = t(3, dtype=torch.int32)
    out = varlen_call_with(causal=True, seqused_q=used, seqused_k=used, learnable_sink=t(8, dtype=torch.float32))
    assert out.shape == (100, 8, 64)


def test_empty_varlen_batches_pass():
    # No key rows at all (every sequence without keys), and no query rows: FlashAttention's empty problems.
    out = varlen_call_with(k=t(0, 2, 64), v=t(0, 2, 64), max_seqlen_k=0)
    assert out.shape == (100, 8, 64)
    out, lse = varlen_call_with(q=t(0, 8, 64), max_seqlen_q=0, return_lse=True)
    assert out.shape == (0, 8, 64) and lse.shape == (8, 0)


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


@pytest.mark.parametrize("call, error, message", [
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 8, 64)), ValueError,
     r"qkv must be 5-D \(batch, seqlen, 3, heads, head_dim\), got shape \(2, 64, 8, 64\)"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 2, 8, 64)), ValueError, "qkv must be 5-D"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 3, 8, 64), num_heads_q=8), ValueError,
     "qkv with num_heads_q must be 4-D"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 13, 64), num_heads_q=8), ValueError,
     "qkv has 13 heads, which is not num_heads_q = 8 plus twice"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 8, 64), num_heads_q=8), ValueError, "qkv has 8 heads"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 3, 8, 64), dropout_p=0.1), NotImplementedError, "dropout_p"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 3, 8, 64, dtype=torch.float32)), TypeError,
     "has dtype torch.float32"),
    (lambda: flash4.flash_attn_kvpacked_func(t(2, 64, 8, 64), t(2, 64, 3, 2, 64)), ValueError,
     r"kv must be 5-D \(batch, seqlen, 2, heads, head_dim\)"),
    (lambda: flash4.flash_attn_kvpacked_func(t(2, 64, 8, 64), t(2, 64, 2, 2, 128)), ValueError,
     "k has head_dim 128 but q has 64"),
    (lambda: flash4.flash_attn_varlen_qkvpacked_func(t(100, 3, 8, 64), t(3, dtype=torch.int32), 60, causal=1),
     TypeError, "causal must be a bool"),
    (lambda: flash4.flash_attn_varlen_qkvpacked_func(t(100, 8, 64), t(3, dtype=torch.int32), 60), ValueError,
     r"qkv must be 4-D \(total_tokens, 3, heads, head_dim\)"),
    (lambda: flash4.flash_attn_varlen_kvpacked_func(t(100, 8, 64), t(90, 2, 64), t(3, dtype=torch.int32),
                                                    t(3, dtype=torch.int32), 60, 50), ValueError,
     r"kv must be 4-D \(total_tokens, 2, heads, head_dim\)"),
    (lambda: flash4.flash_attn_qkvpacked_func(t(2, 64, 3, 8, 64), learnable_sink=t(3, dtype=torch.float32)),
     ValueError, r"learnable_sink has shape \(3,\); it must be \(heads_q,\) = \(8,\)"),
    (lambda: flash4.flash_attn_kvpacked_func(t(2, 64, 8, 64), t(2, 64, 2, 2, 64), learnable_sink=t(8, dtype=torch.int32)),
     TypeError, "learnable_sink has dtype torch.int32"),
    (lambda: flash4.flash_attn_varlen_qkvpacked_func(t(100, 3, 8, 64), t(3, dtype=torch.int32), 60,
                                                     seqused=t(3, dtype=torch.int32)), ValueError,
     r"seqused must be 1-D with one entry per sequence \(2\)"),
    (lambda: flash4.flash_attn_varlen_kvpacked_func(t(100, 8, 64), t(90, 2, 2, 64), t(3, dtype=torch.int32),
                                                    t(3, dtype=torch.int32), 60, 50,
                                                    seqused_k=t(2, dtype=torch.int64)), TypeError,
     "seqused_k must have dtype torch.int32"),
    (lambda: flash4.flash_attn_varlen_kvpacked_func(t(100, 8, 64), t(90, 2, 2, 64), t(3, dtype=torch.int32),
                                                    t(3, dtype=torch.int32), 60, 50,
                                                    learnable_sink=t(8, dtype=torch.float32, device="cpu")),
     ValueError, "learnable_sink is on cpu"),
])
def test_bad_packed_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_packed_forms_take_sinks_and_seqused():
    sink, used = t(8, dtype=torch.float32), t(2, dtype=torch.int32)
    cu = t(3, dtype=torch.int32)
    assert flash4.flash_attn_qkvpacked_func(t(2, 64, 3, 8, 64), learnable_sink=sink).shape == (2, 64, 8, 64)
    assert flash4.flash_attn_kvpacked_func(t(2, 64, 8, 64), t(2, 32, 2, 2, 64), learnable_sink=sink).shape == \
        (2, 64, 8, 64)
    out = flash4.flash_attn_varlen_qkvpacked_func(t(100, 3, 8, 64), cu, 60, seqused=used, learnable_sink=sink)
    assert out.shape == (100, 8, 64)
    out = flash4.flash_attn_varlen_kvpacked_func(t(100, 8, 64), t(90, 2, 2, 64), cu, cu, 60, 50, seqused_q=used,
                                                 seqused_k=used, learnable_sink=sink)
    assert out.shape == (100, 8, 64)


@pytest.mark.parametrize("op, arguments, error, message", [
    ("fwd", lambda: (t(1, 8, 2, 64, dtype=torch.float32),) * 3 + (0.125, False, -1, -1, 0.0, False), TypeError,
     "q has dtype torch.float32"),
    ("fwd", lambda: (t(1, 8, 2, 64),) * 3 + (0.0, False, -1, -1, 0.0, False), ValueError, "softmax_scale must be"),
    ("fwd", lambda: (t(1, 8, 2, 64),) * 3 + (0.125, False, -1, -1, 1e-50, False), ValueError, "softcap = 1e-50"),
    ("fwd", lambda: (t(8, 2, 64),) * 3 + (0.125, False, -1, -1, 0.0, False), ValueError, "q must be 4-D"),
    ("fwd", lambda: (t(1, 8, 2, 64),) * 3 + (0.125, False, -1, 2**31, 0.0, False), ValueError, r"window_size\[1\]"),
    ("bwd", lambda: (t(1, 8, 2, 64),) * 5 + (t(1, 2, 7, dtype=torch.float32), 0.125, False, -1, -1, 0.0, False, None),
     ValueError, r"lse has shape \(1, 2, 7\)"),
    ("bwd", lambda: (t(1, 9, 2, 64),) + (t(1, 8, 2, 64),) * 4 + (t(1, 2, 8, dtype=torch.float32), 0.125, False, -1,
                                                                  -1, 0.0, False, None), ValueError, r"dout has shape"),
])
def test_ops_called_directly_check_their_arguments(op, arguments, error, message):
    # torch.ops.flash4.* is public (the ring calls it); a bad argument there is a named error too, never a KeyError.
    with pytest.raises(error, match=message):
        getattr(torch.ops.flash4, op)(*arguments())
