"""The benchmark runner behind ``python -m benchmarks.polybench``.

For each kernel and the chosen size it builds and times, in one process:

(a) ``gcc``             gcc -O3 -march=native, sequential: the baseline;
(b) ``polly``           clang-19 -O3 -march=native -mllvm -polly, and
    ``polly-par/Nt``    the same with -mllvm -polly-parallel on N OpenMP threads
                        (only when clang-19 is on PATH);
(c) ``polycomp-S/Nt``   ``polycomp.compile_loops(src, function=..., scheduler=S)``
                        on N threads (``polycomp.set_num_threads(N)``);
(d) ``numpy``           the kernel's numpy version, when ``numpy_vectorized``.

Every variant starts each run from a fresh copy of the same inputs.  For
heat-3d and seidel-2d, whose PolyBench inputs are a fixed point, it first
makes an untimed run on perturbed inputs (``defs.make_check_args``) compared
with the baseline's.  Its first run on the PolyBench inputs is a check and
warm-up: its outputs are compared with the
baseline's (``compare.py``) before any time counts; a mismatch is reported as
WRONG, an exception as ERROR.  The time of a variant is the median of the
following ``--repeat`` runs, fewer when all its runs together pass
``--budget`` seconds (at least one timed run; when the first run alone takes
the whole budget, its time is used).

Functions the rest of the project may use: :func:`plan_variants`,
:func:`run_kernel`, :func:`run_suite`, :func:`main`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

import numpy as np

from .. import busy
from . import compare, defs, peers
from .report import ERROR, OK, SKIPPED, WRONG, Result, markdown_table, plot_speedups, write_csv

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "results"
BASELINE = peers.BASELINE


@dataclass(frozen=True)
class VariantSpec:
    name: str  # column label
    kind: str  # "c" | "polycomp" | "numpy"
    compiler: str | None = None  # for kind "c": key of peers.COMPILERS
    scheduler: str | None = None  # for kind "polycomp"
    threads: int | None = None


def parse_int_list(text: str) -> list[int]:
    vals = [int(t) for t in text.replace(" ", "").split(",") if t]
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"bad thread list {text!r}")
    return vals


def plan_variants(threads: Sequence[int], schedulers: Sequence[str], polly: bool = True,
                  polycomp: bool = True, numpy_peer: bool = True) -> list[VariantSpec]:
    """The variants of a run, baseline first."""
    out = [VariantSpec(BASELINE, "c", compiler=BASELINE)]
    if polly:
        out.append(VariantSpec("polly", "c", compiler="polly"))
        out += [VariantSpec(f"polly-par/{t}t", "c", compiler="polly-par", threads=t)
                for t in threads]
    if polycomp:
        out += [VariantSpec(f"polycomp-{s}/{t}t", "polycomp", scheduler=s, threads=t)
                for s in schedulers for t in threads]
    if numpy_peer:
        out.append(VariantSpec("numpy", "numpy"))
    return out


# --------------------------------------------------------------------------
# polycomp (imported lazily: it may not exist or may fail to import)

_polycomp_mod: Any = None
_polycomp_err: str | None = None


def load_polycomp():
    """(module, None) or (None, error message)."""
    global _polycomp_mod, _polycomp_err
    if _polycomp_mod is None and _polycomp_err is None:
        try:
            import polycomp  # noqa: PLC0415

            _polycomp_mod = polycomp
        except BaseException as exc:  # noqa: BLE001 - report anything
            if isinstance(exc, KeyboardInterrupt):
                raise
            _polycomp_err = f"import polycomp failed: {type(exc).__name__}: {exc}"
    return _polycomp_mod, _polycomp_err


def detect_pluto() -> bool:
    """Whether polycomp accepts scheduler="pluto" (tried on gemm)."""
    pc, _err = load_polycomp()
    if pc is None:
        return False
    k = defs.get_kernel("gemm")
    try:
        pc.compile_loops(k.c_source(), function=k.function, scheduler="pluto")
    except Exception:  # noqa: BLE001
        return False
    return True


def default_schedulers() -> list[str]:
    return ["none", "isl"] + (["pluto"] if detect_pluto() else [])


# --------------------------------------------------------------------------
# running


def _short_error(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class _Prepared:
    """Per-kernel cache of built callables, shared by the thread counts. polycomp kernels
    are compiled for ``sizes`` here, so that no timed or budgeted run includes the build
    (fdtd-2d at LARGE under pluto: 7 s to build, 0.5 s to run)."""

    def __init__(self, kdef: defs.KernelDef, sizes: dict[str, int]):
        self.kdef = kdef
        self.sizes = sizes
        self.c: dict[str, peers.CKernel] = {}
        self.pc: dict[str, Any] = {}

    def get(self, vs: VariantSpec) -> Callable[[dict], Any]:
        k = self.kdef
        if vs.kind == "c":
            if vs.compiler not in self.c:
                self.c[vs.compiler] = peers.load_c_kernel(k, vs.compiler)
            return self.c[vs.compiler]
        if vs.kind == "numpy":
            return k.numpy_impl
        if vs.kind == "polycomp":
            pc, err = load_polycomp()
            if pc is None:
                raise RuntimeError(err)
            if vs.scheduler not in self.pc:
                opts: dict[str, Any] = {"scheduler": vs.scheduler}
                if k.cflags:
                    # the kernel needs extra C flags (gramschmidt:
                    # -ffp-contract=off); polycomp's Options.cflags replaces its
                    # default -O3 -march=native, so repeat those
                    opts["cflags"] = ("-O3", "-march=native", *k.cflags)
                kernel = pc.compile_loops(k.c_source(), function=k.function, **opts)
                kernel.specialize(self.sizes)
                self.pc[vs.scheduler] = kernel
            kern = self.pc[vs.scheduler]
            return lambda a, _k=kern: _k(*defs.call_args(k, a))
        raise ValueError(vs.kind)


def _set_threads(vs: VariantSpec) -> None:
    if vs.threads is None:
        return
    if vs.kind == "c" and peers.COMPILERS[vs.compiler].parallel:
        peers.set_omp_threads(vs.threads)
    elif vs.kind == "polycomp":
        pc, err = load_polycomp()
        if pc is None:
            raise RuntimeError(err)
        pc.set_num_threads(vs.threads)


def measure(fn: Callable[[dict], Any], kdef: defs.KernelDef, args0: dict,
            ref: dict[str, np.ndarray] | None, repeat: int, budget: float,
            worker: peers.BigStackWorker) -> tuple[str, list[float], str, dict | None]:
    """Run ``fn`` on fresh copies of ``args0`` (on ``worker``'s thread).

    The first run checks the outputs against ``ref`` (when given) and warms
    up (lazy compilation, caches); it is not timed unless it alone used up
    ``budget`` seconds.  Then up to ``repeat`` timed runs, stopping once all
    runs together reach ``budget`` (at least one timed run).
    Returns (status, times, message, outputs of the first run)."""

    def one():
        a = defs.copy_args(args0)
        t0 = time.perf_counter()
        fn(a)
        return time.perf_counter() - t0, a

    first, a = worker.call(one)
    first_out = {n: v.copy() for n, v in defs.outputs(kdef, a).items()}
    del a
    if ref is not None:
        msg = compare.compare_outputs(first_out, ref, kdef.rtol, kdef.atol)
        if msg:
            return WRONG, [first], msg, first_out
    if first >= budget:
        return OK, [first], "", first_out
    times: list[float] = []
    spent = first
    for _ in range(max(1, repeat)):
        dt, _a = worker.call(one)
        times.append(dt)
        spent += dt
        if spent >= budget:
            break
    return OK, times, "", first_out


def check_run(fn: Callable[[dict], Any], kdef: defs.KernelDef, args0: dict,
              worker: peers.BigStackWorker) -> dict[str, np.ndarray]:
    """One untimed run on a copy of ``args0``; its outputs."""
    a = defs.copy_args(args0)
    worker.call(fn, a)
    return defs.outputs(kdef, a)


def run_kernel(kdef: defs.KernelDef, size: str, variants: Sequence[VariantSpec],
               repeat: int = 5, budget: float = 20.0,
               worker: peers.BigStackWorker | None = None,
               progress: Callable[[str], None] | None = None,
               skip: Collection[tuple[str, str]] = ()) -> list[Result]:
    """All variants of one kernel; the first variant must be the baseline. ``skip`` holds
    (variant prefix, kernel) pairs left out (a variant too slow to wait for: its check
    run cannot be interrupted)."""
    own_worker = worker is None
    worker = worker or peers.BigStackWorker()
    results: list[Result] = []
    try:
        args0 = defs.make_args(kdef, size)
        check0 = defs.make_check_args(kdef, size)  # None for most kernels
        ref_check: dict | None = None
        prep = _Prepared(kdef, dict(kdef.sizes[size]))
        ref: dict | None = None
        for vs in variants:
            if progress:
                progress(f"{kdef.name}: {vs.name}")
            res = Result(kdef.name, vs.name, ERROR, size=size, threads=vs.threads)
            results.append(res)
            if vs.kind == "numpy" and (kdef.numpy_impl is None or not kdef.numpy_vectorized):
                res.status = SKIPPED
                res.message = "numpy version has Python loops (reference only)"
                continue
            if any(vs.name.startswith(v) and kdef.name == k for v, k in skip):
                res.status = SKIPPED
                res.message = "left out with --skip"
                continue
            if vs.name != BASELINE and ref is None:
                res.message = "baseline failed"
                continue
            try:
                t0 = time.perf_counter()
                fn = prep.get(vs)
                res.build_s = time.perf_counter() - t0
                # OpenMP's thread count is per calling thread: set it on the
                # thread that runs the kernels
                worker.call(_set_threads, vs)
                if check0 is not None:
                    # PolyBench's inputs are a fixed point here: check on
                    # perturbed inputs too (untimed), before the timed runs
                    out_chk = check_run(fn, kdef, check0, worker)
                    if vs.name == BASELINE:
                        ref_check = out_chk
                    else:
                        msg = compare.compare_outputs(out_chk, ref_check, kdef.rtol, kdef.atol)
                        if msg:
                            res.status, res.message = WRONG, f"on perturbed inputs: {msg}"
                            continue
                status, times, msg, out = measure(
                    fn, kdef, args0, ref if vs.name != BASELINE else None,
                    repeat, budget, worker)
            except Exception as exc:  # noqa: BLE001 - report and go on
                res.message = _short_error(exc)
                if os.environ.get("POLYBENCH_TRACEBACK"):
                    res.message += "\n" + traceback.format_exc()
                continue
            res.status, res.times, res.message = status, times, msg
            if status == OK:
                res.seconds = statistics.median(times)
                if vs.name == BASELINE:
                    ref = out
    finally:
        if own_worker:
            worker.close()
    return results


def run_suite(kernels: Sequence[defs.KernelDef], size: str, variants: Sequence[VariantSpec],
              repeat: int = 5, budget: float = 20.0, show_progress: bool = True,
              skip: Collection[tuple[str, str]] = ()) -> list[Result]:
    """Every kernel x variant, with a tqdm progress bar on stderr (a line per variant
    when tqdm is not installed)."""
    try:
        from tqdm import tqdm  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        tqdm = None
    bar = None
    total = len(kernels) * len(variants)
    if tqdm is not None:
        bar = tqdm(total=total, unit="variant", file=sys.stderr,
                   disable=not show_progress, dynamic_ncols=True)
    last = [0]
    done = [0]
    start = time.perf_counter()

    def progress(text: str) -> None:
        if bar is not None:
            bar.set_description(text[:40])
            bar.update(last[0])
            last[0] = 1
        elif show_progress:
            done[0] += 1
            print(f"[{done[0]}/{total}, {time.perf_counter() - start:.0f} s] {text}",
                  file=sys.stderr, flush=True)

    results: list[Result] = []
    with peers.BigStackWorker() as worker:
        for kdef in kernels:
            measured = run_kernel(kdef, size, variants, repeat, budget, worker, progress, skip)
            results.extend(measured)
            if show_progress:  # what a run stopped halfway still leaves in its log
                print(f"  {kdef.name}: " + "; ".join(_cell(r) for r in measured),
                      file=sys.stderr, flush=True)
    if bar is not None:
        bar.update(last[0])
        bar.close()
    return results


def _cell(result: Result) -> str:
    if result.status == OK and result.seconds is not None:
        return f"{result.variant} {result.seconds:.4g} s"
    return f"{result.variant} {result.status}"


# --------------------------------------------------------------------------
# the command line


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def environment_lines(size: str, threads: Sequence[int], repeat: int, budget: float) -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lines = [
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}",
        f"- size: {size}; threads: {','.join(map(str, threads))}; repeat: {repeat} "
        f"timed runs (median, after an untimed check run; fewer once a variant "
        f"has used {budget:g} s)",
        f"- CPU: {cpu} ({os.cpu_count()} logical CPUs)",
        f"- gcc: {peers.compiler_version('gcc')}",
        f"- clang-19: {peers.compiler_version('clang-19')}",
        f"- numpy: {np.__version__}, python {platform.python_version()}",
        f"- load average at start: {_loadavg()}; OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}",
        f"- check: |got-ref| <= {compare.RTOL:g}*|ref| + {compare.ATOL:g}*max|ref| "
        f"per output array, against {BASELINE}",
    ]
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.polybench",
        description="PolyBench/C 4.2 kernels: gcc baseline vs Polly, polycomp and numpy.")
    p.add_argument("--kernels", default="",
                   help="comma-separated kernel names (default: all 30)")
    p.add_argument("--size", default="SMALL", type=str.upper, choices=defs.SIZE_NAMES,
                   help="PolyBench dataset size (default SMALL)")
    p.add_argument("--threads", default=[1, 2], type=parse_int_list,
                   help="thread counts for polly-par and polycomp (default 1,2)")
    p.add_argument("--repeat", default=5, type=int, help="timed runs per variant, after an untimed check run (default 5)")
    p.add_argument("--budget", default=20.0, type=float,
                   help="stop repeating a variant once its runs total this many seconds "
                        "(default 20)")
    p.add_argument("--schedulers", default=None,
                   help="polycomp schedulers, comma-separated (default: none,isl and pluto "
                        "when polycomp accepts it); an empty string skips polycomp")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    p.add_argument("--no-polly", action="store_true", help="skip the clang-19/Polly variants")
    p.add_argument("--no-numpy", action="store_true", help="skip the numpy variant")
    p.add_argument("--no-polycomp", action="store_true", help="skip polycomp")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--skip", default="",
                   help="VARIANT:KERNEL,... cells to leave out (variant name or prefix, "
                        "e.g. polycomp-isl:ludcmp)")
    p.add_argument("--busy", action="store_true",
                   help="time everything beside a competing busy process on the last core "
                        "(benchmarks/busy.py); results go to polybench_<SIZE>_busy.*")
    p.add_argument("--list", action="store_true", help="list the kernels and exit")
    p.add_argument("--matmul", action="store_true",
                   help="instead: float32 matmul GFLOP/s, polycomp vs numpy (benchmarks/matmul.py)")
    p.add_argument("--matmul-size", default=2048, type=int,
                   help="M=N=K for --matmul (default 2048)")
    return p


def parse_skip(text: str) -> list[tuple[str, str]]:
    """``polycomp-isl:ludcmp,polly:adi`` -> [("polycomp-isl", "ludcmp"), ("polly", "adi")]."""
    pairs = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        variant, sep, kernel = item.partition(":")
        if not sep or not variant or not kernel:
            raise ValueError(f"--skip: expected VARIANT:KERNEL, got {item!r}")
        pairs.append((variant, defs.get_kernel(kernel).name))
    return pairs


def select_kernels(text: str) -> list[defs.KernelDef]:
    if not text.strip():
        return list(defs.KERNELS.values())
    picked = [defs.get_kernel(t) for t in text.split(",") if t.strip()]
    return list({k.name: k for k in picked}.values())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    peers.ensure_omp_stacksize()  # before polycomp or a polly-par build loads libgomp
    if args.list:
        for k in defs.KERNELS.values():
            sz = ", ".join(f"{n}={v}" for n, v in k.sizes[args.size].items())
            print(f"{k.name:15s} {k.category:24s} {k.c_file:18s} {args.size}: {sz}")
        return 0
    if args.matmul:
        from .. import matmul  # noqa: PLC0415

        scheds = None if args.schedulers is None else \
            [s for s in args.schedulers.split(",") if s]
        return matmul.main_from_runner(size=args.matmul_size, threads=args.threads,
                                       schedulers=scheds, repeat=args.repeat,
                                       out_dir=Path(args.out))

    try:
        kernels = select_kernels(args.kernels)
    except KeyError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not peers.have_compiler("gcc"):
        print("gcc not found: the baseline cannot be built", file=sys.stderr)
        return 2
    polly = not args.no_polly and peers.have_compiler("clang-19")
    if not args.no_polly and not polly:
        print("clang-19 not on PATH: skipping Polly (benchmarks/install_polly.sh installs it)",
              file=sys.stderr)
    if args.schedulers is None:
        schedulers = [] if args.no_polycomp else default_schedulers()
    else:
        schedulers = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    use_pc = not args.no_polycomp and bool(schedulers)
    variants = plan_variants(args.threads, schedulers, polly=polly, polycomp=use_pc,
                             numpy_peer=not args.no_numpy)

    try:
        skip = parse_skip(args.skip)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    header = environment_lines(args.size, args.threads, args.repeat, args.budget)
    load = busy.competing_load() if args.busy else contextlib.nullcontext()
    with load:
        results = run_suite(kernels, args.size, variants, args.repeat, args.budget,
                            show_progress=not args.no_progress, skip=skip)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"polybench_{args.size}" + ("_busy" if args.busy else "")
    if args.busy:
        header.append(f"- load: {busy.describe()}")
    table = markdown_table(
        results, BASELINE, title=f"PolyBench {args.size}: seconds (speedup over {BASELINE})",
        header_lines=header)
    (out / f"{stem}.md").write_text(table)
    write_csv(results, out / f"{stem}.csv", BASELINE)
    made_png = plot_speedups(results, out / f"{stem}.png", BASELINE,
                             title=f"PolyBench {args.size}: speedup over {BASELINE}")
    print(table)
    print(f"wrote {out / (stem + '.md')}, {out / (stem + '.csv')}"
          + (f", {out / (stem + '.png')}" if made_png else " (no PNG: matplotlib missing)"))
    return 0
