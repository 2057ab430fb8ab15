"""Scalar expansion: Program -> Program, before the dependences are computed.

A local scalar that carries a reduction across an inner loop serialises everything
around it: every iteration writes the same memory cell, so anti and output dependences
tie each iteration to the next, and no scheduler may interchange or tile those loops.
ludcmp's ``w`` is the textbook case::

    for (i ...) for (j < i) { w = A[i][j]; for (k < j) w -= A[i][k] * A[k][j];
                              A[i][j] = w / A[j][j]; }

Pluto and isl can only keep this order, whose inner loop walks a column of A. When
each value of ``w`` lives within one iteration of the loops around it (its value-based
flow dependences all have distance 0 on those loops), giving every iteration its own
cell changes no value read (Feautrier's array expansion): ``w`` becomes ``w_e[i][j]``,
the false dependences vanish, and the scheduler is free to run k outside j, as it does
for lu.

The pass works per temporary rank-0 array (a C local like ``double w;``; a kernel
argument keeps its meaning, so it is never touched):

1. Its statements fall into *live ranges*: the connected parts of the graph whose
   edges are the flow dependences through it. A range whose reads are not all fed by
   its own writes (a value from before the kernel) stays on the original array.
2. Every other range gets its own array (renaming alone is always legal: no read's
   value came from another range), expanded over the loops common to its statements
   (the shared prefix of their original 2d+1 schedules) on which every flow dependence
   of the range has distance 0 and whose lower bound is a constant.
3. Only ranges that span an inner loop are expanded (a statement deeper than the common
   loops: the accumulation pattern). A range whose statements all sit in the same
   innermost iteration gains parallelism too, but full expansion would add an array's
   worth of memory traffic to every such loop: those are renamed and left scalar.
   Expansion is capped at the rank of the program's largest array.

Expanded arrays have role "scratch": the generated code allocates and frees them itself,
so neither the runtime nor a whole-file splice needs to know they exist.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Array, Program, Statement

dim = isl.dim_type


def expand_scalars(program: Program) -> Program:
    """``program`` with its privatisable temporary scalars renamed and expanded.

    A specialised program is expanded as its parametric form is, then specialised: the
    two must agree (isl's scheduler schedules the parametric form, and the tree must be
    legal for the specialised one), and constant sizes can make a loop a single point,
    which would change the decisions (fuzz 1212:1622)."""
    if program.generic is not None and program.sizes:
        generic = expand_scalars(program.generic)
        if generic is program.generic:
            return program
        return generic.specialize(dict(program.sizes))
    out = program
    for array in program.arrays:
        if array.rank == 0 and array.role == "temporary":
            out = _expand_array(out, array)
    return out


def _expand_array(program: Program, array: Array) -> Program:
    touching = [s for s in program.statements
                if _writes(s, array.name) or any(_names(r) == array.name for r in s.reads)]
    if not touching:
        return program
    flow, no_source = array_flow(program, array.name)
    ranges = _live_ranges(touching, flow)
    if len(ranges) == 1 and not _spans_inner_loop(program, ranges[0]):
        return program
    max_rank = max((a.rank for a in program.arrays), default=0)
    taken = {a.name for a in program.arrays}
    new_arrays: list[Array] = []
    rewrite: dict[str, tuple[str, list[tuple[int, int]]]] = {}  # stmt -> (array, keys)
    for group in ranges:
        if any(not no_source.intersect_domain(s.domain).is_empty() for s in group):
            continue  # reads a value from before: keep the original cell
        name = _fresh(f"{array.name}_e", taken)
        levels = _key_levels(program, group, flow) if _spans_inner_loop(program, group) else []
        levels = levels[:max_rank]
        if not levels and len(ranges) == 1:
            continue  # renaming the only range changes nothing
        shape, lows = _shape(program, group, levels)
        new_arrays.append(Array(name, array.dtype, shape, "scratch"))
        for s in group:
            rewrite[s.name] = (name, [(loop[s.name], low) for loop, low in zip(levels, lows)])
    if not rewrite:
        return program
    statements = tuple(_rewrite(s, array.name, *rewrite[s.name]) if s.name in rewrite else s
                       for s in program.statements)
    still_used = any(s.name not in rewrite for s in touching)
    arrays = tuple(a for a in program.arrays if a.name != array.name or still_used)
    return replace(program, arrays=arrays + tuple(new_arrays), statements=statements)


# ----------------------------------------------------------------------------- analysis

def _names(access: isl.Map) -> str:
    return access.get_tuple_name(dim.out)


def _writes(s: Statement, name: str) -> bool:
    return _names(s.write) == name


def array_flow(program: Program, name: str) -> tuple[isl.UnionMap, isl.UnionMap]:
    """Value-based flow dependences through array ``name`` and its reads with no write
    before them, under the original schedule."""
    reads = U.union_map(r.intersect_domain(s.domain) for s in program.statements
                        for r in s.reads if _names(r) == name)
    writes = U.union_map(s.write.intersect_domain(s.domain) for s in program.statements
                         if _writes(s, name))
    schedule = program.original_schedule.intersect_params(program.context)
    info = (isl.UnionAccessInfo.from_sink(reads.intersect_params(program.context))
            .set_must_source(writes.intersect_params(program.context))
            .set_schedule_map(schedule).compute_flow())
    return info.get_may_dependence(), info.get_may_no_source()


def _live_ranges(touching: list[Statement], flow: isl.UnionMap) -> list[list[Statement]]:
    """Statements joined by a flow dependence, in textual order of their first member."""
    parent = {s.name: s.name for s in touching}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for m in U.maps_of(flow):
        a, b = root(m.get_tuple_name(dim.in_)), root(m.get_tuple_name(dim.out))
        if a != b:
            parent[b] = a
    groups: dict[str, list[Statement]] = {}
    for s in touching:
        groups.setdefault(root(s.name), []).append(s)
    return list(groups.values())


def _loop_dims(program: Program, s: Statement) -> list[tuple[str, int] | tuple[str, int, int]]:
    """Each time dimension of ``s``'s original schedule: ("const", value) or
    ("loop", domain dimension, sign) when it is plus or minus one iterator; anything
    else ends the list."""
    maps = U.maps_of(program.original_schedule.intersect_domain(
        isl.UnionSet.from_set(s.domain)))
    if len(maps) != 1:
        return []
    sched = maps[0]
    n_in = sched.dim(dim.in_)
    out: list = []
    for p in range(sched.dim(dim.out)):
        value = sched.plain_get_val_if_fixed(dim.out, p)
        if value.is_int():
            out.append(("const", int(value.to_python())))
            continue
        found = None
        for l in range(n_in):
            for sign in (1, -1):
                c = (isl.Constraint.equality_alloc(isl.LocalSpace.from_space(sched.get_space()))
                     .set_coefficient_val(dim.out, p, 1)
                     .set_coefficient_val(dim.in_, l, -sign))
                if sched.is_subset(sched.add_constraint(c)):
                    found = ("loop", l, sign)
                    break
            if found:
                break
        if found is None:
            break
        out.append(found)
    return out


def _common_loops(program: Program, group: list[Statement]) -> list[dict[str, int]]:
    """The loops shared by every statement of ``group``, outermost first: for each, the
    domain dimension that is its iterator in each statement."""
    dims = {s.name: _loop_dims(program, s) for s in group}
    loops: list[dict[str, int]] = []
    for p in range(min(len(d) for d in dims.values())):
        column = [dims[s.name][p] for s in group]
        if all(c[0] == "const" for c in column):
            if len({c[1] for c in column}) != 1:
                break
            continue
        if all(c[0] == "loop" for c in column) and len({c[2] for c in column}) == 1:
            loops.append({s.name: dims[s.name][p][1] for s in group})
            continue
        break
    return loops


def _spans_inner_loop(program: Program, group: list[Statement]) -> bool:
    """Some statement of the range lies in a loop the others do not share."""
    depth = len(_common_loops(program, group))
    return any(s.domain.dim(dim.set) > depth for s in group)


def _key_levels(program: Program, group: list[Statement], flow: isl.UnionMap
                ) -> list[dict[str, int]]:
    """The common loops on which every flow dependence of the range has distance 0 and
    the iterator's lower bound over the range is a constant."""
    names = {s.name for s in group}
    deps = [m for m in U.maps_of(flow) if m.get_tuple_name(dim.in_) in names]
    levels = []
    for loop in _common_loops(program, group):
        if all(_same_iteration(m, loop[m.get_tuple_name(dim.in_)],
                               loop[m.get_tuple_name(dim.out)]) for m in deps) \
                and _low(group, loop) is not None:
            levels.append(loop)
    return levels


def _same_iteration(m: isl.Map, src_dim: int, snk_dim: int) -> bool:
    c = (isl.Constraint.equality_alloc(isl.LocalSpace.from_space(m.get_space()))
         .set_coefficient_val(dim.in_, src_dim, 1).set_coefficient_val(dim.out, snk_dim, -1))
    return m.is_subset(m.add_constraint(c))


def _projection(s: Statement, l: int) -> isl.Set:
    """The values the iterator at domain dimension ``l`` takes, as a 1-d set."""
    n = s.domain.dim(dim.set)
    return (s.domain.project_out(dim.set, l + 1, n - l - 1).project_out(dim.set, 0, l)
            .reset_tuple_id())


def _values(group: list[Statement], loop: dict[str, int]) -> isl.Set:
    sets = [_projection(s, loop[s.name]) for s in group]
    out = sets[0]
    for other in sets[1:]:
        out = out.union(other.align_params(out.get_space()))
    return out.coalesce()


def _low(group: list[Statement], loop: dict[str, int]) -> int | None:
    values = _values(group, loop)
    if values.is_empty():
        return None
    low = values.dim_min(0)
    if not U.is_constant_pw_aff(low):
        return None
    return int(U.pw_aff_bounds(low)[0].to_python())


def _shape(program: Program, group: list[Statement], levels: list[dict[str, int]]
           ) -> tuple[tuple[isl.PwAff, ...], list[int]]:
    """One extent per key level (at least 1 for every parameter value) and its offset."""
    shape, lows = [], []
    params = list(program.params)
    one = U.constant_pw_aff(1, params)
    for loop in levels:
        low = _low(group, loop)
        assert low is not None
        high = _values(group, loop).dim_max(0)
        extent = high.add(U.constant_pw_aff(1 - low, U.param_names(high)))
        extent = extent.align_params(one.get_space()).union_max(one).coalesce()
        shape.append(extent)
        lows.append(low)
    return tuple(shape), lows


def _fresh(base: str, taken: set[str]) -> str:
    k = 0
    while f"{base}{k}" in taken:
        k += 1
    taken.add(f"{base}{k}")
    return f"{base}{k}"


# ----------------------------------------------------------------------------- rewrite

def _rewrite(s: Statement, old: str, new: str, keys: list[tuple[int, int]]) -> Statement:
    """``s`` with every access to ``old`` made an access to ``new`` at the key iterators
    (domain dimension, minus its constant lower bound)."""
    iterators = s.iterators
    indices = tuple(E.Binary("sub", E.Iter(iterators[l]), E.Const(low, E.INDEX_DTYPE),
                             E.INDEX_DTYPE) if low else E.Iter(iterators[l])
                    for l, low in keys)
    space = s.domain.get_space()
    ls = isl.LocalSpace.from_space(space)
    pieces = [isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, dim.set, l)
                                 .add_constant_val(isl.Val.int_from_si(U.CTX, -low)))
              for l, low in keys]
    access = U.access_map(space, new, pieces)

    def swap(node: E.Expr) -> E.Expr | None:
        if isinstance(node, E.Access) and node.array == old:
            return replace(node, array=new, indices=indices)
        return None

    target = swap(s.target) if s.target.array == old else s.target
    return replace(
        s, write=access if _names(s.write) == old else s.write,
        reads=tuple(access if _names(r) == old else r for r in s.reads),
        target=target, expr=E.transform(s.expr, swap))  # type: ignore[arg-type]
