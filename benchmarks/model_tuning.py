"""Whole-model tuning: a model's latency before and after ``polycomp tune`` with a budget.

    python -m benchmarks.model_tuning [--model resnet50] [--budget 200] [--threads 2]
        [--time 5] [--out benchmarks/results]

The model comes from benchmarks/models (the onnx wheel's light models with random
weights, or the models built there); the tuning is polycomp.tuning.model.tune_model
(what ``polycomp tune model.onnx --budget N`` runs), its records in a fresh sqlite file
in --out (``model_tuning-<model>.sqlite``: the user's own records are neither read nor
written). A progress bar follows the measurements.

Then three variants run side by side in one process, timed as benchmarks/operators and
benchmarks/models time them (interleaved rounds, each turn waiting until the previous
variant's threads stopped spinning, one untimed call, then timed calls; the minimum
counts): the untuned model (``tuning="none"``), the tuned one (a new session reading the
records) and onnxruntime at the same thread count. Both polycomp models' outputs are
checked against onnxruntime's first.

Writes ``model_tuning.md`` (the kernels tuned: share of the model's time, trials,
default and best seconds; the latencies), ``model_tuning.csv`` and ``model_tuning.png``
(the tuner's estimate of the model's latency after each measurement, with the measured
before and after) to --out.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

from .models import close_enough, models
from .operators.__main__ import cpu_and_load, ort_session, time_rounds


def _bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="measurements", unit="trial", file=sys.stderr)


def run(args: argparse.Namespace) -> tuple[object, dict[str, float], dict]:
    import onnx

    import polycomp
    import polycomp.onnx
    from polycomp.onnx import zoo
    from polycomp.tuning.model import tune_model

    build = models(args.model)[args.model]
    build = build[0] if isinstance(build, tuple) else build
    model = build()
    data = model.SerializeToString()
    feed = zoo.random_inputs(model)
    records = args.out / f"model_tuning-{args.model}.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{records}{suffix}").unlink(missing_ok=True)
    bar = _bar(args.budget)

    def progress(kernel: str, outcome) -> None:  # noqa: ANN001 - a measure.Outcome
        if bar is not None:
            bar.set_postfix_str(f"{kernel} {outcome.status}", refresh=False)
            bar.update(1)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    polycomp.set_num_threads(args.threads)
    start = time.perf_counter()
    result = tune_model(data, {k: v.shape for k, v in feed.items()}, args.budget,
                        records=records, progress=progress, log=log)
    if bar is not None:
        bar.close()
    tuning_s = time.perf_counter() - start
    before = polycomp.onnx.InferenceSession(data, records=str(records), tuning="none")
    after = polycomp.onnx.InferenceSession(data, records=str(records))
    ort = ort_session(onnx.load_from_string(data), args.threads)
    want = ort.run(None, feed)
    checks = {}
    for name, session in (("untuned", before), ("tuned", after)):
        problems = [p for g, w in zip(session.run(None, feed), want) if (p := close_enough(g, w))]
        checks[name] = "ok" if not problems else "WRONG: " + "; ".join(problems)
    seconds = {}
    if all(c == "ok" for c in checks.values()):
        log("timing the untuned model, the tuned model and onnxruntime side by side")
        seconds = time_rounds({
            "untuned": (lambda: before.run(None, feed), args.threads),
            "tuned": (lambda: after.run(None, feed), args.threads),
            "onnxruntime": (lambda: ort.run(None, feed), None)}, args.time, 5)
    return result, seconds, {"checks": checks, "tuning_s": tuning_s, "records": records}


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.4g} ms"


def markdown(args: argparse.Namespace, result, seconds: dict[str, float], extra: dict) -> str:
    cpu, load = cpu_and_load()
    lines = [f"## Whole-model tuning: {args.model}, budget {args.budget}", "",
             f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S')}; CPU: {cpu} ({os.cpu_count()} "
             f"logical CPUs); {args.threads} threads; load average at start: {load}",
             f"- tuning: {result.used} of {result.budget} measurements over "
             f"{len(result.tasks)} kernels in {extra['tuning_s']:.0f} s (records: "
             f"{Path(extra['records']).name}); outputs checked against onnxruntime: "
             + ", ".join(f"{k} {v}" for k, v in extra["checks"].items()),
             f"- the tuner's own before/after (interleaved runs, minimum): "
             f"{_ms(result.before)} -> {_ms(result.after)} ({result.speedup:.3f}x)", ""]
    if seconds:
        lines += ["| variant | latency | vs untuned | onnxruntime / variant |",
                  "|---|---|---|---|"]
        for name in ("untuned", "tuned", "onnxruntime"):
            s = seconds[name]
            lines.append(f"| {name} | {_ms(s)} | {seconds['untuned'] / s:.3f}x | "
                         f"{seconds['onnxruntime'] / s:.3f} |")
        lines.append("")
    lines += ["| kernel | runs | share of the model | trials | default | best | speedup | "
              "nodes (first group) |", "|---|---|---|---|---|---|---|---|"]
    for t in result.tasks:
        share = t.seconds / result.profiled if result.profiled else 0.0
        nodes = t.nodes if len(t.nodes) <= 70 else t.nodes[:67] + "..."
        lines.append(f"| {t.kernel} | {t.runs} | {share:.1%} | {t.trials} | "
                     f"{_ms(t.default_time)} | {_ms(t.best_time)} | "
                     f"{f'{t.speedup:.3f}x' if t.speedup else '-'} | {nodes} |")
    lines += ["", "Kernel default and best: the tuner's side-by-side re-measurement of each "
              "kernel alone (api.confirm_result); a kernel's time inside the model differs "
              "(its neighbours' data in cache, the model's threads)."]
    return "\n".join(lines) + "\n"


def write_csv(result, path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["kernel", "runs", "profiled_s", "trials", "default_s", "best_s",
                    "best_config"])
        for t in result.tasks:
            w.writerow([t.kernel, t.runs, f"{t.seconds:.6g}", t.trials,
                        "" if t.default_time is None else f"{t.default_time:.6g}",
                        f"{t.best_time:.6g}", t.best_config])


def plot(args: argparse.Namespace, result, seconds: dict[str, float], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = range(1, len(result.curve) + 1)
    ax.step(list(xs), [c * 1e3 for c in result.curve], where="post",
            label="tuner's estimate (profile, each kernel scaled by best / default)")
    ax.axhline(result.profiled * 1e3, color="gray", linestyle=":", label="profiled, untuned")
    for name, style in (("untuned", "--"), ("tuned", "-."), ("onnxruntime", ":")):
        if name in seconds:
            ax.axhline(seconds[name] * 1e3, linestyle=style, color="black" if name != "tuned"
                       else "green", label=f"{name}, measured: {seconds[name] * 1e3:.3g} ms")
    ax.set_xlabel("measurements")
    ax.set_ylabel("model latency (ms)")
    ax.set_title(f"tuning {args.model} with a budget of {args.budget}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_tuning",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", help="a model of benchmarks/models")
    parser.add_argument("--budget", type=int, default=200, help="measurements in all")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--time", type=float, default=5.0,
                        help="seconds of interleaved rounds for the side-by-side timing")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    if args.budget < 1 or args.threads < 1:
        parser.error("--budget and --threads must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    result, seconds, extra = run(args)
    text = markdown(args, result, seconds, extra)
    (args.out / "model_tuning.md").write_text(text)
    write_csv(result, args.out / "model_tuning.csv")
    plotted = plot(args, result, seconds, args.out / "model_tuning.png")
    print(text)
    print(f"wrote {args.out / 'model_tuning.md'}, model_tuning.csv"
          + (", model_tuning.png" if plotted else ""))
    return 0 if all(c == "ok" for c in extra["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
