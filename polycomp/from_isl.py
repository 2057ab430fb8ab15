"""The research door: a Program from isl strings (see ``Program.from_isl``).

Input: array declarations, and per statement an isl domain, write and read maps, and a
Python function that combines one Access per read into the statement's value.
Output: a validated :class:`polycomp.ir.Program` whose arrays are all updated in place.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import islpy as isl

from . import expr as E
from . import islutil as U
from .errors import (ArgumentError, DuplicateNameError, Location, NonAffineError, ParseError,
                     PolycompError, RankMismatchError, TypeMismatchError)
from .ir import Array, Program, Statement, sequential_schedule

dim = isl.dim_type


def program_from_isl(name: str, arrays: Mapping[str, tuple[str, Sequence[int | str]]],
                     statements: Sequence[Mapping[str, object]], context: str | None,
                     schedule: str | None) -> Program:
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"Program.from_isl: the program name must be a non-empty str, "
                            f"not {name!r}", hint="e.g. Program.from_isl('stencil', ...)")
    if not isinstance(arrays, Mapping):
        raise ArgumentError("Program.from_isl: arrays must map names to (dtype, shape)",
                            hint="e.g. arrays={'A': ('float64', ('N',))}")
    decls = {_array_name(n): _declaration(n, decl) for n, decl in arrays.items()}
    if isinstance(statements, (str, bytes, Mapping)) or not isinstance(statements, Sequence):
        raise ArgumentError("Program.from_isl: statements must be a list of dicts",
                            hint="e.g. statements=[dict(domain=..., write=..., reads=[...])]")
    stmts = [_statement(k, spec, decls) for k, spec in enumerate(statements)]
    seen: set[str] = set()
    for s in stmts:
        if s.name in seen:
            raise DuplicateNameError(f"two statements are named {s.name}",
                                     Location(node=s.name),
                                     hint="give each domain its own tuple name (S0, S1, ...), "
                                          "or leave the names out")
        seen.add(s.name)
    params: list[str] = []
    for s in stmts:
        params += [p for p in U.param_names(s.domain) if p not in params]
    for _, shape in decls.values():
        params += [d for d in shape if isinstance(d, str) and d not in params]
    array_objs = tuple(
        Array(n, dt, tuple(U.constant_pw_aff(d, params) if isinstance(d, int)
                           else U.param_pw_aff(d, params) for d in shape), "inout")
        for n, (dt, shape) in decls.items())
    ctx = _parse(isl.Set, context, "context") if context else isl.Set.universe(U.param_space(params))
    original = (_parse(isl.UnionMap, schedule, "schedule") if schedule
                else sequential_schedule(stmts))
    program = Program(name, tuple(params), array_objs, tuple(stmts), original, ctx)
    return program.validate()


def _array_name(name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"Program.from_isl: array name {name!r} is not an identifier",
                            hint="array names are isl tuple names: letters, digits, '_'")
    return name


def _declaration(array: str, decl: object) -> tuple[str, tuple[int | str, ...]]:
    """(dtype, shape) with every dimension an extent >= 0 or a size name."""
    if (isinstance(decl, (str, bytes)) or not isinstance(decl, Sequence) or len(decl) != 2
            or isinstance(decl[1], (str, bytes)) or not isinstance(decl[1], Sequence)):
        raise ArgumentError(f"Program.from_isl: array '{array}' must be declared as "
                            f"(dtype, shape), not {decl!r}",
                            hint=f"e.g. arrays={{'{array}': ('float64', ('N', 16))}}")
    dtype, shape = decl
    for d in shape:
        if isinstance(d, str):
            # sizes become isl parameters and C names: isl reads '0a' as a number and
            # cannot name a dimension ''
            if not d.isidentifier():
                raise ArgumentError(f"Program.from_isl: array '{array}' has a size named {d!r}, "
                                    "which is not an identifier",
                                    hint="size names are letters, digits and '_', not starting "
                                         "with a digit, e.g. 'N'")
        elif isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 0:
            raise ArgumentError(f"Program.from_isl: array '{array}' has extent {d!r}",
                                hint="an extent is an integer >= 0 or a size name")
    return _dtype(array, dtype), tuple(d if isinstance(d, str) else int(d) for d in shape)


def _dtype(array: str, dtype: str) -> str:
    if dtype not in E.DTYPES:
        raise TypeMismatchError(f"array '{array}' has unknown dtype {dtype!r}",
                                hint=f"use one of {', '.join(E.DTYPES)}")
    return dtype


def _parse(cls: type, text: object, what: str):
    try:
        return cls(str(text))
    except isl.Error as exc:
        raise ParseError(f"cannot parse {what} {text!r} as isl: {str(exc).splitlines()[0]}") from None


def _statement(k: int, spec: Mapping[str, object], decls: Mapping[str, tuple[str, tuple]]) -> Statement:
    if not isinstance(spec, Mapping) or "domain" not in spec or "write" not in spec:
        raise ArgumentError(f"Program.from_isl: statement {k} must be a dict with 'domain' "
                            f"and 'write' (and 'reads', 'body', 'reduction'), not {spec!r}",
                            hint="e.g. dict(domain='{ S0[i] : 0 <= i < 8 }', "
                                 "write='{ S0[i] -> A[i] }', reads=['{ S0[i] -> B[i] }'])")
    domain = _parse(isl.Set, spec["domain"], "domain")
    sname = domain.get_tuple_name() or f"S{k}"
    domain = domain.set_tuple_name(sname)
    iterators = U.dim_names(domain)

    def access(text: object, what: str) -> tuple[isl.Map, E.Access]:
        m = _parse(isl.Map, text, what).set_tuple_name(dim.in_, sname)
        if m.dim(dim.in_) != len(iterators):
            raise RankMismatchError(f"{what} {text!r} of {sname} takes {m.dim(dim.in_)} "
                                    f"iterator(s), but the domain has {len(iterators)}",
                                    Location(node=sname),
                                    hint=f"write it over {sname}[{', '.join(iterators)}]")
        array = m.get_tuple_name(dim.out)
        if array not in decls:
            raise PolycompError(f"{what} {text!r} of {sname} names undeclared array '{array}'")
        indices = U.map_to_index_exprs(m, iterators)
        if indices is None:
            raise NonAffineError(f"{what} {text!r} of {sname} is not a single affine function")
        return m, E.Access(array, indices, decls[array][0])

    write, target = access(spec["write"], "write")
    reads = [access(r, "read") for r in spec.get("reads", ())]  # type: ignore[union-attr]
    body = spec.get("body")
    if body is None:
        if not reads:
            raise PolycompError(f"statement {sname} has neither reads nor a body")
        value: E.Expr = reads[0][1]
    else:
        value = E.lift(body(*[r[1] for r in reads]), target)  # type: ignore[operator]
    if value.dtype != target.dtype:
        value = E.Cast(value, target.dtype)
    reduction = spec.get("reduction")
    if reduction is not None and reduction not in E.REDUCTIONS:
        raise PolycompError(f"unknown reduction {reduction!r}", hint="use +, *, max or min")
    # the read maps must follow E.accesses(value); the body may reorder or repeat reads
    by_access = {}
    for m, a in reads:
        by_access.setdefault(a, m)
    read_maps = [by_access[a] for a in E.accesses(value) if a in by_access]
    if len(read_maps) != len(E.accesses(value)):
        raise PolycompError(f"the body of {sname} uses an access that is not among its reads")
    if reduction:
        read_maps.append(write)
    return Statement(sname, domain, write, tuple(read_maps), target, value,
                     reduction, None)  # type: ignore[arg-type]
