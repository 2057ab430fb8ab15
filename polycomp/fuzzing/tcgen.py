"""Random Tensor Comprehensions defs and their oracle: an interpreter written beside them.

Place in the pipeline: none; it writes *input* for ``polycomp.compile`` and computes the
expected outputs itself. A generated def has int32 inputs over sizes ``N``/``M``, one to
four statements (``=``, ``+=!``, ``max=!``, ``min=!``, and ``+=``/``max=`` into a tensor
written before), declared outputs and inferred temporaries, reduction indices with
triangular ranges (``where k in 0:i+1``), reversed and halved subscripts
(``A(N - 1 - i)``, ``A(i / 2)``), integer ``/`` and ``%`` by constants, ``min``/``max``,
``?:`` on comparisons.

Every index gets an explicit ``where`` range, so the interpreter never has to repeat
TC's range inference; the first statement into a tensor covers its whole shape, so no
element is left unwritten. ``interpret`` evaluates every statement instance in order on
Python integers with C's ``/`` and ``%``; an intermediate value outside int32 would be
undefined behaviour in the generated C, and such a case is discarded (``Undefined``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .draw import Draw

INT32 = (-2 ** 31, 2 ** 31 - 1)
IDENTITY = {"+": 0, "max": INT32[0], "min": INT32[1]}


class Undefined(Exception):
    """The program overflows int32 on these inputs: C would be undefined."""


@dataclass
class Tensor:
    name: str
    dims: tuple[str, ...]  # size names
    role: str  # "input", "output" or "temp"


@dataclass
class Stmt:
    target: str
    lhs: list[str]
    op: str  # "=", "+=!", "max=!", "min=!", "+=", "max=", "min="
    expr: tuple
    ranges: dict  # index -> ("size", S) or ("tri", other index)
    order: list[str] = field(default_factory=list)  # all indices, lhs first


@dataclass
class TcCase:
    source: str
    name: str
    tensors: dict  # name -> Tensor
    inputs: list[str]
    outputs: list[str]
    stmts: list[Stmt]
    sizes: dict


# ----------------------------------------------------------------------------- generation


class _Gen:
    def __init__(self, draw: Draw, sizes: list[str]):
        self.d = draw
        self.sizes = sizes
        self.tensors: dict[str, Tensor] = {}
        self.written: list[str] = []

    def sub(self, size: str, scope: dict[str, str]) -> tuple:
        fits = [v for v, s in scope.items() if s == size]
        if not fits or self.d.chance(0.05):
            return ("zero",)
        v = self.d.choice(fits)
        kind = self.d.choice(["var", "var", "var", "rev", "half"])
        return (kind, v, size)

    def access(self, scope: dict[str, str], avoid: str, must: str | None = None) -> tuple:
        pool = [t for t in self.tensors.values()
                if (t.role == "input" or t.name in self.written) and t.name != avoid
                and (must is None or scope[must] in t.dims)]
        t = self.d.choice(pool)
        subs = [self.sub(s, scope) for s in t.dims]
        if must is not None and not any(len(x) > 1 and x[1] == must for x in subs):
            k = t.dims.index(scope[must])
            subs[k] = ("var", must, scope[must])
        return ("acc", t.name, subs)

    def leaf(self, scope, avoid: str) -> tuple:
        roll = self.d.integer(0, 9)
        if roll < 6:
            return self.access(scope, avoid)
        if roll < 8 and scope:
            return ("idx", self.d.choice(list(scope)))
        if roll == 8:
            return ("scalar", "s")
        return ("lit", self.d.integer(0, 9))

    def expr(self, scope, avoid: str, depth: int) -> tuple:
        if depth <= 0 or self.d.chance(0.3):
            return self.leaf(scope, avoid)
        kind = self.d.choice(["bin", "bin", "bin", "div", "sel", "call", "neg"])
        a = self.expr(scope, avoid, depth - 1)
        if kind == "div":
            return ("bin", self.d.choice(["/", "%"]), a, ("lit", self.d.integer(2, 5)))
        if kind == "neg":
            return ("neg", a)
        b = self.expr(scope, avoid, depth - 1)
        if kind == "sel":
            cond = ("cmp", self.d.choice(["<", "<=", "==", "!=", ">"]), a, b)
            return ("sel", cond, b, self.expr(scope, avoid, depth - 1))
        if kind == "call":
            return ("call", self.d.choice(["min", "max"]), a, b)
        op = self.d.choice(["+", "-", "*"])
        if op == "*" and (_has_mul(a) or _has_mul(b)):
            op = "+"
        return ("bin", op, a, b)

    def stmt(self, index: int) -> Stmt:
        fresh = not self.written or self.d.chance(0.6)
        if fresh:
            name = f"T{index}" if self.d.chance(0.3) else f"O{index}"
            dims = tuple(self.d.choice(self.sizes) for _ in range(self.d.integer(0, 2)))
            self.tensors[name] = Tensor(name, dims, "temp" if name[0] == "T" else "output")
            op = self.d.choice(["=", "=", "+=!", "max=!", "min=!"])
        else:
            name = self.d.choice(self.written)
            op = self.d.choice(["=", "+=", "max=", "min=", "+=!"])
        t = self.tensors[name]
        lhs = ["ijk"[n] for n in range(len(t.dims))]
        scope = dict(zip(lhs, t.dims))
        ranges = {v: ("size", s) for v, s in scope.items()}
        if not fresh and len(lhs) == 2 and t.dims[0] == t.dims[1] and self.d.chance(0.4):
            ranges["j"] = ("tri", "i")  # a triangle of a tensor written whole before
        reductions = []
        if op != "=":
            for r in ["r", "q"][:self.d.integer(1 if op.endswith("!") else 0, 2)]:
                size = self.d.choice(self.sizes)
                same = [v for v in lhs if scope[v] == size]
                ranges[r] = ("tri", self.d.choice(same)) if same and self.d.chance(0.3) \
                    else ("size", size)
                scope[r] = size
                reductions.append(r)
        # reading the target: only its own element, and only once it is whole
        avoid = name if op != "=" else ""
        parts = [self.access(scope, avoid, must=r) for r in reductions]
        value = self.expr(scope, avoid, 3)
        for p in parts:
            value = ("bin", "+", p, value)
        if _has_mul(value):  # keeps every value small: overflow would be undefined
            value = ("bin", "%", value, ("lit", self.d.choice([7, 97, 1009])))
        value = _no_self_reads(value, name, lhs)
        if name not in self.written:
            self.written.append(name)
        return Stmt(name, lhs, op, value, ranges, lhs + reductions)


def _has_mul(e: tuple) -> bool:
    return (e[0] == "bin" and e[1] == "*") or any(isinstance(x, tuple) and _has_mul(x)
                                                  for x in e[1:])


def _no_self_reads(e: tuple, name: str, lhs: list[str]) -> tuple:
    """A read of the statement's own target becomes a read of exactly its element."""
    if e[0] == "acc" and e[1] == name:
        return ("acc", name, [("var", v, None) for v in lhs])
    return tuple(_no_self_reads(x, name, lhs) if isinstance(x, tuple) else
                 [_no_self_reads(y, name, lhs) for y in x] if isinstance(x, list) and e[0] != "acc"
                 else x for x in e)


# ----------------------------------------------------------------------------- rendering


def render_expr(e: tuple) -> str:
    kind = e[0]
    if kind == "lit":
        return str(e[1])
    if kind in ("idx", "scalar"):
        return e[1]
    if kind == "acc":
        return f"{e[1]}({', '.join(_render_sub(s) for s in e[2])})"
    if kind == "neg":
        return f"(-{render_expr(e[1])})"
    if kind in ("bin", "cmp"):
        return f"({render_expr(e[2])} {e[1]} {render_expr(e[3])})"
    if kind == "sel":
        return f"({render_expr(e[1])} ? {render_expr(e[2])} : {render_expr(e[3])})"
    return f"{e[1]}({render_expr(e[2])}, {render_expr(e[3])})"


def _render_sub(s: tuple) -> str:
    if s[0] == "zero":
        return "0"
    if s[0] == "rev":
        return f"{s[2]} - 1 - {s[1]}"
    if s[0] == "half":
        return f"{s[1]} / 2"
    return s[1]


def _render_range(r: tuple) -> str:
    return f"0:{r[1]}" if r[0] == "size" else f"0:{r[1]}+1"


def generate(draw: Draw, name: str = "fz") -> TcCase:
    sizes = draw.choice([["N"], ["N", "M"], ["N", "M"]])
    gen = _Gen(draw, sizes)
    for s in sizes:
        gen.tensors[f"X{s}"] = Tensor(f"X{s}", (s,), "input")
    if draw.chance(0.7):
        gen.tensors["A"] = Tensor("A", (sizes[0], draw.choice(sizes)), "input")
    stmts = [gen.stmt(n) for n in range(draw.integer(1, 4))]
    if not any(t.role == "output" for t in gen.tensors.values()):
        t = stmts[-1].target
        gen.tensors[t].role = "output"
    values = {s: draw.choice([3, 2, 4, 1]) for s in sizes}
    return render(name, gen.tensors, stmts, values)


def render(name: str, tensors: dict, stmts: list[Stmt], sizes: dict) -> TcCase:
    """The def's text and call data for these statements (also used by the minimiser)."""
    inputs = [t for t in tensors.values() if t.role == "input"]
    outputs = [t for t in tensors.values() if t.role == "output"]
    uses_s = any("('scalar', 's')" in repr(s.expr) for s in stmts)
    params = [f"int32({', '.join(t.dims)}) {t.name}" for t in inputs] + \
        (["int32 s"] if uses_s else [])
    outs = [f"int32({', '.join(t.dims)}) {t.name}" for t in outputs]
    lines = []
    for s in stmts:
        left = f"{s.target}({', '.join(s.lhs)})" if s.lhs else s.target
        where = ", ".join(f"{v} in {_render_range(s.ranges[v])}" for v in s.order)
        lines.append(f"  {left} {s.op} {render_expr(s.expr)}"
                     + (f" where {where}" if where else ""))
    source = (f"def {name}({', '.join(params)}) -> ({', '.join(outs)}) {{\n" + "\n".join(lines)
              + "\n}\n")
    return TcCase(source, name, tensors, [t.name for t in inputs] + (["s"] if uses_s else []),
                  [t.name for t in outputs], stmts, sizes)


# ----------------------------------------------------------------------------- the oracle


def make_inputs(case: TcCase, seed: int) -> list[tuple[str, object]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[str, object]] = []
    for name in case.inputs:
        if name == "s":
            out.append((name, int(rng.integers(-3, 6))))
        else:
            shape = tuple(case.sizes[d] for d in case.tensors[name].dims)
            out.append((name, rng.integers(-20, 21, size=shape).astype(np.int32)))
    return out


def _check(v: int) -> int:
    if not INT32[0] <= v <= INT32[1]:
        raise Undefined(v)
    return v


def _cdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _eval(e: tuple, env: dict, store: dict) -> int | bool:
    kind = e[0]
    if kind == "lit":
        return e[1]
    if kind == "idx":
        return env[e[1]]
    if kind == "scalar":
        return store["s"]
    if kind == "acc":
        idx = tuple(_sub_value(s, env, store) for s in e[2])
        return int(store[e[1]][idx])
    if kind == "neg":
        return _check(-_eval(e[1], env, store))
    if kind == "sel":
        return _eval(e[2], env, store) if _eval(e[1], env, store) else _eval(e[3], env, store)
    a, b = _eval(e[2], env, store), _eval(e[3], env, store)
    if kind == "cmp":
        return {"<": a < b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b}[e[1]]
    if kind == "call":
        return min(a, b) if e[1] == "min" else max(a, b)
    if e[1] == "/":
        return _cdiv(a, b)
    if e[1] == "%":
        return a - b * _cdiv(a, b)
    return _check(a + b if e[1] == "+" else a - b if e[1] == "-" else a * b)


def _sub_value(s: tuple, env: dict, store: dict) -> int:
    if s[0] == "zero":
        return 0
    if s[0] == "rev":
        return store["sizes"][s[2]] - 1 - env[s[1]]
    if s[0] == "half":
        return env[s[1]] // 2
    return env[s[1]]


def _points(stmt: Stmt, sizes: dict):
    """Every instance's index values, in lexicographic order of ``stmt.order``."""
    def rec(k: int, env: dict):
        if k == len(stmt.order):
            yield dict(env)
            return
        v = stmt.order[k]
        kind, arg = stmt.ranges[v]
        hi = sizes[arg] if kind == "size" else env[arg] + 1
        for x in range(hi):
            env[v] = x
            yield from rec(k + 1, env)
        env.pop(v, None)
    yield from rec(0, {})


def interpret(case: TcCase, inputs: list[tuple[str, object]]) -> dict[str, np.ndarray]:
    """The outputs the def must return, statement by statement, instance by instance."""
    store: dict = {"sizes": case.sizes}
    store.update({n: (v.astype(np.int64) if isinstance(v, np.ndarray) else v) for n, v in inputs})
    for t in case.tensors.values():
        if t.role != "input" and t.name not in store:
            store[t.name] = np.zeros(tuple(case.sizes[d] for d in t.dims), dtype=np.int64)
    for s in case.stmts:
        target = store[s.target]
        red = s.op.rstrip("!").rstrip("=")
        if s.op.endswith("!"):
            for env in _points(Stmt(s.target, s.lhs, "=", (), {v: s.ranges[v] for v in s.lhs},
                                    s.lhs), case.sizes):
                target[tuple(env[v] for v in s.lhs)] = IDENTITY[red]
        for env in _points(s, case.sizes):
            at = tuple(env[v] for v in s.lhs)
            value = _eval(s.expr, env, store)
            if red == "+":
                value = _check(int(target[at]) + value)
            elif red in ("max", "min"):
                value = max(int(target[at]), value) if red == "max" else min(int(target[at]), value)
            target[at] = _check(int(value))
    return {n: store[n].astype(np.int32) for n in case.outputs}


__all__ = ["TcCase", "generate", "interpret", "make_inputs", "render", "Undefined"]
