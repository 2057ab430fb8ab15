"""C baselines and peers: compile a kernel's C file into a shared object with
gcc or clang-19 (+Polly), load it with ctypes and call it on numpy arrays.

Main entry points:

* :data:`COMPILERS` -- the C variants: ``gcc`` (the baseline, gcc -O3
  -march=native), ``polly`` (clang-19 -O3 -march=native -mllvm -polly) and
  ``polly-par`` (the same plus -mllvm -polly-parallel, linked with gcc's
  libgomp).
* :func:`available_compilers` -- the subset whose compiler is on PATH.
* :func:`build_shared` -- compile (cached by the hash of compiler, flags and
  source) and return the path of the ``.so``.
* :func:`load_c_kernel` -- ``load_c_kernel(kdef, "gcc")`` returns a
  :class:`CKernel`; ``ck(args)`` calls the C function on an argument dict
  (see ``defs.make_args``) and updates its arrays in place.
* :func:`set_omp_threads` -- ``omp_set_num_threads`` of libgomp (used by the
  ``polly-par`` shared objects) through ctypes.
* :class:`BigStackWorker` -- a thread with a 1 GiB stack to call kernels on
  (Polly puts packed matrix tiles on the stack).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .defs import KernelDef

# Polly's matrix-multiplication optimisation packs operands into stack arrays
# of several MiB (about 8.4 MiB per kernel_3mm call at -march=native).  The
# OpenMP worker threads of the polly-par builds need a stack that large too;
# libgomp reads OMP_STACKSIZE when it is loaded, so it is set (unless the user
# set it) before the first parallel shared object or libgomp is loaded.  The
# calling thread's stack is handled by BigStackWorker.
OMP_STACKSIZE = "64M"


def ensure_omp_stacksize() -> None:
    os.environ.setdefault("OMP_STACKSIZE", OMP_STACKSIZE)

#: common flags of every C variant
BASE_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fPIC", "-shared", "-std=gnu99")


@dataclass(frozen=True)
class CompilerSpec:
    name: str  # variant name: "gcc", "polly", "polly-par"
    cc: str  # executable
    flags: tuple[str, ...]
    libs: tuple[str, ...] = ("-lm",)
    parallel: bool = False  # uses OpenMP threads (set with set_omp_threads)


COMPILERS: dict[str, CompilerSpec] = {
    "gcc": CompilerSpec("gcc", "gcc", BASE_FLAGS),
    "polly": CompilerSpec("polly", "clang-19", BASE_FLAGS + ("-mllvm", "-polly")),
    "polly-par": CompilerSpec(
        "polly-par", "clang-19",
        BASE_FLAGS + ("-mllvm", "-polly", "-mllvm", "-polly-parallel"),
        libs=("-lgomp", "-lm"), parallel=True,
    ),
}

BASELINE = "gcc"


class BuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    """Where compiled kernels go: $POLYBENCH_CACHE, else <tmp>/polycomp-polybench-cache."""
    d = os.environ.get("POLYBENCH_CACHE")
    path = Path(d) if d else Path(tempfile.gettempdir()) / "polycomp-polybench-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def have_compiler(cc: str) -> bool:
    return shutil.which(cc) is not None


def available_compilers() -> list[str]:
    return [name for name, spec in COMPILERS.items() if have_compiler(spec.cc)]


@lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    exe = shutil.which(cc)
    if exe is None:
        return "not found"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    return out.splitlines()[0].strip() if out else "unknown"


def build_shared(source: Path | str, spec: CompilerSpec, extra_flags: Sequence[str] = (),
                 out_dir: Path | None = None) -> Path:
    """Compile ``source`` (a .c file) into a shared object; cached."""
    source = Path(source)
    exe = shutil.which(spec.cc)
    if exe is None:
        raise BuildError(f"{spec.cc} not found on PATH")
    text = source.read_bytes()
    argv_tail = list(spec.flags) + list(extra_flags)
    key = hashlib.sha256()
    for part in (exe, compiler_version(spec.cc), *argv_tail, *spec.libs):
        key.update(part.encode())
        key.update(b"\0")
    key.update(text)
    out_dir = out_dir or cache_dir()
    so = out_dir / f"{source.stem}-{spec.name}-{key.hexdigest()[:16]}.so"
    if so.exists():
        return so
    tmp = out_dir / f".{so.name}.{os.getpid()}.tmp"
    argv = [exe, *argv_tail, "-o", str(tmp), str(source), *spec.libs]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{' '.join(argv)} failed:\n{proc.stderr.strip()}")
    os.replace(tmp, so)
    return so


class CKernel:
    """A kernel's C function loaded with ctypes."""

    def __init__(self, kdef: KernelDef, so_path: Path, variant: str = "gcc"):
        self.kdef = kdef
        self.variant = variant
        self.so_path = Path(so_path)
        self._lib = ctypes.CDLL(str(self.so_path))
        self._fn = getattr(self._lib, kdef.function)
        self._fn.restype = None
        argtypes = []
        for spec in kdef.args:
            if spec.kind == "int":
                argtypes.append(ctypes.c_int)
            elif spec.kind == "double":
                argtypes.append(ctypes.c_double)
            else:
                argtypes.append(ctypes.c_void_p)
        self._fn.argtypes = argtypes

    def c_args(self, args: Mapping[str, Any]) -> list:
        """Check the argument dict and convert it to ctypes values."""
        sizes = {a.name: int(args[a.name]) for a in self.kdef.args if a.kind == "int"}
        out = []
        for spec in self.kdef.args:
            val = args[spec.name]
            if spec.kind == "int":
                out.append(int(val))
            elif spec.kind == "double":
                out.append(float(val))
            else:
                if not isinstance(val, np.ndarray):
                    raise TypeError(f"{spec.name}: expected a numpy array")
                if val.dtype != np.dtype(spec.dtype) or not val.flags.c_contiguous \
                        or not val.flags.writeable:
                    raise TypeError(f"{spec.name}: need a writeable C-contiguous {spec.dtype} array")
                if val.shape != spec.resolve_shape(sizes):
                    raise ValueError(f"{spec.name}: shape {val.shape}, "
                                     f"expected {spec.resolve_shape(sizes)}")
                out.append(val.ctypes.data)
        return out

    def __call__(self, args: Mapping[str, Any]) -> None:
        self._fn(*self.c_args(args))


def load_c_kernel(kdef: KernelDef, variant: str = "gcc", out_dir: Path | None = None) -> CKernel:
    """Compile (cached) and load ``kdef``'s C file with the ``variant`` compiler."""
    spec = COMPILERS[variant]
    if spec.parallel:
        ensure_omp_stacksize()
    so = build_shared(kdef.c_path, spec, kdef.cflags, out_dir)
    return CKernel(kdef, so, variant)


_libgomp: ctypes.CDLL | None = None


def set_omp_threads(n: int) -> None:
    """Set the OpenMP thread count (libgomp's omp_set_num_threads) for the
    parallel regions that the Polly-parallel shared objects start.  The
    setting belongs to the calling thread: call it on the thread that will
    call the kernels (``BigStackWorker.call(set_omp_threads, n)``)."""
    global _libgomp
    if _libgomp is None:
        ensure_omp_stacksize()
        _libgomp = ctypes.CDLL("libgomp.so.1")
        _libgomp.omp_set_num_threads.argtypes = [ctypes.c_int]
        _libgomp.omp_set_num_threads.restype = None
    _libgomp.omp_set_num_threads(int(n))


class BigStackWorker:
    """Runs callables on one long-lived thread with a large stack.

    Python's main thread has the process stack (usually 8 MiB); Polly-built
    kernels can need more (see OMP_STACKSIZE above), so the runner makes every
    kernel call through ``worker.call(fn, ...)``.
    """

    def __init__(self, stack_mib: int = 1024):
        old = threading.stack_size(stack_mib << 20)
        try:
            self._ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="polybench")
            self._ex.submit(lambda: None).result()  # start the thread now
        finally:
            threading.stack_size(old)

    def call(self, fn: Callable, *args, **kwargs):
        return self._ex.submit(fn, *args, **kwargs).result()

    def close(self) -> None:
        self._ex.shutdown(wait=True)

    def __enter__(self) -> "BigStackWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
