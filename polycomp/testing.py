"""Differential testing: run a kernel on random inputs and compare what it computes with
an independent oracle and with the same program compiled another way.

An oracle (``Oracle``) computes a definition's results without polycomp: a numpy function
a test writes, or for a definition parsed from C the same C text compiled at -O0 and
called through ctypes (``c_oracle``). The second check is the program compiled with
``reference`` options, by default ``scheduler="none"`` (the original order): it covers a
transformation where no oracle exists, but not a defect in the frontend or the printer
that both compilations share, hence the oracle first wherever one exists. Integer
results must agree bit for bit; floating-point ones within a tolerance that allows for
reassociation.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .build import compiler_command
from .errors import ArgumentError, CompilerError
from .fuzzing.oracle import OracleError, call_c
from .ir import Interface, ScalarArg, TensorArg
from .runtime import SCALAR_CTYPES, Definition, Kernel
from .options import Options
from . import islutil as U

TOLERANCE = {"float16": (2e-2, 2e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}
# -O0: nothing of the optimiser in the oracle; no contraction of a*b+c either way
ORACLE_CFLAGS = ("-O0", "-ffp-contract=off")
# polycomp reads min(a, b), max(a, b) and math calls without a definition or an
# #include; a C compiler needs them
C_PRELUDE = ("#include <math.h>\n#define min(a, b) (((a) < (b)) ? (a) : (b))\n"
             "#define max(a, b) (((a) > (b)) ? (a) : (b))\n")


def random_arguments(interface: Interface, sizes: Mapping[str, int],
                     rng: np.random.Generator) -> list[object]:
    """Random arguments for a call: floats in [0.1, 1), small non-negative integers."""
    out: list[object] = []
    for spec in interface.inputs:
        if isinstance(spec, ScalarArg):
            if spec.is_size:
                out.append(int(sizes[spec.name]))
            elif spec.dtype == "bool":
                out.append(bool(rng.integers(0, 2)))
            elif spec.dtype.startswith(("int", "uint")):
                out.append(int(rng.integers(1, 4)))
            else:
                out.append(float(rng.uniform(0.1, 1.0)))
            continue
        shape = tuple(declared_extent(d, sizes, f"argument '{spec.name}'",
                                      "give it with --sizes {size}=...") for d in spec.dims)
        out.append(random_array(shape, spec.dtype, rng))
    return out


def random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 3, size=shape).astype(dtype)
    return rng.uniform(0.1, 1.0, size=shape).astype(dtype)


def declared_extent(dim: int | str | object, sizes: Mapping[str, int], where: str,
                    hint: str) -> int:
    """An argument's declared extent (an int, a size name or a PwAff of sizes) at
    ``sizes``; a missing size is an ArgumentError about ``where`` with ``hint`` (in which
    ``{size}`` names it)."""
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str):
        if dim not in sizes:
            raise ArgumentError(f"no value for size {dim} ({where})", hint=hint.format(size=dim))
        return int(sizes[dim])
    value = U.pw_aff_value(dim, dict(sizes))  # type: ignore[arg-type]
    if value is None:
        raise ArgumentError(f"cannot compute an extent of {where} from {dict(sizes)}",
                            hint=hint.format(size="every size"))
    return int(value)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical for integers and bools; close for floats (NaN equals NaN)."""
    return difference(a, b) is None


def difference(got: np.ndarray, want: np.ndarray) -> str | None:
    """How ``got`` differs from ``want`` in words, or None where ``same_values`` holds."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} where {want.dtype}{list(want.shape)} was expected"
    if got.dtype.kind in "biu":
        wrong = got != want
        return None if not wrong.any() else f"{int(wrong.sum())} of {got.size} values differ"
    rtol, atol = TOLERANCE.get(got.dtype.name, (1e-6, 1e-9))
    close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return None if close.all() else f"{int((~close).sum())} of {got.size} values differ"


def results(kernel: Kernel, args: Sequence[object]) -> list[np.ndarray]:
    """Everything a call produces: returned outputs, then arrays updated in place."""
    fresh = copy_arguments(args)
    returned = kernel(*fresh)
    out = [] if returned is None else list(returned) if isinstance(returned, tuple) else [returned]
    out += [a for a, spec in zip(fresh, kernel.interface.inputs)
            if isinstance(spec, TensorArg) and spec.updated]
    return out  # type: ignore[return-value]


def result_names(interface: Interface) -> list[str]:
    """The names of what ``results`` lists, in its order."""
    return list(interface.outputs) + [s.name for s in interface.inputs
                                      if isinstance(s, TensorArg) and s.updated]


def copy_arguments(args: Sequence[object]) -> list[object]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


@dataclass(frozen=True)
class Oracle:
    """A definition's results computed without polycomp. ``run`` is called with copies of
    a call's arguments (the interface's inputs, in order) and returns, by name, the
    arrays the program writes; an argument it does not name is expected back unchanged.
    ``name`` says which oracle it is in a ``Comparison`` ("numpy", "gcc -O0", ...).
    For a matmul ``C(i, j) +=! A(i, k) * B(k, j)`` called as ``mm(A, B, C)``:
    ``Oracle("numpy", lambda A, B, C: {"C": A @ B})``: C is A B, A and B come back as
    they went in.
    """

    name: str
    run: Callable[..., Mapping[str, np.ndarray]]


def run_c(text: str, function: str, interface: Interface, args: Sequence[object],
          cflags: Sequence[str] = ORACLE_CFLAGS) -> None:
    """Compile ``text`` as it is (after ``C_PRELUDE``) into a shared library with
    polycomp's C compiler ($CC, else gcc) and ``cflags``, and call ``function`` on
    ``args``: arrays are updated in place. ``interface`` gives the ctypes of the
    arguments only; no polycomp stage touches the code (fuzzing.oracle.call_c)."""
    compiler, _ = compiler_command(Options())
    argtypes = [ctypes.c_void_p if isinstance(spec, TensorArg) else SCALAR_CTYPES[spec.dtype]
                for spec in interface.inputs]
    try:
        call_c(compiler, [*cflags, "-shared", "-fPIC"], C_PRELUDE + text, function, argtypes,
               list(args))
    except OracleError as exc:
        raise CompilerError(f"the oracle's C does not compile:\n{exc}",
                            hint="the text must be plain C as the compiler reads it") from None


def c_oracle(text: str, definition: Definition,
             cflags: Sequence[str] = ORACLE_CFLAGS) -> Oracle:
    """The oracle of a definition parsed from the C ``text``: that text compiled by the C
    compiler at -O0 (``run_c``) and its function called on the arguments; every array
    argument comes back by name."""
    def run(*args: object) -> dict[str, np.ndarray]:
        run_c(text, definition.name, definition.interface, args, cflags)
        return {spec.name: a for spec, a in zip(definition.interface.inputs, args)
                if isinstance(spec, TensorArg)}
    compiler, _ = compiler_command(Options())
    return Oracle(" ".join([os.path.basename(compiler[-1]), *cflags]), run)


@dataclass
class Comparison:
    """What ``check_against_reference`` found: for each check in the order it ran (the
    oracle's name, then ``scheduler=none`` or ``reference``), the results that disagreed
    with it, as ``name: how``."""

    name: str
    checks: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        return all(not bad for bad in self.checks.values())

    @property
    def agreed(self) -> list[str]:
        """The checks every result agreed with, in order."""
        return [check for check, bad in self.checks.items() if not bad]

    @property
    def mismatches(self) -> list[str]:
        return [f"{item} (against {check})" for check, bad in self.checks.items() for item in bad]


def check_against_reference(definition: Definition, sizes: Mapping[str, int],
                            options: Options | Mapping[str, object],
                            reference: Options | Mapping[str, object] | None = None,
                            seed: int = 0, oracle: Oracle | None = None) -> Comparison:
    """Compile ``definition`` with ``options``, run it on random inputs and compare every
    result with ``oracle`` (where given) and with ``definition`` compiled with
    ``reference`` (default: the original order) on the same inputs. Pass an oracle
    wherever one exists: the reference shares polycomp's frontend and printer."""
    opts = options if isinstance(options, Options) else Options.create(**options)
    ref = (Options.create(scheduler="none", parallel=False) if reference is None else
           reference if isinstance(reference, Options) else Options.create(**reference))
    args = random_arguments(definition.interface, sizes, np.random.default_rng(seed))
    names = result_names(definition.interface)
    got = dict(zip(names, results(Kernel(definition, opts), args)))
    checks: dict[str, list[str]] = {}
    if oracle is not None:
        checks[oracle.name] = _against_oracle(got, oracle, definition.interface, args)
    want = results(Kernel(definition, ref), args)
    checks["scheduler=none" if reference is None else "reference"] = [
        f"{n}: {why}" for n, b in zip(names, want)
        if (why := difference(got[n], b)) is not None]
    return Comparison(definition.name, checks)


def _against_oracle(got: Mapping[str, np.ndarray], oracle: Oracle, interface: Interface,
                    args: Sequence[object]) -> list[str]:
    """The disagreements of the kernel's results ``got`` with ``oracle`` on ``args``: an
    array either side leaves unnamed is its argument as it went in."""
    given = {spec.name: a for spec, a in zip(interface.inputs, args)
             if isinstance(spec, TensorArg)}
    expected = oracle.run(*copy_arguments(args))
    bad = []
    for name in [*got, *(n for n in expected if n not in got)]:
        if name not in expected and name not in given:
            bad.append(f"{name}: the oracle gave no value")
            continue
        if name not in got and name not in given:
            bad.append(f"{name}: the oracle gave a value the kernel does not produce")
            continue
        mine = got.get(name, given.get(name))
        why = difference(mine, np.asarray(expected.get(name, given.get(name))))
        if why is not None:
            bad.append(f"{name}: {why}")
    return bad


def median_time(fn, repeat: int) -> float:
    fn()  # warm-up (and first-call compilation)
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
