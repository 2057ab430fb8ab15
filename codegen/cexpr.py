"""Expressions to C text: isl AST expressions (loop bounds, statement arguments) and
statement expression trees (polycomp/expr.py), each printed from a table.

Printing is precedence-aware: a sub-expression gets parentheses only where C needs
them, so ``A[(c0 * 512 + c2)]`` reads as ``A[c0 * 512 + c2]``. Helper functions the text
calls (floor division, typed min/max, sigmoid) are collected in a ``Helpers`` set and
emitted once by the target's printer (codegen/openmp.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import islpy as isl

from polycomp import expr as E
from polycomp.ir import constant_value

CTYPES = {
    "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
    "uint64": "uint64_t", "float16": "_Float16", "float32": "float", "float64": "double",
}

# the C type of a scalar passed by value to the entry: as CTYPES, except that a float16
# travels as a float (ctypes has no _Float16, and the ABIs pass the two differently) and
# is narrowed where it is read (ValuePrinter._scalar); the runtime rounds it to float16
ARG_CTYPES = {**CTYPES, "float16": "float"}

# the status local of every generated function (codegen/c.py's entry returns it): 0 done,
# 1 a gather index out of bounds, 2 an integer division fault (polycomp/runtime.py)
STATUS = "polycomp_status"
STATUS_DIVISION = 2

# Precedence levels (higher binds tighter).
PRIMARY, UNARY, MUL, ADD, REL, EQ, LAND, LOR, COND = 16, 14, 13, 12, 10, 9, 5, 4, 3

# expression-tree binary operator -> (C operator, precedence)
BINARY = {
    "add": ("+", ADD), "sub": ("-", ADD), "mul": ("*", MUL), "div": ("/", MUL),
    "mod": ("%", MUL), "lt": ("<", REL), "le": ("<=", REL), "gt": (">", REL), "ge": (">=", REL),
    "eq": ("==", EQ), "ne": ("!=", EQ), "and": ("&&", LAND), "or": ("||", LOR),
}

# isl AST operator -> (C operator, precedence) for the infix ones
AST_BINARY = {
    isl.ast_expr_op_type.add: ("+", ADD), isl.ast_expr_op_type.sub: ("-", ADD),
    isl.ast_expr_op_type.mul: ("*", MUL), isl.ast_expr_op_type.div: ("/", MUL),
    isl.ast_expr_op_type.pdiv_q: ("/", MUL), isl.ast_expr_op_type.pdiv_r: ("%", MUL),
    isl.ast_expr_op_type.zdiv_r: ("%", MUL),
    isl.ast_expr_op_type.and_: ("&&", LAND), isl.ast_expr_op_type.and_then: ("&&", LAND),
    isl.ast_expr_op_type.or_: ("||", LOR), isl.ast_expr_op_type.or_else: ("||", LOR),
    isl.ast_expr_op_type.eq: ("==", EQ), isl.ast_expr_op_type.le: ("<=", REL),
    isl.ast_expr_op_type.lt: ("<", REL), isl.ast_expr_op_type.ge: (">=", REL),
    isl.ast_expr_op_type.gt: (">", REL),
}

# math functions: name -> C function for float32 / float64 (float16 computes in float32)
MATH = {
    "exp": ("expf", "exp"), "log": ("logf", "log"), "sqrt": ("sqrtf", "sqrt"),
    "tanh": ("tanhf", "tanh"), "erf": ("erff", "erf"), "abs": ("fabsf", "fabs"),
    "fmax": ("fmaxf", "fmax"), "fmin": ("fminf", "fmin"), "pow": ("powf", "pow"),
    "fma": ("fmaf", "fma"), "sin": ("sinf", "sin"), "cos": ("cosf", "cos"),
    "floor": ("floorf", "floor"), "ceil": ("ceilf", "ceil"),
}

# <math.h> functions glibc's libmvec has vector forms of (2.22: exp log sin cos pow;
# 2.35: the rest): C name -> number of arguments. codegen/openmp.py declares the ones a kernel
# calls with the simd attribute, each under a POLYCOMP_MVEC_<name> macro that the build
# defines where libmvec has it (polycomp/build.py); gcc then calls e.g. _ZGVdN8v_expf
# in a simd loop instead of expf once per element.
VECTOR_MATH = {f"{name}{suffix}": (2 if name == "pow" else 1)
               for name in ("exp", "log", "sin", "cos", "pow", "tanh", "erf")
               for suffix in ("f", "")}

# helpers emitted on demand: name -> C definition (templated on a type where needed)
HELPER_TEMPLATES = {
    "floord": "static inline long polycomp_floord(long n, long d) "
              "{ return n >= 0 ? n / d : -((-n + d - 1) / d); }",
    "floorm": "static inline long polycomp_floorm(long n, long d) "
              "{ long r = n % d; return r < 0 ? r + d : r; }",
    "imin": "static inline long polycomp_imin(long a, long b) { return a < b ? a : b; }",
    "imax": "static inline long polycomp_imax(long a, long b) { return a > b ? a : b; }",
    "min": "static inline {t} polycomp_min_{d}({t} a, {t} b) {{ return b < a ? b : a; }}",
    "max": "static inline {t} polycomp_max_{d}({t} a, {t} b) {{ return b > a ? b : a; }}",
    "abs": "static inline {t} polycomp_abs_{d}({t} a) {{ return a < 0 ? -a : a; }}",
    # <math.h>'s fmax and fmin as selects: gcc 12 calls fmaxf once per element (no vector
    # form without -ffinite-math-only), which left every conv + ReLU epilogue scalar. Same
    # results: a NaN operand gives the other one, and equal operands give the first (as
    # glibc's and numpy's do for +0 and -0)
    "fmax": "static inline {t} polycomp_fmax_{d}({t} a, {t} b) "
            "{{ return a >= b || b != b ? a : b; }}",
    "fmin": "static inline {t} polycomp_fmin_{d}({t} a, {t} b) "
            "{{ return a <= b || b != b ? a : b; }}",
    "sigmoid": "static inline {t} polycomp_sigmoid_{d}({t} x) "
               "{{ return ({t})1 / (({t})1 + {exp}(-x)); }}",
    # integer / and % with a divisor known only at run time: C leaves d == 0 (and, signed,
    # MIN / -1) undefined and x86 traps (SIGFPE); record the fault, give 0, go on
    "div": "static inline {t} polycomp_div_{d}({t} n, {t} d, int *status) "
           "{{ if (__builtin_expect({bad}, 0)) "
           "{{ __atomic_store_n(status, " + str(STATUS_DIVISION) + ", __ATOMIC_RELAXED); "
           "return 0; }} return n / d; }}",
    "mod": "static inline {t} polycomp_mod_{d}({t} n, {t} d, int *status) "
           "{{ if (__builtin_expect({bad}, 0)) "
           "{{ __atomic_store_n(status, " + str(STATUS_DIVISION) + ", __ATOMIC_RELAXED); "
           "return 0; }} return n % d; }}",
}

# C's integer promotions and usual arithmetic conversions on dtypes: the type in which
# `a / b` is computed (int is 32 bits and long 64 on every target polycomp builds for)
_PROMOTED = {"bool": "int32", "int8": "int32", "int16": "int32", "uint8": "int32",
             "uint16": "int32"}
_RANK = {"int32": 1, "uint32": 1, "int64": 2, "uint64": 2}
_MIN = {"int32": "INT32_MIN", "int64": "INT64_MIN"}


def arithmetic_type(a: str, b: str) -> str:
    """The dtype C computes ``a op b`` in, for integer dtypes a and b."""
    a, b = _PROMOTED.get(a, a), _PROMOTED.get(b, b)
    if a == b:
        return a
    if a.startswith("int") == b.startswith("int"):
        return a if _RANK[a] > _RANK[b] else b
    signed, unsigned = (a, b) if a.startswith("int") else (b, a)
    # an unsigned type of the same or greater rank wins; int64 holds every uint32
    return unsigned if _RANK[unsigned] >= _RANK[signed] else signed


@dataclass
class Helpers:
    """The helper functions a translation unit needs, in first-use order."""

    used: dict[str, str] = field(default_factory=dict)
    guards: int = 0  # checked divisions printed so far (codegen/openmp.py propagates the status)
    math: set[str] = field(default_factory=set)  # <math.h> functions called

    def call(self, name: str) -> str:
        """A <math.h> function's name, recorded (codegen/openmp.py declares vector forms)."""
        self.math.add(name)
        return name

    def need(self, kind: str, dtype: str | None = None) -> str:
        name = f"polycomp_{kind}" if dtype is None else f"polycomp_{kind}_{dtype}"
        if name not in self.used:
            if dtype is None:
                self.used[name] = HELPER_TEMPLATES[kind]
            elif kind == "ipow":
                self.used[name] = _ipow_c(name, dtype)
            elif kind in ("div", "mod"):
                bad = f"d == 0 || (d == -1 && n == {_MIN[dtype]})" if dtype in _MIN else "d == 0"
                self.used[name] = HELPER_TEMPLATES[kind].format(t=CTYPES[dtype], d=dtype, bad=bad)
            else:
                ctype = CTYPES[dtype]
                exp = self.call("expf" if dtype in ("float16", "float32") else "exp") \
                    if kind == "sigmoid" else ""
                self.used[name] = HELPER_TEMPLATES[kind].format(t=ctype, d=dtype, exp=exp)
        return name

    def conversion(self, conv: E.Conversion, arg_dtype: str) -> str:
        """The helper converting to or from a storage format (polycomp/expr.FORMATS),
        defined on first use; the 4- and 2-bit integer encoders have one form for float
        arguments and one for integer ones."""
        suffix = ""
        if conv.direction == "encode" and conv.fmt in INT_FORMATS:
            suffix = "_f" if E.is_float(arg_dtype) else "_i"
        name = f"polycomp_{conv.func}{suffix}"
        if name not in self.used:
            self.used[name] = conversion_c(conv, name, suffix == "_f")
        return name

    def text(self) -> str:
        return "\n".join(self.used.values())


@dataclass(frozen=True)
class Text:
    """Printed C with its precedence, so the caller can decide on parentheses."""

    code: str
    prec: int = PRIMARY

    def at(self, prec: int) -> str:
        return self.code if self.prec >= prec else f"({self.code})"


# ----------------------------------------------------------------------------- isl AST exprs

def ast_expr(node: isl.AstExpr, names: Mapping[str, str], helpers: Helpers) -> Text:
    """An isl AST expression as C; ``names`` maps isl identifiers (params) to C names."""
    kind = node.get_type()
    if kind == isl.ast_expr_type.int:
        value = node.get_val().to_python()
        return Text(str(value), PRIMARY if value >= 0 else UNARY)
    if kind == isl.ast_expr_type.id:
        name = node.get_id().get_name()
        return Text(names.get(name, name))
    op = node.get_op_type()
    args = [ast_expr(node.get_op_arg(k), names, helpers) for k in range(node.get_op_n_arg())]
    if op in AST_BINARY:
        sym, prec = AST_BINARY[op]
        return _infix(sym, prec, args)
    if op == isl.ast_expr_op_type.minus:
        return Text(f"-{args[0].at(UNARY + 1)}", UNARY)
    if op in (isl.ast_expr_op_type.min, isl.ast_expr_op_type.max):
        fn = helpers.need("imin" if op == isl.ast_expr_op_type.min else "imax")
        out = args[0]
        for a in args[1:]:
            out = Text(f"{fn}({out.code}, {a.code})")
        return out
    if op == isl.ast_expr_op_type.fdiv_q:
        return Text(f"{helpers.need('floord')}({args[0].code}, {args[1].code})")
    if op in (isl.ast_expr_op_type.cond, isl.ast_expr_op_type.select):
        return Text(f"{args[0].at(COND + 1)} ? {args[1].at(COND + 1)} : {args[2].at(COND)}", COND)
    if op == isl.ast_expr_op_type.call:
        return Text(f"{args[0].code}({', '.join(a.code for a in args[1:])})")
    raise NotImplementedError(f"isl AST operator {op}")


def _infix(sym: str, prec: int, args: list[Text]) -> Text:
    out = args[0].at(prec)
    for a in args[1:]:
        out = f"{out} {sym} {a.at(prec + 1)}"
    return Text(out, prec)


# ----------------------------------------------------------------------------- value exprs

class ValuePrinter:
    """Prints statement expression trees.

    iterators  statement iterator name -> C text of its value at this point
    params     size parameter name -> C text (a constant once specialised)
    scalars    scalar argument name -> C name
    arrays     array name -> (C name, extents as Text for dims 1..n-1)
    """

    def __init__(self, iterators: Mapping[str, Text], params: Mapping[str, Text],
                 scalars: Mapping[str, str], arrays: Mapping[str, tuple[str, list[Text]]],
                 helpers: Helpers):
        self.iterators, self.params, self.scalars = iterators, params, scalars
        self.arrays, self.helpers = arrays, helpers
        self.overrides: dict[int, Text] = {}  # id(node) -> text (hoisted gather indices)

    def __call__(self, node: E.Expr) -> Text:
        if id(node) in self.overrides:
            return self.overrides[id(node)]
        method = getattr(self, f"_{type(node).__name__.lower()}")
        return method(node)

    def _const(self, node: E.Const) -> Text:
        return constant(node.value, node.dtype)

    def _iter(self, node: E.Iter) -> Text:
        return self.iterators[node.name]

    def _param(self, node: E.Param) -> Text:
        return self.params[node.name]

    def _scalar(self, node: E.Scalar) -> Text:
        if node.dtype == "float16":  # passed as a float holding a float16 value (ARG_CTYPES)
            return Text(f"(_Float16){self.scalars[node.name]}", UNARY)
        return Text(self.scalars[node.name])

    def _access(self, node: E.Access) -> Text:
        return Text(f"{self.arrays[node.array][0]}[{self.linear_index(node).code}]")

    def linear_index(self, node: E.Access) -> Text:
        """Row-major offset, Horner form: ((i0 * E1 + i1) * E2 + i2)."""
        extents = self.arrays[node.array][1]
        if not node.indices:
            return Text("0")
        out = self(node.indices[0])
        for index, extent in zip(node.indices[1:], extents):
            scaled = _infix("*", MUL, [out, extent])
            out = _infix("+", ADD, [scaled, self(index)])
        return out

    def _unary(self, node: E.Unary) -> Text:
        sym = "-" if node.op == "neg" else "!"
        return Text(f"{sym}{self(node.operand).at(UNARY + 1)}", UNARY)

    def _binary(self, node: E.Binary) -> Text:
        lhs, rhs = self(node.lhs), self(node.rhs)
        if node.op in ("floordiv", "floormod"):
            fn = self.helpers.need("floord" if node.op == "floordiv" else "floorm")
            return Text(f"{fn}({lhs.code}, {rhs.code})")
        if node.op == "mod" and E.is_float(node.dtype):
            fn = MATH_FN("fmod", node.dtype)
            return Text(f"{fn}({lhs.code}, {rhs.code})")
        if node.op in ("div", "mod") and _needs_guard(node):
            work = arithmetic_type(node.lhs.dtype, node.rhs.dtype)
            self.helpers.guards += 1
            fn = self.helpers.need(node.op, work)
            return Text(f"{fn}({lhs.code}, {rhs.code}, &{STATUS})")
        sym, prec = BINARY[node.op]
        return _infix(sym, prec, [lhs, rhs])

    def _select(self, node: E.Select) -> Text:
        c, a, b = self(node.cond), self(node.then), self(node.other)
        return Text(f"{c.at(COND + 1)} ? {a.at(COND + 1)} : {b.at(COND)}", COND)

    def _cast(self, node: E.Cast) -> Text:
        return Text(f"({CTYPES[node.dtype]}){self(node.operand).at(UNARY)}", UNARY)

    def _call(self, node: E.Call) -> Text:
        args = [self(a) for a in node.args]
        dtype = node.dtype
        if node.func in ("min", "max") or (node.func == "abs" and not E.is_float(dtype)):
            fn = self.helpers.need(node.func, dtype)
            return Text(f"{fn}({', '.join(a.code for a in args)})")
        if node.func in ("fmax", "fmin") and not E.is_float(dtype):
            fn = self.helpers.need(node.func[1:], dtype)
            return Text(f"{fn}({', '.join(a.code for a in args)})")
        if node.func in ("fmax", "fmin"):
            fn = self.helpers.need(node.func, dtype)
            return Text(f"{fn}({', '.join(a.code for a in args)})")
        if node.func == "sigmoid":
            work = "float32" if dtype == "float16" else dtype
            fn = self.helpers.need("sigmoid", work)
            return self._narrow(Text(f"{fn}({args[0].code})"), dtype)
        if node.func == "pow" and not E.is_float(dtype):
            fn = self.helpers.need("ipow", dtype)
            return Text(f"{fn}({args[0].code}, (int64_t){args[1].at(UNARY)})")
        conv = E.conversion(node.func)
        if conv is not None:
            fn = self.helpers.conversion(conv, node.args[0].dtype)
            return Text(f"{fn}({args[0].code})")
        if node.func == "rsqrt":
            one = "1.0f" if dtype in ("float16", "float32") else "1.0"
            root = Text(f"{MATH_FN('sqrt', dtype)}({args[0].code})")
            return self._narrow(Text(f"{one} / {root.code}", MUL), dtype)
        fn = self.helpers.call(MATH_FN(node.func, dtype))
        return self._narrow(Text(f"{fn}({', '.join(a.code for a in args)})"), dtype)

    @staticmethod
    def _narrow(text: Text, dtype: str) -> Text:
        return Text(f"(_Float16){text.at(UNARY)}", UNARY) if dtype == "float16" else text


def _needs_guard(node: E.Binary) -> bool:
    """An integer / or % whose divisor may be 0 (or -1, for a signed type) at run time.
    Float division needs no guard (it gives inf or nan); a constant divisor other than
    0 and -1 none either (ir.validate refuses a constant 0; it stays guarded here only
    if something escaped that check)."""
    if E.is_float(node.lhs.dtype) or E.is_float(node.rhs.dtype):
        return False
    divisor = constant_value(node.rhs)
    if divisor is None or isinstance(divisor, float):
        return True
    signed = arithmetic_type(node.lhs.dtype, node.rhs.dtype) in _MIN
    return divisor == 0 or (signed and divisor == -1)


def MATH_FN(func: str, dtype: str) -> str:  # noqa: N802 - reads as a table lookup
    """The <math.h> function for ``func`` at ``dtype`` (float16 computes in float)."""
    if func == "fmod":
        return "fmod" if dtype == "float64" else "fmodf"
    single, double = MATH[func]
    return double if dtype == "float64" else single


def constant(value: int | float | bool, dtype: str) -> Text:
    """A literal of the given dtype."""
    if dtype == "bool":
        return Text("true" if value else "false")
    if E.is_float(dtype):
        v = float(value)
        if math.isnan(v):
            text = Text("NAN")
        elif math.isinf(v):
            text = Text("INFINITY") if v > 0 else Text("-INFINITY", UNARY)
        else:
            body = repr(v)
            if "e" not in body and "." not in body:
                body += ".0"
            suffix = "" if dtype == "float64" else "f"
            text = Text(body + suffix, PRIMARY if v >= 0 else UNARY)
        if dtype == "float16":
            return Text(f"(_Float16){text.at(UNARY)}", UNARY)
        if dtype == "float64" and text.code.lstrip("-") in ("NAN", "INFINITY"):
            return Text(f"(double){text.at(UNARY)}", UNARY)
        return text
    v = int(value)
    if dtype == "uint64" or v > 2**63 - 1:
        return Text(f"{v}ULL")
    if v == -(2**63):
        return Text("(-9223372036854775807LL - 1)")
    if -(2**31) <= v < 2**31:
        return Text(str(v), PRIMARY if v >= 0 else UNARY)
    return Text(f"{v}LL", PRIMARY if v >= 0 else UNARY)


def _ipow_c(name: str, dtype: str) -> str:
    """An integer power by squaring, wrapping as the integer type does (its products in
    uint64_t, whose low bits are those of any narrower type's). A negative exponent gives
    1/b^-e truncated: 1 for b = 1, +-1 for b = -1, else 0 (numpy refuses it; so does
    nothing in C)."""
    t = CTYPES[dtype]
    negative = ("b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0" if dtype.startswith("int")
                else "b == 1")
    return (f"static inline {t} {name}({t} b, int64_t e) {{ if (e < 0) return ({t})({negative}); "
            "uint64_t r = 1, x = (uint64_t)b; "
            "while (e) { if (e & 1) r *= x; x *= x; e >>= 1; } "
            f"return ({t})r; }}")


# ----------------------------------------------------------------------------- storage formats
# The conversions of polycomp/expr.FORMATS as C, bit by bit in integers (no floating-point
# operation, so no rounding mode or -ffast-math changes them). Encoders take a float:
# ml_dtypes (onnx's reference) converts a double through float too, and float16 and
# float32 reach it exactly. The float formats: (exponent bits, mantissa bits, bias, kind)
# with kind "ieee" (Inf and NaNs), "fn" (no Inf; the all-ones pattern is NaN), "fnuz"
# (no Inf, no -0; 0x80 is the one NaN) or "finite" (neither Inf nor NaN).
FLOAT_FORMATS = {
    "bfloat16": (8, 7, 127, "ieee"), "float8e4m3fn": (4, 3, 7, "fn"),
    "float8e4m3fnuz": (4, 3, 8, "fnuz"), "float8e5m2": (5, 2, 15, "ieee"),
    "float8e5m2fnuz": (5, 2, 16, "fnuz"), "float4e2m1": (2, 1, 1, "finite"),
}
INT_FORMATS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}
_FLOAT_BITS = "uint32_t b; __builtin_memcpy(&b, &x, 4);"


def conversion_c(conv: E.Conversion, name: str, from_float: bool) -> str:
    """The C definition of helper ``name`` doing ``conv``."""
    storage = CTYPES[E.FORMATS[conv.fmt][0]]
    if conv.fmt in INT_FORMATS:
        bits, signed = INT_FORMATS[conv.fmt]
        mask = (1 << bits) - 1
        if conv.direction == "decode":  # the low bits, sign-extended for the signed ones
            half = 1 << (bits - 1)
            body = f"((int8_t)((c & {mask}u) ^ {half}u) - {half})" if signed else \
                f"(uint8_t)(c & {mask}u)"
            return (f"static inline {CTYPES[conv.dtype]} {name}({storage} c) "
                    f"{{ return {body}; }}")
        if from_float:
            # ml_dtypes truncates to int32 first; C leaves NaN and values outside int32
            # undefined where x86 gives INT32_MIN: its low bits (zero) are kept here
            return (f"static inline {storage} {name}(double x) {{ int32_t v = "
                    "(x > -2147483649.0 && x < 2147483648.0) ? (int32_t)x : INT32_MIN; "
                    f"return ({storage})((uint32_t)v & {mask}u); }}")
        # integers wrap: the low bits of the two's complement value
        return f"static inline {storage} {name}(uint64_t x) {{ return ({storage})(x & {mask}u); }}"
    if conv.fmt == "float8e8m0":
        return _e8m0_c(conv, name)
    e_bits, m_bits, bias, kind = FLOAT_FORMATS[conv.fmt]
    sign = 1 << (e_bits + m_bits)
    exp_ones = (1 << e_bits) - 1
    if conv.direction == "decode":
        return _float_decode_c(conv.fmt, name, storage, e_bits, m_bits, bias, kind)
    nan = {"ieee": f"({exp_ones << m_bits | 1 << (m_bits - 1)}u | s << {e_bits + m_bits})",
           "fn": f"({sign - 1}u | s << {e_bits + m_bits})", "fnuz": f"{sign}u",
           # ml_dtypes gives a zero of the other sign (ONNX leaves it undefined)
           "finite": f"((s ^ 1u) << {e_bits + m_bits})"}[kind]
    max_mag = {"ieee": (exp_ones << m_bits) - 1, "fn": sign - 2, "fnuz": sign - 1,
               "finite": sign - 1}[kind]
    # bfloat16 overflows to Inf (saturate is for the float8 types), float4e2m1 has
    # nothing else to give than its largest value
    saturate = kind == "finite" or (conv.saturate and conv.fmt != "bfloat16")
    if saturate:
        overflow = f"({max_mag}u | s << {e_bits + m_bits})"
    elif kind == "ieee":
        overflow = f"({exp_ones << m_bits}u | s << {e_bits + m_bits})"
    else:
        overflow = nan
    emin = 1 - bias
    zero = "0u" if kind == "fnuz" else f"(s << {e_bits + m_bits})"
    return "\n".join([
        f"static inline {storage} {name}(float x) {{",
        f"  {_FLOAT_BITS}",
        "  uint32_t s = b >> 31, ef = (b >> 23) & 255u, sig = b & 0x7fffffu;",
        f"  if (ef == 255u) return ({storage})(sig ? {nan} : {overflow});",
        "  int e = ef ? (int)ef - 127 : -126;",
        "  if (ef) sig |= 0x800000u;",
        # the bits below the target's last mantissa bit (more below its normal range);
        # from 25 on, |x| is at most half its smallest subnormal: zero
        f"  int shift = {23 - m_bits} + (e < {emin} ? {emin} - e : 0);",
        "  uint32_t mag = 0;",
        "  if (shift < 25) {",
        "    uint32_t kept = sig >> shift, rest = sig & ((1u << shift) - 1u), "
        "half = 1u << (shift - 1);",
        "    kept += rest > half || (rest == half && (kept & 1u));  /* to nearest even */",
        # a carry out of the mantissa lands in the exponent field: still the right code
        f"    mag = ((uint32_t)(e > {emin} ? e - {emin} : 0) << {m_bits}) + kept;",
        "  }",
        f"  if (mag > {max_mag}u) return ({storage}){overflow};",
        f"  return ({storage})(mag ? (mag | s << {e_bits + m_bits}) : {zero});",
        "}"])


def _float_decode_c(fmt: str, name: str, storage: str, e_bits: int, m_bits: int, bias: int,
                    kind: str) -> str:
    if fmt == "bfloat16":  # the high half of a float32
        return (f"static inline float {name}(uint16_t c) {{ uint32_t b = (uint32_t)c << 16; "
                "float x; __builtin_memcpy(&x, &b, 4); return x; }")
    exp_ones, man_ones = (1 << e_bits) - 1, (1 << m_bits) - 1
    special = {"ieee": f"  if (e == {exp_ones}u) return m ? NAN : (s ? -INFINITY : INFINITY);",
               "fn": f"  if (e == {exp_ones}u && m == {man_ones}u) return s ? -NAN : NAN;",
               "fnuz": "  if (s && !e && !m) return NAN;", "finite": ""}[kind]
    return "\n".join(line for line in [
        f"static inline float {name}({storage} c) {{",
        f"  uint32_t s = (c >> {e_bits + m_bits}) & 1u, e = (c >> {m_bits}) & {exp_ones}u, "
        f"m = c & {man_ones}u;",
        special,
        "  float x;",
        f"  if (!e) x = (float)m * 0x1p{1 - bias - m_bits}f;  /* subnormal */",
        f"  else {{ uint32_t b = (e + {127 - bias}u) << 23 | m << {23 - m_bits}; "
        "__builtin_memcpy(&x, &b, 4); }",
        "  return s ? -x : x;",
        "}"] if line)


def _e8m0_c(conv: E.Conversion, name: str) -> str:
    """float8e8m0 (a biased power of two, 255 = NaN) as onnx's reference converts: from
    the float32 exponent, rounded by the float32 mantissa as ``round_mode`` says."""
    if conv.direction == "decode":
        return ("static inline float " + name + "(uint8_t c) { if (c == 255u) return NAN; "
                "uint32_t b = c ? (uint32_t)c << 23 : 0x400000u; float x; "
                "__builtin_memcpy(&x, &b, 4); return x; }")
    up = {"up": "(b & 0x7fffffu) != 0",
          # ONNX's rule: the guard bit, and any bit below it or a non-zero exponent
          "nearest": "((b >> 22) & 1u) && ((b & 0x3fffffu) != 0 || e > 0)",
          "down": "0"}[conv.round_mode]
    keep = " && e != 254u" if conv.saturate else ""  # 254 + 1 would be NaN
    return (f"static inline uint8_t {name}(float x) {{ {_FLOAT_BITS} "
            "uint32_t e = (b >> 23) & 255u; if (e == 255u) return 255u; "
            f"return (uint8_t)(e + (({up}){keep})); }}")
