"""ctypes mirror of include/flash4/flash4_kvcache.h: flash4_kvcache_params and its three entry points.

Kept beside flash4._abi (which mirrors flash4.h) with the same rules: the header's fields in the header's
order with the same C types; tests/python/test_kvcache.py (test_layout_matches_gcc) compiles the header with
gcc and compares sizes and offsets. Change this file with the header.
"""

import ctypes

from ._abi import Strides, _c_enum

_TENSOR_NAMES = ("q", "k_cache", "v_cache", "k_new", "v_new", "o")


class KvcacheParams(ctypes.Structure):
    """flash4_kvcache_params. Pointers are c_void_p: the same size and alignment as the typed C pointers."""

    _fields_ = (
        [("struct_size", ctypes.c_size_t), ("dtype", _c_enum)]
        + [(name, ctypes.c_void_p) for name in _TENSOR_NAMES]
        + [("lse", ctypes.c_void_p)]
        + [(f"{name}_strides", Strides) for name in ("q", "k_cache", "v_cache", "k_new", "v_new", "o")]
        + [
            ("batch", ctypes.c_int32),
            ("seqlen_q", ctypes.c_int32),
            ("seqlen_new", ctypes.c_int32),
            ("heads_q", ctypes.c_int32),
            ("heads_kv", ctypes.c_int32),
            ("head_dim", ctypes.c_int32),
            ("cache_batch", ctypes.c_int32),
            ("cache_seqlen", ctypes.c_int32),
            ("block_table", ctypes.c_void_p),
            ("block_table_stride", ctypes.c_int64),
            ("max_pages_per_seq", ctypes.c_int32),
            ("num_pages", ctypes.c_int32),
            ("page_size", ctypes.c_int32),
            ("cache_seqlens", ctypes.c_void_p),
            ("cache_batch_idx", ctypes.c_void_p),
            ("softmax_scale", ctypes.c_float),
            ("causal", ctypes.c_int32),
            ("window_left", ctypes.c_int32),
            ("window_right", ctypes.c_int32),
            ("softcap", ctypes.c_float),
            ("num_splits", ctypes.c_int32),
            ("workspace", ctypes.c_void_p),
            ("workspace_bytes", ctypes.c_size_t),
            ("head_dim_v", ctypes.c_int32),
        ]
    )


# Exported by flash4_kvcache.h: name -> (restype, argtypes), as flash4._abi.FUNCTIONS for flash4.h.
FUNCTIONS = {
    "flash4_kvcache_check": (_c_enum, [ctypes.POINTER(KvcacheParams)]),
    "flash4_kvcache_workspace_size": (_c_enum, [ctypes.POINTER(KvcacheParams), ctypes.POINTER(ctypes.c_size_t)]),
    "flash4_kvcache": (_c_enum, [ctypes.POINTER(KvcacheParams), ctypes.c_void_p]),
}


def bind(lib):
    """Declare the kvcache entry points on an opened library (flash4._loader.load_library() declares
    flash4.h's). A library without them is too old for flash_attn_with_kvcache: Flash4LibraryError."""
    from ._loader import Flash4LibraryError

    for name, (restype, argtypes) in FUNCTIONS.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise Flash4LibraryError(
                f"the loaded flash4 library does not export {name}: it predates flash_attn_with_kvcache; rebuild it "
                f"from the same checkout as the package"
            ) from None
        function.restype = restype
        function.argtypes = argtypes
    return lib
