"""TC frontend fuzzing: random text and mutated valid programs through parse and lower.

Whatever the input, the frontend either succeeds or raises a PolycompError subclass:
never an IndexError, KeyError, RecursionError, isl.Error or the like.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polycomp.frontend.tc import parse

from polycomp.errors import PolycompError

VALID = [
    "def matmul(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    """def conv(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {
      O(n, m, h, w) +=! I(n, c, 2*h + kh, 2*w + kw) * Wt(m, c, kh, kw)
    }""",
    """def pool(float(N, H) I) -> (O) {
      O(n, h) max=! I(n, 2*h + kh) where kh in 0:2
    }""",
    "def tri(float(N, N) A) -> (O) { O(i) +=! A(i, k) where k in 0:i+1 }",
    "def emb(float(V, D) T, int32(B, L) Idx) -> (O) { O(b, l, d) = T(Idx(b, l), d) }",
    """def softmax(float(N, C) X) -> (O) {
      mx(n) max=! X(n, c)
      e(n, c) = exp(X(n, c) - mx(n))
      s(n) +=! e(n, c)
      O(n, c) = e(n, c) / s(n)
    }""",
    "def let(float(N) A, float eps) -> (O) { O(i) = t * t + eps where t = A(i) * 2, u = t }",
    "def ex(float(N) A, float(M) B) -> (O) { O(i) = A(i) > 0 ? A(i) : -1 where exists B(i) }",
    "def dot(float(N) X, float() w) -> (s) { s() +=! X(i) * X(i) * w }",
    "def tk(float(N, M) A) -> (O) { O(i) = A(i, A.1 - 1) * A.0 + float(i) / 2 }",
    """def strided(float(N, H) I, int32 S) -> (float(N, 2) P, O) {
      P(n, k) = 0
      O(n, h) = I(n, S*h + 1) + min(S, 3) where h in 0:2
    }""",
    """def two(float(B, K) X, float(K, N) W, float(N) b) -> (Y) {
      T(i, j) +=! X(i, k) * W(k, j); Y(i, j) = fmax(T(i, j) + b(j), 0)
    } <=> two_grad(X, W)
    def three(int32(N) A) -> (B) { B(i) = A(i) % 3 == 0 && A(i) != 1 ? 1 : A(i) / 2 }""",
]

TOKEN = re.compile(r"\s+|[A-Za-z_][A-Za-z_0-9]*|\d+\.?\d*|<=>|\+=!|\*=!|->|<=|>=|==|!=|&&|\|\||"
                   r"\+=|\*=|.", re.DOTALL)
VOCAB = ["(", ")", "{", "}", ",", ";", ":", ".", "+", "-", "*", "/", "%", "<", ">", "!", "?",
         "=", "+=!", "max=!", "->", "<=>", "&&", "where", "in", "exists", "def", "float",
         "int32", "A", "B", "i", "j", "k", "N", "0", "1", "2", "1.5", "T", "exp", "max", "\n",
         " ", "#", "A.0", "A(i)", "(((", ")))", "1e308", "9223372036854775807", "int8", "bool",
         "true", "S", "*=!", "min=", "I(i)", "0.0", "uint8(", "x"]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def run(source: str, size_seed: int) -> None:
    """Parse and lower every def; only PolycompError may come out."""
    try:
        module = parse(source, file="fuzz.tc")
    except PolycompError:
        return
    for k, d in enumerate(module.defs.values()):
        sizes = {s: 1 + (size_seed * 7 + 3 * k + 5 * j) % 6 for j, s in enumerate(d.sizes)}
        for attempt in (sizes, None):
            try:
                d.lower(attempt)
                if attempt is None:
                    d.explain_ranges()
            except PolycompError:
                pass
        d.statement_sources()


FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


CHARS = list("def(){}[],;:.+-*/%<>=!?&|#\n 0123456789ABCijkNMfloatwhern_")


@FAST
@given(st.text(alphabet=st.sampled_from(CHARS), max_size=120), st.integers(0, 100))
def test_random_text(text, seed):
    run(text, seed)


@FAST
@given(st.lists(st.sampled_from(VOCAB), max_size=40), st.integers(0, 100))
def test_random_token_soup(parts, seed):
    run(" ".join(parts), seed)
    run("def f(float(N) A) -> (B) { " + " ".join(parts) + " }", seed)


@st.composite
def mutated(draw):
    toks = tokens(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert"]))
        pos = draw(st.integers(0, max(0, len(toks) - 1)))
        if not toks:
            toks = [draw(st.sampled_from(VOCAB))]
            continue
        if op == "delete":
            del toks[pos]
        elif op == "duplicate":
            toks.insert(pos, toks[pos])
        elif op == "swap" and pos + 1 < len(toks):
            toks[pos], toks[pos + 1] = toks[pos + 1], toks[pos]
        elif op == "replace":
            toks[pos] = draw(st.sampled_from(VOCAB + toks))
        else:
            toks.insert(pos, draw(st.sampled_from(VOCAB + toks)))
    return "".join(toks)


@st.composite
def char_mutated(draw):
    text = list(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text) - 1)) if text else 0
        op = draw(st.sampled_from(["delete", "duplicate", "replace"]))
        if not text:
            break
        if op == "delete":
            del text[pos]
        elif op == "duplicate":
            text.insert(pos, text[pos])
        else:
            text[pos] = draw(st.sampled_from(list("(){},;:.+-*/%<>=!?&|#\n 0129ijkNAB_")))
    return "".join(text)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated(), st.integers(0, 100))
def test_token_mutations_of_valid_programs(source, seed):
    run(source, seed)


@FAST
@given(char_mutated(), st.integers(0, 100))
def test_character_mutations_of_valid_programs(source, seed):
    run(source, seed)


def test_valid_programs_lower():
    """The seeds themselves are valid: parse and lower with sizes without error."""
    for source in VALID:
        module = parse(source)
        for d in module.defs.values():
            sizes = {s: 8 for s in d.sizes}
            sizes.update({k: v for k, v in {"S": 2, "KH": 3, "KW": 3}.items() if k in sizes})
            d.lower(sizes)
            d.lower(None if "S" not in sizes else sizes)


# ----------------------------------------------------------------------------- generated programs

INDEX = st.sampled_from(["i", "j", "k", "i + 1", "2*i", "N - 1 - i", "I(j)", "P*i", "i / 2",
                         "k + j", "0", "A.1 - 1", "j % 3", "i * j", "-i"])
LEAF = st.one_of(
    st.builds(lambda a, b: f"A({a}, {b})", INDEX, INDEX),
    st.builds(lambda a: f"I({a})", INDEX), st.builds(lambda a: f"D({a})", INDEX),
    st.sampled_from(["s", "P", "i", "N", "1", "2.5", "0", "true", "A.0", "t"]))
EXPR = st.recursive(LEAF, lambda sub: st.one_of(
    st.builds(lambda a, op, b: f"({a} {op} {b})", sub,
              st.sampled_from(["+", "-", "*", "/", "%", "<", "==", "&&", "||"]), sub),
    st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["exp", "abs", "float", "int32", "-",
                                                          "!", "sqrt", "bool"]), sub),
    st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(["max", "fmin", "pow"]), sub, sub),
    st.builds(lambda c, a, b: f"({c} ? {a} : {b})", sub, sub, sub)), max_leaves=8)
WHERE = st.lists(st.sampled_from(["t = A(i, j)", "t = 3", "k in 0:N", "j in 0:i + 1",
                                  "exists D(i)", "k in 0:P", "u = t"]), max_size=3)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(["=", "+=!", "max=!", "*=!", "+="]), EXPR, WHERE, st.integers(0, 100))
def test_generated_programs(op, expr, where, seed):
    clauses = f" where {', '.join(where)}" if where else ""
    source = ("def g(float(N, M) A, int32(M) I, float64(N) D, float s, int32 P) -> (O) {\n"
              f"  O(i) {op} {expr}{clauses}\n}}")
    run(source, seed)
