"""The path from an op to the C ABI without a GPU: flash4._launch.call_library driven against the stub library
(conftest.STUB_SOURCE), which records the stream and workspace each launch was handed, and the exceptions
a failing status turns into.
"""

import copy
import gc
import ctypes
import pickle
import threading

import pytest
import torch

from flash4 import Flash4Error, Flash4NotImplementedError, _abi, _eager, _launch
from flash4._loader import open_library

OPTIONS = _launch.Options(softmax_scale=0.125, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                      deterministic=True)
# A handle above 2**32, as real cudaStream_t values are: a 32-bit int on the way would lose its top half.
STREAM = 0x7F3A_1234_5670


@pytest.fixture
def stub(stub_library):
    lib = open_library(stub_library)
    for name in ("stub_seen_stream", "stub_seen_workspace", "stub_seen_workspace_bytes"):
        getattr(lib, name).restype = ctypes.c_size_t
        getattr(lib, name).argtypes = []
    return lib


class Allocations:
    """allocate(bytes) for call_library: CPU uint8 tensors, remembered."""

    def __init__(self):
        self.tensors = []

    def __call__(self, size):
        tensor = torch.empty(size, dtype=torch.uint8)
        self.tensors.append(tensor)
        return tensor


def fwd_params(heads_kv=2):
    q = torch.zeros(1, 16, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 16, heads_kv, 64, dtype=torch.bfloat16)
    return _launch.fwd_params(q, k, k, q, torch.zeros(1, 4, 16), OPTIONS)


def bwd_params():
    q = torch.zeros(1, 16, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
    return _launch.bwd_params(q, q, k, k, q, torch.zeros(1, 4, 16), q, k, k, OPTIONS)


def test_forward_launch_gets_the_full_stream_handle_and_no_workspace(stub):
    allocate = Allocations()
    error, workspace = _launch.call_library(stub, "fwd", fwd_params(), STREAM, allocate)
    assert error is None and workspace is None and allocate.tensors == []
    assert stub.stub_seen_stream() == STREAM
    assert (stub.stub_seen_workspace(), stub.stub_seen_workspace_bytes()) == (0, 0)


def test_the_legacy_stream_is_passed_as_null(stub):
    error, _ = _launch.call_library(stub, "fwd", fwd_params(), 0, Allocations())
    assert error is None and stub.stub_seen_stream() == 0


def test_backward_allocates_the_workspace_it_asks_for_and_reports_not_implemented(stub):
    allocate = Allocations()
    params = bwd_params()
    error, workspace = _launch.call_library(stub, "bwd", params, STREAM, allocate)
    assert allocate.tensors == [workspace] and workspace.numel() == 4096 and workspace.dtype == torch.uint8
    assert (params.workspace, params.workspace_bytes) == (workspace.data_ptr(), 4096)
    assert stub.stub_seen_workspace() == workspace.data_ptr() and stub.stub_seen_workspace_bytes() == 4096
    assert stub.stub_seen_stream() == STREAM
    assert isinstance(error, Flash4NotImplementedError) and isinstance(error, NotImplementedError)
    assert error.status == _abi.Status.ERROR_NOT_IMPLEMENTED
    assert str(error) == ("flash4_bwd failed with FLASH4_ERROR_NOT_IMPLEMENTED (status 15): "
                          "flash4_bwd: the backward kernel is not in this release")


def test_a_failing_size_query_allocates_and_launches_nothing(stub):
    allocate = Allocations()
    stub.flash4_fwd(ctypes.byref(fwd_params()), ctypes.c_void_p(1))  # a launch the next call must not repeat
    error, workspace = _launch.call_library(stub, "fwd", fwd_params(heads_kv=3), STREAM, allocate)
    assert workspace is None and allocate.tensors == []
    assert stub.stub_seen_stream() == 1  # flash4_fwd was not called again
    assert type(error) is Flash4Error and error.status == _abi.Status.ERROR_HEAD_RATIO
    assert str(error).startswith("flash4_fwd_workspace_size failed with FLASH4_ERROR_HEAD_RATIO (status 5): heads_q")


def test_errors_are_plain_values():
    # Raised from inside a custom op, an error crosses torch's dispatcher and may be copied, pickled or
    # re-created as type(e)(*e.args) (tracing does this); each must keep the message and the status.
    for error in (Flash4Error("flash4_fwd failed: softmax_scale is -1", 11),
                  Flash4NotImplementedError("flash4_bwd failed", _abi.Status.ERROR_NOT_IMPLEMENTED)):
        for clone in (copy.copy(error), pickle.loads(pickle.dumps(error)), type(error)(*error.args)):
            assert type(clone) is type(error)
            assert (str(clone), clone.status) == (str(error), error.status)
            assert type(clone.status) is int


def test_check_raises_the_error_and_passes_success(stub):
    _abi.check(stub, "flash4_fwd_check", _abi.Status.SUCCESS)
    status = stub.flash4_fwd_check(ctypes.byref(fwd_params(heads_kv=3)))
    with pytest.raises(Flash4Error, match="flash4_fwd_check failed with FLASH4_ERROR_HEAD_RATIO") as info:
        _abi.check(stub, "flash4_fwd_check", status)
    assert info.value.status == _abi.Status.ERROR_HEAD_RATIO


# ---------------------------------------------------------------- what the library is handed stays alive


def _live_tensor_pointers():
    # Plain tensors only (the tests' are): fake ones that earlier tests left to the collector have no data, and
    # type() rather than isinstance() because the latter asks objects for __class__, which some of torch's warn on.
    return {obj.data_ptr() for obj in gc.get_objects() if type(obj) is torch.Tensor}


@pytest.fixture
def launches(monkeypatch):
    """Replaces _launch.run (the CUDA part) with a recorder that checks, at launch time, that every pointer in
    the params struct is the data of a tensor still alive: a temporary freed before the launch goes back to
    torch's caching allocator, and the workspace allocated next can be carved from it (on the GPU this turned
    the ring's dq wrong when its lse was a non-contiguous slice)."""
    seen = []

    def run(direction, params, device):
        live = _live_tensor_pointers()
        pointers = {name: getattr(params, name) for name, ctype in params._fields_ if ctype is ctypes.c_void_p}
        dead = [name for name, address in pointers.items() if address and address not in live]
        assert not dead, f"{direction}: {', '.join(dead)} point(s) at memory no live tensor holds"
        seen.append(direction)

    monkeypatch.setattr(_launch, "run", run)
    return seen


def test_the_backward_holds_the_packed_copies_it_hands_the_library(launches):
    q = torch.zeros(2, 64, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(2, 32, 2, 64, dtype=torch.bfloat16)
    out = torch.zeros_like(q)
    lse = torch.zeros(2, 4, 128)[..., 64:]  # the ring's second-half slice: not contiguous, so copied
    dout = torch.zeros((), dtype=torch.bfloat16).expand(q.shape)  # out.sum()'s gradient: copied too
    gc.collect()
    _launch.backward(dout, q, k, k, out, lse, OPTIONS)
    assert launches == ["bwd"]


def test_the_forward_holds_the_packed_copies_it_hands_the_library(launches):
    q = torch.zeros(2, 64, 4, 68, dtype=torch.bfloat16)[..., 4:]  # misaligned: copied
    k = torch.zeros(2, 32, 2, 64, dtype=torch.bfloat16)
    gc.collect()
    out, lse = _launch.forward(q, k, k, OPTIONS)
    assert out.shape == q.shape and lse.shape == (2, 4, 64)
    assert launches == ["fwd"]


def test_small_workspaces_are_kept_per_device_and_stream_and_grow(monkeypatch):
    monkeypatch.setattr(_launch, "_STREAM_WORKSPACES", _launch._ThreadWorkspaces())
    cpu = torch.device("cpu")
    kept = _launch.workspace_allocator(0, STREAM, cpu, capturing=False)
    first = kept(256)
    assert first.numel() == 256 and first.dtype == torch.uint8
    assert kept(128) is first  # reused: the stream orders the calls that share it
    assert _launch.workspace_allocator(0, STREAM + 1, cpu, False)(256) is not first  # another stream
    assert _launch.workspace_allocator(1, STREAM, cpu, False)(256) is not first  # another device
    grown = kept(512)
    assert grown.numel() == 512 and kept(256) is grown
    assert _launch.workspace_allocator(0, STREAM, cpu, False)(256) is grown
    # Under graph capture, and above the bound, every call gets its own.
    capturing = _launch.workspace_allocator(0, STREAM, cpu, capturing=True)
    assert capturing(256) is not grown and capturing(256) is not capturing(256)
    large = _launch._KEPT_WORKSPACE_BYTES + 1
    assert kept(large) is not kept(large) and kept(256) is grown
    # At most _KEPT_WORKSPACES streams are remembered: streams without end forget the older ones.
    for stream in range(_launch._KEPT_WORKSPACES + 1):
        _launch.workspace_allocator(0, stream, cpu, False)(256)
    assert len(_launch._STREAM_WORKSPACES.by_stream) <= _launch._KEPT_WORKSPACES


def test_threads_calling_on_one_stream_never_share_a_workspace():
    """Two threads' calls on one stream may interleave their launches (the C call runs without the GIL): one
    call's memset would zero the tile counter or dQ accumulator the other's kernel is using."""
    cpu = torch.device("cpu")
    stream = STREAM + 0x100  # no other test keeps a workspace for it
    here = _launch.workspace_allocator(0, stream, cpu, capturing=False)(256)
    there = []
    thread = threading.Thread(target=lambda: there.append(_launch.workspace_allocator(0, stream, cpu, False)(256)))
    thread.start()
    thread.join()
    assert there[0] is not here
    assert _launch.workspace_allocator(0, stream, cpu, False)(256) is here  # still kept for this thread


def _fresh_bytes(fill, templates):
    """bytes of fill() packed field by field: no template remembered."""
    remembered, templates._by_key = templates._by_key, {}
    try:
        return bytes(fill())
    finally:
        templates._by_key = remembered


@pytest.mark.parametrize("varlen", [False, True])
def test_params_copied_from_a_template_equal_params_packed_field_by_field(varlen):
    """The second call of a key copies the first's bytes and writes its own pointers (cu_seqlens too)."""
    def call():
        q, k = torch.zeros(2, 16, 4, 64, dtype=torch.bfloat16), torch.zeros(2, 16, 2, 64, dtype=torch.bfloat16)
        out, lse, dq, dk = torch.zeros_like(q), torch.zeros(2, 4, 16), torch.zeros_like(q), torch.zeros_like(k)
        offsets = _launch.Varlen(torch.tensor([0, 7, 16], dtype=torch.int32), torch.tensor([0, 9, 16], dtype=torch.int32),
                                 9, 9) if varlen else None
        if varlen:
            q, k, out, dq, dk = (t[0] for t in (q, k, out, dq, dk))  # (total, heads, dim) rows
            lse = lse[0]
        return (q, k, out, lse, dq, dk, offsets)

    held = []  # every call's tensors stay alive, so each call has addresses of its own
    for _ in range(3):  # the first call packs and remembers, the others copy
        held.append(call())
        q, k, out, lse, dq, dk, offsets = held[-1]
        fwd = lambda: _launch.fwd_params(q, k, k, out, lse, OPTIONS, offsets)  # noqa: E731
        bwd = lambda: _launch.bwd_params(out, q, k, k, out, lse, dq, dk, dk, OPTIONS, offsets)  # noqa: E731
        assert bytes(fwd()) == _fresh_bytes(fwd, _launch._FWD_TEMPLATES)
        assert bytes(bwd()) == _fresh_bytes(bwd, _launch._BWD_TEMPLATES)
        assert fwd().q == q.data_ptr() and fwd().lse == lse.data_ptr() and bwd().dv == dk.data_ptr()
        if varlen:
            assert fwd().cu_seqlens_k == offsets.cu_seqlens_k.data_ptr() == bwd().cu_seqlens_k


def test_params_of_another_key_are_packed_anew():
    q = torch.zeros(1, 16, 4, 64, dtype=torch.bfloat16)
    lse = torch.zeros(1, 4, 16)
    causal = _launch.fwd_params(q, q, q, q, lse, OPTIONS._replace(causal=True))
    plain = _launch.fwd_params(q, q, q, q, lse, OPTIONS._replace(causal=False))
    assert (causal.causal, plain.causal) == (1, 0)
    longer = torch.zeros(1, 32, 4, 64, dtype=torch.bfloat16)
    assert _launch.fwd_params(longer, q, q, longer, torch.zeros(1, 4, 32), OPTIONS).seqlen_q == 32


def test_paged_params_copied_from_a_template_hold_their_own_block_table():
    q, k = torch.zeros(100, 8, 64, dtype=torch.bfloat16), torch.zeros(40, 16, 2, 64, dtype=torch.bfloat16)
    out, lse, cu = torch.zeros_like(q), torch.zeros(8, 100), torch.zeros(4, dtype=torch.int32)
    tables = [torch.zeros(3, 10, dtype=torch.int32) for _ in range(3)]  # all alive: addresses of their own
    for table in tables:
        fwd = lambda: _launch.fwd_params(q, k, k, out, lse, OPTIONS, _launch.Varlen(cu, cu, 50, 150),  # noqa: E731
                                         block_table=table)
        assert fwd().block_table == table.data_ptr()
        assert bytes(fwd()) == _fresh_bytes(fwd, _launch._FWD_TEMPLATES)


@pytest.mark.parametrize("varlen", [False, True])
def test_params_filled_from_a_layout_equal_params_read_from_the_tensors(varlen):
    """forward() and backward() fill the struct from q, k, v's cached _Layout (and make the outputs it sizes);
    that must give the bytes the tensors themselves give. v has a head dim of its own."""
    q, k = torch.zeros(2, 16, 4, 64, dtype=torch.bfloat16), torch.zeros(2, 16, 2, 64, dtype=torch.bfloat16)
    v = torch.zeros(2, 16, 2, 32, dtype=torch.bfloat16)
    offsets = None
    if varlen:
        q, k, v = q[0], k[0], v[0]
        cu_seqlens = (torch.tensor([0, 7, 16], dtype=torch.int32), torch.tensor([0, 9, 16], dtype=torch.int32))
        offsets = _launch.Varlen(*cu_seqlens, 9, 9)
    layout = _launch._layout(q, k, v)
    assert _launch._layout(q, k, v) is layout  # cached by shapes, strides and dtype
    out, lse = layout.empty_outputs(q)
    assert (out.shape, lse.shape) == ((_launch.out_shape(q, v)), _launch.lse_shape(q)) and out.is_contiguous()
    dq, dk, dv = _launch.empty_grads(q, k, v)
    fills = {
        _launch._FWD_TEMPLATES: lambda layout: _launch.fwd_params(q, k, v, out, lse, OPTIONS, offsets, layout),
        _launch._BWD_TEMPLATES: lambda layout: _launch.bwd_params(out, q, k, v, out, lse, dq, dk, dv, OPTIONS, offsets,
                                                                  layout),
    }
    for templates, fill in fills.items():
        assert _fresh_bytes(lambda: fill(layout), templates) == _fresh_bytes(lambda: fill(None), templates)
        assert bytes(fill(layout)) == bytes(fill(None))  # from their templates


def test_an_address_tma_cannot_read_is_copied_though_its_layout_was_read_in_place():
    """A layout's strides are checked once; the addresses, which differ from call to call, every time."""
    rows = 2 * 16 * 4 * 64
    buffer = torch.zeros(rows + 8, dtype=torch.bfloat16)
    aligned, misaligned = buffer[:rows].view(2, 16, 4, 64), buffer[1:rows + 1].view(2, 16, 4, 64)
    assert aligned.stride() == misaligned.stride() and misaligned.data_ptr() % 16
    assert all(t is aligned for t in _launch._readable(aligned, aligned, aligned)[:3])
    q, k, v, layout = _launch._readable(misaligned, aligned, aligned)
    assert q is not misaligned and torch.equal(q, misaligned) and not q.data_ptr() % 16
    assert k is aligned and v is aligned and layout.in_place


def test_a_strided_last_dimension_reaches_the_library_as_a_packed_copy_and_gradients_reach_the_original(
        monkeypatch):
    """FlashAttention copies a q, k or v whose last dimension is strided (maybe_contiguous); flash4's launch
    does (tma_ready), in both directions, and autograd takes the gradient back to the strided tensor's base."""
    seen = {}

    def run(direction, params, device):
        # The bytes the library would read at params.q: those of q's packed copy, at the packed strides.
        strides = params.q_strides
        seen[direction] = (ctypes.string_at(params.q, q.numel() * q.element_size()),
                           (strides.batch, strides.seq, strides.head))

    monkeypatch.setattr(_launch, "run", run)
    base = torch.randn(2, 16, 4, 128).to(torch.bfloat16).requires_grad_()
    q = base[..., ::2]  # head dim 64 at stride 2
    k = torch.randn(2, 16, 2, 64).to(torch.bfloat16).requires_grad_()
    assert q.stride(-1) == 2 and _launch._in_place_strides(q.stride()) is None
    out, lse = _eager.attention(_eager.Call(OPTIONS, None, _eager.unpacked), q, k, k)
    out.backward(torch.ones_like(out))
    packed = q.detach().contiguous()
    for direction in ("fwd", "bwd"):
        data, strides = seen[direction]
        assert data == packed.view(torch.uint8).numpy().tobytes()
        assert strides == packed.stride()[:3]
    assert base.grad.shape == base.shape and k.grad.shape == k.shape
