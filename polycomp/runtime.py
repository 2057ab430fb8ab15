"""Runtime: Kernel objects that users call on numpy arrays.

A Kernel holds a frontend definition (its Interface and a ``lower(sizes)`` method) and
Options. On each call it checks the arguments (polycomp/arguments.py), and, by default,
specialises the program to the argument sizes: compiled once per size set, then cached in
memory (and on disk by the target's build, polycomp/build.py for the native ones). With
``parametric=True`` one library serves all sizes, which are passed as C arguments.
Outputs are allocated here and returned, zeroed only where the kernel leaves an element
unwritten or reads one before writing it. Building and loading the entry, and what
surrounds each call, are the target's (Options.target, polycomp/targets/: OpenMP's is a
ctypes function called under the load-adapted thread count); the calling convention is
the same for every target (polycomp/targets/base.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import islpy as isl
import numpy as np

from . import arguments
from .driver import Compiled, compile_program
from .errors import (ArgumentError, IntegerDivisionError, InternalError, PolycompError,
                     UnsupportedError)
from .ir import Array, Interface, Program, TensorArg
from .memory import aligned_empty, aligned_zeros, check_buffer
from .options import Options
from .scheduler.dependences import Dependences
from .targets import Target, get_target
from .targets.native import SCALAR_CTYPES  # noqa: F401  (the ctypes of scalar arguments)

# entry return values (codegen/c.py STATUS, every target's): 0 done, 1 a gather index out of bounds,
# 2 an integer division or modulo by zero or MIN / -1 (codegen/cexpr.py guards)
STATUS_GATHER, STATUS_DIVISION, STATUS_NO_MEMORY = 1, 2, 3


def scalar_value(value: object, dtype: str) -> object:
    """A checked scalar argument as ctypes receives it. A float16 value is rounded to
    float16 here, as numpy does, and travels exactly as a C float."""
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return float(np.float16(value))  # type: ignore[arg-type]
    return value


class Definition(Protocol):
    """What a frontend hands the runtime."""

    name: str
    interface: Interface

    def lower(self, sizes: Mapping[str, int] | None = None) -> Program: ...


@dataclass(eq=False)
class Variant:
    """One compiled specialisation: the pipeline's products and its entry, built and
    loaded by the target on first use (a whole ONNX model links its groups' C into one
    library of its own, polycomp/onnx/library.py, and never needs a library per group)."""

    compiled: Compiled
    options: Options
    _function: Callable[..., int] | None = None

    @functools.cached_property
    def target(self) -> Target:
        return get_target(self.options.target)

    @property
    def function(self) -> Callable[..., int]:
        if self._function is None:
            self._function = self.target.load(self.compiled.source, self.options)
        return self._function

    @functools.cached_property
    def device_function(self) -> Callable[..., int]:
        """The CUDA targets' device entry (Kernel.on_device), built and loaded on first
        use."""
        load = getattr(self.target, "load_device", None)
        if load is None:
            raise _no_device_entry(self.options.target)
        return load(self.compiled.source, self.options)

    @functools.cached_property
    def calling(self) -> Callable[[], AbstractContextManager] | None:
        """What surrounds each call (OpenMP: threads.call_threads when the C has
        parallel regions), or None."""
        return self.target.calling(self.compiled.source)


@dataclass(eq=False)
class CallPlan:
    """How to call one variant for one set of sizes (Kernel._plan).

    allocate           (name, shape, dtype, zeroed) of the arrays each call returns
    temporaries        (name, shape, dtype) of the arrays no caller sees
    arguments          (kind, name, dtype) of the entry's C arguments, in order
    spare_temporaries  sets of temporary buffers not in use, for the next call
    """

    variant: Variant
    allocate: tuple[tuple[str, tuple[int, ...], str, bool], ...]
    temporaries: tuple[tuple[str, tuple[int, ...], str], ...]
    arguments: tuple[tuple[str, str, str], ...]
    spare_temporaries: list[dict[str, np.ndarray]] = field(default_factory=list)


class Kernel:
    """A compiled tensor program, callable on numpy arrays.

    ``kernel(*inputs)`` returns the outputs (one array, a tuple in declared order, or None
    when the kernel only updates its arguments in place). ``.program``, ``.dependences``,
    ``.schedule`` and ``.source`` (the generated code of whichever target; ``.c_source``
    is the same text, its name from when OpenMP C was the only output) describe the most
    recent specialisation, or, before any call, the parametric program.
    """

    def __init__(self, definition: Definition, options: Options):
        self.definition = definition
        self.options = options
        self.name = definition.name
        self.interface = definition.interface
        self._variants: dict[tuple[tuple[str, int], ...], Variant] = {}
        self._plans: dict[tuple[tuple[str, int], ...], CallPlan] = {}
        self._last: Compiled | None = None
        self._parametric: Compiled | None = None

    # ------------------------------------------------------------------ compiling
    def specialize(self, sizes: Mapping[str, int], build: bool = True) -> Variant:
        """Compile (or fetch) the variant for these sizes; ``build=False`` leaves the C
        compiler for its first call."""
        sizes = arguments.check_sizes(sizes)
        key = () if self.options.parametric else tuple(sorted((k, int(v)) for k, v in sizes.items()))
        variant = self._variants.get(key)
        if variant is None:
            program = self.definition.lower(None if self.options.parametric else dict(sizes))
            compiled = self._compile(program)
            variant = Variant(compiled, self.options)
            self._variants[key] = variant
        if build:
            variant.function  # noqa: B018  (builds and loads: compiler errors surface here)
        self._last = variant.compiled
        return variant

    def _compile(self, program: Program) -> Compiled:
        """The pipeline for one lowered program (a subclass may cache it:
        polycomp/compile_cache.py)."""
        return compile_program(program, self.options)

    def _describe(self) -> Compiled:
        if self._last is not None:
            return self._last
        if self._parametric is None:
            self._parametric = compile_program(self.definition.lower(None), self.options)
        return self._parametric

    @property
    def program(self) -> Program:
        return self._describe().program

    @property
    def dependences(self) -> Dependences:
        return self._describe().dependences

    @property
    def schedule(self) -> isl.Schedule:
        return self._describe().schedule

    @property
    def source(self) -> str:
        """The generated code (Options.target's language: C for openmp)."""
        return self._describe().source.text

    @property
    def c_source(self) -> str:
        """The generated C of the openmp target: ``source`` under its first name."""
        return self.source

    def transform(self, edit) -> Kernel:
        """A new Kernel whose schedule is ``edit(ScheduleEditor)`` applied to this one's
        (scheduler/transforms.py); every step is checked against the dependences. The new
        kernel runs exactly the edited schedule (no automatic tiling or vectorisation;
        parallel loops are added only where the edit placed none). Its schedule is for
        this kernel's current sizes (or any size, if parametric)."""
        from .scheduler.transforms import ScheduleEditor

        compiled = self._describe()
        if self.options.block_channels and not compiled.program.params:
            # the edit is of the statements as written: the blocked ones
            # (scheduler/blocking.py) are the compiler's, and "custom" never blocks
            base = Kernel(self.definition, self.options.with_(block_channels=False))
            compiled = base.specialize(dict(compiled.program.sizes)).compiled
        edited = edit(ScheduleEditor(compiled.schedule, compiled.dependences))
        if not isinstance(edited, ScheduleEditor):
            raise TypeError("the edit must return the ScheduleEditor its transforms produce")
        options = self.options.with_(scheduler="custom", schedule=edited.schedule.to_str(),
                                     tile=False, vectorize=False, unroll=0)
        kernel = Kernel(self.definition, options)
        sizes = dict(compiled.program.sizes)
        if sizes or options.parametric:
            kernel.specialize(sizes)
        return kernel

    # ------------------------------------------------------------------ calling
    def share_temporaries(self, other: Kernel, sizes: Mapping[str, int]) -> bool:
        """Let this kernel's calls at ``sizes`` use ``other``'s temporaries (the arrays
        no caller sees), when both have the same ones (names, shapes, dtypes): whether
        they now do. For timing configurations of one program side by side (the tuner):
        where a buffer happens to lie counts, otherwise, as a difference between them
        (four instances of the BERT FFN matmul + GELU, the same code, timed in turns in
        one process: up to 6 % apart with buffers of their own, up to 2 % with shared
        ones)."""
        mine, theirs = self._plan(sizes), other._plan(sizes)
        if mine.temporaries != theirs.temporaries:
            return False
        mine.spare_temporaries = theirs.spare_temporaries
        return True

    def _plan(self, sizes: Mapping[str, int]) -> CallPlan:
        """The per-size-set plan of a call (cached): the variant, the buffers to allocate
        and the C argument order. Extents come from isl once per size set, not per call."""
        key = tuple(sorted(sizes.items()))
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        variant = self.specialize(sizes)
        program = variant.compiled.program
        if self.options.parametric:
            _check_context(self.name, program, sizes)
        allocate: list[tuple[str, tuple[int, ...], str, bool]] = []
        temporaries: list[tuple[str, tuple[int, ...], str]] = []
        outputs = set(self.interface.outputs)
        for array in program.arrays:
            shape = array.extents(sizes)
            if array.role == "local":
                continue  # a contracted temporary: a local array of the loop body
            if array.role == "scratch":  # the kernel allocates its own
                check_buffer(shape, array.dtype,
                             f"the scratch array '{array.name}' of kernel '{self.name}'")
            elif array.role == "temporary" and array.name not in outputs:
                temporaries.append((array.name, shape, array.dtype))
            elif array.role in ("output", "temporary"):
                # an output the kernel writes whole needs no zeroing (softmax at BERT's
                # shape: 20 us of 125)
                zero = array.role == "output" and not _written_whole(variant.compiled, array)
                allocate.append((array.name, shape, array.dtype, zero))
        plan = CallPlan(variant, tuple(allocate), tuple(temporaries),
                        tuple((a.kind, a.name, a.dtype)
                              for a in variant.compiled.source.arguments))
        self._plans[key] = plan
        return plan

    def __call__(self, *args: object, out: Mapping[str, np.ndarray] | None = None) -> object:
        """Run on ``args``; ``out`` may give the buffers of some outputs (by name: C-
        contiguous, of the output's shape and dtype), which are then written in place
        (the ONNX session's arena) instead of freshly allocated."""
        bound = arguments.bind(self.name, self.interface, args)
        plan = self._plan(bound.sizes)
        variant = plan.variant
        self._last = variant.compiled
        buffers: dict[str, np.ndarray] = {}
        for name, value in bound.values.items():
            if isinstance(value, np.ndarray):
                buffers[name] = value
        for name, shape, dtype, zero in plan.allocate:
            if name in buffers:
                continue
            given = None if out is None else out.get(name)
            if given is None:
                buffers[name] = (aligned_zeros if zero else aligned_empty)(shape, dtype)
                continue
            if (given.shape != tuple(shape) or given.dtype != np.dtype(dtype)
                    or not given.flags.c_contiguous or not given.flags.writeable):
                raise ArgumentError(f"kernel '{self.name}': the buffer given for output "
                                    f"'{name}' is not a writable C-contiguous {dtype} array "
                                    f"of shape {tuple(shape)}")
            if zero:
                given.fill(0)
            buffers[name] = given
        # temporaries no caller sees: reused across calls; a set in use by another thread
        # (ctypes releases the GIL) is not on the free list, so that call gets its own
        spare = plan.spare_temporaries.pop() if plan.spare_temporaries else None
        if spare is None:
            spare = {name: aligned_empty(shape, dtype) for name, shape, dtype in plan.temporaries}
        buffers.update(spare)
        call_args = entry_arguments(plan, bound, lambda name: buffers[name].ctypes.data)
        try:
            status = call_entry(variant.function, variant.calling, call_args)
        finally:
            plan.spare_temporaries.append(spare)
        for original, copy in bound.write_back:
            original[...] = copy
        if status != 0:
            raise_for_status(f"kernel '{self.name}'", status)
        outputs = [buffers[name] for name in self.interface.outputs]
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def on_device(self, *args: object, out: Mapping[str, object] | None = None,
                  work: Mapping[str, object] | None = None) -> object:
        """Run on arrays already on the device, writing the outputs in place.

        ``args``: the inputs as for a normal call, but device arrays: for target='cuda'
        objects with ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA tensors),
        for 'cuda-emulated' numpy arrays (host memory plays the device's). ``out``: a
        device array for every output, by name, C-contiguous, of the output's shape and
        dtype; the kernel writes them in place (an output the kernel does not write
        whole is zeroed first: numpy and CuPy ``fill(0)``, PyTorch ``zero_()``) and they
        are returned as a normal call returns its outputs. ``work``: device arrays for
        the kernel's temporaries (``device_layout`` lists them), optional: a temporary
        not given is allocated and freed inside the call, which costs a cudaMalloc and a
        cudaFree each time. Nothing is copied between host and device: the device entry
        (codegen/cuda.py) launches the kernels on the given arrays on the legacy default
        stream, waits for them and returns (work the caller queued on a non-blocking
        stream, e.g. under ``torch.cuda.stream(s)``, must be finished first). The arguments are checked as in a normal call
        (polycomp/device_arrays.py), so no size can make the kernel write outside an
        array; a target without a GPU raises DeviceUnavailableError after the checks."""
        return self.device_runner(*args, out=out, work=work)()

    def device_runner(self, *args: object, out: Mapping[str, object] | None = None,
                      work: Mapping[str, object] | None = None) -> Callable[[], object]:
        """``on_device``'s checks done once: a callable that runs the device entry on
        these arrays each time it is called (it holds them, so they stay alive), for
        timing loops where the checks' Python would count. The arrays must keep their
        shapes and addresses (a PyTorch ``resize_`` would break that: use on_device)."""
        from .device_arrays import bind_device, check_overlap, check_tensor, device_array

        target = self.options.target
        if not hasattr(get_target(target), "load_device"):
            raise _no_device_entry(target)
        bound, arrays = bind_device(self.name, self.interface, args, target)
        plan = self._plan(bound.sizes)
        variant = plan.variant
        self._last = variant.compiled
        function = variant.device_function
        given = {"out": dict(out or {}), "work": dict(work or {})}
        shapes = {"out": [(n, s, d) for n, s, d, _ in plan.allocate],
                  "work": list(plan.temporaries)}
        for key, names in (("out", [n for n, *_ in plan.allocate]),
                           ("work", [n for n, *_ in plan.temporaries])):
            unknown = sorted(set(given[key]) - set(names))
            if unknown:
                raise ArgumentError(f"kernel '{self.name}': {key}= names {unknown}, which "
                                    f"are not its {'outputs' if key == 'out' else 'temporaries'}",
                                    hint=f"{key}= takes {names or 'nothing'}")
        missing = [n for n, *_ in plan.allocate if n not in given["out"]]
        if missing:
            layout = {n: (s, d) for n, s, d, _ in plan.allocate}
            raise ArgumentError(f"kernel '{self.name}': on_device writes its outputs in "
                                f"place; out= lacks {missing}",
                                hint="out={name: device array}: " + ", ".join(
                                    f"{n} {layout[n][1]} {tuple(layout[n][0])}" for n in missing))
        zero = {n for n, _, _, z in plan.allocate if z}
        for key in ("out", "work"):
            for name, shape, dtype in shapes[key]:
                if name not in given[key]:
                    continue
                what = f"{key}['{name}'] of '{self.name}'"
                array = check_tensor(device_array(given[key][name], what, target, dtype),
                                     what, dtype, len(shape))
                if array.shape != tuple(shape):
                    raise ArgumentError(f"{what} has shape {array.shape}; the sizes "
                                        f"{bound.sizes} make it {tuple(shape)}")
                if array.readonly:
                    raise ArgumentError(f"{what} is read-only", hint="pass a writable array")
                if name in arrays:
                    raise ArgumentError(f"kernel '{self.name}': '{name}' given twice")
                arrays[name] = array
        written = set(given["out"]) | set(given["work"]) | {
            a.name for a in self.interface.inputs if getattr(a, "updated", False)}
        check_overlap(self.name, arrays, written)
        zeroed = [(arrays[n].owner, f"out['{n}'] of '{self.name}'") for n in sorted(zero)]
        for owner, what in zeroed:  # refused here, before any run, when it cannot be done
            _zero(owner, what)
        # a temporary nobody gave is null: the device entry allocates it
        call_args = entry_arguments(
            plan, bound, lambda name: arrays[name].address if name in arrays else None)
        outputs = [given["out"][name] for name in self.interface.outputs]
        result = (None if not outputs else outputs[0] if len(outputs) == 1
                  else tuple(outputs))
        calling, name, owners = variant.calling, self.name, (args, given)

        def run() -> object:
            for owner, what in zeroed:
                _zero(owner, what)
            status = call_entry(function, calling, call_args)
            if status != 0:
                raise_for_status(f"kernel '{name}'", status)
            return result

        run.arrays = owners  # type: ignore[attr-defined]  # kept alive with the runner
        return run

    def device_layout(self, *args: object) -> dict[str, tuple[tuple[int, ...], str, str]]:
        """name -> (shape, dtype, "out" or "work") of the device arrays ``on_device``
        takes beside the inputs, for inputs shaped like ``args`` (arrays of any kind
        with ``.shape``, or the scalars): what to allocate before timing."""
        from .arguments import check_dims

        bound = arguments.BoundArguments()
        origin: dict[str, str] = {}
        tensors = []
        arguments.check_count(self.name, self.interface, args)
        for spec, value in zip(self.interface.inputs, args):
            if isinstance(spec, TensorArg):
                tensors.append((spec, tuple(int(n) for n in getattr(value, "shape", ()))))
            elif spec.is_size:
                arguments._bind_size(bound, origin, spec.name, int(value), spec.name,  # type: ignore[call-overload]
                                     allow_negative=True)
        check_dims(self.name, bound, origin, tensors)
        plan = self._plan(bound.sizes)
        layout = {n: (tuple(s), d, "out") for n, s, d, _ in plan.allocate}
        layout.update({n: (tuple(s), d, "work") for n, s, d in plan.temporaries})
        return layout


def entry_arguments(plan: CallPlan, bound: arguments.BoundArguments,
                    address: Callable[[str], int | None]) -> list[object]:
    """The entry's arguments in order: sizes, scalars as their C type's value, arrays as
    ``address(name)``."""
    values: list[object] = []
    for kind, name, dtype in plan.arguments:
        if kind == "size":
            values.append(bound.sizes[name])
        elif kind == "scalar":
            values.append(scalar_value(bound.values[name], dtype))
        else:
            values.append(address(name))
    return values


def call_entry(function: Callable[..., int], calling: Callable[[], AbstractContextManager] | None,
               arguments: Sequence[object]) -> int:
    """One call of a loaded entry, inside the target's calling context where it has one."""
    if calling is None:
        return function(*arguments)
    with calling():
        return function(*arguments)


def _no_device_entry(target: str) -> UnsupportedError:
    return UnsupportedError(f"target '{target}' has no device entry: on_device runs kernels "
                            f"compiled for target='cuda' or 'cuda-emulated'",
                            hint="call the kernel itself, or compile it with target='cuda'")


def _zero(owner: object, what: str) -> None:
    """Zeroes a device array the kernel does not write whole (on_device)."""
    if isinstance(owner, np.ndarray):
        owner.fill(0)
    elif callable(getattr(owner, "zero_", None)):  # torch
        owner.zero_()
    elif callable(getattr(owner, "fill", None)):  # cupy
        owner.fill(0)
    else:
        raise ArgumentError(f"{what} must start as zeros (the kernel does not write every "
                            f"element), and polycomp cannot zero a {type(owner).__name__}",
                            hint="pass a CuPy array or a PyTorch tensor")


def raise_for_status(what: str, status: int) -> None:
    """The error for a non-zero entry status (codegen/c.py STATUS) of ``what`` ("kernel
    'f'", or a model's "group 'g3'")."""
    if status == STATUS_DIVISION:
        raise IntegerDivisionError(
            f"{what}: an integer division or modulo by zero (or the overflowing MIN / -1) "
            f"at run time; the results are not valid",
            hint="check the divisors' values (a zero from the data, or -1 against the "
                 "type's minimum)")
    if status == STATUS_GATHER:
        raise ArgumentError(f"{what}: a data-dependent index (gather) was out of bounds; the "
                            f"out-of-bounds reads were skipped",
                            hint="check the index tensor's values against the gathered extent")
    if status == STATUS_NO_MEMORY:
        raise ArgumentError(f"{what}: out of memory for its scratch arrays",
                            hint="free memory, or call it on smaller arrays")
    raise InternalError(f"{what} returned status {status}")


def _written_whole(compiled: Compiled, array: Array) -> bool:
    """Whether the statements with affine targets write every element of ``array`` for
    every size the program accepts (a data-dependent target counts for nothing), and no
    element is read before it is written (then the initial zeros are never seen)."""
    from . import expr as E
    from . import islutil as U
    program = compiled.program
    if any(m.get_tuple_name(isl.dim_type.out) == array.name
           for m in U.maps_of(compiled.dependences.live_in)):
        return False
    written = None
    for s in program.statements:
        if s.target.array != array.name or any(
                isinstance(n, E.Access) for ix in s.target.indices for n in E.walk(ix)):
            continue
        part = s.write.intersect_domain(s.domain).range()
        written = part if written is None else written.union(part)
    if written is None:
        return False
    whole = array.bounds().align_params(written.get_space())
    written = written.align_params(whole.get_space())
    return whole.intersect_params(program.context).is_subset(written)


def _check_context(name: str, program: Program, sizes: Mapping[str, int]) -> None:
    from . import islutil as U
    fixed = program.context.intersect_params(U.fix_params(sizes, program.params))
    if fixed.is_empty():
        raise ArgumentError(f"sizes {dict(sizes)} are outside what kernel '{name}' accepts: "
                            f"{program.context}")


__all__ = ["Kernel", "Variant", "Definition", "PolycompError"]
