"""The integer linear program that finds one Pluto hyperplane per statement.

Stage: a helper of scheduler/pluto.py. Input: the statements of one fusion group, the
dependence pieces (scheduler/farkas.py) that the new row must respect and bound, and the
rows found so far per statement. Output: a :class:`Solution` (one affine row per
statement) or None.

Unknowns, in the order isl's lexmin minimises them (Bondhugula et al., PLDI 2008; the
coefficient sum is Pluto+'s refinement, Acharya & Bondhugula, PPoPP 2015):

    u_p (one per parameter), w         the dependence distance bound  u.p + w
    csum                               the sum of |iterator coefficients| of all statements
    per statement, textual order:      c_{n-1} .. c_0 (innermost iterator first, so that
                                       ties keep the original loop order), then c_const

Constraints, for every dependence piece e: S -> T (delta_e = phi_T(y) - phi_S(x)):

    delta_e >= 0              on the pieces live when the band started (tiling validity)
    u.p + w - delta_e >= 0    on the pieces not yet satisfied (the bounding function)

both as substitutions into the piece's Farkas cone. Linear independence from the rows
found so far (for statements not yet of full rank), with H_perp a basis of the orthogonal
complement of those rows:

    convex (Pluto):  H_perp_j . c >= 0 for every j, and sum_j H_perp_j . c >= 1
    exact (Pluto+):  H_perp_j . c >= 1 or <= -1 for some j, with binary selectors

Coefficients are 0..bound, or -bound..bound as c = c⁺ - c⁻ when negative ones are
allowed. A Feautrier-style problem (``strict``) drops independence and bounding and asks
one piece to be carried instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import gcd

import islpy as isl

from polycomp import islutil as U

from .farkas import Piece, Row

dim = isl.dim_type


@dataclass(frozen=True)
class Config:
    """Bounds of the ILP.

    coefficient_bound  |iterator coefficient| <= this (Pluto uses small bounds; 4 here)
    constant_bound     0 <= c_const <= this (shifts)
    u_bound            0 <= u_p <= this (parametric distance bound)
    w_bound            0 <= w <= this (constant distance bound; large for fixed sizes)
    negative           allow negative iterator coefficients in the ordinary search
    exact_retry_unknowns  retry a failed relaxed ILP (farkas.Sizes) on exact rows only up
                       to this many unknowns: isl may take seconds to prove a large exact
                       ILP infeasible, and the relaxation rarely loses a solution
    """

    coefficient_bound: int = 4
    constant_bound: int = 32
    u_bound: int = 5
    w_bound: int = 1 << 24
    negative: bool = False
    exact_retry_unknowns: int = 24


@dataclass(frozen=True)
class Solution:
    """One row per statement; ``u``, ``w`` the distance bound found. ``coincident``: every
    bounded piece has distance exactly 0 (u = 0 and w = 0)."""

    rows: Mapping[str, Row]
    u: tuple[int, ...]
    w: int

    @property
    def coincident(self) -> bool:
        return self.w == 0 and not any(self.u)


class Layout:
    """Positions of the ILP's unknowns; a linear expression is {position: coefficient}."""

    def __init__(self, stmts: Sequence[tuple[str, int]], n_params: int, negative: bool):
        self.n_params = n_params
        self.negative = negative
        self.u = list(range(n_params))
        self.w = n_params
        self.csum = n_params + 1
        pos = n_params + 2
        self.iters: dict[str, list[dict[int, int]]] = {}
        self.const: dict[str, int] = {}
        self.coefficient_vars: list[int] = []
        self.dims = dict(stmts)
        for name, n in stmts:
            exprs: list[dict[int, int]] = [{} for _ in range(n)]
            for k in reversed(range(n)):
                if negative:  # minimise c⁻ before c⁺: prefer the positive direction
                    exprs[k] = {pos + 1: 1, pos: -1}
                    self.coefficient_vars += [pos, pos + 1]
                    pos += 2
                else:
                    exprs[k] = {pos: 1}
                    self.coefficient_vars.append(pos)
                    pos += 1
            self.iters[name] = exprs
            self.const[name] = pos
            pos += 1
        self.n_vars = pos

    def new_vars(self, count: int) -> list[int]:
        """``count`` more unknowns, minimised last."""
        self.n_vars += count
        return list(range(self.n_vars - count, self.n_vars))

    def row_of(self, name: str, values: Sequence[int]) -> Row:
        coefficients = [sum(values[v] * a for v, a in e.items()) for e in self.iters[name]]
        return tuple(coefficients) + (values[self.const[name]],)


class Problem:
    """Inequalities over a Layout, each a list: coefficients of the unknowns, then the
    constant (row . (vars, 1) >= 0)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.rows: dict[tuple[int, ...], None] = {}
        self.box: dict[int, tuple[int, int]] = {}

    def add(self, expr: Mapping[int, int], constant: int) -> None:
        row = [0] * (self.layout.n_vars + 1)
        for v, a in expr.items():
            row[v] += a
        row[-1] = constant
        self.rows[tuple(row)] = None

    def add_bounds(self, config: Config) -> None:
        lay = self.layout
        for v in lay.u:
            self._between(v, 0, config.u_bound)
        self._between(lay.w, 0, config.w_bound)
        for v in lay.coefficient_vars:
            self._between(v, 0, config.coefficient_bound)
        for v in lay.const.values():
            self._between(v, 0, config.constant_bound)
        total = {v: 1 for v in lay.coefficient_vars}
        total[lay.csum] = -1
        self.add(total, 0)
        self.add({v: -a for v, a in total.items()}, 0)

    def _between(self, v: int, lo: int, hi: int) -> None:
        self.box[v] = (lo, hi)
        self.add({v: 1}, -lo)
        self.add({v: -1}, hi)

    def essential_rows(self) -> list[tuple[int, ...]]:
        """The rows without those that hold on the whole box of bounds, and of rows with
        the same coefficients only the tightest (the box rows themselves are kept)."""
        n = self.layout.n_vars
        tightest: dict[tuple[int, ...], int] = {}
        for row in self.rows:
            coefficients, constant = row[:-1], row[-1]
            nonzero = [(k, a) for k, a in enumerate(coefficients) if a]
            if len(nonzero) > 1 and all(k in self.box for k, _ in nonzero):
                low = constant + sum(a * self.box[k][0 if a > 0 else 1] for k, a in nonzero)
                if low >= 0:
                    continue
            if coefficients not in tightest or constant < tightest[coefficients]:
                tightest[coefficients] = constant
        return [c + (k,) for c, k in tightest.items() if len(c) == n]

    def add_pieces(self, pieces: Sequence[Piece], bounding: bool, config: Config,
                   carried: Piece | None = None, relaxed: bool = False) -> None:
        """delta >= 0 on each piece (validity; >= 1 on ``carried``), or u.p + w - delta >= 0
        (bounding), from the simplified rows of each pair of statements (:func:`pair_rows`)."""
        lay = self.layout
        pairs: dict[tuple[str, str], list[Piece]] = {}
        for piece in pieces:
            pairs.setdefault((piece.source, piece.target), []).append(piece)
        for (source, target), group in pairs.items():
            n_p = _n_local_params(group[0])
            local = [{lay.u[p]: 1} for p in range(n_p)] + [{lay.w: 1}]
            local += lay.iters[source] + [{lay.const[source]: 1}]
            if target != source:
                local += lay.iters[target] + [{lay.const[target]: 1}]
            for row in pair_rows(group, bounding, carried, config, lay.negative, relaxed):
                expr: dict[int, int] = {}
                for a, e in zip(row, local):
                    if a:
                        _acc(expr, e, a)
                self.add(expr, row[-1])

    def add_independence(self, name: str, perp: Sequence[Sequence[int]],
                         selectors: Sequence[int] | None, bound: int) -> None:
        """The new row of ``name`` leaves the span of its earlier rows (see module doc).
        ``selectors``: two binary unknowns per basis vector (exact form), or None (convex)."""
        lay = self.layout
        projections = []
        for b in perp:
            expr: dict[int, int] = {}
            for k, a in enumerate(b):
                if a:
                    _acc(expr, lay.iters[name][k], a)
            projections.append(expr)
        if selectors is None:
            total: dict[int, int] = {}
            for expr in projections:
                self.add(expr, 0)
                _acc(total, expr, 1)
            self.add(total, -1)
            return
        # sign * (b . c) >= 1 - big * (1 - d) for each selector d; at least one d is 1
        chosen = iter(selectors)
        for b, expr in zip(perp, projections):
            big = 1 + sum(abs(a) for a in b) * bound
            for sign in (1, -1):
                d = next(chosen)
                self._between(d, 0, 1)
                half = _scaled(expr, sign)
                half[d] = half.get(d, 0) - big
                self.add(half, big - 1)
        self.add({d: 1 for d in selectors}, -1)

    def basic_set(self) -> isl.BasicSet:
        n = self.layout.n_vars
        space = isl.Space.set_alloc(U.CTX, 0, n)
        ls = isl.LocalSpace.from_space(space)
        bset = isl.BasicSet.universe(space)
        for row in self.essential_rows():
            bset = bset.add_constraint(_constraint(ls, row, n))
        return bset

    def lexmin(self) -> list[int] | None:
        """The lexicographically smallest integer point, or None if there is none.

        Redundant rows are removed first: isl's exact solver is fast on the reduced
        problem and erratic on the raw one (minutes instead of milliseconds)."""
        bset = self.basic_set().remove_redundancies()
        if bset.is_empty():
            return None
        best = bset.to_set().lexmin()
        if best.is_empty():
            return None
        point = best.sample_point()
        return [point.get_coordinate_val(dim.set, k).to_python()
                for k in range(self.layout.n_vars)]


def _acc(target: dict[int, int], expr: Mapping[int, int], scale: int) -> None:
    for v, a in expr.items():
        value = target.get(v, 0) + a * scale
        if value:
            target[v] = value
        else:
            target.pop(v, None)


def _scaled(expr: Mapping[int, int], scale: int) -> dict[int, int]:
    return {v: a * scale for v, a in expr.items()}


# ----------------------------------------------------------------------------- per piece

_LOCAL: dict[tuple, tuple[tuple[int, ...], ...]] = {}


def _n_local_params(piece: Piece) -> int:
    """Local u's: the parameters, then the sizes (zero coefficients in exact rows)."""
    return piece.n_params + (len(piece.sizes.names) if piece.sizes is not None else 0)


def pair_rows(pieces: Sequence[Piece], bounding: bool, carried: Piece | None, config: Config,
              negative: bool, relaxed: bool) -> tuple[tuple[int, ...], ...]:
    """The rows of all pieces between one pair of statements, with the rows implied by
    the others dropped (the pieces of a pair overlap: one per access pair)."""
    key = (tuple(p.uid for p in pieces), bounding, carried.uid if carried else None,
           negative, config, relaxed)
    if key not in _LOCAL:
        rows = {r: None for p in pieces
                for r in local_rows(p, bounding, 1 if p is carried else 0, config, negative,
                                    relaxed)}
        _LOCAL[key] = (_without_redundant(list(rows), *_local_space(pieces[0], config, negative))
                       if len(pieces) > 1 else tuple(rows))
    return _LOCAL[key]


def _local_space(piece: Piece, config: Config, negative: bool
                 ) -> tuple[int, list[tuple[int, int, int]]]:
    n_p, n_s, n_t = _n_local_params(piece), piece.n_source, piece.n_target
    same = piece.source == piece.target
    s_base = n_p + 1
    t_base = s_base if same else s_base + n_s + 1
    blocks = [(s_base, n_s)] + ([] if same else [(t_base, n_t)])
    return t_base + n_t + 1, _local_bounds(n_p, blocks, config, negative)


def local_rows(piece: Piece, bounding: bool, shift: int, config: Config,
               negative: bool, relaxed: bool = False) -> tuple[tuple[int, ...], ...]:
    """The piece's constraint on its own unknowns, simplified once and cached.

    Local unknowns: u (parameters, then sizes), w, then S's coefficients and constant,
    then T's (when T != S). The Farkas rows (of the relaxed cone when ``relaxed`` and the
    piece has one, see farkas.Sizes) are substituted (delta = phi_T(y) - phi_S(x)),
    tightened (integer rounding after dividing by the gcd), and isl drops the rows that
    are redundant within the ILP's bounds.
    """
    key = (piece.uid, bounding, shift, negative, config, relaxed)
    if key in _LOCAL:
        return _LOCAL[key]
    n_s, n_t = piece.n_source, piece.n_target
    use_relaxed = relaxed and piece.relaxed is not None
    cone = piece.relaxed if use_relaxed else piece.rows
    n_cone_p = _n_local_params(piece) if use_relaxed else piece.n_params
    n_p = _n_local_params(piece)
    same = piece.source == piece.target
    s_base = n_p + 1
    t_base = s_base if same else s_base + n_s + 1
    n_local = t_base + n_t + 1
    sign = -1 if bounding else 1
    cst: dict[int, int] = {}
    _acc(cst, {t_base + n_t: 1}, sign)
    _acc(cst, {s_base + n_s: 1}, -sign)
    if bounding:
        cst[n_p] = 1
    form: list[dict[int, int]] = [cst]
    form += [{p: 1} if bounding else {} for p in range(n_cone_p)]
    form += [{s_base + k: -sign} for k in range(n_s)]
    form += [{t_base + k: sign} for k in range(n_t)]
    rows: dict[tuple[int, ...], None] = {}
    for frow in cone:
        expr: dict[int, int] = {}
        for a, e in zip(frow, form):
            if a:
                _acc(expr, e, a)
        row = [0] * (n_local + 1)
        for v, a in expr.items():
            row[v] = a
        row[-1] = frow[-1] - frow[0] * shift
        tight = _tighten(row)
        if tight is not None:
            rows[tight] = None
    result = _without_redundant(list(rows), *_local_space(piece, config, negative))
    _LOCAL[key] = result
    return result


def _tighten(row: list[int]) -> tuple[int, ...] | None:
    """a.x + c >= 0 over integers as (a/g).x + floor(c/g) >= 0; None if trivially true."""
    g = 0
    for a in row[:-1]:
        g = gcd(g, abs(a))
    if g == 0:
        return None
    return tuple(a // g for a in row[:-1]) + (row[-1] // g,)


def _local_bounds(n_p: int, blocks: list[tuple[int, int]], config: Config,
                  negative: bool) -> list[tuple[int, int, int]]:
    """(position, low, high) of every local unknown."""
    low = -config.coefficient_bound if negative else 0
    out = [(p, 0, config.u_bound) for p in range(n_p)] + [(n_p, 0, config.w_bound)]
    for base, n in blocks:
        out += [(base + k, low, config.coefficient_bound) for k in range(n)]
        out.append((base + n, 0, config.constant_bound))
    return out


def _without_redundant(rows: list[tuple[int, ...]], n: int,
                       bounds: list[tuple[int, int, int]]) -> tuple[tuple[int, ...], ...]:
    """The rows isl keeps after removing those implied by the others and the bounds."""
    if len(rows) <= 1:
        return tuple(rows)
    space = isl.Space.set_alloc(U.CTX, 0, n)
    ls = isl.LocalSpace.from_space(space)
    bset = isl.BasicSet.universe(space)
    for row in rows:
        bset = bset.add_constraint(_constraint(ls, row, n))
    for v, lo, hi in bounds:
        bset = bset.add_constraint(_constraint(ls, _unit(n, v, 1, -lo), n))
        bset = bset.add_constraint(_constraint(ls, _unit(n, v, -1, hi), n))
    bset = bset.remove_redundancies()
    if bset.is_empty():
        return ((0,) * n + (-1,),)
    bound_rows = {r for v, lo, hi in bounds for r in (_unit(n, v, 1, -lo), _unit(n, v, -1, hi))}
    kept: dict[tuple[int, ...], None] = {}
    for con in bset.get_constraints():
        row = tuple(con.get_coefficient_val(dim.set, k).to_python() for k in range(n))
        row += (con.get_constant_val().to_python(),)
        for r in ([row, tuple(-a for a in row)] if con.is_equality() else [row]):
            if r not in bound_rows:
                kept[r] = None
    return tuple(kept)


def _unit(n: int, v: int, a: int, c: int) -> tuple[int, ...]:
    row = [0] * (n + 1)
    row[v] = a
    row[-1] = c
    return tuple(row)


def _constraint(ls: isl.LocalSpace, row: Sequence[int], n: int) -> isl.Constraint:
    con = isl.Constraint.inequality_alloc(ls)
    for k in range(n):
        if row[k]:
            con = con.set_coefficient_val(dim.set, k, row[k])
    return con.set_constant_val(row[-1])


# ----------------------------------------------------------------------------- solving

def solve(stmts: Sequence[tuple[str, int]], n_params: int, validity: Sequence[Piece],
          bounding: Sequence[Piece], perps: Mapping[str, Sequence[Sequence[int]]],
          config: Config, negative: bool = False, exact: bool = False,
          relaxed: bool = False) -> Solution | None:
    """The Pluto hyperplane: lexmin over (u, w, csum, coefficients); see module doc.
    ``perps`` holds H_perp for each statement that still needs a linearly independent row."""
    layout = Layout(stmts, n_params, negative or config.negative)
    selectors = {name: layout.new_vars(2 * len(perp)) if exact else None
                 for name, perp in perps.items() if perp}
    problem = Problem(layout)
    problem.add_bounds(config)
    problem.add_pieces(validity, False, config, relaxed=relaxed)
    problem.add_pieces(bounding, True, config, relaxed=relaxed)
    for name, chosen in selectors.items():
        problem.add_independence(name, perps[name], chosen, config.coefficient_bound)
    values = problem.lexmin()
    if values is None:
        return None
    rows = {name: layout.row_of(name, values) for name, _ in stmts}
    return Solution(rows, tuple(values[v] for v in layout.u), values[layout.w])


def solve_strict(stmts: Sequence[tuple[str, int]], n_params: int, validity: Sequence[Piece],
                 carried: Piece, config: Config, relaxed: bool = False) -> Solution | None:
    """Feautrier-style: delta >= 0 on every piece, delta >= 1 on ``carried``; coefficients
    may be negative; the smallest such row."""
    layout = Layout(stmts, n_params, negative=True)
    problem = Problem(layout)
    problem.add_bounds(config)
    problem.add_pieces(validity, False, config, carried=carried, relaxed=relaxed)
    values = problem.lexmin()
    if values is None:
        return None
    rows = {name: layout.row_of(name, values) for name, _ in stmts}
    return Solution(rows, tuple(values[v] for v in layout.u), values[layout.w])


# ----------------------------------------------------------------------------- linear algebra

def rank(rows: Sequence[Sequence[int]], n: int) -> int:
    return len(_echelon([list(map(Fraction, r[:n])) for r in rows], n)[1])


def orthogonal_complement(rows: Sequence[Sequence[int]], n: int) -> list[tuple[int, ...]]:
    """An integer basis of { x : r . x = 0 for every row r } (iterator parts only), each
    vector scaled to coprime integers and signed so that its entries sum to >= 0."""
    matrix, pivots = _echelon([list(map(Fraction, r[:n])) for r in rows], n)
    free = [k for k in range(n) if k not in pivots]
    basis = []
    for f in free:
        x = [Fraction(0)] * n
        x[f] = Fraction(1)
        for row, p in zip(matrix, pivots):
            x[p] = -row[f]
        vec = list(_integral_vector(x))
        if sum(vec) < 0 or (sum(vec) == 0 and next(v for v in vec if v) < 0):
            vec = [-v for v in vec]
        basis.append(tuple(vec))
    return basis


def _echelon(matrix: list[list[Fraction]], n: int) -> tuple[list[list[Fraction]], list[int]]:
    """Reduced row echelon form: (non-zero rows, pivot column of each)."""
    rows = [r[:] for r in matrix]
    out: list[list[Fraction]] = []
    pivots: list[int] = []
    for col in range(n):
        pick = next((r for r in rows if r[col] != 0), None)
        if pick is None:
            continue
        rows.remove(pick)
        pick = [v / pick[col] for v in pick]
        rows = [[a - r[col] * b for a, b in zip(r, pick)] for r in rows]
        out = [[a - r[col] * b for a, b in zip(r, pick)] for r in out]
        out.append(pick)
        pivots.append(col)
    return out, pivots


def _integral_vector(values: Sequence[Fraction]) -> tuple[int, ...]:
    denominator = 1
    for v in values:
        denominator = denominator * v.denominator // gcd(denominator, v.denominator)
    ints = [int(v * denominator) for v in values]
    g = 0
    for v in ints:
        g = gcd(g, abs(v))
    return tuple(v // g for v in ints) if g > 1 else tuple(ints)


