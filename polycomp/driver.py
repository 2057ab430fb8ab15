"""The pipeline: Program -> Dependences -> schedule tree -> Source, one pure call each.

``compile_program`` runs the stages in order and checks the schedule against the
dependences before any code is generated: a schedule *we* produced that fails is an
InternalError (a bug, reported loudly), never silently repaired. The stages after
scheduling and tiling are the target's (Options.target, polycomp/targets/): its passes
(through scheduler/passes.py), the marks it prints, its annotations after the check and
its code generator. ``emit`` renders any stage as text for ``polycomp compile --emit``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import islpy as isl

from .codegen.source import Source
from .codegen.verify import ASTRejected
from .errors import IllegalScheduleError, InternalError
from .ir import Program, format_statement
from .options import Options, configure_isl
from .scheduler import Dependences, compute_dependences, get_scheduler
from .scheduler.budget import SchedulerFallbackWarning, call_in_time_limit
from .scheduler.contraction import contract_temporaries
from .scheduler.expansion import expand_scalars
from .scheduler.inlining import inline_pointwise
from .scheduler.legality import check_schedule
from .scheduler.original import schedule_original
from .scheduler.panels import block_and_pack, packs_panels
from .scheduler.passes import run_passes
from .scheduler.reciprocals import hoist_reciprocals
from .scheduler.reductions import relax_reductions
from .scheduler.short_sums import write_out_short_sums
from .scheduler.stripmining import strip_mine_blocked
from .scheduler.tree import dump, from_portable, to_portable
from .targets import get_target

EMITS = ("c", "schedule", "deps", "ir", "ast")


@dataclass(frozen=True, eq=False)
class Compiled:
    """Everything the pipeline produced for one (specialised or parametric) Program."""

    program: Program
    dependences: Dependences
    schedule: isl.Schedule
    source: Source

    def to_portable(self) -> tuple[Program, Dependences, tuple[str, tuple], Source]:
        """What pickles and reads back as the same Compiled (``from_portable``; the
        compile cache stores it): the tree as text plus its marks' ids
        (scheduler/tree.to_portable)."""
        return self.program, self.dependences, to_portable(self.schedule), self.source

    @staticmethod
    def from_portable(portable: tuple[Program, Dependences, tuple[str, tuple], Source]
                      ) -> Compiled:
        program, deps, schedule, source = portable
        return Compiled(program, deps, from_portable(*schedule), source)


def schedule_program(program: Program, deps: Dependences, options: Options) -> isl.Schedule:
    """The scheduler's tree plus the decision passes (scheduler/passes.py: tiling, then
    the target's)."""
    configure_isl()
    schedule = get_scheduler(options.scheduler)(program, deps, options)
    return run_passes(schedule, program, deps, options)


def analyze_program(program: Program, options: Options) -> tuple[Program, Dependences]:
    """The program as the scheduler sees it (channel blocking, inlining, strip-mining,
    scalar expansion, as ``options`` ask) and its dependences, reductions relaxed."""
    target = get_target(options.target)
    program.validate()
    if options.block_channels and target.packs_channels and \
            options.scheduler not in ("none", "custom"):
        program = block_and_pack(program, packs_panels(options))
    if options.scheduler not in ("none", "custom"):
        program = write_out_short_sums(program)  # after blocking: in its layout
        program = inline_pointwise(program)  # after blocking: its unpack is inlined too
        program = strip_mine_blocked(program)
    if options.expand_scalars and options.scheduler != "none":
        program = expand_scalars(program)
    if not options.exact_fp:
        program = hoist_reciprocals(program)
    return program, relax_reductions(program, compute_dependences(program), options.exact_fp)


def compile_program(program: Program, options: Options) -> Compiled:
    target = get_target(options.target)
    program, deps = analyze_program(program, options)
    schedule = schedule_program(program, deps, options)
    try:
        target.check_marks(schedule)
        check_schedule(schedule, deps)
    except IllegalScheduleError as exc:
        if options.scheduler == "custom":
            raise  # the user's schedule: their error, with the broken dependence named
        raise InternalError(f"scheduler '{options.scheduler}' produced an illegal schedule for "
                            f"'{program.name}': {exc.message}") from exc
    schedule = target.annotate(schedule, program, deps, options)
    try:
        contracted, marked = contract_temporaries(program, schedule)
        source = generate_in_time_limit(contracted, marked, options, deps)
        program, schedule = contracted, marked
    except ASTRejected as exc:
        # no AST of the optimised schedule was shown right (isl's generator lost instances
        # or checking it took too long): the original order, untiled and unmarked, is
        # always legal and its AST simple (if even that is rejected, the error stands)
        warnings.warn(f"{exc}; '{program.name}' compiled in the original loop order instead",
                      SchedulerFallbackWarning, stacklevel=4)
        schedule = schedule_original(program, deps, options)
        source = generate_in_time_limit(program, schedule, options, deps)
    return Compiled(program, deps, schedule, source)


# seconds code generation (isl's AST, its check, the C) may take: PolyBench at LARGE needs
# a few; isl's AST generator ran for minutes on a 15-line tiled nest (fuzz 9595:1333)
CODEGEN_SECONDS = 40.0


def generate_in_time_limit(program: Program, schedule: isl.Schedule, options: Options,
                           deps: Dependences) -> Source:
    """The target's code generator in a forked child under CODEGEN_SECONDS (isl's
    operation budget does not stop its AST generator); past it, ASTRejected."""
    target = get_target(options.target)
    try:
        source = call_in_time_limit(
            lambda: target.generate(program, schedule, options, deps.all()), CODEGEN_SECONDS)
    except TimeoutError:
        raise ASTRejected(f"codegen: generating the code of '{program.name}' took more than "
                          f"{CODEGEN_SECONDS:g} s") from None
    return source  # type: ignore[return-value]


def format_program(program: Program) -> str:
    lines = [f"program {program.name}"]
    if program.params:
        lines.append(f"  params: {', '.join(program.params)}   context: {program.context}")
    if program.sizes:
        lines.append("  sizes: " + ", ".join(f"{k}={v}" for k, v in program.sizes))
    for s in program.scalars:
        lines.append(f"  scalar {s.dtype} {s.name}")
    for a in program.arrays:
        shape = ", ".join(str(pa).split("->")[-1].strip(" {}[]()") for pa in a.shape)
        lines.append(f"  {a.role:9s} {a.dtype} {a.name}({shape})")
    for s in program.statements:
        lines.append(f"  {format_statement(s)}")
        lines.append(f"      domain {s.domain}")
    lines.append(f"  original schedule {program.original_schedule}")
    return "\n".join(lines)


def emit(compiled: Compiled, what: str) -> str:
    """One stage as text: c, schedule (hyperplanes per statement, what each band member
    carries, then the tree as block YAML), deps, ir, ast (isl's own C)."""
    if what == "c":
        return compiled.source.text
    if what == "schedule":
        from .scheduler.custom import SCHEDULE_TREE_HEADING
        from .scheduler.describe import describe_schedule
        return (describe_schedule(compiled.schedule, compiled.dependences)
                + f"\n\n{SCHEDULE_TREE_HEADING}\n" + dump(compiled.schedule))
    if what == "deps":
        return str(compiled.dependences)
    if what == "ir":
        return format_program(compiled.program)
    if what == "ast":
        from .codegen.ast import build_ast
        return build_ast(compiled.program, compiled.schedule,
                         compiled.dependences.all()).to_C_str()
    raise ValueError(what)
