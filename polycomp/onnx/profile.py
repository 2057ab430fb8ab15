"""A per-group profile of a model that a person can read: time, GFLOP/s and the share of
this machine's measured peak, beside onnxruntime's time for the same nodes.

Place: after a session is compiled (polycomp/onnx/session.py), behind
``polycomp run model.onnx --profile`` and ``benchmarks``. Input: a session, a feed, the
thread count; output: ProfileRow per fused group, in run order.

Work is counted from each group's Program: per statement, its instances (isl counts the
points of its domain) times its floating-point additions, subtractions, multiplications
and divisions (a ``+=`` reduction's add included): a multiply-add is 2, as the peak
counts it (polycomp/peak.py); max, min, comparisons and math calls count nothing, so a
group of those reads 0 GFLOP/s rather than a number to compare with an FMA peak.

onnxruntime's side comes from its own profiler (``SessionOptions.enable_profiling``):
per node, the fastest of the runs after a warm-up, summed per polycomp group by name
(onnxruntime fuses nodes too, and names a fused convolution after its chain's output
value: ort_group); the nodes it adds itself (layout reorders) are reported apart.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polycomp import expr as E
from polycomp.ir import Program

_FLOP_OPS = ("add", "sub", "mul", "div")


def statement_flops(expr: E.Expr, reduction: str | None) -> int:
    """Floating-point adds, subtracts, multiplies and divides of one instance."""
    count = sum(1 for n in E.walk(expr)
                if isinstance(n, E.Binary) and n.op in _FLOP_OPS and E.is_float(n.dtype))
    return count + (1 if reduction in ("+", "*") and E.is_float(expr.dtype) else 0)


def program_flops(program: Program) -> int:
    """The work of one run of ``program`` (specialised: no parameters left)."""
    total = 0
    for stmt in program.statements:
        per = statement_flops(stmt.expr, stmt.reduction)
        if per:
            count = stmt.domain.count_val()
            total += per * int(count.to_python()) if count.is_int() else 0
    return total


@dataclass(frozen=True)
class ProfileRow:
    group: str                       # the fused group's step name
    nodes: str                       # its ONNX nodes, "name (OpType), ..."
    seconds: float                   # polycomp's fastest run of the group
    flops: int
    peak_gflops: float               # the machine's measured peak at these threads
    onnxruntime_seconds: float | None = None  # its nodes' time in onnxruntime

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def share_of_peak(self) -> float:
        return self.gflops / self.peak_gflops if self.peak_gflops > 0 else 0.0


def group_rows(session: object, feed: Mapping[str, np.ndarray], repeat: int,
               peak: float) -> list[ProfileRow]:
    """polycomp's side: each group's time (session.profile), work and rate."""
    compiled = session.compiled({k: v.shape for k, v in feed.items()})  # type: ignore[attr-defined]
    times = {name: (nodes, seconds)
             for name, nodes, seconds in session.profile(feed, repeat)}  # type: ignore[attr-defined]
    rows = []
    for step in compiled.plan.groups:
        if step.program is None or step.name not in times:
            continue
        kernel = compiled.kernels[step.name]
        program = kernel.definition.program
        nodes, seconds = times[step.name]
        rows.append(ProfileRow(step.name, nodes, seconds, program_flops(program), peak))
    return rows


def onnxruntime_node_seconds(model: bytes, feed: Mapping[str, np.ndarray], threads: int,
                             repeat: int) -> dict[str, float]:
    """Node name -> its fastest time in onnxruntime's own profile over ``repeat`` runs
    after one warm-up (onnxruntime on the CPU, ``threads`` intra-op threads)."""
    import onnxruntime as ort  # noqa: PLC0415 - optional: only for the comparison

    with tempfile.TemporaryDirectory(prefix="polycomp-ort-profile-") as tmp:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        so.intra_op_num_threads = threads
        session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        for _ in range(max(1, repeat) + 1):
            session.run(None, dict(feed))
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    runs: dict[str, list[float]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            runs.setdefault(name[:-len("_kernel_time")], []).append(event["dur"] * 1e-6)
    # the first run is the warm-up: each node's first event is dropped
    return {name: min(durs[1:] or durs) for name, durs in runs.items()}


def ort_group(name: str, names: Mapping[str, Sequence[str]]) -> str | None:
    """The group an onnxruntime node ``name`` belongs to: the group with a node or an
    output value of that name, or whose name with a suffix onnxruntime adds (its fused
    NCHWc convolution ``y_nchwc`` after the chain's output ``y``) it is; the longest
    such name wins. None for nodes onnxruntime made itself (ReorderOutput)."""
    best, found = -1, None
    for group, keys in names.items():
        for key in keys:
            if key and (name == key or name.startswith(key + "_")) and len(key) > best:
                best, found = len(key), group
    return found


def with_onnxruntime(rows: Sequence[ProfileRow], names: Mapping[str, Sequence[str]],
                     ort_seconds: Mapping[str, float]) -> tuple[list[ProfileRow], float]:
    """The rows with onnxruntime's time of their nodes (``names``: group -> its ONNX
    node names and output value names; ort_group), and onnxruntime's time of the nodes
    under no group."""
    per_group: dict[str, float] = {}
    other = 0.0
    for name, seconds in ort_seconds.items():
        group = ort_group(name, names)
        if group is None:
            other += seconds
        else:
            per_group[group] = per_group.get(group, 0.0) + seconds
    out = [ProfileRow(r.group, r.nodes, r.seconds, r.flops, r.peak_gflops,
                      per_group.get(r.group)) for r in rows]
    return out, other


def format_profile(rows: Sequence[ProfileRow], threads: int, peak: float,
                   ort_other: float | None = None) -> str:
    """The profile as a table, slowest group first, with totals."""
    lines = [f"per-group profile, {threads} thread(s); measured FP32 peak {peak:.1f} GFLOP/s",
             f"{'group':<8} {'ms':>8} {'GFLOP':>8} {'GFLOP/s':>8} {'% peak':>7} "
             f"{'ort ms':>8} {'ort/pc':>7}  nodes"]
    for r in sorted(rows, key=lambda r: -r.seconds):
        ort = (f"{r.onnxruntime_seconds * 1e3:8.3f} {r.onnxruntime_seconds / r.seconds:7.2f}"
               if r.onnxruntime_seconds is not None and r.seconds > 0 else f"{'-':>8} {'-':>7}")
        lines.append(f"{r.group:<8} {r.seconds * 1e3:8.3f} {r.flops / 1e9:8.3f} "
                     f"{r.gflops:8.1f} {100 * r.share_of_peak:6.1f}% {ort}  {r.nodes[:70]}")
    total = sum(r.seconds for r in rows)
    flops = sum(r.flops for r in rows)
    lines.append(f"{'total':<8} {total * 1e3:8.3f} {flops / 1e9:8.3f} "
                 f"{flops / total / 1e9 if total else 0:8.1f}")
    known = [r.onnxruntime_seconds for r in rows if r.onnxruntime_seconds is not None]
    if known:
        lines.append(f"onnxruntime: {sum(known) * 1e3:.3f} ms in the groups' nodes"
                     + (f", {ort_other * 1e3:.3f} ms in nodes of its own (layout reorders)"
                        if ort_other else ""))
    return "\n".join(lines)


def beside_onnxruntime(session: object, feed: Mapping[str, np.ndarray],
                       rows: Sequence[ProfileRow], seconds: Mapping[str, float]):
    """``with_onnxruntime`` for the groups of ``session``'s plan at ``feed``'s shapes:
    each group is known by its nodes' names and output values."""
    compiled = session.compiled({k: v.shape for k, v in feed.items()})  # type: ignore[attr-defined]
    names = {step.name: [x for n in step.nodes for x in (n.name, *n.outputs)]
             for step in compiled.plan.groups}
    return with_onnxruntime(rows, names, seconds)


def profile_report(session: object, model: bytes, feed: Mapping[str, np.ndarray],
                   threads: int, repeat: int = 10, compare: bool = True) -> str:
    """The table of ``format_profile`` for ``session`` on ``feed`` at ``threads`` (the
    threads its runs use), beside onnxruntime's profile of ``model`` where onnxruntime
    is installed and ``compare``."""
    from polycomp.peak import peak_gflops  # noqa: PLC0415 - builds a micro-benchmark

    peak = peak_gflops(threads)
    rows = group_rows(session, feed, repeat, peak)
    other, note = None, ""
    if compare:
        try:
            seconds = onnxruntime_node_seconds(model, feed, threads, repeat)
        except ImportError:
            seconds, note = None, "onnxruntime is not installed: no comparison"
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own refusals
            seconds = None
            note = f"onnxruntime cannot run the model ({str(exc).splitlines()[0][:200]})"
        if seconds is not None:
            rows, other = beside_onnxruntime(session, feed, rows, seconds)
    table = format_profile(rows, threads, peak, other)
    return table + (f"\n{note}" if note else "")
