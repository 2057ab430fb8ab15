"""The OpenMP dialect of the C-family printer: the ``Source`` of one kernel for CPUs.

Place in the pipeline: the code generator of the ``openmp`` target
(polycomp/targets/openmp.py), after the schedule is checked. Input: a Program, its
schedule tree (with marks), Options, the dependences the schedule was checked against.
Output: a C translation unit with the entry of codegen/c.py (``CPrinter``), which prints
statements, loops and arrays; this module adds what the marks mean in OpenMP.

A loop under a ``parallel`` mark gets ``#pragma omp parallel for``; its body, when it
holds loops, is outlined into a ``static`` noipa (clang: noinline) function that takes
the arrays as ``restrict`` parameters again (gcc drops ``restrict`` in the function it
outlines for an OpenMP region, and without it cannot keep values in registers across the
jammed statements of a register tile; noipa because gcc 12.2 deleted calls to a noinline
body). A body of statements only stays inline, where gcc can vectorise the loop. A loop
under a ``vector`` mark gets ``#pragma omp simd``, with ``simdlen(n)`` when the mark's id
carries the lane count n (scheduler/intratile.py); the statements the mark names as
reductions along the loop (scheduler/reductions.py) accumulate in a local under
``reduction(op: local)``, and a nest's reduction targets above a vector loop may live in
local arrays (registers: codegen/promote.py). A status set inside parallel code is an
``omp atomic write``. The <math.h> functions that libmvec has vector forms of are
declared with the simd attribute, each under a macro the build defines only where the
system has them.

One region around a sequential loop. A time loop or a wavefront around a parallel loop
would fork and join a thread team at each of its iterations; when nothing but loops,
ifs and parallel loops lies between the outermost such sequential loop and the parallel
loops below it (no statement that every thread would run redundantly), the team is
started once around it and each parallel loop becomes a worksharing loop:

    for (long c0 = 0; c0 <= 4; c0 += 1)             #pragma omp parallel
    {                                               {
      #pragma omp parallel for                        for (long c0 = 0; c0 <= 4; c0 += 1)
      for (long c1 = 1; c1 <= 38; c1 += 1)   ->       {
        S0(c0, c1);                                     #pragma omp for
      #pragma omp parallel for                          for (long c1 = 1; c1 <= 38; c1 += 1)
      for (long c1 = 1; c1 <= 38; c1 += 1)                S0(c0, c1);
        S1(c0, c1);                                     #pragma omp for
    }                                                   for (long c1 = 1; c1 <= 38; c1 += 1)
                                                          S1(c0, c1);
                                                      }
                                                    }

Every thread runs the sequential loops' control itself (iterators declared in the
``for`` are private; bounds and conditions read only sizes and outer iterators, so all
threads meet the same worksharing loops in the same order), and the barrier that ends
each ``omp for`` keeps the order the region-per-iteration form had. ``polycomp_status``
is declared before the region, so it is shared; its writes stay atomic.

Tiles that start from the constant. A vector register tile loads its targets before its
reduction loops. Where the only other writer of a target is a constant initialisation
that runs before every update (a conv's or matmul's zeros, a max pool's -inf:
scheduler/blocking.py's constant_init) and one run of the tile runs every update of its
elements (promote.runs_every_update: the reduction is not cut into tiles outside it), the
targets hold that constant when the tile starts, and the tile sets its vector variables
to it instead (``_start_value``). When every call of such a reduction is printed in such
tiles, no one reads what the initialisation writes before a tile overwrites it, so
``generate_openmp`` prints the kernel a second time with the initialisation's calls as
empty statements (``dead_inits``): the zero-fill pass over the output goes. The AST
check (codegen/verify.py) has run on the full AST before; this reasoning is what covers
the calls left out. ResNet-50's 1x1 convs over 64 channels at 56 x 56 on AVX-512 loaded
and wrote 401 KB of zeros per tile from L2 (the model: 56.2 -> 54.5 ms at 1 thread).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import cgen as c
import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import InternalError
from polycomp.ir import Program, Statement
from polycomp.options import Options
from polycomp.scheduler import register_tile as RT  # the taps it unrolls
from polycomp.scheduler import tree as T  # mark names
from polycomp.scheduler.blocking import constant_init  # a reduction's constant start

from . import promote, vector_tile
from . import verify as V
from .ast import build_ast
from .c import (STATUS, CPrinter, declarator, entry_arguments, entry_name, has_loop,
                mark_user, marked_loop)
from .cexpr import CTYPES, PRIMARY, VECTOR_MATH, Helpers, Text, constant
from .names import c_name
from .source import CArgument, Source

node_type = isl.ast_node_type

PRELUDE = """#include <stdbool.h>
#include <stdint.h>
#include <math.h>"""

# what each loop mark is in OpenMP (a parallel loop inside a team: "omp for")
PRAGMAS = {T.MARK_PARALLEL: "omp parallel for", T.MARK_VECTOR: "omp simd"}
# OpenMP reduction identifiers of the reductions a simd loop may accumulate
REDUCTION_CLAUSE = {"+": "+", "*": "*", "max": "max", "min": "min"}

# The attribute of outlined parallel-loop bodies. noinline alone is not enough for gcc
# 12.2: its ipa-pure-const/modref analysis judged such a body free of side effects and
# deleted the calls (-O1 and up; reliability/gcc12_ipa_pure_const.c). noipa (gcc >= 8)
# keeps every interprocedural analysis away from it; clang has no noipa (it warns and
# ignores unknown attributes) and keeps the calls with noinline.
OUTLINED_MACRO = """#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define POLYCOMP_OUTLINED __attribute__((noipa))
#else
#define POLYCOMP_OUTLINED __attribute__((noinline))
#endif"""
OUTLINED = "POLYCOMP_OUTLINED"


def optimize_macros(prefix: str, option: str) -> str:
    """``<prefix>_BEGIN`` and ``<prefix>_END``: around a function, gcc compiles it with
    ``-f<option>`` added to the command line's options (push/pop_options); empty for
    other compilers."""
    return (f"#if defined(__GNUC__) && !defined(__clang__)\n"
            f"#define {prefix}_BEGIN _Pragma(\"GCC push_options\") \\\n"
            f"  _Pragma(\"GCC optimize (\\\"{option}\\\")\")\n"
            f"#define {prefix}_END _Pragma(\"GCC pop_options\")\n"
            f"#else\n#define {prefix}_BEGIN\n#define {prefix}_END\n#endif")


# Around each function that holds a vector register tile: gcc without predictive
# commoning there. Where a tile's rows run along a member that an enclosing reduction
# loop moves its broadcasts along too (a conv's output rows under the filter's kh),
# predcom carries the rows' scalars from one iteration to the next, and with them the
# tile's accumulators no longer fit the registers: ResNet-50's 3x3 conv at 28 x 28,
# 2 blocks x 5 rows, ran 5.2 ms with it and 3.0 ms without (AVX2, one core; the
# 1x1 convs and pools alike either way). The command line's options stay in force.
TILES_MACRO = optimize_macros("POLYCOMP_TILES", "no-predictive-commoning")
TILES_BEGIN, TILES_END = "POLYCOMP_TILES_BEGIN", "POLYCOMP_TILES_END"
# Around each function where one innermost loop body fills an array unconditionally
# and stores to it again under a guard (a padded copy that isl did not separate from its
# zero fill:
# `P[..] = 0; if (1 <= i <= 3 && j <= 1) P[..] = X[..]`): gcc without loop
# if-conversion there. gcc 12.2 turned the guarded store into masked loads and stores,
# vectorised the row loop and lost rows (-mavx2, -march=skylake and znver2 alike; with
# VRP on it also gave two rows one mask, polycomp/build.py). Only these functions: off
# everywhere, it cost ResNet-50 8 % (the guarded epilogues of its convs ran scalar).
REWRITE_MACRO = optimize_macros("POLYCOMP_GUARDED_REWRITE", "no-tree-loop-if-convert")
REWRITE_BEGIN, REWRITE_END = "POLYCOMP_GUARDED_REWRITE_BEGIN", "POLYCOMP_GUARDED_REWRITE_END"


def generate_openmp(program: Program, schedule: isl.Schedule, options: Options,
                    ordered: isl.UnionMap) -> Source:
    """The C file for ``schedule``; ``ordered``, the dependences the schedule was checked
    against, is what its AST must keep forward (codegen/verify.py)."""
    names = {p: c_name(p) for p in program.params}
    arguments = entry_arguments(program)
    scratch = [a for a in program.arrays if a.role == "scratch"]
    ast = build_ast(program, schedule, ordered, simplify_indices=True)

    def print_kernel(dead_inits: frozenset[str]
                ) -> tuple[OpenMPPrinter, Helpers, c.FunctionBody, bool]:
        helpers = Helpers()
        printer = OpenMPPrinter(program, names, helpers)
        printer.outline_arguments = arguments + tuple(
            CArgument("array", a.name, CTYPES[a.dtype], a.dtype) for a in scratch)
        printer.dead_inits = dead_inits
        return (printer, helpers, *printer.entry(ast, arguments, scratch))

    printer, helpers, function, heap = print_kernel(frozenset())
    dead = frozenset(printer.constant_init(name).name  # type: ignore[union-attr]
                     for name in printer.printed - printer.loaded)
    if dead:  # every update runs in a tile that starts from the constant: print again
        printer, helpers, function, heap = print_kernel(dead)
    entry = (printer.register_tiles > printer.outlined_tiles,
             printer.guarded_rewrites > printer.outlined_rewrites)
    # user text in a comment is escaped too: a name holding `*/` would end the comment
    header = (f"/* {c_name(program.name)}: generated by polycomp "
              f"(scheduler={c_name(options.scheduler)}) */")
    parts = [header, PRELUDE + ("\n#include <stdlib.h>" if heap else "")]
    vector_math = sorted(helpers.math & set(VECTOR_MATH))
    if vector_math and not options.exact_fp:  # exact_fp: the scalar functions' rounding
        parts.append(vector_math_declarations(vector_math))
    if helpers.used:
        parts.append(helpers.text())
    if printer.outlined:
        parts.append(OUTLINED_MACRO)
    if printer.register_tiles:
        parts.append(TILES_MACRO)
    if printer.guarded_rewrites:
        parts.append(REWRITE_MACRO)
    parts += [_with_pragmas(f, *flags) for f, flags in printer.outlined]
    parts.append(_with_pragmas(function, *entry))
    text = "\n\n".join(parts).replace("(void )", "(void)") + "\n"
    return Source(text, "c", entry_name(program), arguments)


def vector_math_declarations(names: list[str]) -> str:
    """``float expf(float) __attribute__((simd))`` for each function, each under the
    macro the build defines when libmvec has its vector forms (glibc 2.22/2.35)."""
    lines = ["/* glibc's libmvec: simd loops call the vector forms of these */"]
    for name in names:
        ctype = "float" if name.endswith("f") else "double"
        params = ", ".join([ctype] * VECTOR_MATH[name])
        lines += [f"#ifdef POLYCOMP_MVEC_{name}",
                  f'{ctype} {name}({params}) __attribute__((__simd__("notinbranch")));',
                  "#endif"]
    return "\n".join(lines)


class OpenMPPrinter(CPrinter):
    """CPrinter with the OpenMP meaning of the marks (module doc)."""

    def __init__(self, program: Program, names: dict[str, str], helpers: Helpers):
        super().__init__(program, names, helpers)
        # bodies of parallel loops, each with whether it holds a vector register tile
        # and whether a loop body in it fills an array and stores to it under a guard
        self.outlined: list[tuple[c.FunctionBody, tuple[bool, bool]]] = []
        self.register_tiles = 0  # vector register tiles printed, and those outlined
        self.outlined_tiles = 0
        self.guarded_rewrites = 0  # such loop bodies printed, and those outlined
        self.outlined_rewrites = 0
        # inside an `omp parallel` region around a sequential loop, outside any parallel
        # loop: a parallel mark then prints a worksharing `omp for`
        self.in_region = False
        self.in_parallel_loop = False  # in a parallel loop's body: never another region
        self.outline_arguments: tuple[CArgument, ...] = ()
        # in a simd loop: its iterator, and target text -> (local, C type, reduction op)
        self.vector_loop: str | None = None
        self.vector_reductions: frozenset[str] = frozenset()
        self.vector_guarded = 0  # ifs and loops entered inside the simd loop's body
        self.vector_unsafe = False  # a reduction along it sits under one of them
        self.accumulators: dict[str, tuple[str, str, str]] = {}
        self.n_accumulators = 0
        # in a nest whose reduction targets live in locals (codegen/promote.py): the nest,
        # and target text -> (local, C type)
        self.promotion: promote.Nest | None = None
        self.promoted: dict[str, tuple[str, str]] = {}
        self.n_promoted = 0
        # a promoted nest printed as a vector register tile (codegen/vector_tile.py): the
        # lanes per vector (None: local arrays) and the lane chunk being printed
        self.tile_lanes: int | None = None
        self.tile_chunk = 0
        self.tile_part: int | None = None  # the lanes of a partial last chunk
        self.tile_marked = False  # printing the tile's innermost loop (its marker is out)
        # reductions with a constant initialisation (scheduler/blocking.py's
        # constant_init): those printed anywhere but in a tile that starts from the
        # constant (``loaded``: they read what the initialisation wrote), whether the
        # tile being printed starts so, and the initialisations left out of the text
        # (``dead_inits``: generate_openmp's second printing; module doc)
        self.loaded: set[str] = set()
        self.printed: set[str] = set()
        self.from_constant = False
        self.dead_inits: frozenset[str] = frozenset()
        self._inits: dict[str, Statement | None] = {}

    def _for_node(self, node: isl.AstNode) -> c.Generable:
        if not (self.in_region or self.in_parallel_loop) and shares_one_region(node):
            return self._region(node)
        return self._for(node)

    def _if(self, node: isl.AstNode) -> c.Generable:
        self.vector_guarded += 1  # what runs under it runs only where it holds
        try:
            return super()._if(node)
        finally:
            self.vector_guarded -= 1

    def _region(self, node: isl.AstNode) -> c.Generable:
        """The sequential loop ``node`` inside one ``omp parallel`` region (module doc)."""
        self.in_region = True
        try:
            loop = self._for(node)
        finally:
            self.in_region = False
        return c.Collection([c.Pragma("omp parallel"), c.Block([loop])])

    def _for(self, node: isl.AstNode, pragma: str | None = None,
             body: Callable[[], c.Generable] | None = None, *,
             outline: bool = False) -> c.Generable:
        if pragma is None and not outline and self.promotion is None:
            nest = promote.promotable(node, self.program, self.statements, self.scope,
                                      self.vector_reductions)
            if nest is not None:
                promoted = self._promoted(node, nest)
                if promoted is not None:
                    return promoted
        it = node.for_get_iterator().get_id().get_name()
        if (self.tile_lanes is not None and not self.tile_marked and pragma is None
                and body is None and it == _iterator(self.promotion.loops[-1])):
            # the tile's innermost reduction loop, for polycomp/machine_code.py to judge
            self.tile_marked = True
            try:
                loop = self._for(node)
            finally:
                self.tile_marked = False
            self.register_tiles += 1
            trips = _constant_trips(node)
            if trips is not None and 1 < trips <= RT.UNROLLED_TAPS:
                # a window's few taps (a 3x3 conv's kw): unrolled, their loads become one
                # base address plus displacements and the loop's branch is gone (a 3x3
                # NCHWc conv, 3 blocks x 7 pixels: 25.5 -> 20.9 ms on one core)
                return c.Collection([c.Pragma(f"GCC unroll {trips}"),
                                     c.Line(vector_tile.MARKER), loop])
            return c.Collection([c.Line(vector_tile.MARKER), loop])
        if rewrites_under_guard(node.for_get_body(), self.statements):
            self.guarded_rewrites += 1
        # below a parallel loop every thread runs its own iterations: no worksharing there
        saved = self.in_region, self.in_parallel_loop
        if pragma is not None and not pragma.startswith("omp simd"):
            self.in_region, self.in_parallel_loop = False, True
        inner = self.vector_loop is not None and it != self.vector_loop
        self.vector_guarded += inner  # a loop inside a simd loop may run no iteration
        if outline:
            body = lambda: self._outline(node.for_get_body())  # noqa: E731
        try:
            return super()._for(node, pragma, body)
        finally:
            self.in_region, self.in_parallel_loop = saved
            self.vector_guarded -= inner

    def _loop_mark(self, name: str, mark: isl.Id, loop: isl.AstNode) -> c.Generable:
        if name not in PRAGMAS:
            return super()._loop_mark(name, mark, loop)
        pragma = PRAGMAS[name]
        if name == T.MARK_VECTOR and self.promotion is not None and \
                _iterator(loop) == self.promotion.iterator and self.tile_lanes is not None:
            return self._lane_chunks(loop)
        if name == T.MARK_VECTOR:
            return self._vector_for(loop, pragma + simdlen(mark), vector_reductions(mark))
        if self.in_region:
            pragma = "omp for"  # the team exists already (_region)
        # a body without loops stays inline: a call per iteration would keep gcc from
        # vectorising the parallel loop (atax: one call per element of y)
        return self._for(loop, pragma, outline=has_loop(loop.for_get_body()))

    def _vector_for(self, node: isl.AstNode, pragma: str,
                    reductions: frozenset[str]) -> c.Generable:
        """A simd loop. The ``reductions`` (statements that reduce along it:
        scheduler/reductions.py annotated the mark, legality.vector_reduction_ok allowed
        it) have their target read into a local before the loop, updated there under
        ``reduction(op: local)``, and stored after it."""
        saved = (self.vector_loop, self.accumulators, self.vector_reductions,
                 self.vector_guarded, self.vector_unsafe)
        iterator = node.for_get_iterator().get_id().get_name()
        self.vector_loop = iterator
        self.accumulators = {}
        self.vector_reductions = reductions
        self.vector_guarded, self.vector_unsafe = 0, False
        try:
            loop = self._for(node, pragma)
            accumulators, unsafe = self.accumulators, self.vector_unsafe
        finally:
            (self.vector_loop, self.accumulators, self.vector_reductions,
             self.vector_guarded, self.vector_unsafe) = saved
        if unsafe:
            # a reduction along the loop under a guard inside it: its target may not
            # exist where the guard fails, so it cannot be loaded before the loop; the
            # loop stays scalar (a simd loop would carry the reduction through memory)
            return self._for(node)
        if not accumulators:
            return loop
        clauses = " ".join(f"reduction({REDUCTION_CLAUSE[op]}:{name})"
                           for name, _, op in accumulators.values())
        pragma_line, for_loop = loop.contents
        # the targets are loaded and stored only when the loop runs at least once
        first = self._expr(node.for_get_init()).at(PRIMARY)
        runs = re.sub(rf"\b{re.escape(iterator)}\b", first, self._expr(node.for_get_cond()).code)
        return c.If(runs, c.Block(
            [c.Line(f"{ctype} {name} = {target};")
             for target, (name, ctype, _) in accumulators.items()]
            + [c.Pragma(f"{pragma} {clauses}"), for_loop]
            + [c.Statement(f"{target} = {name}")
               for target, (name, _, _) in accumulators.items()]))

    def _promoted(self, node: isl.AstNode, nest: promote.Nest) -> c.Generable | None:
        """The nest at ``node`` with its reduction targets in registers, loaded before it
        and stored after it (codegen/promote.py): named vector variables where
        codegen/vector_tile.py can print the nest as a register tile, else local arrays;
        None when the targets' texts do not match promote's count of distinct targets
        (then nothing is promoted)."""
        lanes = vector_tile.lanes([self.statements[s] for s in nest.statements],
                                  nest.first, nest.last)
        if lanes is not None:
            try:
                return self._promoted_as(node, nest, lanes)
            except vector_tile.NotVector:
                pass  # the same nest with local arrays
        return self._promoted_as(node, nest, None)

    def _promoted_as(self, node: isl.AstNode, nest: promote.Nest,
                     lanes: int | None) -> c.Generable | None:
        initial = self._start_value(node, nest) if lanes is not None else None
        saved = (self.promotion, self.promoted, self.n_promoted, self.tile_lanes,
                 self.from_constant)
        self.promotion, self.promoted, self.tile_lanes = nest, {}, lanes
        self.from_constant = initial is not None
        try:
            loop = self._for(node)
            promoted = self.promoted
        finally:
            (self.promotion, self.promoted, self.n_promoted, self.tile_lanes,
             self.from_constant) = saved
        if len(promoted) != nest.targets:
            return None
        self.n_promoted += len(promoted)
        it, first, last = nest.iterator, nest.first, nest.last
        # the targets are touched only when the nest runs at least once; its loops'
        # bounds depend on the loops around it only (promote.py)
        runs = " && ".join(
            re.sub(rf"\b{re.escape(loop.for_get_iterator().get_id().get_name())}\b",
                   self._expr(loop.for_get_init()).at(PRIMARY),
                   self._expr(loop.for_get_cond()).code) for loop in nest.loops)
        if lanes is not None:
            return self._tile_block(nest, promoted, lanes, runs, loop, initial)
        lanes_loop = f"for (long {it} = {first}; {it} <= {last}; {it} += 1)"
        load = " ".join(f"{local}[{it} - {first}] = {target};"
                        for target, (local, _) in promoted.items())
        store = " ".join(f"{target} = {local}[{it} - {first}];"
                         for target, (local, _) in promoted.items())
        return c.Block(
            [c.Line(f"{ctype} {local}[{last - first + 1}];") for local, ctype in promoted.values()]
            + [c.If(runs, c.Line(f"{lanes_loop} {{ {load} }}")), loop,
               c.If(runs, c.Line(f"{lanes_loop} {{ {store} }}"))])

    def _start_value(self, node: isl.AstNode, nest: promote.Nest) -> str | None:
        """The constant every target of the nest at ``node`` holds when the nest starts,
        or None where that is not proved: the one other writer of each target sets it to
        that constant (scheduler/blocking.py's constant_init: a conv's zeros, a max
        pool's -inf), and the nest runs every update of its elements
        (promote.runs_every_update), so none ran before it. Its tile then starts from
        the constant instead of loading it: on AVX-512, a 1x1 conv of ResNet-50 at
        56 x 56 (64 -> 256 channels) loaded 401 KB of zeros per tile from L2."""
        values = set()
        for name in nest.statements:
            init = self.constant_init(name)
            if init is None:
                return None
            value = init.expr.value  # type: ignore[attr-defined]
            values.add((value, self.statements[name].target.dtype))
        if len(values) != 1 or not promote.runs_every_update(
                node, nest, self.program, self.statements, self.scope):
            return None
        return constant(*values.pop()).code

    def constant_init(self, name: str) -> Statement | None:
        """The statement that sets the target of reduction ``name`` to a constant before
        it (scheduler/blocking.py), computed once per statement."""
        if name not in self._inits:
            stmt = self.statements[name]
            self._inits[name] = (constant_init(self.program, stmt)
                                 if stmt.reduction is not None else None)
        return self._inits[name]

    def _user(self, call: isl.AstExpr) -> c.Generable:
        name = call.get_op_arg(0).get_id().get_name()
        if name in self.dead_inits:  # an empty statement: a loop's body may be just this
            return c.Line(";")
        if self.constant_init(name) is not None:
            self.printed.add(name)
            if not self.from_constant:
                self.loaded.add(name)
        return super()._user(call)

    def _tile_block(self, nest: promote.Nest, promoted: dict[str, tuple[str, str]],
                    lanes: int, runs: str, loop: c.Generable,
                    initial: str | None = None) -> c.Generable:
        """A vector register tile: a vector variable per target and lane chunk, loaded
        before the nest and stored after it (codegen/vector_tile.py); set to ``initial``
        instead of loaded where the targets are known to hold that constant."""
        dtype = self.statements[next(iter(nest.statements))].target.dtype
        vtype, load, store = vector_tile.vector_type(dtype, lanes, self.helpers)
        chunks = vector_tile.chunks(nest.first, nest.last, lanes)
        it = nest.iterator
        names = [f"{local}_{j}" for local, _ in promoted.values() for j in range(len(chunks))]
        loads, stores = [], []
        for j, (start, count) in enumerate(chunks):
            lane = f"const long {it} = {start};"
            if count is None:
                get, put, tail = load, store, ""
            else:
                (get, put), tail = vector_tile.partial(dtype, lanes, self.helpers), f", {count}"
            if initial is not None:  # a splat: a scalar operand broadcasts
                loads.append(c.Line(" ".join(f"{local}_{j} = ({vtype}){{0}} + ({initial});"
                                             for local, _ in promoted.values())))
            else:
                loads.append(c.Line("{ " + lane + " " + " ".join(
                    f"{local}_{j} = {get}(&{target}{tail});"
                    for target, (local, _) in promoted.items()) + " }"))
            stores.append(c.Line("{ " + lane + " " + " ".join(
                f"{put}(&{target}, {local}_{j}{tail});"
                for target, (local, _) in promoted.items()) + " }"))
        return c.Block(
            [c.Line(f"{vtype} {', '.join(names)};")]
            + [c.If(runs, c.Block(loads)), loop, c.If(runs, c.Block(stores))])

    def _lane_chunks(self, loop: isl.AstNode) -> c.Generable:
        """The vector loop of a register tile: its body once per lane chunk, the loop's
        iterator a constant (the chunk's first lane) in each, interleaved statement by
        statement (chunks innermost: the broadcast a statement shares with the other
        chunks is used by consecutive FMAs, then dead)."""
        nest, lanes = self.promotion, self.tile_lanes
        it = nest.iterator
        starts = vector_tile.chunks(nest.first, nest.last, lanes)
        chunks = []
        saved = self.tile_chunk, self.tile_part
        self.scope.append(it)
        try:
            for j, (_, count) in enumerate(starts):
                self.tile_chunk, self.tile_part = j, count
                chunks.append(_flat(self._scoped(lambda: self.emit(loop.for_get_body()))))
        finally:
            self.scope.pop()
            self.tile_chunk, self.tile_part = saved
        if any(len(body) != len(chunks[0]) for body in chunks):
            raise vector_tile.NotVector("the lane chunks differ")
        return c.Block([c.Block([c.Line(f"const long {it} = {starts[j][0]};"), body[k]])
                        for k in range(len(chunks[0])) for j, body in enumerate(chunks)])

    def override_values(self, stmt: Statement, call: isl.AstExpr, printer) -> None:
        """In a register tile: each read that moves along the lanes is a vector load at
        the chunk's first lane (codegen/vector_tile.py); reads that stay are scalars,
        which the vector arithmetic broadcasts."""
        if self.tile_lanes is None or stmt.name not in self.promotion.statements:
            return
        iterators = tuple(self.scope)
        arrays = {a.array for a in E.accesses(stmt.expr)}
        steps = vector_tile.lane_steps(call, stmt, self.program, iterators,
                                       self.promotion.iterator,
                                       {a: self._strides(a) for a in arrays})
        _, load, _ = vector_tile.vector_type(stmt.target.dtype, self.tile_lanes, self.helpers)
        tail = ""
        if self.tile_part is not None:  # the last chunk's lanes only
            load, _ = vector_tile.partial(stmt.target.dtype, self.tile_lanes, self.helpers)
            tail = f", {self.tile_part}"
        # rows' base addresses apart from the offset they share: only for one reduction
        # loop (a 1x1 conv, a matmul: 1.26 -> 0.86 ms at ResNet's 7 x 7 x 2048 -> 512).
        # Over a window's loops (kh, kw), gcc 12 then sees the rows overlap and keeps
        # broadcasts in registers across steps, and 3x3 convs ran 20 % slower
        function = (V.call_function(call, tuple(self.program.params), iterators,
                                    self.program.context)
                    if len(self.promotion.loops) == 1 else None)
        varying = {_iterator(loop): _constant_init(loop) for loop in self.promotion.loops}
        varying[self.promotion.iterator] = self.promotion.first
        for access, read, step in zip(E.accesses(stmt.expr), stmt.reads, steps):
            name = self.arrays[access.array][0]
            split = None if function is None else vector_tile.split_offset(
                read, function, self._strides(access.array), iterators, varying,
                self.helpers)
            # gcc keeps the first summand out of the reduction loop
            index = (f"({split[0]}) + ({split[1]})" if split is not None
                     else printer.linear_index(access).code)
            if step == 1:
                printer.overrides[id(access)] = Text(f"{load}(&{name}[{index}]{tail})")
            elif step > 1 and tail:
                raise vector_tile.NotVector("a gather in a partial chunk would read past it")
            elif step > 1:
                gather = vector_tile.gather(stmt.target.dtype, self.tile_lanes, self.helpers)
                printer.overrides[id(access)] = Text(f"{gather}(&{name}[{index}], {step})")
            elif split is not None:
                printer.overrides[id(access)] = Text(f"{name}[{index}]")

    def extremum(self, stmt: Statement) -> str:
        """In a register tile, the vector form of the ``max``/``min`` helper."""
        if self.tile_lanes is None or stmt.name not in self.promotion.statements:
            return super().extremum(stmt)
        return vector_tile.extremum(stmt.reduction, stmt.target.dtype, self.tile_lanes,
                                    self.helpers)

    def _strides(self, array: str) -> list[int]:
        """Row-major strides of a specialised array, in elements."""
        extents = [U.pw_aff_value(e, {}) for e in self.program.array(array).shape]
        strides, size = [], 1
        for extent in reversed(extents):
            strides.append(size)
            size *= extent
        return strides[::-1]

    def accumulator(self, stmt: Statement, target: str) -> str:
        """The local that accumulates ``target`` in the enclosing simd loop (or in the
        promoted nest), or ``target`` itself when the statement is no reduction along
        that loop."""
        if self.promotion is not None and stmt.name in self.promotion.statements:
            if target not in self.promoted:
                self.promoted[target] = (f"polycomp_reg{self.n_promoted + len(self.promoted)}",
                                         CTYPES[stmt.target.dtype])
            if self.tile_lanes is not None:
                return f"{self.promoted[target][0]}_{self.tile_chunk}"
            return f"{self.promoted[target][0]}[{self.promotion.iterator} - {self.promotion.first}]"
        if (self.vector_loop is None or stmt.name not in self.vector_reductions
                or stmt.reduction not in REDUCTION_CLAUSE):
            return target
        if self.vector_guarded:
            self.vector_unsafe = True
            return target
        if re.search(rf"\b{re.escape(self.vector_loop)}\b", target):
            raise InternalError(f"codegen: the target {target} of {stmt.name} changes along "
                                f"the simd loop {self.vector_loop} it reduces along")
        if target not in self.accumulators:
            name = f"polycomp_acc{self.n_accumulators}"
            self.n_accumulators += 1
            self.accumulators[target] = (name, CTYPES[stmt.target.dtype], stmt.reduction)
        return self.accumulators[target][0]

    def set_status(self, value: str) -> list[c.Generable]:
        return [c.Pragma("omp atomic write"), c.Statement(f"{STATUS} = {value}")]

    def _outline(self, node: isl.AstNode) -> c.Generable:
        """``node`` as a static function of the enclosing iterators and the entry's
        arguments (restrict pointers), and the call that replaces it."""
        gathers, guards = self.gathers, self.helpers.guards
        tiles, rewrites = self.register_tiles, self.guarded_rewrites
        body = self._scoped(lambda: self.emit(node))
        tiles, rewrites = self.register_tiles - tiles, self.guarded_rewrites - rewrites
        self.outlined_tiles += tiles
        self.outlined_rewrites += rewrites
        name = f"{entry_name(self.program)}_par{len(self.outlined)}"
        args = [(a, declarator(a, self.program)) for a in self.outline_arguments]
        params = [c.Value("long", it) for it in self.scope] + [c.Value(*d) for _, d in args]
        self.outlined.append((c.FunctionBody(
            c.FunctionDeclaration(c.Value(f"static int {OUTLINED}", name), params),
            c.Block([c.Line(f"int {STATUS} = 0;"), body, c.Statement(f"return {STATUS}")])),
            (tiles > 0, rewrites > 0)))
        call = f"{name}({', '.join(self.scope + [d[1] for _, d in args])})"
        if self.gathers == gathers and self.helpers.guards == guards:
            return c.Statement(call)
        # the body's status (1 gather, 2 division: codegen/cexpr.py) becomes the caller's
        return c.Block([c.Line(f"int {STATUS}_body = {call};"),
                        c.If(f"{STATUS}_body", c.Block(self.set_status(f"{STATUS}_body")))])


def _with_pragmas(function: c.FunctionBody, tiles: bool, rewrites: bool) -> str:
    """The function's text, between TILES_BEGIN and TILES_END when it holds a tile, and
    between REWRITE_BEGIN and REWRITE_END when a loop body in it fills an array and
    stores to it again under a guard (``rewrites_under_guard``)."""
    text = str(function)
    if rewrites:
        text = f"{REWRITE_BEGIN}\n{text}\n{REWRITE_END}"
    if tiles:
        text = f"{TILES_BEGIN}\n{text}\n{TILES_END}"
    return text


def rewrites_under_guard(body: isl.AstNode, statements: dict[str, Statement]) -> bool:
    """Whether the body of an innermost loop (no loop inside) fills some array with a
    value that reads nothing, unconditionally, and stores to it again under an ``if``
    (REWRITE_MACRO). Only fills: a conv's guarded epilogue copies (`t5[..] = ..;
    if (c12 <= 1) t5[..] = ..`, other elements of the same array) need if-conversion to
    run as vectors, and kept their speed."""
    plain: set[str] = set()
    guarded: set[str] = set()

    def walk(node: isl.AstNode, under_if: bool) -> bool:
        kind = node.get_type()
        if kind == node_type.for_:
            return False
        if kind == node_type.block:
            children = node.block_get_children()
            return all(walk(children.get_at(k), under_if) for k in range(children.n_ast_node()))
        if kind == node_type.if_:
            return (walk(node.if_get_then_node(), True)
                    and (not node.if_has_else_node() or walk(node.if_get_else_node(), True)))
        if kind == node_type.mark:
            return walk(node.mark_get_node(), under_if)
        if kind == node_type.user:
            call = node.user_get_expr()
            stmt = statements.get(call.get_op_arg(0).get_id().get_name())
            if stmt is not None:
                array = stmt.write.get_tuple_name(isl.dim_type.out)
                if under_if:
                    guarded.add(array)
                elif not stmt.reads:
                    plain.add(array)
        return True
    return walk(body, False) and bool(plain & guarded)


def _flat(node: c.Generable) -> list[c.Generable]:
    """The statements of nested blocks, in order."""
    if type(node) is c.Block:
        return [s for child in node.contents for s in _flat(child)]
    return [node]


def _iterator(loop: isl.AstNode) -> str:
    return loop.for_get_iterator().get_id().get_name()


def _constant_init(loop: isl.AstNode) -> int | None:
    """A loop's first value where it is a constant, else None (a register tile's
    reduction loops usually start at 0: their bounds are the point band's)."""
    init = loop.for_get_init()
    if init.get_type() != isl.ast_expr_type.int:
        return None
    return int(init.get_val().to_python())


def _constant_trips(loop: isl.AstNode) -> int | None:
    """How many iterations a loop runs where its bounds and step are constants, else
    None."""
    first, cond, step = loop.for_get_init(), loop.for_get_cond(), loop.for_get_inc()
    if first.get_type() != isl.ast_expr_type.int or step.get_type() != isl.ast_expr_type.int \
            or cond.get_type() != isl.ast_expr_type.op:
        return None
    kind = cond.get_op_type()
    if kind not in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt) \
            or cond.get_op_arg(1).get_type() != isl.ast_expr_type.int:
        return None
    lo, step_ = int(first.get_val().to_python()), int(step.get_val().to_python())
    hi = int(cond.get_op_arg(1).get_val().to_python())
    hi -= kind == isl.ast_expr_op_type.lt
    return max(0, (hi - lo) // step_ + 1) if step_ > 0 else None


def shares_one_region(node: isl.AstNode) -> bool:
    """Whether the sequential loop ``node`` can run inside one parallel region whose
    threads share each parallel loop below it: some parallel loop lies below, and nothing
    outside the parallel loops runs a statement (every thread would run it) or a simd
    loop (no worksharing loop may sit inside one)."""
    found = 0

    def control_only(n: isl.AstNode) -> bool:
        nonlocal found
        kind = n.get_type()
        if kind == node_type.for_:
            return control_only(n.for_get_body())
        if kind == node_type.if_:
            return control_only(n.if_get_then_node()) and (
                not n.if_has_else_node() or control_only(n.if_get_else_node()))
        if kind == node_type.block:
            return all(control_only(child) for child in U.to_list(n.block_get_children()))
        if kind == node_type.mark:
            marked = marked_loop(n)
            if marked == T.MARK_PARALLEL:
                found += 1
                return True  # its iterations are shared out: whatever runs inside is fine
            if marked == T.MARK_VECTOR:
                return False
            return control_only(n.mark_get_node())  # no loop of its own: look through it
        return False  # a statement, or a node kind this emitter does not know

    return control_only(node.for_get_body()) and found > 0


def simdlen(mark: isl.Id) -> str:
    """`` simdlen(n)`` when the mark's id carries a lane count (ids read from text carry
    none)."""
    lanes = mark_user(mark)
    if isinstance(lanes, tuple):  # (lanes, reductions along the loop)
        lanes = lanes[0]
    return f" simdlen({lanes})" if isinstance(lanes, int) and lanes > 1 else ""


def vector_reductions(mark: isl.Id) -> frozenset[str]:
    """The statements a vector mark's loop reduces along (reductions.annotate_simd_reductions)."""
    user = mark_user(mark)
    return user[1] if isinstance(user, tuple) else frozenset()
