"""ONNX lowering, the statement builder: tensors and statements of one fusion group's Program.

Input: the lowering functions of frontend/onnx/ops/ call a :class:`GroupBuilder` (through
a :class:`NodeContext`) with index expressions (polycomp/expr.py trees over the
iterators ``i0, i1, ...``) and constant extents. Output: a validated, specialised
:class:`polycomp.ir.Program` (no parameters: a model is compiled per set of input
shapes) whose arrays are named ``t0, t1, ...`` inside the group, so that ONNX names never
reach C and two identical groups give identical Programs (compiled once).

A :class:`Tensor` is a value of the graph as the group sees it: an array of the group, a
view of one (Transpose, Reshape inside a group: an index rewrite, no copy), or a
compile-time constant (a scalar constant becomes a literal in the expression).

    b = GroupBuilder("g0")
    x = b.input("X", "float32", (4, 8))
    y = b.new_array("Y", "float32", (4, 8))
    i = b.iterators(2)
    b.assign(y[i], E.Call("exp", (x[i],), "float32"), (4, 8))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import islpy as isl
import numpy as np

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import InternalError, Location, UnsupportedError
from polycomp.ir import Array, Program, Statement, sequential_schedule

dim = isl.dim_type

IndexFn = Callable[[tuple[E.Expr, ...]], tuple[E.Expr, ...]]


def const(value: int | float | bool, dtype: str) -> E.Const:
    """A literal of ``dtype`` (integers stay Python ints, floats Python floats)."""
    if dtype == "bool":
        return E.Const(bool(value), dtype)
    if E.is_float(dtype):
        return E.Const(float(value), dtype)
    return E.Const(int(value), dtype)


def index(value: int | E.Expr) -> E.Expr:
    return value if isinstance(value, E.Expr) else E.Const(int(value), E.INDEX_DTYPE)


@dataclass(frozen=True, eq=False)
class Tensor:
    """One graph value inside a group.

    name    the ONNX value name (messages only; it never reaches C)
    dtype   a polycomp dtype name ("float32", ...)
    shape   constant extents
    array   the group array holding the data (None for a constant not stored)
    view    maps this tensor's indices to indices of ``array`` (None: the identity)
    value   the value when it is known at compile time (initializers, folded constants)
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    array: str | None = None
    view: IndexFn | None = field(default=None, repr=False)
    value: np.ndarray | None = field(default=None, repr=False)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __getitem__(self, indices: Sequence[int | E.Expr] | int | E.Expr) -> E.Expr:
        """The element at ``indices`` as an expression (an Access, or a literal for a
        constant with one distinct value)."""
        if not isinstance(indices, (tuple, list)):
            indices = (indices,)
        idx = tuple(index(i) for i in indices)
        if len(idx) != self.rank:
            raise InternalError(f"onnx lowering: {len(idx)} indices for '{self.name}' of rank "
                                f"{self.rank}")
        if self.value is not None and self.array is None:
            flat = np.asarray(self.value).reshape(-1)
            if flat.size == 0:
                raise InternalError(f"onnx lowering: element of empty constant '{self.name}'")
            return const(flat[0].item(), self.dtype)
        if self.array is None:
            raise InternalError(f"onnx lowering: '{self.name}' has no storage")
        if self.view is not None:
            idx = self.view(idx)
        return E.Access(self.array, idx, self.dtype)

    def with_view(self, shape: Sequence[int], fn: IndexFn) -> Tensor:
        """This tensor seen with ``shape`` through ``fn`` (new indices -> this tensor's)."""
        if self.array is None:  # an inlined constant has one value: any view of it too
            return replace(self, shape=tuple(int(s) for s in shape))
        inner = self.view
        composed = fn if inner is None else (lambda idx, _f=fn, _g=inner: _g(_f(idx)))
        return replace(self, shape=tuple(int(s) for s in shape), view=composed, value=None)

    def is_uniform_constant(self) -> bool:
        """A compile-time constant with a single distinct value (becomes a literal)."""
        if self.value is None:
            return False
        flat = np.asarray(self.value).reshape(-1)
        return flat.size > 0 and bool(np.all(flat == flat[0]))


def blocked_shape(shape: Sequence[int], block: int) -> tuple[int, ...]:
    """The stored shape of a (N, C, spatial...) value blocked by ``block`` channels: (N,
    ceil(C / block), spatial..., block); the last block's extra lanes are never read."""
    n, c, *rest = (int(s) for s in shape)
    return (n, -(-c // block), *rest, block)


def flat_index(indices: Sequence[E.Expr], shape: Sequence[int]) -> E.Expr:
    """The row-major offset of ``indices`` in ``shape`` (affine: constant strides)."""
    out: E.Expr = E.Const(0, E.INDEX_DTYPE)
    stride = 1
    terms: list[E.Expr] = []
    for i, extent in reversed(list(zip(indices, shape))):
        if extent != 1:
            terms.append(i if stride == 1 else E.Binary("mul", i, E.Const(stride, E.INDEX_DTYPE),
                                                        E.INDEX_DTYPE))
        stride *= int(extent)
    for t in reversed(terms):
        out = t if (isinstance(out, E.Const) and out.value == 0) else \
            E.Binary("add", out, t, E.INDEX_DTYPE)
    return out


def unflatten(offset: E.Expr, shape: Sequence[int]) -> tuple[E.Expr, ...]:
    """Indices in ``shape`` of a row-major ``offset`` < prod(shape) (floor divisions and
    modulos by constants: quasi-affine, so isl keeps the accesses exact)."""
    out: list[E.Expr] = []
    stride = _bound(shape)
    for k, extent in enumerate(shape):
        stride //= max(int(extent), 1)
        if extent == 1:
            out.append(E.Const(0, E.INDEX_DTYPE))
            continue
        q = offset if stride == 1 else E.Binary("floordiv", offset,
                                                  E.Const(stride, E.INDEX_DTYPE), E.INDEX_DTYPE)
        leading = all(s == 1 for s in shape[:k])  # q < extent already
        out.append(q if leading else E.Binary("floormod", q, E.Const(int(extent), E.INDEX_DTYPE),
                                              E.INDEX_DTYPE))
    return tuple(out)


def _bound(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def reshape_view(tensor: Tensor, shape: Sequence[int]) -> Tensor:
    """``tensor`` read with another shape of the same size (Reshape, Flatten, Squeeze,
    Unsqueeze): new indices -> flat offset -> old indices."""
    old = tuple(tensor.shape)
    new = tuple(int(s) for s in shape)
    if _bound(old) != _bound(new):
        raise InternalError(f"onnx lowering: reshape of {old} to {new}")
    if old == new:
        return tensor
    squeezed_old = [s for s in old if s != 1]
    squeezed_new = [s for s in new if s != 1]
    if squeezed_old == squeezed_new:  # only unit dimensions move: no division needed
        keep_new = [k for k, s in enumerate(new) if s != 1]
        def fn(idx: tuple[E.Expr, ...], _keep=keep_new, _old=old) -> tuple[E.Expr, ...]:
            it = iter(idx[k] for k in _keep)
            return tuple(next(it) if s != 1 else E.Const(0, E.INDEX_DTYPE) for s in _old)
        return tensor.with_view(new, fn)
    return tensor.with_view(new, lambda idx, _o=old, _n=new: unflatten(flat_index(idx, _n), _o))


def transpose_view(tensor: Tensor, perm: Sequence[int]) -> Tensor:
    """Transpose as a view: output index k is input index perm[k]."""
    shape = tuple(tensor.shape[p] for p in perm)
    inverse = [0] * len(perm)
    for k, p in enumerate(perm):
        inverse[p] = k
    return tensor.with_view(shape, lambda idx, _inv=tuple(inverse): tuple(idx[k] for k in _inv))


def broadcast_indices(tensor: Tensor, out_iters: Sequence[E.Expr]) -> tuple[E.Expr, ...]:
    """numpy broadcasting: ``tensor``'s indices for the output element at ``out_iters``
    (trailing dimensions aligned, extent-1 dimensions read at 0)."""
    lead = len(out_iters) - tensor.rank
    if lead < 0:
        raise InternalError(f"onnx lowering: cannot broadcast '{tensor.name}' of rank "
                            f"{tensor.rank} to rank {len(out_iters)}")
    return tuple(E.Const(0, E.INDEX_DTYPE) if extent == 1 else out_iters[lead + k]
                 for k, extent in enumerate(tensor.shape))


def broadcast(tensor: Tensor, out_iters: Sequence[E.Expr]) -> E.Expr:
    return tensor[broadcast_indices(tensor, out_iters)]


@dataclass
class _ArrayDecl:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    value_name: str  # the ONNX value it holds, for the session's bindings


class GroupBuilder:
    """Collects the arrays and statements of one group; :meth:`program` makes the Program."""

    def __init__(self, name: str):
        self.name = name
        self.arrays: dict[str, _ArrayDecl] = {}
        self.statements: list[Statement] = []
        self.log: list[str] = []  # one line per statement (signature)
        # tables a lowering computed at compile time (e.g. Resize's source indices): value
        # name -> data; the session feeds them like weights
        self.tables: dict[str, np.ndarray] = {}
        # values stored channel-blocked (plan.py: a blocked conv's output that only
        # other groups' nodes read): value name -> the block (vector width)
        self.layouts: dict[str, int] = {}
        self.blocked_views: dict[str, IndexFn] = {}  # array -> its layout view

    # ------------------------------------------------------------------ arrays
    def _new_name(self) -> str:
        return f"t{len(self.arrays)}"

    def input(self, value_name: str, dtype: str, shape: Sequence[int],
              value: np.ndarray | None = None) -> Tensor:
        """A value computed outside the group (or a constant weight): an input array."""
        name = self._new_name()
        block = self.layouts.get(value_name) if value is None else None
        stored = blocked_shape(shape, block) if block else tuple(int(s) for s in shape)
        self.arrays[name] = _ArrayDecl(name, dtype, stored, "input", value_name)
        tensor = Tensor(value_name, dtype, tuple(int(s) for s in shape), name, None, value)
        return self._blocked_view(tensor, block) if block else tensor

    def table(self, data: np.ndarray, dtype: str, what: str) -> Tensor:
        """A constant a lowering computed (an index table, packed weights): an input array
        whose data the session passes on every call."""
        value_name = f"\x00table{len(self.tables)}:{what}"  # no ONNX value has this name
        data = np.ascontiguousarray(np.asarray(data, dtype=dtype))
        self.tables[value_name] = data
        return self.input(value_name, dtype, data.shape, data)

    def blocked_table(self, data: np.ndarray, dtype: str, what: str, block: int) -> Tensor:
        """A constant (N, C, ...) table stored channel-blocked by ``block`` (the last
        block's extra lanes hold zeros), seen through the blocked view with ``data``'s
        shape: a depthwise convolution's filter then moves along the lanes as its blocked
        input and output do, and is one vector load instead of a gather."""
        data = np.asarray(data, dtype=dtype)
        n, c, *rest = data.shape
        padded = np.zeros((n, -(-c // block) * block, *rest), dtype=dtype)
        padded[:, :c] = data
        stored = np.ascontiguousarray(np.moveaxis(
            padded.reshape(n, -1, block, *rest), 2, -1))
        value_name = f"\x00table{len(self.tables)}:{what}"
        self.tables[value_name] = stored
        name = self._new_name()
        self.arrays[name] = _ArrayDecl(name, dtype, stored.shape, "input", value_name)
        tensor = Tensor(value_name, dtype, tuple(data.shape), name, None, data)
        return self._blocked_view(tensor, block)

    def new_array(self, value_name: str, dtype: str, shape: Sequence[int],
                  block: int | None = None) -> Tensor:
        """A fresh array for a value the group computes (a temporary until
        :meth:`export` makes it an output); channel-blocked by ``block`` (or as
        ``layouts`` says for the value), seen through a view with the value's shape."""
        name = self._new_name()
        block = block or self.layouts.get(value_name)
        stored = blocked_shape(shape, block) if block else tuple(int(s) for s in shape)
        self.arrays[name] = _ArrayDecl(name, dtype, stored, "temporary", value_name)
        tensor = Tensor(value_name, dtype, tuple(int(s) for s in shape), name)
        return self._blocked_view(tensor, block) if block else tensor

    def _blocked_view(self, tensor: Tensor, block: int) -> Tensor:
        """(n, c, h, w) -> (n, c / block, h, w, c % block): the channel-blocked layout
        (NCHWc, as onnxruntime keeps activations between its convolutions)."""
        b = E.Const(block, E.INDEX_DTYPE)

        def fn(idx: tuple[E.Expr, ...]) -> tuple[E.Expr, ...]:
            c, whole = idx[1], 0
            # c + k*block (a Concat's second part): whole blocks further, same lane
            if (isinstance(c, E.Binary) and c.op == "add" and isinstance(c.rhs, E.Const)
                    and isinstance(c.rhs.value, int) and c.rhs.value % block == 0):
                c, whole = c.lhs, c.rhs.value // block
            q: E.Expr = E.Binary("floordiv", c, b, E.INDEX_DTYPE)
            if whole:
                q = E.Binary("add", q, E.Const(whole, E.INDEX_DTYPE), E.INDEX_DTYPE)
            return (idx[0], q, *idx[2:], E.Binary("floormod", c, b, E.INDEX_DTYPE))
        self.blocked_views[tensor.array] = fn  # type: ignore[index]
        return replace(tensor, view=fn)

    def is_stored_as(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` is its array as stored: no view, or its layout view."""
        if tensor.array is None:
            return False
        return tensor.view is None or tensor.view is self.blocked_views.get(tensor.array)

    def blocked(self, tensor: Tensor) -> int | None:
        """The block of the layout ``tensor``'s array is stored in, if it is its view."""
        if tensor.array is None or tensor.view is None or \
                tensor.view is not self.blocked_views.get(tensor.array):
            return None
        return self.arrays[tensor.array].shape[-1]

    def export(self, tensor: Tensor) -> None:
        """The group's caller reads this array after the call."""
        if not self.is_stored_as(tensor):
            raise InternalError(f"onnx lowering: cannot export '{tensor.name}' (not an array)")
        decl = self.arrays[tensor.array]
        if decl.role == "temporary":
            decl.role = "output"

    @staticmethod
    def iterators(n: int, prefix: str = "i") -> tuple[E.Iter, ...]:
        return tuple(E.Iter(f"{prefix}{k}") for k in range(n))

    # ------------------------------------------------------------------ statements
    def assign(self, target: E.Expr, value: E.Expr, extents: Sequence[int],
               reduction: str | None = None, where: E.Expr | None = None,
               names: Sequence[str] | None = None, location: Location | None = None) -> None:
        """``target (op)= value`` for every point 0 <= i_k < extents[k] satisfying ``where``
        (an affine condition over the iterators: comparisons joined by and/or).
        The iterators are ``i0, i1, ...`` unless ``names`` gives others."""
        if not isinstance(target, E.Access):
            raise InternalError("onnx lowering: the target of a statement must be an array "
                                "element")
        names = list(names) if names is not None else [f"i{k}" for k in range(len(extents))]
        if any(int(e) <= 0 for e in extents):
            return  # an empty loop: nothing to compute
        if target.dtype != value.dtype:
            value = E.Cast(value, target.dtype)
        sname = f"S{len(self.statements)}"
        space = U.set_space(sname, names, [])
        domain = isl.Set.universe(space)
        ls = isl.LocalSpace.from_space(space)
        for k, extent in enumerate(extents):
            v = isl.PwAff.var_on_domain(ls, dim.set, k)
            domain = domain & v.ge_set(v.sub(v)) & v.lt_set(_constant(ls, int(extent)))
        if where is not None:
            domain = domain & _condition(where, space)
        if domain.is_empty():
            return
        write = U.access_map(space, target.array,
                             [_affine(i, space) for i in target.indices])
        reads = [self._read_map(space, a) for a in E.accesses(value)]
        if reduction is not None:
            reads.append(write)
        # what determines the statement, as text that does not depend on isl's printing
        self.log.append(repr((names, tuple(int(e) for e in extents), target, value,
                              reduction, where)))
        self.statements.append(Statement(sname, domain.coalesce(), write, tuple(reads), target,
                                         value, reduction, location))

    def _read_map(self, space: isl.Space, access: E.Access) -> isl.Map:
        """{ S[..] -> T[..] }; a data-dependent index covers the whole dimension."""
        gather = [any(isinstance(n, E.Access) for n in E.walk(t)) for t in access.indices]
        zero = _affine(E.Const(0, E.INDEX_DTYPE), space)
        m = U.access_map(space, access.array,
                         [zero if g else _affine(t, space) for t, g in zip(access.indices, gather)])
        if not any(gather):
            return m
        shape = self.arrays[access.array].shape
        for k, g in enumerate(gather):
            if g:
                m = (m.project_out(dim.out, k, 1).insert_dims(dim.out, k, 1)
                     .set_dim_name(dim.out, k, f"o{k}"))
        m = m.set_tuple_name(dim.out, access.array)
        rng_space = U.set_space(None, [f"o{k}" for k in range(len(gather))], [])
        ls = isl.LocalSpace.from_space(rng_space)
        rng = isl.Set.universe(rng_space)
        for k, g in enumerate(gather):
            if g:
                coord = isl.PwAff.var_on_domain(ls, dim.set, k)
                extent = _constant(ls, shape[k])
                rng = rng & coord.ge_set(coord.sub(coord)) & coord.lt_set(extent)
        return m.intersect_range(rng.set_tuple_name(access.array))

    # ------------------------------------------------------------------ result
    def program(self) -> Program:
        arrays = tuple(Array(d.name, d.dtype, tuple(U.constant_pw_aff(s) for s in d.shape),
                             d.role) for d in self.arrays.values())
        if not self.statements:
            raise InternalError(f"onnx lowering: group {self.name} has no statements")
        program = Program(self.name, (), arrays, tuple(self.statements),
                          sequential_schedule(self.statements), isl.Set.universe(U.param_space([])))
        return program.validate()

    def signature(self) -> str:
        """The group's Program as text built from the expression trees the lowerings
        gave (not from isl's printing of sets and maps, which differs between two builds
        of the same maps): the key of its compiled form (polycomp/compile_cache.py)."""
        decls = [f"{d.name}|{d.dtype}|{d.shape}|{d.role}" for d in self.arrays.values()]
        return "\n".join([self.name, *decls, *self.log])

    def roles(self) -> dict[str, tuple[str, str]]:
        """array name -> (role, ONNX value name)."""
        return {d.name: (d.role, d.value_name) for d in self.arrays.values()}


def _constant(ls: isl.LocalSpace, value: int) -> isl.PwAff:
    return isl.PwAff.from_aff(isl.Aff.val_on_domain(ls, isl.Val.int_from_si(U.CTX, value)))


def _affine(node: E.Expr, space: isl.Space) -> isl.PwAff:
    try:
        return U.affine(node, space)
    except U.NotAffine as exc:
        raise InternalError(f"onnx lowering: index {node} is not affine") from exc


def _condition(node: E.Expr, space: isl.Space) -> isl.Set:
    """An affine condition over the iterators as a set."""
    if isinstance(node, E.Binary) and node.op in ("and", "or"):
        a, b = _condition(node.lhs, space), _condition(node.rhs, space)
        return a & b if node.op == "and" else a | b
    if isinstance(node, E.Const) and node.dtype == "bool":
        u = isl.Set.universe(space)
        return u if node.value else u.subtract(u)
    if isinstance(node, E.Binary) and node.op in E.COMPARE_OPS:
        a, b = _affine(node.lhs, space), _affine(node.rhs, space)
        return {"lt": a.lt_set, "le": a.le_set, "gt": a.gt_set, "ge": a.ge_set,
                "eq": a.eq_set, "ne": a.ne_set}[node.op](b)
    raise UnsupportedError(f"onnx lowering: condition {node} is not affine")
