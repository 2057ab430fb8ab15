"""One model's per-group profile, written down: a table and a bar chart of where its time
goes and how close each fused group comes to this machine's measured peak.

    python -m benchmarks.profile --model PATH_OR_NAME [--threads 1] [--repeat 10]
        [--out benchmarks/results]

--model: an .onnx file, or a name benchmarks/models.py knows (the onnx wheel's light
models, encoder_layer, mobilenet_block; random inputs from polycomp.onnx.zoo). The
model compiles into a polycomp.onnx.InferenceSession at --threads threads
(``intra_op_num_threads``); its outputs are checked against onnxruntime's once, before
anything is timed (a wrong model is not profiled). Then, with polycomp/onnx/profile.py:
each group's fastest time over --repeat runs, its work and its share of the peak
(polycomp/peak.py), beside onnxruntime's profiler's time for the same ONNX nodes.

Writes ``profile_<model>_<threads>t.md`` (the table of ``polycomp run --profile`` under
a header: date, CPU, threads, load average, measured peak) and
``profile_<model>_<threads>t.png`` (one bar per group, in run order: its share of the
peak, and its time beside onnxruntime's) to --out.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from polycomp.onnx.profile import (ProfileRow, beside_onnxruntime, format_profile,
                                   group_rows, onnxruntime_node_seconds)

from .models import close_enough, models
from .operators.__main__ import cpu_and_load, ort_session


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load(spec: str) -> tuple[str, object, dict[str, np.ndarray]]:
    """(name for the file names, ModelProto, random feed) of an .onnx path or a name of
    benchmarks/models.py."""
    import onnx  # noqa: PLC0415 - the bench extra

    from polycomp.onnx import zoo  # noqa: PLC0415

    path = Path(spec)
    if path.suffix == ".onnx" or path.exists():
        if not path.is_file():
            raise SystemExit(f"no model file {spec}")
        model, name, shape = onnx.load(str(path)), path.stem, None
    else:
        build = models(spec)[spec]  # an unknown name exits with the list of known ones
        build, shape = build if isinstance(build, tuple) else (build, None)
        model, name = build(), spec
    feed = zoo.random_inputs(model)
    if shape is not None:  # one image input of the size its application feeds
        feed = {k: np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                for k in feed}
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name), model, feed


def _label(row: ProfileRow) -> str:
    """The group and its operators: 'g3 Conv+Relu'."""
    ops = re.findall(r"\(([^()]*)\)", row.nodes)
    text = f"{row.group} {'+'.join(ops)}" if ops else row.group
    return text if len(text) <= 40 else text[:39] + "…"


def plot_profile(rows: Sequence[ProfileRow], path: Path | str, title: str):
    """A horizontal bar chart of ``rows`` in their order (run order), top to bottom: left,
    each group's share of the measured peak (%); right, its time in polycomp with
    onnxruntime's for the same nodes beneath it where known. Returns the matplotlib
    Figure (axes[0]: the share panel, axes[1]: the time panel)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    n = len(rows)
    ys = np.arange(n, dtype=float)
    # a Figure on its own Agg canvas: no pyplot, no global backend or figure list
    fig = Figure(figsize=(12, 1.6 + 0.32 * max(n, 1)))
    FigureCanvasAgg(fig)
    share, times = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1, 1.3]})

    percent = [100 * r.share_of_peak for r in rows]
    share.barh(ys, percent, height=0.7, color="tab:blue")
    for y, p, r in zip(ys, percent, rows):
        # max, min and compares count no work (profile.py): 0% there is not a slow kernel
        share.text(p, y, f" {p:.1f}%" if r.flops else " no FP arithmetic", va="center",
                   fontsize=7)
    share.set_xlabel("share of the measured FP32 peak (%)")
    share.set_xlim(0, max([*percent, 1.0]) * 1.18)
    share.set_yticks(ys)
    share.set_yticklabels([_label(r) for r in rows], fontsize=8)
    share.invert_yaxis()  # the first group to run on top

    known = [(y, r.onnxruntime_seconds) for y, r in zip(ys, rows)
             if r.onnxruntime_seconds is not None]
    longest = max([r.seconds for r in rows] + [s for _, s in known] + [0.0])
    unit, scale = ("ms", 1e3) if longest >= 1e-3 else ("µs", 1e6)
    height = 0.4 if known else 0.7
    offset = height / 2 if known else 0.0
    times.barh(ys - offset, [r.seconds * scale for r in rows], height=height,
               color="tab:blue", label="polycomp")
    if known:
        times.barh([y + offset for y, _ in known], [s * scale for _, s in known],
                   height=height, color="tab:orange", label="onnxruntime, the same nodes")
    times.set_xlabel(f"time per group ({unit}, fastest run)")
    # above the panel: inside it would cover the bars of a model with few groups
    times.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2,
                 frameon=False)
    times.tick_params(axis="y", left=False)

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def markdown(rows: Sequence[ProfileRow], model: str, threads: int, peak: float,
             facts: Mapping[str, str], ort_other: float | None = None) -> str:
    """The results file: a header of ``facts`` (date, CPU, load, ...) over the table of
    ``format_profile``."""
    lines = [f"## Per-group profile: {model}, {threads} thread(s)", ""]
    lines += [f"- {key}: {value}" for key, value in facts.items()]
    lines += ["", "```", format_profile(rows, threads, peak, ort_other), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="an .onnx path or a model name")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=10, help="runs per group; the fastest")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    try:
        import onnxruntime as ort  # noqa: PLC0415
    except ImportError as exc:
        _say(f"needs onnx and onnxruntime (pip install -e '.[bench]'): {exc}")
        return 1
    import polycomp  # noqa: PLC0415
    import polycomp.onnx  # noqa: PLC0415
    from polycomp.peak import peak_gflops  # noqa: PLC0415

    cpu, load_average = cpu_and_load()  # before this process adds its own load
    date = time.strftime("%Y-%m-%dT%H:%M:%S")
    name, model, feed = load(args.model)
    data = model.SerializeToString()

    _say(f"compiling {name} ({len(model.graph.node)} nodes) for {args.threads} thread(s)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads  # what the session's runs use
    start = time.perf_counter()
    try:
        session = polycomp.onnx.InferenceSession(data, options)
        got = session.run(None, feed)
    except polycomp.PolycompError as exc:
        _say(f"polycomp cannot run {name}: {type(exc).__name__}: {exc}")
        return 1
    compile_s = time.perf_counter() - start

    _say("checking the outputs against onnxruntime")
    try:
        want = ort_session(model, args.threads).run(None, feed)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own refusals
        check, want = f"not checked: onnxruntime cannot run the model " \
                      f"({str(exc).splitlines()[0][:200]})", None
    if want is not None:
        problems = [p for g, w in zip(got, want) if (p := close_enough(g, w))]
        if problems:
            _say(f"{name}: WRONG against onnxruntime: {'; '.join(problems)}; not profiled")
            return 1
        check = "ok (every output against onnxruntime's)"

    _say(f"measuring the FP32 peak at {args.threads} thread(s) (cached after the first time)")
    peak = peak_gflops(args.threads)
    _say(f"timing polycomp's groups ({args.repeat} runs each)")
    rows = group_rows(session, feed, args.repeat, peak)
    other = None
    if want is not None:
        _say(f"timing onnxruntime's nodes ({args.repeat} runs, its profiler)")
        seconds = onnxruntime_node_seconds(data, feed, args.threads, args.repeat)
        rows, other = beside_onnxruntime(session, feed, rows, seconds)

    facts = {"date": date, "CPU": cpu, "threads": str(args.threads),
             "load average at start": load_average,
             "measured FP32 peak": f"{peak:.1f} GFLOP/s at {args.threads} thread(s) "
                                   "(polycomp/peak.py)",
             "runs": f"{args.repeat} per group, the fastest counts; onnxruntime "
                     f"{ort.__version__}'s profiler for its nodes",
             "compile and first run": f"{compile_s:.2f} s",
             "check": check}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"profile_{name}_{args.threads}t"  # names may hold dots: no with_suffix
    text = markdown(rows, name, args.threads, peak, facts, other)
    Path(f"{stem}.md").write_text(text)
    plot_profile(rows, f"{stem}.png",
                 f"{name}: per-group profile, {args.threads} thread(s), "
                 f"peak {peak:.1f} GFLOP/s")
    print(text)
    _say(f"wrote {stem}.md and {stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
