"""How long polycomp takes to schedule each PolyBench kernel (issue: under 5 s each).

    python -m benchmarks.schedule_times [--size LARGE] [--schedulers pluto,isl] [--kernels a,b]

For every kernel: the C file through the loop frontend, lowered at the given size (or
``--size parametric``), then timed separately: the dependences
(``compute_dependences``), the scheduler with every pass (tiling, parallel marks,
intra-tile: ``schedule_program``), and the legality check (``check_schedule``). Code
generation and the C compiler are not included. Prints a markdown table and the slowest
kernel per scheduler, and writes ``DIR/schedule_times_<size>.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from benchmarks.polybench import defs


def time_kernel(kdef: defs.KernelDef, size: str, scheduler: str) -> dict[str, float]:
    from polycomp.driver import schedule_program  # noqa: PLC0415
    from polycomp.frontend.loops import parse_c  # noqa: PLC0415
    from polycomp.options import Options  # noqa: PLC0415
    from polycomp.scheduler import compute_dependences  # noqa: PLC0415
    from polycomp.scheduler.legality import check_schedule  # noqa: PLC0415

    definition = parse_c(kdef.c_source(), file=str(kdef.c_path)).get(kdef.function)
    program = definition.lower(None if size == "PARAMETRIC" else kdef.sizes[size])
    times = {}
    start = time.perf_counter()
    deps = compute_dependences(program)
    times["deps"] = time.perf_counter() - start
    start = time.perf_counter()
    schedule = schedule_program(program, deps, Options.create(scheduler=scheduler))
    times["schedule"] = time.perf_counter() - start
    start = time.perf_counter()
    check_schedule(schedule, deps)
    times["check"] = time.perf_counter() - start
    times["total"] = times["deps"] + times["schedule"] + times["check"]
    return times


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.schedule_times",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="LARGE", type=str.upper,
                   choices=[*defs.SIZE_NAMES, "PARAMETRIC"])
    p.add_argument("--schedulers", default="pluto", help="comma-separated (default: pluto)")
    p.add_argument("--kernels", default="", help="comma-separated names (default: all 30)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = p.parse_args(argv)
    names = [k for k in args.kernels.split(",") if k] or list(defs.KERNEL_NAMES)
    schedulers = [s for s in args.schedulers.split(",") if s]
    rows = []
    slowest: dict[str, tuple[float, str]] = {}
    for n, name in enumerate(names, 1):
        kdef = defs.get_kernel(name)
        cells = []
        for scheduler in schedulers:
            t = time_kernel(kdef, args.size, scheduler)
            cells.append(f"{t['deps']:.2f} / {t['schedule']:.2f} / {t['check']:.2f} "
                         f"= **{t['total']:.2f}**")
            if t["total"] > slowest.get(scheduler, (-1.0, ""))[0]:
                slowest[scheduler] = (t["total"], name)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
        print(f"[{n}/{len(names)}] {rows[-1]}", file=sys.stderr, flush=True)
    lines = [f"## Scheduling time per PolyBench kernel ({args.size}), seconds",
             "", "deps / scheduler + passes / legality check = **total**", "",
             "| kernel | " + " | ".join(schedulers) + " |",
             "|---|" + "---|" * len(schedulers), *rows, ""]
    lines += [f"slowest under {s}: {name} ({t:.2f} s)" for s, (t, name) in slowest.items()]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"schedule_times_{args.size}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
