"""Results of a benchmark run: markdown table, geometric means, CSV, PNG.

A run produces a list of :class:`Result` (one per kernel and variant).  The
functions here only look at those records, so they can be tested on made-up
numbers:

* :func:`speedup` -- baseline seconds / variant seconds (None unless both ok)
* :func:`geomean` -- geometric mean of positive numbers (None for none)
* :func:`geomeans` -- per variant: (geomean of speedups, count), optionally
  only over kernels whose baseline took at least ``min_base_s`` seconds
* :func:`markdown_table`, :func:`write_csv`, :func:`plot_speedups`
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

OK = "ok"
WRONG = "WRONG"
ERROR = "ERROR"
SKIPPED = "skipped"


@dataclass
class Result:
    kernel: str
    variant: str
    status: str  # OK, WRONG, ERROR or SKIPPED
    seconds: float | None = None  # median of the timed runs
    times: list[float] = field(default_factory=list)
    message: str = ""
    build_s: float | None = None
    size: str = ""
    threads: int | None = None


def geomean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values]
    if not vals:
        return None
    if any(not (v > 0.0) or math.isinf(v) for v in vals):
        raise ValueError("geomean needs finite positive values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _index(results: Sequence[Result]) -> dict[tuple[str, str], Result]:
    return {(r.kernel, r.variant): r for r in results}


def speedup(base: Result | None, res: Result | None) -> float | None:
    if base is None or res is None:
        return None
    if base.status != OK or res.status != OK or not base.seconds or not res.seconds:
        return None
    return base.seconds / res.seconds


def ordered_unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for it in items:
        seen.setdefault(it, None)
    return list(seen)


def geomeans(results: Sequence[Result], baseline: str = "gcc",
             min_base_s: float = 0.0) -> dict[str, tuple[float | None, int]]:
    """variant -> (geometric mean of its speedups over ``baseline``, number of
    kernels counted).  Kernels where the variant is not ok are left out (the
    count tells how many remain); so are kernels whose baseline median is
    below ``min_base_s`` seconds."""
    idx = _index(results)
    kernels = ordered_unique(r.kernel for r in results)
    variants = ordered_unique(r.variant for r in results)
    out: dict[str, tuple[float | None, int]] = {}
    for v in variants:
        sps = []
        for k in kernels:
            base = idx.get((k, baseline))
            if base is None or base.status != OK or base.seconds is None:
                continue
            if base.seconds < min_base_s:
                continue
            sp = speedup(base, idx.get((k, v)))
            if sp is not None:
                sps.append(sp)
        out[v] = (geomean(sps), len(sps))
    return out


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 100:
        return f"{s:.0f}"
    if s >= 1:
        return f"{s:.2f}"
    return f"{s:.3g}"


def cell(base: Result | None, res: Result | None) -> str:
    if res is None:
        return "-"
    if res.status == WRONG:
        return "WRONG"
    if res.status == ERROR:
        msg = " ".join(res.message.split())
        if len(msg) > 60:
            msg = msg[:57] + "..."
        return f"ERROR: {msg}".replace("|", "/")
    if res.status == SKIPPED:
        return "skipped"
    sp = speedup(base, res)
    if sp is None:
        return f"{fmt_seconds(res.seconds)} s"
    return f"{fmt_seconds(res.seconds)} s ({sp:.2f}x)"


def markdown_table(results: Sequence[Result], baseline: str = "gcc",
                   min_base_s: float = 0.05, title: str | None = None,
                   header_lines: Sequence[str] = ()) -> str:
    """One row per kernel, one column per variant: "median s (speedup x)".
    Two extra rows give the geometric means of the speedups."""
    idx = _index(results)
    kernels = ordered_unique(r.kernel for r in results)
    variants = ordered_unique(r.variant for r in results)
    if baseline in variants:
        variants.remove(baseline)
        variants.insert(0, baseline)
    lines = []
    if title:
        lines += [f"## {title}", ""]
    lines += list(header_lines)
    if header_lines:
        lines.append("")
    lines.append("| kernel | " + " | ".join(variants) + " |")
    lines.append("|---|" + "---|" * len(variants))
    for k in kernels:
        base = idx.get((k, baseline))
        lines.append(f"| {k} | " + " | ".join(cell(base, idx.get((k, v))) for v in variants) + " |")

    def gm_row(label: str, gms: dict[str, tuple[float | None, int]]) -> str:
        cells = []
        for v in variants:
            g, n = gms.get(v, (None, 0))
            cells.append("-" if g is None else f"{g:.2f}x (n={n})")
        return f"| {label} | " + " | ".join(cells) + " |"

    lines.append(gm_row("**geomean (all)**", geomeans(results, baseline)))
    lines.append(gm_row(f"**geomean (base >= {min_base_s:g} s)**",
                        geomeans(results, baseline, min_base_s)))
    problems: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status in (WRONG, ERROR):
            key = (r.status, " ".join(r.message.split())[:500])
            problems.setdefault(key, []).append(f"{r.kernel} / {r.variant}")
    if problems:
        lines += ["", "Problems:", ""]
        for (status, msg), where in problems.items():
            shown = ", ".join(where[:6]) + (f" and {len(where) - 6} more" if len(where) > 6 else "")
            lines.append(f"- {status}: {msg} -- {shown}")
    return "\n".join(lines) + "\n"


CSV_FIELDS = ("kernel", "size", "variant", "threads", "status", "seconds", "speedup",
              "runs", "build_s", "message")


def write_csv(results: Sequence[Result], path: Path | str, baseline: str = "gcc") -> None:
    idx = _index(results)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_FIELDS)
        for r in results:
            sp = speedup(idx.get((r.kernel, baseline)), r)
            w.writerow([
                r.kernel, r.size, r.variant, "" if r.threads is None else r.threads,
                r.status, "" if r.seconds is None else f"{r.seconds:.6g}",
                "" if sp is None else f"{sp:.4g}", len(r.times),
                "" if r.build_s is None else f"{r.build_s:.3g}",
                " ".join(r.message.split()),
            ])


def plot_speedups(results: Sequence[Result], path: Path | str, baseline: str = "gcc",
                  title: str = "") -> bool:
    """Grouped bar chart (log scale) of every variant's speedup over the
    baseline, per kernel.  Returns False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    idx = _index(results)
    kernels = ordered_unique(r.kernel for r in results)
    variants = [v for v in ordered_unique(r.variant for r in results) if v != baseline]
    fig_w = max(8.0, min(20.0, 0.12 * len(kernels) * (len(variants) + 1) + 3))
    fig, ax = plt.subplots(figsize=(fig_w, 6.0))
    nv = max(1, len(variants))
    width = 0.8 / nv
    gms = geomeans(results, baseline)
    for vi, v in enumerate(variants):
        xs, ys = [], []
        for ki, k in enumerate(kernels):
            sp = speedup(idx.get((k, baseline)), idx.get((k, v)))
            if sp is not None:
                xs.append(ki - 0.4 + width * (vi + 0.5))
                ys.append(sp)
        g, n = gms.get(v, (None, 0))
        label = v if g is None else f"{v} (geomean {g:.2f}x, n={n})"
        ax.bar(xs, ys, width=width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(kernels)))
    ax.set_xticklabels(kernels, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(f"speedup over {baseline} (log scale)")
    if title:
        ax.set_title(title)
    if variants:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
