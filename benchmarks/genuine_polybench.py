"""The genuine PolyBench/C 4.2.1 files through ``polycomp compile FILE.c``, as PPCG is tested.

For each kernel of ``utilities/benchmark_list`` in a PolyBench checkout: polycomp writes
``K.polycomp.c`` (the whole file, its ``#pragma scop`` region optimised); the original and
that file are built with PolyBench's own harness

    gcc -O3 -march=native -fopenmp -I utilities -I KDIR -DSMALL_DATASET -DPOLYBENCH_DUMP_ARRAYS
        utilities/polybench.c K.c -lm

and the arrays they dump are compared: bit for bit (the printed text), else the largest
absolute and relative difference of the printed numbers, and whether the two agree when
both are built with ``-ffp-contract=off`` (then the difference is only where gcc fused a
multiply and an add into an FMA, which depends on the code's shape). The polycomp file is also built
and checked without ``-fopenmp`` (pragmas ignored). With ``--time`` both are then built with
``-DPOLYBENCH_TIME`` and timed (minimum of ``--repeat`` interleaved rounds); run that on a quiet machine.

    python -m benchmarks.genuine_polybench /path/to/PolyBenchC-4.2.1 [--dataset SMALL]
        [--kernels gemm,lu] [--time --repeat 5] [--workdir DIR] [--scheduler pluto]

The PolyBench sources are never copied into this repository; the work directory holds
the generated files and binaries.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DATASETS = ("MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE")
CFLAGS = ("-O3", "-march=native")
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|-?nan|-?inf")


@dataclass
class Row:
    kernel: str
    compiled: str = "-"  # "yes", or why not
    compile_s: float | None = None
    identical: str = "-"  # "yes", "no (max abs ..., rel ...)", or why not
    no_openmp: str = "-"
    original_s: float | None = None
    polycomp_s: float | None = None


def kernels(root: Path) -> list[Path]:
    listing = root / "utilities" / "benchmark_list"
    return [root / line.strip() for line in listing.read_text().splitlines() if line.strip()]


def run_kernel(source: Path, root: Path, work: Path, args: argparse.Namespace) -> Row:
    name = source.stem
    row = Row(name)
    out = work / f"{name}.polycomp.c"
    dataset = f"-D{args.dataset}_DATASET"
    command = [sys.executable, "-m", "polycomp.cli", "compile", str(source),
               "-I", str(root / "utilities"), dataset, "-o", str(out)]
    if args.scheduler:
        command += ["--scheduler", args.scheduler]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        row.compiled = f"timeout {args.timeout}s"
        return row
    row.compile_s = time.perf_counter() - start
    if done.returncode != 0:
        row.compiled = "no: " + (done.stderr.strip().splitlines() or ["?"])[0][:70]
        return row
    row.compiled = "yes"
    includes = ["-I", str(root / "utilities"), "-I", str(source.parent)]
    harness = str(root / "utilities" / "polybench.c")
    dump = [dataset, "-DPOLYBENCH_DUMP_ARRAYS"]
    try:
        reference = _build_and_run(args.cc, [*CFLAGS, "-fopenmp", *includes, *dump], harness,
                                   source, work / f"{name}.orig")
        ours = _build_and_run(args.cc, [*CFLAGS, "-fopenmp", *includes, *dump], harness, out,
                              work / f"{name}.polycomp")
        row.identical = compare(reference, ours)
        if row.identical != "yes":
            # gcc contracts a * b + c into an FMA where the code's shape lets it: the same
            # operations in the same order can then round differently. Both built without
            # contraction, equal dumps mean polycomp reordered nothing it must not.
            strict = [*CFLAGS, "-ffp-contract=off", "-fopenmp", *includes, *dump]
            same = (_build_and_run(args.cc, strict, harness, source, work / f"{name}.orig-nc")
                    == _build_and_run(args.cc, strict, harness, out, work / f"{name}.pc-nc"))
            row.identical += "; same w/o FMA" if same else "; differs w/o FMA too"
        serial = _build_and_run(args.cc, [*CFLAGS, *includes, *dump], harness, out,
                                work / f"{name}.polycomp-serial")
        row.no_openmp = compare(reference, serial)
    except RuntimeError as exc:
        row.identical = f"no: {exc}"[:70]
        return row
    if args.time:
        timed = [dataset, "-DPOLYBENCH_TIME"]
        flags = [*CFLAGS, "-fopenmp", *includes, *timed]
        binaries = [work / f"{name}.orig-time", work / f"{name}.polycomp-time"]
        _build(args.cc, flags, harness, source, binaries[0])
        _build(args.cc, flags, harness, out, binaries[1])
        row.original_s, row.polycomp_s = _time_interleaved(binaries, args.repeat)
    return row


def _build(cc: str, flags: list[str], harness: str, source: Path, binary: Path) -> None:
    command = [*shlex.split(cc), *flags, harness, str(source), "-lm", "-o", str(binary)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"build failed: {(done.stderr.strip().splitlines() or ['?'])[0]}")


def _build_and_run(cc: str, flags: list[str], harness: str, source: Path,
                   binary: Path) -> str:
    _build(cc, flags, harness, source, binary)
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{binary.name} exited with {done.returncode}")
    return done.stderr  # PolyBench dumps the arrays on stderr


def _time_interleaved(binaries: list[Path], repeat: int) -> list[float]:
    """The minimum PolyBench time of each binary over ``repeat`` rounds that run every
    binary once, in turn (a load that comes and goes hits both alike)."""
    best = [float("inf")] * len(binaries)
    for _ in range(repeat):
        for k, binary in enumerate(binaries):
            done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=3600)
            best[k] = min(best[k], float(done.stdout.strip().split()[-1]))
    return best


def compare(reference: str, ours: str) -> str:
    """"yes" when the dumps are the same text, else how far apart their numbers are."""
    if reference == ours:
        return "yes"
    a, b = _NUMBER.findall(reference), _NUMBER.findall(ours)
    if len(a) != len(b):
        return f"no ({len(a)} vs {len(b)} numbers)"
    worst_abs = worst_rel = 0.0
    for x, y in zip(map(float, a), map(float, b)):
        if x != y:
            worst_abs = max(worst_abs, abs(x - y))
            worst_rel = max(worst_rel, abs(x - y) / max(abs(x), 1e-300))
    return f"no (max abs {worst_abs:.3g}, rel {worst_rel:.3g})"


def table(rows: list[Row], timed: bool) -> str:
    head = f"{'kernel':16s} {'compiled':10s} {'s':>6s}  {'identical':52s} {'no -fopenmp':12s}"
    if timed:
        head += f" {'gcc -O3 s':>10s} {'polycomp s':>10s} {'speedup':>8s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        line = (f"{r.kernel:16s} {r.compiled[:10]:10s} "
                f"{'' if r.compile_s is None else f'{r.compile_s:6.1f}':>6s}  "
                f"{r.identical[:52]:52s} {r.no_openmp[:12]:12s}")
        if timed and r.original_s and r.polycomp_s:
            line += (f" {r.original_s:10.4f} {r.polycomp_s:10.4f} "
                     f"{r.original_s / r.polycomp_s:8.2f}")
        lines.append(line)
        if not r.compiled.startswith("yes") and r.compiled != "-":
            lines.append(f"    {r.compiled}")
    ok = sum(r.identical == "yes" for r in rows)
    lines.append(f"{ok} of {len(rows)} kernels compiled with output identical to gcc's")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("polybench", type=Path, help="a PolyBench/C 4.2.1 checkout")
    parser.add_argument("--dataset", default="SMALL", choices=DATASETS)
    parser.add_argument("--kernels", default="", help="comma-separated names (default: all)")
    parser.add_argument("--scheduler", default=None)
    parser.add_argument("--time", action="store_true", help="also time both (quiet machine!)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="per polycomp compile, s")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    args = parser.parse_args(argv)
    root = args.polybench.resolve()
    wanted = set(filter(None, args.kernels.split(",")))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="genuine-polybench-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for source in kernels(root):
        if wanted and source.stem not in wanted:
            continue
        row = run_kernel(source, root, work, args)
        print(f"{row.kernel}: compiled {row.compiled}, identical {row.identical}, "
              f"without -fopenmp {row.no_openmp}", file=sys.stderr, flush=True)
        rows.append(row)
    print(table(rows, args.time))
    print(f"(files in {work})")
    return 0 if all(r.identical == "yes" and r.no_openmp == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
