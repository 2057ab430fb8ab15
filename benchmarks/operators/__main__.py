"""Deep-learning operators: polycomp against onnxruntime (and numpy), side by side.

    python -m benchmarks.operators [--threads 1,2] [--ops conv3x3,softmax]
        [--scheduler pluto] [--budget 2] [--out benchmarks/results]

Each operator of benchmarks/operators/defs.py (ResNet-50, MobileNetV2 and BERT-base
shapes, batch 1, float32) runs as polycomp's TC kernel (default options unless
--scheduler), as a one-operator ONNX model in onnxruntime (``intra_op_num_threads`` =
the thread count, sequential execution, all graph optimisations) and, where numpy has
the operator, as numpy. polycomp's output is checked against onnxruntime's (and numpy's)
before any time counts. Timing: rounds that run every variant of the operator in turn,
until --budget seconds of rounds have passed (at least --min-rounds). A variant's turn
first waits until no other thread of this process is running (onnxruntime's idle
workers spin for 10 to 30 ms after a run, libgomp's for microseconds: a variant timed
beside the previous one's spinning worker gets half a core for its second thread),
then makes one untimed call (its own workers awake, as in a serving loop) and times
BATCH calls back to back; each variant's time is its minimum over all timed calls. The
ratio column is onnxruntime's time over polycomp's (above 1: polycomp is faster).

Writes ``operators.md``, ``operators.csv`` and ``operators.png`` to --out.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import defs


@dataclass
class Row:
    op: defs.Operator
    compile_s: float = math.nan
    check: str = "-"
    seconds: dict[str, float] = field(default_factory=dict)  # variant -> min seconds

    def ratio(self, threads: int) -> float | None:
        ort, pc = self.seconds.get(f"ort/{threads}t"), self.seconds.get(f"polycomp/{threads}t")
        return ort / pc if ort and pc else None


def _progress(total: int):
    try:
        from tqdm import tqdm
        return tqdm(total=total, unit="op", file=sys.stderr)
    except ImportError:
        class Plain:
            n = 0

            def set_description(self, text):
                print(f"[{self.n + 1}/{total}] {text}", file=sys.stderr, flush=True)

            def update(self, k=1):
                self.n += k

            def close(self):
                pass
        return Plain()


SETTLE_MAX_S = 0.1  # the longest wait for the previous variant's threads to stop spinning
BATCH = 3  # timed calls per turn, after one untimed call


def settle() -> None:
    """Wait (at most SETTLE_MAX_S) until this thread is the only running one of the
    process: the previous variant's spinning workers have gone to sleep."""
    from polycomp.threads import own_running_tasks

    end = time.perf_counter() + SETTLE_MAX_S
    while own_running_tasks() > 1 and time.perf_counter() < end:
        time.sleep(0.001)


def ort_session(model, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def close_enough(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when float32 results agree to the accuracy of differently ordered sums."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    scale = float(np.max(np.abs(want))) or 1.0
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    return None if err <= 1e-4 * scale + 1e-6 else f"max abs error {err:.3g} (scale {scale:.3g})"


def run_operator(op: defs.Operator, threads: list[int], scheduler: str | None, budget: float,
                 min_rounds: int) -> Row:
    import polycomp

    row = Row(op)
    inputs = op.make_inputs()
    feeds = {name: x for (name, _), x in zip(op.inputs, inputs)}
    model = op.onnx()
    sessions = {t: ort_session(model, t) for t in threads}
    want = sessions[threads[0]].run(None, feeds)[0]
    options = {} if scheduler is None else {"scheduler": scheduler}
    t0 = time.perf_counter()
    try:
        kernel = polycomp.compile(op.tc, **options)
        got = kernel(*inputs)
    except polycomp.PolycompError as exc:
        row.check = f"ERROR: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        return row
    row.compile_s = time.perf_counter() - t0
    problems = [p for p in (close_enough(got, want),) if p]
    if op.numpy is not None:
        ref = op.numpy(*inputs)
        if (p := close_enough(ref, want)) is not None:
            problems.append(f"numpy against onnxruntime: {p}")
    row.check = "ok" if not problems else "WRONG: " + "; ".join(problems)
    if problems:
        return row

    variants: dict[str, object] = {}
    for t in threads:
        variants[f"ort/{t}t"] = (lambda s=sessions[t]: s.run(None, feeds), None)
        variants[f"polycomp/{t}t"] = (lambda: kernel(*inputs), t)
    if op.numpy is not None:
        variants["numpy"] = (lambda: op.numpy(*inputs), None)
    for name, (call, t) in variants.items():  # warm up
        if t is not None:
            polycomp.set_num_threads(t)
        call()
    row.seconds = time_rounds(variants, budget, min_rounds)
    return row


def time_rounds(variants: dict, budget: float, min_rounds: int) -> dict[str, float]:
    """Each variant's minimum seconds over interleaved rounds (module doc): name ->
    (call, polycomp thread count or None)."""
    import polycomp

    best = {name: math.inf for name in variants}
    start, rounds = time.perf_counter(), 0
    while rounds < min_rounds or time.perf_counter() - start < budget:
        for name, (call, t) in variants.items():
            if t is not None:
                polycomp.set_num_threads(t)
            settle()
            call()
            for _ in range(BATCH):
                s = time.perf_counter()
                call()
                best[name] = min(best[name], time.perf_counter() - s)
        rounds += 1
        if rounds >= 10000:
            break
    return best


def fmt_ms(s: float | None) -> str:
    return "-" if s is None or not math.isfinite(s) else f"{s * 1e3:.3g} ms"


def rate(op: defs.Operator, s: float | None) -> str:
    return "-" if not s else f"{op.work / s / 1e9:.3g}"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def cpu_and_load() -> tuple[str, str]:
    """The CPU model and the load averages now, for a results header."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return cpu, load


def header(threads: list[int], scheduler: str | None) -> list[str]:
    import onnxruntime
    cpu, load = cpu_and_load()
    return [
        "## Deep-learning operators: polycomp against onnxruntime",
        "",
        f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S')}; CPU: {cpu} ({os.cpu_count()} logical CPUs)",
        f"- threads: {', '.join(map(str, threads))}; polycomp scheduler: "
        f"{scheduler or 'default (pluto)'}; onnxruntime {onnxruntime.__version__}; "
        f"numpy {np.__version__} (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')})",
        f"- load average at start: {load}",
        "- time: minimum over interleaved rounds; ratio = onnxruntime time / polycomp time "
        "(> 1: polycomp faster); rate in the unit column",
        "",
    ]


def markdown(rows: list[Row], threads: list[int], scheduler: str | None) -> str:
    lines = header(threads, scheduler)
    cols = ["operator", "from", "unit"]
    for t in threads:
        cols += [f"ORT {t}t", f"polycomp {t}t", f"ratio {t}t", f"rate ORT/polycomp {t}t"]
    cols += ["numpy", "compile", "check"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in rows:
        cells = [r.op.name, r.op.model, r.op.unit]
        for t in threads:
            ort, pc = r.seconds.get(f"ort/{t}t"), r.seconds.get(f"polycomp/{t}t")
            ratio = r.ratio(t)
            cells += [fmt_ms(ort), fmt_ms(pc), "-" if ratio is None else f"{ratio:.2f}x",
                      f"{rate(r.op, ort)} / {rate(r.op, pc)}"]
        cells += [fmt_ms(r.seconds.get("numpy")),
                  "-" if math.isnan(r.compile_s) else f"{r.compile_s:.2f} s",
                  r.check.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["**geomean**", "", ""]
    for t in threads:
        g = geomean([r.ratio(t) for r in rows])
        worst = min((r.ratio(t) for r in rows if r.ratio(t)), default=None)
        cells += ["", "", "-" if g is None else f"**{g:.2f}x**",
                  "" if worst is None else f"lowest {worst:.2f}x"]
    cells += ["", "", ""]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(rows: list[Row], threads: list[int], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["operator", "model", "unit", "work", "variant", "seconds", "rate",
                    "ratio_ort_over_polycomp", "compile_s", "check"])
        for r in rows:
            for variant, s in r.seconds.items():
                t = int(variant.split("/")[1][:-1]) if "/" in variant else None
                ratio = r.ratio(t) if t and variant.startswith("polycomp") else None
                w.writerow([r.op.name, r.op.model, r.op.unit, r.op.work, variant, f"{s:.6g}",
                            rate(r.op, s), "" if ratio is None else f"{ratio:.4g}",
                            f"{r.compile_s:.3g}", r.check])
            if not r.seconds:
                w.writerow([r.op.name, r.op.model, r.op.unit, r.op.work, "", "", "", "",
                            f"{r.compile_s:.3g}", r.check])


def ratio_chart(path: Path, names: list[str], ratios: dict[int, list[float | None]],
                title: str, ylabel: str, levels: tuple[float, ...]) -> bool:
    """A bar chart (log scale) of onnxruntime / polycomp per row and thread count, with
    reference lines at ``levels``; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.8 / max(1, len(ratios))
    for i, (t, values) in enumerate(ratios.items()):
        xs = [k - 0.4 + width * (i + 0.5) for k, v in enumerate(values) if v]
        ys = [v for v in values if v]
        g = geomean(ys)
        ax.bar(xs, ys, width=width,
               label=f"{t} thread(s)" + ("" if g is None else f" (geomean {g:.2f}x)"))
    for level, style in zip(levels, ("-", "--", ":")):
        ax.axhline(level, color="black", linewidth=0.8, linestyle=style)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot(rows: list[Row], threads: list[int], path: Path) -> bool:
    return ratio_chart(path, [r.op.name for r in rows], {t: [r.ratio(t) for r in rows]
                                                          for t in threads},
                       "polycomp against onnxruntime per operator (lines: 1, 0.7, 0.4)",
                       "onnxruntime time / polycomp time (log)", (1.0, 0.7, 0.4))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.operators", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--ops", default="", help="comma-separated operator names")
    parser.add_argument("--scheduler", default=None)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of rounds per operator")
    parser.add_argument("--min-rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    try:
        import onnxruntime  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as exc:
        print(f"needs onnx and onnxruntime (pip install -e '.[bench]'): {exc}", file=sys.stderr)
        return 1
    threads = [int(t) for t in args.threads.split(",")]
    ops = defs.get(args.ops)
    rows: list[Row] = []
    bar = _progress(len(ops))
    for op in ops:
        bar.set_description(op.name)
        row = run_operator(op, threads, args.scheduler, args.budget, args.min_rounds)
        rows.append(row)
        bar.update(1)
        ratios = ", ".join(f"{t}t {row.ratio(t):.2f}x" for t in threads if row.ratio(t))
        print(f"  {op.name}: {row.check}; ORT/polycomp {ratios or '-'}", file=sys.stderr, flush=True)
    bar.close()
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, threads, args.scheduler)
    (args.out / "operators.md").write_text(text)
    write_csv(rows, threads, args.out / "operators.csv")
    plotted = plot(rows, threads, args.out / "operators.png")
    print(text)
    print(f"wrote {args.out / 'operators.md'}, operators.csv" + (", operators.png" if plotted else ""))
    return 0 if all(r.check == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
