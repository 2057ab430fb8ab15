"""The OpenMP thread count of generated kernels.

Kernels link gcc's OpenMP runtime (libgomp); ``omp_set_num_threads`` called from the
Python thread that calls kernels sets how many threads their parallel loops use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from .errors import OptionError


@functools.lru_cache(maxsize=1)
def _libgomp() -> ctypes.CDLL:
    name = ctypes.util.find_library("gomp") or "libgomp.so.1"
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


def set_num_threads(n: int) -> None:
    """Use ``n`` OpenMP threads in every kernel called from this Python thread."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise OptionError(f"the thread count must be a positive integer, not {n!r}")
    _libgomp().omp_set_num_threads(ctypes.c_int(n))


def get_max_threads() -> int:
    return int(_libgomp().omp_get_max_threads())
