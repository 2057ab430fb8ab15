"""Kernel signatures: what a tuning record is keyed by.

Place in the pipeline: the autotuner's first step. Input: a :class:`polycomp.ir.Program`
(what a frontend's ``lower`` gives, before any scheduling). Output: a canonical
description of its polyhedral structure with every user-chosen name taken out, its
digest (``kernel_signature``), and its sizes (``kernel_sizes``), kept apart so that the
records (records.py) can find the same kernel at other sizes and seed a search with it.
``machine_identity`` names the other half of a record's key: where it was measured.

Canonical form. Statements are renamed by position (S0, S1, ...), arrays by order of
first appearance (each statement's write, then its reads), parameters by their position
in ``Program.params`` and iterators by position. What is kept, per statement, is read
from the isl objects as integer rows, never from isl's printing (isl prints one set
differently after different histories):

* the domain: its constraints after ``detect_equalities`` and ``remove_redundancies``,
  one row of coefficients (parameters, iterators, existentials) and a constant each,
  equalities sign-normalised, rows sorted;
* each access (the write, then the reads in order): which array, and per array index
  its affine function of the iterators and parameters (a non-functional map, a gather
  over a whole dimension, is kept as its constraints);
* the original schedule: the affine rows of its map (the nest shape: where statements
  sit in sequences and which loops they share);
* the reduction operator, the target dtype and the skeleton of the value expression
  (node kinds, operators and dtypes, in walk order; names and literal values dropped).

Sizes. A parametric program (``params`` non-empty) keeps its parameters symbolic and has
no sizes. A program specialised from one (``Program.generic``) is described through its
generic program, and its sizes are the values of the generic parameters in order. A
program whose sizes are constants from the start (frontends substitute them when lowering
with sizes) has its constants abstracted where they are sizes: constant terms of domain
constraints are kept as a sign only (``i <= 63`` and ``i <= 127`` read alike, ``1 <= i``
and ``0 <= i`` do not), array extents are dropped from the structure, and the sizes are
the array extents, flattened in canonical array order. Access offsets stay exact, so
``A[i + 1]`` and ``A[i]`` give different signatures.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import islpy as isl

from polycomp import expr as E
from polycomp.ir import Program, Statement

dim = isl.dim_type

# Renamed names carry a prefix no frontend produces, so that renaming one dimension
# never collides with a user name still present on another.
_PARAM = "__sigp"
SIGNATURE_VERSION = 1


# ----------------------------------------------------------------------------- public API

def canonical_form(program: Program) -> dict[str, Any]:
    """The name-free structure of ``program`` as plain JSON data (see the module doc)."""
    return _Canonicaliser(program).structure()


def canonical_text(program: Program) -> str:
    """``canonical_form`` as compact JSON with sorted keys: what the digest is taken of."""
    return json.dumps(canonical_form(program), sort_keys=True, separators=(",", ":"))


def kernel_signature(program: Program) -> str:
    """A stable digest of ``program``'s canonical form: equal for programs that differ
    only in names (and in sizes, see the module doc)."""
    return hashlib.sha256(canonical_text(program).encode()).hexdigest()[:32]


def kernel_sizes(program: Program) -> tuple[int, ...]:
    """The sizes part of the key, in canonical order (see the module doc)."""
    if program.params:
        return ()
    if program.generic is not None and program.generic.params:
        given = dict(program.sizes)
        return tuple(int(given[p]) for p in program.generic.params if p in given)
    order = _Canonicaliser(program).array_order
    return tuple(int(e) for name in order for e in program.array(name).extents())


# ----------------------------------------------------------------------------- canonicaliser

class _Canonicaliser:
    def __init__(self, program: Program):
        # a specialised program is described through its parametric original
        if not program.params and program.generic is not None and program.generic.params:
            program = program.generic
        self.program = program
        self.constant = not program.params  # sizes are constants: abstract them
        self.params = [f"{_PARAM}{k}" for k in range(len(program.params))]
        self.param_index = {p: k for k, p in enumerate(program.params)}
        order: list[str] = []
        for s in program.statements:
            for m in (s.write, *s.reads):
                name = m.get_tuple_name(dim.out)
                if name not in order:
                    order.append(name)
        order += [a.name for a in program.arrays if a.name not in order]
        self.array_order = order
        self.array_index = {name: k for k, name in enumerate(order)}
        self.statement_index = {s.name: k for k, s in enumerate(program.statements)}

    def structure(self) -> dict[str, Any]:
        p = self.program
        return {
            "version": SIGNATURE_VERSION,
            "n_params": len(p.params),
            "constant": self.constant,
            "context": self._constraints(p.context, abstract=False),
            "scalars": [s.dtype for s in p.scalars],
            "arrays": [self._array(p.array(name)) for name in self.array_order],
            "statements": [self._statement(s) for s in p.statements],
        }

    # ------------------------------------------------------------------ parts
    def _array(self, array) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": array.dtype, "role": array.role, "rank": array.rank}
        if not self.constant:
            out["shape"] = [self._pw_aff_rows(self._params(pa)) for pa in array.shape]
        return out

    def _statement(self, s: Statement) -> dict[str, Any]:
        domain = self._rename_set(s.domain)
        return {
            "rank": s.domain.dim(dim.set),
            "reduction": s.reduction,
            "dtype": s.target.dtype,
            "expr": [_node_kind(n) for n in E.walk(s.expr)],
            "domain": self._constraints(domain, abstract=self.constant),
            "write": self._access(s.write, s),
            "reads": [self._access(r, s) for r in s.reads],
            "schedule": self._schedule(s),
        }

    def _access(self, access: isl.Map, s: Statement) -> list[Any]:
        array = self.array_index[access.get_tuple_name(dim.out)]
        m = self._rename_map(access, s)
        domain = self._rename_set(s.domain)
        return [array, self._function(m, domain)]

    def _schedule(self, s: Statement) -> Any:
        maps = [m for m in _maps(self.program.original_schedule)
                if m.get_tuple_name(dim.in_) == s.name]
        if not maps:
            return None
        return self._function(self._rename_map(maps[0], s), self._rename_set(s.domain))

    # ------------------------------------------------------------------ isl → rows
    def _function(self, m: isl.Map, domain: isl.Set) -> Any:
        """Affine rows of a single-valued map on ``domain``, else its constraints."""
        m = m.intersect_domain(domain)
        try:
            pma = isl.PwMultiAff.from_map(m.gist_domain(domain))
        except isl.Error:
            pma = None
        if pma is not None:
            pieces: list[tuple[isl.Set, isl.MultiAff]] = []
            pma.foreach_piece(lambda st, ma: pieces.append((st, ma)))
            if len(pieces) == 1:
                ma = pieces[0][1]
                return {"rows": [_aff_row(ma.get_at(k)) for k in range(ma.dim(dim.out))]}
            return {"pieces": sorted(
                [[self._constraints(st, abstract=self.constant),
                  [_aff_row(ma.get_at(k)) for k in range(ma.dim(dim.out))]]
                 for st, ma in pieces], key=_json_key)}
        return {"relation": self._constraints(m, abstract=self.constant)}

    def _constraints(self, obj, abstract: bool) -> list[Any]:
        """Sorted rows of every basic set/map after isl's normalisations."""
        obj = obj.detect_equalities().remove_redundancies().coalesce()
        basics = obj.get_basic_sets() if isinstance(obj, isl.Set) else obj.get_basic_maps()
        kinds = ([dim.param, dim.set] if isinstance(obj, isl.Set)
                 else [dim.param, dim.in_, dim.out])
        out = []
        for b in basics:
            n_div = b.dim(dim.div)
            rows = []
            for c in b.get_constraints():
                coeffs = [_int(c.get_coefficient_val(kind, k))
                          for kind in kinds for k in range(b.dim(kind))]
                coeffs += [_int(c.get_coefficient_val(dim.div, k)) for k in range(n_div)]
                const = _int(c.get_constant_val())
                if c.is_equality() and _first_nonzero(coeffs + [const]) < 0:
                    coeffs, const = [-v for v in coeffs], -const
                if abstract and any(coeffs):
                    const = (const > 0) - (const < 0)  # a size: keep its sign only
                rows.append(["=" if c.is_equality() else ">=", coeffs, const])
            rows.sort(key=_json_key)
            divs = [_div_text(b.get_local_space().get_div(k)) for k in range(n_div)]
            out.append({"rows": rows, "divs": divs} if divs else {"rows": rows})
        out.sort(key=_json_key)
        return out

    def _pw_aff_rows(self, pa: isl.PwAff) -> Any:
        pieces: list[tuple[isl.Set, isl.Aff]] = []
        pa.foreach_piece(lambda st, aff: pieces.append((st, aff)))
        return sorted(([self._constraints(st, abstract=False), _aff_row(aff)]
                       for st, aff in pieces), key=_json_key)

    # ------------------------------------------------------------------ renaming
    def _params(self, obj):
        """Parameters renamed by their position in Program.params, in that order."""
        for pos in range(obj.dim(dim.param)):
            name = obj.get_dim_name(dim.param, pos)
            if name in self.param_index:
                obj = obj.set_dim_id(dim.param, pos, self._ids()[self.param_index[name]])
        space = isl.Space.params_alloc(obj.get_ctx(), len(self.params))
        for k, ident in enumerate(self._ids()):
            space = space.set_dim_id(dim.param, k, ident)
        return obj.align_params(space)

    def _ids(self) -> list[isl.Id]:
        # one Id object per parameter, reused: isl tells parameters apart by Id, and
        # islpy's Ids made twice from one name need not be the same Id
        if not hasattr(self, "_param_ids"):
            ctx = self.program.context.get_ctx()
            self._param_ids = [isl.Id(name, context=ctx) for name in self.params]
        return self._param_ids

    def _rename_set(self, domain: isl.Set) -> isl.Set:
        out = self._params(domain).set_tuple_name(
            f"S{self.statement_index.get(domain.get_tuple_name(), 0)}")
        for k in range(out.dim(dim.set)):
            out = out.set_dim_name(dim.set, k, f"i{k}")
        return out

    def _rename_map(self, m: isl.Map, s: Statement) -> isl.Map:
        out = self._params(m).set_tuple_name(dim.in_, f"S{self.statement_index[s.name]}")
        target = m.get_tuple_name(dim.out)
        if target in self.array_index:
            out = out.set_tuple_name(dim.out, f"A{self.array_index[target]}")
        elif m.has_tuple_name(dim.out):
            out = out.reset_tuple_id(dim.out)  # a named schedule space: the name is no part
        for kind, prefix in ((dim.in_, "i"), (dim.out, "o")):
            for k in range(out.dim(kind)):
                out = out.set_dim_name(kind, k, f"{prefix}{k}")
        return out


def _maps(umap: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    umap.foreach_map(out.append)
    return out


def _aff_row(aff: isl.Aff) -> list[Any]:
    """Coefficients of parameters and inputs, the constant and the denominator (as
    strings when not integers: a floor division's aff)."""
    row = [_int(aff.get_coefficient_val(dim.param, k)) for k in range(aff.dim(dim.param))]
    row += [_int(aff.get_coefficient_val(dim.in_, k)) for k in range(aff.dim(dim.in_))]
    row.append(_int(aff.get_constant_val()))
    if aff.dim(dim.div):
        row.append(_div_text(aff))
    return row


def _div_text(aff: isl.Aff) -> str:
    # divs are rare (strided domains); their text, after the renaming, names nothing the
    # user chose. Parameter and tuple names are already canonical.
    return re.sub(r"\s+", " ", str(aff))


def _int(val: isl.Val) -> int | str:
    return int(val.to_python()) if val.is_int() else str(val)


def _first_nonzero(values: Sequence[int | str]) -> int:
    for v in values:
        if isinstance(v, str):
            return -1 if v.startswith("-") else 1
        if v:
            return v
    return 0


def _node_kind(node: E.Expr) -> list[str]:
    kind = type(node).__name__
    op = getattr(node, "op", None) or getattr(node, "func", None) or ""
    return [kind, op, node.dtype]


def _json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# ----------------------------------------------------------------------------- the machine

def machine_identity(compiler: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Where measurements were taken: CPU model, core count, data cache sizes (bytes by
    level, from sysfs), SIMD width and the C compiler's version line. Plain JSON data."""
    return json.loads(json.dumps(_machine_identity(compiler)))  # a copy: the cache stays


@functools.lru_cache(maxsize=4)
def _machine_identity(compiler: tuple[str, ...] | None) -> dict[str, Any]:
    from polycomp.build import compiler_identity
    from polycomp.scheduler.cache_model import cache_sizes, simd_bytes

    model = os.uname().machine
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    if compiler is None:
        compiler = tuple((os.environ.get("CC") or "gcc").split())
    try:
        version = compiler_identity(compiler).strip().splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - no compiler still has an identity
        version = f"unavailable: {type(exc).__name__}"
    return {
        "cpu": model,
        "cores": os.cpu_count() or 1,
        "caches": {str(level): size for level, size in sorted(cache_sizes().items())},
        "simd_bytes": simd_bytes(),
        "compiler": version,
    }
