"""flash4: exact attention kernels for NVIDIA Hopper, called the way FlashAttention is.

    import flash4
    out = flash4.flash_attn_func(q, k, v, causal=True)  # q (B, S, Hq, D), k/v (B, S, Hkv, D), bf16/fp16 CUDA

The kernels live in libflash4.so, reached through its C ABI with ctypes (see flash4._loader for where it
is looked for); importing this package does not open it, so argument checks and fake-tensor shape
inference work without it. Eager calls go straight to the library (flash4._eager); under torch.compile and
other tracing they go through the torch operators flash4::fwd, flash4::bwd, flash4::varlen_fwd and
flash4::varlen_bwd (flash4.ops).
"""

from pathlib import Path

from ._abi import Flash4Error, Flash4NotImplementedError
from ._loader import Flash4LibraryError, library_version
from .interface import flash_attn_func, flash_attn_varlen_func
from .kvcache import flash_attn_with_kvcache
from .packed import (
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)

# The package version: the project's one version file, which CMakeLists.txt and pyproject.toml read too.
__version__ = (Path(__file__).parent / "VERSION").read_text().strip()

__all__ = [
    "Flash4Error",
    "Flash4LibraryError",
    "Flash4NotImplementedError",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "library_version",
]
