"""Build: source -> shared library on disk, cached, for the native targets.

``build_library`` makes one kernel's library; ``build_object`` and ``link_library``
make one library of several translation units (a whole ONNX model's groups and its
entry: polycomp/onnx/library.py), each object cached on its own, so that a model that
shares kernels with another compiles only what is new.

What to run comes from the target (polycomp/targets/native.py ``NativeTarget``, the one
``Options.target`` names unless a caller passes another): its compiler command, the
flags each step adds (``build_flags``: OpenMP's ``-fopenmp -fPIC`` with ``-shared`` or
``-c``, libmvec's, ``-lm``), the source file's suffix and the fields of the cache key.
This module runs the compiler without a shell (an argv list), caches and renames.

The host C compiler (``compiler_command``, the native targets' default): Options.cc,
else $CC, else gcc, with ``-O3 -march=native`` unless Options.cflags or $CFLAGS say
otherwise. When the compiler is gcc, ``-fno-tree-loop-
distribution`` follows the optimisation flags, the user's included: gcc 12.2's loop
distribution moved a store above a load it feeds in polycomp's code (wrong results at
-O3; reliability/gcc12_ldist_*.c), and a user asking for -O3 still wants right results.
Only an explicit ``-ftree-loop-distribution`` among the user's flags keeps it on. gcc and
clang also get ``-fno-math-errno`` (unless the user's flags name ``-fmath-errno``):
generated code never reads errno, and a square root that may set it is a branch the
vectoriser gives up on (MATH_ERRNO_FLAGS). gcc 12
also gets ``-mno-avx512vl`` (unless the user's flags name ``-mavx512vl``): its AVX-512VL
masked loads in a vectorised select came out wrong (GCC12_AVX512VL_FLAGS); and
``-fno-tree-vrp`` (unless they name ``-ftree-vrp``): with value-range propagation it
gave two masked loads of a conditional copy one mask (GCC12_VRP_FLAGS); with VRP off
it still lost rows of such a copy, which the printer therefore compiles without loop
if-conversion (codegen/openmp.py's REWRITE_MACRO). Under
Options.exact_fp, ``-ffp-contract=off`` comes last: whether gcc fuses a multiply and an
add into an FMA depends on the shape of the loop around them, so two schedules of the
same program would otherwise round differently. Cache
file names are bounded: the entry name is cut to 64 characters (the key, a hash of the
whole source, keeps them apart), as file systems refuse names over 255 bytes. The cache
key hashes the source, the command line, the target's name and its key fields (for
OpenMP: the compiler's own version text and the CPU model: ``-march=native`` code does
not travel). Libraries live under
$POLYCOMP_CACHE_DIR, else $XDG_CACHE_HOME/polycomp, else ~/.cache/polycomp. Each build
writes to a private temporary name and renames it into place atomically, so a process
never loads a half-written library even when several processes compile the same kernel
at once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from . import machine_code
from .errors import CompilerError
from .options import Options
from .targets import get_target

if TYPE_CHECKING:
    from .targets.native import NativeTarget

DEFAULT_CFLAGS = ("-O3", "-march=native")
GCC_SAFETY_FLAGS = ("-fno-tree-loop-distribution",)  # see the module docstring
# gcc 12.2 vectorises `y = x < 0 ? s * x : x` over a 4x5 nest with AVX-512VL masked
# loads that reuse the first mask for every load of s (wrong results at -O3 -march=native;
# onnx's PRelu conformance case found it). Without the VL extension (256-bit ops then use
# AVX2 encodings; 512-bit AVX-512F code is unchanged) the code is right.
GCC12_AVX512VL_FLAGS = ("-mno-avx512vl",)
# gcc 12.2 also computed one mask for two masked loads of a vectorised conditional copy
# that need different ones (rows 0-1 and 2-3 of a padded copy: `if (c2 >= 1) t2[..] =
# t0[..]` after `t2[..] = 0` over a 4 x 2 nest, with AVX or AVX-512 alike; a conv's
# top padding, found by tests/test_onnx_nn.py's random windows). Without its value-range
# propagation the masks are right.
GCC12_VRP_FLAGS = ("-fno-tree-vrp",)
# Generated code never reads errno, but a sqrtf that may set it is a call behind a branch
# on the argument's sign: "control flow in loop" for the vectoriser, so every element-wise
# loop with a square root (an unfolded BatchNormalization, a Sqrt node) ran scalar on
# AVX-512 (DenseNet-121: 46 such groups, 56.6 -> 45.0 ms at 1 thread without it). Results
# are the same bits: IEEE sqrt is exact either way, only the errno side effect goes.
MATH_ERRNO_FLAGS = ("-fno-math-errno",)
NAME_LIMIT = 64  # characters of the entry name in cache file names


def compiler_command(options: Options) -> tuple[list[str], list[str]]:
    """(compiler argv prefix, optimisation flags) after options and environment."""
    cc = options.cc or os.environ.get("CC") or "gcc"
    compiler = shlex.split(cc)
    if options.cflags is not None:
        flags = list(options.cflags)
    elif os.environ.get("CFLAGS"):
        flags = shlex.split(os.environ["CFLAGS"])
    else:
        flags = list(DEFAULT_CFLAGS)
    if not compiler:
        raise CompilerError("the C compiler command is empty", hint="set CC to e.g. gcc")
    if is_gcc(tuple(compiler)) and "-ftree-loop-distribution" not in flags:
        flags += GCC_SAFETY_FLAGS
    if (is_gcc(tuple(compiler)) or is_clang(tuple(compiler))) and "-fmath-errno" not in flags:
        flags += MATH_ERRNO_FLAGS
    if is_gcc(tuple(compiler)) and gcc_major(tuple(compiler)) == 12:
        if not any(f.startswith("-mavx512vl") for f in flags):
            flags += GCC12_AVX512VL_FLAGS
        if "-ftree-vrp" not in flags:
            flags += GCC12_VRP_FLAGS
    if options.exact_fp:
        flags.append("-ffp-contract=off")
    if not any(f.startswith("-g") for f in flags):
        # line tables for the machine-code check (machine_code.py): no instruction changes
        flags.append(machine_code.LINE_TABLE_FLAG)
    return compiler, flags


def is_clang(compiler: tuple[str, ...]) -> bool:
    """Whether the compiler is clang (which takes gcc's -f flags named here)."""
    return "clang" in compiler_identity(compiler).lower()


def is_gcc(compiler: tuple[str, ...]) -> bool:
    """Whether the compiler is gcc proper (clang also answers to __GNUC__, not to this)."""
    identity = compiler_identity(compiler)
    return "Free Software Foundation" in identity and "clang" not in identity.lower()


def gcc_major(compiler: tuple[str, ...]) -> int | None:
    """gcc's major version from its --version text ("gcc (Debian 12.2.0-14) 12.2.0")."""
    lines = compiler_identity(compiler).splitlines()
    found = re.search(r"\)\s+(\d+)\.\d+", lines[0]) if lines else None
    return int(found.group(1)) if found else None


@functools.lru_cache(maxsize=None)
def compiler_identity(compiler: tuple[str, ...]) -> str:
    """The compiler's ``--version`` text (part of every cache key)."""
    try:
        done = subprocess.run([*compiler, "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except FileNotFoundError:
        raise CompilerError(f"C compiler '{' '.join(compiler)}' not found",
                            hint="install gcc or set CC to a C compiler with OpenMP") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompilerError(f"cannot run C compiler '{' '.join(compiler)}': {exc}") from None
    return done.stdout + done.stderr


@functools.lru_cache(maxsize=1)
def cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    return line.strip()
    except OSError:
        pass
    return os.uname().machine


def cache_dir() -> Path:
    if os.environ.get("POLYCOMP_CACHE_DIR"):
        return Path(os.environ["POLYCOMP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "polycomp"


MVEC_MARKER = re.compile(r"#ifdef POLYCOMP_MVEC_(\w+)")


@functools.lru_cache(maxsize=None)
def libmvec_functions() -> frozenset[str]:
    """The <math.h> functions whose vector forms this system's libmvec exports (its SSE
    form stands for the family: glibc adds all four ISAs of a function together)."""
    try:
        mvec = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return frozenset()
    found = set()
    for name in ("exp", "log", "sin", "cos", "pow", "tanh", "erf"):
        arity = "vv" if name == "pow" else "v"
        if hasattr(mvec, f"_ZGVbN4{arity}_{name}f"):
            found.add(f"{name}f")
        if hasattr(mvec, f"_ZGVbN2{arity}_{name}"):
            found.add(name)
    return frozenset(found)


def vector_math_flags(text: str) -> tuple[list[str], list[str]]:
    """(-D flags, libraries) for the vector math declarations of ``text`` that libmvec
    can serve (codegen/openmp.py vector_math_declarations)."""
    wanted = sorted(set(MVEC_MARKER.findall(text)) & libmvec_functions())
    return [f"-DPOLYCOMP_MVEC_{name}" for name in wanted], (["-lmvec"] if wanted else [])


def build_library(text: str, entry: str, options: Options,
                  target: NativeTarget | None = None) -> Path:
    """Compile ``text`` to a shared library and return its path (from the cache if there);
    ``target``: the native target that says how (default: Options.target's)."""
    target = _native(options, target)
    compiler, flags = target.compiler_command(options)
    before, after = target.build_flags("library", [text])
    command = [*compiler, *flags, *before]
    key = _key(target, options, [text, *command])
    directory = _directory(options)
    stem = f"{entry[:NAME_LIMIT]}-{key}"
    library = directory / f"{stem}.so"
    if options.cache and library.exists():
        return library
    source_path = directory / f"{stem}{target.source_suffix}"
    _write_atomically(source_path, text.encode())
    _compile_into(library, [*command, *vector_report_flags(library, text, compiler), "-o",
                            "{out}", str(source_path), *after],
                  f"the C compiler failed on {source_path}")
    check_vector_loops(library, source_path, text)
    return library


def build_object(text: str, stem: str, options: Options,
                 target: NativeTarget | None = None) -> Path:
    """Compile ``text`` to a position-independent object file (cached like libraries):
    one translation unit of a library that link_library puts together."""
    target = _native(options, target)
    compiler, flags = target.compiler_command(options)
    before, after = target.build_flags("object", [text])
    command = [*compiler, *flags, *before]
    key = _key(target, options, [text, *command])
    directory = _directory(options)
    name = f"{stem[:NAME_LIMIT]}-{key}"
    obj = directory / "objects" / f"{name}.o"
    if options.cache and obj.exists():
        return obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    source_path = obj.with_suffix(target.source_suffix)
    _write_atomically(source_path, text.encode())
    _compile_into(obj, [*command, *vector_report_flags(obj, text, compiler), "-o", "{out}",
                        str(source_path), *after],
                  f"the C compiler failed on {source_path}")
    check_vector_loops(obj, source_path, text)
    return obj


def vector_report_flags(binary: Path, text: str, compiler: list[str]) -> list[str]:
    """gcc's report of the loops it did not vectorise, written beside ``binary`` by the
    same compile (machine_code.vector_report_path), for a text with loops marked vector.
    Not part of the cache key: it changes no instruction."""
    if "omp simd" not in text or not is_gcc(tuple(compiler)):
        return []
    return [f"-fopt-info-vec-missed={machine_code.vector_report_path(binary)}"]


def check_vector_loops(binary: Path, source_path: Path, text: str) -> None:
    """A PerformanceWarning for each loop ``text`` marks ``omp simd`` that compiled to
    scalar arithmetic in ``binary`` (machine_code.py), with gcc's reason; run once per
    build, so a cache hit is not checked again."""
    if "omp simd" not in text:
        return
    report = machine_code.inspect_binary(binary, {str(source_path): text})
    machine_code.warn_scalar_loops(report, stacklevel=4)


def link_library(objects: list[Path], texts: list[str], stem: str, options: Options,
                 target: NativeTarget | None = None) -> Path:
    """One shared library of ``objects`` (built by build_object from ``texts``, whose
    needs, e.g. vector math, decide the libraries linked)."""
    target = _native(options, target)
    compiler, flags = target.compiler_command(options)
    before, after = target.build_flags("link", texts)
    command = [*compiler, *flags, *before]
    key = _key(target, options, [*map(str, objects), *command, *after])
    library = _directory(options) / f"{stem[:NAME_LIMIT]}-{key}.so"
    if options.cache and library.exists():
        return library
    _compile_into(library, [*command, "-o", "{out}", *map(str, objects), *after],
                  f"linking {len(objects)} objects into {library.name} failed")
    return library


def _native(options: Options, target: NativeTarget | None) -> NativeTarget:
    """The target that builds: ``target``, else Options.target's, which must be native."""
    from .targets.native import NativeTarget

    target = get_target(options.target) if target is None else target
    if not isinstance(target, NativeTarget):
        raise CompilerError(f"target '{target.name}' is not built by a host compiler into "
                            f"a shared library", hint="build it with its own Target.build")
    return target


def _key(target: NativeTarget, options: Options, parts: list[str]) -> str:
    """The cache key of a build: its inputs and command line, the target's name and its
    key fields (OpenMP: the compiler's identity and the CPU model)."""
    return hashlib.sha256("\0".join([*parts, target.name, *target.key_fields(options)])
                          .encode()).hexdigest()[:24]


def _directory(options: Options) -> Path:
    directory = cache_dir() if options.cache else Path(tempfile.mkdtemp(prefix="polycomp-"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _compile_into(target: Path, argv: list[str], failure: str) -> None:
    """Run the compiler (no shell) with ``{out}`` in argv standing for a private
    temporary name, then rename the result to ``target`` atomically."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=target.suffix + ".tmp",
                               dir=target.parent)
    os.close(fd)
    argv = [tmp if a == "{out}" else a for a in argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        _remove(tmp)
        raise CompilerError(f"cannot run the C compiler: {exc}") from None
    if done.returncode != 0:
        _remove(tmp)
        detail = "\n".join(done.stderr.strip().splitlines()[:20])
        raise CompilerError(f"{failure}:\n{detail}",
                            hint=f"command: {' '.join(shlex.quote(a) for a in argv)}")
    os.replace(tmp, target)


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
