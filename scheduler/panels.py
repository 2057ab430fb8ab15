"""Panel packing of a matrix product's streamed operand: Program -> Program, before the
dependences (specialised programs), right after channel blocking (scheduler/blocking.py).

A product C(i, j) += A(i, k) * B(k, j) with j the vector loop runs as register tiles of
a few rows of C by W = 4 vectors of columns (scheduler/register_tile.py), the k loop
inside: each step of k loads W floats of one row of B, and the next step the same
columns of the next row, N floats further. When N * 4 bytes is a multiple of 4 KiB
(2048 columns: rows 8 KiB apart) every row of a k-panel falls in the same L1 sets, 12
ways deep, and the panel is read again from L2 for every row of C it serves. BLIS and
onnxruntime's MLAS copy B into panels first; so does this pass:

    P:   Bp(jo, k, ji) = B(k, W * jo + ji)                          pack, once per call
    S1': C(i, W * jo + ji) += A(i, k) * Bp(jo, k, ji)

Each register tile then reads W contiguous floats per step of k, and a panel's k steps
follow each other in memory. P is a statement of the program: a model importer runs it
once at load time when B is a constant weight (frontend/onnx/prepack.py), as it does
channel blocking's packing. The sum of each element keeps its order (S1' adds the same
terms in the same order), so exact_fp holds.

When it applies (otherwise the program is returned as it is): a "+" reduction over
floats whose expression is the product of two accesses of plain iterators; one of them,
B, ends with the target's last index j (the vector loop) and has one reduced index k
before it, its other indices the target's (batch dimensions); the other operand does not
read j; every domain is a box; j's extent N is a multiple of W, and B's rows are long:
N * itemsize at least PANEL_ROW_BYTES and N at least 2 W (shorter rows share few sets); at
least MIN_ROWS rows of C reuse each panel (a matrix-vector product would pay the copy in
full; channel blocking packs its weights, scheduler/blocking.py).

Left out: an ONNX MatMul at batch 1, which indexes A with a constant 0. Packed, BERT's
FFN matmul (128 x 768 x 3072, constant weights) ran as fast as unpacked (2.44 against
2.41 ms on two threads; onnxruntime 2.07): its rows of 3072 floats are 12 KiB apart, not
a multiple of 4 KiB, and its row tiles are short. The tile sizes of a packed band come
from scheduler/panel_tiles.py.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Array, Program, Statement
from polycomp.options import Options

from . import cache_model as CM
from .blocking import (
    _box,
    _everywhere,
    _fresh,
    _plain,
    _shape,
    _statement,
    block_channels,
    rewrite_each,
)

dim = isl.dim_type

# vectors per panel: the register tile's widest row (register_tile.MAX_VECTORS)
PANEL_VECTORS = 4
# rows of B shorter than this many bytes are not packed
PANEL_ROW_BYTES = 4096
# rows of C (the product of the target's other extents) that reuse each panel
MIN_ROWS = 16


def block_and_pack(program: Program, panels: bool = True) -> Program:
    """Channel blocking (scheduler/blocking.py), then panel packing unless ``panels`` is
    False: the layout changes ``Options.block_channels`` asks for."""
    blocked = block_channels(program)
    return pack_panels(blocked) if panels else blocked


def packs_panels(options: Options) -> bool:
    """Whether a compile with ``options`` packs panels: not for isl's scheduler, which
    schedules the parametric program (``Program.generic``, as PPCG does) and has none
    after packing: on the specialised packed sgemm 2048 it took 5.4 s against 0.47, at
    the edge of its time limit (then pluto's schedule)."""
    return options.scheduler != "isl"


def pack_panels(program: Program) -> Program:
    """``program`` with every matrix product's streamed operand packed (module doc)."""
    return rewrite_each(program, _pattern, _packed)


def _pattern(program: Program, s: Statement) -> tuple[E.Access, int] | None:
    """(the operand to pack, the panel width in elements) when ``s`` is such a product."""
    if s.reduction != "+" or s.target.dtype not in ("float32", "float64"):
        return None
    if not (isinstance(s.expr, E.Binary) and s.expr.op == "mul"
            and all(isinstance(x, E.Access) and _plain(x) for x in (s.expr.lhs, s.expr.rhs))):
        return None
    target = s.target
    if not _plain(target) or len({i.name for i in target.indices}) != len(target.indices):
        return None
    box = _box(s.domain)
    outputs = [i.name for i in target.indices]
    if box is None or not outputs:
        return None
    j = outputs[-1]
    bounds = dict(zip(s.iterators, box))
    itemsize = 8 if target.dtype == "float64" else 4
    width = PANEL_VECTORS * CM.simd_lanes(itemsize)
    n = bounds[j][1] - bounds[j][0] + 1
    rows = 1
    for name in outputs[:-1]:
        rows *= bounds[name][1] - bounds[name][0] + 1
    if bounds[j][0] != 0 or n % width or n < 2 * width or n * itemsize < PANEL_ROW_BYTES:
        return None
    for operand, other in ((s.expr.rhs, s.expr.lhs), (s.expr.lhs, s.expr.rhs)):
        names = [i.name for i in operand.indices]
        if (len(names) < 2 or names[-1] != j or len(set(names)) != len(names)
                or operand.array == target.array or other.array == target.array):
            continue
        reduced = [x for x in names if x not in outputs]
        if reduced != [names[-2]] or any(x not in outputs for x in names[:-2]):
            continue
        if any(isinstance(x, E.Iter) and x.name == j for x in E.walk(other)):
            continue
        if rows < MIN_ROWS:
            continue  # the copy would cost about as much as the product
        return operand, width
    return None


def _packed(program: Program, s: Statement, operand: E.Access, width: int) -> Program:
    arrays = {a.name for a in program.arrays}
    stmts = {t.name for t in program.statements}
    j = s.target.indices[-1].name
    source = program.array(operand.array)
    packed_name = _fresh(f"{operand.array}_panels", arrays)
    jo, ji = _fresh(f"{j}o", set(s.iterators)), _fresh(f"{j}i", set(s.iterators))
    bounds = dict(zip(s.iterators, _box(s.domain)))
    names = [i.name for i in operand.indices]
    extents = source.extents()
    panels = extents[-1] // width
    packed_shape = tuple(extents[:-2]) + (panels, extents[-2], width)
    packed = Array(packed_name, source.dtype, _shape(packed_shape), "temporary")
    index = E.INDEX_DTYPE
    it = lambda n: E.Iter(n, index)  # noqa: E731
    whole_j = E.Binary("add", E.Binary("mul", E.Const(width, index), it(jo), index),
                       it(ji), index)

    # P: panels(batch..., jo, k, ji) = B(batch..., k, width * jo + ji)
    p_iters = names[:-2] + [jo, names[-2], ji]
    p_bounds = ([(0, extents[d] - 1) for d in range(len(names) - 2)]
                + [(0, panels - 1), (0, extents[-2] - 1), (0, width - 1)])
    panel_access = E.Access(packed_name, tuple(it(n) for n in p_iters), source.dtype)
    pack = _statement(_fresh(f"{s.name}_panels", stmts), p_iters, p_bounds, panel_access,
                      E.substitute(operand, {j: whole_j}), None)
    # S1': target(..., width * jo + ji) += other * panels(..., jo, k, ji), j split
    k = s.iterators.index(j)
    r_names = list(s.iterators[:k]) + [jo] + list(s.iterators[k + 1:]) + [ji]
    r_box = [bounds[n] for n in s.iterators]
    r_bounds = r_box[:k] + [(0, panels - 1)] + r_box[k + 1:] + [(0, width - 1)]
    new_target = E.substitute(s.target, {j: whole_j})
    product = (E.Binary("mul", s.expr.lhs, panel_access, s.expr.dtype)
               if s.expr.rhs is operand else
               E.Binary("mul", panel_access, s.expr.rhs, s.expr.dtype))
    reduce = _statement(s.name, r_names, r_bounds, new_target, product, "+",
                        location=s.location)

    time = _new_times(program, s, pack, reduce, j, jo, ji, width)
    statements = [pack] + [reduce if t is s else t for t in program.statements]
    notes = program.notes + (f"{s.name}: {operand.array} packed in panels of {width} "
                             f"columns as {packed_name}",)
    return replace(program, arrays=program.arrays + (packed,), statements=tuple(statements),
                   original_schedule=time, notes=notes, generic=None).validate()


def _new_times(program: Program, s: Statement, pack: Statement, reduce: Statement,
               j: str, jo: str, ji: str, width: int) -> isl.UnionMap:
    """The original order after a new leading dimension: the packing first (in the order
    of its own loops), every old statement after it, the product at its old times."""
    maps = {m.get_tuple_name(dim.in_): m for m in U.maps_of(program.original_schedule)}
    depth = max(m.dim(dim.out) for m in maps.values())
    depth = max(depth, pack.domain.dim(dim.set))

    def wrapped(m: isl.Map, lead: int) -> isl.Map:
        n = m.dim(dim.out)
        out = m.insert_dims(dim.out, 0, 1).add_dims(dim.out, depth - n)
        out = out.fix_val(dim.out, 0, isl.Val.int_from_si(U.CTX, lead))
        for d in range(n + 1, depth + 1):
            out = out.fix_val(dim.out, d, isl.Val.zero(U.CTX))
        out = out.reset_tuple_id(dim.out) if out.has_tuple_id(dim.out) else out
        for d in range(depth + 1):
            out = out.set_dim_name(dim.out, d, f"t{d}")
        return out

    space = reduce.domain.get_space()
    values = {n: U.affine(E.Iter(n, E.INDEX_DTYPE), space) for n in reduce.iterators}
    values[j] = U.affine(E.Binary("add", E.Binary(
        "mul", E.Const(width, E.INDEX_DTYPE), E.Iter(jo, E.INDEX_DTYPE), E.INDEX_DTYPE),
        E.Iter(ji, E.INDEX_DTYPE), E.INDEX_DTYPE), space)
    old = maps[s.name]
    to_old = U.access_map(space, s.name, [values[n] for n in s.iterators])
    out = [wrapped(m, 1) for name, m in maps.items() if name != s.name]
    out.append(wrapped(to_old.apply_range(_everywhere(old)).intersect_domain(reduce.domain), 1))
    in_order = isl.Map.identity(pack.domain.get_space().map_from_set()).intersect_domain(
        pack.domain)
    out.append(wrapped(in_order, 0))
    return U.union_map(out)
