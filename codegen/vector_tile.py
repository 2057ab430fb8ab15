"""Explicit vector register tiles: a promoted nest printed with named vector variables.

Place in the pipeline: inside the OpenMP printer (codegen/openmp.py), for a nest that
codegen/promote.py found promotable. Promotion alone gives gcc local *arrays* and an
``omp simd`` loop, and leaves to its vectoriser and register allocator whether they
become vector registers (gcc 12 did for 16 lanes of a conv tile; nothing obliges it, and
-fno-tree-loop-vectorize makes them scalar). This module's printing leaves gcc nothing to
decide: every lane chunk of every target is a named variable of a GCC vector type
(``float __attribute__((vector_size(64)))`` with AVX-512), the operand that moves along
the lanes is one unaligned vector load, the one that does not is a scalar that the
vector arithmetic broadcasts, and the vector loop itself is gone (its body is printed
once per chunk, the chunks interleaved statement by statement, so that a broadcast
shared by the chunks is used by consecutive FMAs):

    polycomp_v16sf polycomp_reg0_0, polycomp_reg0_1, ...;    (targets x lane chunks)
    load every target chunk
    /* polycomp: register tile */
    for (long c2 = ...) {                                     (the reduction loops)
      { const long c4 = 0;  polycomp_reg0_0 += A[...] * polycomp_vload_v16sf(&B[...]); ... }
      { const long c4 = 16; polycomp_reg0_1 += ...; ... }
    }
    store every target chunk

The comment line is what polycomp/machine_code.py reads as a vector loop: the object
code of the loop below it must be packed arithmetic.

What is printed this way (``lanes``): a nest whose vector loop spans at least MIN_LANES
lanes of the statements' one floating-point type (the last chunk a partial vector when
the extent is no multiple of the width: masked loads and stores, ``partial``), whose
statements are ``+=`` reductions (or ``max``/``min`` reductions, printed with a compare
and masks: a pooling window's running maximum in a register) of expressions made of
array reads, constants, scalars of that type, ``+``, ``-``, ``*`` and negation. Per
call (``lane_steps``), proved with isl on the call's iterator expressions: the target's
element moves by one in its last index per lane (promote already proved each lane its
own element), and every read either stays in place along the lanes or moves by one in
its last index. Anything else raises NotVector, and the printer falls back to promote's
local arrays (the same values either way: each lane accumulates in the same order).
"""

from __future__ import annotations

import islpy as isl

from polycomp import expr as E
from polycomp.ir import Program, Statement
from polycomp.scheduler import cache_model as CM

from . import verify as V
from .cexpr import Helpers

# element C type and size per dtype that a tile may hold
ELEMENTS = {"float32": ("float", 4, "f"), "float64": ("double", 8, "d")}
OPERATORS = ("add", "sub", "mul")
# the reductions a tile accumulates: sums (FMAs) and max/min (pooling's windows)
REDUCTIONS = ("+", "max", "min")
# integer lanes of the same width, for the masks of extremum's selects
MASKS = {"float32": ("int", "si"), "float64": ("long long", "di")}
# the comment that marks a register tile's innermost loop for polycomp/machine_code.py
MARKER = "/* polycomp: register tile */"
# the fewest lanes a tile's vector loop spans to be printed with vector variables
MIN_LANES = 2


class NotVector(Exception):
    """This nest is not printed as a vector register tile (the printer falls back)."""


def lanes(statements: list[Statement], first: int, last: int,
          width: int | None = None) -> int | None:
    """The lanes per vector for a nest over these statements and lane bounds, or None
    when it is not printed with vector variables (module doc). ``width``: the vector
    register's bytes (default: this machine's widest, scheduler/cache_model.py)."""
    dtypes = {s.target.dtype for s in statements}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ELEMENTS:
        return None
    dtype = next(iter(dtypes))
    n = (width or CM.simd_bytes()) // ELEMENTS[dtype][1]
    if n < 2 or last - first + 1 < MIN_LANES:
        return None
    for stmt in statements:
        if stmt.reduction not in REDUCTIONS or not _simple(stmt.expr, dtype):
            return None
    return n


def _simple(node: E.Expr, dtype: str) -> bool:
    if isinstance(node, E.Access):
        return node.dtype == dtype and not any(
            isinstance(n, E.Access) for ix in node.indices for n in E.walk(ix))
    if isinstance(node, (E.Const, E.Scalar)):
        return node.dtype == dtype
    if isinstance(node, E.Unary):
        return node.op == "neg" and node.dtype == dtype and _simple(node.operand, dtype)
    if isinstance(node, E.Binary):
        return (node.op in OPERATORS and node.dtype == dtype
                and _simple(node.lhs, dtype) and _simple(node.rhs, dtype))
    return False


def vector_type(dtype: str, n: int, helpers: Helpers) -> tuple[str, str, str]:
    """(vector type, load function, store function) for ``n`` lanes of ``dtype``,
    declared in ``helpers`` on first use. Loads and stores go through memcpy: no
    alignment is assumed, and gcc emits one unaligned vector move for each."""
    ctype, size, letter = ELEMENTS[dtype]
    vtype = f"polycomp_v{n}s{letter}"
    load, store = f"polycomp_vload_v{n}s{letter}", f"polycomp_vstore_v{n}s{letter}"
    if vtype not in helpers.used:
        helpers.used[vtype] = (
            f"typedef {ctype} {vtype} __attribute__((vector_size({n * size})));\n"
            f"static inline {vtype} {load}(const {ctype} *p) "
            f"{{ {vtype} v; __builtin_memcpy(&v, p, sizeof v); return v; }}\n"
            f"static inline void {store}({ctype} *p, {vtype} v) "
            f"{{ __builtin_memcpy(p, &v, sizeof v); }}")
    return vtype, load, store


def chunks(first: int, last: int, n: int) -> list[tuple[int, int | None]]:
    """The lane chunks of a vector loop from ``first`` to ``last`` in vectors of ``n``:
    (first lane, None) for a full vector, (first lane, lanes) for the partial one at the
    end."""
    extent = last - first + 1
    return [(first + j, None if j + n <= extent else extent - j) for j in range(0, extent, n)]


def partial(dtype: str, n: int, helpers: Helpers) -> tuple[str, str]:
    """(load, store) of the first ``count`` lanes of a vector of ``n`` (the others read
    as 0, and left alone in memory): the last chunk of a vector loop whose extent is no
    multiple of the vector's (ShuffleNet's rows of 28 pixels: 16 + 12), one masked move
    with AVX-512, a copy of ``count`` elements elsewhere. Nothing past the ``count``
    elements is read or written."""
    vtype, _, _ = vector_type(dtype, n, helpers)
    ctype, size, letter = ELEMENTS[dtype]
    load, store = f"polycomp_vload_part_v{n}s{letter}", f"polycomp_vstore_part_v{n}s{letter}"
    if load not in helpers.used:
        portable = (
            f"static inline {vtype} {load}(const {ctype} *p, int count) "
            f"{{ {vtype} v = {{0}}; __builtin_memcpy(&v, p, count * sizeof *p); return v; }}\n"
            f"static inline void {store}({ctype} *p, {vtype} v, int count) "
            f"{{ __builtin_memcpy(p, &v, count * sizeof *p); }}")
        if n * size != 64:
            helpers.used[load] = portable
        else:
            kind, mask = ("ps", "__mmask16") if size == 4 else ("pd", "__mmask8")
            masked = (
                f"static inline {vtype} {load}(const {ctype} *p, int count) "
                f"{{ return ({vtype})_mm512_maskz_loadu_{kind}("
                f"({mask})((1u << count) - 1u), p); }}\n"
                f"static inline void {store}({ctype} *p, {vtype} v, int count) "
                f"{{ _mm512_mask_storeu_{kind}(p, ({mask})((1u << count) - 1u), "
                f"(__m512{'' if size == 4 else 'd'})v); }}")
            helpers.used[load] = (f"#if defined(__AVX512F__)\n#include <immintrin.h>\n{masked}\n"
                                  f"#else\n{portable}\n#endif")
    return load, store


def extremum(op: str, dtype: str, n: int, helpers: Helpers) -> str:
    """The vector form of the scalar ``max``/``min`` helper (codegen/cexpr.py): per lane
    ``b > a ? b : a`` (``<`` for min), the same select, NaNs included (an accumulator
    that is NaN stays NaN; a NaN operand is skipped), written as a compare and masks."""
    vtype, _, _ = vector_type(dtype, n, helpers)
    itype, letters = MASKS[dtype]
    mask = f"polycomp_v{n}{letters}"
    name = f"polycomp_v{op}_v{n}s{ELEMENTS[dtype][2]}"
    if mask not in helpers.used:
        helpers.used[mask] = (f"typedef {itype} {mask} "
                              f"__attribute__((vector_size({n * ELEMENTS[dtype][1]})));")
    if name not in helpers.used:
        compare = ">" if op == "max" else "<"
        helpers.used[name] = (
            f"static inline {vtype} {name}({vtype} a, {vtype} b) {{ "
            f"{mask} m = b {compare} a; "
            f"return ({vtype})((({mask})b & m) | (({mask})a & ~m)); }}")
    return name


def gather(dtype: str, n: int, helpers: Helpers) -> str:
    """The helper that builds a vector of ``n`` lanes of ``dtype`` from elements
    ``stride`` apart (declared in ``helpers`` on first use; gcc writes the lanes with
    scalar loads and inserts, or a gather)."""
    vtype, _, _ = vector_type(dtype, n, helpers)
    ctype = ELEMENTS[dtype][0]
    name = f"polycomp_vgather_v{n}s{ELEMENTS[dtype][2]}"
    if name not in helpers.used:
        lanes = ", ".join(f"p[{i} * stride]" for i in range(n))
        # one initialiser of plain loads: after inlining, gcc loads the lanes once for
        # all the rows of a tile that share them (a loop here kept it from doing so)
        helpers.used[name] = (
            f"static inline {vtype} {name}(const {ctype} *p, long stride) "
            f"{{ return ({vtype}){{{lanes}}}; }}")
    return name


def lane_steps(call: isl.AstExpr, stmt: Statement, program: Program,
               iterators: tuple[str, ...], lane: str,
               strides: dict[str, list[int]] | None = None) -> list[int]:
    """Per read access of ``stmt`` (E.accesses order): 0 when its element stays in place
    as ``lane`` moves by one, 1 when it moves by one in its last index, s > 1 when it
    moves by a constant s elements in memory (with the arrays' row-major ``strides``: a
    depthwise conv's filter w[c][kh][kw] along the channel lanes, gathered). Raises
    NotVector for any other access, or when the target does not move by one in its last
    index."""
    if lane not in iterators:
        raise NotVector(f"{lane} is not among the loops around {stmt.name}")
    function = V.call_function(call, tuple(program.params), iterators, program.context)
    if function is None:
        raise NotVector(f"the call of {stmt.name} is not affine")
    k = iterators.index(lane)
    if _step(stmt.write, function, k) != 1:
        raise NotVector(f"the target of {stmt.name} does not move with unit stride")
    steps = []
    for read in stmt.reads[:len(E.accesses(stmt.expr))]:
        array = read.get_tuple_name(isl.dim_type.out)
        step = _step(read, function, k, (strides or {}).get(array))
        if step is None:
            raise NotVector(f"a read of {stmt.name} neither stays nor moves by one")
        steps.append(step)
    return steps


def _step(access: isl.Map, function: isl.PwMultiAff, k: int,
          strides: list[int] | None = None) -> int | None:
    """0, 1 or, given the array's strides, a constant step s > 1 (see lane_steps); else
    None."""
    access = access.align_params(function.get_space())
    function = function.align_params(access.get_space())
    element = access.preimage_domain_pw_multi_aff(function)
    if not element.is_single_valued():
        return None
    pma = isl.PwMultiAff.from_map(element)
    space = pma.get_space().domain()
    shift = isl.MultiAff.identity(space.map_from_set())
    ls = isl.LocalSpace.from_space(space)
    shift = shift.set_aff(k, isl.Aff.var_on_domain(ls, isl.dim_type.set, k)
                          .add_constant_val(isl.Val.one(space.get_ctx())))
    diff = pma.pullback_multi_aff(shift).sub(pma)
    n = diff.dim(isl.dim_type.out)
    if n == 0:
        return 0
    moves = [_constant(diff.get_pw_aff(d)) for d in range(n)]
    if any(m is None for m in moves):
        return None
    if all(m == 0 for m in moves):
        return 0
    if all(m == 0 for m in moves[:-1]) and moves[-1] == 1:
        return 1
    if strides is not None and len(strides) == n:
        flat = sum(m * s for m, s in zip(moves, strides))
        if flat > 1:
            return flat
    return None


def _constant(pa: isl.PwAff) -> int | None:
    """The value of a piecewise affine function that is one integer constant on its
    domain, else None."""
    values = set()
    for _, aff in pa.get_pieces():
        if not aff.is_cst() or not aff.get_constant_val().is_int():
            return None
        values.add(int(aff.get_constant_val().to_python()))
    if len(values) != 1:
        return None
    return values.pop()


def split_offset(read: isl.Map, function: isl.PwMultiAff, strides: list[int],
                 iterators: tuple[str, ...], varying: dict[str, int | None],
                 helpers: Helpers) -> tuple[str, str] | None:
    """The row-major offset of ``read``'s element under the call ``function`` (of the loop
    ``iterators``), as C text in two summands: the part that depends on no iterator in
    ``varying`` (a register tile's reduction loops and its lanes, each with its lower
    bound where it is a constant), which gcc then keeps out of the reduction loop as a
    base address per row, and the part that does, which every row shares (a
    channel-blocked input's ``c / 16 * 3136 + c % 16`` once per step instead of once per
    row). None when the offset is not one quasi-affine piece whose divisions each read
    one side only, or a division of the varying part may see a negative numerator."""
    space = function.get_domain_space()
    for name, low in varying.items():
        if low is not None and name in iterators:
            function = function.intersect_domain(isl.Set.universe(space).lower_bound_val(
                isl.dim_type.set, iterators.index(name), isl.Val.int_from_si(space.get_ctx(), low)))
    read = read.align_params(function.get_space())
    function = function.align_params(read.get_space())
    element = read.preimage_domain_pw_multi_aff(function)
    if not element.is_single_valued() or element.dim(isl.dim_type.param):
        return None
    pma = isl.PwMultiAff.from_map(element)
    if pma.dim(isl.dim_type.out) != len(strides):
        return None
    flat = None
    for d, stride in enumerate(strides):
        term = pma.get_pw_aff(d).scale_val(isl.Val.int_from_si(pma.get_ctx(), stride))
        flat = term if flat is None else flat.add(term)
    if flat is None:
        return None
    pieces = flat.get_pieces()
    if len(pieces) != 1:
        return None
    domain, aff = pieces[0]
    fixed: list[str] = []
    moving: list[str] = []
    for j, name in enumerate(iterators):
        coefficient = _integer(aff.get_coefficient_val(isl.dim_type.in_, j))
        if coefficient is None:
            return None
        if coefficient:
            (moving if name in varying else fixed).append(_scaled(coefficient, name))
    for j in range(aff.dim(isl.dim_type.div)):
        coefficient = _integer(aff.get_coefficient_val(isl.dim_type.div, j))
        if coefficient is None:
            return None
        if not coefficient:
            continue
        text = _division(aff.get_div(j), domain, iterators, helpers)
        if text is None:
            return None
        division, names, exact = text
        sides = {n in varying for n in names}
        if len(sides) != 1 or (sides == {True} and not exact):
            return None
        (moving if sides == {True} else fixed).append(_scaled(coefficient, f"({division})"))
    constant = _integer(aff.get_constant_val())
    if constant is None:
        return None
    if constant:
        fixed.append(str(constant))
    return " + ".join(fixed) or "0", " + ".join(moving) or "0"


def _integer(value: isl.Val) -> int | None:
    return int(value.to_python()) if value.is_int() else None


def _scaled(coefficient: int, term: str) -> str:
    return term if coefficient == 1 else f"{coefficient} * {term}"


def _division(div: isl.Aff, domain: isl.Set, iterators: tuple[str, ...], helpers: Helpers
              ) -> tuple[str, list[str], bool] | None:
    """(C text of floor(div), the iterators it reads, whether it is C's ``/``) for an isl
    div (an affine expression over a denominator): ``/`` where the numerator is never
    negative on the domain, polycomp_floord otherwise (kept out of the reduction loop
    only: a call per step would cost more than the index it saves)."""
    ctx = div.get_ctx()
    denominator = _integer(div.get_denominator_val())
    if denominator is None or denominator <= 0:
        return None
    if any(not div.get_coefficient_val(isl.dim_type.div, j).is_zero()
           for j in range(div.dim(isl.dim_type.div))):
        return None  # a division inside a division
    numerator = div.scale_val(isl.Val.int_from_si(ctx, denominator))
    terms, names = [], []
    for j, name in enumerate(iterators):
        coefficient = _integer(numerator.get_coefficient_val(isl.dim_type.in_, j))
        if coefficient is None:
            return None
        if coefficient:
            terms.append(_scaled(coefficient, name))
            names.append(name)
    constant = _integer(numerator.get_constant_val())
    if constant is None:
        return None
    if constant:
        terms.append(str(constant))
    text = " + ".join(terms) or "0"
    zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(domain.get_space()))
    negative = isl.PwAff.from_aff(numerator).intersect_domain(domain).lt_set(zero)
    if negative.is_empty():
        return f"({text}) / {denominator}", names, True
    return f"{helpers.need('floord')}({text}, {denominator})", names, False
