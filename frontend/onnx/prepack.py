"""ONNX import, load-time layout changes: a group's Program split into what depends only
on constant weights (run once when the model is loaded) and the rest (run per call).

Input: a group's Program and the names of its input arrays whose values are constant.
Output: ``(prepare, main)``: ``prepare`` computes the packed weights channel blocking
(scheduler/blocking.py) and panel packing (scheduler/panels.py) ask for, from the
constant inputs; ``main`` reads them as
inputs. A 3x3 convolution of ResNet's last stage packs 9.4 MB of weights with a strided
gather: per call that cost more than the convolution itself. ``None`` when nothing
depends only on constants.
"""

from __future__ import annotations

from dataclasses import replace

from polycomp import islutil as U
from polycomp.ir import Array, Program
from polycomp.scheduler.panels import block_and_pack


def split_constant_work(program: Program, constant_inputs: set[str], panels: bool = True
                        ) -> tuple[Program, Program] | None:
    """(prepare, main), or None when no statement reads only constant inputs; ``panels``
    False leaves matrix products unpacked (scheduler/panels.packs_panels)."""
    blocked = block_and_pack(program, panels)
    if blocked is program:
        return None
    arrays = {a.name: a for a in blocked.arrays}
    writers: dict[str, list] = {}
    for s in blocked.statements:
        writers.setdefault(s.target.array, []).append(s)

    def constant_only(s) -> bool:
        return all(r.get_tuple_name(U.dim.out) in constant_inputs for r in s.reads)

    # a temporary every writer of which reads constants only is computed at load time
    moved_arrays = {name for name, ws in writers.items()
                    if arrays[name].role == "temporary" and all(constant_only(w) for w in ws)}
    if not moved_arrays:
        return None
    moved = [s for s in blocked.statements if s.target.array in moved_arrays]
    kept = [s for s in blocked.statements if s.target.array not in moved_arrays]
    read_by_moved = {r.get_tuple_name(U.dim.out) for s in moved for r in s.reads}

    def keep_domains(stmts) -> object:
        return U.union_set(s.domain for s in stmts)

    prepare = replace(
        blocked, name=f"{program.name}_prepare",
        arrays=tuple(replace(a, role="output") if a.name in moved_arrays else a
                     for a in blocked.arrays
                     if a.name in moved_arrays or a.name in read_by_moved),
        statements=tuple(moved),
        original_schedule=blocked.original_schedule.intersect_domain(keep_domains(moved)),
        notes=(), generic=None)
    main = replace(
        blocked,
        arrays=tuple(_as_input(a) if a.name in moved_arrays else a for a in blocked.arrays),
        statements=tuple(kept),
        original_schedule=blocked.original_schedule.intersect_domain(keep_domains(kept)),
        generic=None)
    # both are parts of the blocked program, which block_channels validated
    return prepare, main


def _as_input(array: Array) -> Array:
    return replace(array, role="input")
