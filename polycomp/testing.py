"""Differential testing: run one program two ways and compare, on random inputs.

The oracle for every transformation is the same program compiled another way, usually
``scheduler="none"`` (the original order). Integer results must agree bit for bit;
floating-point ones within a tolerance that allows for reassociation.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import ArgumentError
from .ir import Interface, ScalarArg, TensorArg
from .runtime import Definition, Kernel
from .options import Options
from . import islutil as U

TOLERANCE = {"float16": (2e-2, 2e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}


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
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "biu":
        return bool(np.array_equal(a, b))
    rtol, atol = TOLERANCE.get(a.dtype.name, (1e-6, 1e-9))
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def results(kernel: Kernel, args: Sequence[object]) -> list[np.ndarray]:
    """Everything a call produces: returned outputs, then arrays updated in place."""
    fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    returned = kernel(*fresh)
    out = [] if returned is None else list(returned) if isinstance(returned, tuple) else [returned]
    out += [a for a, spec in zip(fresh, kernel.interface.inputs)
            if isinstance(spec, TensorArg) and spec.updated]
    return out  # type: ignore[return-value]


@dataclass
class Comparison:
    name: str
    ok: bool
    mismatches: list[str] = field(default_factory=list)


def check_against_reference(definition: Definition, sizes: Mapping[str, int],
                            options: Options | Mapping[str, object],
                            reference: Options | Mapping[str, object] | None = None,
                            seed: int = 0) -> Comparison:
    """Compile ``definition`` with ``options`` and with ``reference`` (default: the
    original order) and compare every result on the same random inputs."""
    opts = options if isinstance(options, Options) else Options.create(**options)
    ref = (Options.create(scheduler="none", parallel=False) if reference is None else
           reference if isinstance(reference, Options) else Options.create(**reference))
    args = random_arguments(definition.interface, sizes, np.random.default_rng(seed))
    got = results(Kernel(definition, opts), args)
    want = results(Kernel(definition, ref), args)
    names = list(definition.interface.outputs) + [
        s.name for s in definition.interface.inputs if isinstance(s, TensorArg) and s.updated]
    bad = [n for n, a, b in zip(names, got, want) if not same_values(a, b)]
    return Comparison(definition.name, not bad and len(got) == len(want), bad)


def median_time(fn, repeat: int) -> float:
    fn()  # warm-up (and first-call compilation)
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
