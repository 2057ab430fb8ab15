"""The loop fuzzer's oracle: the same C compiled by plain ``gcc -O0``, called through ctypes.

Place in the pipeline: beside it, never through it. Nothing here imports polycomp's
frontend, scheduler or code generator, so a defect there cannot hide in the reference.

The library is built with ``-fsanitize=undefined`` in trap mode: a generated program
that overflows a signed integer (the generator avoids it where it is cheap, not always)
dies with SIGILL inside the oracle, and the harness discards the case instead of
comparing values that C leaves undefined. gcc runs without a shell (an argv list).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np

from .loopgen import ArgSpec

# polycomp reads min(a, b) and max(a, b) without a definition; C needs one
PRELUDE = ("#define min(a, b) (((a) < (b)) ? (a) : (b))\n"
           "#define max(a, b) (((a) > (b)) ? (a) : (b))\n")
ORACLE_FLAGS = ("-O0", "-shared", "-fPIC", "-fsanitize=undefined",
                "-fsanitize=float-cast-overflow", "-fsanitize-undefined-trap-on-error")
SCALAR_CTYPES = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
                 "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
                 "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
                 "float32": ctypes.c_float, "float64": ctypes.c_double}


class OracleError(Exception):
    """gcc rejected a generated program: a defect of the generator, not of polycomp."""


def make_arguments(specs: list[ArgSpec], seed: int) -> list[object]:
    """The call's arguments: small integers (integer-valued floats) from ``seed``."""
    rng = np.random.default_rng(seed)
    out: list[object] = []
    for spec in specs:
        if spec.kind != "array":
            out.append(spec.value)
        elif spec.dtype.startswith("uint"):
            out.append(rng.integers(0, 40, size=spec.shape).astype(spec.dtype))
        else:
            out.append(rng.integers(-20, 21, size=spec.shape).astype(spec.dtype))
    return out


def copy_arguments(args: list[object]) -> list[object]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def run_gcc(source: str, function: str, specs: list[ArgSpec], args: list[object]) -> None:
    """Compile ``source`` with gcc -O0 and call ``function`` on ``args`` (updated in place)."""
    call_c(os.environ.get("CC", "gcc").split(), ORACLE_FLAGS, PRELUDE + source, function,
           [ctypes.c_void_p if s.kind == "array" else SCALAR_CTYPES[s.dtype] for s in specs],
           args)


def call_c(compiler: list[str], flags: tuple[str, ...] | list[str], source: str,
           function: str, argtypes: list[object], args: list[object]) -> None:
    """Compile ``source`` as it is into a shared library with ``compiler`` and ``flags``
    (which must make one: -shared -fPIC), and call ``function`` with ``argtypes`` on
    ``args``: arrays pass their data pointer and are updated in place. OracleError with
    the compiler's words when it rejects the text. Also polycomp.testing's C oracle."""
    workdir = tempfile.mkdtemp(prefix="polycomp-c-oracle-")
    try:
        path, lib = os.path.join(workdir, "oracle.c"), os.path.join(workdir, "oracle.so")
        with open(path, "w") as f:
            f.write(source)
        done = subprocess.run([*compiler, *flags, "-o", lib, path, "-lm"],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OracleError(done.stderr.strip()[-2000:])
        entry = getattr(ctypes.CDLL(lib), function)
        entry.restype = None
        entry.argtypes = argtypes
        entry(*[a.ctypes.data if isinstance(a, np.ndarray) else a for a in args])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
