"""Native targets: the host compiler makes a shared library, ctypes calls its entry.

Place in the pipeline: the build and load halves of a target whose code a host compiler
builds (targets/openmp.py; a CUDA emulation on CPU threads built by g++ would be another).
polycomp/build.py runs the compiler without a shell, caches and renames atomically; a
``NativeTarget`` tells it how: the compiler command (``compiler_command``), the flags of
each step (``build_flags``), the source file's suffix and the fields of the cache key.
``load`` opens the library once per process and types the entry from the Source's
argument list.
"""

from __future__ import annotations

import abc
import ctypes
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from polycomp import build
from polycomp.codegen.source import Source
from polycomp.errors import CompilerError
from polycomp.options import Options

from .base import Target

SCALAR_CTYPES = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16,
    "int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
    # ctypes has no _Float16: the entry takes a float16 scalar as a C float
    # (codegen/cexpr.ARG_CTYPES) and narrows it back; see runtime.scalar_value
    "float16": ctypes.c_float, "float32": ctypes.c_float, "float64": ctypes.c_double,
}

# build steps (build_flags): one translation unit to a shared library, one to an object
# file, objects to a shared library (polycomp/onnx/library.py's whole-model library)
STEPS = ("library", "object", "link")

_LIBRARIES: dict[str, ctypes.CDLL] = {}
_LOCK = threading.Lock()


class NativeTarget(Target):
    """A Target built by a host compiler into a shared library loaded with ctypes."""

    source_suffix = ".c"

    def compiler_command(self, options: Options) -> tuple[list[str], list[str]]:
        """(compiler argv prefix, optimisation flags): the host C compiler by default
        (build.compiler_command: Options.cc/cflags, $CC/$CFLAGS, gcc's safety flags)."""
        return build.compiler_command(options)

    @abc.abstractmethod
    def build_flags(self, step: str, texts: Sequence[str]) -> tuple[list[str], list[str]]:
        """(flags after the optimisation flags, arguments after the input files) of a
        build ``step`` (STEPS); ``texts``: the sources it compiles or links."""

    def key_fields(self, options: Options) -> tuple[str, ...]:
        """The compiler's ``--version`` text and the CPU model (``-march=native`` code
        does not travel)."""
        compiler, _ = self.compiler_command(options)
        return build.compiler_identity(tuple(compiler)), build.cpu_identity()

    def build(self, source: Source, options: Options) -> Path:
        return build.build_library(source.text, source.entry, options, self)

    def load(self, source: Source, options: Options) -> Callable[..., int]:
        return self.load_symbol(source, options, source.entry)

    def load_symbol(self, source: Source, options: Options, symbol: str) -> Callable[..., int]:
        """The function ``symbol`` of the library of ``source`` (built and opened once),
        typed from the Source's arguments: ``source.entry``, or another entry with the
        same arguments (the CUDA targets' device entry)."""
        path = str(self.build(source, options))
        with _LOCK:
            if path not in _LIBRARIES:
                try:
                    _LIBRARIES[path] = ctypes.CDLL(path)
                except OSError as exc:
                    # e.g. a `cc` that exits 0 without writing a library
                    raise CompilerError(
                        f"cannot load the library the C compiler built: {exc}",
                        hint="check that cc= / $CC names a C compiler that writes the "
                             "shared library it is asked for (-shared -o)") from None
        function = getattr(_LIBRARIES[path], symbol)
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.c_void_p if a.kind == "array" else
                             ctypes.c_int64 if a.kind == "size" else SCALAR_CTYPES[a.dtype]
                             for a in source.arguments]
        return function
