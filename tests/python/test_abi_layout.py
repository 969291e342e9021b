"""The ctypes mirror in flash4._abi against include/flash4/flash4.h, and the params the ops fill.

Layout: gcc compiles the real header and prints sizeof/offsetof/_Alignof for every field the mirror
declares (and each field's own size); the header is also parsed for its field names, enum constants and exported functions, so a
field, status or function added to the header without the mirror fails here.
"""

import ctypes
import re
import subprocess

import pytest
import torch

from conftest import HEADER
from flash4 import _abi, _launch
from flash4._loader import open_library

STRUCTS = {"flash4_strides": _abi.Strides, "flash4_fwd_params": _abi.FwdParams, "flash4_bwd_params": _abi.BwdParams}


def header_text():
    return re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)


def header_field_names(struct_name):
    body = re.search(rf"typedef struct {struct_name} \{{(.*?)\}} {struct_name};", header_text(), re.S).group(1)
    names = []
    for declaration in filter(None, (d.strip() for d in body.split(";"))):
        first, *more = declaration.split(",")  # "flash4_strides q_strides, k_strides"
        names.append(re.search(r"(\w+)$", first).group(1))
        names.extend(name.strip() for name in more)
    return names


@pytest.mark.parametrize("struct_name", STRUCTS)
def test_field_names_and_order_match_the_header(struct_name):
    assert [name for name, _ in STRUCTS[struct_name]._fields_] == header_field_names(struct_name)


def test_sizes_offsets_and_alignment_match_gcc(compile_c):
    lines = []
    for c_name, struct in STRUCTS.items():
        lines.append(f'printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        lines.append(f'printf("{c_name} alignof %zu\\n", _Alignof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
            # A field followed by padding could be too wide or too narrow with every offset still right.
            lines.append(f'printf("{c_name} {field}.size %zu\\n", sizeof((({c_name}*)0)->{field}));')
    source = "#include <stddef.h>\n#include <stdio.h>\n#include \"flash4/flash4.h\"\nint main(void) {\n"
    source += "\n".join(lines) + "\nreturn 0;\n}\n"
    program = compile_c(source, "layout")
    printed = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout.split("\n")
    c_layout = {(s, f): int(n) for s, f, n in (line.split() for line in printed if line)}

    py_layout = {}
    for c_name, struct in STRUCTS.items():
        py_layout[c_name, "sizeof"] = ctypes.sizeof(struct)
        py_layout[c_name, "alignof"] = ctypes.alignment(struct)
        for field, ctype in struct._fields_:
            py_layout[c_name, field] = getattr(struct, field).offset
            py_layout[c_name, f"{field}.size"] = ctypes.sizeof(ctype)
    assert py_layout == c_layout


def test_enum_values_match_the_header():
    in_header = {name: int(value) for name, value in re.findall(r"\b(FLASH4_\w+)\s*=\s*(\d+)", header_text())}
    mirrored = {f"FLASH4_{s.name}": s.value for s in _abi.Status}
    mirrored |= {f"FLASH4_DTYPE_{d.name}": d.value for d in _abi.DType}
    assert mirrored == in_header


def test_every_exported_function_is_declared():
    exported = set(re.findall(r"FLASH4_API[^;(]*?\b(flash4_\w+)\s*\(", header_text()))
    assert exported == set(_abi.FUNCTIONS)


OPTIONS = _launch.Options(softmax_scale=0.125, causal=True, window_left=-1, window_right=0, softcap=30.0,
                      deterministic=True)


@pytest.mark.parametrize("packer", [_abi.FWD_PACKER, _abi.BWD_PACKER])
def test_packer_writes_every_field_at_its_offset(packer):
    # Distinct values per field, read back through the ctypes mirror (whose offsets match gcc's, above):
    # a field out of order or a wrong padding would land a value in another field.
    values = []
    for i, name in enumerate(packer.names):
        field = packer.struct_type
        for part in name.split("."):
            ctype = dict(field._fields_)[part]
            field = ctype
        values.append(0.5 + i if ctype is ctypes.c_float else 1000 + i)
    params = packer.pack(*values)
    assert len(packer.names) == len(values)
    for name, value in zip(packer.names, values):
        read = params
        for part in name.split("."):
            read = getattr(read, part)
        assert read == value, name


def test_fwd_params_from_strided_views():
    qkv = torch.zeros(2, 33, 3, 8, 64, dtype=torch.bfloat16)  # (B, S, 3, H, D), as a fused projection makes
    q, k, v = qkv.unbind(2)
    out = torch.zeros(2, 33, 8, 64, dtype=torch.bfloat16)
    lse = torch.zeros(2, 8, 33)
    p = _launch.fwd_params(q, k, v, out, lse, OPTIONS)
    assert p.struct_size == ctypes.sizeof(_abi.FwdParams)
    assert p.dtype == _abi.DType.BF16
    assert (p.q, p.k, p.v, p.o, p.lse) == (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())
    assert (p.q_strides.batch, p.q_strides.seq, p.q_strides.head) == (33 * 3 * 8 * 64, 3 * 8 * 64, 64)
    assert (p.o_strides.batch, p.o_strides.seq, p.o_strides.head) == (33 * 8 * 64, 8 * 64, 64)
    assert (p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim) == (2, 33, 33, 8, 8, 64)
    assert (p.softmax_scale, p.causal, p.window_left, p.window_right, p.softcap) == (0.125, 1, -1, 0, 30.0)
    assert (p.cu_seqlens_q, p.cu_seqlens_k, p.workspace, p.workspace_bytes) == (None, None, None, 0)


def test_varlen_bwd_params():
    q = torch.zeros(10, 4, 128, dtype=torch.float16)
    k = torch.zeros(7, 2, 128, dtype=torch.float16)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 7], dtype=torch.int32)
    lse = torch.zeros(4, 10)
    varlen = _launch.Varlen(cu_q, cu_k, 6, 4)
    p = _launch.bwd_params(q, q, k, k, q, lse, q, k, k, OPTIONS, varlen)
    assert p.struct_size == ctypes.sizeof(_abi.BwdParams)
    assert p.dtype == _abi.DType.FP16 and p.deterministic == 1
    assert (p.k_strides.batch, p.k_strides.seq, p.k_strides.head) == (0, 2 * 128, 128)
    assert (p.dk, p.dk_strides.seq) == (k.data_ptr(), 2 * 128)
    assert (p.batch, p.heads_q, p.heads_kv, p.head_dim) == (2, 4, 2, 128)
    assert (p.cu_seqlens_q, p.cu_seqlens_k) == (cu_q.data_ptr(), cu_k.data_ptr())
    assert (p.max_seqlen_q, p.max_seqlen_k, p.total_q, p.total_k) == (6, 4, 10, 7)


def test_sink_and_seqused_fill_the_appended_fields():
    q = torch.zeros(2, 16, 4, 64, dtype=torch.bfloat16)
    lse = torch.zeros(2, 4, 16)
    sink, dsink = torch.zeros(4), torch.zeros(4)
    used_q, used_k = torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    extras = _launch.Extras(sink, used_q, used_k)
    p = _launch.fwd_params(q, q, q, q, lse, OPTIONS, extras=extras)
    assert (p.sink, p.seqused_q, p.seqused_k) == (sink.data_ptr(), used_q.data_ptr(), used_k.data_ptr())
    p = _launch.bwd_params(q, q, q, q, q, lse, q, q, q, OPTIONS, extras=extras, dsink=dsink)
    assert (p.sink, p.dsink, p.seqused_q, p.seqused_k) == (sink.data_ptr(), dsink.data_ptr(), used_q.data_ptr(),
                                                           used_k.data_ptr())
    p = _launch.bwd_params(q, q, q, q, q, lse, q, q, q, OPTIONS)
    assert (p.sink, p.dsink, p.seqused_q, p.seqused_k) == (None, None, None, None)


def test_c_side_accepts_the_filled_struct_and_reports_its_checks(stub_library):
    lib = open_library(stub_library)
    q = torch.zeros(1, 16, 6, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
    params = _launch.fwd_params(q, k, k, q, torch.zeros(1, 6, 16), OPTIONS)
    _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))  # struct_size agrees with C

    k4 = torch.zeros(1, 16, 4, 64, dtype=torch.bfloat16)
    params = _launch.fwd_params(q, k4, k4, q, torch.zeros(1, 6, 16), OPTIONS)
    expected = "FLASH4_ERROR_HEAD_RATIO.*heads_q is not a multiple of heads_kv"
    with pytest.raises(_abi.Flash4Error, match=expected) as info:
        _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))
    assert info.value.status == _abi.Status.ERROR_HEAD_RATIO


def test_the_real_library_validates_the_filled_struct(real_library):
    # Validation reads only sizes, strides and pointer values, so CPU tensors serve on a machine without a GPU.
    lib = open_library(real_library)
    q = torch.zeros(2, 100, 8, 128, dtype=torch.bfloat16)
    k = torch.zeros(2, 70, 2, 128, dtype=torch.bfloat16)
    lse = torch.zeros(2, 8, 100)
    # Outputs in memory of their own: an output sharing memory with an input is rejected (flash4.h, rule 12).
    o, dq, dk, dv = torch.zeros_like(q), torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(k)
    params = _launch.fwd_params(q, k, k, o, lse, OPTIONS)
    _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))
    varlen = _launch.Varlen(torch.tensor([0, 60, 200], dtype=torch.int32),
                            torch.tensor([0, 40, 140], dtype=torch.int32), 140, 100)
    params = _launch.bwd_params(q[0], q[0], k[0], k[0], o[0], lse[0], dq[0], dk[0], dv[0], OPTIONS, varlen)
    _abi.check(lib, "flash4_bwd_check", lib.flash4_bwd_check(ctypes.byref(params)))

    # The backward with sinks needs the tensor for their gradient, named in the message.
    sink = torch.zeros(8)
    params = _launch.bwd_params(q, q, k, k, o, lse, dq, dk, dv, OPTIONS, extras=_launch.Extras(sink))
    with pytest.raises(_abi.Flash4Error, match="FLASH4_ERROR_NULL_POINTER.*dsink is NULL"):
        _abi.check(lib, "flash4_bwd_check", lib.flash4_bwd_check(ctypes.byref(params)))
    params = _launch.bwd_params(q, q, k, k, o, lse, dq, dk, dv, OPTIONS, extras=_launch.Extras(sink),
                                dsink=torch.zeros(8))
    _abi.check(lib, "flash4_bwd_check", lib.flash4_bwd_check(ctypes.byref(params)))

    k3 = torch.zeros(2, 70, 3, 128, dtype=torch.bfloat16)
    params = _launch.fwd_params(q, k3, k3, q, lse, OPTIONS)
    expected = r"FLASH4_ERROR_HEAD_RATIO.*heads_q \(8\) is not a multiple of heads_kv \(3\)"
    with pytest.raises(_abi.Flash4Error, match=expected):
        _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))


def test_head_dim_v_is_v_s_head_dim():
    q = torch.zeros(2, 33, 4, 192, dtype=torch.bfloat16)
    k = torch.zeros(2, 20, 2, 192, dtype=torch.bfloat16)
    v = torch.zeros(2, 20, 2, 128, dtype=torch.bfloat16)
    out = torch.zeros(2, 33, 4, 128, dtype=torch.bfloat16)
    lse = torch.zeros(2, 4, 33)
    p = _launch.fwd_params(q, k, v, out, lse, OPTIONS)
    assert (p.head_dim, p.head_dim_v) == (192, 128)
    assert (p.o_strides.seq, p.v_strides.seq) == (4 * 128, 2 * 128)
    p = _launch.bwd_params(out, q, k, v, out, lse, q, k, v, OPTIONS)
    assert (p.head_dim, p.head_dim_v) == (192, 128)


def test_the_real_library_accepts_every_multiple_of_8_and_a_v_of_its_own(real_library):
    lib = open_library(real_library)
    for d, dv in ((8, 8), (40, 40), (72, 72), (200, 200), (248, 248), (192, 128), (64, 128)):
        q = torch.zeros(2, 50, 4, d, dtype=torch.bfloat16)
        k = torch.zeros(2, 30, 2, d, dtype=torch.bfloat16)
        v = torch.zeros(2, 30, 2, dv, dtype=torch.bfloat16)
        o, dout = torch.zeros(2, 50, 4, dv, dtype=torch.bfloat16), torch.zeros(2, 50, 4, dv, dtype=torch.bfloat16)
        dq, dk, dv_ = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        lse = torch.zeros(2, 4, 50)
        params = _launch.fwd_params(q, k, v, o, lse, OPTIONS)
        _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))
        params = _launch.bwd_params(dout, q, k, v, o, lse, dq, dk, dv_, OPTIONS)
        _abi.check(lib, "flash4_bwd_check", lib.flash4_bwd_check(ctypes.byref(params)))
    q = torch.zeros(2, 50, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(2, 30, 2, 64, dtype=torch.bfloat16)
    v = torch.zeros(2, 30, 2, 68, dtype=torch.bfloat16)
    params = _launch.fwd_params(q, k, v, torch.zeros(2, 50, 4, 68, dtype=torch.bfloat16), torch.zeros(2, 4, 50),
                                OPTIONS)
    with pytest.raises(_abi.Flash4Error, match="FLASH4_ERROR_UNSUPPORTED_HEAD_DIM.*head_dim_v is 68"):
        _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))


def test_the_real_library_accepts_empty_problems(real_library):
    # Sequences without queries or keys, as flash_attn_func and flash_attn_varlen_func now pass them: torch gives
    # an empty tensor a NULL data pointer, which the C ABI accepts for a tensor without rows.
    lib = open_library(real_library)
    q = torch.zeros(2, 100, 8, 128, dtype=torch.bfloat16)
    no_keys = torch.zeros(2, 0, 2, 128, dtype=torch.bfloat16)
    lse = torch.zeros(2, 8, 100)
    assert no_keys.data_ptr() == 0
    # Outputs in memory of their own (flash4.h, rule 12).
    params = _launch.fwd_params(q, no_keys, no_keys, torch.zeros_like(q), lse, OPTIONS)
    _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))
    no_queries = torch.zeros(2, 0, 8, 128, dtype=torch.bfloat16)
    k = torch.zeros(2, 70, 2, 128, dtype=torch.bfloat16)
    params = _launch.bwd_params(no_queries, no_queries, k, k, no_queries, torch.zeros(2, 8, 0), no_queries,
                                torch.zeros_like(k), torch.zeros_like(k), OPTIONS)
    _abi.check(lib, "flash4_bwd_check", lib.flash4_bwd_check(ctypes.byref(params)))
    rows_q = torch.zeros(100, 8, 128, dtype=torch.bfloat16)
    rows_k = torch.zeros(0, 2, 128, dtype=torch.bfloat16)
    varlen = _launch.Varlen(torch.tensor([0, 60, 100], dtype=torch.int32), torch.zeros(3, dtype=torch.int32), 60, 0)
    params = _launch.fwd_params(rows_q, rows_k, rows_k, torch.zeros_like(rows_q), lse[0], OPTIONS, varlen)
    assert params.max_seqlen_k == 1  # the C ABI's bound must be >= 1; a bound of a batch without keys
    _abi.check(lib, "flash4_fwd_check", lib.flash4_fwd_check(ctypes.byref(params)))


def test_not_implemented_status_raises_its_own_error(stub_library):
    lib = open_library(stub_library)
    q = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
    params = _launch.bwd_params(q, q, q, q, q, torch.zeros(1, 2, 16), q, q, q, OPTIONS)
    workspace = torch.empty(4096, dtype=torch.uint8)  # the stub's backward asks for 4096 bytes
    params.workspace, params.workspace_bytes = workspace.data_ptr(), workspace.numel()
    expected = "flash4_bwd failed with FLASH4_ERROR_NOT_IMPLEMENTED.*backward"
    with pytest.raises(_abi.Flash4NotImplementedError, match=expected):
        _abi.check(lib, "flash4_bwd", lib.flash4_bwd(ctypes.byref(params), None))
    assert issubclass(_abi.Flash4NotImplementedError, NotImplementedError)


def test_tma_ready_views_are_used_in_place():
    qkv = torch.zeros(2, 33, 3, 8, 64, dtype=torch.bfloat16)
    q = qkv.unbind(2)[0]
    ready, strides = _launch.tma_ready(q)
    assert ready is q and strides == (33 * 3 * 8 * 64, 3 * 8 * 64, 64)
    rows = torch.zeros(40, 3, 8, 64, dtype=torch.float16).unbind(1)[2]  # varlen rows of a packed qkv
    ready, strides = _launch.tma_ready(rows)
    assert ready is rows and strides == (0, 3 * 8 * 64, 64)


@pytest.mark.parametrize("view", [
    lambda: torch.zeros(2, 33, 8, 68, dtype=torch.bfloat16)[..., 4:],  # base 8 bytes off, strides of 68 elements
    lambda: torch.zeros((), dtype=torch.bfloat16).expand(2, 33, 8, 64),  # stride 0, as autograd's out.sum() gives
    lambda: torch.zeros(2048, dtype=torch.float16).as_strided((1, 4, 8, 64), (1, 512, 64, 1)),  # odd size-1 stride
])
def test_views_tma_cannot_read_are_packed(view):
    t = view()
    packed, strides = _launch.tma_ready(t)
    assert packed.data_ptr() % 16 == 0 and torch.equal(packed, t)
    assert all(s > 0 and s * packed.element_size() % 16 == 0 for s in packed.stride()[:-1])
    assert strides == packed.stride()[:3]
