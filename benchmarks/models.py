"""Whole ONNX models: polycomp.onnx against onnxruntime, side by side in one process.

    python -m benchmarks.models [--threads 1,2] [--models squeezenet,encoder_layer]
        [--budget 3] [--out benchmarks/results] [--ppocr-dir DIR]

Models: every light model of the installed onnx wheel (random weights in place of their
ConstantOfShape 0.02 ones: polycomp.onnx.zoo.with_random_weights), a BERT-base encoder
layer and a MobileNetV2 block built with onnx.helper (polycomp/onnx/zoo.py), and with
--ppocr-dir the three PaddleOCR models of rapidocr-onnxruntime (real weights). Per model:
the cold compile (an empty build cache and no kernel in memory), the warm compile (a new
session over the same model: the on-disk build cache is full), each timed with the
session's first run (where a model with symbolic dimensions compiles), the number of ONNX nodes,
fusion groups and distinct compiled kernels, the bytes of all intermediate values, and
the latency of polycomp.onnx and of onnxruntime (``intra_op_num_threads`` = the thread
count, all graph optimisations) at each thread count. polycomp's outputs are checked
against onnxruntime's before anything is timed. Timing as in benchmarks/operators:
interleaved rounds, each turn waits until the previous variant's threads stopped
spinning, makes one untimed call, then times BATCH calls; the minimum counts.

Writes ``models.md``, ``models.csv`` and ``models.png`` to --out.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .operators.__main__ import _progress, geomean, ort_session, ratio_chart, time_rounds


@dataclass
class ModelRow:
    name: str
    nodes: int = 0
    groups: int = 0
    kernels: int = 0
    cold_s: float = math.nan
    warm_s: float = math.nan
    intermediate_bytes: int = 0
    arena_bytes: int = 0  # the memory plan's peak (one arena for every intermediate)
    check: str = "-"
    seconds: dict[str, float] = field(default_factory=dict)

    def ratio(self, threads: int) -> float | None:
        ort, pc = self.seconds.get(f"ort/{threads}t"), self.seconds.get(f"polycomp/{threads}t")
        return ort / pc if ort and pc else None


# PaddleOCR's three models as rapidocr-onnxruntime ships them (real weights, in Constant
# nodes), at the input sizes RapidOCR feeds them: file stem -> (name, input shape)
PPOCR = {"ch_PP-OCRv4_det_infer": ("ppocr_det", (1, 3, 320, 320)),
         "ch_PP-OCRv4_rec_infer": ("ppocr_rec", (1, 3, 48, 320)),
         "ch_ppocr_mobile_v2.0_cls_infer": ("ppocr_cls", (1, 3, 48, 192))}


def models(selection: str, ppocr_dir: Path | None = None) -> dict[str, object]:
    """name -> a callable building the ModelProto, or (callable, input shape)."""
    import onnx

    from polycomp.onnx import zoo
    out: dict[str, object] = {}
    for name, path in zoo.light_model_paths().items():
        out[name] = lambda p=path: zoo.with_random_weights(onnx.load(p))
    out["encoder_layer"] = zoo.encoder_layer
    out["mobilenet_block"] = zoo.mobilenet_block
    if ppocr_dir is not None:
        for stem, (name, shape) in PPOCR.items():
            path = ppocr_dir / f"{stem}.onnx"
            if path.exists():
                out[name] = (lambda p=path: onnx.load(str(p)), shape)
    if selection:
        wanted = [s.strip() for s in selection.split(",") if s.strip()]
        unknown = [w for w in wanted if w not in out]
        if unknown:
            raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(out)}")
        out = {k: out[k] for k in wanted}
    return out


def close_enough(got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    return None if err <= 1e-4 * (scale or 1.0) + 1e-6 else \
        f"max abs error {err:.3g} (scale {scale:.3g})"


def _session_and_first_run(model, feed):
    """A session and its first run, timed together: a model with symbolic dimensions
    compiles on its first run with their sizes, a static one when it is created."""
    import polycomp.onnx
    t0 = time.perf_counter()
    sess = polycomp.onnx.InferenceSession(model.SerializeToString())
    outputs = sess.run(None, feed)
    return sess, outputs, time.perf_counter() - t0


def run_model(name: str, build, threads: list[int], budget: float, min_rounds: int,
              cache_root: str) -> ModelRow:
    import polycomp
    import polycomp.onnx
    from polycomp.onnx import session as S
    from polycomp.onnx import zoo

    build, shape = build if isinstance(build, tuple) else (build, None)

    row = ModelRow(name)
    model = build()
    row.nodes = len(model.graph.node)
    feed = zoo.random_inputs(model)
    if shape is not None:  # one image input of the size its application feeds
        feed = {k: np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                for k in feed}
    sessions = {t: ort_session(model, t) for t in threads}
    wants = sessions[threads[0]].run(None, feed)
    cache = os.path.join(cache_root, name)
    try:
        os.environ["POLYCOMP_CACHE_DIR"] = cache  # cold: an empty build cache,
        S._KERNELS.clear()                        # no kernel in memory
        sess, gots, row.cold_s = _session_and_first_run(model, feed)
        S._KERNELS.clear()  # warm: the same on-disk cache, a new session
        sess, gots, row.warm_s = _session_and_first_run(model, feed)
    except polycomp.PolycompError as exc:
        row.check = f"ERROR: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        return row
    compiled = sess.compiled({k: v.shape for k, v in feed.items()})
    row.groups = len(compiled.plan.groups)
    row.kernels = len({id(k) for k in compiled.kernels.values()})
    graph = compiled.graph
    row.intermediate_bytes = sum(
        int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize
        for n in graph.nodes for o in n.outputs if o and (v := graph.values[o]).const is None)
    row.arena_bytes = compiled.memory.arena_bytes
    problems = [p for g, w in zip(gots, wants) if (p := close_enough(g, w))]
    row.check = "ok" if not problems else "WRONG: " + "; ".join(problems)
    if problems:
        return row
    variants = {}
    for t in threads:
        variants[f"ort/{t}t"] = (lambda s=sessions[t]: s.run(None, feed), None)
        variants[f"polycomp/{t}t"] = (lambda: sess.run(None, feed), t)
    row.seconds = time_rounds(variants, budget, min_rounds)
    return row


def fmt_ms(s: float | None) -> str:
    return "-" if s is None or not math.isfinite(s) else f"{s * 1e3:.3g} ms"


def markdown(rows: list[ModelRow], threads: list[int]) -> str:
    import onnxruntime
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = ["## Whole ONNX models: polycomp.onnx against onnxruntime", "",
             f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S')}; {os.cpu_count()} logical CPUs; "
             f"onnxruntime {onnxruntime.__version__}; load average at start: {load}",
             "- latency: minimum over interleaved rounds; ratio = onnxruntime / polycomp "
             "(> 1: polycomp faster); cold compile: empty caches; warm: a new session, "
             "build cache full", ""]
    cols = ["model", "nodes", "groups", "kernels", "cold compile", "warm compile",
            "intermediates", "arena"]
    for t in threads:
        cols += [f"ORT {t}t", f"polycomp {t}t", f"ratio {t}t"]
    cols.append("check")
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [r.name, str(r.nodes), str(r.groups), str(r.kernels),
                 "-" if math.isnan(r.cold_s) else f"{r.cold_s:.1f} s",
                 "-" if math.isnan(r.warm_s) else f"{r.warm_s:.2f} s",
                 f"{r.intermediate_bytes / 2**20:.1f} MiB", f"{r.arena_bytes / 2**20:.1f} MiB"]
        for t in threads:
            ratio = r.ratio(t)
            cells += [fmt_ms(r.seconds.get(f"ort/{t}t")), fmt_ms(r.seconds.get(f"polycomp/{t}t")),
                      "-" if ratio is None else f"{ratio:.2f}x"]
        cells.append(r.check.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    from polycomp.onnx import zoo
    light = set(zoo.light_model_paths())
    for label, chosen in (("**geomean**", rows),
                          ("**geomean, light models**", [r for r in rows if r.name in light])):
        if not chosen or (chosen is not rows and len(chosen) == len(rows)):
            continue
        cells = [label, "", "", "", "", "", "", ""]
        for t in threads:
            g = geomean([r.ratio(t) for r in chosen])
            cells += ["", "", "-" if g is None else f"**{g:.2f}x**"]
        cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(rows: list[ModelRow], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "nodes", "groups", "kernels", "cold_s", "warm_s",
                    "intermediate_bytes", "arena_bytes", "variant", "seconds", "check"])
        for r in rows:
            for variant, s in (r.seconds.items() or [("", math.nan)]):
                w.writerow([r.name, r.nodes, r.groups, r.kernels, f"{r.cold_s:.3g}",
                            f"{r.warm_s:.3g}", r.intermediate_bytes, r.arena_bytes, variant,
                            f"{s:.6g}", r.check])


def plot(rows: list[ModelRow], threads: list[int], path: Path) -> bool:
    return ratio_chart(path, [r.name for r in rows], {t: [r.ratio(t) for r in rows]
                                                      for t in threads},
                       "Whole models: polycomp.onnx against onnxruntime (lines: 1, 0.5)",
                       "onnxruntime latency / polycomp latency (log)", (1.0, 0.5))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default="", help="comma-separated model names")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of rounds per model")
    parser.add_argument("--min-rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--ppocr-dir", type=Path, default=None,
                        help="the folder of rapidocr-onnxruntime's models (pip download "
                             "rapidocr-onnxruntime, unzip; rapidocr_onnxruntime/models): adds "
                             "PaddleOCR's detection, recognition and classification models")
    args = parser.parse_args(argv)
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        print(f"needs onnx and onnxruntime (pip install -e '.[bench]'): {exc}", file=sys.stderr)
        return 1
    threads = [int(t) for t in args.threads.split(",")]
    chosen = models(args.models, args.ppocr_dir)
    rows: list[ModelRow] = []
    bar = _progress(len(chosen))
    with tempfile.TemporaryDirectory(prefix="polycomp-models-") as cache_root:
        for name, build in chosen.items():
            bar.set_description(name)
            row = run_model(name, build, threads, args.budget, args.min_rounds, cache_root)
            rows.append(row)
            bar.update(1)
            ratios = ", ".join(f"{t}t {row.ratio(t):.2f}x" for t in threads if row.ratio(t))
            print(f"  {name}: {row.check}; cold {row.cold_s:.1f} s, warm {row.warm_s:.2f} s; "
                  f"ORT/polycomp {ratios or '-'}", file=sys.stderr, flush=True)
    bar.close()
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, threads)
    (args.out / "models.md").write_text(text)
    write_csv(rows, args.out / "models.csv")
    plotted = plot(rows, threads, args.out / "models.png")
    print(text)
    print(f"wrote {args.out / 'models.md'}, models.csv" + (", models.png" if plotted else ""))
    return 0 if all(r.check == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
