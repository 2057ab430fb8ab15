"""The scheduler "pluto": Pluto's affine transformation algorithm, on islpy.

Input: a Program and its Dependences (validity = flow + anti + output). Output: an
isl.Schedule tree of bands (marked permutable, members marked coincident when they carry
no dependence) and sequence/filter nodes where statements are distributed.

After Bondhugula et al., PLDI 2008, with refinements of Pluto+ (Acharya & Bondhugula,
PPoPP 2015). Rows phi_S(i) = c_S . i + c_S0 are found one level at a time by an ILP
(scheduler/pluto_ilp.py) over the Farkas cones of the dependence pieces
(scheduler/farkas.py): every row is valid for the pieces live when its band started
(so the band is permutable, i.e. tileable), bounds the distances of the pieces not yet
satisfied by u.p + w, and is linearly independent of the statement's earlier rows.
When no row exists: close the band (drop what it satisfied) and start a new one; at a
band start, split the group (scheduler/fusion.py) into parts ordered by a scalar
dimension; a single SCC with no row falls back to negative coefficients, then to a
Feautrier-style row that carries at least one dependence, and finally to the original
order of that group, so every legal program gets a legal schedule. Under smart fusion a
parallel band left above such a split is then distributed into the bands below it
(scheduler/distribute.py), so that each statement keeps a deeper, tileable band.

Example, jacobi-1d (S0[t, i]: B[i] = f(A[i-1..i+1]); S1[t, i]: A[i] = B[i]):

    band (permutable) [{ S0[t, i] -> [t];  S1[t, i] -> [t] },
                       { S0[t, i] -> [2t + i]; S1[t, i] -> [2t + i + 1] }]
      sequence [ S0, S1 ]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError, InternalError
from polycomp.ir import Program
from polycomp.options import Options

from . import fusion
from .dependences import Dependences
from .farkas import Piece, Row, pieces_of
from .distribute import distribute_parallel_bands
from .tiling import set_coincidence
from .pluto_ilp import Config, Solution, orthogonal_complement, rank, solve, solve_strict

dim = isl.dim_type


# ----------------------------------------------------------------------------- result tree

@dataclass(frozen=True)
class Band:
    """Consecutive rows shared by a group; ``rows[k][S]`` is member k for statement S."""

    rows: tuple[Mapping[str, Row], ...]
    permutable: bool
    coincident: tuple[bool, ...]


@dataclass(frozen=True)
class Node:
    """A chain of bands, then a split (``parts``: names and subtree, in order), or a
    leaf (no parts), or the original order of ``original`` statements."""

    bands: tuple[Band, ...]
    parts: tuple[tuple[tuple[str, ...], Node], ...] = ()
    original: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- entry

def schedule_pluto(program: Program, deps: Dependences, options: Options,
                   config: Config | None = None) -> isl.Schedule:
    """Pluto's schedule for ``program`` (see the module docstring)."""
    pluto = _Pluto(program, deps, options, config or Config())
    schedule = pluto.to_isl(pluto.run())
    if options.fusion == "smart" and options.partition is None:
        schedule = distribute_parallel_bands(schedule, deps.all(), deps.carried())
    if deps.reduction is not None:
        schedule = _exact_coincidence(schedule, deps.carried())
    return schedule


def _exact_coincidence(schedule: isl.Schedule, carried: isl.UnionMap) -> isl.Schedule:
    """The rows were found against validity only; a member that carries a reduction's
    chain is not coincident (it may not run in parallel as it stands)."""
    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == isl.schedule_node_type.band:
            node = set_coincidence(node, carried)
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def _copied(s) -> str | None:
    """The array S writes when S only moves data: its value is one read or a constant."""
    if s.reduction is None and isinstance(s.expr, (E.Access, E.Const)):
        return s.write.get_tuple_name(dim.out)
    return None


def _stencil_reads(s) -> frozenset[str]:
    """The arrays S reads through more than one access (a stencil's taps)."""
    seen: dict[str, list[isl.Map]] = {}
    for r in s.reads:
        maps = seen.setdefault(r.get_tuple_name(dim.out), [])
        if not any(r.is_equal(m) for m in maps):
            maps.append(r)
    return frozenset(a for a, maps in seen.items() if len(maps) > 1)


class _Pluto:
    def __init__(self, program: Program, deps: Dependences, options: Options, config: Config):
        self.program = program
        self.deps = deps
        self.options = options
        self.config = config
        self.params = list(program.params)
        reorderable = self._reorderable()
        self.facts = {s.name: fusion.StatementFacts(
            s.name, k, len(s.iterators),
            frozenset([s.write.get_tuple_name(dim.out)]
                      + [r.get_tuple_name(dim.out) for r in s.reads]),
            s.name in reorderable, _copied(s), _stencil_reads(s))
            for k, s in enumerate(program.statements)}
        self.names = [s.name for s in program.statements]
        self.memo: dict[tuple, Solution | None] = {}
        self.feautrier_rows = 0
        self.n_sizes = 0

    def _reorderable(self) -> set[str]:
        """The streaming reductions among those whose chains the dependences set apart:
        some read touches each element once (softmax's sum of e(b, m, n), layernorm's
        mean of X(n, d)). A reduction whose every read is reused (matmul's A(m, k) across
        n, conv's weights) is compute-bound: fused into its epilogue's loops it would lose
        its tiled band and vector loop, so fusion treats it as any other statement."""
        if self.deps.reduction is None:
            return set()
        names = {m.get_tuple_name(dim.in_) for m in U.maps_of(self.deps.reduction)}
        return {s.name for s in self.program.statements if s.name in names and any(
            r.intersect_domain(s.domain).is_injective() for r in s.reads[:-1])}

    # ------------------------------------------------------------------ top level
    def run(self) -> Node:
        accesses = {s.name: ([s.write], list(s.reads)) for s in self.program.statements}
        pieces = pieces_of(self.deps.all(), self.program.context, self.params, accesses)
        sizes = next((p.sizes for p in pieces if p.sizes is not None), None)
        self.n_sizes = len(sizes.names) if sizes else 0
        rows: dict[str, tuple[Row, ...]] = {n: () for n in self.names}
        if not self.options.partition:
            return self.group(self.names, pieces, rows)
        groups = fusion.forced_groups(self.options.partition, self.names, pieces, self.facts,
                                      self.deps)
        if len(groups) == 1:
            return self.group(groups[0], pieces, rows, forced=True)
        return Node((), self.split(groups, pieces, rows, forced=True))

    def split(self, parts: Sequence[Sequence[str]], pieces: Sequence[Piece],
              rows: Mapping[str, tuple[Row, ...]], forced: bool = False
              ) -> tuple[tuple[tuple[str, ...], Node], ...]:
        """Each part scheduled on its own below a scalar dimension; the pieces between
        parts are carried by that dimension (the parts come in dependence order)."""
        position = {n: k for k, part in enumerate(parts) for n in part}
        for p in pieces:
            if position[p.source] > position[p.target]:
                raise InternalError(f"fusion ordered {p.source} after {p.target} against a "
                                    "dependence")
        out = []
        for part in parts:
            inside = [p for p in pieces if p.source in part and p.target in part]
            out.append((tuple(part), self.group(part, inside, {n: rows[n] for n in part},
                                                forced)))
        return tuple(out)

    # ------------------------------------------------------------------ one group
    def group(self, names: Sequence[str], pieces: Sequence[Piece],
              rows: Mapping[str, tuple[Row, ...]], forced: bool = False) -> Node:
        """Schedule the statements ``names`` given their outer ``rows`` and the pieces not
        carried by outer dimensions."""
        names = list(names)
        rows = dict(rows)
        bands: list[Band] = []
        band: list[Mapping[str, Row]] = []
        band_pieces = live = list(pieces)
        while True:
            full = all(self.is_full(n, rows[n]) for n in names)
            if full and not live:
                if band:
                    bands.append(self.finish(band, band_pieces)[0])
                return Node(tuple(bands))
            if band:
                found = None if full else self.solve(names, band_pieces, live, rows)
                if found is None:  # the band ends: what it carried needs no more care
                    done, live = self.finish(band, band_pieces)
                    bands.append(done)
                    band, band_pieces = [], live
                    continue
            else:
                parts = self.parts(names, live, rows, forced)
                if len(parts) > 1:
                    return Node(tuple(bands), self.split(parts, live, rows))
                found = None if full else self.first_row(names, live, rows, forced)
                forced = False
                if found is None:
                    row = self.feautrier(names, live, rows)
                    if row is None:
                        return Node(tuple(bands), original=tuple(names))
                    done, live = self.finish([row], live)
                    bands.append(done)
                    band_pieces = live
                    rows = {n: rows[n] + (row[n],) for n in names}
                    continue
            band.append(found.rows)
            rows = {n: rows[n] + (found.rows[n],) for n in names}
            live = [p for p in live
                    if not p.is_satisfied(found.rows[p.source], found.rows[p.target])]

    def parts(self, names: list[str], live: list[Piece], rows: Mapping[str, tuple[Row, ...]],
              forced: bool) -> list[list[str]]:
        if forced or len(names) == 1:
            return [names]
        if all(self.is_full(n, rows[n]) for n in names):
            return fusion.sccs(names, live, self.facts)
        return fusion.partition(self.options.fusion, names, live, self.facts,
                                lambda subset: self.solve(subset, live, live, rows),
                                outermost=all(not rows[n] for n in names))

    def first_row(self, names: list[str], live: list[Piece],
                  rows: Mapping[str, tuple[Row, ...]], forced: bool) -> Solution | None:
        """The band's first row; Pluto+'s negative coefficients, then no distance bound,
        when the plain search fails."""
        found = (self.solve(names, live, live, rows)
                 or self.solve(names, live, live, rows, negative=True)
                 or self.solve(names, live, [], rows, negative=True))
        if found is None and forced and len(fusion.sccs(names, live, self.facts)) > 1:
            crossing = next(p for p in live if p.source != p.target)
            raise IllegalScheduleError(
                f"the forced partition is illegal: statements {', '.join(names)} cannot share "
                f"an outer loop because of the "
                f"{fusion.describe_dependence(self.deps, crossing.source, crossing.target)}",
                hint="split the group, or leave the fusion decision to the scheduler")
        return found

    def feautrier(self, names: list[str], live: list[Piece],
                  rows: Mapping[str, tuple[Row, ...]]) -> dict[str, Row] | None:
        """A row that is valid for every live piece and carries at least one of them (the
        first that can be carried, in textual order); None after too many such rows."""
        limit = 4 * (len(self.names) + max((f.dim for f in self.facts.values()), default=0))
        if self.feautrier_rows >= limit:
            return None
        stmts = [(n, self.facts[n].dim) for n in names]
        n_params = len(self.params) + self.n_sizes
        for piece in sorted(live, key=lambda p: (self.facts[p.source].index,
                                                 self.facts[p.target].index)):
            found = solve_strict(stmts, n_params, live, piece, self.config, relaxed=True)
            if found is None and self._unknowns(stmts) <= self.config.exact_retry_unknowns:
                found = solve_strict(stmts, n_params, live, piece, self.config)
            if found is not None:
                self.feautrier_rows += 1
                return dict(found.rows)
        return None

    # ------------------------------------------------------------------ ILP
    def is_full(self, name: str, rows: Sequence[Row]) -> bool:
        n = self.facts[name].dim
        return rank(rows, n) == n

    def solve(self, names: Sequence[str], validity: Sequence[Piece], bounding: Sequence[Piece],
              rows: Mapping[str, tuple[Row, ...]], negative: bool = False) -> Solution | None:
        """The next Pluto row for ``names`` (memoised); pieces outside ``names`` ignored."""
        chosen = set(names)
        validity = [p for p in validity if p.source in chosen and p.target in chosen]
        bounding = [p for p in bounding if p.source in chosen and p.target in chosen]
        ordered = sorted(names, key=lambda n: self.facts[n].index)
        key = (tuple(ordered), tuple(p.uid for p in validity), tuple(p.uid for p in bounding),
               tuple(rows[n] for n in ordered), negative)
        if key not in self.memo:
            self.memo[key] = self._solve(ordered, validity, bounding, rows, negative)
        return self.memo[key]

    def _solve(self, names: list[str], validity: list[Piece], bounding: list[Piece],
               rows: Mapping[str, tuple[Row, ...]], negative: bool) -> Solution | None:
        """Relaxed sizes first (farkas.Sizes), exact rows when that finds nothing; Pluto's
        convex independence first, the exact (binary) form when that finds nothing."""
        stmts = [(n, self.facts[n].dim) for n in names]
        perps = {n: orthogonal_complement(rows[n], d) for n, d in stmts
                 if not self.is_full(n, rows[n])}
        n_params = len(self.params) + self.n_sizes
        # the convex form is exact when the basis vectors and the coefficients are >= 0
        convex_exact = not negative and all(min(b) >= 0 for perp in perps.values() for b in perp)
        relaxations = [True, False] if any(p.relaxed is not None for p in validity) else [False]
        if len(relaxations) > 1 and self._unknowns(stmts) > self.config.exact_retry_unknowns:
            relaxations = [True]
        for relaxed in relaxations:
            if not negative:
                found = solve(stmts, n_params, validity, bounding, perps, self.config,
                              relaxed=relaxed)
                if found is not None or convex_exact:
                    if found is not None:
                        return found
                    continue
            found = solve(stmts, n_params, validity, bounding, perps, self.config,
                          negative=negative, exact=True, relaxed=relaxed)
            if found is not None:
                return found
        return None

    def _unknowns(self, stmts: Sequence[tuple[str, int]]) -> int:
        return len(self.params) + self.n_sizes + 2 + sum(d + 1 for _, d in stmts)

    # ------------------------------------------------------------------ bands
    def finish(self, band: Sequence[Mapping[str, Row]], pieces: Sequence[Piece]
               ) -> tuple[Band, list[Piece]]:
        """The band with its coincident members, and the pieces it leaves unsatisfied
        (restricted to where every member has distance 0)."""
        coincident = []
        for k, row in enumerate(band):
            outer = band[:k]
            coincident.append(not any(
                p.has_positive_part([(r[p.source], r[p.target]) for r in outer],
                                    row[p.source], row[p.target])
                for p in pieces
                if not any(p.is_satisfied(r[p.source], r[p.target]) for r in outer)))
        left = []
        for p in pieces:
            rest = p.restrict_to_zero([(r[p.source], r[p.target]) for r in band])
            if rest is not None:
                left.append(rest)
        return Band(tuple(band), True, tuple(coincident)), left

    # ------------------------------------------------------------------ isl tree
    def to_isl(self, tree: Node) -> isl.Schedule:
        domain = self.program.domain()
        leaf = isl.Schedule.from_domain(domain).get_root().child(0)
        return self._insert(leaf, tree).get_schedule()

    def _insert(self, node: isl.ScheduleNode, tree: Node) -> isl.ScheduleNode:
        """Insert ``tree`` at the leaf ``node``; returns the node at the same position."""
        depth = 0
        for band in tree.bands:
            node = node.insert_partial_schedule(self._band_mupa(band))
            node = node.band_set_permutable(1 if band.permutable else 0)
            for k, flag in enumerate(band.coincident):
                node = node.band_member_set_coincident(k, 1 if flag else 0)
            node = node.child(0)
            depth += 1
        if tree.parts:
            filters = isl.UnionSetList.from_union_set(self._domain(tree.parts[0][0]))
            for names, _ in tree.parts[1:]:
                filters = filters.add(self._domain(names))
            node = node.insert_sequence(filters)
            for k, (_, sub) in enumerate(tree.parts):
                node = self._insert(node.child(k).child(0), sub).parent().parent()
        elif tree.original:
            node = node.insert_partial_schedule(self._original_mupa(tree.original))
        for _ in range(depth):
            node = node.parent()
        return node

    def _domain(self, names: Sequence[str]) -> isl.UnionSet:
        return U.union_set(self.program.statement(n).domain for n in names)

    def _band_mupa(self, band: Band) -> isl.MultiUnionPwAff:
        members = isl.UnionPwAffList.alloc(U.CTX, len(band.rows))
        for row in band.rows:
            upa = None
            for name in sorted(row, key=lambda n: self.facts[n].index):
                pa = isl.PwAff.from_aff(self.aff(name, row[name]))
                upa = isl.UnionPwAff.from_pw_aff(pa) if upa is None else upa.add_pw_aff(pa)
            members = members.add(upa)
        space = isl.Space.set_alloc(U.CTX, 0, len(band.rows)).align_params(
            U.param_space(self.params))
        return isl.MultiUnionPwAff.from_union_pw_aff_list(space, members)

    def aff(self, name: str, row: Row) -> isl.Aff:
        """c . i + c0 on the domain of statement ``name``."""
        space = self.program.statement(name).domain.get_space().align_params(
            U.param_space(self.params))
        aff = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(space))
        return aff.set_coefficients(dim.in_, list(row[:-1])).set_constant_val(row[-1])

    def _original_mupa(self, names: Sequence[str]) -> isl.MultiUnionPwAff:
        """The original schedule of ``names`` as one band (padded to a common depth)."""
        maps = U.maps_of(self.program.original_schedule.intersect_domain(self._domain(names)))
        depth = max(m.dim(dim.out) for m in maps)
        padded = []
        for m in maps:
            extra = depth - m.dim(dim.out)
            m = m.add_dims(dim.out, extra)
            for k in range(depth - extra, depth):
                m = m.fix_si(dim.out, k, 0)
            padded.append(m.reset_tuple_id(dim.out))
        return isl.MultiUnionPwAff.from_union_map(U.union_map(padded))
