"""Fusion decisions of the Pluto scheduler: which statements share the next band.

Stage: a helper of scheduler/pluto.py, consulted whenever a band starts. Input: the
statements of a group, the dependence pieces not yet satisfied between them
(scheduler/farkas.py), and a ``solve(names)`` callback that returns the first Pluto
hyperplane for a set of statements (or None). Output: the group split into parts, in an
order that respects every dependence; the parts are separated by a scalar dimension (a
sequence node) and scheduled independently below it.

The parts are unions of strongly connected components (SCCs) of the dependence graph,
contiguous in a topological order (ties broken by textual order), so any split is legal.
Modes (``Options.fusion``):

    max    fuse greedily while the common hyperplane exists
    smart  Pluto's default: cut between SCCs of different dimensionality; fuse SCCs of the
           same dimensionality that share data (an array) when the hyperplane exists and
           does not lose an outermost parallel loop that a part has on its own, except
           a part that only copies or fills an array with a stencil that reads it at
           several offsets (a padded input: fused, the shift puts the borders' guards
           in both loops). A reorderable streaming reduction (scheduler/reductions.py;
           some read touches each element once) and its neighbours are the exception:
           outermost, they fuse across dimensionalities when they share data and a
           parallel hyperplane (softmax's max, exp, sum and divide under (b, m), one
           parallel loop instead of one per statement)
    typed  fuse only where no parallelism is lost: both parts have an outer coincident
           hyperplane and so does the fused one, or neither has one
    none   every SCC on its own

``Options.partition`` forces the outermost split instead (:func:`forced_groups`).

Example (producer S0: B[i] = A[i]; consumer S1: C[i] = B[i]):
    smart, max:  one band { S0[i] -> [i]; S1[i] -> [i] } with a sequence below it
    none:        sequence(S0 -> [i], S1 -> [i])
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError, OptionError

from .dependences import Dependences
from .farkas import Piece
from .pluto_ilp import Solution

MODES = ("smart", "max", "typed", "none")


@dataclass(frozen=True)
class StatementFacts:
    """What fusion needs to know about a statement: textual position, loop depth, arrays."""

    name: str
    index: int
    dim: int
    arrays: frozenset[str]
    reduction: bool = False  # a streaming reduction whose order may change (pluto.py)
    copies: str | None = None  # the array it writes when it only moves data (a pad copy)
    stencil_reads: frozenset[str] = frozenset()  # arrays it reads at several offsets


Solve = Callable[[Sequence[str]], "Solution | None"]


# ----------------------------------------------------------------------------- graphs

def sccs(names: Sequence[str], pieces: Sequence[Piece],
         facts: Mapping[str, StatementFacts]) -> list[list[str]]:
    """The strongly connected components of the graph (names, pieces), in a topological
    order; among ready components the one with the earliest statement comes first."""
    succ = _successors(names, pieces)
    comp = _tarjan(names, succ)
    groups: dict[int, list[str]] = {}
    for n in names:
        groups.setdefault(comp[n], []).append(n)
    for g in groups.values():
        g.sort(key=lambda n: facts[n].index)
    preds = _component_preds(groups, succ, comp)
    first = {c: facts[g[0]].index for c, g in groups.items()}
    indegree = {c: len(p) for c, p in preds.items()}
    ready = [(first[c], c) for c, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, c = heapq.heappop(ready)
        order.append(groups[c])
        for d in _component_succs(groups[c], succ, comp):
            indegree[d] -= 1
            if indegree[d] == 0:
                heapq.heappush(ready, (first[d], d))
    return order


def _successors(names: Sequence[str], pieces: Sequence[Piece]) -> dict[str, set[str]]:
    succ: dict[str, set[str]] = {n: set() for n in names}
    for p in pieces:
        if p.source in succ and p.target in succ and p.source != p.target:
            succ[p.source].add(p.target)
    return succ


def _tarjan(names: Sequence[str], succ: Mapping[str, set[str]]) -> dict[str, int]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    comp: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = [0]

    def visit(v: str) -> None:  # recursion depth is bounded by the number of statements
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp[w] = index[v]
                if w == v:
                    break

    for n in names:
        if n not in index:
            visit(n)
    return comp


def _component_preds(groups: Mapping[int, list[str]], succ: Mapping[str, set[str]],
                     comp: Mapping[str, int]) -> dict[int, set[int]]:
    preds: dict[int, set[int]] = {c: set() for c in groups}
    for c, members in groups.items():
        for d in _component_succs(members, succ, comp):
            preds[d].add(c)
    return preds


def _component_succs(members: Sequence[str], succ: Mapping[str, set[str]],
                     comp: Mapping[str, int]) -> set[int]:
    mine = comp[members[0]]
    return {comp[w] for v in members for w in succ[v] if comp[w] != mine}


# ----------------------------------------------------------------------------- decisions

def partition(mode: str, names: Sequence[str], pieces: Sequence[Piece],
              facts: Mapping[str, StatementFacts], solve: Solve,
              outermost: bool = True) -> list[list[str]]:
    """Split ``names`` into parts for the band that starts now (see module doc);
    ``outermost``: no loop surrounds that band."""
    components = sccs(names, pieces, facts)
    if len(components) == 1:
        return [list(names)]
    if mode == "none":
        return components
    if mode == "max" and solve(_flat(components)) is not None:
        return [_flat(components)]
    accept = {"max": _accept_max, "typed": _accept_typed,
              "smart": _accept_smart if outermost else _accept_smart_inner}[mode]
    succ = _successors(names, pieces)
    groups = _greedy(components, succ, lambda cur, x: accept(cur, x, facts, solve))
    return [_sorted(_flat(g), facts) for g in groups]


def _greedy(components: list[list[str]], succ: Mapping[str, set[str]],
            accept: Callable[[list[list[str]], list[str]], bool]) -> list[list[list[str]]]:
    """Contiguous groups of a topological order: extend the current group with the first
    ready component it accepts; when none is accepted, start a new group."""
    owner = {n: k for k, comp in enumerate(components) for n in comp}
    preds = {k: {owner[v] for v in owner if owner[v] != k and any(w in comp for w in succ[v])}
             for k, comp in enumerate(components)}
    remaining = list(range(len(components)))
    done: set[int] = set()
    groups: list[list[list[str]]] = []
    current: list[int] = []
    while remaining:
        ready = [k for k in remaining if preds[k] <= done | set(current)]
        pick = next((k for k in ready if current
                     and accept([components[c] for c in current], components[k])), None)
        if pick is None:
            if current:
                groups.append([components[c] for c in current])
                done |= set(current)
                current = []
            pick = ready[0]
        current.append(pick)
        remaining.remove(pick)
    groups.append([components[c] for c in current])
    return groups


def _accept_max(current, candidate, facts, solve) -> bool:
    return solve(_flat(current) + candidate) is not None


def _accept_smart(current, candidate, facts, solve) -> bool:
    if _shares_reduction_loops(current, candidate, facts, solve):
        return True
    if not _accept_smart_inner(current, candidate, facts, solve):
        return False
    # outermost, never trade a part's parallel loop for locality (atax: tmp's rows and
    # y's columns fused under i left only y's inner loop parallel, 4x slower; deriche's
    # parallel sum fused into the serial row filter: 1.4x slower). Inside a loop, parallel
    # regions would start once per outer iteration: fusing, for locality, is worth more
    # (durbin: 3x faster fused).
    fused = solve(_flat(current) + candidate)
    if fused is None or fused.coincident:
        return True
    alone = [solve(_flat(current)), solve(candidate)]
    return not any(s is not None and s.coincident for s in alone)


def _shares_reduction_loops(current, candidate, facts, solve) -> bool:
    """A memory-bound chain around a reduction: one side reduces, both share an array,
    and together they have an outer parallel hyperplane that neither loses."""
    names = _flat(current) + list(candidate)
    if not any(facts[n].reduction for n in names):
        return False
    arrays = frozenset().union(*(facts[n].arrays for n in _flat(current)))
    # an initialisation (it touches only the array it writes) joins the chain it starts
    if not any(facts[n].arrays & arrays or len(facts[n].arrays) == 1 for n in candidate):
        return False
    fused = solve(names)
    return fused is not None and fused.coincident


def _accept_smart_inner(current, candidate, facts, solve) -> bool:
    depth = max(facts[n].dim for n in current[0])
    if max(facts[n].dim for n in candidate) != depth:
        return False
    if _copy_into_stencil(current, candidate, facts):
        return False
    arrays = frozenset().union(*(facts[n].arrays for n in _flat(current)))
    if not any(facts[n].arrays & arrays for n in candidate):
        return False
    return solve(_flat(current) + candidate) is not None


def _copy_into_stencil(current, candidate, facts) -> bool:
    """The candidate reads, at several offsets, an array that the current part only
    copies or fills (a convolution's padded input). Fused, the copy runs ahead of the
    stencil by a shift: no arithmetic is shared, and the shift puts the borders' guards
    inside the loops of both (MobileNetV2's depthwise taps, written out, compiled to
    masked scalar stores), where apart each runs unguarded over its own box."""
    copied = {facts[n].copies for n in _flat(current)} - {None}
    return any(facts[n].stencil_reads & copied for n in candidate)


def _accept_typed(current, candidate, facts, solve) -> bool:
    fused = solve(_flat(current) + candidate)
    if fused is None:
        return False
    alone = [solve(_flat(current)), solve(candidate)]
    kinds = [s is not None and s.coincident for s in alone]
    if kinds[0] != kinds[1]:
        return False
    return fused.coincident or not kinds[0]


def _flat(groups: Sequence[Sequence[str]]) -> list[str]:
    return [n for g in groups for n in g]


def _sorted(names: Sequence[str], facts: Mapping[str, StatementFacts]) -> list[str]:
    return sorted(names, key=lambda n: facts[n].index)


# ----------------------------------------------------------------------------- forced

def forced_groups(partition: Sequence[Sequence[str]], names: Sequence[str],
                  pieces: Sequence[Piece], facts: Mapping[str, StatementFacts],
                  deps: Dependences) -> list[list[str]]:
    """The user's groups (Options.partition) in a dependence-respecting order; statements
    in no group get one each. Raises IllegalScheduleError when the groups depend on each
    other in a cycle, naming one dependence of the cycle."""
    owner: dict[str, int] = {}
    groups: list[list[str]] = []
    for g in partition:
        for n in g:
            if n not in facts:
                raise OptionError(f"partition names unknown statement '{n}'",
                                  hint=f"statements: {', '.join(names)}")
            if n in owner:
                raise OptionError(f"statement '{n}' appears in two partition groups")
            owner[n] = len(groups)
        groups.append(_sorted(list(g), facts))
    for n in names:
        if n not in owner:
            owner[n] = len(groups)
            groups.append([n])
    labels = [f"G{k}" for k in range(len(groups))]
    group_facts = {labels[k]: StatementFacts(labels[k], min(facts[n].index for n in g), 0,
                                             frozenset()) for k, g in enumerate(groups)}
    lifted = [_LiftedEdge(labels[owner[p.source]], labels[owner[p.target]], p)
              for p in pieces]
    order = sccs(labels, lifted, group_facts)  # type: ignore[arg-type]
    for comp in order:
        if len(comp) > 1:
            inside = next(e.piece for e in lifted
                          if e.source in comp and e.target in comp and e.source != e.target)
            raise IllegalScheduleError(
                f"the forced partition is illegal: statements {', '.join(groups[labels.index(comp[0])])} "
                f"and {', '.join(groups[labels.index(comp[1])])} depend on each other in a cycle, "
                f"e.g. through the {describe_dependence(deps, inside.source, inside.target)}",
                hint="put statements that depend on each other both ways in the same group")
    return [groups[labels.index(c[0])] for c in order]


@dataclass(frozen=True)
class _LiftedEdge:
    """A piece seen between partition groups (for the group graph)."""

    source: str
    target: str
    piece: Piece


def describe_dependence(deps: Dependences, source: str, target: str) -> str:
    """'flow dependence S0 -> S1: { ... }' for the first kind that links the two."""
    for kind, relation in deps.kinds():
        for m in U.maps_of(relation):
            if (m.get_tuple_name(isl.dim_type.in_) == source
                    and m.get_tuple_name(isl.dim_type.out) == target and not m.is_empty()):
                return f"{kind} dependence {source} -> {target}: {m.coalesce()}"
    return f"dependence {source} -> {target}"
