"""Schedule tree -> isl AST.

isl's AST generator writes every loop (no hand-written bound computation). The build's
context carries what is known about the parameters, so that bounds simplify. Mark nodes
(scheduler/tree.py) survive into the AST as mark nodes for the target's printer to read
(codegen/openmp.py); each loop mark's name gets the schedule depth of the member it
marks (``parallel@2``), because isl writes no loop for a member that takes one value
there, and the loop then found below the mark belongs to a deeper member, which the mark
says nothing about.

Two guards around isl's generator, because it has generated wrong code for domains with
a stride (``for (k = 1; k < 7; k += 2)`` under a skewed or tiled band: a guard that lets
one of three instances through):

- strided dimensions are compacted first (``S[i, k] : k = 1 mod 2`` is generated as
  ``S'[i, k'] : k = 2k' + 1``), and each statement call is written back in the original
  iterators (``S(c0, 2 * c1 + 1)``) from the build's schedule, as PPCG writes accesses;
- the finished AST is read back (codegen/verify.py) and must run every instance of the
  schedule's domain exactly once, and every dependence forward. When it does not, or isl fails, the AST is generated
  again in a simpler way (band members "separate", then the flat schedule map, which
  drops the marks); when no way passes, ASTRejected (an InternalError naming the codegen
  stage) sends polycomp/driver.py to the original loop order, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import InternalError
from polycomp.ir import Program
from polycomp.options import configure_isl
from polycomp.scheduler import tree as T

from .indices import annotate, index_expressions
from .verify import (EXACT_SECONDS, PARAMETRIC_EXACT_OPERATIONS, ASTRejected,
                     CheckOutOfBudget, check_ast)

LOOP_MARKS = T.LOOP_MARKS


def build_ast(program: Program, schedule: isl.Schedule,
              ordered: isl.UnionMap | None = None,
              after_mark: MarkHook | None = None,
              simplify_indices: bool = False) -> isl.AstNode:
    """isl's AST for ``schedule``, checked to run each instance of its domain once and
    every dependence in ``ordered`` (the program's, source -> sink) forward.

    Tries the tree as it is (strides compacted) first; when isl fails on it or its AST
    does not pass the check, the tree with every band member generated "separate", then
    the flattened schedule map (no marks: sequential code, no unrolling). Each fallback
    only changes how isl is asked, never the order of the instances. An AST too costly to
    check raises CheckOutOfBudget at once, and when no build passes, ASTRejected: either
    way polycomp/driver.py then compiles the original order.

    A parametric AST must pass the exact half of the check (every instance once) within
    verify.PARAMETRIC_EXACT_OPERATIONS, else CheckOutOfBudget; a specialised one whose
    exact half exceeds verify.EXACT_OPERATIONS is accepted on the cheap half (no
    instance outside the domain). That is a known gap: at LARGE it covers cholesky, lu,
    fdtd-2d, heat-3d and jacobi-2d.

    ``after_mark``: isl's after-each-mark callback for every try (``reset()`` before
    each), so that a printer can have expressions built where a mark sits (the GPU
    targets' promotion marks, codegen/cuda.py).

    ``simplify_indices``: each user node whose statement divides in an index is annotated
    with isl's expression of those indices where it is built (codegen/indices.py), for
    a printer that prints them (codegen/c.py)."""
    configure_isl()
    domain = schedule.get_domain()
    compact = compaction(domain)
    if compact is not None:
        schedule = schedule.pullback_union_pw_multi_aff(compact)
    failures = []
    budget = PARAMETRIC_EXACT_OPERATIONS if program.params else None
    indexed = program if simplify_indices else None
    for attempt in (_as_tree, _separated, _flattened):
        try:
            if after_mark is not None:
                after_mark.reset()
            node = attempt(program.context, schedule, compact, after_mark, indexed)
            exact = check_ast(node, domain, program.params, program.context, program.name,
                              budget, ordered)
            if exact or not program.params:
                return node
            # a parametric AST whose exact check ran out of budget is not trusted: its
            # tangled guards are where isl lost instances (fuzz case 5151:3535)
            raise CheckOutOfBudget(f"codegen: the exact check of the isl AST of "
                                   f"'{program.name}' took more than {budget} isl "
                                   f"operations or {EXACT_SECONDS:g} s")
        except isl.Error as exc:
            failures.append(f"{attempt.__name__.strip('_')}: isl: {str(exc).splitlines()[0]}")
        except CheckOutOfBudget:
            raise  # the other builds are larger still: the driver takes the original order
        except InternalError as exc:
            failures.append(f"{attempt.__name__.strip('_')}: {exc}")
    raise ASTRejected(f"codegen: no correct isl AST for '{program.name}':\n  "
                      + "\n  ".join(failures))


class MarkHook(Protocol):
    """An after-each-mark callback (``__call__(node, build) -> node``) with a
    ``reset()`` that forgets what an earlier try of the build recorded."""

    def __call__(self, node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode: ...

    def reset(self) -> None: ...


def _generate(context: isl.Set, compact: isl.UnionPwMultiAff | None,
              generate: Callable[[isl.AstBuild], isl.AstNode],
              after_mark: MarkHook | None = None,
              indexed: Program | None = None) -> isl.AstNode:
    """``generate(build)`` on an AstBuild that writes calls in the original iterators of
    compacted statements (and, with ``indexed``, annotates them with their dividing
    indices: codegen/indices.py)."""
    build = isl.AstBuild.from_context(context)
    handle = marks = None
    if compact is not None or indexed is not None:
        build, handle = build.set_at_each_domain(_original_call(compact, indexed))
    if after_mark is not None:
        build, marks = build.set_after_each_mark(after_mark)
    node = generate(build)
    del handle, marks  # the callbacks must live until the AST is built
    return node


def _as_tree(context: isl.Set, schedule: isl.Schedule,
             compact: isl.UnionPwMultiAff | None,
             after_mark: MarkHook | None = None,
             indexed: Program | None = None) -> isl.AstNode:
    marked = with_mark_depths(schedule)
    return _generate(context, compact, lambda build: build.node_from_schedule(marked),
                     after_mark, indexed)


def _separated(context: isl.Set, schedule: isl.Schedule,
               compact: isl.UnionPwMultiAff | None,
               after_mark: MarkHook | None = None,
               indexed: Program | None = None) -> isl.AstNode:
    """The tree with its default band members generated "separate": isl then never
    generates statements with different bounds in one loop (where it dropped instances of
    one of them, judging a point loop fixed by the others)."""

    def separate(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == isl.schedule_node_type.band:
            for k in range(node.band_n_member()):
                if node.band_member_get_ast_loop_type(k) == isl.ast_loop_type.default:
                    node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.separate)
        return node

    return _as_tree(context, schedule.map_schedule_node_bottom_up(separate), compact,
                    after_mark, indexed)


def _flattened(context: isl.Set, schedule: isl.Schedule,
               compact: isl.UnionPwMultiAff | None,
               after_mark: MarkHook | None = None,
               indexed: Program | None = None) -> isl.AstNode:
    """The schedule as one flat map (isl refused some tiled trees with "unknown divs")."""
    flat = schedule.get_map()
    return _generate(context, compact, lambda build: build.node_from_schedule_map(flat),
                     None, indexed)


def compaction(domain: isl.UnionSet) -> isl.UnionPwMultiAff | None:
    """Compact instance -> original instance, for the statements whose domain has a
    strided dimension (None when there is none): ``S[i, k] -> S[i, 2k + 1]`` for
    ``S[i, k] : k = 1 mod 2``, so that no stride is left for the AST generator."""
    parts = []
    strided = False
    for statement in U.sets_of(domain):
        back = _compact(statement)
        strided |= back is not None
        if back is None:
            back = isl.MultiAff.identity(statement.get_space().map_from_set())
        parts.append(isl.PwMultiAff.from_multi_aff(back))
    if not strided:
        return None
    result = isl.UnionPwMultiAff.from_pw_multi_aff(parts[0])
    for part in parts[1:]:
        result = result.add_pw_multi_aff(part)
    return result


def _compact(statement: isl.Set) -> isl.MultiAff | None:
    """x_k = offset + stride * x'_k for each dimension k with a stride (offset in the
    parameters and the other dimensions), composed into one map; None without strides."""
    space = statement.get_space()
    back = None
    for k in range(statement.dim(isl.dim_type.set)):
        info = statement.get_stride_info(k)
        stride, offset = info.get_stride(), info.get_offset()
        if stride.to_python() <= 1 or offset.involves_dims(isl.dim_type.in_, k, 1):
            continue
        ls = isl.LocalSpace.from_space(space)
        step = isl.MultiAff.identity(space.map_from_set())
        step = step.set_aff(k, isl.Aff.var_on_domain(ls, isl.dim_type.set, k)
                            .scale_val(stride).add(offset))
        statement = statement.preimage_multi_aff(step)
        back = step if back is None else back.pullback_multi_aff(step)
    return back


def _original_call(compact: isl.UnionPwMultiAff | None, indexed: Program | None):
    """at_each_domain callback: the user node's call in the original iterators (where
    ``compact`` compacted the statement), annotated with isl's expressions of its
    dividing indices (with ``indexed``, the program whose statements they are)."""
    statements = {s.name: s for s in indexed.statements} if indexed is not None else {}

    def restore(node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
        at = isl.Map.from_union_map(build.get_schedule())  # compact instance -> iterators
        name = at.get_tuple_name(isl.dim_type.in_)
        instance = isl.PwMultiAff.from_map(at.reverse())
        if compact is not None:
            back = compact.extract_pw_multi_aff(at.get_space().domain().map_from_set()
                                                .set_tuple_name(isl.dim_type.out, name))
            instance = back.pullback_pw_multi_aff(instance)
            node = isl.AstNode.user_from_expr(build.call_from_pw_multi_aff(instance))
        stmt = statements.get(name)
        if stmt is not None:
            exprs = index_expressions(stmt, list(indexed.params), instance, build)
            if exprs:
                node = annotate(node, exprs)
        return node

    return restore


def with_mark_depths(schedule: isl.Schedule) -> isl.Schedule:
    """Every loop mark renamed ``name@depth``, its user value kept."""

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_mark(node) and node.mark_get_id().get_name() in LOOP_MARKS:
            mark = node.mark_get_id()
            try:
                user = mark.get_user()
            except TypeError:  # ids read from text carry no user value
                user = None
            name = f"{mark.get_name()}@{node.get_schedule_depth()}"
            node = node.delete().insert_mark(isl.Id(name, user=user))
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def loop_iterator(depth: int) -> str:
    """The name isl's AST generator gives the loop of schedule dimension ``depth``."""
    return f"c{depth}"


def expression_builder(program: Program) -> isl.AstBuild:
    """An AstBuild for printing parameter-only expressions (array extents, sizes)."""
    return isl.AstBuild.from_context(program.context)
