"""A disk cache of the pipeline's products: Program + Options -> Compiled.

Scheduling and code generation cost seconds per kernel; a whole ONNX model has dozens,
and a deployer restarting a service must not pay them again (warm compile under 1 s).
The key hashes every field of the Program that the pipeline reads (statements'
domains, accesses, expression trees with their dtypes, arrays, the original schedule,
the parametric program it came from), the Options, and polycomp's own code (any edit
of a polycomp module gives new keys: a cache never serves what older code produced).
The entry is a pickle of the Compiled record (isl objects pickle as their text; the
schedule tree as its text plus its marks' ids, scheduler/tree.to_portable). Warnings the
compile raised are stored and raised again on a hit.

Only callers that opt in use it (``CachedKernel``, the ONNX session's kernels): the
test suite replaces pipeline stages with monkeypatch, and a general cache would let
such a test's product serve a later real compile.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
import warnings
from pathlib import Path

from . import islutil as U
from .build import cache_dir
from .driver import Compiled, compile_program
from .ir import Program
from .options import Options
from .runtime import Kernel

FORMAT = 2  # bump when the stored record changes shape


@functools.lru_cache(maxsize=1)
def code_identity() -> str:
    """A hash of polycomp's Python sources (all installed subpackages)."""
    import polycomp
    digest = hashlib.sha256()
    roots = {os.path.realpath(p) for p in polycomp.__path__}
    for sub in ("frontend", "scheduler", "codegen"):
        try:
            module = __import__(f"polycomp.{sub}", fromlist=["__path__"])
            roots.update(os.path.realpath(p) for p in module.__path__)
        except ImportError:
            continue
    for root in sorted(roots):
        for folder, _, files in sorted(os.walk(root)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    digest.update(os.path.relpath(path, root).encode())
                    with open(path, "rb") as f:
                        digest.update(f.read())
    return digest.hexdigest()


def program_key(program: Program) -> str:
    """Every field of the program the pipeline reads, as text (expression trees by repr:
    their dtypes are part of it)."""
    # a union map prints its maps in hash-table order, which depends on how it was built:
    # its maps sorted instead, so that the same program gives the same key every time
    schedule = sorted(str(m) for m in U.maps_of(program.original_schedule))
    parts = [program.name, repr(program.params), repr(program.scalars), repr(program.sizes),
             repr(program.notes), str(program.context), *schedule]
    for a in program.arrays:
        parts.append(f"{a.name}|{a.dtype}|{a.role}|{[str(pa) for pa in a.shape]}")
    for s in program.statements:
        parts += [s.name, str(s.domain), str(s.write), *map(str, s.reads), repr(s.target),
                  repr(s.expr), repr(s.reduction)]
    if program.generic is not None:
        parts.append("generic:" + program_key(program.generic))
    return "\n".join(parts)


def cache_key(program: Program, options: Options, signature: str | None = None) -> str:
    """The key of a program's entry: its ``signature`` when the caller has one that does
    not depend on isl's printing (frontend/onnx/builder.py: isl prints one map in
    different ways after different histories, and a key from its text missed the cache
    for a third of a model's groups), else program_key."""
    described = program_key(program) if signature is None else "signature:" + signature
    text = "\0".join([str(FORMAT), code_identity(), described, repr(options)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _path(key: str) -> Path:
    return cache_dir() / "compiled" / f"{key}.pickle"


def load_compiled(program: Program, options: Options,
                  signature: str | None = None) -> Compiled | None:
    if not options.cache:
        return None
    try:
        with open(_path(cache_key(program, options, signature)), "rb") as f:
            record = pickle.load(f)
        compiled = Compiled.from_portable(record["compiled"])
    except Exception:  # a missing, partial or stale entry is a miss, never an error
        return None
    for category, message in record.get("warnings", ()):
        warnings.warn(message, category, stacklevel=3)
    return compiled


def store_compiled(program: Program, options: Options, compiled: Compiled,
                   caught: list[warnings.WarningMessage], signature: str | None = None) -> None:
    if not options.cache:
        return
    record = {"compiled": compiled.to_portable(),
              "warnings": [(w.category, str(w.message)) for w in caught]}
    path = _path(cache_key(program, options, signature))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(prefix=".compiled-", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return  # the cache is an optimisation: a failure to store costs a recompile


def cached_compile_program(program: Program, options: Options,
                           signature: str | None = None) -> Compiled:
    compiled = load_compiled(program, options, signature)
    if compiled is not None:
        return compiled
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile_program(program, options)
    for w in caught:  # raise them again for the caller
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    store_compiled(program, options, compiled, list(caught), signature)
    return compiled


class CachedKernel(Kernel):
    """A Kernel whose compiles go through the disk cache of Compiled records, keyed by
    ``signature`` when given (it must determine the lowered program: one size set)."""

    def __init__(self, definition, options: Options, signature: str | None = None):  # noqa: ANN001
        super().__init__(definition, options)
        self.signature = signature

    def _compile(self, program: Program) -> Compiled:
        return cached_compile_program(program, self.options, self.signature)


__all__ = ["CachedKernel", "cached_compile_program", "cache_key", "code_identity"]
