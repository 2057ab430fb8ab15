"""isl AST -> OpenMP C: the ``Source`` of one kernel.

Input: a Program, its schedule tree (with marks), Options. Output: a C translation unit
with one entry function

    int polycomp_<name>([long sizes...,] [scalars...,] [const] T *restrict array, ...)

that returns 0, or 1 when a data-dependent index (a gather) fell outside its array (the
read is then skipped), 2 after an integer division by zero, 3 when a scratch array could
not be allocated. Arrays are row-major; statement bodies are printed inline with
the AST's iterator expressions substituted for the statement iterators. A loop under a
``parallel`` mark gets ``#pragma omp parallel for``; its body, when it holds loops, is
outlined into a ``static`` noipa (clang: noinline) function that takes the arrays as
``restrict`` parameters again (gcc drops ``restrict`` in the function it outlines for an
OpenMP region, and without it cannot keep values in registers across the jammed
statements of a register tile; noipa because gcc 12.2 deleted calls to a noinline body).
A body of statements only stays inline, where gcc can vectorise the loop. A loop under
a ``vector`` mark gets ``#pragma omp simd``, with ``simdlen(n)`` when the mark's id
carries the lane count n (scheduler/intratile.py); the statements the mark names as
reductions along the loop (scheduler/reductions.py) accumulate in a local under
``reduction(op: local)``. Arrays that are no arguments: scratch arrays (expanded scalars,
scheduler/expansion.py) are malloc'd by the entry and freed before it returns; local
arrays (contracted temporaries, scheduler/contraction.py) are declared at their
``local:<array>`` mark, in the body of the loops they live in. The <math.h> functions
that libmvec has vector forms of are declared with the simd attribute, each under a
macro the build defines only where the system has them.

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
"""

from __future__ import annotations

import re

import cgen as c
import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import InternalError
from polycomp.ir import Program, Statement
from polycomp.options import Options
from polycomp.scheduler import tree as T  # mark names
from polycomp.scheduler.contraction import MARK_LOCAL

from . import promote
from .ast import build_ast, expression_builder, loop_iterator
from .cexpr import (ADD, ARG_CTYPES, CTYPES, PRIMARY, VECTOR_MATH, Helpers, Text, ValuePrinter,
                    ast_expr)
from .names import c_name
from .source import CArgument, Source

node_type = isl.ast_node_type

PRELUDE = """#include <stdbool.h>
#include <stdint.h>
#include <math.h>"""

STATUS = "polycomp_status"
# OpenMP reduction identifiers of the reductions a simd loop may accumulate
REDUCTION_CLAUSE = {"+": "+", "*": "*", "max": "max", "min": "min"}
STATUS_NO_MEMORY = 3  # a scratch array could not be allocated (polycomp/runtime.py)

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


def entry_name(program: Program) -> str:
    return "polycomp_" + c_name(program.name)


def generate_c(program: Program, schedule: isl.Schedule, options: Options,
               ordered: isl.UnionMap) -> Source:
    """The C file for ``schedule``; ``ordered``, the dependences the schedule was checked
    against, is what its AST must keep forward (codegen/verify.py)."""
    helpers = Helpers()
    names = {p: c_name(p) for p in program.params}
    arguments = _arguments(program)
    emitter = _Emitter(program, names, helpers)
    scratch = [a for a in program.arrays if a.role == "scratch"]
    emitter.outline_arguments = arguments + tuple(
        CArgument("array", a.name, CTYPES[a.dtype], a.dtype) for a in scratch)
    ast = build_ast(program, schedule, ordered)
    body = emitter._scoped(lambda: emitter.emit(ast))
    signature = c.FunctionDeclaration(
        c.Value("int", entry_name(program)),
        [c.Value(_declarator(a, program)[0], _declarator(a, program)[1]) for a in arguments]
        or [c.Value("void", "")])
    statements: list[c.Generable] = [c.Line(f"int {STATUS} = 0;")]
    allocate, release = emitter.scratch_arrays(scratch)
    statements += allocate
    statements += [body] if not isinstance(body, c.Block) else list(body.contents)
    statements += release
    statements.append(c.Statement(f"return {STATUS}"))
    function = c.FunctionBody(signature, c.Block(statements))
    # user text in a comment is escaped too: a name holding `*/` would end the comment
    header = (f"/* {c_name(program.name)}: generated by polycomp "
              f"(scheduler={c_name(options.scheduler)}) */")
    parts = [header, PRELUDE + ("\n#include <stdlib.h>" if release else "")]
    vector_math = sorted(helpers.math & set(VECTOR_MATH))
    if vector_math and not options.exact_fp:  # exact_fp: the scalar functions' rounding
        parts.append(_vector_math_declarations(vector_math))
    if helpers.used:
        parts.append(helpers.text())
    if emitter.outlined:
        parts.append(OUTLINED_MACRO)
    parts += [str(f) for f in emitter.outlined]
    parts.append(str(function))
    text = "\n\n".join(parts).replace("(void )", "(void)") + "\n"
    return Source(text, "c", entry_name(program), arguments)


def _vector_math_declarations(names: list[str]) -> str:
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


def _arguments(program: Program) -> tuple[CArgument, ...]:
    args = [CArgument("size", p, "long", "int64") for p in program.params]
    args += [CArgument("scalar", s.name, ARG_CTYPES[s.dtype], s.dtype) for s in program.scalars]
    args += [CArgument("array", a.name, CTYPES[a.dtype], a.dtype) for a in program.arrays
             if a.role not in ("scratch", "local")]
    return tuple(args)


def _declarator(arg: CArgument, program: Program) -> tuple[str, str]:
    name = c_name(arg.name)
    if arg.kind != "array":
        return arg.ctype, name
    written = any(s.write.get_tuple_name(isl.dim_type.out) == arg.name for s in program.statements)
    const = "" if written else "const "
    return f"{const}{arg.ctype} *restrict", name


class _Emitter:
    """Walks the isl AST and builds cgen nodes."""

    def __init__(self, program: Program, names: dict[str, str], helpers: Helpers):
        self.program = program
        self.names = names
        self.helpers = helpers
        self.statements = {s.name: s for s in program.statements}
        build = expression_builder(program)
        self.params = {p: Text(n) for p, n in names.items()}
        self.scalars = {s.name: c_name(s.name) for s in program.scalars}
        self.arrays = {a.name: (c_name(a.name), [self._extent(build, pa) for pa in a.shape[1:]])
                       for a in program.arrays}
        self.gathers = 0
        self.scope: list[str] = []  # iterators of the enclosing loops
        self.outlined: list[c.FunctionBody] = []  # bodies of parallel loops
        # inside an `omp parallel` region around a sequential loop, outside any parallel
        # loop: a parallel mark then prints a worksharing `omp for`
        self.in_region = False
        self.in_parallel_loop = False  # in a parallel loop's body: never another region
        self.outline_arguments: tuple[CArgument, ...] = ()
        # in a simd loop: its iterator, and target text -> (local, C type, reduction op)
        self.vector_loop: str | None = None
        self.vector_reductions: frozenset[str] = frozenset()
        # local arrays (contracted temporaries) met in the body being emitted: declared
        # once at the top of the innermost enclosing loop body, outlined body or entry
        self.local_scopes: list[dict[str, str]] = [{}]
        self.vector_guarded = 0  # ifs and loops entered inside the simd loop's body
        self.vector_unsafe = False  # a reduction along it sits under one of them
        self.accumulators: dict[str, tuple[str, str, str]] = {}
        self.n_accumulators = 0
        # in a nest whose reduction targets live in locals (codegen/promote.py): the nest,
        # and target text -> (local, C type)
        self.promotion: promote.Nest | None = None
        self.promoted: dict[str, tuple[str, str]] = {}
        self.n_promoted = 0

    def scratch_arrays(self, scratch: list) -> tuple[list[c.Generable], list[c.Generable]]:
        """Declarations of the kernel's scratch arrays (scheduler/expansion.py) and the
        statements that free them: a rank-0 one is a local; others come from malloc,
        and the kernel returns STATUS_NO_MEMORY (nothing run) when one is refused."""
        build = expression_builder(self.program)
        allocate: list[c.Generable] = []
        heap: list[str] = []
        for array in scratch:
            name, ctype = c_name(array.name), CTYPES[array.dtype]
            if array.rank == 0:
                allocate.append(c.Line(f"{ctype} {name}[1];"))
                continue
            count = " * ".join(f"(size_t)({self._extent(build, pa).code})" for pa in array.shape)
            allocate.append(c.Line(f"{ctype} *restrict {name} = ({ctype} *)malloc("
                                   f"sizeof({ctype}) * {count});"))
            heap.append(name)
        if heap:
            freed = " ".join(f"free({n});" for n in heap)
            missing = " || ".join(f"!{n}" for n in heap)
            allocate.append(c.Line(f"if ({missing}) {{ {freed} return {STATUS_NO_MEMORY}; }}"))
        return allocate, [c.Statement(f"free({n})") for n in heap]

    def _extent(self, build: isl.AstBuild, extent: isl.PwAff) -> Text:
        return ast_expr(build.expr_from_pw_aff(extent), self.names, self.helpers)

    def emit(self, node: isl.AstNode) -> c.Generable:
        kind = node.get_type()
        if kind == node_type.for_:
            if not (self.in_region or self.in_parallel_loop) and _shares_one_region(node):
                return self._region(node)
            return self._for(node)
        if kind == node_type.if_:
            self.vector_guarded += 1  # what runs under it runs only where it holds
            try:
                then = self.emit(node.if_get_then_node())
                other = None
                if node.if_has_else_node():
                    other = self.emit(node.if_get_else_node())
            finally:
                self.vector_guarded -= 1
            # C gives an else to the nearest if: an unbraced then-branch ending in an if
            # without else (`if (a) for (...) if (b) S; else T;`) would take it. cgen's
            # Collection (a pragma and its loop) is a Block subclass that prints no
            # braces (fuzz case 7373:744), so test the exact type
            if other is not None and type(then) is not c.Block:
                then = c.Block([then])
            return c.If(self._expr(node.if_get_cond()).code, then, other)
        if kind == node_type.block:
            children = U.to_list(node.block_get_children())
            return c.Block([self.emit(child) for child in children])
        if kind == node_type.mark:
            return self._mark(node)
        if kind == node_type.user:
            return self._user(node.user_get_expr())
        raise NotImplementedError(f"isl AST node {kind}")

    def _expr(self, node: isl.AstExpr) -> Text:
        return ast_expr(node, self.names, self.helpers)

    def _region(self, node: isl.AstNode) -> c.Generable:
        """The sequential loop ``node`` inside one ``omp parallel`` region (module doc)."""
        self.in_region = True
        try:
            loop = self._for(node)
        finally:
            self.in_region = False
        return c.Collection([c.Pragma("omp parallel"), c.Block([loop])])

    def _for(self, node: isl.AstNode, pragma: str | None = None,
             outline: bool = False) -> c.Generable:
        if pragma is None and not outline and self.promotion is None:
            nest = promote.promotable(node, self.program, self.statements, self.scope,
                                      self.vector_reductions)
            if nest is not None:
                promoted = self._promoted(node, nest)
                if promoted is not None:
                    return promoted
        it = node.for_get_iterator().get_id().get_name()
        self.scope.append(it)
        # below a parallel loop every thread runs its own iterations: no worksharing there
        saved = self.in_region, self.in_parallel_loop
        if pragma is not None and not pragma.startswith("omp simd"):
            self.in_region, self.in_parallel_loop = False, True
        inner = self.vector_loop is not None and it != self.vector_loop
        self.vector_guarded += inner  # a loop inside a simd loop may run no iteration
        try:
            body = (self._outline(node.for_get_body()) if outline
                    else self._scoped(lambda: self.emit(node.for_get_body())))
        finally:
            self.in_region, self.in_parallel_loop = saved
            self.vector_guarded -= inner
        self.scope.pop()
        loop = c.For(f"long {it} = {self._expr(node.for_get_init()).code}",
                     self._expr(node.for_get_cond()).code,
                     f"{it} += {self._expr(node.for_get_inc()).code}", body)
        return c.Collection([c.Pragma(pragma), loop]) if pragma else loop

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
        """The nest at ``node`` with its reduction targets in local arrays, loaded
        before it and stored after it (codegen/promote.py); None when the targets' texts
        do not match promote's count of distinct targets (then nothing is promoted)."""
        saved = self.promotion, self.promoted, self.n_promoted
        self.promotion, self.promoted = nest, {}
        try:
            loop = self._for(node)
            promoted = self.promoted
        finally:
            self.promotion, self.promoted, self.n_promoted = saved
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
        lanes = f"for (long {it} = {first}; {it} <= {last}; {it} += 1)"
        load = " ".join(f"{local}[{it} - {first}] = {target};"
                        for target, (local, _) in promoted.items())
        store = " ".join(f"{target} = {local}[{it} - {first}];"
                         for target, (local, _) in promoted.items())
        return c.Block(
            [c.Line(f"{ctype} {local}[{last - first + 1}];") for local, ctype in promoted.values()]
            + [c.If(runs, c.Line(f"{lanes} {{ {load} }}")), loop,
               c.If(runs, c.Line(f"{lanes} {{ {store} }}"))])

    def accumulator(self, stmt: Statement, target: str) -> str:
        """The local that accumulates ``target`` in the enclosing simd loop (or in the
        promoted nest), or ``target`` itself when the statement is no reduction along
        that loop."""
        if self.promotion is not None and stmt.name in self.promotion.statements:
            if target not in self.promoted:
                self.promoted[target] = (f"polycomp_reg{self.n_promoted + len(self.promoted)}",
                                         CTYPES[stmt.target.dtype])
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

    def _outline(self, node: isl.AstNode) -> c.Generable:
        """``node`` as a static function of the enclosing iterators and the entry's
        arguments (restrict pointers), and the call that replaces it."""
        gathers, guards = self.gathers, self.helpers.guards
        body = self._scoped(lambda: self.emit(node))
        name = f"{entry_name(self.program)}_par{len(self.outlined)}"
        args = [(a, _declarator(a, self.program)) for a in self.outline_arguments]
        params = [c.Value("long", it) for it in self.scope] + [c.Value(*d) for _, d in args]
        self.outlined.append(c.FunctionBody(
            c.FunctionDeclaration(c.Value(f"static int {OUTLINED}", name), params),
            c.Block([c.Line(f"int {STATUS} = 0;"), body, c.Statement(f"return {STATUS}")])))
        call = f"{name}({', '.join(self.scope + [d[1] for _, d in args])})"
        if self.gathers == gathers and self.helpers.guards == guards:
            return c.Statement(call)
        # the body's status (1 gather, 2 division: codegen/cexpr.py) becomes the caller's
        return c.Block([c.Line(f"int {STATUS}_body = {call};"), c.If(f"{STATUS}_body", c.Block(
            [c.Pragma("omp atomic write"), c.Statement(f"{STATUS} = {STATUS}_body")]))])

    def _mark(self, node: isl.AstNode) -> c.Generable:
        mark = node.mark_get_id()
        name = _marked_loop(node)
        inner = node.mark_get_node()
        if name is not None:
            pragma = {T.MARK_PARALLEL: "omp parallel for", T.MARK_VECTOR: "omp simd"}[name]
            if name == T.MARK_VECTOR:
                pragma += _simdlen(mark)
            elif self.in_region:
                pragma = "omp for"  # the team exists already (_region)
            # a body without loops stays inline: a call per iteration would keep gcc from
            # vectorising the parallel loop (atax: one call per element of y)
            outline = name == T.MARK_PARALLEL and _has_loop(inner.for_get_body())
            if name == T.MARK_VECTOR:
                return self._vector_for(inner, pragma, _vector_reductions(mark))
            return self._for(inner, pragma, outline=outline)
        if mark.get_name().startswith(f"{MARK_LOCAL}:"):
            return self._local(mark.get_name().partition(":")[2], inner)
        return self.emit(inner)  # a loop of one iteration: nothing to parallelise

    def _local(self, name: str, inner: isl.AstNode) -> c.Generable:
        """A contracted temporary (scheduler/contraction.py): declared at the top of the
        innermost loop body around its mark (isl may print the marked subtree in several
        pieces of that body, which must share one array; a piece per iteration of the
        loops it lives in is what contraction proved)."""
        array = self.program.array(name)
        count = 1
        for extent in array.extents():
            count *= extent
        self.local_scopes[-1][name] = f"{CTYPES[array.dtype]} {c_name(name)}[{count}];"
        return self.emit(inner)

    def _scoped(self, emit_body) -> c.Generable:  # noqa: ANN001
        """``emit_body()`` with the local arrays declared in it put at its top."""
        self.local_scopes.append({})
        try:
            body = emit_body()
        finally:
            declared = self.local_scopes.pop()
        if not declared:
            return body
        return c.Block([c.Line(line) for line in declared.values()]
                       + (list(body.contents) if type(body) is c.Block else [body]))

    def _user(self, call: isl.AstExpr) -> c.Generable:
        stmt = self.statements[call.get_op_arg(0).get_id().get_name()]
        values = [self._expr(call.get_op_arg(k + 1)) for k in range(call.get_op_n_arg() - 1)]
        iterators = dict(zip(stmt.iterators, values))
        printer = ValuePrinter(iterators, self.params, self.scalars, self.arrays, self.helpers)
        return _statement(stmt, printer, self)


def _marked_loop(node: isl.AstNode) -> str | None:
    """The name of the mark ``node`` (``parallel`` or ``vector``) when it sits
    directly on the marked member's own loop; None otherwise. When that member takes a
    single value isl writes no loop for it, and the loop found below is a deeper
    member's, maybe not parallel: it gets no pragma."""
    name, _, depth = node.mark_get_id().get_name().partition("@")
    inner = node.mark_get_node()
    if (name in (T.MARK_PARALLEL, T.MARK_VECTOR) and inner.get_type() == node_type.for_ and depth
            and inner.for_get_iterator().get_id().get_name() == loop_iterator(int(depth))):
        return name
    return None


def _shares_one_region(node: isl.AstNode) -> bool:
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
            marked = _marked_loop(n)
            if marked == T.MARK_PARALLEL:
                found += 1
                return True  # its iterations are shared out: whatever runs inside is fine
            if marked == T.MARK_VECTOR:
                return False
            return control_only(n.mark_get_node())  # no loop of its own: look through it
        return False  # a statement, or a node kind this emitter does not know

    return control_only(node.for_get_body()) and found > 0


def _has_loop(node: isl.AstNode) -> bool:
    kind = node.get_type()
    if kind == node_type.for_:
        return True
    if kind == node_type.block:
        return any(_has_loop(child) for child in U.to_list(node.block_get_children()))
    if kind == node_type.if_:
        return _has_loop(node.if_get_then_node()) or (
            node.if_has_else_node() and _has_loop(node.if_get_else_node()))
    if kind == node_type.mark:
        return _has_loop(node.mark_get_node())
    return False


def _simdlen(mark: isl.Id) -> str:
    """`` simdlen(n)`` when the mark's id carries a lane count (ids read from text carry
    none)."""
    lanes = _mark_user(mark)
    if isinstance(lanes, tuple):  # (lanes, reductions along the loop)
        lanes = lanes[0]
    return f" simdlen({lanes})" if isinstance(lanes, int) and lanes > 1 else ""


def _mark_user(mark: isl.Id) -> object:
    try:
        return mark.get_user()
    except TypeError:  # ids read from text carry no user value
        return None


def _vector_reductions(mark: isl.Id) -> frozenset[str]:
    """The statements a simd mark's loop reduces along (reductions.annotate_simd_reductions)."""
    user = _mark_user(mark)
    return user[1] if isinstance(user, tuple) else frozenset()


def _statement(stmt: Statement, printer: ValuePrinter, emitter: _Emitter) -> c.Generable:
    """``target op= value`` with gather indices hoisted into checked locals."""
    checks: list[str] = []
    decls: list[c.Generable] = []
    for access in E.accesses(stmt.expr):
        array = emitter.program.array(access.array)
        for dim_k, index in enumerate(access.indices):
            if not any(isinstance(n, E.Access) for n in E.walk(index)):
                continue
            name = f"polycomp_g{emitter.gathers}"
            emitter.gathers += 1
            decls.append(c.Line(f"long {name} = (long){printer(index).at(PRIMARY - 2)};"))
            extent = array.shape[dim_k]
            bound = emitter._extent(expression_builder(emitter.program), extent)
            checks.append(f"{name} < 0 || {name} >= {bound.at(ADD)}")
            printer.overrides[id(index)] = Text(name)
    target = emitter.accumulator(stmt, printer(stmt.target).code)
    value = printer(stmt.expr)
    dtype = stmt.target.dtype
    if stmt.reduction in ("+", "*"):
        assign = c.Statement(f"{target} {stmt.reduction}= {value.code}")
    elif stmt.reduction in ("max", "min"):
        fn = emitter.helpers.need(stmt.reduction, dtype)
        assign = c.Statement(f"{target} = {fn}({target}, {value.code})")
    else:
        assign = c.Statement(f"{target} = {value.code}")
    if not checks:
        return assign
    failed = c.Block([c.Pragma("omp atomic write"), c.Statement(f"{STATUS} = 1")])
    return c.Block(decls + [c.If(" || ".join(checks), failed, assign)])
