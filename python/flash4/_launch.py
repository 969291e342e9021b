"""One call of the C ABI: fill the params struct, size and allocate the workspace, launch on torch's stream.

forward() and backward() serve both the eager path (flash4._eager, no dispatcher in between) and the torch
ops (flash4.ops). They trust shapes, dtypes and devices (flash4._checks ran first; the C ABI validates
again before any launch) and need a CUDA device only for the launch itself: the struct filling, the
workspace protocol and the error path run against a stub library on the CPU (tests/python/test_launch.py).

Every tensor whose address goes into the params struct is held by a local variable of the function that
calls the library, until that call has returned: a temporary (a packed copy made here) freed earlier goes
back to torch's caching allocator, and the workspace allocated next, or any tensor another thread allocates
on the same stream meanwhile, can be carved from it before the kernels have read it.
"""

import ctypes
import struct
import threading
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from . import _abi
from ._checks import DTYPES
from ._loader import load_library

# TMA reads a tensor in place when its base address and every stride but the last are 16-byte multiples.
_TMA_ALIGN_BYTES = 16
_ELEMENT_BYTES = 2  # bf16 and fp16, the only dtypes (_dtype_code refuses others before any launch)
_FWD_SIZE = ctypes.sizeof(_abi.FwdParams)
_BWD_SIZE = ctypes.sizeof(_abi.BwdParams)
_NO_VARLEN = (0, 0, 0, 0, 0, 0)  # cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, total_q, total_k
_NOT_PAGED = (0, 0, 0, 0)  # block_table, block_table_stride, page_size, num_pages
_PACKED = torch.contiguous_format


class Options(NamedTuple):
    """The trailing scalar arguments of every op, in schema order. window_right is already 0 when causal."""

    softmax_scale: float
    causal: bool
    window_left: int
    window_right: int
    softcap: float
    deterministic: bool


class Varlen(NamedTuple):
    """Varlen metadata: batch + 1 int32 row offsets per side and a bound on every sequence's length per side."""

    cu_seqlens_q: Tensor
    cu_seqlens_k: Tensor
    max_seqlen_q: int
    max_seqlen_k: int


class Extras(NamedTuple):
    """FlashAttention-3/-4's optional tensors: learnable sink logits (float32, (Hq,), contiguous, as the kernels
    read them) and the rows each sequence uses (int32, (batch,)). None: not given."""

    sink: Optional[Tensor] = None
    seqused_q: Optional[Tensor] = None
    seqused_k: Optional[Tensor] = None


NO_EXTRAS = Extras()


def _pointer(t):
    return 0 if t is None else t.data_ptr()


def tma_ready(t):
    """(t, its flash4_strides) when the kernel's TMA loads can read t in place, else a packed copy's.

    Legal torch views can break TMA's alignment (a column slice of a wider buffer, the stride-0 expand that
    autograd hands the backward for out.sum(), a strided last dimension); copying those is better than refusing
    them, as FlashAttention's maybe_contiguous does.
    clone(contiguous_format) rather than contiguous(): the latter keeps odd strides on size-1 dimensions.
    """
    abi_strides = _in_place_strides(t.stride())
    if abi_strides is not None and not t.data_ptr() % _TMA_ALIGN_BYTES:
        return t, abi_strides
    t = t.clone(memory_format=torch.contiguous_format)
    return t, _strides(t)


def _in_place_strides(strides):
    """The flash4_strides of a tensor with these torch strides when TMA can read it in place from a 16-byte
    aligned address (a contiguous last dimension, every other stride positive and a 16-byte multiple), else
    None."""
    if len(strides) == 4:
        batch, seq, head, last = strides
        abi_strides = (batch, seq, head)
    else:  # varlen rows: no batch axis (the ABI ignores its batch stride)
        seq, head, last = strides
        batch, abi_strides = seq, (0, seq, head)
    aligned = not (batch | seq | head) * _ELEMENT_BYTES % _TMA_ALIGN_BYTES
    if last == 1 and batch > 0 and seq > 0 and head > 0 and aligned:
        return abi_strides
    return None


def _strides(t):
    """flash4_strides (batch, seq, head) of a (B, S, H, D) tensor, or of varlen rows (total, H, D)."""
    strides = t.stride()
    return strides[:3] if len(strides) == 4 else (0, strides[0], strides[1])


def lse_shape(q):
    """(B, Hq, Sq), or (Hq, total_q) for varlen rows."""
    shape = q.shape
    return (shape[0], shape[2], shape[1]) if len(shape) == 4 else (shape[1], shape[0])


class _Layout:
    """What the shapes, strides and dtype of a call's q, k and v fix, worked out once per distinct layout (a
    training or decoding loop repeats a few): their flash4_strides, whether TMA can read all three in place
    (their addresses aside), and the sizes and strides of the outputs and gradients. It also stands for all of
    that in the params templates' keys. Only real tensors reach it (their sizes are ints, so hashable)."""

    __slots__ = ("strides", "in_place", "out_like_q", "out_size", "lse_size", "out_strides", "grad_strides")

    def __init__(self, q, k, v):
        self.strides = (_strides(q), _strides(k), _strides(v))
        self.in_place = all(_in_place_strides(t.stride()) is not None for t in (q, k, v))
        self.out_like_q = v.shape[-1] == q.shape[-1]
        self.out_size = out_shape(q, v)
        self.lse_size = lse_shape(q)
        self.out_strides = _packed_strides(self.out_size)
        self.grad_strides = (_packed_strides(q.shape), _packed_strides(k.shape), _packed_strides(v.shape))

    def empty_outputs(self, q):
        """out (packed) and lse fp32 of a call on q, as empty_outputs() makes them."""
        device = q.device
        if self.out_like_q:
            out = torch.empty_like(q, memory_format=_PACKED)
        else:
            out = torch.empty(*self.out_size, dtype=q.dtype, device=device)
        return out, torch.empty(*self.lse_size, dtype=torch.float32, device=device)


_LAYOUTS_KEPT = 256  # cleared when full, as the params templates are
_LAYOUTS = {}


def _layout(q, k, v):
    """The _Layout of q, k, v, from the cache when their shapes, strides and dtype were seen before."""
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _Layout(q, k, v)
        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


def _readable(q, k, v):
    """(q, k, v, their _Layout): the tensors themselves when TMA can read them in place, else packed copies of
    those it cannot (tma_ready)."""
    layout = _layout(q, k, v)
    if layout.in_place and not (q.data_ptr() | k.data_ptr() | v.data_ptr()) % _TMA_ALIGN_BYTES:
        return q, k, v, layout
    q, k, v = tma_ready(q)[0], tma_ready(k)[0], tma_ready(v)[0]
    return q, k, v, _layout(q, k, v)


def _problem(q, k, options, varlen):
    """The two runs of fields both params structs share: (batch .. softcap, cu_seqlens_q .. total_k)."""
    q_shape, k_shape = q.shape, k.shape
    if varlen is None:
        sizes = (q_shape[0], q_shape[1], k_shape[1])
        varlen_fields = _NO_VARLEN
    else:
        cu_q, cu_k, max_q, max_k = varlen
        sizes = (cu_q.shape[0] - 1, 0, 0)
        # The C ABI wants a bound >= 1; a batch without rows on one side has 0 for its longest sequence.
        varlen_fields = (cu_q.data_ptr(), cu_k.data_ptr(), max(max_q, 1), max(max_k, 1), q_shape[0], k_shape[0])
    scale, causal, left, right, softcap, _ = options
    return sizes + (q_shape[-2], k_shape[-2], q_shape[-1], scale, int(causal), left, right, softcap), varlen_fields


def _dtype_code(q):
    code = DTYPES.get(q.dtype)
    if code is None:
        raise TypeError(f"q has dtype {q.dtype}; flash4 supports torch.bfloat16 and torch.float16")
    return code


class _Templates:
    """Params structs by everything in them but the pointers: a call whose key was seen copies the remembered
    bytes and writes its own pointers, which costs about half of packing every field (CPU: 1.8 us against
    3.3 us for the forward). The key holds each value a params field is computed from, except the tensors'
    addresses. Bounded: cleared when full, so shapes that change on every call only lose the saving."""

    _CAPACITY = 256
    _CU_SEQLENS = struct.Struct("=2Q")
    _POINTER = struct.Struct("=Q")

    def __init__(self, struct_type, first_pointer, last_pointer, first_extra, last_extra):
        self._type = struct_type
        self._pointers_at, self._pointers = self._run(struct_type, first_pointer, last_pointer)
        self._extras_at, self._extras = self._run(struct_type, first_extra, last_extra)
        self._cu_seqlens_at = struct_type.cu_seqlens_q.offset
        self._block_table_at = getattr(struct_type, "block_table", None) and struct_type.block_table.offset
        self._by_key = {}

    @staticmethod
    def _run(struct_type, first, last):
        """(offset, packer) of the run of pointer fields first .. last."""
        at = getattr(struct_type, first).offset
        count = (getattr(struct_type, last).offset - at) // ctypes.sizeof(ctypes.c_void_p) + 1
        return at, struct.Struct(f"={count}Q")

    def params(self, key, pack, pointers, extra_pointers, varlen, block_table=None):
        """A struct for `key`: pack() (which fills every field) the first time, then the remembered bytes with
        `pointers` (the run of pointer fields first_pointer .. last_pointer), `extra_pointers` (the run
        first_extra .. last_extra: sinks and seqused), varlen's cu_seqlens and the block_table written."""
        template = self._by_key.get(key)
        if template is None:
            params = pack()
            if len(self._by_key) >= self._CAPACITY:
                self._by_key.clear()
            self._by_key[key] = bytes(params)
            return params
        params = self._type.from_buffer_copy(template)
        self._pointers.pack_into(params, self._pointers_at, *pointers)
        self._extras.pack_into(params, self._extras_at, *extra_pointers)
        if varlen is not None:
            self._CU_SEQLENS.pack_into(params, self._cu_seqlens_at, varlen[0].data_ptr(), varlen[1].data_ptr())
        if block_table is not None:
            self._POINTER.pack_into(params, self._block_table_at, block_table.data_ptr())
        return params


_FWD_TEMPLATES = _Templates(_abi.FwdParams, "q", "lse", "sink", "seqused_k")
_BWD_TEMPLATES = _Templates(_abi.BwdParams, "q", "dv", "sink", "seqused_k")


def _key(tensors, options, varlen, block_table=None):
    """Every value but the addresses that the params fields are computed from (see _problem and the paged
    fields of fwd_params; k's shape holds the pages' count and size). tensors: q, k, v's _Layout, or the same
    values read from the tensors."""
    varlen_sizes = None if varlen is None else (varlen[0].shape[0], varlen[2], varlen[3])
    paged = None if block_table is None else block_table.stride(0)
    return tensors, options, varlen_sizes, paged


def _tensors_key(q, k, v, strides):
    """What a _Layout stands for in _key, read from tensors that have none (their strides given)."""
    return q.shape, k.shape, v.shape[-1], q.dtype, strides


_NO_FWD_EXTRA_POINTERS = (0, 0, 0)


def fwd_params(q, k, v, out, lse, options, varlen=None, layout=None, block_table=None, extras=NO_EXTRAS):
    """flash4_fwd_params for these tensors, which the caller keeps alive until the call (any device: the CPU
    tests fill it from CPU tensors). layout: the _Layout of q, k, v when the caller has it, out then packed.
    block_table (varlen only): k and v are the pages (num_pages, page_size, Hkv, D / Dv) of a paged cache."""
    if layout is None:
        strides = tuple(_strides(t) for t in (q, k, v, out))
        tensors = _tensors_key(q, k, v, strides)
    else:
        strides, tensors = (*layout.strides, layout.out_strides), layout
    pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())
    if extras is NO_EXTRAS:
        extra_pointers = _NO_FWD_EXTRA_POINTERS
    else:
        extra_pointers = tuple(_pointer(t) for t in extras)  # sink, seqused_q, seqused_k

    def pack():
        problem, varlen_fields = _problem(q, k, options, varlen)
        q_strides, k_strides, v_strides, out_strides = strides
        paged_fields = _NOT_PAGED
        if block_table is not None:
            # total_k is then a bound on the sum of the key lengths (flash4.h), so cu_seqlens_k is never read back.
            batch, max_seqlen_k = problem[0], varlen_fields[3]
            varlen_fields = varlen_fields[:5] + (batch * max_seqlen_k,)
            paged_fields = (block_table.data_ptr(), block_table.stride(0), k.shape[1], k.shape[0])
        return _abi.FWD_PACKER.pack(_FWD_SIZE, _dtype_code(q), *pointers, *q_strides, *k_strides, *v_strides,
                                    *out_strides, *problem, *varlen_fields, 0, 0, v.shape[-1], *paged_fields,
                                    *extra_pointers)

    key = _key(tensors, options, varlen, block_table)
    return _FWD_TEMPLATES.params(key, pack, pointers, extra_pointers, varlen, block_table)


def bwd_params(dout, q, k, v, out, lse, dq, dk, dv, options, varlen=None, layout=None, extras=NO_EXTRAS, dsink=None):
    """flash4_bwd_params for these tensors, which the caller keeps alive until the call. layout: the _Layout of
    q, k, v when the caller has it, dq, dk, dv then packed. dsink: float32 (Hq,), required with extras.sink."""
    if layout is None:
        strides = tuple(_strides(t) for t in (q, k, v, out, dout, dq, dk, dv))
        tensors = _tensors_key(q, k, v, strides)
    else:
        out_strides, dout_strides = _strides(out), _strides(dout)
        strides = (*layout.strides, out_strides, dout_strides, *layout.grad_strides)
        tensors = (layout, out_strides, dout_strides)
    pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), dout.data_ptr(), lse.data_ptr(),
                dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    sink, seqused_q, seqused_k = extras
    extra_pointers = (_pointer(sink), _pointer(dsink), _pointer(seqused_q), _pointer(seqused_k))

    def pack():
        problem, varlen_fields = _problem(q, k, options, varlen)
        q_s, k_s, v_s, out_s, dout_s, dq_s, dk_s, dv_s = strides
        return _abi.BWD_PACKER.pack(_BWD_SIZE, _dtype_code(q), *pointers, *q_s, *k_s, *v_s, *out_s, *dout_s, *dq_s,
                                    *dk_s, *dv_s, *problem, int(options.deterministic), *varlen_fields, 0, 0,
                                    v.shape[-1], *extra_pointers)

    return _BWD_TEMPLATES.params(_key(tensors, options, varlen), pack, pointers, extra_pointers, varlen)


def _packed_strides(shape):
    """The flash4_strides of a new contiguous tensor of `shape` (torch counts an empty axis as 1)."""
    if len(shape) == 4:
        _, seqlen, heads, head_dim = shape
        return (max(seqlen, 1) * heads * head_dim, heads * head_dim, head_dim)
    return (0, shape[1] * shape[2], shape[2])


def out_shape(q, v):
    """q's shape with v's head dim (head_dim_v)."""
    return (*q.shape[:-1], v.shape[-1])


# The allocations below are written in the forms torch parses fastest: empty_like, and sizes as separate
# ints. torch.empty(shape_tuple, dtype=..., device=...) spends longer parsing its arguments than allocating.


def empty_outputs(q, v):
    """out (q's shape with v's head dim), packed, and lse fp32."""
    device = q.device
    if v.shape[-1] == q.shape[-1]:
        out = torch.empty_like(q, memory_format=_PACKED)
    else:
        out = torch.empty(*out_shape(q, v), dtype=q.dtype, device=device)
    return out, torch.empty(*lse_shape(q), dtype=torch.float32, device=device)


def empty_grads(q, k, v):
    return (torch.empty_like(q, memory_format=_PACKED), torch.empty_like(k, memory_format=_PACKED),
            torch.empty_like(v, memory_format=_PACKED))


def forward(q, k, v, options, varlen=None, block_table=None, extras=NO_EXTRAS):
    """(out (q's shape with v's head dim), lse (B, Hq, Sq) or (Hq, total_q)) of flash4_fwd; with block_table
    (varlen), k and v are the pages of a paged cache, read in place (a copy of a whole cache would cost more
    than the call). Rows past seqused_q are left as torch.empty allocated them, as in FlashAttention 3."""
    if block_table is None:
        q, k, v, layout = _readable(q, k, v)
    else:
        q = tma_ready(q)[0]
        layout = _layout(q, k, v)
    out, lse = layout.empty_outputs(q)
    run("fwd", fwd_params(q, k, v, out, lse, options, varlen, layout, block_table, extras), q.device)
    return out, lse


def backward(dout, q, k, v, out, lse, options, varlen=None, extras=NO_EXTRAS, dsink=None):
    """(dq, dk, dv) of flash4_bwd, new tensors; with extras.sink, the sinks' gradient goes into `dsink` (float32
    (Hq,)). Gradients of rows past seqused are zeros (the kernels leave those rows alone; autograd must not see
    torch.empty's leftovers)."""
    q, k, v, layout = _readable(q, k, v)
    (dout, _), (out, _) = tma_ready(dout), tma_ready(out)
    lse = lse.contiguous()  # held here until the launch: see the module's docstring
    unused_rows = extras.seqused_q is not None or extras.seqused_k is not None
    dq, dk, dv = (torch.zeros_like(t, memory_format=torch.contiguous_format) for t in (q, k, v)) if unused_rows \
        else empty_grads(q, k, v)
    run("bwd", bwd_params(dout, q, k, v, out, lse, dq, dk, dv, options, varlen, layout, extras, dsink), q.device)
    return dq, dk, dv


def run(direction, params, device):
    """Size the workspace and launch flash4_{direction} on torch's current stream of `device`.

    The library launches on the calling thread's current device, so that is made `device` for the call when
    it is another. A failing status is raised only after the device guard is left, as an exception that holds
    plain strings: nothing raised here refers to ctypes objects, the library's buffers or an open context.
    """
    lib = load_library()
    index = device.index
    # The raw query: torch.cuda.current_device() first checks that CUDA is initialized, which the CUDA
    # tensors handed here already prove.
    if index == torch._C._cuda_getDevice():
        error = _call_on_current_device(lib, direction, params, index, device)
    else:
        with torch.cuda.device(index):
            error = _call_on_current_device(lib, direction, params, index, device)
    if error is not None:
        raise error


def _call_on_current_device(lib, direction, params, index, device):
    # torch's current stream as a raw handle: the public torch.cuda.current_stream() builds a Stream object
    # for it on every call. The workspace comes from torch's caching allocator on that stream, so freeing it
    # (a large one, right after the launch) is stream-ordered, and under CUDA graph capture it lands in the
    # graph's pool.
    stream = torch._C._cuda_getCurrentRawStream(index)

    def allocate(size):
        # Whether the stream is capturing (a CUDA runtime query) is asked only of a call that needs a workspace.
        return workspace_allocator(index, stream, device, torch._C._cuda_isCurrentStreamCapturing())(size)

    error, workspace = call_library(lib, direction, params, stream, allocate)
    del workspace
    return error


# The library's launches initialize what they read of their workspace on the stream (the forward zeroes
# its tile counter, and varlen lists its tiles, the backward's preprocess its dQ accumulator rows and
# counter), so one workspace can serve every call one thread makes on one (device, stream), the calls being
# ordered by it. Not one per stream alone: a call enqueues several operations (the forward's memset or tile
# list and its kernel; the backward's memset, preprocess, main kernel, postprocess) while the C call runs
# without the GIL, so two threads calling on one stream (the legacy default stream, say) may interleave
# them, and one call's memset would then zero the counter or accumulator another call's kernel is using. Kept up to a size: the small calls, whose host time
# sets their speed, are spared an allocation and a free, and the large ones hold no memory past their call;
# and for at most _KEPT_WORKSPACES streams per thread. A thread's workspaces are freed when it ends, after
# it has enqueued its last use of them (freeing is stream-ordered). Not under CUDA graph capture: a graph
# replayed on another stream would share the workspace with the eager calls, so a captured call allocates
# its own from the graph's pool.
_KEPT_WORKSPACE_BYTES = 1 << 22
_KEPT_WORKSPACES = 64  # streams (torch's pools hold 32 per priority and device; external ones are not pooled)


class _ThreadWorkspaces(threading.local):
    """This thread's kept workspaces by (device index, stream)."""

    def __init__(self):
        self.by_stream = {}


_STREAM_WORKSPACES = _ThreadWorkspaces()


def workspace_allocator(index, stream, device, capturing):
    """allocate(bytes) for call_library: the calling thread's workspace kept for (index, stream), grown when too
    small, or a new one while capturing a CUDA graph or above the bound."""

    def allocate(size):
        if capturing or size > _KEPT_WORKSPACE_BYTES:
            return torch.empty(size, dtype=torch.uint8, device=device)
        kept = _STREAM_WORKSPACES.by_stream
        key = (index, stream)
        workspace = kept.get(key)
        if workspace is None or workspace.numel() < size:
            workspace = torch.empty(size, dtype=torch.uint8, device=device)
            if len(kept) >= _KEPT_WORKSPACES:
                kept.clear()  # freeing is stream-ordered: no launch loses memory it reads
            kept[key] = workspace
        return workspace

    return allocate


def call_library(lib, direction, params, stream, allocate):
    """(error or None, workspace or None): flash4_{direction}_workspace_size, allocate(bytes) if nonzero, then
    flash4_{direction} on `stream` (an int handle, 0 for the legacy stream).

    Needs neither torch nor a GPU (the CPU tests drive it with a stub library). It never raises for a
    failing status: the caller raises once it has left every context it entered (see run).
    """
    size_entry, launch_entry = _ENTRIES[direction]
    size = ctypes.c_size_t(0)
    status = getattr(lib, size_entry)(params, ctypes.byref(size))
    if status:
        return _abi.error(lib, size_entry, status), None
    workspace = None
    if size.value:
        workspace = allocate(size.value)
        params.workspace, params.workspace_bytes = workspace.data_ptr(), size.value
    # argtypes declare the handle a void*, so a 64-bit handle travels whole.
    status = getattr(lib, launch_entry)(params, stream)
    if status:
        return _abi.error(lib, launch_entry, status), workspace
    return None, workspace


_ENTRIES = {
    direction: (f"flash4_{direction}_workspace_size", f"flash4_{direction}") for direction in ("fwd", "bwd", "kvcache")
}
