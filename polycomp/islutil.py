"""The one home of positional isl code.

Everything that counts dimensions, walks isl lists, or turns isl objects into Python
values lives here, so that the rest of polycomp talks about names. Nothing here formats
user text into isl syntax: sets and maps are built from spaces and affine expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import TypeVar

import islpy as isl

from . import expr as E

dim = isl.dim_type
CTX = isl.DEFAULT_CONTEXT
T = TypeVar("T")


class NotAffine(Exception):
    """An expression tree that is not affine in the iterators and parameters."""

    def __init__(self, node: E.Expr):
        super().__init__(f"not affine: {node}")
        self.node = node


# ----------------------------------------------------------------------------- lists

def to_list(isl_list: object) -> list:
    """An isl list as a Python list (isl lists do not iterate)."""
    return [isl_list.get_at(k) for k in range(len(isl_list))]  # type: ignore[arg-type]


def sets_of(uset: isl.UnionSet) -> list[isl.Set]:
    return to_list(uset.get_set_list())


def maps_of(umap: isl.UnionMap) -> list[isl.Map]:
    return to_list(umap.get_map_list())


def union_set(sets: Iterable[isl.Set | isl.UnionSet]) -> isl.UnionSet:
    out = isl.UnionSet.empty(isl.Space.params_alloc(CTX, 0))
    for s in sets:
        out = out.union(isl.UnionSet(s) if isinstance(s, isl.Set) else s)
    return out


def union_map(maps: Iterable[isl.Map | isl.UnionMap]) -> isl.UnionMap:
    out = isl.UnionMap.empty(isl.Space.params_alloc(CTX, 0))
    for m in maps:
        out = out.union(isl.UnionMap.from_map(m) if isinstance(m, isl.Map) else m)
    return out


# ----------------------------------------------------------------------------- spaces

def set_space(tuple_name: str | None, names: Iterable[str], params: Iterable[str]) -> isl.Space:
    space = isl.Space.create_from_names(CTX, set=list(names), params=list(params))
    return space.set_tuple_name(dim.set, tuple_name) if tuple_name else space


def param_space(params: Iterable[str]) -> isl.Space:
    return isl.Space.create_from_names(CTX, set=[], params=list(params)).params()


def universe(space: isl.Space) -> isl.Set:
    return isl.Set.universe(space)


def dim_names(obj: isl.Set | isl.Space, kind: isl.dim_type = dim.set) -> list[str]:
    space = obj if isinstance(obj, isl.Space) else obj.get_space()
    return [space.get_dim_name(kind, k) for k in range(space.dim(kind))]


def param_names(obj: object) -> list[str]:
    space = obj if isinstance(obj, isl.Space) else obj.get_space()  # type: ignore[attr-defined]
    return [space.get_dim_name(dim.param, k) for k in range(space.dim(dim.param))]


# ----------------------------------------------------------------------------- affine trees

def affine(expr: E.Expr, space: isl.Space) -> isl.PwAff:
    """An affine expression tree as a PwAff on ``space`` (a set space holding its iterators
    as set dims and its sizes as params). Raises NotAffine for anything else."""
    ls = isl.LocalSpace.from_space(space)

    def const(value: int) -> isl.PwAff:
        return isl.PwAff.from_aff(isl.Aff.val_on_domain(ls, isl.Val.int_from_si(CTX, value)))

    def var(kind: isl.dim_type, name: str) -> isl.PwAff:
        pos = space.find_dim_by_name(kind, name)
        if pos < 0:
            raise NotAffine(expr)
        return isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, kind, pos))

    def go(node: E.Expr) -> isl.PwAff:
        if isinstance(node, E.Const) and isinstance(node.value, (int, bool)):
            return const(int(node.value))
        if isinstance(node, E.Iter):
            return var(dim.set, node.name)
        if isinstance(node, E.Param):
            return var(dim.param, node.name)
        if isinstance(node, E.Cast) and E.is_integer(node.dtype):
            return go(node.operand)
        if isinstance(node, E.Unary) and node.op == "neg":
            return go(node.operand).neg()
        if isinstance(node, E.Binary):
            if node.op in ("add", "sub"):
                a, b = go(node.lhs), go(node.rhs)
                return a.add(b) if node.op == "add" else a.sub(b)
            if node.op == "mul":
                a, b = go(node.lhs), go(node.rhs)
                if a.is_cst():
                    return b.mul(a)
                if b.is_cst():
                    return a.mul(b)
                raise NotAffine(node)
            if node.op in ("floordiv", "floormod", "div", "mod"):
                den = constant_value(node.rhs)
                if den is None or den <= 0:
                    raise NotAffine(node)
                a = go(node.lhs)
                if node.op in ("floordiv", "div"):
                    return a.scale_down_val(isl.Val.int_from_si(CTX, den)).floor()
                return a.mod_val(isl.Val.int_from_si(CTX, den))
        raise NotAffine(node)

    return go(expr)


def constant_value(node: E.Expr) -> int | None:
    """The integer value of a constant index tree, or None."""
    if isinstance(node, E.Const) and isinstance(node.value, (int, bool)):
        return int(node.value)
    if isinstance(node, E.Unary) and node.op == "neg":
        inner = constant_value(node.operand)
        return None if inner is None else -inner
    if isinstance(node, E.Binary) and node.op in ("add", "sub", "mul"):
        a, b = constant_value(node.lhs), constant_value(node.rhs)
        if a is None or b is None:
            return None
        return {"add": a + b, "sub": a - b, "mul": a * b}[node.op]
    return None


def access_map(domain_space: isl.Space, array: str, indices: list[isl.PwAff]) -> isl.Map:
    """{ S[i..] -> array[indices] } built from one PwAff per array dimension."""
    out_space = isl.Space.create_from_names(
        CTX, in_=dim_names(domain_space), out=[f"o{k}" for k in range(len(indices))],
        params=param_names(domain_space))
    out_space = (out_space.set_tuple_name(dim.in_, domain_space.get_tuple_name(dim.set))
                 .set_tuple_name(dim.out, array))
    if not indices:
        return isl.Map.from_multi_pw_aff(isl.MultiPwAff.zero(out_space))
    pw_list = isl.PwAffList.alloc(CTX, len(indices))
    for pa in indices:
        pw_list = pw_list.add(pa)
    return isl.Map.from_multi_pw_aff(isl.MultiPwAff.from_pw_aff_list(out_space, pw_list))


def aff_to_expr(aff: isl.Aff, iterators: list[str], params: list[str]) -> E.Expr:
    """An isl Aff (with floor divisions) as an index expression tree."""
    divs: list[E.Expr] = []
    for k in range(aff.dim(dim.div)):
        div = aff.get_div(k)
        numerator = _linear_expr(div, iterators, params, divs, _frac(div.get_denominator_val()))
        divs.append(E.Binary("floordiv", numerator,
                             E.Const(int(_frac(div.get_denominator_val())), E.INDEX_DTYPE),
                             E.INDEX_DTYPE))
    return _linear_expr(aff, iterators, params, divs, Fraction(1))


def _linear_expr(aff: isl.Aff, iterators: list[str], params: list[str], divs: list[E.Expr],
                 scale: Fraction) -> E.Expr:
    """scale * aff as a sum of terms; ``divs`` are the trees of the aff's earlier divisions."""
    terms: list[E.Expr] = []

    def add(coef: Fraction, node: E.Expr) -> None:
        coef *= scale
        if coef == 0:
            return
        if coef.denominator != 1:
            raise NotAffine(node)
        terms.append(node if coef == 1 else
                     E.Binary("mul", E.Const(int(coef), E.INDEX_DTYPE), node, E.INDEX_DTYPE))

    for kind, names, make in ((dim.in_, iterators, E.Iter), (dim.param, params, E.Param)):
        for k, name in enumerate(names):
            add(_frac(aff.get_coefficient_val(kind, k)), make(name))
    for k in range(min(aff.dim(dim.div), len(divs))):
        add(_frac(aff.get_coefficient_val(dim.div, k)), divs[k])
    constant = _frac(aff.get_constant_val()) * scale
    if constant.denominator != 1:
        raise NotAffine(E.Const(0, E.INDEX_DTYPE))
    if constant or not terms:
        terms.append(E.Const(int(constant), E.INDEX_DTYPE))
    out = terms[0]
    for t in terms[1:]:
        out = E.Binary("add", out, t, E.INDEX_DTYPE)
    return out


def map_to_index_exprs(access: isl.Map, iterators: list[str]) -> tuple[E.Expr, ...] | None:
    """Index trees of a single-valued affine access map, or None if it is not one."""
    if not access.is_single_valued():
        return None
    pma = isl.PwMultiAff.from_map(access)
    if pma.n_piece() != 1:
        return None
    params = param_names(access)
    out = []
    for k in range(access.dim(dim.out)):
        pieces = pma.get_pw_aff(k).get_pieces()
        if len(pieces) != 1:
            return None
        try:
            out.append(aff_to_expr(pieces[0][1], iterators, params))
        except NotAffine:
            return None
    return tuple(out)


def _frac(val: isl.Val) -> Fraction:
    return Fraction(str(val))


# ----------------------------------------------------------------------------- values

def fix_params(values: Mapping[str, int], params: Iterable[str]) -> isl.Set:
    """{ : p0 = v0 and ... } over the given params."""
    params = list(params)
    space = param_space(params)
    out = isl.Set.universe(space)
    for name in params:
        if name in values:
            out = out.add_constraint(isl.Constraint.eq_from_names(
                space, {name: 1, 1: -int(values[name])}))
    return out


def specialize(obj, values: Mapping[str, int]):
    """Substitute parameter values into any set, map, union or PwAff and drop the params."""
    names = [n for n in param_names(obj) if n in values]
    if not names:
        return obj
    if isinstance(obj, isl.PwAff):
        value = pw_aff_value(obj, values)
        rest = [n for n in param_names(obj) if n not in values]
        if value is None or rest:
            raise ValueError(f"cannot specialise {obj} to {dict(values)}")
        return constant_pw_aff(value)
    obj = obj.intersect_params(fix_params(values, param_names(obj)))
    for name in names:
        pos = obj.get_space().find_dim_by_name(dim.param, name)
        obj = obj.project_out(dim.param, pos, 1)
    return obj.coalesce()


def pw_aff_value(pa: isl.PwAff, values: Mapping[str, int]) -> int | None:
    """The value of a parameter-only PwAff at given parameter values (None if undefined)."""
    fixed = pa.intersect_params(fix_params(values, param_names(pa)))
    dom = fixed.domain()
    if dom.is_empty():
        return None
    val = pw_aff_bounds(fixed)[1]
    return int(val.to_python()) if val.is_int() else None


def pw_aff_bounds(pa: isl.PwAff) -> tuple[isl.Val, isl.Val]:
    """(minimum, maximum) of ``pa`` over its domain and all parameter values, as
    ``pa.min_val()``/``pa.max_val()`` would give (infinite when unbounded, NaN when
    empty).

    Those two refuse ("expecting integer affine expression") a piece whose affine form is
    rational, such as ``(-1 - i)/2`` on ``2j = 1 + i``: isl writes -j that way once a
    domain with an equality is intersected in, and it is integral only on that domain.
    The set of values taken is an ordinary integer set, so its bounds come by ILP."""
    if pa.get_domain_space().is_params():
        values = isl.Set.from_pw_multi_aff(isl.PwMultiAff.from_pw_aff(pa))
    else:
        values = isl.Map.from_pw_aff(pa).range()
    return values.dim_min_val(0), values.dim_max_val(0)


def constant_pw_aff(value: int, params: Iterable[str] = ()) -> isl.PwAff:
    """{ [(value)] } over the given parameters (a parameter-only piecewise affine)."""
    ls = isl.LocalSpace.from_space(param_space(params))
    # isl's values are exact: one past the 64 bits of int_from_si (an extent of
    # 2 * 9223372036854775807 in a C file) is read from its digits
    val = (isl.Val.int_from_si(CTX, int(value)) if -2 ** 63 <= int(value) < 2 ** 63
           else isl.Val.read_from_str(CTX, str(int(value))))
    return isl.PwAff.from_aff(isl.Aff.val_on_domain(ls, val))


def param_pw_aff(name: str, params: Iterable[str]) -> isl.PwAff:
    """{ [(name)] } over the given parameters."""
    params = list(params)
    ls = isl.LocalSpace.from_space(param_space(params))
    return isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, dim.param, params.index(name)))


def point_values(point: isl.Point) -> tuple[dict[str, int], list[int]]:
    """(parameter values by name, set coordinates) of a point."""
    space = point.get_space()
    params = {space.get_dim_name(dim.param, k): point.get_coordinate_val(dim.param, k).to_python()
              for k in range(space.dim(dim.param))}
    coords = [point.get_coordinate_val(dim.set, k).to_python() for k in range(space.dim(dim.set))]
    return params, coords


def is_constant_pw_aff(pa: isl.PwAff) -> bool:
    return pa.is_cst() and pa.n_piece() == 1


OUT_OF_OPERATIONS = "maximal number of operations"


def within_operations(budget: int, fn: Callable[[], T]) -> T | None:
    """``fn()`` with isl allowed ``budget`` operations (tableau pivots and the like), or None
    when it ran out of them; other isl errors propagate. For computations whose cost
    explodes on a few programs while a cheaper answer exists (the caller's fallback)."""
    ctx = isl.DEFAULT_CONTEXT
    ctx.reset_operations()
    ctx.set_max_operations(budget)
    try:
        return fn()
    except isl.Error as exc:
        if OUT_OF_OPERATIONS not in str(exc):
            raise
        return None
    finally:
        ctx.set_max_operations(0)
        ctx.reset_operations()
