"""The exact iteration set of a C ``for`` loop, as isl sets.

Input: ``where``, the points (outer iterators x, the loop's iterator i, parameters) that
the loop can reach before its test -- the outer domain with ``i >= init`` (``i <= init``
for a decreasing loop) and ``i`` on the stride lattice -- and ``holds``, the subset of
``where`` on which the loop condition is true. Output: the iterations C runs.

C runs i = init, init + s, ... while the condition holds, so for every outer point the
iterations are those before the first iterate that fails:

    exit(x)   = lexmin { i : (x, i) in where \\ holds }          (lexmax when s < 0)
    domain    = { (x, i) in where : i < exit(x) }                (i > exit(x) when s < 0)

Example: ``for (i = 0; i != n; i++)`` under ``n >= 0`` has exit(n) = n and domain
``{ [i] : 0 <= i < n }``; ``for (i = 0; i < n || i < 5; i++)`` gives
``{ [i] : 0 <= i < max(n, 5) }``. An outer point where no iterate fails is a loop that
never terminates: :func:`iteration_set` returns those points so the caller can reject them.
"""

from __future__ import annotations

import islpy as isl

dim = isl.dim_type


def add_iterator(outer: isl.Set, name: str) -> isl.Set:
    """``outer`` with one more (unconstrained) set dimension at the end, named ``name``."""
    n = outer.dim(dim.set)
    return outer.add_dims(dim.set, 1).set_dim_name(dim.set, n, name)


def iterator(space: isl.Space) -> isl.PwAff:
    """The last set dimension of ``space`` as a PwAff."""
    ls = isl.LocalSpace.from_space(space)
    return isl.PwAff.var_on_domain(ls, dim.set, space.dim(dim.set) - 1)


def constant(space: isl.Space, value: int) -> isl.PwAff:
    ls = isl.LocalSpace.from_space(space)
    return isl.PwAff.from_aff(isl.Aff.val_on_domain(ls, isl.Val.int_from_si(
        isl.DEFAULT_CONTEXT, value)))


def start_region(outer: isl.Set, init: isl.PwAff, step: int) -> isl.Set:
    """Outer points with i at or past ``init`` in the loop's direction, on its stride lattice:
    { (x, i) : i >= init(x) and (i - init(x)) mod step = 0 } for step > 0."""
    space = outer.get_space()
    i = iterator(space)
    region = outer.intersect(i.ge_set(init) if step > 0 else i.le_set(init))
    if abs(step) > 1:
        offset = i.sub(init) if step > 0 else init.sub(i)
        modulus = isl.Val.int_from_si(isl.DEFAULT_CONTEXT, abs(step))
        region = region.intersect(offset.mod_val(modulus).eq_set(constant(space, 0)))
    return region


def iteration_set(where: isl.Set, holds: isl.Set, step: int) -> tuple[isl.Set, isl.Set]:
    """(the iterations C runs, the outer points at which the loop never exits)."""
    depth = where.dim(dim.set) - 1
    simple = holds
    fails = where.subtract(holds)
    by_outer = isl.Map.from_range(fails).move_dims(dim.in_, 0, dim.out, 0, depth)
    first = by_outer.lexmin_pw_multi_aff() if step > 0 else by_outer.lexmax_pw_multi_aff()
    exit_at = first.get_pw_aff(0).add_dims(dim.in_, 1)
    i = iterator(where.get_space())
    before = i.lt_set(exit_at) if step > 0 else i.gt_set(exit_at)
    domain = where.intersect(before).coalesce()
    for k in range(depth + 1):  # keep the iterator names (isl may take them from `before`)
        domain = domain.set_dim_name(dim.set, k, where.get_dim_name(dim.set, k))
    if domain.is_equal(simple):  # the usual case: keep the simpler description
        domain = simple.coalesce()
    reached = where.project_out(dim.set, depth, 1)
    never = reached.subtract(first.domain())
    return domain, never
