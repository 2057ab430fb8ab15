"""The ``polycomp`` command: compile, run, demo.

    polycomp compile FILE.tc [--entry NAME] [--emit c|schedule|deps|ir|ast|ranges]
                             [--scheduler S] [--sizes M=512,N=256] [--parametric] [-o OUT]
                             [--target openmp|cuda|cuda-emulated]  (cuda: the .cu text)
    polycomp compile FILE.c [-I DIR] [-D NAME[=VALUE]] [--entry NAME] [-o OUT.c]
                             (the whole file back, its #pragma scop region optimised)
    polycomp run FILE.tc --sizes M=512,N=256 [--entry NAME] [--scheduler S] [--repeat N]
                             [--target openmp|cuda-emulated|cuda]
    polycomp compile MODEL.onnx [--shape NAME=1,3,224,224 ...] [--emit plan|c|schedule|ir]
                             [-o OUT.so]   (without --emit: the model as one library)
    polycomp run MODEL.onnx [--shape NAME=1,3,224,224 ...] [--sizes BATCH=8] [--repeat N]
                             (checked against onnxruntime when it is installed)
    polycomp tune FILE.tc|FILE.c --sizes M=512,N=256 [--entry NAME] [--trials N]
                             [--records DB] [--workers N] [--seed S] [--plot CURVE.png]
                             [--random]   (search the tiling; the best is recorded)
    polycomp tune MODEL.onnx [--shape NAME=1,3,224,224 ...] [--budget N] [--records DB]
                             (one budget over the model's kernels; latency before/after)
    polycomp demo

A user mistake prints the error (location, caret, hint) and exits with status 1, without
a traceback; ``--debug`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path

from .errors import InternalError, OptionError, PolycompError
from .options import SCHEDULERS, Options

PARAMETRIC_TIME_LIMIT = 300.0  # seconds; --time-limit


class TimeLimitError(PolycompError):
    """A compile took longer than --time-limit."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 1
    try:
        return int(args.handler(args) or 0)
    except PolycompError as exc:
        if args.debug:
            traceback.print_exc()
        print(printable(str(exc)), file=sys.stderr)
        return 1
    except InternalError as exc:
        traceback.print_exc()
        print(f"internal error (a bug in polycomp, please report it): {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `polycomp compile ... | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def printable(text: str) -> str:
    """``text`` with control characters other than newline and tab escaped: a message may
    quote a model's names, and a name may hold terminal escape sequences."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polycomp", description="A polyhedral auto-scheduling compiler: Tensor "
        "Comprehensions and affine C loop nests in, scheduled OpenMP C out.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("file", help="a .tc (Tensor Comprehensions) or .c (affine loop nest) "
                                    "file, or an .onnx model")
        p.add_argument("--entry", help="which def (or C function) to compile, if the file has several")
        p.add_argument("--scheduler", default=None, choices=SCHEDULERS,
                       help="none (original order), isl (isl's scheduler), pluto (polycomp's "
                            "Pluto-style scheduler) or custom (with --schedule); default "
                            f"{Options.scheduler}, or custom when --schedule is given")
        p.add_argument("--schedule", metavar="FILE",
                       help="your own schedule for --scheduler custom: an isl schedule tree "
                            "(an edited `--emit schedule` printout) or a union map; it is "
                            "checked against the dependences")
        p.add_argument("--sizes", default="", help="sizes as NAME=VALUE,NAME=VALUE (for an "
                                                   ".onnx model: its symbolic dimensions)")
        p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                       help=".onnx models: the shape of input NAME (repeat for each input); "
                            "a symbolic dimension without --shape or --sizes is 1")
        p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                       help="C files: an include directory for the preprocessor")
        p.add_argument("-D", dest="define", action="append", default=[],
                       metavar="NAME[=VALUE]", help="C files: a macro for the preprocessor")
        p.add_argument("--target", default=None, metavar="TARGET",
                       help="the backend: openmp (OpenMP C for CPUs, the default), cuda "
                            "(CUDA for NVIDIA GPUs: compile prints the .cu; running needs "
                            "a GPU) or cuda-emulated (the same CUDA run on CPU threads); "
                            ".tc and .c files")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks of errors")

    p = sub.add_parser("compile", help="compile a program and print one stage of the result")
    common(p)
    p.add_argument("--emit", default=None,
                   choices=["file", "c", "schedule", "deps", "ir", "ast", "ranges", "plan",
                            "asm-summary"],
                   help="what to print: the whole C file with its #pragma scop region "
                        "optimised (default for .c), the generated C (default for .tc), the "
                        "schedule tree, the dependences, the IR, isl's AST, or the inferred "
                        "ranges (TC); for an .onnx model: plan (the fusion groups, their "
                        "nodes, input and output values, and the host view ops between them; "
                        "the default), or c, schedule or ir of every group; asm-summary: "
                        "built, then per loop marked vector its packed and scalar FMAs "
                        "in the object code (polycomp.inspect)")
    p.add_argument("--parametric", action="store_true",
                   help="keep sizes as C arguments (the default without --sizes; for a whole "
                        ".c file the default is the sizes its harness passes, when constant)")
    p.add_argument("--time-limit", type=float, default=PARAMETRIC_TIME_LIMIT, metavar="S",
                   help="give up a parametric compile after S seconds (default "
                        f"{PARAMETRIC_TIME_LIMIT:g}; 0: no limit)")
    p.add_argument("-o", "--output",
                   help="write to this file instead of standard output; for an .onnx model "
                        "without --emit, the whole model as one shared library with one "
                        "entry (polycomp_model_run), its weights beside it in OUT.constants "
                        "and a JSON description of the entry's slots in OUT.json")
    p.set_defaults(handler=_compile)

    p = sub.add_parser("run", help="run on random inputs, check against scheduler=none, time it")
    common(p)
    p.add_argument("--repeat", type=int, default=5, help="timed runs (median is printed)")
    p.add_argument("--threads", type=int, default=None, help="OpenMP threads")
    p.add_argument("--profile", action="store_true",
                   help="for an .onnx model: each fused group's time, GFLOP/s and share of "
                        "this machine's measured FP32 peak, beside onnxruntime's time for "
                        "the same nodes (polycomp/onnx/profile.py)")
    p.set_defaults(handler=_run)

    _tune_parser(sub)

    p = sub.add_parser("demo", help="compile and run the bundled examples with checks and timings")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks of errors")
    p.add_argument("--quick", action="store_true", help="small sizes only")
    p.set_defaults(handler=_demo)
    return parser


def _no_shapes(args: argparse.Namespace) -> None:
    if args.shape:
        raise OptionError("--shape is for .onnx models", hint="give sizes with --sizes M=512")
    if getattr(args, "emit", None) == "plan":
        raise OptionError("--emit plan is for .onnx models")


def is_onnx(path: str) -> bool:
    return path.lower().endswith(".onnx")


def parse_sizes(text: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise OptionError(f"cannot read size {item!r}", hint="write sizes as M=512,N=256")
        sizes[name.strip()] = int(value)
    return sizes


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolycompError(f"cannot read {path}: {exc}") from None


def load_definition(path: str, entry: str | None, include: Sequence[str] = (),
                    define: Sequence[str] = (), preprocess: bool | None = None):
    """The frontend definition in ``path`` (by its suffix)."""
    text = _read(path)
    if path.endswith(".c"):
        from .frontend.loops import parse_c
        return parse_c(text, file=path, include_dirs=include, defines=define,
                       preprocess=preprocess).get(entry)
    from .frontend.tc import parse
    return parse(text, file=path).get(entry)


def target_options(args: argparse.Namespace) -> dict:
    """``target`` from --target (checked: an unknown name lists the known ones)."""
    if args.target is None:
        return {}
    from .targets import check_target_name
    check_target_name(args.target)
    return {"target": args.target}


def _no_target_for_onnx(args: argparse.Namespace) -> None:
    if args.target not in (None, "openmp"):
        raise OptionError(f"--target {args.target} is for .tc and .c files: an .onnx model "
                          "compiles for openmp", hint="leave out --target")


def scheduler_options(args: argparse.Namespace) -> dict:
    """``scheduler`` and ``schedule`` from --scheduler and --schedule."""
    if args.schedule is None:
        if args.scheduler == "custom":
            raise OptionError("--scheduler custom needs --schedule FILE",
                              hint="write the tree with `polycomp compile FILE --emit schedule`")
        return {"scheduler": args.scheduler or Options.scheduler}
    if args.scheduler not in (None, "custom"):
        raise OptionError(f"--schedule is for --scheduler custom, not {args.scheduler}")
    return {"scheduler": "custom", "schedule": _read(args.schedule)}


def _compile(args: argparse.Namespace) -> int:
    from .driver import analyze_program, compile_program, emit

    if is_onnx(args.file):
        _no_target_for_onnx(args)
        return _compile_onnx(args)
    _no_shapes(args)
    targets = target_options(args)
    is_c = args.file.endswith(".c")
    # the whole .c file back is OpenMP C; another target's text is printed on its own
    what = args.emit or ("file" if is_c and targets.get("target", "openmp") == "openmp"
                         else "c")
    if what == "file" and not is_c:
        raise OptionError("--emit file is for .c files")
    if what == "file" and targets.get("target", "openmp") != "openmp":
        raise OptionError(f"--emit file writes OpenMP C into the .c file, not target "
                          f"{targets['target']}'s code", hint="use --emit c for the generated "
                                                              "code alone")
    definition = load_definition(args.file, args.entry, args.include, args.define,
                                 preprocess=True if what == "file" else None)
    sizes = parse_sizes(args.sizes)
    if what == "ranges":
        if not hasattr(definition, "explain_ranges"):
            raise OptionError("--emit ranges is for .tc files")
        text = definition.explain_ranges(sizes or None)
    else:
        if not sizes and not args.parametric and getattr(definition, "whole", None):
            sizes = harness_sizes(definition)
        parametric = args.parametric or not sizes
        options = Options.create(parametric=parametric, **targets, **scheduler_options(args))
        with _time_limit(args.time_limit if parametric else 0):
            program = definition.lower(None if parametric else sizes)
            if what == "deps":  # known before scheduling: no code to generate
                return _write_or_print(str(analyze_program(program, options)[1]),
                                       args.output)
            compiled = compile_program(program, options)
        if what == "file":
            from .frontend.loops.splice import splice
            text = splice(definition, compiled.source, None if parametric else sizes,
                          note=f" (scheduler={options.scheduler})")
        elif what == "asm-summary":
            text = _asm_summary(compiled, options)
        else:
            text = emit(compiled, what)
    return _write_or_print(text, args.output)


def _asm_summary(compiled, options: Options) -> str:  # noqa: ANN001 - driver.Compiled
    """The machine-code report of a compiled program's library (machine_code.py)."""
    from .machine_code import inspect_binary
    from .targets import get_target

    target = get_target(options.target)
    if not hasattr(target, "build"):
        raise OptionError(f"--emit asm-summary reads a host library; target "
                          f"'{options.target}' builds none", hint="use the openmp target")
    return inspect_binary(target.build(compiled.source, options)).summary()


def harness_sizes(definition) -> dict[str, int]:  # noqa: ANN001 - a LoopDefinition
    """The sizes the file's harness passes to the function, when all are constants."""
    values = definition.whole.call_arguments(definition.name)
    if values is None or len(values) != len(definition.interface.inputs):
        return {}
    sizes = {spec.name: value for spec, value in zip(definition.interface.inputs, values)
             if getattr(spec, "is_size", False)}
    return sizes if sizes and None not in sizes.values() else {}


class _time_limit:  # noqa: N801 - used as a context manager, like contextlib's
    """Raise TimeLimitError after ``seconds`` (0: never); only where SIGALRM exists and
    on the main thread (the handler runs between Python bytecodes, so an isl call that
    is running finishes first)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.active = (seconds > 0 and hasattr(signal, "setitimer")
                       and threading.current_thread() is threading.main_thread())

    def __enter__(self) -> None:
        if self.active:
            self.previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: object) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)

    def _expired(self, signum: int, frame: object) -> None:
        raise TimeLimitError(
            f"the parametric compile took longer than {self.seconds:g} s",
            hint="give the sizes (--sizes N=1000,...) for a specialised compile, which is "
                 "much faster, or raise --time-limit (0: no limit)")


def _run(args: argparse.Namespace) -> int:
    from .checking import run_and_check

    if is_onnx(args.file):
        _no_target_for_onnx(args)
        return _run_onnx(args)
    _no_shapes(args)
    if args.profile:
        raise OptionError("--profile is for .onnx models",
                          hint="polycomp run KERNEL.tc prints the kernel's time")
    targets = target_options(args)
    definition = load_definition(args.file, args.entry, args.include, args.define)
    report = run_and_check(definition, parse_sizes(args.sizes), repeat=args.repeat,
                           threads=args.threads, **targets, **scheduler_options(args))
    print(report)
    return 0 if report.ok else 1


# ----------------------------------------------------------------------------- tune

TUNE_DESCRIPTION = """\
Search the tiling of one kernel at fixed sizes (polycomp.tune): tile sizes per band and
member, unroll-and-jam, the SIMD loop and L2 tiles, proposed by a cost model from the
configurations measured so far (for --target cuda or cuda-emulated: each kernel's block
tile per member and the threads per block, threads along x and most blocks along x).
Each configuration is compiled, checked against the default's outputs and timed in a
child process; a failing or hanging one is recorded and skipped. Every trial goes to the records (--records), and later compiles of this kernel
at these sizes on this machine apply the best one.

For an .onnx model, one budget of measurements (--budget, default 200) is shared by the
model's kernels, each measurement going to the kernel with the largest expected gain of
model latency (polycomp/tuning/model.py); the model's latency is reported before and
after, and later sessions of the model (tuning="records", the default) use the records."""


def _tune_parser(sub) -> None:  # noqa: ANN001 - argparse's private subparsers action
    p = sub.add_parser("tune", help="search the tiling of a kernel at fixed sizes and "
                                    "record the best", description=TUNE_DESCRIPTION)
    p.add_argument("file", help="a .tc (Tensor Comprehensions) or .c (affine loop nest) "
                                "file, or an .onnx model")
    p.add_argument("--entry", help="which def (or C function) to tune, if the file has several")
    p.add_argument("--sizes", default="", help="the sizes to tune for, as NAME=VALUE,NAME=VALUE "
                                               "(required: a tuning holds for one size set; "
                                               "for a model: its symbolic dimensions)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help=".onnx models: the shape of input NAME to tune for (repeat for each "
                        "input); a symbolic dimension without --shape or --sizes is 1")
    p.add_argument("--trials", "--budget", dest="trials", type=int, default=None, metavar="N",
                   help="configurations to measure, each kernel's default (the analytical "
                        "choice) first (default 64 for a kernel, 200 for a model's kernels "
                        "together)")
    p.add_argument("--records", metavar="DB",
                   help="the sqlite records to seed the search from and store every trial "
                        "in (default $POLYCOMP_CACHE_DIR/tuning.sqlite, the one compile reads)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="measure N configurations at once in a pool of N processes (default "
                        "1, so that timings never overlap: two kernels timed at once on one "
                        "machine slow each other down; more only on many idle cores)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the search and of the random inputs (default 0)")
    p.add_argument("--time-budget", type=float, default=None, metavar="SEC",
                   help="seconds of timed calls per configuration, the fastest counting "
                        "(default 0.2)")
    p.add_argument("--plot", metavar="PNG",
                   help="draw the best time against the measurements (needs matplotlib)")
    p.add_argument("--random", action="store_true",
                   help="also run a random search with the same budget (without records: "
                        "neither seeded by them nor stored), and print and plot both")
    p.add_argument("--scheduler", default=None, choices=[s for s in SCHEDULERS if s != "custom"],
                   help=f"the scheduler whose bands are tiled (default {Options.scheduler})")
    p.add_argument("--target", default=None, metavar="TARGET",
                   help="the backend to tune for: openmp (the default), cuda (on a GPU: the "
                        "kernels' block tiles and the launch sizes, timed through the device "
                        "entry) or cuda-emulated (the same space on CPU threads); .tc and .c "
                        "files")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                   help="C files: an include directory for the preprocessor")
    p.add_argument("-D", dest="define", action="append", default=[],
                   metavar="NAME[=VALUE]", help="C files: a macro for the preprocessor")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks of errors")
    p.set_defaults(handler=_tune)


def _tune(args: argparse.Namespace) -> int:
    import math

    from .runtime import Kernel
    from .tuning.api import tune

    if args.trials is None:
        args.trials = 200 if is_onnx(args.file) else 64
    for flag, value in (("--trials", args.trials), ("--workers", args.workers)):
        if value < 1:
            raise OptionError(f"{flag} must be at least 1, not {value}",
                              hint=f"e.g. {flag} {64 if flag == '--trials' else 1}")
    if args.time_budget is not None and not args.time_budget > 0:
        raise OptionError(f"--time-budget must be positive, not {args.time_budget:g}",
                          hint="e.g. --time-budget 0.2 (seconds)")
    if args.plot:
        _check_plot(args.plot)  # before the search, not after it
    if is_onnx(args.file):
        _no_target_for_onnx(args)
        return _tune_onnx(args)
    if args.shape:
        raise OptionError("--shape is for .onnx models", hint="give sizes with --sizes M=512")
    definition = load_definition(args.file, args.entry, args.include, args.define)
    sizes = parse_sizes(args.sizes)
    if not sizes and getattr(definition, "whole", None):
        sizes = harness_sizes(definition)
    names = size_names(definition.interface)
    example = "e.g. --sizes " + ",".join(f"{n}={sizes.get(n, 256)}" for n in names or ["N"])
    if not sizes and needs_sizes(definition.interface):
        raise OptionError(f"polycomp tune needs --sizes: {definition.name} is tuned at fixed "
                          "sizes", hint=example)
    missing = [n for n in names if n not in sizes]
    if missing:
        raise OptionError(f"--sizes has no value for {', '.join(missing)}",
                          hint=f"{example} (every size of {definition.name})")
    unknown = [n for n in sizes if n not in names]
    if unknown and names and not _derived_extents(definition.interface):
        raise OptionError(f"--sizes names {', '.join(unknown)}, not a size of "
                          f"{definition.name}", hint=f"its sizes: {', '.join(names)}")
    records = _open_records(args.records)
    options = {} if args.scheduler is None else {"scheduler": args.scheduler}
    kernel = Kernel(definition, Options.create(**options, **target_options(args)))
    extra = {} if args.time_budget is None else {"time_budget": args.time_budget}
    executor = worker_pool(args.workers)
    try:
        bar = TuneProgress(args.trials, "model")
        try:
            result = tune(kernel, sizes, args.trials, executor, records, seed=args.seed,
                          progress=bar, **extra)
        finally:
            bar.close()
        baseline = None
        if args.random:
            bar = TuneProgress(args.trials, "random")
            try:
                baseline = tune(kernel, sizes, args.trials, executor, False, seed=args.seed,
                                search="random", progress=bar, **extra)
            finally:
                bar.close()
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    print(format_tuning(args, definition, sizes, result, baseline, records.path))
    if args.plot:
        curves = {"model-guided search": result.curve}
        if baseline is not None:
            curves["random search"] = baseline.curve
        shown = ",".join(f"{k}={v}" for k, v in sizes.items())
        plot_tuning(args.plot, curves, result.default_time,
                    f"tuning {definition.name} ({shown})")
        print(f"plot: {args.plot}")
    return 0 if result.best_config is not None and math.isfinite(result.best_time) else 1


def _tune_onnx(args: argparse.Namespace) -> int:
    from .onnx import InferenceSession
    from .tuning.model import tune_model

    for flag, given in (("--entry", args.entry), ("-I", args.include), ("-D", args.define),
                        ("--random", args.random), ("--time-budget", args.time_budget)):
        if given:
            raise OptionError(f"{flag} is not an option for tuning an .onnx model",
                              hint="a model is tuned per set of input shapes (--shape) "
                                   "with one budget (--budget)")
    records = _open_records(args.records)
    options = {"scheduler": args.scheduler or Options.scheduler, "records": str(records.path)}
    # the shapes from --shape/--sizes need the model's inputs: this untuned session is
    # the one tune_model compiles first (the model cache serves it the second time)
    shapes = onnx_input_shapes(InferenceSession(args.file, **options, tuning="none"), args)
    del options["records"]
    bar = TuneProgress(args.trials, "model-wide")
    executor = worker_pool(args.workers)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    try:
        result = tune_model(args.file, shapes, args.trials, executor, records.path,
                            seed=args.seed, progress=lambda _, outcome: bar(outcome),
                            log=log, **options)
    finally:
        bar.close()
        executor.shutdown(wait=True, cancel_futures=True)
    print(format_model_tuning(args.file, shapes, result))
    if args.plot:
        title = f"tuning {os.path.basename(args.file)}: estimated model latency"
        plot_tuning(args.plot, {"estimated model latency (profile)": result.curve},
                    result.profiled, title)
        print(f"plot: {args.plot}")
    return 0 if result.outputs_match else 1


def format_model_tuning(path: str, shapes: dict, result) -> str:  # noqa: ANN001
    """The model-wide tuning's report: a row per kernel, the latency before and after."""
    shown = " ".join(f"{_shown(k)}={','.join(map(str, v))}" for k, v in shapes.items())
    lines = [f"{os.path.basename(path)} at {shown}: {result.used} of {result.budget} "
             f"measurements over {len(result.tasks)} kernels (records: {result.records})",
             f"  {'kernel':8} {'runs':>4} {'share':>6} {'trials':>6} {'default':>11} "
             f"{'best':>11} {'speedup':>7}  nodes"]
    for t in result.tasks:
        share = t.seconds / result.profiled if result.profiled else 0.0
        speedup = f"{t.speedup:.2f}x" if t.speedup else "-"
        nodes = t.nodes if len(t.nodes) <= 60 else t.nodes[:57] + "..."
        lines.append(f"  {_shown(t.kernel):8} {t.runs:>4} {share:>6.1%} {t.trials:>6} "
                     f"{_ms(t.default_time):>11} {_ms(t.best_time):>11} {speedup:>7}  "
                     f"{_printable(nodes)}")
    check = "outputs match the untuned model's" if result.outputs_match else \
        f"OUTPUTS DIFFER from the untuned model's: {result.mismatch}"
    lines.append(f"  model latency: before {_ms(result.before)}, after {_ms(result.after)} "
                 f"({result.speedup:.2f}x; minimum of interleaved runs); {check}")
    return "\n".join(lines)


def worker_pool(workers: int):
    """The measuring pool: ``workers`` processes that only forward each trial to a child
    of their own. Started by a fork server where there is one: its workers never load an
    OpenMP runtime, so their children are forks; a worker forked from this process (which
    ran the default kernel) would start a fresh interpreter per trial instead (a forked
    OpenMP runtime may hang; polycomp/tuning/measure.py), about half a second each."""
    import concurrent.futures as cf
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else None)
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=context)


def _open_records(path: str | None):
    import sqlite3

    from .tuning.records import Records

    try:
        return Records(path)
    except (sqlite3.Error, OSError) as exc:
        raise OptionError(f"cannot open the tuning records {path or '(the default)'}: {exc}",
                          hint="pass another file with --records DB") from None


def _check_plot(path: str) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise OptionError("--plot needs matplotlib, which is not installed",
                          hint="pip install matplotlib (or pip install -e '.[bench]'), or "
                               "leave --plot out") from None
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise OptionError(f"cannot write the plot {path}: no folder {folder}",
                          hint="create the folder first, or name a PNG in an existing one")


def needs_sizes(interface) -> bool:  # noqa: ANN001 - an ir.Interface
    """Whether some argument's extent or a size argument is not a fixed number."""
    for spec in interface.inputs:
        if getattr(spec, "is_size", False):
            return True
        if any(not isinstance(d, int) for d in getattr(spec, "dims", ())):
            return True
    return False


def _derived_extents(interface) -> bool:  # noqa: ANN001 - an ir.Interface
    """Whether some extent is an expression of sizes (whose names size_names misses)."""
    return any(not isinstance(d, (int, str)) for spec in interface.inputs
               for d in getattr(spec, "dims", ()))


def size_names(interface) -> list[str]:  # noqa: ANN001 - an ir.Interface
    """The size names a call binds, in argument order (for hints)."""
    names: list[str] = []
    for spec in interface.inputs:
        found = [spec.name] if getattr(spec, "is_size", False) else \
            [d for d in getattr(spec, "dims", ()) if isinstance(d, str)]
        names += [n for n in found if n not in names]
    return names


class TuneProgress:
    """A progress bar over a search's trials: tqdm when it is installed (as in
    benchmarks/), else a line per trial on standard error. Called with each Outcome."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.n = total, label, 0
        self.best = float("inf")
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, desc=f"{label} search", unit="trial", file=sys.stderr)

    def __call__(self, outcome) -> None:  # noqa: ANN001 - a measure.Outcome
        self.n += 1
        if outcome.ok:
            self.best = min(self.best, outcome.time)
        best = "-" if self.best == float("inf") else _ms(self.best)
        if self.bar is not None:
            self.bar.set_postfix_str(f"best {best}", refresh=False)
            self.bar.update(1)
        else:
            now = _ms(outcome.time) if outcome.ok else outcome.status
            print(f"{self.label} search [{self.n}/{self.total}] {now} (best {best})",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def format_tuning(args: argparse.Namespace, definition, sizes: dict, result, baseline,
                  records_path) -> str:  # noqa: ANN001 - frontend definition, TuneResults
    """What the CLI prints after a search: the times, the best configuration per band
    (with the default where it differs) and the compile keywords that give it."""
    shown = ",".join(f"{k}={v}" for k, v in sizes.items()) or "its fixed sizes"
    valid = sum(t.ok for t in result.trials)
    lines = [f"{definition.name} ({os.path.basename(args.file)}) at {shown}: "
             f"{len(result.trials)} configurations measured, {valid} valid "
             f"(model-guided search; stopped: {result.stopped})"]
    failed: dict[str, int] = {}
    for t in result.trials:
        if not t.ok:
            failed[t.status] = failed.get(t.status, 0) + 1
    if failed:
        first = next(t for t in result.trials if not t.ok)
        detail = first.detail.strip().splitlines()[-1][:160] if first.detail.strip() else ""
        lines.append("  failed: " + ", ".join(f"{k} {v}" for k, v in sorted(failed.items()))
                     + (f" (first: {detail})" if detail else ""))
    lines.append(f"  default  {_ms(result.default_time):>12}   (the analytical choice)")
    if result.best_config is None:
        lines.append("  best     none: no configuration ran correctly")
        return "\n".join(lines)
    at = next((t.index + 1 for t in result.trials
               if t.ok and t.config == result.best_config), len(result.trials))
    speedup = result.speedup
    lines.append(f"  best     {_ms(result.best_time):>12}   "
                 + (f"{speedup:.2f}x the default's speed" if speedup else "the default failed")
                 + f" (found at measurement {at})")
    if result.confirmed:
        lines.append(f"  (default and best: the default and the best {len(result.confirmed) - 1} "
                     "re-measured side by side, minimum of interleaved rounds)")
    if baseline is not None:
        found = baseline.best_config is not None
        ratio = baseline.best_time / result.best_time if found else float("inf")
        lines.append(f"  random   {_ms(baseline.best_time if found else None):>12}   "
                     f"best of {len(baseline.trials)} random configurations "
                     f"({ratio:.2f}x the model-guided best's time)")
    if any(t.source == "seed" for t in result.trials):
        lines.append("  (the search started from records of earlier tunings)")
    lines.append("best configuration (knob best, [default] where it differs):")
    bands: dict[str, list[str]] = {}
    for name, value in result.best_config.items():
        band, knob = name.rsplit("/", 1)
        default = result.default_config.get(name)
        bands.setdefault(band, []).append(
            f"{knob} {value}" + (f" [{default}]" if default != value else ""))
    for band, knobs in bands.items():
        lines.append(f"  {band}: " + ", ".join(knobs))
    function = "compile_loops" if args.file.endswith(".c") else "compile"
    entry = f", {args.entry!r}" if args.entry else ""
    keywords = "".join(f", {k}={v!r}" for k, v in result.best_options.items())
    lines.append("compile with it:")
    lines.append(f"  polycomp.{function}(source{entry}, sizes={dict(sizes)!r}{keywords})")
    lines.append(f"records: {records_path} (compiles of this kernel at these sizes on this "
                 "machine apply the best)")
    return "\n".join(lines)


def plot_tuning(path: str, curves: dict, default: float | None, title: str) -> None:
    """Best time so far against measurements, one step line per search, the default as
    a horizontal line (matplotlib, checked by _check_plot)."""
    import math

    import matplotlib
    matplotlib.use("Agg")  # no display needed: the figure only goes to a file
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curve in curves.items():
        points = [(i + 1, v * 1e3) for i, v in enumerate(curve) if math.isfinite(v)]
        if points:
            xs, ys = zip(*points)
            ax.step(xs, ys, where="post", marker=".", label=label)
    if default is not None:
        ax.axhline(default * 1e3, color="gray", linestyle="--",
                   label=f"default (analytical): {default * 1e3:.4g} ms")
    ax.set_xlabel("measurements")
    ax.set_ylabel("best time so far (ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise PolycompError(f"cannot write the plot {path}: {exc}") from None
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- ONNX models

def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """--shape NAME=D1,D2,... (repeated) -> {NAME: dims}; the name may hold '='."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, eq, dims = item.rpartition("=")
        parts = [d.strip() for d in dims.split(",")] if dims.strip() else []
        if not eq or not name or not all(d.isdigit() for d in parts):
            raise OptionError(f"cannot read shape {item!r}",
                              hint="write --shape NAME=1,3,224,224 (extents >= 0)")
        shapes[name] = tuple(int(d) for d in parts)
    return shapes


def _onnx_arguments(args: argparse.Namespace) -> None:
    """The options of .tc and .c files that mean nothing for a model are refused."""
    for flag, given in (("--entry", args.entry), ("--schedule", args.schedule),
                        ("-I", args.include), ("-D", args.define),
                        ("--parametric", getattr(args, "parametric", False))):
        if given:
            raise OptionError(f"{flag} is not an option for .onnx models",
                              hint="a model is compiled per set of input shapes (--shape)")


def onnx_input_shapes(session, args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    """Each input's shape: --shape, else its declared extents with symbolic dimensions
    from --sizes (or 1)."""
    given = parse_shapes(args.shape)
    sizes = parse_sizes(args.sizes)
    inputs = {a.name: a for a in session.get_inputs()}
    for name in given:
        if name not in inputs:
            raise OptionError(f"--shape names {name!r}, which is not an input of the model",
                              hint="inputs: " + ", ".join(map(_shown, inputs)))
    shapes: dict[str, tuple[int, ...]] = {}
    for name, arg in inputs.items():
        declared = list(arg.shape)
        if name in given:
            dims = given[name]
            fixed = [d for d in declared if isinstance(d, int)]
            if declared and (len(dims) != len(declared) or any(
                    isinstance(d, int) and d != g for d, g in zip(declared, dims))):
                raise OptionError(f"--shape {_shown(name)}={','.join(map(str, dims))} does "
                                  f"not fit the declared shape {declared}",
                                  hint="only symbolic dimensions may be chosen"
                                  if fixed else None)
            shapes[name] = dims
        else:
            shapes[name] = tuple(d if isinstance(d, int) else
                                 sizes.get(d, 1) if isinstance(d, str) else 1 for d in declared)
    return shapes


def _printable(text: str) -> str:
    """``text`` with every unprintable character escaped (names from a model)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _shown(name: str) -> str:
    """A value or node name as printed: as is when plain, else quoted and escaped (a
    model's names may hold newlines or terminal escapes)."""
    return name if name and re.fullmatch(r"[\w.:/#+-]+", name) else repr(name)


def _load_onnx(args: argparse.Namespace):
    from .onnx import InferenceSession

    _onnx_arguments(args)
    options = {"scheduler": args.scheduler or Options.scheduler}
    session = InferenceSession(args.file, **options)
    shapes = onnx_input_shapes(session, args)
    return session, shapes


def _compile_onnx(args: argparse.Namespace) -> int:
    import time

    what = args.emit or ("manifest" if args.output else "plan")
    if what not in ("plan", "c", "schedule", "ir", "manifest", "asm-summary"):
        raise OptionError(f"--emit {what} is not for .onnx models",
                          hint="choose plan, c, schedule, ir or asm-summary")
    start = time.perf_counter()  # a model with static shapes compiles as it loads
    session, shapes = _load_onnx(args)
    compiled = session.compiled(shapes)
    seconds = time.perf_counter() - start
    if what == "manifest":
        from .onnx.library import export_library
        described = export_library(compiled.library, compiled.constants, args.output,
                                   args.file, shapes)
        print(f"wrote {args.output} (entry polycomp_model_run, "
              f"{len(described['kernels_in_order'])} kernel calls, arena "
              f"{described['arena_bytes']} bytes), {args.output}.constants "
              f"({len(described['constants'])} constants) and {args.output}.json")
        return 0
    if what == "plan":
        text = format_plan(args.file, shapes, compiled, seconds)
    elif what == "asm-summary":
        from .inspection import inspect
        text = inspect(session, shapes=shapes).summary()
    else:
        text = emit_groups(compiled, what)
    return _write_or_print(text, args.output)


def _write_or_print(text: str, output: str | None) -> int:
    """``text`` into the file ``output`` (a final newline added), or to standard output."""
    if output:
        Path(output).write_text(text if text.endswith("\n") else text + "\n")
    else:
        print(text)
    return 0


def _describe(value) -> str:  # noqa: ANN001 - a graph Value
    return f"{_shown(value.name)} {value.dtype}{list(value.shape)}"


def format_plan(path: str, shapes, compiled, seconds: float) -> str:
    """The fusion groups in run order: nodes, the values going in (and the group array
    each binds) and coming out; the host view ops between them."""
    from .frontend.onnx.plan import HostStep

    graph = compiled.graph
    inputs = ", ".join(f"{_shown(k)}={'x'.join(map(str, v)) or 'scalar'}"
                       for k, v in shapes.items())
    lines = [f"{os.path.basename(path)} ({inputs}): {len(graph.nodes)} nodes in "
             f"{len(compiled.plan.groups)} groups, compiled in {seconds:.2f} s"]
    for step in compiled.plan.steps:
        if isinstance(step, HostStep):
            node = step.node
            lines.append(f"host {_shown(node.name)} ({node.op_type}): "
                         f"{', '.join(_shown(i) for i in node.inputs if i)} -> "
                         f"{', '.join(_shown(o) for o in node.outputs if o)}")
            continue
        nodes = ", ".join(f"{_shown(n.name)} ({n.op_type})" for n in step.nodes)
        lines.append(f"group {step.name}: {nodes}")
        for array, value in step.inputs:
            lines.append(f"    in   {array:4s} <- {_describe(graph.values[value])}"
                         + (" (constant)" if graph.values[value].const is not None else ""))
        for array, value in step.outputs:
            lines.append(f"    out  {array:4s} -> {_describe(graph.values[value])}")
        for value in step.empty_outputs:
            lines.append(f"    out  (empty) -> {_describe(graph.values[value])}")
    outs = ", ".join(_describe(graph.values[o]) for o in graph.outputs)
    lines.append(f"outputs: {outs}")
    return "\n".join(lines)


def emit_groups(compiled, what: str) -> str:
    """One stage of every group: its C, its schedule tree, or its Program."""
    from .driver import emit, format_program

    parts = []
    for step in compiled.plan.groups:
        nodes = ", ".join(f"{_shown(n.name)} ({n.op_type})" for n in step.nodes)
        parts.append(f"// ---- group {step.name}: {nodes}")
        if step.program is None:
            parts.append("// (no statements: its outputs are empty)")
            continue
        if what == "ir":
            parts.append(format_program(step.program))
        else:
            variant = compiled.kernels[step.name].specialize({}, build=False)
            parts.append(emit(variant.compiled, what))
    if what == "c":
        parts.append("// ---- the model's entry (one library holds it and every group above)")
        parts.append(compiled.library.source)
    return "\n".join(parts)


def _run_onnx(args: argparse.Namespace) -> int:
    import time

    import numpy as np

    from .testing import median_time, random_array

    if args.threads is not None:
        from .threads import set_num_threads
        set_num_threads(args.threads)
    start = time.perf_counter()
    session, shapes = _load_onnx(args)
    session.compiled(shapes)
    seconds = time.perf_counter() - start
    rng = np.random.default_rng(0)
    dtypes = {a.name: a.type[len("tensor("):-1] for a in session.get_inputs()}
    numpy_names = {"float": "float32", "double": "float64"}
    feed = {name: random_array(shape, numpy_names.get(dtypes[name], dtypes[name]), rng)
            for name, shape in shapes.items()}
    got = session.run(None, feed)
    names = [o.name for o in session.get_outputs()]
    shape_text = ", ".join(f"{_shown(k)}={'x'.join(map(str, v)) or 'scalar'}"
                           for k, v in shapes.items())
    head = f"{os.path.basename(args.file)} ({shape_text}) scheduler={session.options.scheduler}"
    ok, check, reference_seconds = True, "onnxruntime is not installed: results not checked", None
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    if onnxruntime is not None:
        try:
            so = onnxruntime.SessionOptions()
            if args.threads is not None:  # side by side: the same threads as polycomp's
                so.intra_op_num_threads = args.threads
            reference = onnxruntime.InferenceSession(args.file, so,
                                                     providers=["CPUExecutionProvider"])
            want = reference.run(None, feed)
        except Exception as exc:  # onnxruntime's own refusals: nothing to compare with
            check = f"onnxruntime cannot run the model ({str(exc).splitlines()[0][:200]}): " \
                    "results not checked"
        else:
            ok, check = compare_outputs(names, got, want)
            reference_seconds = median_time(lambda: reference.run(None, feed), args.repeat)
    latency = median_time(lambda: session.run(None, feed), args.repeat)
    groups = len(session.compiled(shapes).plan.groups)
    print(f"{head}: {check}")
    print(f"  compile {seconds:.2f} s ({groups} groups); time {latency * 1e3:.3f} ms "
          f"(median of {max(1, args.repeat)})"
          + (f", onnxruntime {reference_seconds * 1e3:.3f} ms"
             if reference_seconds is not None else ""))
    if args.profile:
        from .onnx.profile import profile_report
        from .threads import get_max_threads
        with open(args.file, "rb") as f:
            model = f.read()
        print(profile_report(session, model, feed, get_max_threads(),
                             repeat=max(1, args.repeat), compare=onnxruntime is not None))
    return 0 if ok else 1


def compare_outputs(names, got, want) -> tuple[bool, str]:
    """Whether polycomp's outputs match onnxruntime's, and the errors as text: floats
    within rtol 1e-3 and an atol of 1e-4 of the largest magnitude, others exactly."""
    import numpy as np

    bad, worst_abs, worst_rel = [], 0.0, 0.0
    for name, a, b in zip(names, got, want):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            bad.append(f"{_shown(name)} ({a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)})")
            continue
        if a.size == 0:
            continue
        if a.dtype.kind == "f":
            x, y = a.astype(np.float64), b.astype(np.float64)
            finite = np.isfinite(y)
            err = np.abs(x - y)
            err = np.where(np.isnan(x) & np.isnan(y), 0.0, err)
            err = np.where(~finite & (x == y), 0.0, err)
            scale = float(np.max(np.abs(y[finite]))) if finite.any() else 1.0
            worst_abs = max(worst_abs, float(np.max(err)))
            worst_rel = max(worst_rel, float(np.max(err / np.maximum(np.abs(y), 1e-30)
                                                    * (err > 0))))
            if not np.all(err <= 1e-3 * np.abs(y) + 1e-4 * max(scale, 1.0)):
                bad.append(_shown(name))
        elif not np.array_equal(a, b):
            bad.append(_shown(name))
            worst_abs = max(worst_abs, float(np.max(np.abs(a.astype(np.float64)
                                                            - b.astype(np.float64)))))
    errors = f"max abs error {worst_abs:.3g}, max rel error {worst_rel:.3g}"
    if bad:
        return False, f"DIFFERS from onnxruntime in {', '.join(bad)} ({errors})"
    return True, f"matches onnxruntime ({errors})"


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
