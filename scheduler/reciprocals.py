"""Division by a loop-invariant divisor as a multiplication: Program -> Program, before
the dependences (unless ``exact_fp``).

A softmax's ``Y(b, m, n) = e(b, m, n) / s(b, m)`` and a layer norm's ``(x - mean) /
sqrt(var + eps)`` divide every element of a row by one value. A vector division costs
about ten times a multiplication (AVX-512 ``vdivps``: one per 8 to 16 cycles against two
multiplications per cycle), and at BERT's softmax shape (12 x 128 x 128) the divisions
alone were a third of onnxruntime's whole time. Written as

    Y(b, m, n) = e(b, m, n) * (1 / s(b, m))

the reciprocal depends on (b, m) only, and the C compiler computes it once per row,
outside the loop over n (loop-invariant code motion; nothing here decides where). The
results differ from the division's by at most one rounding (the reciprocal's), as with
gcc's ``-freciprocal-math``; ``Options.exact_fp`` keeps the divisions, as it keeps
reductions in their original order.

When it applies: in a program of a tensor language (one that has reduction statements:
TC, ONNX; the affine C frontend writes every update as a plain assignment, and a C
program keeps C's division, as gcc does without -ffast-math), to a floating-point
division whose divisor reads no iterator that the
statement's domain has and the divisor lacks (so that some loop around it leaves it
unchanged), and calls no function with side effects (only arithmetic, accesses, constants
and pure math functions are ever in an expression). The accesses, and their order, are
unchanged: the statement's read maps stay as they are.
"""

from __future__ import annotations

from dataclasses import replace

from polycomp import expr as E
from polycomp.ir import Program, Statement

# floating-point types whose divisions are rewritten (float16's reciprocal would round
# twice as coarsely relative to its precision: left alone)
TYPES = ("float32", "float64")


def hoist_reciprocals(program: Program) -> Program:
    """``program`` with each invariant divisor multiplied by as a reciprocal (module
    doc); the same program when there is none, or when it has no reduction statement."""
    if not any(s.reduction for s in program.statements):
        return program  # C's arithmetic (see the module doc)
    statements = tuple(_rewritten(s) for s in program.statements)
    if all(a is b for a, b in zip(statements, program.statements)):
        return program
    return replace(program, statements=statements)


def _rewritten(s: Statement) -> Statement:
    iterators = set(s.iterators)

    def swap(node: E.Expr) -> E.Expr | None:
        if not (isinstance(node, E.Binary) and node.op == "div" and node.dtype in TYPES
                and node.rhs.dtype == node.dtype):
            return None
        if isinstance(node.lhs, E.Const) and node.lhs.value == 1:
            return None  # a reciprocal already
        used = {n.name for n in E.walk(node.rhs) if isinstance(n, E.Iter)}
        if not iterators - used:
            return None  # the divisor moves with every loop: nothing to keep out
        one = E.Const(1.0, node.dtype)
        return E.Binary("mul", node.lhs, E.Binary("div", one, node.rhs, node.dtype),
                        node.dtype)

    expr = E.transform(s.expr, swap)
    return s if expr == s.expr else replace(s, expr=expr)
