"""flash_attn_with_kvcache without a GPU: the ctypes mirror of include/flash4/flash4_kvcache.h against gcc's
layout of the real header, the params filled from tensors, every argument check (fake CUDA tensors, nothing
launched) and the host check of the device-side values.
"""

import ctypes
import re
import subprocess

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conftest import INCLUDE_DIR
from flash4 import _kvcache_abi, flash_attn_with_kvcache, kvcache

HEADER = INCLUDE_DIR / "flash4" / "flash4_kvcache.h"
BF16 = torch.bfloat16


def header_text():
    return re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)


def test_field_names_and_order_match_the_header():
    body = re.search(r"typedef struct flash4_kvcache_params \{(.*?)\} flash4_kvcache_params;", header_text(), re.S)
    names = []
    for declaration in filter(None, (d.strip() for d in body.group(1).split(";"))):
        first, *more = declaration.split(",")
        names.append(re.search(r"(\w+)$", first).group(1))
        names.extend(name.strip() for name in more)
    assert [name for name, _ in _kvcache_abi.KvcacheParams._fields_] == names


def test_every_exported_function_is_declared():
    assert set(re.findall(r"FLASH4_API[^;(]*?\b(flash4_\w+)\s*\(", header_text())) == set(_kvcache_abi.FUNCTIONS)


def test_layout_matches_gcc(compile_c):
    fields = [name for name, _ in _kvcache_abi.KvcacheParams._fields_]
    lines = ['printf("sizeof %zu\\n", sizeof(flash4_kvcache_params));',
             'printf("alignof %zu\\n", _Alignof(flash4_kvcache_params));']
    lines += [f'printf("{f} %zu\\n", offsetof(flash4_kvcache_params, {f}));' for f in fields]
    source = "#include <stddef.h>\n#include <stdio.h>\n#include \"flash4/flash4.h\"\nint main(void) {\n"
    source += "\n".join(lines) + "\nreturn 0;\n}\n"
    program = compile_c(source, "kvcache_layout")
    printed = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout.split("\n")
    c_layout = dict(line.split() for line in printed if line)
    py_layout = {"sizeof": ctypes.sizeof(_kvcache_abi.KvcacheParams),
                 "alignof": ctypes.alignment(_kvcache_abi.KvcacheParams)}
    py_layout |= {f: getattr(_kvcache_abi.KvcacheParams, f).offset for f in fields}
    assert {k: int(v) for k, v in c_layout.items()} == py_layout


def test_params_from_tensors_paged_with_append():
    q = torch.zeros(3, 2, 8, 64, dtype=BF16)
    k_cache = torch.zeros(40, 16, 2, 64, dtype=BF16)  # 40 pages of 16 rows
    k_new = torch.zeros(3, 2, 2, 64, dtype=BF16)
    table = torch.zeros(3, 10, dtype=torch.int32)
    lens = torch.zeros(3, dtype=torch.int32)
    out, lse = torch.empty_like(q), torch.empty(3, 8, 2)
    p = kvcache.kvcache_params(q, k_cache, k_cache, k_new, k_new, out, lse, lens, None, table, 0.5, True, 7, 0, 3.0, 4)
    assert p.struct_size == ctypes.sizeof(_kvcache_abi.KvcacheParams)
    assert (p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.heads_kv, p.seqlen_new) == (3, 2, 8, 64, 2, 2)
    assert (p.num_pages, p.page_size, p.max_pages_per_seq, p.block_table_stride) == (40, 16, 10, 10)
    assert (p.cache_batch, p.cache_seqlen) == (0, 0)
    assert p.block_table == table.data_ptr() and p.cache_seqlens == lens.data_ptr() and p.cache_batch_idx is None
    assert (p.q_strides.batch, p.q_strides.seq, p.q_strides.head) == (2 * 8 * 64, 8 * 64, 64)
    assert (p.k_cache_strides.batch, p.k_cache_strides.seq) == (16 * 2 * 64, 2 * 64)
    assert (p.causal, p.window_left, p.window_right, p.num_splits) == (1, 7, 0, 4)
    assert p.softmax_scale == 0.5 and p.softcap == 3.0
    assert p.lse == lse.data_ptr() and p.o == out.data_ptr()
    assert p.head_dim_v == 64


def test_params_carry_v_head_dim_of_its_own():
    q, k_cache, v_cache = torch.zeros(2, 1, 4, 192, dtype=BF16), torch.zeros(2, 32, 2, 192, dtype=BF16), torch.zeros(
        2, 32, 2, 128, dtype=BF16)
    out, lse = torch.empty(2, 1, 4, 128, dtype=BF16), torch.empty(2, 4, 1)
    p = kvcache.kvcache_params(q, k_cache, v_cache, None, None, out, lse, None, None, None, 0.1, False, -1, -1, 0.0, 0)
    assert (p.head_dim, p.head_dim_v) == (192, 128)
    assert (p.v_cache_strides.seq, p.o_strides.head, p.k_cache_strides.seq) == (2 * 128, 128, 2 * 192)


@pytest.fixture
def fake():
    with FakeTensorMode():
        yield


def t(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="cuda")


def call(**replace):
    arguments = {"q": t(2, 1, 8, 128), "k_cache": t(2, 256, 2, 128), "v_cache": t(2, 256, 2, 128)} | replace
    return flash_attn_with_kvcache(**arguments)


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def launched(*args, **kwargs):
        raise AssertionError("the call reached the library")

    monkeypatch.setattr(kvcache, "load_library", launched)


@pytest.mark.parametrize("name", ["rotary_cos", "rotary_sin", "cache_leftpad", "alibi_slopes", "qv", "q_descale",
                                  "k_descale", "v_descale", "rotary_seqlens", "cu_seqlens_q", "cu_seqlens_k_new"])
def test_unsupported_arguments_say_so(fake, name):
    with pytest.raises(NotImplementedError, match=name):
        call(**{name: t(4, 4)})


@pytest.mark.parametrize("name, value", [("max_seqlen_q", 1), ("attention_chunk", 128)])
def test_flash_attention_3_arguments_that_change_the_result_say_so(fake, name, value):
    with pytest.raises(NotImplementedError, match=f"does not support {name}"):
        call(**{name: value})


@pytest.fixture
def launched(monkeypatch):
    """torch.ops.flash4.kvcache replaced by a recorder of its arguments."""
    seen = []
    monkeypatch.setattr(torch.ops.flash4, "kvcache", lambda *args: seen.append(args) or (None, None))
    return seen


def test_flash_attention_3_keywords_map_onto_flash4(fake, launched):
    # page_table is block_table; pack_gqa, sm_margin and scheduler_metadata are performance hints (ignored);
    # the others at their neutral values ask nothing.
    table = t(2, 4, dtype=torch.int32)
    call(k_cache=t(16, 64, 2, 128), v_cache=t(16, 64, 2, 128), page_table=table, cache_seqlens=5, pack_gqa=True,
         sm_margin=4, scheduler_metadata=t(8, dtype=torch.int32), qv=None, q_descale=None, k_descale=None,
         v_descale=None, rotary_seqlens=None, cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None,
         attention_chunk=0)
    assert launched[0][7] is table


@pytest.mark.parametrize("window, causal, edges", [((-2, 0), False, (-1, 0)), ((-5, -7), False, (-1, -1)),
                                                    ((3, -2), True, (3, 0)), ((-9, 4), True, (-1, 0))])
def test_any_negative_window_edge_is_unbounded(fake, launched, window, causal, edges):
    call(window_size=window, causal=causal)
    assert launched[0][10:12] == edges  # window_left, window_right, as the C ABI takes them


def test_q_k_v_with_a_strided_last_dimension_are_accepted(fake, launched):
    # The op copies them (flash4._launch.tma_ready); only the cache, written in place, must be contiguous.
    q, k, v = t(2, 1, 8, 256)[..., ::2], t(2, 1, 2, 256)[..., ::2], t(2, 1, 2, 256)[..., ::2]
    call(q=q, k=k, v=v, cache_seqlens=3)
    assert launched[0][0] is q and launched[0][3] is k and launched[0][4] is v


@pytest.mark.parametrize("arguments, waits", [
    (dict(cache_seqlens=3), False),  # an int, range-checked on the host as it is: nothing to copy
    (dict(), False),
    (dict(cache_seqlens=lambda: t(2, dtype=torch.int32)), True),
    (dict(cache_seqlens=3, cache_batch_idx=lambda: t(2, dtype=torch.int32)), True),
    (dict(cache_seqlens=3, block_table=lambda: t(2, 4, dtype=torch.int32),
          k_cache=lambda: t(16, 64, 2, 128), v_cache=lambda: t(16, 64, 2, 128)), True),
])
def test_device_values_are_copied_to_the_host_only_when_some_were_given(fake, launched, monkeypatch, arguments, waits):
    checked = []
    monkeypatch.setattr(kvcache, "_values_readable", lambda t: True)  # as for real tensors outside capture
    monkeypatch.setattr(kvcache, "check_device_values", lambda *args: checked.append(args))
    call(**{name: value() if callable(value) else value for name, value in arguments.items()})
    assert len(checked) == int(waits) and len(launched) == 1


@pytest.mark.parametrize(
    "replace, error, message",
    [
        (lambda: {"q": [1.0]}, TypeError, "q must be a torch.Tensor"),
        (lambda: {"v_cache": t(2, 256, 2, 128, dtype=torch.float16)}, TypeError, "v_cache has dtype torch.float16"),
        (lambda: {"q": t(2, 1, 8, 100)}, ValueError, "q has head_dim 100; flash_attn_with_kvcache supports head dims "
         "that are multiples of 8 from 8 to 256"),
        (lambda: {"q": t(2, 1, 8, 264), "k_cache": t(2, 256, 2, 264)}, ValueError, "q has head_dim 264"),
        (lambda: {"v_cache": t(2, 256, 2, 12)}, ValueError, "v_cache has head_dim 12"),
        (lambda: {"q": t(2, 1, 8, 96)}, ValueError, "with q's head_dim 96 in k_cache"),
        (lambda: {"k": t(2, 1, 2, 128), "v": t(2, 1, 2, 64), "cache_seqlens": 3}, ValueError, "128 for v"),
        (lambda: {"q": t(2, 8, 128)}, ValueError, "q must be 4-D"),
        (lambda: {"v_cache": t(2, 128, 2, 128)}, ValueError, "must have one shape"),
        (lambda: {"q": t(2, 1, 6, 128), "k_cache": t(2, 256, 4, 128), "v_cache": t(2, 256, 4, 128)}, ValueError,
         "not a multiple"),
        (lambda: {"k": t(2, 1, 2, 128)}, ValueError, "k and v: pass both"),
        (lambda: {"k": t(2, 1, 2, 128), "v": t(2, 1, 2, 128)}, ValueError, "appending needs cache_seqlens"),
        (lambda: {"k": t(2, 1, 4, 128), "v": t(2, 1, 4, 128), "cache_seqlens": 3}, ValueError, "must be (batch=2"),
        (lambda: {"cache_seqlens": t(2, dtype=torch.int64)}, TypeError, "cache_seqlens must be an int32 tensor"),
        (lambda: {"cache_seqlens": t(3, dtype=torch.int32)}, ValueError, "cache_seqlens must be 1-D with 2"),
        (lambda: {"cache_seqlens": 257}, ValueError, "cache_seqlens must be in"),
        (lambda: {"k": t(2, 257, 2, 128), "v": t(2, 257, 2, 128), "cache_seqlens": 0}, ValueError,
         "k and v append 257 rows per sequence but the cache holds 256"),
        (lambda: {"scheduler_metadata": 3}, TypeError, "scheduler_metadata must be None or a tensor"),
        (lambda: {"k_cache": t(1, 256, 2, 128), "v_cache": t(1, 256, 2, 128)}, ValueError, "holds 1 sequences"),
        (lambda: {"block_table": t(2, dtype=torch.int32)}, ValueError, "block_table must be 2-D"),
        (lambda: {"block_table": t(2, 4, dtype=torch.int32), "cache_batch_idx": t(2, dtype=torch.int32)}, ValueError,
         "cannot be used with block_table"),
        (lambda: {"num_splits": 129}, ValueError, "num_splits must be in"),
        (lambda: {"num_splits": 1.5}, TypeError, "num_splits must be an int"),
        (lambda: {"window_size": (2**31, 0)}, ValueError, "window_size[0] must be in [0, 2147483647]"),
        # The cache is written in place, so it is never copied: a strided last dimension is refused.
        (lambda: {"k_cache": t(2, 256, 2, 256)[..., ::2]}, ValueError,
         "k_cache must have a contiguous last dimension, got strides (131072, 512, 256, 2); it is updated in place"),
        (lambda: {"v_cache": t(2, 256, 2, 256)[..., ::2]}, ValueError, "v_cache must have a contiguous last dimension"),
        # FlashAttention-3's keywords.
        (lambda: {"page_table": t(2, 4, dtype=torch.int32), "block_table": t(2, 4, dtype=torch.int32)}, ValueError,
         "block_table and page_table are one argument"),
        (lambda: {"page_table": t(2, dtype=torch.int32)}, ValueError, "block_table must be 2-D"),
        (lambda: {"pack_gqa": 1}, TypeError, "pack_gqa must be a bool"),
        (lambda: {"sm_margin": -1}, ValueError, "sm_margin must be in [0, "),
        (lambda: {"paged_table": t(2, 4, dtype=torch.int32)}, TypeError, "unexpected keyword argument 'paged_table'"),
        (lambda: {"softcap": -1.0}, ValueError, "softcap must be finite and >= 0"),
        (lambda: {"k_cache": t(2, 256, 2, 128)[:, :, :, :120], "v_cache": t(2, 256, 2, 128)[:, :, :, :120]},
         ValueError, "head_dim"),
        (lambda: {"k_cache": t(2, 256, 2, 132)[..., :128], "v_cache": t(2, 256, 2, 128)}, ValueError,
         "it is updated in place"),  # rows 264 bytes apart: not a 16-byte multiple
    ],
)
def test_bad_arguments_raise_naming_them(fake, replace, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call(**replace())


@pytest.mark.parametrize("head_dim, head_dim_v", [(8, 8), (40, 40), (136, 136), (256, 256), (192, 128), (64, 256)])
def test_head_dims_multiple_of_8_up_to_256_give_out_of_v_head_dim(fake, head_dim, head_dim_v):
    k, v = t(2, 1, 2, head_dim), t(2, 1, 2, head_dim_v)
    out, lse = call(q=t(2, 1, 8, head_dim), k_cache=t(2, 256, 2, head_dim), v_cache=t(2, 256, 2, head_dim_v), k=k, v=v,
                    cache_seqlens=3, return_softmax_lse=True)
    assert tuple(out.shape) == (2, 1, 8, head_dim_v) and tuple(lse.shape) == (2, 8, 1)


def test_strided_cache_views_of_16_byte_rows_are_accepted(fake, launched):
    kv = t(2, 256, 2, 2, 128)  # a fused (k, v) cache: strided views, 16-byte strides
    call(k_cache=kv[:, :, 0], v_cache=kv[:, :, 1], cache_seqlens=7, num_splits=3)
    (args,) = launched
    assert args[5].dtype == torch.int32 and tuple(args[5].shape) == (2,)  # the int cache_seqlens as a tensor
    assert args[-1] == 3 and args[9] is False  # num_splits, causal


def cpu(values):
    return torch.tensor(values, dtype=torch.int32)


def test_device_values_pass_when_in_range():
    kvcache.check_device_values(cpu([0, 5, 9]), 1, 10, 3)
    kvcache.check_device_values(cpu([0, 5]), 2, 10, 3, cache_batch_idx=cpu([2, 0]))
    # Paged: 4 pages of 4 rows per sequence; sequence 0 uses 1 page (so -1 past it is fine), sequence 1 all 4.
    kvcache.check_device_values(cpu([2, 15]), 1, 16, 8, block_table=cpu([[7, -1, 99, -5], [0, 1, 2, 3]]), page_size=4)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(cache_seqlens=cpu([0, 10]), seqlen_new=1), r"cache_seqlens\[1\] = 10; it must lie in \[0, 9\]"),
        (dict(cache_seqlens=cpu([-1, 0]), seqlen_new=0), r"cache_seqlens\[0\] = -1"),
        (dict(cache_seqlens=cpu([0, 0]), seqlen_new=0, cache_batch_idx=cpu([0, 3])), r"cache_batch_idx\[1\] = 3"),
        (dict(cache_seqlens=cpu([5, 0]), seqlen_new=0, block_table=cpu([[1, 8, 0], [2, 2, 2]]), page_size=4),
         r"block_table\[0, 1\] = 8|block_table\[0\]\[1\] = 8"),
        (dict(cache_seqlens=cpu([0, 0]), seqlen_new=1, block_table=cpu([[1, 0, 0], [-2, 2, 2]]), page_size=4),
         r"block_table\[1\]\[0\] = -2"),
        (dict(cache_seqlens=None, seqlen_new=0, block_table=cpu([[1, 0, 0], [2, 2, 3]]), page_size=4, capacity=12),
         r"block_table\[1\]\[2\] = 3"),  # no cache_seqlens: full sequences use every page
    ],
)
def test_device_values_out_of_range_raise_naming_the_entry(arguments, message):
    defaults = dict(capacity=10, cache_slots=3)
    with pytest.raises(ValueError, match=message):
        kvcache.check_device_values(**(defaults | arguments))
