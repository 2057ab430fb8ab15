"""Range inference (part of sema): which access bounds which index, then the exact ranges.

Two halves:

* :func:`plan` (at parse time, no isl): TC's rounds. In each round, every access whose
  non-gather indices contain exactly one unresolved index ``v`` bounds ``v``; all
  such accesses of the round together give ``v``'s range. When a round finds none,
  a single dimension whose expression has exactly one unresolved index may bound it
  (``A(i, i + j)`` bounds ``i`` through dimension 0, then ``j``). Indices with a
  ``where`` range are never inferred. An index that nothing bounds, or that is only
  bounded together with another unresolved index (``A(i + j)``), is a
  RangeInferenceError.

* :func:`interval` (at lowering time, with isl): the exact range of ``v``: the largest
  interval of values such that, for all values of the resolved indices, every chosen
  access dimension is in bounds::

      bad = { v : exists r in K with some dimension out of bounds }
      V   = { v : dimensions of v alone in bounds } - bad;   v in [min V, max V]

  (``K``: the points of the resolved indices; ``min V`` and ``max V`` are PwAffs of the
  sizes.)

  e.g. ``I(2*h + kh)`` with ``kh in 0:KH`` and I of extent H gives
  ``h in 0:floor((H - KH)/2) + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from polycomp import expr as E
from polycomp.errors import RangeInferenceError, location_in_text

dim = isl.dim_type


@dataclass(frozen=True)
class Occurrence:
    """An access that range inference may use: a read, the written left side (when the
    tensor's shape is already known) or an ``exists`` clause."""

    tensor: str
    kind: str  # "read", "write" or "exists"
    indices: tuple[E.Expr, ...]  # index trees (user names)
    names: tuple[frozenset[str], ...]  # statement indices in each dimension (empty: gather)
    gather: tuple[bool, ...]
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Given:
    """``where index in lo:hi``."""

    index: str
    lo: E.Expr
    hi: E.Expr
    names: frozenset[str]  # other indices the bounds mention
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Inferred:
    """``index`` is bounded in ``round`` by dimensions ``dims`` of occurrence ``occ``."""

    index: str
    round: int
    bounds: tuple[tuple[int, tuple[int, ...]], ...]  # (occurrence number, dimensions)


def plan(indices: Sequence[str], given: Sequence[Given], occurrences: Sequence[Occurrence],
         first_use: dict[str, tuple[int, int]], source: str, file: str | None
         ) -> tuple[Inferred, ...]:
    """The order in which the indices without a where range are inferred, and from what."""
    given_names = {g.index: g.names for g in given}
    resolved = set(given_names)
    unresolved = [i for i in indices if i not in resolved]
    out: list[Inferred] = []
    rnd = 0
    while unresolved:
        rnd += 1
        found = _whole_accesses(occurrences, resolved, given_names)
        if not found:
            found = _single_dimensions(occurrences, resolved, given_names)
        if not found:
            raise _stuck(unresolved, resolved, occurrences, first_use, source, file)
        for v in unresolved:
            if v in found:
                out.append(Inferred(v, rnd, tuple(found[v])))
        resolved |= set(found)
        unresolved = [i for i in unresolved if i not in found]
    return tuple(out)


def _linked(v: str, given_names: dict[str, frozenset[str]]) -> set[str]:
    """{v} and the where-ranged indices whose bounds depend on v (transitively)."""
    out = {v}
    changed = True
    while changed:
        changed = False
        for g, names in given_names.items():
            if g not in out and names & out:
                out.add(g)
                changed = True
    return out


def _unresolved(occ: Occurrence, resolved: set[str]) -> set[str]:
    out: set[str] = set()
    for names in occ.names:
        out |= names - resolved
    return out


def _whole_accesses(occurrences: Sequence[Occurrence], resolved: set[str],
                    given_names: dict[str, frozenset[str]]) -> dict[str, list]:
    found: dict[str, list] = {}
    for no, occ in enumerate(occurrences):
        unres = _unresolved(occ, resolved)
        if len(unres) != 1:
            continue
        v = unres.pop()
        linked = _linked(v, given_names)
        dims = tuple(d for d, names in enumerate(occ.names) if names & linked)
        found.setdefault(v, []).append((no, dims))
    return found


def _single_dimensions(occurrences: Sequence[Occurrence], resolved: set[str],
                       given_names: dict[str, frozenset[str]]) -> dict[str, list]:
    found: dict[str, list] = {}
    for no, occ in enumerate(occurrences):
        per_index: dict[str, list[int]] = {}
        for d, names in enumerate(occ.names):
            unres = names - resolved
            if len(unres) == 1:
                per_index.setdefault(next(iter(unres)), []).append(d)
        for v, dims in per_index.items():
            found.setdefault(v, []).append((no, tuple(dims)))
    return found


def _stuck(unresolved: list[str], resolved: set[str], occurrences: Sequence[Occurrence],
           first_use: dict[str, tuple[int, int]], source: str, file: str | None
           ) -> RangeInferenceError:
    v = unresolved[0]
    hint = f"give its range with a where clause, e.g. 'where {v} in 0:N'"
    for occ in occurrences:
        for names in occ.names:
            if v in names:
                others = sorted((names - resolved) - {v}) \
                    or sorted(_unresolved(occ, resolved) - {v})
                plural = "index" if len(others) == 1 else "indices"
                return RangeInferenceError(
                    f"the range of index '{v}' is ambiguous: it is only bounded through "
                    f"{occ.text} together with unresolved {plural} "
                    f"{', '.join(repr(o) for o in others)}",
                    location_in_text(source, occ.start, occ.end - occ.start, file), hint=hint)
    start, end = first_use.get(v, (0, 1))
    why = "it does not index any tensor whose shape is known"
    if any(v in {n.name for n in E.walk(t) if isinstance(n, E.Iter)}
           for occ in occurrences for t, g in zip(occ.indices, occ.gather) if g):
        why = "it only appears in a data-dependent index, which does not bound it"
    return RangeInferenceError(f"cannot infer the range of index '{v}': {why}",
                               location_in_text(source, start, end - start, file), hint=hint)


# ----------------------------------------------------------------------------- isl half

def lift(pa: isl.PwAff, space: isl.Space) -> isl.PwAff:
    """A parameter-only PwAff as a function on the set space ``space``."""
    return pa.add_dims(dim.in_, space.dim(dim.set)).align_params(space)


def variable(space: isl.Space, name: str) -> isl.PwAff:
    ls = isl.LocalSpace.from_space(space)
    return isl.PwAff.var_on_domain(ls, dim.set, space.find_dim_by_name(dim.set, name))


def project_onto(s: isl.Set, pos: int) -> isl.Set:
    """The 1-d projection of ``s`` onto set dimension ``pos``."""
    n = s.dim(dim.set)
    return s.project_out(dim.set, pos + 1, n - pos - 1).project_out(dim.set, 0, pos)


def in_bounds(index: isl.PwAff, extent: isl.PwAff) -> tuple[isl.Set, isl.Set]:
    """(0 <= index < extent, index < 0 or index >= extent) on the index's space."""
    zero = index.sub(index)
    return (index.ge_set(zero) & index.lt_set(extent),
            index.lt_set(zero) | index.ge_set(extent))


def interval(known: isl.Set, pos: int, dims: Sequence[tuple[isl.PwAff, isl.PwAff, bool]]
             ) -> isl.Set:
    """The values of set dimension ``pos`` (``v``) for which every (index, extent) pair in
    ``dims`` is in bounds for all points of ``known``: a 1-d set over the sizes. The flag
    says that the index involves ``v`` alone; such dimensions bound ``v`` directly, the
    others through the points of ``known`` (and bound nothing where there are none)."""
    space = known.get_space()
    only = isl.Set.universe(space)
    bad = isl.Set.empty(space)
    for index, extent, alone in dims:
        inside, outside = in_bounds(index, extent)
        bad = bad | (known & outside)
        if alone:
            only = only & inside
    values = project_onto(only, pos) - project_onto(bad, pos)
    if not any(alone for _, _, alone in dims):
        values = values.intersect_params(known.params())
    return values.coalesce()


def simplify_params(s: isl.Set) -> isl.Set:
    """Drop existentially quantified variables from a parameter set where that is exact."""
    s = s.coalesce()
    plain = s.remove_divs()
    return plain if plain.is_equal(s) else s
