"""ctypes mirror of the C ABI in include/flash4/flash4.h.

Every structure lists the header's fields in the header's order with the same C types, so that
ctypes lays them out exactly as the C compiler does; tests/python/test_abi_layout.py compiles the header
with gcc and compares sizes, offsets and enum values. Change this file together with the header.

This module needs neither torch nor the shared library: it only describes the ABI and turns a status
into an exception.
"""

import ctypes
import enum
import struct

# The bindings follow the 0.x header; the library must report this major version and at least MIN_VERSION
# (flash4_version() encodes major * 10000 + minor * 100 + patch). Every call carries struct_size, so a newer
# library serves older bindings; these bindings pass the layout of 0.2 (head_dim_v, paged, sink and seqused
# fields), which an older library rejects, hence the minimum.
ABI_MAJOR = 0
MIN_VERSION = 200


class Status(enum.IntEnum):
    """flash4_status; each name is the C name without the FLASH4_ prefix."""

    SUCCESS = 0
    ERROR_INVALID_STRUCT_SIZE = 1
    ERROR_NULL_POINTER = 2
    ERROR_UNSUPPORTED_DTYPE = 3
    ERROR_UNSUPPORTED_HEAD_DIM = 4
    ERROR_HEAD_RATIO = 5
    ERROR_MISALIGNED = 6
    ERROR_INVALID_SIZE = 7
    ERROR_INVALID_MASK = 8
    ERROR_INVALID_VARLEN = 9
    ERROR_SIZE_OVERFLOW = 10
    ERROR_INVALID_ARGUMENT = 11
    ERROR_NO_KERNEL = 12
    ERROR_NO_DEVICE = 13
    ERROR_CUDA = 14
    ERROR_NOT_IMPLEMENTED = 15
    ERROR_INTERNAL = 16


class DType(enum.IntEnum):
    """flash4_dtype; each name is the C name without the FLASH4_DTYPE_ prefix."""

    BF16 = 0
    FP16 = 1


# C enums are int-sized on every platform this library builds for (gcc and clang on x86_64 and aarch64).
_c_enum = ctypes.c_int


class Strides(ctypes.Structure):
    """flash4_strides: element strides of the batch, sequence and head dimensions."""

    _fields_ = [
        ("batch", ctypes.c_int64),
        ("seq", ctypes.c_int64),
        ("head", ctypes.c_int64),
    ]


# Fields that flash4_fwd_params and flash4_bwd_params share, in the order both structs declare them
# (after their tensor pointers and strides), so the two definitions below cannot drift apart.
_PROBLEM_FIELDS = [
    ("batch", ctypes.c_int32),
    ("seqlen_q", ctypes.c_int32),
    ("seqlen_k", ctypes.c_int32),
    ("heads_q", ctypes.c_int32),
    ("heads_kv", ctypes.c_int32),
    ("head_dim", ctypes.c_int32),
    ("softmax_scale", ctypes.c_float),
    ("causal", ctypes.c_int32),
    ("window_left", ctypes.c_int32),
    ("window_right", ctypes.c_int32),
    ("softcap", ctypes.c_float),
]
_VARLEN_AND_WORKSPACE_FIELDS = [
    ("cu_seqlens_q", ctypes.c_void_p),
    ("cu_seqlens_k", ctypes.c_void_p),
    ("max_seqlen_q", ctypes.c_int32),
    ("max_seqlen_k", ctypes.c_int32),
    ("total_q", ctypes.c_int32),
    ("total_k", ctypes.c_int32),
    ("workspace", ctypes.c_void_p),
    ("workspace_bytes", ctypes.c_size_t),
]
# The first field appended to both structs after their first layout (which ends where it begins); the
# forward's paged fields and both structs' sink / seqused fields follow it below.
_APPENDED_FIELDS = [
    ("head_dim_v", ctypes.c_int32),  # 0: equal to head_dim
]


class FwdParams(ctypes.Structure):
    """flash4_fwd_params. Pointers are c_void_p: the same size and alignment as the typed C pointers."""

    _fields_ = (
        [
            ("struct_size", ctypes.c_size_t),
            ("dtype", _c_enum),
            ("q", ctypes.c_void_p),
            ("k", ctypes.c_void_p),
            ("v", ctypes.c_void_p),
            ("o", ctypes.c_void_p),
            ("lse", ctypes.c_void_p),
        ]
        + [(f"{name}_strides", Strides) for name in ("q", "k", "v", "o")]
        + _PROBLEM_FIELDS
        + _VARLEN_AND_WORKSPACE_FIELDS
        + _APPENDED_FIELDS
        + [
            ("block_table", ctypes.c_void_p),
            ("block_table_stride", ctypes.c_int64),
            ("page_size", ctypes.c_int32),
            ("num_pages", ctypes.c_int32),
        ]
        + [("sink", ctypes.c_void_p), ("seqused_q", ctypes.c_void_p), ("seqused_k", ctypes.c_void_p)]
    )


class BwdParams(ctypes.Structure):
    """flash4_bwd_params."""

    _fields_ = (
        [
            ("struct_size", ctypes.c_size_t),
            ("dtype", _c_enum),
            ("q", ctypes.c_void_p),
            ("k", ctypes.c_void_p),
            ("v", ctypes.c_void_p),
            ("o", ctypes.c_void_p),
            ("dout", ctypes.c_void_p),
            ("lse", ctypes.c_void_p),
            ("dq", ctypes.c_void_p),
            ("dk", ctypes.c_void_p),
            ("dv", ctypes.c_void_p),
        ]
        + [(f"{name}_strides", Strides) for name in ("q", "k", "v", "o", "dout", "dq", "dk", "dv")]
        + _PROBLEM_FIELDS
        + [("deterministic", ctypes.c_int32)]
        + _VARLEN_AND_WORKSPACE_FIELDS
        + _APPENDED_FIELDS
        + [("sink", ctypes.c_void_p), ("dsink", ctypes.c_void_p), ("seqused_q", ctypes.c_void_p),
           ("seqused_k", ctypes.c_void_p)]
    )


class Packer:
    """Writes a whole params struct with one struct.pack_into instead of one ctypes attribute set per field.

    The format is derived from the ctypes mirror (field offsets included, so padding is where the C compiler
    puts it) and its fields come in the mirror's order with nested structs flattened: `names` lists them
    ("q_strides.batch", ...). A pointer is packed as an unsigned integer (0 for NULL). Filling a fresh struct
    per call keeps calls from different threads apart; a struct per call costs less than one attribute set.
    """

    # Standard sizes ("=" below); c_int (the enums) is c_int32 wherever the library builds.
    _CODES = {ctypes.c_float: "f", ctypes.c_int32: "i", ctypes.c_int64: "q", ctypes.c_size_t: "Q",
              ctypes.c_void_p: "Q"}

    def __init__(self, struct_type):
        self.struct_type = struct_type
        fields = list(_scalar_fields(struct_type, 0, ""))
        self.names = tuple(name for name, _, _ in fields)
        layout, end = "=", 0
        for _, offset, ctype in fields:
            layout += "x" * (offset - end) + self._CODES[ctype]
            end = offset + ctypes.sizeof(ctype)
        layout += "x" * (ctypes.sizeof(struct_type) - end)
        self._struct = struct.Struct(layout)
        if self._struct.size != ctypes.sizeof(struct_type):
            raise AssertionError(f"{struct_type.__name__}: packed {self._struct.size} bytes, the C struct has "
                                 f"{ctypes.sizeof(struct_type)}")

    def pack(self, *values):
        """A new struct_type holding `values`, one per name in `names`, in that order."""
        params = self.struct_type()
        self._struct.pack_into(params, 0, *values)
        return params


def _scalar_fields(struct_type, base, prefix):
    """(dotted name, offset, ctype) of every scalar field of `struct_type`, nested structs flattened."""
    for name, ctype in struct_type._fields_:
        offset = base + getattr(struct_type, name).offset
        if issubclass(ctype, ctypes.Structure):
            yield from _scalar_fields(ctype, offset, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", offset, ctype


FWD_PACKER = Packer(FwdParams)
BWD_PACKER = Packer(BwdParams)


# Every exported function: name -> (restype, argtypes). The loader sets these on the CDLL and refuses a
# library that lacks one of them.
FUNCTIONS = {
    "flash4_version": (ctypes.c_int, []),
    "flash4_version_string": (ctypes.c_char_p, []),
    "flash4_status_string": (ctypes.c_char_p, [_c_enum]),
    "flash4_last_error_message": (ctypes.c_char_p, []),
    "flash4_fwd_check": (_c_enum, [ctypes.POINTER(FwdParams)]),
    "flash4_fwd_workspace_size": (_c_enum, [ctypes.POINTER(FwdParams), ctypes.POINTER(ctypes.c_size_t)]),
    "flash4_fwd": (_c_enum, [ctypes.POINTER(FwdParams), ctypes.c_void_p]),
    "flash4_bwd_check": (_c_enum, [ctypes.POINTER(BwdParams)]),
    "flash4_bwd_workspace_size": (_c_enum, [ctypes.POINTER(BwdParams), ctypes.POINTER(ctypes.c_size_t)]),
    "flash4_bwd": (_c_enum, [ctypes.POINTER(BwdParams), ctypes.c_void_p]),
}


class Flash4Error(RuntimeError):
    """A flash4 entry point returned a failing status (the int `status`, comparable with Status); the
    message carries the library's own text, which names the offending argument.

    args is (message, status), so the exception survives copy.copy, pickle and the `type(e)(*e.args)`
    re-raise that tracing machinery performs; str() is the message alone.
    """

    def __init__(self, message, status=Status.ERROR_INTERNAL):
        super().__init__(str(message), int(status))
        self.status = int(status)

    def __str__(self):
        return self.args[0]


class Flash4NotImplementedError(Flash4Error, NotImplementedError):
    """FLASH4_ERROR_NOT_IMPLEMENTED: reserved for an entry point a library does not implement; the
    current library never returns it (kept so that an older library's answer still maps to a type)."""


def error(lib, entry, status):
    """The exception for a failing `status` returned by `entry` (an exported function name) of `lib`.

    Must run right after the call and on the same thread: flash4_last_error_message() is per thread and
    is overwritten by the next call. The library's text is copied into Python strings at once; the
    exception holds nothing but those strings and the status.
    """
    status = int(status)
    message = lib.flash4_last_error_message().decode(errors="replace")
    text = f"{entry} failed with {lib.flash4_status_string(status).decode(errors='replace')} (status {status})"
    if message:
        text += f": {message}"
    kind = Flash4NotImplementedError if status == Status.ERROR_NOT_IMPLEMENTED else Flash4Error
    return kind(text, status)


def check(lib, entry, status):
    """Raise error(lib, entry, status) for a failing `status`; see error() for when to call it."""
    if status != Status.SUCCESS:
        raise error(lib, entry, status)
