"""The ``polycomp`` command: compile, run, demo.

    polycomp compile FILE.tc [--entry NAME] [--emit c|schedule|deps|ir|ast|ranges]
                             [--scheduler S] [--sizes M=512,N=256] [--parametric] [-o OUT]
    polycomp compile FILE.c [-I DIR] [-D NAME[=VALUE]] [--entry NAME] [-o OUT.c]
                             (the whole file back, its #pragma scop region optimised)
    polycomp run FILE.tc --sizes M=512,N=256 [--entry NAME] [--scheduler S] [--repeat N]
    polycomp demo

A user mistake prints the error (location, caret, hint) and exits with status 1, without
a traceback; ``--debug`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import os
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
        print(str(exc), file=sys.stderr)
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polycomp", description="A polyhedral auto-scheduling compiler: Tensor "
        "Comprehensions and affine C loop nests in, scheduled OpenMP C out.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("file", help="a .tc (Tensor Comprehensions) or .c (affine loop nest) file")
        p.add_argument("--entry", help="which def (or C function) to compile, if the file has several")
        p.add_argument("--scheduler", default=None, choices=SCHEDULERS,
                       help="none (original order), isl (isl's scheduler), pluto (polycomp's "
                            "Pluto-style scheduler) or custom (with --schedule); default "
                            f"{Options.scheduler}, or custom when --schedule is given")
        p.add_argument("--schedule", metavar="FILE",
                       help="your own schedule for --scheduler custom: an isl schedule tree "
                            "(an edited `--emit schedule` printout) or a union map; it is "
                            "checked against the dependences")
        p.add_argument("--sizes", default="", help="sizes as NAME=VALUE,NAME=VALUE")
        p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                       help="C files: an include directory for the preprocessor")
        p.add_argument("-D", dest="define", action="append", default=[],
                       metavar="NAME[=VALUE]", help="C files: a macro for the preprocessor")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks of errors")

    p = sub.add_parser("compile", help="compile a program and print one stage of the result")
    common(p)
    p.add_argument("--emit", default=None,
                   choices=["file", "c", "schedule", "deps", "ir", "ast", "ranges"],
                   help="what to print: the whole C file with its #pragma scop region "
                        "optimised (default for .c), the generated C (default for .tc), the "
                        "schedule tree, the dependences, the IR, isl's AST, or the inferred "
                        "ranges (TC)")
    p.add_argument("--parametric", action="store_true",
                   help="keep sizes as C arguments (the default without --sizes; for a whole "
                        ".c file the default is the sizes its harness passes, when constant)")
    p.add_argument("--time-limit", type=float, default=PARAMETRIC_TIME_LIMIT, metavar="S",
                   help="give up a parametric compile after S seconds (default "
                        f"{PARAMETRIC_TIME_LIMIT:g}; 0: no limit)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
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

    definition = load_definition(args.file, args.entry, args.include, args.define)
    report = run_and_check(definition, parse_sizes(args.sizes), repeat=args.repeat,
                           threads=args.threads, **scheduler_options(args))
    print(report)
    return 0 if report.ok else 1


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
