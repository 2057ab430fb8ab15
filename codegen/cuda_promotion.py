"""Printing scheduler/gpu_promotion.py's marks in CUDA: shared-memory tiles and registers.

Place in the pipeline: inside codegen/cuda.py's generator. Before isl's AST is built,
``numbered_promotions`` gives every ``shared:``/``private:`` mark of the tree its plan
(gpu_promotion.plan_at: the boxes, as functions of the loops around the mark, or None
when the mark does not hold) and a unique name ``promote#k``. While isl builds the AST,
``Promotions`` (its after-each-mark callback) turns each plan's functions into isl AST
expressions with the build at the mark: isl knows there which loops it wrote and which
it replaced by their one value, so the expressions are right wherever the mark lands.
The printer (``PromotionPrinting``, mixed into CudaPrinter) then prints, at a mark:

- shared: the box's offset and extent per dimension, a ``__shared__`` buffer of the
  box's largest size, a copy of the box from global memory by all the block's threads
  (flat thread index, the innermost array dimension fastest: coalesced), guarded by the
  footprint's domain, ``__syncthreads()``, the subtree with the array's accesses read
  from the buffer (index minus offset), ``__syncthreads()`` (the next copy overwrites);
- private: a local loaded from the element (when the subtree reads it), the subtree
  with the element's accesses on the local, the local stored back (when it writes it).

isl calls the callback once per mark in the AST, in the AST's order; each record keeps
the C text of the mark's subtree, and the printer takes a mark's record only when that
text and the number of records match the AST (else the mark prints no promotion, which
is always correct). Every barrier sits where gpu_promotion put the mark: above the
kernel's thread loops, under loops and conditions of the block index and host loops
only, so that each thread of a block reaches it the same number of times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import cgen as c
import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program
from polycomp.scheduler import gpu_promotion as PR
from polycomp.scheduler import tree as T

from .cexpr import ADD, CTYPES, MUL, PRIMARY, Text, ValuePrinter

node_type = isl.ast_node_type

PROMOTE = "promote"  # the numbered marks' prefix: promote#k


def numbered_promotions(schedule: isl.Schedule,
                        program: Program) -> tuple[isl.Schedule, list[PR.Plan | None]]:
    """The tree with each promotion mark renamed ``promote#k`` and the plans by k."""
    plans: list[PR.Plan | None] = []

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_mark(node) and PR.parse_mark(node.mark_get_id().get_name()) is not None:
            try:
                plan = U.within_operations(PR.DECISION_OPERATIONS,
                                           lambda: PR.plan_at(node, program))
            except isl.Error:
                plan = None
            node = node.delete().insert_mark(isl.Id(f"{PROMOTE}#{len(plans)}"))
            plans.append(plan)
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule(), plans


@dataclass
class Placed:
    """A plan at one mark of the AST: per box, its offsets, its extents (shared) and the
    condition under which the footprint is there, as isl AST expressions."""

    plan: PR.Plan
    lower: list[list[isl.AstExpr]]
    extent: list[list[isl.AstExpr]]
    guard: list[isl.AstExpr]


class Promotions:
    """The after-each-mark callback that places the plans (module doc)."""

    def __init__(self, plans: list[PR.Plan | None]):
        self.plans = plans
        self.found: dict[str, list[tuple[str, Placed | None]] | None] = {}

    def reset(self) -> None:
        self.found = {}

    def __call__(self, node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
        # an exception must not cross isl's C code: anything wrong records no placement
        try:
            name = node.mark_get_id().get_name()
            kind, sep, index = name.partition("#")
            if kind == PROMOTE and sep:
                plan = self.plans[int(index)]
                placed = _place(plan, build) if plan is not None else None
                records = self.found.setdefault(name, [])
                if records is not None:
                    records.append((node.mark_get_node().to_C_str(), placed))
        except Exception:  # noqa: BLE001 - see above
            self.found[name] = None
        return node

    def settle(self, ast: isl.AstNode) -> None:
        """Drop the records of a mark whose count differs from the AST's."""
        counts: dict[str, int] = {}
        _count_marks(ast, counts)
        for name, records in list(self.found.items()):
            if records is None or len(records) != counts.get(name, 0):
                self.found[name] = None
        self.taken = {name: 0 for name in self.found}

    def take(self, name: str, inner: isl.AstNode) -> Placed | None:
        """The next record of mark ``name`` when it was made for ``inner``."""
        records = self.found.get(name)
        if not records:
            return None
        k = self.taken[name]
        self.taken[name] = k + 1
        if k >= len(records):
            return None
        text, placed = records[k]
        return placed if text == inner.to_C_str() else None


def _place(plan: PR.Plan, build: isl.AstBuild) -> Placed:
    onto = _onto_build(plan, build.get_schedule_space())
    lower, extent, guard = [], [], []
    one = isl.Val.int_from_si(U.CTX, 1)
    for box in plan.boxes:
        lower.append([build.expr_from_pw_aff(onto(pa)) for pa in box.lower])
        extent.append([build.expr_from_pw_aff(onto(hi.sub(lo).add_constant_val(one)))
                       for lo, hi in zip(box.lower, box.upper)])
        domain = None
        for pa in (*box.lower, *box.upper):
            domain = pa.domain() if domain is None else domain.intersect(pa.domain())
        guard.append(build.expr_from_set(onto(domain)))
    return Placed(plan, lower, extent, guard)


def _onto_build(plan: PR.Plan, space: isl.Space):
    """A function taking a PwAff or Set over the plan's [c0, ..., c(depth-1)] into the
    build's schedule space at the mark. That space either nests one wrapped pair per
    band ([[[] -> [a]] -> [b]], every loop there) or is flat and names the loops it
    kept (``cK``, codegen/ast.loop_iterator). A loop isl left out takes one value where
    the mark is: it must be a function of the kept loops over every iteration that
    reaches the mark (``Plan.domain``), and is replaced by it (else: refused)."""
    depth = plan.depth
    flatten = isl.MultiAff.identity(space.map_from_set()).flatten_range()
    n = space.dim(isl.dim_type.set)
    names = [space.get_dim_name(isl.dim_type.set, k) for k in range(n)]
    if all(name is not None and re.fullmatch(r"c\d+", name) for name in names):
        kept = [int(name[1:]) for name in names]
    elif n == depth:
        kept = list(range(depth))
    else:
        raise ValueError("the build's schedule space does not match the plan")
    if kept != sorted(set(kept)) or any(k >= depth for k in kept):
        raise ValueError("the build's loops are not the plan's")
    if len(kept) == depth:
        return lambda obj: (obj.preimage_multi_aff(flatten) if isinstance(obj, isl.Set)
                            else obj.pullback_multi_aff(flatten))
    # { [kept loops] -> [every loop] } over the mark's iterations: single-valued when
    # the loops left out are functions of the kept ones
    every = isl.Map.identity(plan.domain.get_space().map_from_set()).intersect_domain(
        plan.domain)
    for k in reversed(range(depth)):
        if k not in kept:
            every = every.project_out(isl.dim_type.in_, k, 1)
    if not every.is_single_valued():
        raise ValueError("a loop isl left out is not fixed where the mark is")
    back = isl.PwMultiAff.from_map(every).pullback_multi_aff(flatten)

    def onto(obj):
        if isinstance(obj, isl.Set):
            return obj.preimage_pw_multi_aff(back)
        return obj.pullback_pw_multi_aff(back)

    return onto


def _count_marks(node: isl.AstNode, counts: dict[str, int]) -> None:
    kind = node.get_type()
    if kind == node_type.mark:
        name = node.mark_get_id().get_name()
        counts[name] = counts.get(name, 0) + 1
        _count_marks(node.mark_get_node(), counts)
    elif kind == node_type.for_:
        _count_marks(node.for_get_body(), counts)
    elif kind == node_type.if_:
        _count_marks(node.if_get_then_node(), counts)
        if node.if_has_else_node():
            _count_marks(node.if_get_else_node(), counts)
    elif kind == node_type.block:
        for child in U.to_list(node.block_get_children()):
            _count_marks(child, counts)


@dataclass(frozen=True)
class Staged:
    """How the statements below a mark reach a promoted array: a shared buffer (its
    name, the offsets' C names, its sizes) or a register (its name)."""

    name: str
    lower: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()

    @property
    def register(self) -> bool:
        return not self.sizes


class PromotedValuePrinter(ValuePrinter):
    """ValuePrinter with the promoted arrays' accesses on their buffers or registers."""

    def __init__(self, staged: dict[str, Staged], *args: object):
        super().__init__(*args)  # type: ignore[arg-type]
        self.staged = staged

    def _access(self, node: E.Access) -> Text:
        staged = self.staged.get(node.array)
        if staged is None:
            return super()._access(node)
        if staged.register:
            return Text(staged.name)
        out = None
        for index, low, size, stride in zip(node.indices, staged.lower, staged.sizes,
                                            staged.strides):
            local = Text(f"{self(index).at(ADD)} - {low}", ADD)
            if stride > 1:  # an exact division: the element is low + stride * j
                local = Text(f"({local.code}) / {stride}", MUL)
            out = local if out is None else Text(f"{out.at(MUL)} * {size} + {local.at(ADD)}", ADD)
        return Text(f"{staged.name}[{out.code}]", PRIMARY)


class PromotionPrinting:
    """The printing half (module doc); mixed into codegen/cuda.py's CudaPrinter, whose
    ``emit``, ``_expr``, ``arrays`` and ``program`` it uses."""

    promotions: Promotions
    staged: dict[str, Staged]
    promoted_marks: int

    def _promotion_mark(self, name: str, inner: isl.AstNode) -> c.Generable:
        placed = self.promotions.take(name, inner)
        if placed is None:
            return self.emit(inner)
        k = self.promoted_marks
        self.promoted_marks += 1
        if placed.plan.kind == PR.MARK_SHARED:
            return self._shared_tiles(placed, inner, k)
        return self._registers(placed, inner, k)

    def _with_staged(self, staged: dict[str, Staged], inner: isl.AstNode) -> c.Generable:
        before = self.staged
        self.staged = {**before, **staged}
        try:
            return self.emit(inner)
        finally:
            self.staged = before

    def _shared_tiles(self, placed: Placed, inner: isl.AstNode, k: int) -> c.Generable:
        prefix = f"polycomp_shared{k}"
        tid, threads = f"{prefix}_tid", f"{prefix}_threads"
        lines: list[c.Generable] = [
            c.Line(f"long {tid} = (long)threadIdx.x + (long)blockDim.x * ((long)threadIdx.y"
                   f" + (long)blockDim.y * (long)threadIdx.z);"),
            c.Line(f"long {threads} = (long)blockDim.x * (long)blockDim.y * "
                   f"(long)blockDim.z;")]
        copies: list[c.Generable] = []
        staged = {}
        for j, box in enumerate(placed.plan.boxes):
            buffer = f"{prefix}_{j}"
            lows = [f"{buffer}_lo{d}" for d in range(len(box.sizes))]
            counts = [f"{buffer}_n{d}" for d in range(len(box.sizes))]
            total = box.elements
            ctype = CTYPES[self.program.array(box.array).dtype]
            lines.append(c.Line(f"__shared__ {ctype} {buffer}[{total}];"))
            for name, expr in zip(lows, placed.lower[j]):
                lines.append(c.Line(f"long {name} = {self._expr(expr).code};"))
            for name, expr, stride in zip(counts, placed.extent[j], box.strides):
                span = self._expr(expr)  # highest - lowest + 1
                count = span.code if stride == 1 else f"({span.at(ADD)} - 1) / {stride} + 1"
                lines.append(c.Line(f"long {name} = {count};"))
            copies.append(self._copy_in(box, buffer, lows, counts, tid, threads,
                                        self._expr(placed.guard[j]).code))
            staged[box.array] = Staged(buffer, tuple(lows), box.sizes, box.strides)
        body = self._with_staged(staged, inner)
        sync = c.Line("__syncthreads();")
        return c.Block(lines + copies + [sync, body, sync])

    def _copy_in(self, box: PR.Box, buffer: str, lows: list[str], counts: list[str],
                 tid: str, threads: str, guard: str) -> c.Generable:
        """All the block's threads copy the box: element t of the buffer is thread
        t mod threads's; index d of element t is t's d-th digit in the box's sizes."""
        t = f"{buffer}_t"
        body: list[c.Generable] = [c.Line(f"long {buffer}_rest = {t};")]
        index = [f"{buffer}_i{d}" for d in range(len(box.sizes))]
        for d in reversed(range(len(box.sizes))):
            size = box.sizes[d]
            if d:
                body.append(c.Line(f"long {index[d]} = {buffer}_rest % {size};"))
                body.append(c.Line(f"{buffer}_rest /= {size};"))
            else:
                body.append(c.Line(f"long {index[d]} = {buffer}_rest;"))
        inside = " && ".join(f"{i} < {n}" for i, n in zip(index, counts))
        name, extents = self.arrays[box.array]
        at = [f"{low} + {i}" if s == 1 else f"{low} + {s} * {i}"
              for low, i, s in zip(lows, index, box.strides)]
        element = at[0]
        for position, extent in zip(at[1:], extents):
            element = f"({element}) * {extent.at(MUL)} + {position}"
        body.append(c.If(inside, c.Statement(f"{buffer}[{t}] = {name}[{element}]")))
        loop = c.For(f"long {t} = {tid}", f"{t} < {box.elements}", f"{t} += {threads}",
                     c.Block(body))
        return loop if guard == "1" else c.If(guard, loop)

    def _registers(self, placed: Placed, inner: isl.AstNode, k: int) -> c.Generable:
        lines: list[c.Generable] = []
        stores: list[c.Generable] = []
        staged = {}
        for j, box in enumerate(placed.plan.boxes):
            local = f"polycomp_private{k}_{j}"
            ctype = CTYPES[self.program.array(box.array).dtype]
            name, extents = self.arrays[box.array]
            lows = [self._expr(e) for e in placed.lower[j]]
            element = lows[0].code
            for low, extent in zip(lows[1:], extents):
                element = f"({element}) * {extent.at(MUL)} + {low.at(ADD)}"
            guard = self._expr(placed.guard[j]).code
            if box.reads and guard == "1":
                lines.append(c.Line(f"{ctype} {local} = {name}[{element}];"))
            else:
                lines.append(c.Line(f"{ctype} {local} = 0;"))
                if box.reads:
                    lines.append(c.If(guard, c.Statement(f"{local} = {name}[{element}]")))
            if box.writes:
                store = c.Statement(f"{name}[{element}] = {local}")
                stores.append(store if guard == "1" else c.If(guard, store))
            staged[box.array] = Staged(local)
        body = self._with_staged(staged, inner)
        return c.Block(lines + [body] + stores)
