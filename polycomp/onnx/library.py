"""A whole ONNX model as one C library with one entry.

Input: a model plan (frontend/onnx/plan.py), the Compiled record of each group (the
kernel identical groups share is compiled once), the memory plan (frontend/onnx/
memory.py) and the order of the feeds and constants. Output: a :class:`ModelLibrary`:
one shared library holding every distinct group kernel (each its own translation unit,
its entry renamed ``polycomp_model_kernel_<k>``) and a driver translation unit with

    int polycomp_model_run(void *const *inputs, void *const *outputs,
                           void *const *constants, unsigned char *arena);
    int polycomp_model_step(int step, <the same four>);

``inputs`` are the feeds (C-contiguous, in ``ModelLibrary.inputs`` order), ``outputs``
the buffers of the values the model hands out (``output_buffers``), ``constants`` the
weights (``constants`` order; never copied into the C, so compile time does not grow
with the weight bytes), ``arena`` ``arena_bytes`` bytes for every intermediate value
(offsets from the memory plan) and, after them, the temporaries of the kernel running.
The run calls the kernels in plan order, zeroing first what a kernel leaves unwritten
(as polycomp/runtime.py does for one kernel); host steps (Reshape and its kind) cost
nothing: a viewed value is its base's bytes. The return value is 0, or
``256 * step + status`` for the first kernel that returned a status (runtime.py's:
a gather out of bounds, a division by zero, no memory). ``polycomp_model_step`` runs
one kernel: ``ModelLibrary.profile`` times them one by one.

One call from Python per run: a model of 70 small groups paid tens of microseconds per
group in argument binding and ctypes calls before.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, fields

import numpy as np

from polycomp.build import build_object, link_library
from polycomp.driver import Compiled
from polycomp.errors import CompilerError, InternalError
from polycomp.frontend.onnx.memory import ALIGN, MemoryPlan
from polycomp.frontend.onnx.plan import GroupStep, HostStep, ModelPlan
from polycomp.memory import aligned_empty
from polycomp.options import Options
from polycomp.runtime import _written_whole, raise_for_status
from polycomp.threads import call_threads

RUN, STEP = "polycomp_model_run", "polycomp_model_step"
KERNEL = "polycomp_model_kernel_{}"


@dataclass(frozen=True)
class OutputBuffer:
    """A value the run writes into a buffer the caller gets: its shape and dtype, and
    the graph outputs that are it or views of it."""

    value: str
    shape: tuple[int, ...]
    dtype: str
    graph_outputs: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape)


@dataclass(eq=False)
class ModelLibrary:
    """The library of one compiled model and how to call it. Pickles as its
    description (the disk cache of models, polycomp/onnx/model_cache.py); ``bind``
    loads it and fixes its constants."""

    path: str
    inputs: tuple[str, ...]  # feed names, in the order of the entry's `inputs`
    constants: tuple[str, ...]  # constant value names, in the order of `constants`
    output_buffers: tuple[OutputBuffer, ...]
    arena_bytes: int  # intermediates and the largest kernel's temporaries
    step_names: tuple[str, ...]  # the group step each kernel call runs, in order
    parallel: bool  # whether any kernel has OpenMP regions (threads.call_threads)
    source: str  # the driver's C

    def __post_init__(self) -> None:
        self._run: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
        self._step: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
        self._constant_pointers: ctypes.Array | None = None
        self._constant_arrays: list[np.ndarray] = []
        self._spare_arenas: list[np.ndarray] = []  # arenas no run is using
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    # ------------------------------------------------------------------ loading
    def bind(self, constants: Mapping[str, np.ndarray]) -> None:
        """Load the library and fix the constants' pointers (the arrays are kept alive
        here: they must not move while the library may run)."""
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as exc:
            raise CompilerError(f"cannot load the model library: {exc}") from None
        self._run, self._step = getattr(lib, RUN), getattr(lib, STEP)
        self._run.restype = self._step.restype = ctypes.c_int
        self._run.argtypes = [ctypes.c_void_p] * 4
        self._step.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4
        arrays = [np.ascontiguousarray(constants[name]) for name in self.constants]
        self._constant_arrays = arrays
        self._constant_pointers = (ctypes.c_void_p * max(1, len(arrays)))(
            *[a.ctypes.data for a in arrays])

    # ------------------------------------------------------------------ running
    def run(self, feeds: Mapping[str, np.ndarray], timings: list[float] | None = None,
            threads: int | None = None) -> dict[str, np.ndarray]:
        """The graph outputs the run writes (by name) from the feeds (C-contiguous,
        of the dtypes the model declares: the session checked them). With ``timings``,
        each kernel runs through its own call and its seconds are appended. ``threads``:
        the OpenMP threads of the run (None: the calling thread's count)."""
        if self._run is None:
            raise InternalError("the model library was not bound to its constants")
        feed_arrays = [feeds[name] for name in self.inputs]
        ins = (ctypes.c_void_p * max(1, len(feed_arrays)))(*[a.ctypes.data for a in feed_arrays])
        buffers = [aligned_empty(b.shape, b.dtype) for b in self.output_buffers]
        outs = (ctypes.c_void_p * max(1, len(buffers)))(*[b.ctypes.data for b in buffers])
        with self._lock:
            arena = self._spare_arenas.pop() if self._spare_arenas else None
        if arena is None:
            arena = aligned_empty((max(self.arena_bytes, 1),), "uint8")
        args = (ins, outs, self._constant_pointers, arena.ctypes.data)
        try:
            with call_threads(threads) if self.parallel else nullcontext():
                if timings is None:
                    status = self._run(*args)
                else:
                    status = 0
                    for k in range(len(self.step_names)):
                        start = time.perf_counter()
                        status = self._step(k, *args)
                        timings.append(time.perf_counter() - start)
                        if status:
                            status += 256 * k
                            break
        finally:
            with self._lock:
                self._spare_arenas.append(arena)
        if status:
            raise_for_status(f"group '{self.step_names[status // 256]}'", status % 256)
        out: dict[str, np.ndarray] = {}
        for buffer, data in zip(self.output_buffers, buffers):
            for k, (name, shape) in enumerate(buffer.graph_outputs):
                view = data if data.shape == shape else data.reshape(shape)
                out[name] = view if k == 0 else view.copy()  # outputs never share bytes
        return out


# ----------------------------------------------------------------------------- linking

def link_model(plan: ModelPlan, compiled: Mapping[str, Compiled], memory: MemoryPlan,
               feeds: Sequence[str], constants: Mapping[str, np.ndarray],
               options: Options) -> ModelLibrary:
    """The library of ``plan`` (``compiled``: group step name -> its kernel's record;
    identical groups share one record object)."""
    graph = plan.graph
    base: dict[str, str] = {}  # a host step's output -> the value whose bytes it views
    for step in plan.steps:
        if isinstance(step, HostStep):
            source = next((i for i in step.node.inputs if i), None)
            first = step.node.outputs[0] if step.node.outputs else ""
            if first and source is not None:
                base[first] = base.get(source, source)

    def root(value: str) -> str:
        return base.get(value, value)

    produced = {v for s in plan.groups if s.program is not None for _, v in s.outputs}
    # buffers handed out: a group's value that a graph output is, or views; one buffer
    # per root (a second output of the same root, a feed or a constant is copied by
    # the session)
    by_root: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for name in graph.outputs:
        r = root(name)
        if r in produced and r not in memory.offsets:
            by_root.setdefault(r, []).append((name, tuple(graph.values[name].shape)))
    output_buffers = tuple(
        OutputBuffer(r, tuple(graph.values[r].shape), str(graph.values[r].dtype),
                     tuple(outs)) for r, outs in by_root.items())
    out_slot = {b.value: k for k, b in enumerate(output_buffers)}
    feed_slot = {name: k for k, name in enumerate(feeds)}
    constant_names: list[str] = []
    constant_slot: dict[str, int] = {}
    arena_end = -(-memory.arena_bytes // ALIGN) * ALIGN

    def pointer(value: str) -> str:
        r = root(value)
        if r in constants:  # weights, lookup tables, prepacked weights
            if r not in constant_slot:
                constant_slot[r] = len(constant_names)
                constant_names.append(r)
            return f"cst[{constant_slot[r]}]"
        if 0 in graph.values[r].shape:
            return "(void *)arena"  # no element is ever read or written
        if r in out_slot:
            return f"out[{out_slot[r]}]"
        if r in memory.offsets:
            return f"(void *)(arena + {memory.offsets[r]})"
        if r in feed_slot:
            return f"in[{feed_slot[r]}]"
        raise InternalError(f"value '{r}' of the model has no storage in its library")

    kernels: dict[int, int] = {}  # id(Compiled) -> kernel number
    units: list[str] = []
    prototypes: list[str] = []
    cases: list[str] = []
    step_names: list[str] = []
    scratch_peak = 0
    for step in plan.steps:
        if not isinstance(step, GroupStep) or step.program is None:
            continue
        record = compiled[step.name]
        k = kernels.get(id(record))
        if k is None:
            k = kernels[id(record)] = len(units)
            unit, prototype = _renamed_unit(record, KERNEL.format(k))
            units.append(unit)
            prototypes.append(prototype)
        program = record.program
        arrays = {a.name: a for a in program.arrays}
        inputs, outputs = dict(step.inputs), dict(step.outputs)
        body: list[str] = []
        call: list[str] = []
        scratch = 0
        for arg in record.source.arguments:
            if arg.kind != "array":
                raise InternalError(f"group '{step.name}' takes a {arg.kind} argument "
                                    f"'{arg.name}'; a model's groups take arrays only")
            array = arrays[arg.name]
            nbytes = int(np.prod(array.extents({}), dtype=np.int64)) * np.dtype(array.dtype).itemsize
            zero = array.role == "output" and not _written_whole(record, array)
            if arg.name in inputs:
                where = pointer(inputs[arg.name])
            elif arg.name in outputs:
                where = pointer(outputs[arg.name])
            else:  # a temporary no other step sees
                where = f"(void *)(arena + {arena_end + scratch})"
                scratch += -(-max(nbytes, 1) // ALIGN) * ALIGN
            if zero and nbytes:
                body.append(f"memset({where}, 0, {nbytes});")
            call.append(where)
        scratch_peak = max(scratch_peak, scratch)
        body.append(f"return {KERNEL.format(k)}({', '.join(call)});")
        cases.append(f"  case {len(step_names)}: {{\n    " + "\n    ".join(body) + "\n  }")
        step_names.append(step.name)
    driver = _driver(prototypes, cases)
    texts = units + [driver]
    objects = _build_objects(texts, options)
    path = link_library(objects, texts, "polycomp_model", options)
    parallel = any("#pragma omp" in u for u in units)
    return ModelLibrary(str(path), tuple(feeds), tuple(constant_names), output_buffers,
                        arena_end + scratch_peak, tuple(step_names), parallel, driver)


def _renamed_unit(record: Compiled, name: str) -> tuple[str, str]:
    """The kernel's C with its entry renamed ``name`` (a macro: every kernel of a model
    is generated with the same entry name), and the entry's prototype."""
    source = record.source
    found = re.search(r"^int " + re.escape(source.entry) + r"\((.*)\)$", source.text, re.M)
    if found is None:
        raise InternalError(f"no entry '{source.entry}' in a group kernel's C")
    prototype = f"int {name}({found.group(1)});"
    return f"#define {source.entry} {name}\n{source.text}", prototype


def _driver(prototypes: list[str], cases: list[str]) -> str:
    args = "void *const *in, void *const *out, void *const *cst, unsigned char *arena"
    passed = "in, out, cst, arena"
    return "\n".join([
        "/* polycomp: the model's entry, calling its group kernels in order */",
        "#include <stdbool.h>", "#include <stdint.h>", "#include <string.h>", "",
        *prototypes, "",
        f"static int step(int k, {args})", "{", "  switch (k) {", *cases,
        "  }", "  return 0;", "}", "",
        f"int {STEP}(int k, {args})", "{", f"  return step(k, {passed});", "}", "",
        f"int {RUN}({args})", "{",
        f"  for (int k = 0; k < {len(cases)}; k++) {{",
        f"    int status = step(k, {passed});",
        "    if (status) return 256 * k + status;", "  }", "  return 0;", "}", ""])


def _build_objects(texts: list[str], options: Options) -> list:
    """Each translation unit compiled (or found in the cache), several at once."""
    workers = max(1, min(len(texts), os.cpu_count() or 1))
    if workers == 1:
        return [build_object(t, "polycomp_model", options) for t in texts]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda t: build_object(t, "polycomp_model", options), texts))


def export_library(library: ModelLibrary, constants: Mapping[str, np.ndarray],
                   path: str, model: str, shapes: Mapping[str, Sequence[int]]) -> dict:
    """Write the model's library to ``path``, its constants to ``path + '.constants'``
    (each at the byte offset the description gives, 64-byte aligned, little-endian as
    numpy holds them here) and the description of its entry to ``path + '.json'``: what
    a C program needs to call ``polycomp_model_run`` without polycomp (map or read the
    constants, point ``constants[k]`` at each, allocate the outputs and the arena)."""
    import json
    import shutil

    layout, offset = [], 0
    with open(path + ".constants", "wb") as f:
        for k, name in enumerate(library.constants):
            array = np.ascontiguousarray(constants[name])
            f.seek(offset)
            f.write(array.tobytes())
            layout.append({"slot": k, "value": name, "offset": offset,
                           "shape": list(array.shape), "dtype": array.dtype.name})
            offset += -(-max(array.nbytes, 1) // ALIGN) * ALIGN
        f.truncate(max(offset, 1))
    shutil.copyfile(library.path, path)
    described = {
        "model": os.path.abspath(model),
        "entry": f"int {RUN}(void *const *inputs, void *const *outputs, "
                 "void *const *constants, unsigned char *arena)",
        "returns": "0, or 256 * kernel + status (1: a gather index out of bounds, 2: an "
                   "integer division by zero, 3: no memory for scratch arrays)",
        "inputs": [{"slot": k, "name": n, "shape": list(shapes[n])}
                   for k, n in enumerate(library.inputs)],
        "outputs": [{"slot": k, "value": b.value, "shape": list(b.shape), "dtype": b.dtype,
                     "graph_outputs": [name for name, _ in b.graph_outputs]}
                    for k, b in enumerate(library.output_buffers)],
        "constants_file": os.path.basename(path) + ".constants",
        "constants": layout,
        "arena_bytes": library.arena_bytes,
        "kernels_in_order": list(library.step_names),
    }
    with open(path + ".json", "w", encoding="utf-8") as f:
        json.dump(described, f, indent=1)
    return described


__all__ = ["ModelLibrary", "OutputBuffer", "export_library", "link_model"]
