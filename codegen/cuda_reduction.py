"""Printing scheduler/gpu_reduction.py's ``reduce:`` marks in CUDA: per-thread partial
results and a block reduction in shared memory.

Place in the pipeline: inside codegen/cuda.py's generator; ``ReductionPrinting`` is
mixed into CudaPrinter (as cuda_promotion.PromotionPrinting is). At a ``reduce:S1``
mark, which gpu_mapping put right above a kernel's one thread loop (the reduction loop,
strided over threadIdx.x), it prints:

    {
      float polycomp_part0 = -0.0f;               one per target: the identity of +
      for (long c1 = (long)threadIdx.x; ...)      the thread loop: S1 updates the
        polycomp_part0 += A[...];                 partial, every other statement (an
                                                  initialisation) its memory as usual
      __shared__ float polycomp_reduce0_0[B];     B: the block's most threads along x
      polycomp_reduce0_0[tid] = polycomp_part0;
      __syncthreads();
      for (long w = (the power of two >= blockDim.x) / 2; w > 0; w >>= 1) {
        if (tid < w && tid + w < blockDim.x)  buf[tid] = buf[tid] (op) buf[tid + w];
        __syncthreads();
      }
      if (tid == 0) s[c0] = s[c0] (op) polycomp_reduce0_0[0];
    }

The tree halves the live prefix of the buffer at each step (the elements at w and above
fold onto those below; with w at least half the live count, nothing is lost), so any
block size works, 1 and odd ones included. Every ``__syncthreads()`` is outside the
thread loop, under the block loops only (gpu_mapping put the mark there): every thread
of a block reaches each one equally often. Thread 0 reads the result after the last
barrier and nobody else writes buffer element 0, so the next iteration of the block
loops needs no further barrier. The combine ``s = s (op) total`` keeps the element's
value before the reduction: an initialisation in the kernel (written before the first
barrier by the thread that owns its iteration) or the value from an earlier kernel.

Identities: -0.0 for floating + (x + -0.0 is x for every x, -0.0 included), 0 for
integer +, 1 for *, -INFINITY / +INFINITY or the type's limits for max / min (the same
helpers as the sequential code, codegen/cexpr.py). Floating-point sums then differ from
the sequential order's by rounding; integer results are the same bits.

The target's text, taken from the reduction statement as printed inside the region,
must not name a loop inside it (gpu_reduction checked that the element is a function of
the block loops; a text that says otherwise is an InternalError, not wrong code).
"""

from __future__ import annotations

import re

import cgen as c
import islpy as isl

from polycomp.errors import InternalError
from polycomp.ir import Program, Statement
from polycomp.options import Options
from polycomp.scheduler import gpu_mapping as G
from polycomp.scheduler import gpu_reduction as R

from .cexpr import CTYPES, Helpers

IDENTITY_MAX = {"int8": "INT8_MIN", "int16": "INT16_MIN", "int32": "INT32_MIN",
                "int64": "INT64_MIN", "uint8": "0", "uint16": "0", "uint32": "0",
                "uint64": "0"}
IDENTITY_MIN = {"int8": "INT8_MAX", "int16": "INT16_MAX", "int32": "INT32_MAX",
                "int64": "INT64_MAX", "uint8": "UINT8_MAX", "uint16": "UINT16_MAX",
                "uint32": "UINT32_MAX", "uint64": "UINT64_MAX"}


def identity(op: str, dtype: str) -> str:
    """The C text of ``op``'s identity in ``dtype`` (module doc)."""
    ctype = CTYPES[dtype]
    floating = dtype.startswith("float")
    if op == "+":
        text = "-0.0" if floating else "0"
    elif op == "*":
        text = "1"
    elif op == "max":
        text = "-INFINITY" if floating else IDENTITY_MAX[dtype]
    elif op == "min":
        text = "INFINITY" if floating else IDENTITY_MIN[dtype]
    else:
        raise InternalError(f"codegen: no block reduction for '{op}'")
    return f"({ctype})({text})"


def combine(op: str, dtype: str, a: str, b: str, helpers: Helpers) -> str:
    if op in ("+", "*"):
        return f"{a} {op} {b}"
    return f"{helpers.need(op, dtype)}({a}, {b})"


class ReductionPrinting:
    """The printing half (module doc); mixed into codegen/cuda.py's CudaPrinter, whose
    ``emit``, ``scope``, ``helpers``, ``options`` and ``program`` it uses."""

    program: Program
    options: Options
    helpers: Helpers
    scope: list[str]
    # in a reduce region: its statements, where its loops start in ``scope``, and
    # target text -> (partial's name, statement)
    reducing: frozenset[str] | None = None
    reduce_scope: int = 0
    partials: dict[str, tuple[str, Statement]]
    reductions: int = 0  # regions printed (names)
    reduce_threaded: bool = False  # inside a mapped thread loop
    rows: bool = False  # inside a rows region (codegen/cuda.py), which runs them alike

    def _reduced_user(self, printed: c.Generable) -> c.Generable:
        """A statement of a reduce region that isl printed outside its thread loop (an
        initialisation at j = 0, peeled) runs in thread 0 only (gpu_reduction checked
        that it may run in any thread, before the block's first barrier); so does a
        statement of a rows region outside its thread loops (scheduler/gpu_rows.py)."""
        if (self.reducing is None and not self.rows) or self.reduce_threaded:
            return printed
        return c.If("threadIdx.x == 0", printed)

    def _reduce_mark(self, name: str, inner: isl.AstNode) -> c.Generable:
        names = R.parse_mark(name)
        saved = (self.reducing, self.reduce_scope, getattr(self, "partials", {}),
                 self.reduce_threaded)
        self.reducing, self.reduce_scope, self.partials = names, len(self.scope), {}
        self.reduce_threaded = False
        try:
            body = self.emit(inner)  # type: ignore[attr-defined]
            partials = self.partials
        finally:
            (self.reducing, self.reduce_scope, self.partials,
             self.reduce_threaded) = saved
        if not partials:
            return body
        k = self.reductions
        self.reductions += 1
        # the block's most threads along x (codegen/cuda.py's launch: one thread axis,
        # shrunk to the loop's extent; 1 when the loop could not be mapped)
        size = G.block_shape(self.options, 1)[0]
        tid, count, half = f"polycomp_reduce{k}_tid", f"polycomp_reduce{k}_n", \
            f"polycomp_reduce{k}_w"
        lines: list[c.Generable] = [
            c.Line(f"{CTYPES[stmt.target.dtype]} {part} = "
                   f"{identity(stmt.reduction, stmt.target.dtype)};")
            for part, stmt in partials.values()]
        lines.append(body)
        lines += [c.Line(f"long {tid} = (long)threadIdx.x;"),
                  c.Line(f"long {count} = (long)blockDim.x;"),
                  c.Line(f"long {half} = 1;"),
                  c.Line(f"while ({half} < {count}) {half} <<= 1;")]
        sync = c.Line("__syncthreads();")
        for j, (target, (part, stmt)) in enumerate(partials.items()):
            buffer = f"polycomp_reduce{k}_{j}"
            op, dtype = stmt.reduction, stmt.target.dtype
            step = f"{buffer}_w"
            fold = c.If(f"{tid} < {step} && {tid} + {step} < {count}",
                        c.Statement(f"{buffer}[{tid}] = "
                                    + combine(op, dtype, f"{buffer}[{tid}]",
                                              f"{buffer}[{tid} + {step}]", self.helpers)))
            lines += [c.Line(f"__shared__ {CTYPES[dtype]} {buffer}[{size}];"),
                      c.Statement(f"{buffer}[{tid}] = {part}"), sync,
                      c.For(f"long {step} = {half} / 2", f"{step} > 0", f"{step} >>= 1",
                            c.Block([fold, sync])),
                      c.If(f"{tid} == 0",
                           c.Statement(f"{target} = "
                                       + combine(op, dtype, target, f"{buffer}[0]",
                                                 self.helpers)))]
        return c.Block(lines)

    def accumulator(self, stmt: Statement, target: str) -> str:
        if self.reducing is None or stmt.name not in self.reducing:
            return super().accumulator(stmt, target)  # type: ignore[misc]
        for it in self.scope[self.reduce_scope:]:
            if re.search(rf"\b{re.escape(it)}\b", target):
                raise InternalError(f"codegen: the target {target} of {stmt.name} changes "
                                    f"along the loop {it} of its block reduction")
        known = self.partials.get(target)
        if known is not None and known[1].reduction != stmt.reduction:
            raise InternalError(f"codegen: {known[1].name} and {stmt.name} reduce into "
                                f"{target} with different operators")
        if target not in self.partials:
            self.partials[target] = (f"polycomp_part{self.reductions}_{len(self.partials)}",
                                     stmt)
        return self.partials[target][0]
