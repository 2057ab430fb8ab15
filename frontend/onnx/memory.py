"""ONNX import, step 4: the static memory plan of a model's intermediate values.

Input: a :class:`plan.ModelPlan`. Output: a :class:`MemoryPlan`: one arena and, for each
intermediate value a group writes, its byte offset there. A value lives from the step
that writes it to the last step that reads it or any view of it (host steps reshape
without copying, so a view keeps its base alive); two values share bytes only when
their lifetimes do not overlap. Offsets are chosen greedily, largest values first, each
at the lowest aligned offset free during its whole lifetime (the usual first-fit by
size, as TVM's and onnxruntime's planners do). Graph outputs are not planned: they are
handed to the caller and must outlive the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plan import HostStep, ModelPlan

ALIGN = 64  # bytes: a cache line, and what the vector loads of the kernels like


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]  # value -> byte offset in the arena
    arena_bytes: int  # the peak: what one run needs
    intermediate_bytes: int  # the sum of every planned value's size (no reuse)

    def describe(self) -> str:
        saved = 1 - self.arena_bytes / self.intermediate_bytes if self.intermediate_bytes else 0
        return (f"arena {self.arena_bytes} bytes for {len(self.offsets)} values of "
                f"{self.intermediate_bytes} bytes in all ({saved:.0%} saved by reuse)")


def _nbytes(plan: ModelPlan, value: str) -> int:
    v = plan.graph.values[value]  # as stored: a channel-blocked value has padded blocks
    return int(np.prod(plan.stored_shape(value), dtype=np.int64)) * np.dtype(v.dtype).itemsize


def plan_memory(plan: ModelPlan) -> MemoryPlan:
    outputs = set(plan.graph.outputs)
    base: dict[str, str] = {}  # a host step's output -> the value whose storage it views
    birth: dict[str, int] = {}
    for k, step in enumerate(plan.steps):
        if isinstance(step, HostStep):
            source = next((i for i in step.node.inputs if i), None)
            for o in step.node.outputs[:1]:
                if o and source is not None:
                    base[o] = base.get(source, source)
            continue
        for _, value in step.outputs:
            birth[value] = k
    death: dict[str, int] = {}
    for k, step in enumerate(plan.steps):
        reads = ([i for i in step.node.inputs if i] if isinstance(step, HostStep)
                 else [v for _, v in step.inputs])
        for value in reads:
            root = base.get(value, value)
            death[root] = max(death.get(root, -1), k)
    # a root viewed by a graph output is handed to the caller: not planned
    escaping = {base.get(o, o) for o in outputs}
    planned = [v for v in birth if v not in escaping]
    for v in planned:
        death.setdefault(v, birth[v])  # written and never read: lives in its own step
    sizes = {v: _nbytes(plan, v) for v in planned}
    placed: list[tuple[int, int, int, int]] = []  # (start, end, birth, death)
    offsets: dict[str, int] = {}
    for v in sorted(planned, key=lambda v: (-sizes[v], birth[v])):
        size = -(-max(sizes[v], 1) // ALIGN) * ALIGN
        busy = sorted((s, e) for s, e, b, d in placed if b <= death[v] and birth[v] <= d)
        offset = 0
        for s, e in busy:
            if offset + size <= s:
                break
            offset = max(offset, -(-e // ALIGN) * ALIGN)
        offsets[v] = offset
        placed.append((offset, offset + size, birth[v], death[v]))
    arena = max((e for _, e, _, _ in placed), default=0)
    return MemoryPlan(offsets, arena, sum(sizes.values()))
