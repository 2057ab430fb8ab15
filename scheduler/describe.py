"""A schedule tree described for researchers: hyperplanes, bands, what each level carries.

Input: any isl.Schedule (from any scheduler, tiled or not) and the Dependences. Output:
text, e.g. for jacobi-1d under Pluto:

    statements (schedule dimensions, outermost first; [k]: position in a sequence)
      S0: (t, 2t + i, [0])
      S1: (t, 2t + i + 1, [1])
    band 0: 2 members, S0 S1, permutable
      0: S0 t; S1 t
         carries: S0 -> S0 (output), S0 -> S1 (anti), S1 -> S0 (flow, anti), ...
      1: S0 2t + i; S1 2t + i + 1
         carries: S0 -> S1 (flow, output), ...
    sequence: [S0] [S1]
      carries: S0 -> S1 (anti)

A member marked coincident says so ("coincident": it carries nothing and may run in
parallel). "carries" lists, per dependence kind, the statement pairs with a dependence
whose ends agree on every outer dimension and differ on this one (legality.py decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import islpy as isl

from polycomp import islutil as U

from .dependences import Dependences
from .legality import carried_by_member

dim = isl.dim_type
node_type = isl.schedule_node_type


def describe_schedule(schedule: isl.Schedule, deps: Dependences) -> str:
    """The text described in the module docstring."""
    names = sorted((s.get_tuple_name() for s in U.sets_of(schedule.get_domain())),
                   key=_natural)
    dims: dict[str, list[str]] = {n: [] for n in names}
    sections: list[str] = []
    _walk(schedule.get_root(), deps, dims, sections, [0])
    lines = ["statements (schedule dimensions, outermost first; [k]: position in a sequence)"]
    lines += [f"  {n}: ({', '.join(dims[n])})" for n in names]
    return "\n".join(lines + sections)


def _walk(node: isl.ScheduleNode, deps: Dependences, dims: dict[str, list[str]],
          out: list[str], counter: list[int]) -> None:
    kind = node.get_type()
    names = _statements(node)
    if kind == node_type.band:
        _band(node, deps, dims, out, counter, names)
    elif kind in (node_type.sequence, node_type.set):
        parts = [_statements(node.child(k)) for k in range(node.n_children())]
        brackets = "[]" if kind == node_type.sequence else "{}"
        out.append(f"{'sequence' if kind == node_type.sequence else 'set'}: "
                   + " ".join(brackets[0] + " ".join(p) + brackets[1] for p in parts))
        if kind == node_type.sequence:
            out.append(f"  carries: {_pairs(_sequence_carried(node, deps)) or 'nothing'}")
        for k, part in enumerate(parts):
            for n in part:
                dims[n].append(f"{brackets[0]}{k}{brackets[1]}")
    elif kind == node_type.mark:
        out.append(f"mark '{node.mark_get_id().get_name()}' over {' '.join(names)}")
    for k in range(node.n_children()):
        _walk(node.child(k), deps, dims, out, counter)


def _band(node: isl.ScheduleNode, deps: Dependences, dims: dict[str, list[str]],
          out: list[str], counter: list[int], names: list[str]) -> None:
    n = node.band_n_member()
    flags = ["permutable"] if node.band_get_permutable() else []
    out.append(f"band {counter[0]}: {n} member{'s' if n > 1 else ''}, {' '.join(names)}"
               + (f", {', '.join(flags)}" if flags else ""))
    counter[0] += 1
    mupa = node.band_get_partial_schedule()
    for k in range(n):
        upa = mupa.get_at(k)
        exprs = {name: _expression(upa, node, name) for name in names}
        for name in names:
            dims[name].append(exprs[name])
        coincident = "  (coincident)" if node.band_member_get_coincident(k) else ""
        out.append(f"  {k}: " + "; ".join(f"{name} {exprs[name]}" for name in names)
                   + coincident)
        carried = [(kind, carried_by_member(node, k, relation)) for kind, relation in deps.all_kinds()]
        out.append(f"     carries: {_pairs(carried) or 'nothing'}")


def _statements(node: isl.ScheduleNode) -> list[str]:
    return sorted({s.get_tuple_name() for s in U.sets_of(_reaching(node))}, key=_natural)


def _reaching(node: isl.ScheduleNode) -> isl.UnionSet:
    """The instances that pass ``node`` (a filter node restricts what reaches it)."""
    domain = node.get_domain()
    if node.get_type() == node_type.filter:
        domain = domain.intersect(node.filter_get_filter())
    return domain


def _sequence_carried(node: isl.ScheduleNode, deps: Dependences) -> list[tuple[str, isl.UnionMap]]:
    """Per kind, the dependences ordered by this sequence: ends in different children
    that agree on every outer dimension."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map()
    same_outer = prefix.apply_range(prefix.reverse())
    same_child = _same_child(node, domain)
    return [(kind, relation.intersect_domain(domain).intersect_range(domain)
             .intersect(same_outer).subtract(same_child)) for kind, relation in deps.all_kinds()]


def _same_child(node: isl.ScheduleNode, domain: isl.UnionSet) -> isl.UnionMap:
    """Pairs of instances in the same child of the sequence."""
    out = U.union_map([])
    for k in range(node.n_children()):
        child = node.child(k)
        part = _reaching(child).intersect(domain)
        out = out.union(isl.UnionMap.from_domain_and_range(part, part))
    return out


def _pairs(carried: Sequence[tuple[str, isl.UnionMap]]) -> str:
    """'S0 -> S1 (flow, anti), S1 -> S1 (output)' in statement order."""
    kinds: dict[tuple[str, str], list[str]] = {}
    for kind, relation in carried:
        for m in U.maps_of(relation):
            if m.is_empty():
                continue
            pair = (m.get_tuple_name(dim.in_), m.get_tuple_name(dim.out))
            if kind not in kinds.setdefault(pair, []):
                kinds[pair].append(kind)
    return ", ".join(f"{s} -> {t} ({', '.join(k)})"
                     for (s, t), k in sorted(kinds.items(),
                                             key=lambda x: (_natural(x[0][0]), _natural(x[0][1]))))


def _expression(upa: isl.UnionPwAff, node: isl.ScheduleNode, name: str) -> str:
    """Member ``upa`` on statement ``name`` as '2t + i + 1' (isl's text when it has
    pieces or integer divisions)."""
    domain = next(s for s in U.sets_of(node.get_domain()) if s.get_tuple_name() == name)
    space = domain.get_space().from_domain().add_dims(dim.out, 1)
    pa = upa.extract_pw_aff(space)
    pieces = pa.gist(domain).get_pieces() if pa.n_piece() > 1 else pa.get_pieces()
    if len(pieces) != 1 or pieces[0][1].dim(dim.div):
        return str(pa.gist(domain)).split("->", 1)[-1].strip(" {}")
    aff = pieces[0][1]
    iterators = U.dim_names(domain)
    params = U.param_names(aff)
    terms = [(_frac(aff.get_coefficient_val(dim.in_, k)), v) for k, v in enumerate(iterators)]
    terms += [(_frac(aff.get_coefficient_val(dim.param, k)), p) for k, p in enumerate(params)]
    return format_linear(terms, _frac(aff.get_constant_val()))


def format_linear(terms: Sequence[tuple[Fraction, str]], constant: Fraction) -> str:
    """'2t + i - 1' from [(2, 't'), (1, 'i')] and -1; '0' when everything is zero."""
    text = ""
    for coefficient, name in terms:
        if not coefficient:
            continue
        magnitude = abs(coefficient)
        body = name if magnitude == 1 else f"{magnitude}{name}"
        if not text:
            text = body if coefficient > 0 else f"-{body}"
        else:
            text += f" + {body}" if coefficient > 0 else f" - {body}"
    if constant or not text:
        if not text:
            text = str(constant)
        else:
            text += f" + {constant}" if constant > 0 else f" - {abs(constant)}"
    return text


def _frac(val: isl.Val) -> Fraction:
    return Fraction(str(val))


def _natural(name: str) -> tuple:
    """S2 before S10."""
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else -1, name)
