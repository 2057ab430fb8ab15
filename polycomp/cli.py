"""The ``polycomp`` command: compile, run, demo.

    polycomp compile FILE.tc [--entry NAME] [--emit c|schedule|deps|ir|ast|ranges]
                             [--scheduler S] [--sizes M=512,N=256] [--parametric] [-o OUT]
    polycomp run FILE.tc --sizes M=512,N=256 [--entry NAME] [--scheduler S] [--repeat N]
    polycomp demo

A user mistake prints the error (location, caret, hint) and exits with status 1, without
a traceback; ``--debug`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from .errors import InternalError, OptionError, PolycompError
from .options import SCHEDULERS, Options


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
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks of errors")

    p = sub.add_parser("compile", help="compile a program and print one stage of the result")
    common(p)
    p.add_argument("--emit", default="c", choices=["c", "schedule", "deps", "ir", "ast", "ranges"],
                   help="what to print: generated C (default), the schedule tree, the "
                        "dependences, the IR, isl's AST, or the inferred ranges (TC)")
    p.add_argument("--parametric", action="store_true",
                   help="keep sizes as C arguments (the default without --sizes)")
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


def load_definition(path: str, entry: str | None):
    """The frontend definition in ``path`` (by its suffix)."""
    text = _read(path)
    if path.endswith(".c"):
        from .frontend.loops import parse_c
        return parse_c(text, file=path).get(entry)
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

    definition = load_definition(args.file, args.entry)
    sizes = parse_sizes(args.sizes)
    if args.emit == "ranges":
        if not hasattr(definition, "explain_ranges"):
            raise OptionError("--emit ranges is for .tc files")
        text = definition.explain_ranges(sizes or None)
    else:
        parametric = args.parametric or not sizes
        options = Options.create(parametric=parametric, **scheduler_options(args))
        program = definition.lower(None if parametric else sizes)
        text = emit(compile_program(program, options), args.emit)
    if args.output:
        Path(args.output).write_text(text if text.endswith("\n") else text + "\n")
    else:
        print(text)
    return 0


def _run(args: argparse.Namespace) -> int:
    from .checking import run_and_check

    definition = load_definition(args.file, args.entry)
    report = run_and_check(definition, parse_sizes(args.sizes), repeat=args.repeat,
                           threads=args.threads, **scheduler_options(args))
    print(report)
    return 0 if report.ok else 1


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
