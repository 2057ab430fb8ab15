"""isl AST -> the statement instances it executes, checked against the schedule's domain.

Runs after codegen/ast.py, before the target's printer prints anything. isl's AST
generator has lost instances of strided domains (a loop ``k += 2`` under a tiled or
skewed band: the generated guard lets one point through where three were due) while the
schedule tree itself was legal and injective, so checking the tree is not enough. This
module reads the generated AST back as sets, independently of how isl built it:

    for (c0 = init; cond; c0 += inc) B     adds c0 with  c0 >= init, cond,
                                           c0 - init = 0 mod inc
    if (cond) T else E                     T under cond, E under its complement
    S(e1, ..., en)                         { [c0, ..., cd] -> S[e1, ..., en] } on the set

and requires, per statement, that the user nodes together execute exactly the
statement's domain, every instance once: each node's map is injective and the images of
a statement's nodes are disjoint and cover its domain. Any failure is an InternalError
naming the codegen stage. Expressions are read exactly (floor division, remainders,
min/max, conditionals); the whole check costs a few isl set operations per AST node.

Running every instance once is not enough: isl has also put a statement of a degenerate
band member (its value fixed by the loops around it) before one it depends on (fuzz case
1212:1649). So the AST's own execution order is read back too: a call's place is its
loops' values and the textual positions ``[p0, c0, p1, c1, ..., pd]`` (``pk``: its
position, or its loop's, among the loops and calls of the body at depth k), and every
dependence given to the check must go forward in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import InternalError
from polycomp.scheduler.budget import call_in_time_limit

node_type = isl.ast_node_type
op = isl.ast_expr_op_type


class _Unreadable(Exception):
    """An AST construct this reader does not model (reported as an InternalError)."""


Unreadable = _Unreadable  # for callers that read an AST node's instances themselves


class ASTRejected(InternalError):
    """No AST for the schedule could be shown to run each instance once (isl failed, its
    AST was wrong, or checking it was too costly): polycomp/driver.py then compiles the
    original order, whose AST is checked in its turn."""


class CheckOutOfBudget(ASTRejected):
    """Reading the AST back took more than READBACK_OPERATIONS isl operations: the AST is
    neither known right nor known wrong."""


# reading back PolyBench's kernels at LARGE stays far below this; a fuzzed parametric nest
# with several strides and guards under isl's schedule needed minutes of set intersections
READBACK_OPERATIONS = 4_000_000


@dataclass(frozen=True)
class _Scope:
    """The loops around an AST node: iterator names (outermost first) and the set of
    their values (and the parameters') for which the node runs."""

    params: tuple[str, ...]
    iterators: tuple[str, ...]
    where: isl.Set

    def space(self) -> isl.Space:
        return isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=list(self.iterators),
                                           params=list(self.params))

    def enter(self, iterator: str) -> _Scope:
        where = self.where.add_dims(isl.dim_type.set, 1).set_dim_name(
            isl.dim_type.set, len(self.iterators), iterator)
        return _Scope(self.params, self.iterators + (iterator,), where)

    def restrict(self, condition: isl.Set) -> _Scope:
        return _Scope(self.params, self.iterators, self.where & condition)


class _Reader:
    """AstExpr -> PwAff (integer expressions) or Set (conditions) over a scope's space."""

    def __init__(self, scope: _Scope):
        self.scope = scope
        self.universe = isl.Set.universe(scope.space())
        self.local = isl.LocalSpace.from_space(scope.space())

    def value(self, expr: isl.AstExpr) -> isl.PwAff:
        kind = expr.get_type()
        if kind == isl.ast_expr_type.int:
            return isl.PwAff.val_on_domain(self.universe, expr.get_val())
        if kind == isl.ast_expr_type.id:
            return self._id(expr.get_id().get_name())
        o = expr.get_op_type()
        args = [expr.get_op_arg(k) for k in range(expr.get_op_n_arg())]
        if o == op.minus:
            return self.value(args[0]).neg()
        if o in (op.add, op.sub, op.mul, op.max, op.min):
            result = self.value(args[0])
            for arg in args[1:]:
                other = self.value(arg)
                result = {op.add: result.add, op.sub: result.sub, op.mul: result.mul,
                          op.max: result.max, op.min: result.min}[o](other)
            return result
        if o in (op.div, op.fdiv_q, op.pdiv_q):  # div is exact, pdiv_q has a dividend >= 0
            return self.value(args[0]).scale_down_val(self._constant(args[1])).floor()
        if o in (op.pdiv_r, op.zdiv_r):
            # pdiv_r: dividend >= 0; zdiv_r: isl only compares it with zero, where the
            # sign of C's remainder does not matter
            return self.value(args[0]).mod_val(self._constant(args[1]))
        if o in (op.cond, op.select):
            test = self.condition(args[0]).indicator_function()
            return test.cond(self.value(args[1]), self.value(args[2]))
        raise _Unreadable(f"integer expression {expr.to_C_str()}")

    def condition(self, expr: isl.AstExpr) -> isl.Set:
        if expr.get_type() != isl.ast_expr_type.op:
            return self.value(expr).non_zero_set()
        o = expr.get_op_type()
        args = [expr.get_op_arg(k) for k in range(expr.get_op_n_arg())]
        if o in (op.and_, op.and_then):
            return self.condition(args[0]) & self.condition(args[1])
        if o in (op.or_, op.or_else):
            return self.condition(args[0]) | self.condition(args[1])
        compare = {op.eq: "eq_set", op.le: "le_set", op.lt: "lt_set", op.ge: "ge_set",
                   op.gt: "gt_set"}.get(o)
        if compare:
            return getattr(self.value(args[0]), compare)(self.value(args[1]))
        return self.value(expr).non_zero_set()

    def _id(self, name: str) -> isl.PwAff:
        if name in self.scope.iterators:  # innermost loop of that name wins
            k = len(self.scope.iterators) - 1 - self.scope.iterators[::-1].index(name)
            return isl.PwAff.var_on_domain(self.local, isl.dim_type.set, k)
        if name in self.scope.params:
            k = self.scope.params.index(name)
            return isl.PwAff.var_on_domain(self.local, isl.dim_type.param, k)
        raise _Unreadable(f"unknown name {name}")

    def _constant(self, expr: isl.AstExpr) -> isl.Val:
        if expr.get_type() != isl.ast_expr_type.int:
            raise _Unreadable(f"non-constant divisor {expr.to_C_str()}")
        return expr.get_val()


def executed_instances(node: isl.AstNode, params: tuple[str, ...],
                       context: isl.Set) -> list[isl.Map]:
    """One map per user node of the AST: its loop iterators' values -> the statement
    instance it runs (domains in different spaces: one per loop depth)."""
    return [user.instances for user in _user_nodes(node, params, context)]


def _user_nodes(node: isl.AstNode, params: tuple[str, ...],
                context: isl.Set) -> list[_UserNode]:
    where = isl.Set.universe(isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=[],
                                                         params=list(params)))
    scope = _Scope(params, (), where.intersect_params(context))
    found: list[_UserNode] = []
    _walk(node, scope, found, (), [0])
    return found


def _walk(node: isl.AstNode, scope: _Scope, found: list, outer: tuple[int, ...],
          position: list[int]) -> None:
    """``outer``: the positions of the loops around; ``position``: a counter of the
    loops and calls met so far in the innermost loop's body (text order is run order
    for the same loop values; the two branches of an if never run for the same ones)."""
    kind = node.get_type()
    if kind == node_type.block:
        for child in U.to_list(node.block_get_children()):
            _walk(child, scope, found, outer, position)
    elif kind == node_type.mark:
        _walk(node.mark_get_node(), scope, found, outer, position)
    elif kind == node_type.if_:
        test = _Reader(scope).condition(node.if_get_cond())
        _walk(node.if_get_then_node(), scope.restrict(test), found, outer, position)
        if node.if_has_else_node():
            _walk(node.if_get_else_node(), scope.restrict(test.complement()), found, outer,
                  position)
    elif kind == node_type.for_:
        position[0] += 1
        _walk(node.for_get_body(), _loop(node, scope), found, outer + (position[0],), [0])
    elif kind == node_type.user:
        position[0] += 1
        instances, function = _call(node.user_get_expr(), scope)
        found.append(_UserNode(instances, function, outer + (position[0],)))
    else:
        raise _Unreadable(f"AST node {kind}")


def _loop(node: isl.AstNode, scope: _Scope) -> _Scope:
    """The scope inside ``for (it = init; cond; it += inc)``. The loop stops at the first
    value failing ``cond``, so ``cond`` must not hold again above it: each conjunct must be
    ``it <= e`` or ``it < e`` (isl's form) with ``e`` free of ``it``; anything else is
    checked to be closed downwards along the loop."""
    iterator = node.for_get_iterator().get_id().get_name()
    inner = scope.enter(iterator)
    read = _Reader(inner)
    k = len(inner.iterators) - 1
    it = isl.PwAff.var_on_domain(read.local, isl.dim_type.set, k)
    init = read.value(node.for_get_init())
    step = read._constant(node.for_get_inc())
    if not step.is_pos():
        raise _Unreadable(f"loop step {step}")
    lattice = it.ge_set(init) & it.sub(init).mod_val(step).zero_set()
    test = read.condition(node.for_get_cond())
    if not _upper_bounds(node.for_get_cond(), read, k):
        # the values that fail cond, moved up a step, must fail it too
        fail = (lattice - test) & inner.where
        shifted = fail.preimage_multi_aff(_shift(inner.space(), k, step))
        if not (shifted - fail).is_empty():
            raise _Unreadable(f"loop condition {node.for_get_cond().to_C_str()}")
    return inner.restrict(lattice & test)


def _upper_bounds(cond: isl.AstExpr, read: _Reader, k: int) -> bool:
    if cond.get_type() != isl.ast_expr_type.op:
        return False
    o = cond.get_op_type()
    if o in (op.and_, op.and_then):
        return all(_upper_bounds(cond.get_op_arg(j), read, k) for j in range(2))
    if o not in (op.le, op.lt):
        return False
    left, right = cond.get_op_arg(0), cond.get_op_arg(1)
    return (left.get_type() == isl.ast_expr_type.id
            and left.get_id().get_name() == read.scope.iterators[k]
            and not read.value(right).involves_dims(isl.dim_type.in_, k, 1))


def _shift(space: isl.Space, k: int, step: isl.Val) -> isl.MultiAff:
    """x -> x with dimension k lowered by ``step`` (the preimage raises it)."""
    shift = isl.MultiAff.identity(space.map_from_set())
    return shift.set_aff(k, shift.get_aff(k).add_constant_val(step.neg()))


@dataclass(frozen=True)
class _UserNode:
    """One call of the AST: ``instances`` maps the loops' values (where it runs) to the
    instance; ``function`` is the same as a function; ``positions`` says where it sits
    (the positions of the loops around it, then its own, in text order)."""

    instances: isl.Map
    function: isl.PwMultiAff
    positions: tuple[int, ...]


def _call(call: isl.AstExpr, scope: _Scope) -> tuple[isl.Map, isl.PwMultiAff]:
    read = _Reader(scope)
    name = call.get_op_arg(0).get_id().get_name()
    values = [read.value(call.get_op_arg(j)) for j in range(1, call.get_op_n_arg())]
    target = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=[f"x{j}" for j in
                                                                   range(len(values))],
                                         params=list(scope.params)).set_tuple_name(
        isl.dim_type.set, name)
    instances = isl.Map.from_domain_and_range(scope.where, isl.Set.universe(target))
    for j, value in enumerate(values):
        out = isl.PwAff.var_on_domain(isl.LocalSpace.from_space(target), isl.dim_type.set, j)
        instances = instances & value.eq_map(out)
    space = isl.Space.map_from_domain_and_range(scope.space(), target)
    function = (isl.MultiPwAff.from_pw_aff_list(space, _pw_aff_list(values)) if values
                else isl.MultiPwAff.zero(space))
    return instances, isl.PwMultiAff.from_multi_pw_aff(function)


def call_function(call: isl.AstExpr, params: tuple[str, ...], iterators: tuple[str, ...],
                  context: isl.Set) -> isl.PwMultiAff | None:
    """A user node's call as a function of the loop ``iterators`` (outermost first) to
    the statement instance it runs, read as the check reads it; None when the AST uses a
    construct the reader does not model."""
    space = isl.Space.create_from_names(isl.DEFAULT_CONTEXT, set=list(iterators),
                                        params=list(params))
    scope = _Scope(params, iterators, isl.Set.universe(space).intersect_params(context))
    try:
        return _call(call, scope)[1]
    except _Unreadable:
        return None


def _pw_aff_list(values: list[isl.PwAff]) -> isl.PwAffList:
    out = isl.PwAffList.alloc(isl.DEFAULT_CONTEXT, len(values))
    for value in values:
        out = out.add(value)
    return out


# isl operations for the exact half of the check (each node injective, the images
# disjoint and covering the domain). On unroll-and-jammed nests the images are unions of
# dozens of pieces with divisions: lu at LARGE spent 10 s in is_injective and cholesky
# 80 s subtracting images. Beyond this budget (about a second) only the cheap half has
# run, which sees dropped guards' extra instances but not missing ones: codegen/ast.py
# then rejects a parametric AST and accepts a specialised one (a known gap).
EXACT_OPERATIONS = 2_000_000
# A parametric AST is trusted only once its exact half has passed (codegen/ast.py), so
# it gets more: isl's tiled parametric matmul needs about 20M (a few seconds)
PARAMETRIC_EXACT_OPERATIONS = 32_000_000
# isl operations for the order check (every dependence forward in the AST), counted
# apart from the rest of the exact half: PolyBench at LARGE and parametric needs far less;
# a fuzzed parametric nest of 59 guarded calls (1313:854) needs more, and goes unchecked
ORDER_OPERATIONS = 4_000_000
# seconds the exact half may take whatever its operation count: a net for the operations
# isl's count does not bound, not the budget itself (the operations are). Tiled
# parametric matmul takes a few seconds on a 2-core Xeon and about 20 on a 2-core AMD EPYC
# (Zen 2) VM where Python runs 2.4 times slower: 20 s turned it into a fallback there
EXACT_SECONDS = 60.0


def check_ast(node: isl.AstNode, domain: isl.UnionSet, params: tuple[str, ...],
              context: isl.Set, what: str, exact_budget: int | None = None,
              ordered: isl.UnionMap | None = None) -> bool:
    """Raise an InternalError unless ``node`` runs every instance of ``domain`` once and,
    when ``ordered`` (dependences, source -> sink) is given, each source before its sink.
    Returns False when the exact half (every instance once) ran out of its budget
    (``exact_budget`` isl operations, EXACT_OPERATIONS by default; only the cheap half
    ran). The order is checked after it within ORDER_OPERATIONS, and left unchecked
    past them."""
    try:
        nodes = U.within_operations(READBACK_OPERATIONS,
                                    lambda: _user_nodes(node, params, context))
    except _Unreadable as exc:
        raise InternalError(f"codegen: cannot read back the isl AST of '{what}': {exc}") from None
    if nodes is None:
        raise CheckOutOfBudget(f"codegen: reading back the isl AST of '{what}' took more than "
                               f"{READBACK_OPERATIONS} isl operations")
    maps = [user.instances for user in nodes]
    domain = domain.intersect_params(context)
    parts = {part.get_tuple_name(): part for part in U.to_list(domain.get_set_list())}
    for instances in maps:  # the cheap half: no projection, no division to compute
        name = instances.get_tuple_name(isl.dim_type.out)
        if name not in parts:
            raise InternalError(f"codegen: isl's AST for '{what}' runs unknown statement {name}")
        outside = instances.subtract_range(parts[name])
        if not outside.is_empty():
            raise InternalError(f"codegen: isl's AST for '{what}' runs instances of {name} "
                                f"outside its domain: {outside.range().coalesce()}")

    def exact() -> bool:
        if U.within_operations(exact_budget or EXACT_OPERATIONS,
                               lambda: _check_exact(maps, parts, what) or True) is None:
            return False
        if ordered is not None:
            # past its budget the order stays unchecked (a known gap, as before the
            # order was checked at all); an AST is trusted on its instances
            U.within_operations(
                ORDER_OPERATIONS,
                lambda: _check_order(nodes, ordered.intersect_params(context), what))
        return True

    # isl's operation count does not bound every operation's time (fuzz case 8484:190:
    # one subset test of a parametric nest ran for minutes within its budget), so the
    # exact half runs in a child process under a time limit as well
    try:
        done = call_in_time_limit(exact, EXACT_SECONDS)
    except TimeoutError:
        return False
    return bool(done)


def _check_exact(maps: list[isl.Map], parts: dict[str, isl.Set], what: str) -> None:
    images: dict[str, list[isl.Set]] = {}
    for instances in maps:
        name = instances.get_tuple_name(isl.dim_type.out)
        if not instances.is_injective():
            raise InternalError(f"codegen: isl's AST for '{what}' runs instances of {name} "
                                "more than once")
        # projecting out the loops leaves their floor divisions as unknown existentials;
        # computing them as divisions and coalescing keeps the comparisons below fast
        # (correlation at LARGE: minutes without, a fraction of a second with)
        images.setdefault(name, []).append(instances.range().compute_divs().coalesce())
    for name, part in parts.items():
        _check_cover(part, images.get(name, []), what)


def _check_order(nodes: list[_UserNode], ordered: isl.UnionMap, what: str) -> None:
    """Every dependence of ``ordered`` runs source first in the AST.

    For each pair of calls (a, b) and the dependences between their statements, the
    pairs of loop values (x, y) with a(x) -> b(y) a dependence are found by substituting
    the calls into it (no projection: cheap), then compared the way the AST orders them:
    level by level, the textual positions first (a loop or call earlier in the same body
    runs first for the same outer loop values), then, inside a loop both sit in, its
    iterator (loops count upwards)."""
    by_pair: dict[tuple[str, str], isl.Map] = {}
    for dep in U.maps_of(ordered):
        by_pair[dep.get_tuple_name(isl.dim_type.in_), dep.get_tuple_name(isl.dim_type.out)] = dep
    hulls_of = {id(user): isl.Set.from_basic_set(user.instances.domain().simple_hull())
                for user in nodes}
    for a in nodes:
        source = a.instances.get_tuple_name(isl.dim_type.out)
        for b in nodes:
            dep = by_pair.get((source, b.instances.get_tuple_name(isl.dim_type.out)))
            if dep is None or _first_runs_first(a.positions, b.positions):
                continue
            pairs = (dep.preimage_domain_pw_multi_aff(a.function)
                     .preimage_range_pw_multi_aff(b.function))
            # first with the hulls of where the calls run (a superset: cheap, and most
            # often already empty), then exactly
            hulls = (pairs.intersect_domain(hulls_of[id(a)])
                     .intersect_range(hulls_of[id(b)]))
            if _backwards(hulls, a.positions, b.positions) is None:
                continue
            pairs = (pairs.intersect_domain(a.instances.domain())
                     .intersect_range(b.instances.domain()))
            backwards = _backwards(pairs, a.positions, b.positions)
            if backwards is not None:
                example = (backwards.apply_domain(a.instances).apply_range(b.instances)
                           .coalesce())
                raise InternalError(f"codegen: isl's AST for '{what}' runs a dependence "
                                    f"backwards: {example} (the sink runs first)")


def _first_runs_first(first: tuple[int, ...], second: tuple[int, ...]) -> bool:
    """Whether the call at ``first`` runs all its instances before the one at ``second``
    (they sit in different outermost loops or calls, in that order)."""
    return first[0] < second[0]


def _backwards(pairs: isl.Map, first: tuple[int, ...], second: tuple[int, ...]) -> isl.Map | None:
    """The pairs (x, y) for which the call at ``second`` runs y no later than the call
    at ``first`` runs x; None when there are none. The calls share the loops of the
    levels where their positions agree; on the first level where they do not (or when
    they are the same call) the text decides."""
    shared = 0
    while (shared < min(len(first), len(second)) - 1 and first[shared] == second[shared]):
        shared += 1
    universe = isl.Map.universe(pairs.get_space())
    local = isl.LocalSpace.from_space(pairs.get_space())
    late = isl.Map.empty(pairs.get_space())
    equal = universe
    for k in range(shared):  # equal on the outer loops, y's iteration before x's here
        x_minus_y = (isl.Constraint.inequality_alloc(local)
                     .set_coefficient_val(isl.dim_type.in_, k, 1)
                     .set_coefficient_val(isl.dim_type.out, k, -1).set_constant_val(-1))
        late = late | equal.add_constraint(x_minus_y)
        equal = equal.add_constraint(isl.Constraint.equality_alloc(local)
                                     .set_coefficient_val(isl.dim_type.in_, k, 1)
                                     .set_coefficient_val(isl.dim_type.out, k, -1))
    if first == second or first[shared] > second[shared]:
        late = late | equal
    found = pairs & late
    return None if found.is_empty() else found


def _check_cover(part: isl.Set, images: list[isl.Set], what: str) -> None:
    """The images of a statement's user nodes are disjoint and cover its domain ``part``."""
    name = part.get_tuple_name()
    if not images:
        if not part.is_empty():
            raise InternalError(f"codegen: isl's AST for '{what}' never runs {name}")
        return
    done = images[0]
    for image in images[1:]:
        if not (done & image).is_empty():
            raise InternalError(f"codegen: isl's AST for '{what}' runs instances of "
                                f"{name} in two places")
        done = (done | image).coalesce()
    if not part.is_subset(done):
        raise InternalError(f"codegen: isl's AST for '{what}' does not run every instance "
                            f"of {name}: missing {(part - done).coalesce()}")
