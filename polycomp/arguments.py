"""Argument checking: the guard in front of every pointer that reaches generated C.

Input: a kernel's Interface and the Python arguments of one call. Output: the sizes the
arguments imply and the checked values. Every tensor must be a numpy array of exactly the
declared dtype and rank whose extents agree with the declared dims (a size name binds on
first use and must agree everywhere after); arrays updated in place must be writeable and
must not share memory with another argument. Non-contiguous arrays are copied (and copied
back after the call if the kernel updates them). Anything else raises ArgumentError, so a
wrong argument can never make C read or write outside an array.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import islutil as U
from .errors import ArgumentError
from .ir import Interface, ScalarArg, TensorArg
from .memory import check_buffer

# sizes become C `long` constants and isl parameters; beyond this they overflow the
# index arithmetic of generated loops (products of two extents must stay in int64)
MAX_SIZE = 2**62


def check_sizes(sizes: object, what: str = "sizes") -> dict[str, int]:
    """``sizes`` given to compile(...) or Kernel.specialize as a checked {name: int} dict."""
    if not isinstance(sizes, Mapping):
        raise ArgumentError(f"{what} must be a mapping from size names to integers, "
                            f"not {type(sizes).__name__}", hint="e.g. sizes={'N': 1024}")
    out: dict[str, int] = {}
    for name, value in sizes.items():
        if not isinstance(name, str):
            raise ArgumentError(f"{what}: the size name {name!r} is not a string",
                                hint="e.g. sizes={'N': 1024}")
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ArgumentError(f"{what}: size '{name}' must be an integer, not {value!r}",
                                hint=f"e.g. sizes={{'{name}': 1024}}")
        if not -MAX_SIZE <= int(value) <= MAX_SIZE:
            raise ArgumentError(f"{what}: size '{name}' = {int(value)} is out of range",
                                hint="sizes must lie within +-2**62")
        out[name] = int(value)
    return out


@dataclass
class BoundArguments:
    """sizes: name -> value; values: argument name -> contiguous array or Python scalar;
    write_back: (user's array, contiguous copy) pairs to copy back after the call."""

    sizes: dict[str, int] = field(default_factory=dict)
    values: dict[str, object] = field(default_factory=dict)
    write_back: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def check_count(kernel_name: str, interface: Interface, args: Sequence[object],
                where: str = "") -> None:
    """ArgumentError unless ``args`` has one value per input of ``interface``; ``where``
    says which part of a call they are (" before out=" for on_device)."""
    inputs = interface.inputs
    if len(args) != len(inputs):
        names = ", ".join(a.name for a in inputs)
        raise ArgumentError(f"kernel '{kernel_name}' takes {len(inputs)} argument(s) ({names})"
                            f"{where}, got {len(args)}")


def bind(kernel_name: str, interface: Interface, args: Sequence[object]) -> BoundArguments:
    inputs = interface.inputs
    check_count(kernel_name, interface, args)
    bound = BoundArguments()
    origin: dict[str, str] = {}
    tensors: list[tuple[TensorArg, np.ndarray]] = []
    for spec, value in zip(inputs, args):
        if isinstance(spec, TensorArg):
            tensors.append((spec, _tensor(kernel_name, spec, value)))
        else:
            bound.values[spec.name] = _scalar(kernel_name, spec, value)
            if spec.is_size:  # a size given as a number may be negative; the context decides
                _bind_size(bound, origin, spec.name, int(bound.values[spec.name]), spec.name,  # type: ignore[call-overload]
                           allow_negative=True)
    check_dims(kernel_name, bound, origin, [(spec, array.shape) for spec, array in tensors])
    _check_aliasing(kernel_name, tensors)
    for spec, array in tensors:
        if array.flags.c_contiguous:
            bound.values[spec.name] = array
        else:
            # the logical size first: a np.broadcast_to view of one element can stand for
            # terabytes, and copying it would raise MemoryError or swap for minutes
            check_buffer(array.shape, array.dtype,
                         f"argument '{spec.name}' of '{kernel_name}' (not C-contiguous, so copied)")
            try:
                copy = np.ascontiguousarray(array)
            except MemoryError:
                raise ArgumentError(f"cannot copy argument '{spec.name}' of '{kernel_name}' "
                                    f"(shape {array.shape}) to a contiguous array: out of memory",
                                    hint="pass a C-contiguous array") from None
            bound.values[spec.name] = copy
            if spec.updated:
                bound.write_back.append((array, copy))
    return bound


def check_dims(kernel_name: str, bound: BoundArguments, origin: dict[str, str],
               tensors: Sequence[tuple[TensorArg, tuple[int, ...]]]) -> None:
    """Binds the size names of the tensors' shapes and checks every extent against its
    declared dim (the normal call's and Kernel.on_device's rule)."""
    for spec, shape in tensors:  # names first, so that expressions below can use them
        for k, dim in enumerate(spec.dims):
            if isinstance(dim, str):
                _bind_size(bound, origin, dim, shape[k], f"{spec.name}.shape[{k}]")
    for spec, shape in tensors:
        for k, dim in enumerate(spec.dims):
            if isinstance(dim, int):
                expected: int | None = dim
            elif isinstance(dim, str):
                continue
            else:
                expected = U.pw_aff_value(dim, bound.sizes)
            if expected is None or shape[k] != expected:
                raise ArgumentError(
                    f"argument '{spec.name}' of '{kernel_name}' has shape {shape}; "
                    f"dimension {k} must be {expected if expected is not None else dim}",
                    hint=f"declared dims: ({', '.join(str(d) for d in spec.dims)}) "
                         f"with sizes {bound.sizes}")


def _tensor(kernel: str, spec: TensorArg, value: object) -> np.ndarray:
    if isinstance(value, np.generic) and not spec.dims:
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise ArgumentError(f"argument '{spec.name}' of '{kernel}' must be a numpy array, "
                            f"not {type(value).__name__}",
                            hint=f"pass np.asarray(x, dtype=np.{spec.dtype})")
    if value.dtype != np.dtype(spec.dtype):
        raise ArgumentError(f"argument '{spec.name}' of '{kernel}' must have dtype {spec.dtype}, "
                            f"not {value.dtype}", hint=f"use {spec.name}.astype(np.{spec.dtype})")
    if value.ndim != len(spec.dims):
        raise ArgumentError(f"argument '{spec.name}' of '{kernel}' must have rank {len(spec.dims)}, "
                            f"not {value.ndim} (shape {value.shape})")
    if spec.updated and not value.flags.writeable:
        raise ArgumentError(f"argument '{spec.name}' of '{kernel}' is updated in place but "
                            f"the array is read-only", hint="pass a writeable copy")
    return value


def _scalar(kernel: str, spec: ScalarArg, value: object) -> object:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    integer = spec.dtype.startswith(("int", "uint")) or spec.dtype == "bool"
    if integer and not isinstance(value, numbers.Integral):
        raise ArgumentError(f"argument '{spec.name}' of '{kernel}' must be an integer "
                            f"({spec.dtype}), not {type(value).__name__}")
    if not integer and not isinstance(value, numbers.Real):
        raise ArgumentError(f"argument '{spec.name}' of '{kernel}' must be a number "
                            f"({spec.dtype}), not {type(value).__name__}")
    if integer and spec.dtype != "bool":
        info = np.iinfo(np.dtype(spec.dtype))
        if not info.min <= int(value) <= info.max:  # type: ignore[arg-type]
            raise ArgumentError(f"argument '{spec.name}' of '{kernel}' = {value} does not fit "
                                f"in {spec.dtype}")
    return value


def _bind_size(bound: BoundArguments, origin: dict[str, str], name: str, value: int,
               where: str, allow_negative: bool = False) -> None:
    if name in bound.sizes and bound.sizes[name] != value:
        raise ArgumentError(f"size {name} is {bound.sizes[name]} from {origin[name]} but "
                            f"{value} from {where}",
                            hint=f"every use of {name} must have the same extent")
    if value < 0 and not allow_negative:
        raise ArgumentError(f"size {name} = {value} from {where} is negative")
    bound.sizes.setdefault(name, int(value))
    origin.setdefault(name, where)


def _check_aliasing(kernel: str, tensors: list[tuple[TensorArg, np.ndarray]]) -> None:
    for i, (spec, array) in enumerate(tensors):
        if not spec.updated:
            continue
        for j, (other, other_array) in enumerate(tensors):
            if i != j and np.may_share_memory(array, other_array):
                raise ArgumentError(f"arguments '{spec.name}' and '{other.name}' of '{kernel}' "
                                    f"share memory, but '{spec.name}' is updated in place",
                                    hint="pass separate arrays (e.g. a .copy())")
