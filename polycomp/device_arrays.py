"""Arrays already on the device: the argument checks of ``Kernel.on_device``.

Place in the pipeline: the device-side twin of polycomp/arguments.py, in front of the
CUDA targets' device entry (codegen/cuda.py prints ``<entry>_device``;
polycomp/targets/cuda.py loads it; polycomp/runtime.py's ``Kernel.on_device`` calls it).
Input: the kernel's Interface and one call's Python arguments. Output: the sizes they
imply, the scalars, and a ``DeviceArray`` (raw address, shape, dtype) per tensor.

Which objects are accepted depends on where the device entry runs:

- ``cuda``: objects exposing ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA
  tensors, Numba device arrays), version 0 to 3, without a mask;
- ``cuda-emulated``: numpy arrays (host memory plays the device's), so the device path
  runs, and is tested, on any machine.

The rules are the normal call's (arguments.py): the declared dtype and rank exactly,
extents agreeing with the declared dims and with each other, so no size can make the
kernel write outside an array; and, since nothing is copied here, C-contiguous only,
writable where the kernel writes, and no written array overlapping another argument
(overlap judged on address ranges). Every refusal is an ArgumentError with a hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .arguments import BoundArguments, _bind_size, _scalar, check_count, check_dims
from .errors import ArgumentError
from .ir import Interface, TensorArg


@dataclass(frozen=True)
class DeviceArray:
    """One array as the device entry sees it; ``owner``: the caller's object."""

    address: int
    shape: tuple[int, ...]
    dtype: np.dtype
    readonly: bool
    owner: object

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def device_array(value: object, what: str, target: str, dtype: str) -> DeviceArray:
    """``value`` as a DeviceArray for ``target`` ("cuda" or "cuda-emulated"), or an
    ArgumentError saying what is wrong with it (``what``: "argument 'A' of 'mm'")."""
    if target == "cuda-emulated":
        if not isinstance(value, np.ndarray):
            raise ArgumentError(f"{what} must be a numpy array for target='cuda-emulated' "
                                f"(host memory plays the device's), not "
                                f"{type(value).__name__}",
                                hint=f"pass np.ascontiguousarray(x, dtype=np.{dtype})")
        if not value.flags.c_contiguous:
            raise ArgumentError(f"{what} is not C-contiguous; on_device copies nothing",
                                hint="pass np.ascontiguousarray(x)")
        return DeviceArray(value.ctypes.data, tuple(value.shape), value.dtype,
                           not value.flags.writeable, value)
    try:
        interface = value.__cuda_array_interface__  # type: ignore[attr-defined]
    except AttributeError:
        hint = ("a numpy array is host memory: copy it to the GPU first (cupy.asarray(x), "
                "torch.from_numpy(x).cuda()), or call the kernel itself, which copies"
                if isinstance(value, np.ndarray) else
                "pass a CuPy array or a PyTorch CUDA tensor")
        raise ArgumentError(f"{what} must be a GPU array (an object with "
                            f"__cuda_array_interface__), not {type(value).__name__}",
                            hint=hint) from None
    except Exception as exc:  # noqa: BLE001 - e.g. torch: a tensor that requires grad
        raise ArgumentError(f"{what}: its __cuda_array_interface__ cannot be read: {exc}",
                            hint="pass a plain device array (torch: x.detach())") from None
    return _parse_interface(interface, what, value)


def _parse_interface(interface: object, what: str, owner: object) -> DeviceArray:
    if not isinstance(interface, dict):
        raise ArgumentError(f"{what}: __cuda_array_interface__ is not a dict")
    try:
        shape = tuple(int(n) for n in interface["shape"])
        dtype = np.dtype(interface["typestr"])
        address, readonly = interface["data"]
        address, readonly = int(address or 0), bool(readonly)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArgumentError(f"{what}: a malformed __cuda_array_interface__ ({exc!r})",
                            hint="it needs 'shape', 'typestr' and 'data': (pointer, "
                                 "read-only)") from None
    if int(interface.get("version", 0)) > 3:
        raise ArgumentError(f"{what}: __cuda_array_interface__ version "
                            f"{interface.get('version')} is newer than the 3 polycomp reads")
    if interface.get("mask") is not None:
        raise ArgumentError(f"{what}: masked arrays are not supported",
                            hint="pass the array without its mask")
    if any(n < 0 for n in shape):
        raise ArgumentError(f"{what}: negative extents in shape {shape}")
    strides = interface.get("strides")
    if strides is not None:
        expected = dtype.itemsize
        for extent, stride in reversed(list(zip(shape, strides))):
            if extent > 1 and int(stride) != expected:
                raise ArgumentError(f"{what} is not C-contiguous (shape {shape}, strides "
                                    f"{tuple(strides)}); on_device copies nothing",
                                    hint="pass x.contiguous() (torch) or "
                                         "cupy.ascontiguousarray(x)")
            expected *= max(extent, 1)
    count = int(np.prod(shape, dtype=np.int64))
    if address == 0 and count > 0:
        raise ArgumentError(f"{what}: a null device pointer for {count} elements")
    return DeviceArray(address, shape, dtype, readonly, owner)


def bind_device(kernel_name: str, interface: Interface, args: Sequence[object],
                target: str) -> tuple[BoundArguments, dict[str, DeviceArray]]:
    """The sizes and scalars of ``args`` (in ``bound``), and the checked device arrays
    of its tensors by name."""
    inputs = interface.inputs
    check_count(kernel_name, interface, args, " before out=")
    bound = BoundArguments()
    origin: dict[str, str] = {}
    arrays: dict[str, DeviceArray] = {}
    tensors: list[tuple[TensorArg, tuple[int, ...]]] = []
    for spec, value in zip(inputs, args):
        what = f"argument '{spec.name}' of '{kernel_name}'"
        if not isinstance(spec, TensorArg):
            bound.values[spec.name] = _scalar(kernel_name, spec, value)
            if spec.is_size:
                _bind_size(bound, origin, spec.name, int(bound.values[spec.name]),  # type: ignore[call-overload]
                           spec.name, allow_negative=True)
            continue
        array = check_tensor(device_array(value, what, target, spec.dtype), what,
                             spec.dtype, len(spec.dims))
        if spec.updated and array.readonly:
            raise ArgumentError(f"{what} is updated in place but the array is read-only",
                                hint="pass a writable array")
        arrays[spec.name] = array
        tensors.append((spec, array.shape))
    check_dims(kernel_name, bound, origin, tensors)
    return bound, arrays


def check_tensor(array: DeviceArray, what: str, dtype: str, rank: int) -> DeviceArray:
    if array.dtype != np.dtype(dtype):
        raise ArgumentError(f"{what} must have dtype {dtype}, not {array.dtype}",
                            hint=f"convert it to {dtype} first")
    if len(array.shape) != rank:
        raise ArgumentError(f"{what} must have rank {rank}, not {len(array.shape)} "
                            f"(shape {array.shape})")
    return array


def check_overlap(kernel_name: str, arrays: dict[str, DeviceArray], written: set[str]) -> None:
    """ArgumentError when an array the kernel writes shares bytes with another argument
    (the device entry's pointers are ``__restrict__``, and a write would corrupt an
    input mid-kernel)."""
    spans = [(name, a.address, a.address + a.nbytes) for name, a in arrays.items()
             if a.nbytes > 0]
    for name, start, end in spans:
        if name not in written:
            continue
        for other, other_start, other_end in spans:
            if other != name and start < other_end and other_start < end:
                raise ArgumentError(f"arguments '{name}' and '{other}' of '{kernel_name}' "
                                    f"share memory, but '{name}' is written by the kernel",
                                    hint="pass separate arrays")
