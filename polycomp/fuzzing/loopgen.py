"""Random affine C loop nests that polycomp must accept, and their call arguments.

Place in the pipeline: none; this module writes *input* for ``polycomp.compile_loops``
and for the gcc oracle (``fuzzing.oracle``). A generated nest has

* strided, decreasing and triangular loops (bounds ``max(0, i - 2)``, ``min(N, i + 3)``,
  ``N - i``, ``i + 1``), ``if``/``else`` on affine conditions (``%``, ``/``, ``&&``,
  ``||``, ``!``), imperfect nesting, local scalars (declared at the top or inside a loop
  body), scalar parameters and size parameters ``N``/``M`` (or none: constant bounds);
* integer arrays (``int unsigned long short signed char unsigned char``) of rank 1 to 3
  and, more rarely, integer-valued ``double``/``float`` arrays.

Validity is by construction, so that every difference from gcc is polycomp's:

* every subscript stays in its array: the generator bounds each iterator by an interval
  whose ends are affine in the sizes, shifts every dimension of an array by one constant
  (so ``A[i - 1]`` and ``A[i]`` keep their distance) and sizes the array from the largest
  subscript over the corners of the size box ``[0, PARAM_MAX]``, with extents like
  ``N + 2`` that hold for every size;
* no division by zero (only by constants 2..7) and no division of a possibly negative
  value in an affine position (the frontend requires that);
* signed overflow is avoided where it is easy (a signed value with a product is reduced
  ``% M``); the oracle is compiled with ``-fsanitize=undefined`` in trap mode and a case
  whose oracle traps is discarded, so a rare overflow is never reported;
* float targets read only ``+ - *`` of small integers (exact in double), integer
  targets never read floats (a float-to-int conversion out of range is undefined).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .draw import Draw

PARAM_MAX = 5  # sizes are drawn from [0, PARAM_MAX]; array extents hold for all sizes

CTYPES = {"int": "int32", "unsigned": "uint32", "long": "int64", "unsigned long": "uint64",
          "short": "int16", "signed char": "int8", "unsigned char": "uint8",
          "double": "float64", "float": "float32"}
INT_TYPES = ["int", "unsigned", "long", "short", "unsigned char", "signed char",
             "unsigned long"]
FLOAT_TYPES = ["double", "float"]
LOCAL_TYPES = ["int", "long", "unsigned", "double"]

Lin = dict  # affine in the sizes: {size name: coefficient, "": constant}


def lin(const: int = 0, **coeffs: int) -> Lin:
    return {"": const, **coeffs}


def add(a: Lin, b: Lin, scale: int = 1) -> Lin:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + scale * v
    return out


def at(a: Lin, values: dict[str, int]) -> int:
    return sum(v * (1 if k == "" else values[k]) for k, v in a.items())


@dataclass
class Range:
    """Bounds of an iterator (or of a subscript): lo <= value <= hi, affine in sizes."""
    lo: Lin
    hi: Lin


@dataclass
class Aff:
    """sum of coeff * name + const, over iterators and sizes."""
    terms: dict[str, int]
    const: int = 0

    def render(self, extra: int = 0) -> str:
        parts = []
        for name, c in self.terms.items():
            if c == 0:
                continue
            mag = abs(c)
            term = name if mag == 1 else f"{mag} * {name}"
            parts.append(("- " if c < 0 else "+ ") + term)
        const = self.const + extra
        if const or not parts:
            parts.append(("- " if const < 0 else "+ ") + str(abs(const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def range(self, env: dict[str, Range]) -> Range:
        lo, hi = lin(self.const), lin(self.const)
        for name, c in self.terms.items():
            r = env[name]
            lo = add(lo, r.lo if c > 0 else r.hi, c)
            hi = add(hi, r.hi if c > 0 else r.lo, c)
        return Range(lo, hi)


@dataclass
class Subscript:
    """``aff``, ``(aff) / div`` or ``(aff) % mod``, plus the array dimension's shift."""
    aff: Aff
    div: int = 0
    mod: int = 0
    span: Range | None = None

    def render(self, shift: int) -> str:
        if self.div:
            return f"({self.aff.render()}) / {self.div}" + (f" + {shift}" if shift else "")
        if self.mod:
            return f"({self.aff.render()}) % {self.mod}" + (f" + {shift}" if shift else "")
        return self.aff.render(shift)


@dataclass
class Array:
    name: str
    ctype: str
    rank: int
    subscripts: list[list[Subscript]] = field(default_factory=list)  # per access
    shifts: list[int] = field(default_factory=list)
    extents: list[Lin] = field(default_factory=list)

    @property
    def is_float(self) -> bool:
        return self.ctype in FLOAT_TYPES


@dataclass
class Access:
    array: Array
    subs: list[Subscript]

    def render(self) -> str:
        return self.array.name + "".join(f"[{s.render(sh)}]"
                                         for s, sh in zip(self.subs, self.array.shifts))


@dataclass
class ArgSpec:
    """One argument of the generated function, in C order."""
    name: str
    kind: str  # "size", "scalar" or "array"
    dtype: str
    value: int | float = 0  # sizes and scalars
    shape: tuple[int, ...] = ()  # arrays, at the sizes in ``value`` of the size args


@dataclass
class LoopCase:
    """A generated program: its C text and how to call it."""
    source: str
    function: str
    args: list[ArgSpec]
    sizes: dict[str, int]
    rebuild: object = None  # (seed data) for the minimiser; not used by the runners


class _Gen:
    def __init__(self, draw: Draw, params: list[str], budget: int):
        self.d = draw
        self.params = params
        self.budget = budget  # statements left
        self.arrays: list[Array] = []
        self.locals: dict[str, str] = {}  # name -> ctype, declared at the top
        self.scalars: dict[str, str] = {}  # scalar parameters used in values
        self.names = itertools.count()
        self.iters = ["i", "j", "k", "l", "p", "q"]

    # ------------------------------------------------------------------ helpers

    def env(self, loops: list[tuple[str, Range]]) -> dict[str, Range]:
        env = {p: Range(lin(0, **{p: 1}), lin(0, **{p: 1})) for p in self.params}
        env.update(dict(loops))
        return env

    def size_text(self) -> tuple[str, Lin]:
        if self.params and self.d.chance(0.8):
            p = self.d.choice(self.params)
            return p, lin(0, **{p: 1})
        c = self.d.integer(1, 5)
        return str(c), lin(c)

    # ------------------------------------------------------------------ loops

    def loop(self, loops: list[tuple[str, Range]], indent: str, depth: int,
             scope: dict[str, str]) -> list[str]:
        var = self.iters[len(loops)]
        outer = self.d.choice(loops)[0] if loops and self.d.chance(0.45) else None
        o = dict(loops)[outer] if outer else None
        # lower bound: text and its smallest value
        if outer and self.d.chance(0.6):
            lo_text, lo_min = self.d.choice([(outer, o.lo), (f"{outer} + 1", add(o.lo, lin(1))),
                                             (f"max(0, {outer} - 2)", lin(0))])
        else:
            c = self.d.choice([0, 0, 0, 1, 2])
            lo_text, lo_min = str(c), lin(c)
        # upper bound (exclusive): text and its largest value
        size, size_lin = self.size_text()
        choices = [(size, size_lin), (size, size_lin), (f"{size} - 1", add(size_lin, lin(-1))),
                   (f"{size} + 1", add(size_lin, lin(1))), (f"{size} + 2", add(size_lin, lin(2)))]
        if outer:
            choices += [(f"{outer} + 1", add(o.hi, lin(1))),
                        (f"min({size}, {outer} + 3)", size_lin),
                        (f"{size} - {outer}", add(size_lin, o.lo, -1))]
        hi_text, hi_max = self.d.choice(choices)
        step = self.d.choice([1, 1, 1, 1, 2, 3])
        down = self.d.chance(0.25)
        span = Range(lo_min, add(hi_max, lin(-1)))
        if down:
            # same iterates set shape (from the top), C order reversed
            dec = "--" if step == 1 else f" -= {step}"
            head = f"for (int {var} = {hi_text} - 1; {var} >= {lo_text}; {var}{dec})"
        else:
            inc = "++" if step == 1 else f" += {step}"
            cond = (f"{var} <= {hi_text} - 1" if self.d.chance(0.2) else f"{var} < {hi_text}")
            head = f"for (int {var} = {lo_text}; {cond}; {var}{inc})"
        inner = loops + [(var, span)]
        body = self.block(inner, indent + "  ", depth + 1, dict(scope))
        if not body:
            body = self.assign(inner, indent + "  ", scope)
        return [indent + head + " {", *body, indent + "}"]

    def block(self, loops, indent: str, depth: int, scope: dict[str, str]) -> list[str]:
        lines: list[str] = []
        for _ in range(self.d.integer(1, 3)):
            if self.budget <= 0:
                break
            kinds = (["assign", "loop", "assign", "if", "loop", "decl"] if depth < 3 else
                     ["assign", "if", "assign", "loop"] if depth < 4 else ["assign"])
            kind = self.d.choice(kinds)
            if kind == "loop":
                lines += self.loop(loops, indent, depth, scope)
            elif kind == "if" and loops:
                lines += self.if_(loops, indent, depth, scope)
            elif kind == "decl" and loops:
                name, ctype = f"t{next(self.names)}", self.d.choice(LOCAL_TYPES)
                self.budget -= 1
                lines.append(f"{indent}{ctype} {name} = {self.value(ctype, loops, scope, 2)};")
                scope[name] = ctype
            else:
                lines += self.assign(loops, indent, scope)
        return lines

    def if_(self, loops, indent: str, depth: int, scope: dict[str, str]) -> list[str]:
        cond = self.condition(loops)
        then = self.block(loops, indent + "  ", depth, dict(scope)) or \
            self.assign(loops, indent + "  ", scope)
        lines = [f"{indent}if ({cond}) {{", *then, indent + "}"]
        if self.d.chance(0.4):
            other = self.block(loops, indent + "  ", depth, dict(scope)) or \
                self.assign(loops, indent + "  ", scope)
            lines[-1] += " else {"
            lines += [*other, indent + "}"]
        return lines

    # ------------------------------------------------------------------ affine parts

    def aff(self, loops, nonneg: bool = False, with_param: bool = True) -> Aff:
        names = [v for v, _ in loops]
        terms: dict[str, int] = {}
        for v in self.d.choice([names[-1:], names[-2:], names[:1]] if names else [[]]):
            terms[v] = terms.get(v, 0) + (1 if nonneg else self.d.choice([1, 1, 1, -1, 2]))
        if with_param and self.params and self.d.chance(0.2):
            p = self.d.choice(self.params)
            terms[p] = terms.get(p, 0) + 1
        const = self.d.integer(0, 2) if nonneg else self.d.integer(-2, 2)
        return Aff(terms, const)

    def condition(self, loops, depth: int = 0) -> str:
        if depth < 1 and self.d.chance(0.3):
            a, b = self.condition(loops, depth + 1), self.condition(loops, depth + 1)
            op = self.d.choice(["&&", "||"])
            text = f"{a} {op} {b}"
            return f"!({text})" if self.d.chance(0.2) else text
        kind = self.d.choice(["cmp", "cmp", "mod", "div"])
        if kind == "mod":
            return (f"({self.aff(loops, nonneg=True).render()}) % {self.d.integer(2, 3)} "
                    f"{self.d.choice(['==', '!='])} {self.d.integer(0, 1)}")
        left = self.aff(loops, with_param=False)
        if kind == "div":
            left_text = f"({self.aff(loops, nonneg=True).render()}) / {self.d.integer(2, 3)}"
        else:
            left_text = left.render()
        right = self.aff(loops) if self.d.chance(0.5) else Aff({}, self.d.integer(0, 4))
        if self.params and self.d.chance(0.3):
            right = Aff({self.d.choice(self.params): 1}, self.d.integer(-2, 0))
        op = self.d.choice(["<", "<=", ">", ">=", "==", "!="])
        return f"{left_text} {op} {right.render()}"

    def subscript(self, loops) -> Subscript:
        env = self.env(loops)
        roll = self.d.integer(0, 19)
        if roll == 0 and loops:
            aff, m = self.aff(loops, nonneg=True, with_param=False), self.d.integer(2, 3)
            return Subscript(aff, mod=m, span=Range(lin(0), lin(m - 1)))
        if roll == 1 and loops:
            aff = self.aff(loops, nonneg=True, with_param=False)
            r = aff.range(env)
            return Subscript(aff, div=self.d.integer(2, 3), span=Range(lin(0), r.hi))
        if roll == 2 and self.params:  # reversed: N - 1 - i
            aff = Aff({p: 1 for p in self.params[:1]}, -1)
            for v, _ in loops[-1:]:
                aff.terms[v] = -1
            return Subscript(aff, span=aff.range(env))
        aff = self.aff(loops, with_param=self.d.chance(0.3)) if loops else \
            Aff({}, self.d.integer(0, 2))
        return Subscript(aff, span=aff.range(env))

    def access(self, loops, want_float: bool | None, write: bool) -> Access:
        pool = [a for a in self.arrays if want_float is None or a.is_float == want_float]
        if pool and (len(self.arrays) >= 4 or self.d.chance(0.7)):
            arr = self.d.choice(pool)
        else:
            if want_float is None:
                want_float = self.d.chance(0.15)
            ctype = self.d.choice(FLOAT_TYPES if want_float else INT_TYPES)
            arr = Array(f"{'ABCDEFGH'[len(self.arrays)]}", ctype, self.d.choice([1, 2, 2, 3]))
            self.arrays.append(arr)
        subs = [self.subscript(loops) for _ in range(arr.rank)]
        arr.subscripts.append(subs)
        return Access(arr, subs)

    # ------------------------------------------------------------------ values

    def assign(self, loops, indent: str, scope: dict[str, str]) -> list[str]:
        self.budget -= 1
        local_names = list(scope) + list(self.locals)
        if (local_names and self.d.chance(0.3)) or (not loops and self.d.chance(0.5)):
            if local_names and self.d.chance(0.7):
                name = self.d.choice(local_names)
                ctype = scope.get(name) or self.locals[name]
            else:
                name, ctype = f"s{next(self.names)}", self.d.choice(LOCAL_TYPES)
                self.locals[name] = ctype
            target = name
        else:
            acc = self.access(loops, None, write=True)
            target, ctype = acc, acc.array.ctype
        is_float = ctype in FLOAT_TYPES
        unsigned = ctype.startswith("unsigned")
        ops = ["=", "=", "+=", "-="] + (["*="] if is_float or unsigned else [])
        if not is_float and self.d.chance(0.08):
            return [f"{indent}{{}}{self.d.choice(['++', '--'])};".format(_Late(target))]
        op = self.d.choice(ops)
        value = self.value(ctype, loops, scope, 3)
        if op == "*=" and is_float:  # keep float products small: an integer-valued factor
            value = f"({self.value('int', loops, scope, 1)} % 3)"
        return [f"{indent}{{}} {op} {value};".format(_Late(target))]

    def value(self, ctype: str, loops, scope: dict[str, str], depth: int) -> str:
        is_float = ctype in FLOAT_TYPES
        text, has_mul = self.expr(loops, scope, is_float, depth)
        if not is_float and not ctype.startswith("unsigned") and has_mul:
            text = f"({text}) % {self.d.choice([7, 97, 1009])}"
        return text

    def leaf(self, loops, scope: dict[str, str], is_float: bool) -> str:
        roll = self.d.integer(0, 13)
        if roll <= 5 or roll >= 12:
            return _Late(self.access(loops, None if is_float else False, write=False)).fmt()
        names = [n for n, t in {**self.locals, **scope}.items()
                 if is_float or t not in FLOAT_TYPES]
        if roll in (6, 11) and names:
            return self.d.choice(names)
        if roll in (7, 10) and loops:
            return self.d.choice([v for v, _ in loops])
        if roll == 8 and self.params:
            return self.d.choice(self.params)
        if roll == 9:
            name, ctype = self.d.choice([("a0", "int"), ("a1", "long")] +
                                        ([("d0", "double")] if is_float else []))
            self.scalars[name] = ctype
            return name
        return str(self.d.integer(0, 9))

    def expr(self, loops, scope, is_float: bool, depth: int) -> tuple[str, bool]:
        if depth <= 0 or self.d.chance(0.3):
            return self.leaf(loops, scope, is_float), False
        kind = self.d.choice(["bin", "bin", "bin", "div", "select", "neg", "cast"])
        a, ma = self.expr(loops, scope, is_float, depth - 1)
        if kind == "div" and not is_float:
            return f"({a} {self.d.choice(['/', '%'])} {self.d.integer(2, 7)})", ma
        if kind == "neg":
            return f"(-{a})", ma
        if kind == "cast" and not is_float:
            return f"(({self.d.choice(['short', 'unsigned char', 'long', 'int'])}) {a})", ma
        b, mb = self.expr(loops, scope, is_float, depth - 1)
        if kind == "select":
            cond = (self.condition(loops) if loops and self.d.chance(0.5)
                    else f"{a} {self.d.choice(['<', '==', '>='])} {b}")
            c, mc = self.expr(loops, scope, is_float, depth - 1)
            return f"({cond} ? {b} : {c})", ma or mb or mc
        op = self.d.choice(["+", "-", "*"])
        if op == "*" and (ma or mb):  # one product per value keeps overflow rare
            op = "+"
        return f"({a} {op} {b})", ma or mb or op == "*"


class _Late:
    """An access whose text waits for the array's final shifts (known after generation)."""
    pending: list[tuple[str, Access]] = []

    def __init__(self, target):
        self.target = target

    def fmt(self) -> str:
        if isinstance(self.target, str):
            return self.target
        key = f"\x00{len(_Late.pending)}\x00"
        _Late.pending.append((key, self.target))
        return key

    def __format__(self, spec: str) -> str:
        return self.fmt()


def _finish_array(arr: Array, params: list[str]) -> None:
    corners = [dict(zip(params, c)) for c in itertools.product([0, PARAM_MAX], repeat=len(params))]
    arr.shifts, arr.extents = [], []
    for dim in range(arr.rank):
        spans = [subs[dim].span for subs in arr.subscripts]
        shift = max(0, max(-at(s.lo, c) for s in spans for c in corners))
        coeffs = {p: max([0] + [s.hi.get(p, 0) for s in spans]) for p in params}
        const = max(at(s.hi, c) + shift + 1 - sum(coeffs[p] * c[p] for p in params)
                    for s in spans for c in corners)
        arr.shifts.append(shift)
        arr.extents.append({"": max(1, const), **{p: v for p, v in coeffs.items() if v}})


def _render_lin(a: Lin) -> str:
    return Aff({k: v for k, v in a.items() if k}, a.get("", 0)).render()


def generate(draw: Draw, name: str = "kern") -> LoopCase:
    """One random valid loop nest and its arguments (sizes drawn in [0, PARAM_MAX])."""
    params = draw.choice([["N"], ["N", "M"], [], ["N"]])
    gen = _Gen(draw, params, budget=draw.integer(2, 7))
    _Late.pending = []
    body: list[str] = []
    while gen.budget > 0:
        if draw.chance(0.8) or not body:
            body += gen.loop([], "  ", 0, {})
        else:
            body += gen.assign([], "  ", {})
    if not gen.arrays:  # every value went to locals: make the results observable
        out = gen.access([], False, write=True)
        total = " + ".join(n for n, t in gen.locals.items() if t not in FLOAT_TYPES) or "1"
        body.append(f"  {_Late(out).fmt()} = {total};")
    for arr in gen.arrays:
        _finish_array(arr, params)
    text = "\n".join(body)
    for key, acc in _Late.pending:
        text = text.replace(key, acc.render())
    sizes = {p: draw.choice([4, 3, 2, 5, 1, 4, 3, 0]) for p in params}
    args: list[ArgSpec] = [ArgSpec(p, "size", "int32", value=sizes[p]) for p in params]
    for s, ctype in sorted(gen.scalars.items()):
        value = draw.integer(-3, 5) if ctype != "double" else float(draw.integer(-3, 5))
        args.append(ArgSpec(s, "scalar", CTYPES[ctype], value=value))
    decls = [f"int {p}" for p in params] + [f"{t} {s}" for s, t in sorted(gen.scalars.items())]
    for arr in gen.arrays:
        decls.append(f"{arr.ctype} {arr.name}" +
                     "".join(f"[{_render_lin(e)}]" for e in arr.extents))
        args.append(ArgSpec(arr.name, "array", CTYPES[arr.ctype],
                            shape=tuple(at(e, sizes) for e in arr.extents)))
    top = [f"  {t} {s} = {draw.integer(0, 3)};" for s, t in gen.locals.items()]
    source = f"void {name}({', '.join(decls)}) {{\n" + "\n".join(top + [text]) + "\n}\n"
    return LoopCase(source, name, args, sizes)
