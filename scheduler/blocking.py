"""Channel blocking: Program -> Program, before the dependences (specialised programs).

An NCHW convolution (or any product reduction where one operand, the weights, is
indexed by one output dimension and reduction dimensions only)

    S0: O(n, f, h, w) = 0
    S1: O(n, f, h, w) += I(n, c, s*h + kh, s*w + kw) * Wt(f, c, kh, kw)

has no good vector loop: w is short (28 at ResNet's layer 2, so 16 + 12 lanes), or
strided in I (stride 2). Along f the weights and the output are far apart in memory,
but the input is the same for every f. Blocking f by the vector width, as oneDNN's and
TVM's NCHWc kernels do, gives that loop unit stride everywhere:

    P:   Wp(fo, c, kh, kw, fi) = Wt(16 fo + fi, c, kh, kw)            pack, once
    S0': T(n, fo, h, w, fi) = 0
    S1': T(n, fo, h, w, fi) += I(n, c, s*h + kh, s*w + kw) * Wp(fo, c, kh, kw, fi)
    U:   O(n, f, h, w) = T(n, f / 16, h, w, f % 16)                    unpack, once

Then fi is the simd loop, the intra-tile pass jams output rows and columns around it
(one vector accumulator each, the input element broadcast, the weight vector shared),
and codegen/promote.py keeps those accumulators in registers across c, kh and kw. The
packing is a statement of the program, so that a model importer can run it once for
constant weights (the ONNX issue); it costs one pass over the weights per call here.

When it applies (otherwise the program is returned as it is): a "+" reduction over
floats whose expression is the product of two accesses with plain iterators as the
weights' and the target's indices; the blocked output dimension f has an extent of at
least the vector width and does not occur in the other operand (dimensions both use, such
as a batch, are packed along); when the width does not divide f's extent, the last block
is padded (zero weights in its extra lanes, which are computed but never unpacked) if
that adds at most a third more work; the target's last dimension is no good vector
loop (its extent not a multiple of the width, or an operand neither unit-stride nor
invariant along it: matmul keeps its columns, Q K^T blocks them); the target is written only by this reduction and an init to 0 of the
same elements that runs entirely before it, and read only after it; every domain
involved is a box. The summation order of each output element is the original one
(each T element starts from 0 and adds the same terms in the same order), so exact_fp
holds as well.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Array, Program, Statement

from . import cache_model as CM

dim = isl.dim_type


def block_channels(program: Program) -> Program:
    """``program`` with every convolution-like reduction blocked (module doc)."""
    return rewrite_each(program, _pattern, _blocked)


def rewrite_each(program: Program, pattern, rewrite) -> Program:  # noqa: ANN001
    """``program`` with ``rewrite(program, s, *found)`` applied for each statement s of
    a specialised program where ``pattern(program, s)`` finds something; a rewrite that
    raises _NotAffineTime (a padded block needs times for its extra lanes) is skipped."""
    if program.params:
        return program
    for stmt in program.statements:
        found = pattern(program, stmt)
        if found is not None:
            try:
                program = rewrite(program, stmt, *found)
            except _NotAffineTime:
                continue
    return program


def _pattern(program: Program, s: Statement) -> tuple[Statement, E.Access, E.Access, int, int] | None:
    """(init statement, weights access, other operand, position of f in the target,
    vector width) when ``s`` can be blocked."""
    if s.reduction != "+" or s.target.dtype not in ("float32", "float64"):
        return None
    if not (isinstance(s.expr, E.Binary) and s.expr.op == "mul"
            and all(isinstance(x, E.Access) for x in (s.expr.lhs, s.expr.rhs))):
        return None
    target = s.target
    if not _plain(target) or len({i.name for i in target.indices}) != len(target.indices):
        return None
    outputs = [i.name for i in target.indices]
    reduced = set(s.iterators) - set(outputs)
    lanes = CM.simd_lanes(8 if target.dtype == "float64" else 4)
    box = _box(s.domain)
    if box is None or not reduced or lanes < 4:
        return None
    for weights, other in ((s.expr.lhs, s.expr.rhs), (s.expr.rhs, s.expr.lhs)):
        if not _plain(weights) or weights.array == target.array:
            continue
        names = [i.name for i in weights.indices]
        # the blocked dimension: an output one of the weights' that the other operand
        # does not use (batch dimensions that both use are packed along)
        in_other = {n.name for n in E.walk(other) if isinstance(n, E.Iter)}
        blocked = [n for n in names if n in outputs and n not in in_other]
        if len(blocked) != 1 or names.count(blocked[0]) != 1 or len(set(names)) != len(names):
            continue
        f = blocked[0]
        p = outputs.index(f)
        low, high = box[s.iterators.index(f)]
        # a last partial block is padded with zero weights: worth it while the padding
        # costs at most a third more work (1000 classes: 1008 lanes; 24 channels: 32)
        padded = -(-(high + 1) // lanes) * lanes
        if low != 0 or high + 1 < lanes or 3 * padded > 4 * (high + 1):
            continue
        if other.array == target.array or _good_vector_loop(s, box, lanes):
            continue
        init = _init(program, s)
        if init is None:
            return None
        return init, weights, other, p, lanes
    return None


def _good_vector_loop(s: Statement, box: list[tuple[int, int]], lanes: int) -> bool:
    """The target's last dimension makes a good vector loop already: whole vectors (its
    extent a multiple of the width) along which both operands have unit stride or stay
    in place (matmul's columns; not conv's 28-wide or strided rows, nor the transposed
    operand of Q K^T)."""
    last = s.target.indices[-1].name
    k = s.iterators.index(last)
    low, high = box[k]
    if (high - low + 1) % lanes:
        return False
    space = s.domain.get_space()
    for operand in (s.expr.lhs, s.expr.rhs):
        for d, index in enumerate(operand.indices):
            try:
                pieces = U.affine(index, space).get_pieces()
            except U.NotAffine:
                return False
            if len(pieces) != 1:
                return False
            step = pieces[0][1].get_coefficient_val(dim.in_, k).to_python()
            if step not in ((0, 1) if d == len(operand.indices) - 1 else (0,)):
                return False
    return True


def _plain(access: E.Access) -> bool:
    return all(isinstance(i, E.Iter) for i in access.indices)


def _box(domain: isl.Set) -> list[tuple[int, int]] | None:
    """Constant bounds per dimension when ``domain`` is exactly their product."""
    bounds = []
    hull = isl.Set.universe(domain.get_space())
    for k in range(domain.dim(dim.set)):
        low, high = domain.dim_min_val(k), domain.dim_max_val(k)
        if not (low.is_int() and high.is_int()):
            return None
        bounds.append((low.to_python(), high.to_python()))
        hull = (hull.lower_bound_val(dim.set, k, low).upper_bound_val(dim.set, k, high))
    return bounds if hull.is_subset(domain) else None


def _init(program: Program, s: Statement) -> Statement | None:
    """``zero_init``, with a plain target over a box."""
    init = zero_init(program, s)
    if init is None or not _plain(init.target) or _box(init.domain) is None:
        return None
    return init


def zero_init(program: Program, s: Statement) -> Statement | None:
    """The statement that sets the reduction's target to 0 before it, when the target is
    touched by nothing else but readers that run after the reduction."""
    init = constant_init(program, s)
    return init if init is not None and init.expr.value == 0 else None  # type: ignore[attr-defined]


def constant_init(program: Program, s: Statement) -> Statement | None:
    """The statement that sets the reduction's target to a constant before it (a max
    pool's -inf), when the target is touched by nothing else but readers that run after
    the reduction."""
    name = s.target.array
    time = program.original_schedule
    writers = [t for t in program.statements if t.target.array == name and t is not s]
    if len(writers) != 1:
        return None
    init = writers[0]
    if init.reduction is not None or not isinstance(init.expr, E.Const):
        return None
    written = s.write.intersect_domain(s.domain).range()
    if not init.write.intersect_domain(init.domain).range().is_equal(written):
        return None
    if not _all_before(time, init.domain, s.domain):
        return None
    for t in program.statements:
        reads = any(r.get_tuple_name(dim.out) == name for r in t.reads)
        if t is not s and reads and not _all_before(time, s.domain, t.domain):
            return None
    return init


def _all_before(time: isl.UnionMap, first: isl.Set, second: isl.Set) -> bool:
    a = time.intersect_domain(isl.UnionSet(first))
    b = time.intersect_domain(isl.UnionSet(second))
    return a.lex_ge_union_map(b).is_empty()


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name


def _blocked(program: Program, s: Statement, init: Statement, weights: E.Access,
             other: E.Access, p: int, lanes: int) -> Program:
    arrays = {a.name for a in program.arrays}
    stmts = {t.name for t in program.statements}
    target = s.target
    f = target.indices[p].name
    out_array = program.array(target.array)
    w_array = program.array(weights.array)
    packed_name = _fresh(f"{weights.array}_packed", arrays)
    blocked_name = _fresh(f"{target.array}_blocked", arrays)
    fo, fi = _fresh(f"{f}o", set(s.iterators)), _fresh(f"{f}i", set(s.iterators))
    w_extents = w_array.extents()
    fw = [i.name for i in weights.indices].index(f)
    extents = out_array.extents()
    blocks = -(-extents[p] // lanes)  # the last one padded when the width does not divide
    packed_shape = ((blocks,) + tuple(e for k, e in enumerate(w_extents) if k != fw)
                    + (lanes,))
    blocked_shape = tuple(extents[:p]) + (blocks,) + tuple(extents[p + 1:]) + (lanes,)
    new_arrays = (Array(packed_name, w_array.dtype, _shape(packed_shape), "temporary"),
                  Array(blocked_name, out_array.dtype, _shape(blocked_shape), "temporary"))
    index = E.INDEX_DTYPE
    it = lambda n: E.Iter(n, index)  # noqa: E731
    whole_f = E.Binary("add", E.Binary("mul", E.Const(lanes, index), it(fo), index),
                       it(fi), index)

    # P: packed(fo, <weights' other indices>, fi) = weights(... lanes*fo + fi ...)
    w_names = [i.name for i in weights.indices]
    p_iters = [fo] + [n for n in w_names if n != f] + [fi]
    p_box = dict(zip(s.iterators, _box(s.domain)))
    p_bounds = [(0, packed_shape[0] - 1)] + [p_box[n] for n in w_names if n != f] + [(0, lanes - 1)]
    packed_target = E.Access(packed_name, tuple(it(n) for n in p_iters), w_array.dtype)
    pack = _statement(_fresh(f"{s.name}_pack", stmts), p_iters, p_bounds, packed_target,
                      E.substitute(weights, {f: whole_f}), None, inside=(fo, fi, lanes, extents[p]))
    pad = None
    if blocks * lanes != extents[p]:  # zero weights in the padding lanes of the last block
        pad = _statement(_fresh(f"{s.name}_pad", stmts), p_iters, p_bounds, packed_target,
                         E.Const(0.0, w_array.dtype), None,
                         outside=(fo, fi, lanes, extents[p]))

    # S0': blocked(... fo ..., fi) = 0 over the init's box, f split
    def split(names: list[str], bounds: list[tuple[int, int]]) -> tuple[list[str], list]:
        k = names.index(f)
        return (names[:k] + [fo] + names[k + 1:] + [fi],
                bounds[:k] + [(0, bounds[k][1] // lanes)] + bounds[k + 1:] + [(0, lanes - 1)])

    out_names = [i.name for i in target.indices]
    blocked_target = E.Access(blocked_name, tuple(it(n) for n in out_names[:p]) + (it(fo),)
                              + tuple(it(n) for n in out_names[p + 1:]) + (it(fi),),
                              target.dtype)
    i_names, i_bounds = split(list(init.iterators), _box(init.domain))
    rename_init = dict(zip([i.name for i in init.target.indices], out_names))
    i_names = [rename_init.get(n, n) for n in i_names]
    zero = _statement(init.name, i_names, i_bounds, blocked_target, init.expr, None)
    # S1': blocked(...) += other * packed(fo, ..., fi)
    r_names, r_bounds = split(list(s.iterators), _box(s.domain))
    packed_access = E.Access(packed_name, tuple(it(n) for n in p_iters), w_array.dtype)
    product = (E.Binary("mul", other, packed_access, s.expr.dtype) if s.expr.rhs is weights
               else E.Binary("mul", packed_access, other, s.expr.dtype))
    reduce = _statement(s.name, r_names, r_bounds, blocked_target, product, "+",
                        location=s.location)
    # U: target(n, f, h, w) = blocked(..., f / lanes, ..., f % lanes)
    u_bounds = _box(init.domain)
    u_names = [rename_init.get(n, n) for n in init.iterators]
    lanes_c = E.Const(lanes, index)
    unpacked = E.Access(blocked_name, tuple(it(n) for n in out_names[:p])
                        + (E.Binary("floordiv", it(f), lanes_c, index),)
                        + tuple(it(n) for n in out_names[p + 1:])
                        + (E.Binary("floormod", it(f), lanes_c, index),), target.dtype)
    unpack = _statement(_fresh(f"{s.name}_unpack", stmts), u_names, u_bounds,
                        E.Access(target.array, tuple(it(n) for n in out_names), target.dtype),
                        unpacked, None)

    time = _new_times(program, s, init, pack, pad, zero, reduce, unpack, f, fo, fi, lanes,
                      rename_init)
    statements = []
    for t in program.statements:
        if t is init:
            statements += [pack] + ([pad] if pad is not None else []) + [zero]
        elif t is s:
            statements += [reduce, unpack]
        else:
            statements.append(t)
    notes = program.notes + (f"{s.name}: {target.array}'s dimension {f} blocked by {lanes} "
                             f"({weights.array} packed as {packed_name})",)
    return replace(program, arrays=program.arrays + new_arrays, statements=tuple(statements),
                   original_schedule=time, notes=notes, generic=None).validate()


def _shape(extents: tuple[int, ...]) -> tuple[isl.PwAff, ...]:
    space = isl.Space.params_alloc(U.CTX, 0)
    return tuple(isl.PwAff.from_aff(isl.Aff.val_on_domain(
        isl.LocalSpace.from_space(space), isl.Val.int_from_si(U.CTX, e))) for e in extents)


def _statement(name: str, iterators: list[str], bounds: list[tuple[int, int]],
               target: E.Access, expr: E.Expr, reduction: str | None,
               location=None, inside: tuple | None = None,  # noqa: ANN001
               outside: tuple | None = None) -> Statement:
    """A statement over a box; ``inside``/``outside`` = (fo, fi, lanes, extent) keep
    only the points with lanes * fo + fi below / not below the extent."""
    space = U.set_space(name, iterators, [])
    domain = isl.Set.universe(space)
    for k, (low, high) in enumerate(bounds):
        domain = domain.lower_bound_val(dim.set, k, isl.Val.int_from_si(U.CTX, low))
        domain = domain.upper_bound_val(dim.set, k, isl.Val.int_from_si(U.CTX, high))
    for limit, keep_below in ((inside, True), (outside, False)):
        if limit is not None:
            fo, fi, lanes, extent = limit
            whole = U.affine(E.Binary("add", E.Binary(
                "mul", E.Const(lanes, E.INDEX_DTYPE), E.Iter(fo), E.INDEX_DTYPE),
                E.Iter(fi), E.INDEX_DTYPE), space)
            bound = U.affine(E.Const(extent, E.INDEX_DTYPE), space)
            domain = domain & (whole.lt_set(bound) if keep_below else whole.ge_set(bound))

    def access_map(access: E.Access) -> isl.Map:
        return U.access_map(space, access.array, [U.affine(i, space) for i in access.indices])

    reads = [access_map(a) for a in E.accesses(expr)]
    if reduction:
        reads.append(access_map(target))
    return Statement(name, domain, access_map(target), tuple(reads), target, expr, reduction,
                     location)


def _new_times(program: Program, s: Statement, init: Statement, pack: Statement,
               pad: Statement | None, zero: Statement, reduce: Statement, unpack: Statement,
               f: str, fo: str, fi: str, lanes: int, rename_init: dict[str, str]
               ) -> isl.UnionMap:
    """The original order with one more leading dimension (the packing first, every
    old statement after it) and one more trailing one (the unpacking of an element
    right after the last update of it, before anything the reduction precedes)."""
    maps = {m.get_tuple_name(dim.in_): m for m in U.maps_of(program.original_schedule)}
    depth = maps[s.name].dim(dim.out)

    def wrapped(m: isl.Map, lead: int, trail: int) -> isl.Map:
        """[lead, t..., trail] for the old times of ``m``."""
        n = m.dim(dim.out)
        out = m.insert_dims(dim.out, 0, 1).add_dims(dim.out, depth + 1 - n)
        out = out.fix_val(dim.out, 0, isl.Val.int_from_si(U.CTX, lead))
        for k in range(n + 1, depth + 1):
            out = out.fix_val(dim.out, k, isl.Val.zero(U.CTX))
        out = out.fix_val(dim.out, depth + 1, isl.Val.int_from_si(U.CTX, trail))
        out = out.reset_tuple_id(dim.out) if out.has_tuple_id(dim.out) else out
        for k in range(depth + 2):
            out = out.set_dim_name(dim.out, k, f"t{k}")
        return out

    def through_split(new: Statement, old: isl.Map, rename: dict[str, str]) -> isl.Map:
        """``old``'s times for the instances of ``new`` (f = lanes * fo + fi; the old
        statement's iterators named as ``rename`` says)."""
        values = {n: U.affine(E.Iter(n, E.INDEX_DTYPE), new.domain.get_space())
                  for n in new.iterators}
        values[f] = U.affine(E.Binary("add", E.Binary("mul", E.Const(lanes, E.INDEX_DTYPE),
                                                      E.Iter(fo, E.INDEX_DTYPE), E.INDEX_DTYPE),
                                      E.Iter(fi, E.INDEX_DTYPE), E.INDEX_DTYPE),
                             new.domain.get_space())
        old_space = old.get_space().domain()
        names = U.dim_names(old_space)
        to_old = U.access_map(new.domain.get_space(), old_space.get_tuple_name(dim.set),
                              [values[rename.get(n, n)] for n in names])
        # the padding lanes (f past the extent) have no old instance: they take the
        # times the old statement's (affine) schedule gives their f
        return to_old.apply_range(_everywhere(old)).intersect_domain(new.domain)

    out = []
    for name, m in maps.items():
        if name in (s.name, init.name):
            continue
        out.append(wrapped(m, 1, 0))
    out.append(wrapped(through_split(zero, maps[init.name], rename_init), 1, 0))
    out.append(wrapped(through_split(reduce, maps[s.name], {}), 1, 0))
    # the unpacking of an element: at the time of its last update, then 1
    last = {n: hi for n, (lo, hi) in zip(s.iterators, _box(s.domain))}
    ends = s.domain
    for k, n in enumerate(s.iterators):
        if n not in [i.name for i in s.target.indices]:
            ends = ends.fix_val(dim.set, k, isl.Val.int_from_si(U.CTX, last[n]))
    to_last = isl.Map.from_domain_and_range(unpack.domain, ends)
    for k, n in enumerate(unpack.iterators):
        j = s.iterators.index(n)
        to_last = to_last.equate(dim.in_, k, dim.out, j)
    out.append(wrapped(to_last.apply_range(maps[s.name]), 1, 1))
    in_order = isl.Map.identity(pack.domain.get_space().map_from_set()).intersect_domain(
        pack.domain)  # the packing in the order of its own loops, before everything
    out.append(wrapped(in_order, 0, 0))
    if pad is not None:
        in_order = isl.Map.identity(pad.domain.get_space().map_from_set()).intersect_domain(
            pad.domain)
        out.append(wrapped(in_order, 0, 1))
    return U.union_map(out)


def _everywhere(m: isl.Map) -> isl.Map:
    """A schedule map given by one affine function, extended beyond its domain."""
    pieces: list[isl.MultiAff] = []
    isl.PwMultiAff.from_map(m).foreach_piece(lambda _set, ma: pieces.append(ma))
    if len(pieces) != 1:
        raise _NotAffineTime()
    return isl.Map.from_multi_aff(pieces[0])


class _NotAffineTime(Exception):
    """The original schedule of a statement is not one affine function."""
