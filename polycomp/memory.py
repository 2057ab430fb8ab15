"""Buffers for generated kernels: 64-byte aligned numpy arrays.

The runtime (polycomp/runtime.py) allocates the outputs and temporaries a kernel call
needs here. numpy's allocator aligns to 16 bytes only; a large array then starts 16 bytes
into a page, so that every 64-byte vector load of the generated loops straddles two cache
lines (matmul 1024^3 float32, 2 threads: 0.0153 s with numpy's buffers, 0.0108 s with
aligned ones).
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .errors import ArgumentError

ALIGNMENT = 64  # a cache line, and the width of an AVX-512 vector


@functools.lru_cache(maxsize=1)
def memory_limit() -> int:
    """The largest buffer polycomp allocates or copies, in bytes: this machine's physical
    memory. A buffer beyond it cannot be used (numpy raises MemoryError, or the system
    swaps for minutes); a zero-stride view (np.broadcast_to) of one element can have such
    a logical size and still pass every dtype, rank and shape check."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**46  # 64 TiB, where the system does not say


def buffer_bytes(shape: tuple[int, ...], dtype: np.dtype | str) -> int:
    """The byte count of a C-contiguous buffer of this shape, exact (no int64 overflow)."""
    count = 1
    for extent in shape:
        count *= max(0, int(extent))
    return count * np.dtype(dtype).itemsize


def check_buffer(shape: tuple[int, ...], dtype: np.dtype | str, what: str) -> None:
    """ArgumentError when a buffer of this shape would exceed :func:`memory_limit`."""
    nbytes = buffer_bytes(shape, dtype)
    if nbytes > memory_limit():
        raise ArgumentError(
            f"{what} needs a buffer of {nbytes / 2**30:.3g} GiB (shape {tuple(shape)}, "
            f"{np.dtype(dtype)}), more than this machine's memory "
            f"({memory_limit() / 2**30:.3g} GiB)",
            hint="the sizes come from the argument shapes: check them (a np.broadcast_to view "
                 "is copied to a contiguous array before the call)")


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % ALIGNMENT == 0


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ALIGNMENT boundary
    (a view into a slightly larger byte buffer, which it keeps alive as its base)."""
    dtype = np.dtype(dtype)
    check_buffer(shape, dtype, "an output or temporary array")
    nbytes = buffer_bytes(shape, dtype)
    try:
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    except MemoryError:
        raise ArgumentError(f"cannot allocate {nbytes / 2**30:.3g} GiB for an output or "
                            f"temporary array of shape {tuple(shape)}",
                            hint="free memory, or call the kernel on smaller arrays") from None
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    out = aligned_empty(shape, dtype)
    out.fill(0)
    return out
