"""isl AST -> C-family code: the printer that every C-like target's dialect extends.

Place in the pipeline: after codegen/ast.py (the isl AST of the schedule tree, checked
by codegen/verify.py), inside a target's code generator. ``CPrinter`` prints what is
the same in every dialect of C; a dialect subclasses it for what its marks mean and
assembles the translation unit (codegen/openmp.py: OpenMP C for CPUs; a CUDA dialect
can reuse the statement, expression and loop printing the same way).

What the printer writes:

- the entry function ``int polycomp_<name>([long sizes...,] [scalars...,] [const] T
  *restrict array, ...)`` (``entry``), which returns ``polycomp_status``: 0, or 1 when a
  data-dependent index (a gather) fell outside its array (the read is then skipped), 2
  after an integer division by zero (codegen/cexpr.py's guards), 3 when a scratch array
  could not be allocated;
- loops as ``for (long cK = ...; ...; cK += ...)``, ifs (a then-branch with an else is
  always braced), blocks, and statement bodies inline (row-major arrays, the AST's
  iterator expressions substituted for the statement iterators; expressions by
  codegen/cexpr.py);
- scratch arrays (expanded scalars, scheduler/expansion.py) malloc'd by the entry and
  freed before it returns; local arrays (contracted temporaries, scheduler/contraction.py)
  declared at the top of the innermost loop body around their ``local:<array>`` mark.

Hooks a dialect overrides (each defaults to plain sequential C):

- ``_loop_mark(name, mark, loop)``: a loop under a loop mark (scheduler/tree.LOOP_MARKS:
  ``parallel``, ``vector``) that sits on that loop; here the loop is printed as is;
- ``_for_node(node)``: a loop no mark is on (OpenMP: a team around a sequential loop);
- ``_for(node, pragma, body)`` and ``_if(node)``: wrap them to track state (which loop
  is the vector loop, guards inside it);
- ``accumulator(stmt, target)``: the text a statement updates instead of its target
  (OpenMP: simd reduction locals, promoted registers);
- ``override_values(stmt, call, printer)``: texts for nodes of a statement's expression
  (OpenMP: vector loads in a register tile, codegen/vector_tile.py);
- ``set_status(value)``: the statements that record a status where threads may race.
"""

from __future__ import annotations

from collections.abc import Callable

import cgen as c
import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program, Statement
from polycomp.scheduler import tree as T  # mark names
from polycomp.scheduler.contraction import MARK_LOCAL
from polycomp.scheduler.tree import mark_user

from .ast import expression_builder, loop_iterator
from .indices import annotation, divided_indices
from .cexpr import ADD, ARG_CTYPES, CTYPES, PRIMARY, Helpers, Text, ValuePrinter, ast_expr
from .names import c_name
from .source import CArgument

node_type = isl.ast_node_type

STATUS = "polycomp_status"
STATUS_NO_MEMORY = 3  # a scratch array could not be allocated (polycomp/runtime.py)


def entry_name(program: Program) -> str:
    return "polycomp_" + c_name(program.name)


def entry_arguments(program: Program) -> tuple[CArgument, ...]:
    """The entry's arguments in order: sizes (parametric programs), scalars, arrays."""
    args = [CArgument("size", p, "long", "int64") for p in program.params]
    args += [CArgument("scalar", s.name, ARG_CTYPES[s.dtype], s.dtype) for s in program.scalars]
    args += [CArgument("array", a.name, CTYPES[a.dtype], a.dtype) for a in program.arrays
             if a.role not in ("scratch", "local")]
    return tuple(args)


def declarator(arg: CArgument, program: Program) -> tuple[str, str]:
    """(type, name) of a parameter: arrays as ``restrict`` pointers, ``const`` when no
    statement writes them."""
    name = c_name(arg.name)
    if arg.kind != "array":
        return arg.ctype, name
    written = any(s.write.get_tuple_name(isl.dim_type.out) == arg.name for s in program.statements)
    const = "" if written else "const "
    return f"{const}{arg.ctype} *restrict", name


class CPrinter:
    """Walks the isl AST and builds cgen nodes (the module doc lists the hooks)."""

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
        self.index_exprs: list[isl.AstExpr] | None = None  # the user node's (emit)
        self.scope: list[str] = []  # iterators of the enclosing loops
        # local arrays (contracted temporaries) met in the body being emitted: declared
        # once at the top of the innermost enclosing loop body, outlined body or entry
        self.local_scopes: list[dict[str, str]] = [{}]

    # ------------------------------------------------------------------ the entry
    def entry(self, ast: isl.AstNode, arguments: tuple[CArgument, ...],
              scratch: list) -> tuple[c.FunctionBody, bool]:
        """The entry function running ``ast``, and whether it calls malloc (the file
        then includes <stdlib.h>)."""
        body = self._scoped(lambda: self.emit(ast))
        signature = c.FunctionDeclaration(
            c.Value("int", entry_name(self.program)),
            [c.Value(*declarator(a, self.program)) for a in arguments] or [c.Value("void", "")])
        statements: list[c.Generable] = [c.Line(f"int {STATUS} = 0;")]
        allocate, release = self.scratch_arrays(scratch)
        statements += allocate
        statements += [body] if not isinstance(body, c.Block) else list(body.contents)
        statements += release
        statements.append(c.Statement(f"return {STATUS}"))
        return c.FunctionBody(signature, c.Block(statements)), bool(release)

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

    # ------------------------------------------------------------------ the AST
    def emit(self, node: isl.AstNode) -> c.Generable:
        kind = node.get_type()
        if kind == node_type.for_:
            return self._for_node(node)
        if kind == node_type.if_:
            return self._if(node)
        if kind == node_type.block:
            children = U.to_list(node.block_get_children())
            return c.Block([self.emit(child) for child in children])
        if kind == node_type.mark:
            return self._mark(node)
        if kind == node_type.user:
            self.index_exprs = annotation(node)
            return self._user(node.user_get_expr())
        raise NotImplementedError(f"isl AST node {kind}")

    def _expr(self, node: isl.AstExpr) -> Text:
        return ast_expr(node, self.names, self.helpers)

    def _for_node(self, node: isl.AstNode) -> c.Generable:
        """A loop that no loop mark sits on."""
        return self._for(node)

    def _if(self, node: isl.AstNode) -> c.Generable:
        then = self.emit(node.if_get_then_node())
        other = None
        if node.if_has_else_node():
            other = self.emit(node.if_get_else_node())
        # C gives an else to the nearest if: an unbraced then-branch ending in an if
        # without else (`if (a) for (...) if (b) S; else T;`) would take it. cgen's
        # Collection (a pragma and its loop) is a Block subclass that prints no
        # braces (fuzz case 7373:744), so test the exact type
        if other is not None and type(then) is not c.Block:
            then = c.Block([then])
        return c.If(self._expr(node.if_get_cond()).code, then, other)

    def _for(self, node: isl.AstNode, pragma: str | None = None,
             body: Callable[[], c.Generable] | None = None) -> c.Generable:
        """The loop ``node``, ``#pragma <pragma>`` before it when given; ``body()``
        prints its body (by default the AST's, with the local arrays declared in it)."""
        it = node.for_get_iterator().get_id().get_name()
        self.scope.append(it)
        try:
            inside = (body() if body is not None
                      else self._scoped(lambda: self.emit(node.for_get_body())))
        finally:
            self.scope.pop()
        loop = c.For(f"long {it} = {self._expr(node.for_get_init()).code}",
                     self._expr(node.for_get_cond()).code,
                     f"{it} += {self._expr(node.for_get_inc()).code}", inside)
        return c.Collection([c.Pragma(pragma), loop]) if pragma else loop

    def _mark(self, node: isl.AstNode) -> c.Generable:
        mark = node.mark_get_id()
        name = marked_loop(node)
        inner = node.mark_get_node()
        if name is not None:
            return self._loop_mark(name, mark, inner)
        if mark.get_name().startswith(f"{MARK_LOCAL}:"):
            return self._local(mark.get_name().partition(":")[2], inner)
        return self.emit(inner)  # a loop of one iteration: nothing to parallelise

    def _loop_mark(self, name: str, mark: isl.Id, loop: isl.AstNode) -> c.Generable:
        """The loop ``loop`` under the loop mark ``name`` (``mark``: its id, with the
        user value a pass gave it). What the mark means is the dialect's to print."""
        return self._for(loop)

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
        exprs, self.index_exprs = self.index_exprs, None
        if exprs is not None:  # isl's rewriting of the dividing indices (codegen/indices.py)
            indices = divided_indices(stmt)
            if len(indices) == len(exprs):
                for index, expr in zip(indices, exprs):
                    printer.overrides[id(index)] = self._expr(expr)
        self.override_values(stmt, call, printer)
        return statement(stmt, printer, self)

    # ------------------------------------------------------------------ dialect hooks
    def accumulator(self, stmt: Statement, target: str) -> str:
        """The text ``stmt`` updates in place of its target's text ``target``."""
        return target

    def extremum(self, stmt: Statement) -> str:
        """The helper a ``max`` or ``min`` reduction of ``stmt`` calls (a dialect's vector
        form in a register tile)."""
        return self.helpers.need(stmt.reduction, stmt.target.dtype)

    def override_values(self, stmt: Statement, call: isl.AstExpr,
                        printer: ValuePrinter) -> None:
        """Set ``printer.overrides`` for the call ``call`` of ``stmt`` (a dialect's
        vector loads); by default nothing."""

    def set_status(self, value: str) -> list[c.Generable]:
        """The statements that set the entry's status to ``value``."""
        return [c.Statement(f"{STATUS} = {value}")]


def marked_loop(node: isl.AstNode) -> str | None:
    """The name of the loop mark ``node`` (scheduler/tree.LOOP_MARKS, renamed
    ``name@depth`` by codegen/ast.py) when it sits directly on the marked member's own
    loop; None otherwise. When that member takes a single value isl writes no loop for
    it, and the loop found below is a deeper member's, maybe not parallel: it gets no
    pragma."""
    name, _, depth = node.mark_get_id().get_name().partition("@")
    inner = node.mark_get_node()
    if (name in T.LOOP_MARKS and inner.get_type() == node_type.for_ and depth
            and inner.for_get_iterator().get_id().get_name() == loop_iterator(int(depth))):
        return name
    return None


def has_loop(node: isl.AstNode) -> bool:
    """Whether the AST below ``node`` holds a loop."""
    kind = node.get_type()
    if kind == node_type.for_:
        return True
    if kind == node_type.block:
        return any(has_loop(child) for child in U.to_list(node.block_get_children()))
    if kind == node_type.if_:
        return has_loop(node.if_get_then_node()) or (
            node.if_has_else_node() and has_loop(node.if_get_else_node()))
    if kind == node_type.mark:
        return has_loop(node.mark_get_node())
    return False


def statement(stmt: Statement, printer: ValuePrinter, emitter: CPrinter) -> c.Generable:
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
        fn = emitter.extremum(stmt)
        assign = c.Statement(f"{target} = {fn}({target}, {value.code})")
    else:
        assign = c.Statement(f"{target} = {value.code}")
    if not checks:
        return assign
    failed = c.Block(emitter.set_status("1"))
    return c.Block(decls + [c.If(" || ".join(checks), failed, assign)])
