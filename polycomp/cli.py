"""The ``polycomp`` command: compile, run, demo.

    polycomp compile FILE.tc [--entry NAME] [--emit c|schedule|deps|ir|ast|ranges]
                             [--scheduler S] [--sizes M=512,N=256] [--parametric] [-o OUT]
    polycomp compile FILE.c [-I DIR] [-D NAME[=VALUE]] [--entry NAME] [-o OUT.c]
                             (the whole file back, its #pragma scop region optimised)
    polycomp run FILE.tc --sizes M=512,N=256 [--entry NAME] [--scheduler S] [--repeat N]
    polycomp compile MODEL.onnx [--shape NAME=1,3,224,224 ...] [--emit plan|c|schedule|ir]
                             [-o OUT.so]   (without --emit: the model as one library)
    polycomp run MODEL.onnx [--shape NAME=1,3,224,224 ...] [--sizes BATCH=8] [--repeat N]
                             (checked against onnxruntime when it is installed)
    polycomp demo

A user mistake prints the error (location, caret, hint) and exits with status 1, without
a traceback; ``--debug`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import json
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
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks of errors")

    p = sub.add_parser("compile", help="compile a program and print one stage of the result")
    common(p)
    p.add_argument("--emit", default=None,
                   choices=["file", "c", "schedule", "deps", "ir", "ast", "ranges", "plan"],
                   help="what to print: the whole C file with its #pragma scop region "
                        "optimised (default for .c), the generated C (default for .tc), the "
                        "schedule tree, the dependences, the IR, isl's AST, or the inferred "
                        "ranges (TC); for an .onnx model: plan (the fusion groups, their "
                        "nodes, input and output values, and the host view ops between them; "
                        "the default), or c, schedule or ir of every group")
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
    p.set_defaults(handler=_run)

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
    from .driver import compile_program, emit

    if is_onnx(args.file):
        return _compile_onnx(args)
    _no_shapes(args)
    is_c = args.file.endswith(".c")
    what = args.emit or ("file" if is_c else "c")
    if what == "file" and not is_c:
        raise OptionError("--emit file is for .c files")
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
        options = Options.create(parametric=parametric, **scheduler_options(args))
        with _time_limit(args.time_limit if parametric else 0):
            program = definition.lower(None if parametric else sizes)
            compiled = compile_program(program, options)
        if what == "file":
            from .frontend.loops.splice import splice
            text = splice(definition, compiled.source, None if parametric else sizes,
                          note=f" (scheduler={options.scheduler})")
        else:
            text = emit(compiled, what)
    if args.output:
        Path(args.output).write_text(text if text.endswith("\n") else text + "\n")
    else:
        print(text)
    return 0


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
        return _run_onnx(args)
    _no_shapes(args)
    definition = load_definition(args.file, args.entry, args.include, args.define)
    report = run_and_check(definition, parse_sizes(args.sizes), repeat=args.repeat,
                           threads=args.threads, **scheduler_options(args))
    print(report)
    return 0 if report.ok else 1


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
    if what not in ("plan", "c", "schedule", "ir", "manifest"):
        raise OptionError(f"--emit {what} is not for .onnx models",
                          hint="choose plan, c, schedule or ir")
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
    else:
        text = emit_groups(compiled, what)
    if args.output:
        Path(args.output).write_text(text if text.endswith("\n") else text + "\n")
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
            reference = onnxruntime.InferenceSession(args.file,
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
