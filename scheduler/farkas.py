"""Dependence pieces and the affine forms that are valid on them (the affine Farkas lemma).

Stage: a helper of the Pluto scheduler (scheduler/pluto.py). Input: the dependences as an
isl union map and the program's parameter context. Output: :class:`Piece` objects, one
per basic map of the dependences, each holding its dependence polyhedron and the integer
rows that describe every affine form non-negative on it.

For a piece S -> T with polyhedron P = { [S[x] -> T[y]] : ... } over parameters p,
``P.coefficients()`` is the cone of all (c_cst, c_p, c_x, c_y) with

    c_cst + c_p . p + c_x . x + c_y . y >= 0    for every point of P

(isl applies Farkas' lemma and projects the multipliers out). Pluto's constraints are
such forms whose coefficients are affine in the unknowns of its ILP: the schedule
difference phi_T(y) - phi_S(x) is the form (cT0 - cS0, 0, -cS, cT). Each piece stores
the cone as rows ``a`` meaning ``a[:-1] . c + a[-1] >= 0``, so that the ILP is built by
substitution (scheduler/pluto_ilp.py) and membership tests are plain integer arithmetic.

Example: ``{ S[i] -> S[i + 1] : 0 <= i < N - 1 }`` gives rows equivalent to
``c_i + c_i' >= 0, c_cst + c_i' >= 0, ...``; the form of phi = i (-1, 1 on x, y) is valid.
"""

from __future__ import annotations

import itertools
from math import gcd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import islpy as isl

from polycomp import islutil as U

dim = isl.dim_type
_IDS = itertools.count()

# One statement's affine row: iterator coefficients, then the constant.
Row = tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Piece:
    """One convex piece of the dependences between two statements.

    uid       unique number (pieces are compared and cached by it, never by isl value)
    source    name of the source statement S; ``n_source`` its number of iterators
    target    name of the sink statement T; ``n_target`` its number of iterators
    poly      { [S[x] -> T[y]] : ... } over the program's parameters (in their order)
    rows      the valid-form cone: each row a with a[:-1] . (c_cst, c_p, c_x, c_y) + a[-1] >= 0
    sizes     the large constants seen as sizes (:class:`Sizes`), or None
    relaxed   the cone of the piece with its large constants relaxed to sizes, over
              (c_cst, c_p.., c_sizes.., c_x, c_y): a subset of ``rows`` (for the ILP only)
    """

    uid: int
    source: str
    target: str
    n_source: int
    n_target: int
    n_params: int
    poly: isl.Set
    rows: tuple[tuple[int, ...], ...]
    sizes: Sizes | None = None
    relaxed: tuple[tuple[int, ...], ...] | None = None

    def is_valid(self, form: Sequence[int]) -> bool:
        """Is the affine form (c_cst, c_p.., c_x.., c_y..) >= 0 on the whole piece?"""
        for row in self.rows:
            total = row[-1]
            for a, c in zip(row, form):
                if a and c:
                    total += a * c
            if total < 0:
                return False
        return True

    def difference(self, row_s: Row, row_t: Row) -> tuple[int, ...]:
        """The form of phi_T(y) - phi_S(x) for the rows of S and T."""
        return ((row_t[-1] - row_s[-1],) + (0,) * self.n_params
                + tuple(-c for c in row_s[:-1]) + tuple(row_t[:-1]))

    def is_satisfied(self, row_s: Row, row_t: Row) -> bool:
        """phi_T - phi_S >= 1 on the whole piece (the row carries all of it)."""
        form = list(self.difference(row_s, row_t))
        form[0] -= 1
        return self.is_valid(form)

    def is_zero(self, row_s: Row, row_t: Row) -> bool:
        """phi_T - phi_S == 0 on the whole piece."""
        form = self.difference(row_s, row_t)
        return self.is_valid(form) and self.is_valid([-c for c in form])

    def restrict_to_zero(self, pairs: Sequence[tuple[Row, Row]]) -> Piece | None:
        """The part of the piece on which every (row_S, row_T) pair has distance 0 (None if
        that part is empty; the piece itself if the distances are 0 everywhere)."""
        pairs = [(s, t) for s, t in pairs if not self.is_zero(s, t)]
        if not pairs:
            return self
        if any(self.is_satisfied(s, t) for s, t in pairs):
            return None
        poly = self.poly
        for s, t in pairs:
            poly = poly.add_constraint(self._constraint(s, t, equality=True))
        poly = poly.detect_equalities().remove_redundancies()
        if poly.is_empty():
            return None
        return _piece(self.source, self.target, self.n_source, self.n_target, self.n_params, poly,
                      self.sizes)

    def has_positive_part(self, pairs: Sequence[tuple[Row, Row]], row_s: Row, row_t: Row) -> bool:
        """Is phi_T - phi_S >= 1 somewhere on the part where the ``pairs`` are 0?"""
        if self.is_zero(row_s, row_t):
            return False
        poly = self.poly
        for s, t in pairs:
            if not self.is_zero(s, t):
                poly = poly.add_constraint(self._constraint(s, t, equality=True))
        return not poly.add_constraint(self._constraint(row_s, row_t, equality=False,
                                                        shift=-1)).is_empty()

    def _constraint(self, row_s: Row, row_t: Row, equality: bool, shift: int = 0) -> isl.Constraint:
        """phi_T(y) - phi_S(x) + shift (== 0 or >= 0) on the wrapped space of ``poly``."""
        ls = isl.LocalSpace.from_space(self.poly.get_space())
        con = (isl.Constraint.equality_alloc(ls) if equality else isl.Constraint.inequality_alloc(ls))
        coefficients = [-c for c in row_s[:-1]] + list(row_t[:-1])
        con = con.set_coefficients(dim.set, coefficients)
        return con.set_constant_val(row_t[-1] - row_s[-1] + shift)


def pieces_of(deps: isl.UnionMap, context: isl.Set, params: Sequence[str],
              accesses: Mapping[str, tuple[Sequence[isl.Map], Sequence[isl.Map]]] | None = None,
              relax: bool = True) -> list[Piece]:
    """Convex pieces covering ``deps`` (restricted to ``context``), in a stable order (by
    source, target, then as isl lists them).

    With ``accesses`` (statement -> (writes, reads)), each dependence S -> T is first split
    by the pair of accesses that touch the same element (a write of S and any access of T,
    or a read of S and a write of T). The pieces overlap but cover the dependence, and each
    has the equalities of its access pair: a coalesced stencil dependence (the union of
    seven uniform ones, one full-dimensional polytope) becomes seven pieces of half the
    dimension, whose Farkas cones are cheap (:func:`farkas_rows`).
    """
    space = U.param_space(params)
    context = context.align_params(space)
    polys = []
    maps = sorted(U.maps_of(deps.coalesce()),
                  key=lambda m: (m.get_tuple_name(dim.in_), m.get_tuple_name(dim.out)))
    for m in maps:
        m = m.align_params(space).intersect_params(context)
        if m.get_space().dim(dim.param) != len(params):
            raise ValueError(f"dependence {m} uses parameters outside {list(params)}")
        source, target = m.get_tuple_name(dim.in_), m.get_tuple_name(dim.out)
        n_s, n_t = m.dim(dim.in_), m.dim(dim.out)
        seen: set[str] = set()
        for part in _split_by_access(m, source, target, accesses):
            for bmap in part.get_basic_maps():
                poly = bmap.wrap().to_set().detect_equalities().remove_redundancies()
                text = str(poly)
                if text in seen or poly.is_empty():
                    continue
                seen.add(text)
                polys.append((source, target, n_s, n_t, poly))
    sizes = Sizes.of([p for *_, p in polys], params) if relax else None
    return [_piece(s, t, n_s, n_t, len(params), poly, sizes) for s, t, n_s, n_t, poly in polys]


def _split_by_access(m: isl.Map, source: str, target: str,
                     accesses: Mapping[str, tuple[Sequence[isl.Map], Sequence[isl.Map]]] | None
                     ) -> list[isl.Map]:
    if accesses is None or source not in accesses or target not in accesses:
        return [m]
    s_writes, s_reads = accesses[source]
    t_writes, t_reads = accesses[target]
    pairs = ([(a, b) for a in s_writes for b in list(t_writes) + list(t_reads)]
             + [(a, b) for a in s_reads for b in t_writes])
    parts = []
    for a, b in pairs:
        if a.get_tuple_name(dim.out) != b.get_tuple_name(dim.out):
            continue
        same_cell = a.apply_range(b.reverse()).align_params(m.get_space())
        part = m.intersect(same_cell).coalesce()
        if not part.is_empty():
            parts.append(part)
    covered = U.union_map(parts) if parts else None
    if covered is None or not isl.UnionMap.from_map(m).is_subset(covered):
        return [m]  # the accesses do not explain every pair: keep the dependence whole
    return parts


# variables a relaxed piece may keep after its equalities are eliminated. isl's cone
# computation is exponential in them, and the relaxed piece (one dimension more, the size)
# costs far more than the exact one: a 3x3 conv reading its padded input, 9 variables and
# one size, took 35 s where the exact piece took 0.06 s (and 15 s is the scheduler's
# whole time limit). Such a piece keeps its exact rows only, as where relax finds nothing
RELAXED_MAX_VARIABLES = 8


def _piece(source: str, target: str, n_s: int, n_t: int, n_p: int, poly: isl.Set,
           sizes: Sizes | None = None) -> Piece:
    relaxed = None
    if sizes is not None and sizes.names:
        loose = sizes.relax(poly)
        if loose is not None:
            relaxed = farkas_rows(loose, RELAXED_MAX_VARIABLES)
    return Piece(next(_IDS), source, target, n_s, n_t, n_p, poly, farkas_rows(poly), sizes,
                 relaxed)


# ----------------------------------------------------------------------------- sizes

class Sizes:
    """Large constants of the dependence polyhedra seen as unknown sizes.

    With fixed sizes (say N = 1000) the Farkas cones have vertices with coordinates like
    998, and isl's exact ILP solver slows down by two orders of magnitude on them. The
    ILP is built instead on *relaxed* pieces: every constant c with |c| >= ``threshold``
    becomes sign(c) * (Z_k - (r_k - |c|)), where Z_k is a fresh parameter for the cluster
    of constants near r_k (within ``window``: 998, 999 and 1000 share Z = 1000), with
    the context Z_k >= threshold. The relaxed piece contains the real one (its slice at
    Z_k = r_k), so a form valid on it is valid on the piece: the ILP stays sound, finds
    what it would find for the parametric program, and the exact rows are the fallback
    when the relaxation has no solution. Satisfaction and coincidence use exact rows.
    """

    def __init__(self, reps: Sequence[int], params: Sequence[str], threshold: int, window: int):
        self.reps = list(reps)
        self.params = list(params)
        self.names = [f"_size{k}" for k in range(len(reps))]
        self.threshold = threshold
        self.window = window

    @staticmethod
    def of(polys: Sequence[isl.Set], params: Sequence[str], threshold: int = 16,
           window: int = 8, margin: int = 4) -> Sizes:
        """Clusters of the large constants of ``polys``; each is represented by its largest
        value plus ``margin`` (a loop bound like i <= 998 reads i <= Z - 6): as with real
        parameters, the distance bound u.Z then covers small constant offsets, which would
        otherwise decide between hyperplanes through w."""
        values = sorted({abs(c) for poly in polys for c in _constants(poly) if abs(c) >= threshold})
        tops: list[int] = []
        for v in reversed(values):  # clusters, from the largest value down
            if not tops or tops[-1] - v > window:
                tops.append(v)
        return Sizes(sorted(t + margin for t in tops), params, threshold, window + margin)

    def lookup(self, c: int) -> tuple[int, int] | None:
        """(cluster, r - |c|) for a large constant c, or None."""
        if abs(c) < self.threshold:
            return None
        for k, r in enumerate(self.reps):
            if 0 <= r - abs(c) <= self.window:
                return k, r - abs(c)
        return None

    def relax(self, poly: isl.Set) -> isl.Set | None:
        """The relaxed piece over (params, sizes), or None when ``poly`` has existentially
        quantified variables or nothing to relax."""
        if poly.n_basic_set() != 1:
            return None
        bset = poly.get_basic_sets()[0]
        # a Set reports no div dimensions (its basic sets hold them): ask the basic set.
        # Copying its constraints without their div terms would turn (1 + n + i) mod 2 = 0
        # into 1 + n + i = 0, a different piece, and pluto broke the dependences it lost
        if bset.dim(dim.div):
            return None
        n_p, n = poly.dim(dim.param), poly.dim(dim.set)
        space = poly.get_space().align_params(U.param_space(self.params + self.names))
        ls = isl.LocalSpace.from_space(space)
        out = isl.BasicSet.universe(space)
        changed = False
        for con in bset.get_constraints():
            new = (isl.Constraint.equality_alloc(ls) if con.is_equality()
                   else isl.Constraint.inequality_alloc(ls))
            for k in range(n):
                new = new.set_coefficient_val(dim.set, k, con.get_coefficient_val(dim.set, k))
            for k in range(n_p):
                new = new.set_coefficient_val(dim.param, k, con.get_coefficient_val(dim.param, k))
            c = con.get_constant_val().to_python()
            found = self.lookup(c)
            if found is None:
                new = new.set_constant_val(c)
            else:
                k, offset = found
                sign = 1 if c > 0 else -1
                new = new.set_coefficient_val(dim.param, n_p + k, sign)
                new = new.set_constant_val(-sign * offset)
                changed = True
            out = out.add_constraint(new)
        if not changed:
            return None
        for k in range(len(self.names)):
            bound = isl.Constraint.inequality_alloc(ls).set_coefficient_val(dim.param, n_p + k, 1)
            out = out.add_constraint(bound.set_constant_val(-self.threshold))
        return out.to_set()


def _constants(poly: isl.Set) -> list[int]:
    return [con.get_constant_val().to_python()
            for bset in poly.get_basic_sets() for con in bset.get_constraints()]


def farkas_rows(poly: isl.Set, max_variables: int | None = None
                ) -> tuple[tuple[int, ...], ...] | None:
    """The cone of affine forms non-negative on ``poly`` as integer inequality rows
    (an equality gives two rows), duplicates removed; None when ``max_variables`` is
    given and more variables than that are left after the elimination below.

    Equalities of ``poly`` with a unit coefficient are used to eliminate variables first
    (z_k = M z' + M_p p + m, integral since the pivots are units): the cone of the
    lower-dimensional polyhedron Q is computed by isl and mapped back with
    c0' = c0 + c.m, c_p' = c_p + M_p^T c, c' = M^T c (+ c on the kept variables).
    Uniform dependences lose half their dimensions this way, and isl's dual computation
    is exponential in the dimension.
    """
    n_par = poly.dim(dim.param)
    n = poly.dim(dim.set)
    eliminated, reduced = _eliminate_equalities(poly)
    if max_variables is not None and reduced.dim(dim.set) > max_variables:
        return None
    kept = [k for k in range(n) if k not in eliminated]
    rows: dict[tuple[int, ...], None] = {}
    for q_row in _cone_rows(reduced):
        # q_row over (c0', c_p'.., c_kept'.., const); express through (c0, c_p, c_z, const)
        row = [0] * (1 + n_par + n + 1)
        row[0] = q_row[0]
        row[-1] = q_row[-1]
        row[1:1 + n_par] = q_row[1:1 + n_par]
        q_kept = q_row[1 + n_par:1 + n_par + len(kept)]
        for j, k in enumerate(kept):
            row[1 + n_par + k] = q_kept[j]
        for k, (var, par, cst) in eliminated.items():
            # c_k contributes c_k * m0 to c0', c_k * M_p[k] to c_p', c_k * M[k][r] to c_r'
            coef = q_row[0] * cst
            for p in range(n_par):
                if par[p]:
                    coef += q_row[1 + p] * par[p]
            for j, r in enumerate(kept):
                if var.get(r):
                    coef += q_kept[j] * var[r]
            row[1 + n_par + k] = coef
        out = _integral(row)
        if any(out[:-1]):
            rows[out] = None
    return tuple(rows)


def _cone_rows(poly: isl.Set) -> list[tuple[int, ...]]:
    """isl's Farkas cone of ``poly`` as integer rows (equalities as two rows).

    Existentially quantified variables (isl refuses them) are lifted to ordinary ones
    first; the forms not involving them are those with zero coefficients there, so
    their columns are dropped."""
    keep = 1 + poly.dim(dim.param) + poly.dim(dim.set)
    if any(b.dim(dim.div) for b in poly.get_basic_sets()):
        poly = poly.lift().flatten()
    cone = poly.coefficients()
    if cone.dim(dim.div):
        raise ValueError("isl gave a coefficient set with local variables")
    out = []
    for con in cone.get_constraints():
        values = [_value(con.get_coefficient_val(dim.set, k)) for k in range(keep)]
        values.append(_value(con.get_constant_val()))
        row = _integral(values)
        out.append(row)
        if con.is_equality():
            out.append(tuple(-a for a in row))
    return out


def _value(val: isl.Val) -> int | Fraction:
    return val.to_python() if val.is_int() else Fraction(str(val))


# an eliminated variable: ({kept variable: coefficient}, parameter coefficients, constant)
Elimination = tuple[dict[int, int], list[int], int]


def _eliminate_equalities(poly: isl.Set) -> tuple[dict[int, Elimination], isl.Set]:
    """Variables fixed by unit-coefficient equalities, each as an integer affine
    expression of the remaining variables, parameters and a constant; and ``poly`` with
    them projected out (exact, as they are functions of the others)."""
    hull = poly.affine_hull()
    n_par, n = poly.dim(dim.param), poly.dim(dim.set)
    if hull.dim(dim.div):
        return {}, poly
    solved: dict[int, Elimination] = {}
    for con in hull.get_constraints():
        if not con.is_equality():
            continue
        var = {k: con.get_coefficient_val(dim.set, k).to_python() for k in range(n)}
        par = [con.get_coefficient_val(dim.param, p).to_python() for p in range(n_par)]
        cst = con.get_constant_val().to_python()
        for k, (kvar, kpar, kcst) in solved.items():  # substitute what is solved
            a = var.pop(k, 0)
            if a:
                for r, b in kvar.items():
                    var[r] = var.get(r, 0) + a * b
                par = [x + a * y for x, y in zip(par, kpar)]
                cst += a * kcst
        pivot = next((k for k in range(n) if abs(var.get(k, 0)) == 1 and k not in solved), None)
        if pivot is None:
            continue
        a = var[pivot]  # +-1: the solution is integral
        expr: Elimination = ({r: -b * a for r, b in var.items() if b and r != pivot},
                             [-x * a for x in par], -cst * a)
        for k, (kvar, kpar, kcst) in list(solved.items()):  # and into earlier solutions
            b = kvar.pop(pivot, 0)
            if b:
                for r, c in expr[0].items():
                    kvar[r] = kvar.get(r, 0) + b * c
                solved[k] = (kvar, [x + b * y for x, y in zip(kpar, expr[1])], kcst + b * expr[2])
        solved[pivot] = expr
    reduced = poly
    for k in sorted(solved, reverse=True):
        reduced = reduced.project_out(dim.set, k, 1)
    return solved, reduced


def _integral(values: Sequence[Fraction]) -> tuple[int, ...]:
    """The smallest integer multiple of a rational row."""
    denominator = 1
    for v in values:
        denominator = denominator * v.denominator // gcd(denominator, v.denominator)
    ints = [int(v * denominator) for v in values]
    g = 0
    for v in ints:
        g = gcd(g, abs(v))
    return tuple(v // g for v in ints) if g > 1 else tuple(ints)


