"""Whole ONNX models: an onnxruntime-style session over compiled fusion groups.

Input: a model (path, bytes or ModelProto) and Options. Output: an object with
onnxruntime's ``InferenceSession`` interface (``get_inputs``, ``get_outputs``, ``run``).
Per set of input shapes (the first call with them) the model goes through
frontend/onnx: graph.specialise (shapes, constant folding) -> plan.build_plan (fusion
groups, one Program each) -> one polycomp Kernel per distinct group (identical groups
share one); later calls with the same shapes reuse that plan.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import islpy as isl
import numpy as np

from polycomp.errors import ArgumentError, PolycompError, UnsupportedError
from polycomp.frontend.onnx.graph import (ELEM_DTYPES, ELEM_FORMATS, Graph, check_values,
                                          declared_shape, from_storage, runtime_inputs,
                                          specialise, to_storage)
from polycomp.frontend.onnx.memory import MemoryPlan, plan_memory
from polycomp.frontend.onnx.model import LoadedModel, NeedsValueError, load_model, onnx
from polycomp.frontend.onnx.ops.host import run_host
from polycomp.frontend.onnx.plan import GroupStep, HostStep, ModelPlan, build_plan
from polycomp.frontend.onnx.prepack import split_constant_work
from polycomp.scheduler.panels import packs_panels
from polycomp.ir import Interface, Program, TensorArg
from polycomp.onnx import model_cache
from polycomp.onnx.library import ModelLibrary, link_model
from polycomp.onnx.ort_options import check_run_options, session_settings
from polycomp.compile_cache import CachedKernel
from polycomp.options import Options
from polycomp.runtime import Kernel

# onnxruntime's type strings
ORT_TYPES = {
    "float32": "tensor(float)", "float64": "tensor(double)", "float16": "tensor(float16)",
    "int8": "tensor(int8)", "int16": "tensor(int16)", "int32": "tensor(int32)",
    "int64": "tensor(int64)", "uint8": "tensor(uint8)", "uint16": "tensor(uint16)",
    "uint32": "tensor(uint32)", "uint64": "tensor(uint64)", "bool": "tensor(bool)",
}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it."""

    name: str
    type: str
    shape: list  # ints, size names (str) or None


class GroupDefinition:
    """A fusion group's Program as a runtime Definition: its input arrays in order, its
    exported arrays returned."""

    def __init__(self, program: Program, inputs: Sequence[str], outputs: Sequence[str]):
        self.program = program
        self.name = program.name
        arrays = {a.name: a for a in program.arrays}
        self.interface = Interface(
            tuple(TensorArg(n, arrays[n].dtype, arrays[n].extents()) for n in inputs),
            tuple(outputs))

    def lower(self, sizes: Mapping[str, int] | None = None) -> Program:
        return self.program


@dataclass(eq=False)
class CompiledModel:
    """One set of input shapes: the model's library, which runs every group in one call
    (polycomp/onnx/library.py), and its constants; and, for describing it, the plan, a
    Kernel per group step (its Program, schedule and C; identical groups share one)
    and the memory plan. A model from the disk cache (polycomp/onnx/model_cache.py) has
    only the first two until something asks for the others: they are made then."""

    library: ModelLibrary
    compile_seconds: float
    constants: dict[str, np.ndarray]
    outputs: tuple[str, ...]  # the graph outputs, in order
    details: tuple[ModelPlan, dict[str, Kernel], MemoryPlan] | None = None
    rebuild: Callable[[], tuple[ModelPlan, dict[str, Kernel], MemoryPlan]] | None = None
    from_cache: bool = False  # whether the library came from the model cache

    def _details(self) -> tuple[ModelPlan, dict[str, Kernel], MemoryPlan]:
        if self.details is None:
            assert self.rebuild is not None
            self.details = self.rebuild()
        return self.details

    @property
    def plan(self) -> ModelPlan:
        return self._details()[0]

    @property
    def kernels(self) -> dict[str, Kernel]:
        """Group name -> its kernel (for its Program, schedule and C)."""
        return self._details()[1]

    @property
    def memory(self) -> MemoryPlan:
        return self._details()[2]

    @property
    def graph(self) -> Graph:
        return self.plan.graph


# one Kernel per distinct group Program and Options, shared across sessions
_KERNELS: dict[tuple[str, Options], Kernel] = {}
_KERNELS_LOCK = threading.Lock()


def group_kernel(step: GroupStep, options: Options) -> Kernel:
    """The step's Kernel (shared with identical groups), compiled with the best tuning
    record of its Program when ``options.tuning`` is "records" and there is one
    (polycomp tune model.onnx writes them: polycomp/tuning/model.py)."""
    assert step.program is not None
    if options.tuning == "records" and not options.band_config:
        from polycomp.tuning.api import best_record
        record = best_record(step.program, options)
        if record is not None:
            options = options.with_(band_config=record.config)
    # the signature names every array, dtype and expression tree (format_program leaves
    # the dtypes of literals out); prepacking changes the inputs, so it is part of it
    signature = step.signature + (f"\nprepacked from {step.prepacked}" if step.prepacked else "")
    key = (signature + "\ninputs " + ",".join(a for a, _ in step.inputs), options)
    with _KERNELS_LOCK:
        kernel = _KERNELS.get(key)
    if kernel is None:
        definition = GroupDefinition(step.program, [a for a, _ in step.inputs],
                                     [a for a, _ in step.outputs])
        kernel = CachedKernel(definition, options, signature)
        kernel.specialize({}, build=False)  # its C goes into the model's library
        with _KERNELS_LOCK:
            kernel = _KERNELS.setdefault(key, kernel)
    return kernel


class InferenceSession:
    """``onnxruntime.InferenceSession`` for polycomp: same constructor argument (a path or
    the model's bytes, or a ModelProto), same ``get_inputs``/``get_outputs``/``run``.
    Keyword arguments are polycomp Options (scheduler, parallel, ...). Of onnxruntime's
    ``sess_options``, ``providers``, ``provider_options`` and ``run_options``, polycomp
    honours the thread count, the CPU provider and ``terminate``; every other setting
    changed from onnxruntime's default warns (ort_options.py)."""

    def __init__(self, path_or_bytes: object, sess_options: object = None,
                 providers: object = None, provider_options: object = None,
                 **options: object):
        self._settings = session_settings(sess_options, providers, provider_options)
        self._sess_options = sess_options
        self.options = Options.create(**options)
        if self.options.target != "openmp":
            # the model's library links every group kernel with a C driver (library.py)
            raise UnsupportedError(f"whole ONNX models compile for target 'openmp' only, "
                                   f"not '{self.options.target}'",
                                   hint="leave target= out; compile one operator as a TC "
                                        "kernel for the GPU targets")
        self._model: LoadedModel = load_model(
            path_or_bytes, model_cache.was_checked if self.options.cache else None)
        check_values(self._model.model)
        self._inputs = [self._arg(i) for i in runtime_inputs(self._model.model)]
        self._ranked = {i.name: i.type.tensor_type.HasField("shape")
                        for i in runtime_inputs(self._model.model)}
        self._outputs = [self._arg(o) for o in _typed_outputs(self._model.model)]
        # inputs and outputs of a type polycomp only stores (graph.ELEM_FORMATS) -> it
        self._formats = {i.name: i.type.tensor_type.elem_type for i in
                         list(runtime_inputs(self._model.model))
                         + _typed_outputs(self._model.model)
                         if i.type.tensor_type.elem_type in ELEM_FORMATS}
        self._compiled: dict[tuple, CompiledModel] = {}
        self._lock = threading.Lock()
        self._value_inputs: set[str] = set()  # inputs compiled in by value (_compile)
        static = {a.name: tuple(a.shape) for a in self._inputs
                  if self._ranked[a.name] and all(isinstance(d, int) for d in a.shape)}
        if len(static) == len(self._inputs):  # every shape known: compile now
            try:
                self._compile(static)
            except NeedsValueError as exc:
                # a shape or an axis list comes from an input: compiled per value at run
                if not self._value_sources(exc.value, dict.fromkeys(static, np.zeros(0))):
                    raise

    @staticmethod
    def _arg(info) -> NodeArg:
        if not info.type.tensor_type.elem_type:  # an output inference could not type
            return NodeArg(info.name, "tensor(undefined)", list(declared_shape(info)))
        elem = info.type.tensor_type.elem_type
        if elem in ELEM_FORMATS:  # fed and returned as ml_dtypes arrays
            return NodeArg(info.name, f"tensor({ELEM_FORMATS[elem]})",
                           [None if d == -1 else d for d in declared_shape(info)])
        dtype = ELEM_DTYPES.get(elem)
        # exporters write -1 for a dynamic extent (PaddleOCR's classifier: [-1, 3, ?, ?]):
        # onnxruntime takes it as one, so does polycomp
        shape = [None if d == -1 else d for d in declared_shape(info)]  # other negatives:
        # refused with the model (graph.py)
        return NodeArg(info.name, ORT_TYPES.get(dtype, f"tensor({elem})"), shape)

    # ------------------------------------------------------------------ onnxruntime API
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return ["PolycompExecutionProvider"]

    def get_session_options(self) -> object:
        """The ``sess_options`` the session was made with (None when none was given)."""
        return self._sess_options

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, object],
            run_options: object = None) -> list[np.ndarray]:
        check_run_options(run_options)
        feeds = self._check_feed(input_feed)
        if isinstance(output_names, (str, bytes)) or not (
                output_names is None or isinstance(output_names, Sequence)):
            raise ArgumentError(f"run() takes the output names as a list or None, not "
                                f"{output_names!r}", hint="e.g. session.run(['y'], feed)")
        wanted = [o.name for o in self._outputs] if not output_names else list(output_names)
        known = {o.name for o in self._outputs}
        for name in wanted:
            if not isinstance(name, str) or name not in known:
                raise ArgumentError(f"{name!r} is not an output of the model",
                                    hint="outputs: " + ", ".join(sorted(known)))
        compiled = self._compile({k: v.shape for k, v in feeds.items()}, feeds)
        env = execute(compiled, feeds, threads=self._settings.threads)
        return [from_storage(env[name], self._formats.get(name, 0)) for name in wanted]

    # ------------------------------------------------------------------ polycomp extras
    def compiled(self, shapes: Mapping[str, Sequence[int]] | None = None) -> CompiledModel:
        """The compiled plan for these input shapes (the declared ones by default)."""
        if shapes is None:
            shapes = {a.name: tuple(a.shape) for a in self._inputs}
        declared = {a.name for a in self._inputs}
        if not isinstance(shapes, Mapping) or set(shapes) != declared or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
                for dims in shapes.values() for d in dims):
            raise ArgumentError(f"compiled() needs a shape of non-negative extents for every "
                                f"input ({', '.join(sorted(declared))}), not {shapes!r}",
                                hint="symbolic dimensions have no default: e.g. "
                                     "compiled({'x': (1, 3, 224, 224)})")
        return self._compile({k: tuple(int(d) for d in v) for k, v in shapes.items()})

    def profile(self, input_feed: Mapping[str, object], repeat: int = 10
                ) -> list[tuple[str, str, float]]:
        """Per step of the plan: (step name, its ONNX nodes, minimum seconds over
        ``repeat`` runs), for finding the slow group of a model."""
        feeds = self._check_feed(input_feed)
        compiled = self._compile({k: v.shape for k, v in feeds.items()}, feeds)
        best: list[float] | None = None
        for _ in range(max(1, repeat)):
            times: list[float] = []
            execute(compiled, feeds, times, threads=self._settings.threads)
            best = times if best is None else [min(a, b) for a, b in zip(best, times)]
        seconds = dict(zip(compiled.library.step_names, best or []))
        out = []
        for step in compiled.plan.steps:  # host steps are views: no time of their own
            if isinstance(step, HostStep):
                out.append((step.node.op_type, step.node.name, 0.0))
            else:
                out.append((step.name, ", ".join(f"{n.name} ({n.op_type})" for n in step.nodes),
                            seconds.get(step.name, 0.0)))
        return out

    def profile_table(self, input_feed: Mapping[str, object], repeat: int = 10,
                      compare: bool = True) -> str:
        """``profile`` as a table a person reads: per group its time, GFLOP/s and share of
        this machine's measured FP32 peak, beside onnxruntime's time for the same nodes
        (where onnxruntime is installed and ``compare``); polycomp/onnx/profile.py."""
        from polycomp.onnx.profile import profile_report  # noqa: PLC0415 - reports only
        from polycomp.threads import get_max_threads  # noqa: PLC0415

        feeds = self._check_feed(input_feed)
        return profile_report(self, self._model.model.SerializeToString(), feeds,
                              self._settings.threads or get_max_threads(), repeat, compare)

    def _check_feed(self, input_feed: Mapping[str, object]) -> dict[str, np.ndarray]:
        if not isinstance(input_feed, Mapping):
            raise ArgumentError("run() takes the inputs as a dict {name: array}",
                                hint="e.g. session.run(None, {'x': x})")
        feeds: dict[str, np.ndarray] = {}
        declared = {a.name: a for a in self._inputs}
        for name, value in input_feed.items():
            if not isinstance(name, str) or name not in declared:
                raise ArgumentError(f"{name!r} is not an input of the model",
                                    hint="inputs: " + ", ".join(declared))
            arg = declared[name]
            try:
                array = np.asarray(value)
            except Exception as exc:  # ragged lists and objects numpy cannot convert
                raise ArgumentError(f"input '{name}' is not an array: {exc}",
                                    hint="feed numpy arrays") from None
            elem = self._formats.get(name, 0)
            if elem:  # bfloat16, float8, int4, ...: the ml_dtypes array, kept as its bits
                want = onnx.helper.tensor_dtype_to_np_dtype(elem)
                if array.dtype != want:
                    raise ArgumentError(f"input '{name}' has dtype {array.dtype}, the model "
                                        f"declares {arg.type}",
                                        hint=f"feed an array of ml_dtypes.{np.dtype(want).name}")
                array = to_storage(array)
            want = next(k for k, v in ORT_TYPES.items() if v == arg.type) \
                if arg.type in ORT_TYPES.values() else None
            if want is not None and array.dtype != np.dtype(want):
                raise ArgumentError(f"input '{name}' has dtype {array.dtype}, the model "
                                    f"declares {arg.type}",
                                    hint=f"convert it, e.g. x.astype(np.{want})")
            if self._ranked[name] and len(arg.shape) != array.ndim:
                raise ArgumentError(f"input '{name}' has rank {array.ndim}, the model "
                                    f"declares rank {len(arg.shape)} {arg.shape}")
            for k, d in enumerate(arg.shape):
                if isinstance(d, int) and array.shape[k] != d:
                    raise ArgumentError(f"input '{name}' has shape {array.shape}, the model "
                                        f"declares {arg.shape}")
            feeds[name] = _contiguous(array)
        missing = [a.name for a in self._inputs if a.name not in feeds]
        if missing:
            raise ArgumentError(f"input '{missing[0]}' is missing",
                                hint="feed every input: " + ", ".join(declared))
        return feeds

    def _compile(self, shapes: Mapping[str, tuple[int, ...]],
                 feeds: Mapping[str, np.ndarray] | None = None) -> CompiledModel:
        """The plan for these input shapes (and, for the inputs a shape or an axis list
        comes from, these values: ``_value_inputs``), compiled on first use."""
        with self._lock:
            for _ in range(MAX_VALUE_ROUNDS):
                fixed = {n: np.asarray(feeds[n]) for n in sorted(self._value_inputs)
                         if feeds is not None and n in feeds}
                key = (tuple(sorted((k, tuple(v)) for k, v in shapes.items()
                                    if k not in fixed)),
                       tuple((n, str(a.dtype), a.shape, a.tobytes()) for n, a in fixed.items()))
                compiled = self._compiled.get(key)
                if compiled is not None:
                    return compiled
                try:
                    compiled = self._build({k: v for k, v in shapes.items() if k not in fixed},
                                           fixed)
                except NeedsValueError as exc:
                    more = self._value_sources(exc.value, feeds)
                    if not more:
                        raise
                    self._value_inputs |= more
                    continue
                self._compiled[key] = compiled
                return compiled
            raise UnsupportedError("the model needs more input values at compile time than "
                                   f"{MAX_VALUE_ROUNDS} rounds of specialisation found")

    def _build(self, shapes: Mapping[str, tuple[int, ...]],
               fixed: Mapping[str, np.ndarray]) -> CompiledModel:
        start = time.perf_counter()
        key = None
        if self.options.cache:
            key = model_cache.model_key(self._model.digest, shapes, fixed, self.options,
                                        _records_stamp(self.options))
            hit = model_cache.load(key, self.options)
            if hit is not None:
                hit.library.bind(hit.constants)
                return CompiledModel(hit.library, time.perf_counter() - start, hit.constants,
                                     tuple(hit.notes["outputs"]),
                                     rebuild=lambda: self._plan(shapes, fixed)[:3],
                                     from_cache=True)
        plan, kernels, memory, constants = self._plan(shapes, fixed)
        records = {name: k.specialize({}, build=False).compiled for name, k in kernels.items()}
        feeds = [a.name for a in self._inputs if a.name in shapes]
        library = link_model(plan, records, memory, feeds, constants, self.options)
        library.bind(constants)
        outputs = tuple(plan.graph.outputs)
        if key is not None:
            model_cache.store(key, library, constants,
                              {"outputs": list(outputs), "digest": self._model.digest},
                              self.options)
        return CompiledModel(library, time.perf_counter() - start, constants, outputs,
                             (plan, kernels, memory))

    def _plan(self, shapes: Mapping[str, tuple[int, ...]], fixed: Mapping[str, np.ndarray]
              ) -> tuple[ModelPlan, dict[str, Kernel], MemoryPlan, dict[str, np.ndarray]]:
        """The plan, a compiled Kernel per group (not built: the library holds their C),
        the memory plan, and the constants after load-time work."""
        graph = specialise(self._model, dict(shapes), dict(fixed))
        plan = build_plan(graph)
        constants = {name: v.const for name, v in plan.graph.values.items()
                     if v.const is not None}
        for step in plan.groups:
            constants.update(step.tables)
        if self.options.block_channels and self.options.scheduler not in ("none", "custom"):
            plan.steps = [prepack(s, constants, self.options) if isinstance(s, GroupStep)
                          and s.program is not None else s for s in plan.steps]
        kernels = {s.name: group_kernel(s, self.options) for s in plan.groups
                   if s.program is not None}
        return plan, kernels, plan_memory(plan), constants

    def _value_sources(self, value: str, feeds: Mapping[str, np.ndarray] | None) -> set[str]:
        """The graph inputs ``value`` is computed from that may be compiled in: small
        (at most VALUE_INPUT_LIMIT elements) and fed in this run; none already fixed."""
        if feeds is None:
            return set()
        producers = {o: n for n in self._model.model.graph.node for o in n.output if o}
        found: set[str] = set()
        seen: set[str] = set()
        stack = [value]
        while stack:
            name = stack.pop()
            if name in seen or not name:
                continue
            seen.add(name)
            if name in feeds and name not in self._value_inputs:
                if np.asarray(feeds[name]).size <= VALUE_INPUT_LIMIT:
                    found.add(name)
                continue
            node = producers.get(name)
            if node is not None:
                stack.extend(node.input)
        return found


def _records_stamp(options: Options) -> str:
    """What the tuning records the kernels would be compiled with look like now (a
    cached model compiled before a tuning run must not serve after it)."""
    if options.tuning != "records":
        return ""
    from polycomp.tuning.records import Records, default_path

    path = options.records or default_path()
    try:
        return Records.stamp(path)
    except Exception:  # an unreadable database: compiled without it (best_record warns)
        return "unreadable"


# an input of at most this many elements may be compiled in by value (an axes list, a
# shape, pads, scales); the model is then compiled once per distinct value
VALUE_INPUT_LIMIT = 64
MAX_VALUE_ROUNDS = 8


def _typed_outputs(model) -> list:
    """The graph outputs, with the types onnx's shape inference gives those the model
    leaves untyped (onnxruntime reports them too)."""
    outputs = list(model.graph.output)
    if all(o.type.tensor_type.elem_type for o in outputs):
        return outputs
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # the error comes, with its node, when the model is compiled
        return outputs
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    return [o if o.type.tensor_type.elem_type or o.name not in known else known[o.name]
            for o in outputs]


def execute(compiled: CompiledModel, feeds: Mapping[str, np.ndarray],
            timings: list[float] | None = None, threads: int | None = None
            ) -> dict[str, np.ndarray]:
    """Run the model's library on the feeds; the graph outputs by name (fresh arrays:
    never the session's constants, the feed or one another's bytes). ``timings`` (if
    given) receives each group kernel's seconds, in plan order; ``threads``: the run's
    OpenMP threads (None: the calling thread's count)."""
    env = compiled.library.run(feeds, timings, threads)
    missing = [name for name in compiled.outputs if name not in env]
    if missing:
        graph = compiled.graph
        # outputs no kernel writes: feeds, constants, empty values, Dropout's mask, or
        # views of those (host steps on numpy)
        known: dict[str, np.ndarray] = {**compiled.constants, **feeds, **env}
        for step in compiled.plan.steps:
            if isinstance(step, HostStep):
                node = step.node
                if all(i in known for i in node.inputs if i):
                    outs = run_host(node, graph, [known[i] for i in node.inputs if i])
                    known.update(zip([o for o in node.outputs if o], outs))
            else:
                for name in step.empty_outputs:
                    v = graph.values[name]
                    known[name] = np.zeros(v.shape, dtype=v.dtype)
        for name in missing:
            env[name] = np.array(known[name], copy=True)
    return env


def prepack(step: GroupStep, constants: dict[str, np.ndarray], options: Options) -> GroupStep:
    """``step`` with the work that depends only on constant weights (their packing for
    channel blocking) done now, at load time: its results join ``constants`` and the
    step's Program reads them as inputs (frontend/onnx/prepack.py)."""
    constant_arrays = {a for a, v in step.inputs if v in constants}
    split = split_constant_work(step.program, constant_arrays, packs_panels(options))
    if split is None:
        return step
    prepare, main = split
    by_array = dict(step.inputs)
    inputs = [a.name for a in prepare.arrays if a.role == "input"]
    outputs = [a.name for a in prepare.arrays if a.role == "output"]
    constant = ",".join(sorted(constant_arrays))  # which inputs are constant decides the split
    kernel = CachedKernel(GroupDefinition(prepare, inputs, outputs), options,
                          f"{step.signature}\nprepare from {constant}")
    results = kernel(*[constants[by_array[a]] for a in inputs])
    results = results if isinstance(results, tuple) else (results,)
    added = []
    for array, data in zip(outputs, results):
        value = f"\x00packed:{step.name}:{array}"  # no ONNX value has this name
        constants[value] = data
        added.append((array, value))
    used = {r.get_tuple_name(isl.dim_type.out) for s in main.statements for r in s.reads}
    kept = [(a, v) for a, v in step.inputs if a in used]
    main = replace(main, arrays=tuple(a for a in main.arrays if a.role != "input"
                                      or a.name in used))
    return replace(step, program=main, inputs=kept + added, prepacked=constant)


def _contiguous(array: np.ndarray) -> np.ndarray:
    """C-contiguous, keeping rank 0 (numpy.ascontiguousarray makes a scalar 1-D)."""
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def compile_onnx(model: object, **options: object) -> InferenceSession:
    """An InferenceSession for ``model`` (path, bytes or ModelProto)."""
    return InferenceSession(model, **options)


__all__ = ["InferenceSession", "NodeArg", "compile_onnx", "PolycompError", "onnx"]
