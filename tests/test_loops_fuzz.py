"""Loop-nest frontend fuzzing: mutated valid C loop nests through parse_c, get and lower.

Whatever the input, the frontend either succeeds or raises a PolycompError subclass --
never an IndexError, AttributeError, isl.Error or a pycparser exception -- and never the
"internal error" PolycompError that the frontend's last-resort guard makes of those.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polycomp.errors import PolycompError
from polycomp.frontend.loops import INTERNAL, parse_c

VALID = [
    """void gemm(int ni, int nj, int nk, double alpha, double C[ni][nj], double A[ni][nk],
                 double B[nk][nj]) {
      for (int i = 0; i < ni; i++) {
        for (int j = 0; j < nj; j++) C[i][j] *= 0.5;
        for (int k = 0; k < nk; k++)
          for (int j = 0; j < nj; j++) C[i][j] += alpha * A[i][k] * B[k][j];
      }
    }""",
    """#define N 16
    void band(int n, int m, int A[n][m]) {
      int i, j;
      int s;
    #pragma scop
      for (i = n - 1; i >= 0; i -= 2)
        for (j = max(0, i - 2); j < min(m, i + 3); j++) {
          s = A[i][j] % 7;
          if (i < j && !(j == m - 1) || i == 0) A[i][j] = s + (i + j) / 2;
          else A[i][j] = i > 0 ? A[i - 1][j] : N;
        }
    #pragma endscop
    }""",
    """#include <math.h>
    void mix(int n, float alpha, double x[n + 1], float y[2 * n]) {
      double t = 0.1;
      for (int i = 0; i <= n; i++) {
        t += sqrt(x[i]) * exp(-x[i]);
        x[i] = fmax(t, 0.5) + (double)i / 3;
      }
      for (int i = 0; i < (n + 1) / 2; i++)
        y[2 * i] = y[2 * i + 1] * alpha + sqrtf(y[i]) + (i % 3 == 0 ? 1.0f : 2.0f);
    }""",
]

TOKEN = re.compile(r"\s+|[A-Za-z_]\w*|\d+\.?\d*[fFuUlL]*|\+\+|--|\+=|-=|\*=|/=|%=|<=|>=|==|!=|"
                   r"&&|\|\||->|.", re.DOTALL)
VOCAB = ["(", ")", "{", "}", "[", "]", ",", ";", "+", "-", "*", "/", "%", "<", ">", "!", "?",
         ":", "=", "+=", "-=", "*=", "++", "--", "&&", "||", "!=", "==", "for", "if", "else",
         "while", "break", "return", "int", "double", "float", "unsigned", "long", "char",
         "i", "j", "k", "n", "m", "A", "B", "x", "y", "t", "s", "0", "1", "2", "-1", "1.5",
         "0.5f", "sqrt", "min", "max", "foo", "\n", " ", "#pragma scop\n", "#pragma endscop\n",
         "#define M (n + 1)\n", "#include <x.h>\n", "i / 2", "i * j", "A[i]", "A[B[i]]",
         "9223372036854775807", "99999999999999999999", "1e308", "'a'", "\"s\"", "&", "*A",
         "(((", ")))", "static", "const", "struct", "/*", "*/", "//", "\\", "#if 1\n", "N"]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def run(source: str, size_seed: int) -> None:
    """Parse, choose, lower (parametric and specialised); only PolycompError may come out."""
    try:
        module = parse_c(source, file="fuzz.c")
        for definition in module.functions.values():
            definition.interface  # noqa: B018 - analyses the function
            definition.lower()
            sizes = {spec.name: 1 + (size_seed * 7 + 3 * k) % 6
                     for k, spec in enumerate(definition.interface.inputs)
                     if getattr(spec, "is_size", False)}
            definition.lower(sizes)
    except PolycompError as exc:
        assert INTERNAL not in exc.message, f"{exc}\n--- source ---\n{source}"
        str(exc)  # renders


FAST = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_valid_programs_lower():
    for source in VALID:
        module = parse_c(source)
        for definition in module.functions.values():
            assert definition.lower().statements


def test_an_extent_past_64_bits_is_no_internal_error():
    # a mutation the token fuzzer found: isl's int_from_si took no 2 * (2**63 - 1)
    run("void f(int n, float x[n + 1], float y[2 * 9223372036854775807]) {\n"
        "  for (int i = 0; i < (n + 1) / 2; i++)\n"
        "    y[2 * i] = y[2 * i + 1] + x[i];\n"
        "}\n", 0)


@FAST
@given(st.sampled_from(range(len(VALID))), st.data(), st.integers(0, 100))
def test_token_mutations(which: int, data: st.DataObject, size_seed: int):
    toks = tokens(VALID[which])
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "swap", "duplicate"]))
        k = data.draw(st.integers(0, len(toks) - 1))
        if kind == "delete" and len(toks) > 1:
            del toks[k]
        elif kind == "insert":
            toks.insert(k, data.draw(st.sampled_from(VOCAB)))
        elif kind == "replace":
            toks[k] = data.draw(st.sampled_from(VOCAB))
        elif kind == "swap":
            j = data.draw(st.integers(0, len(toks) - 1))
            toks[k], toks[j] = toks[j], toks[k]
        else:
            toks.insert(k, toks[k])
    run("".join(toks), size_seed)


@FAST
@given(st.sampled_from(range(len(VALID))), st.integers(0, 10_000), st.integers(1, 40),
       st.integers(0, 100))
def test_truncations_and_splices(which: int, start: int, length: int, size_seed: int):
    source = VALID[which]
    start %= len(source)
    run(source[:start] + source[start + length:], size_seed)
    run(source[:start] + VALID[(which + 1) % len(VALID)][start:start + length]
        + source[start:], size_seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(VOCAB), max_size=40))
def test_random_token_soup(body: list[str]):
    run("void f(int n, int m, double A[n][m], double B[n], double x) {\n" + " ".join(body)
        + "\n}\n", 3)


# ----------------------------------------------------------------------------- semantics

SEMANTIC_SEEDS = [
    """void k(int n, int m, int A[n][m], double B[n]) {
      for (int i = n - 1; i >= 0; i -= 1)
        for (int j = max(0, i - 2); j < min(m, i + 3); j++) {
          if (i < j && !(j == m - 1) || i == 0) A[i][j] = A[i][j] * 3 + (i + j) / 4;
          else A[i][j] = i > 0 ? A[i - 1][j] - j : 7;
          B[i] += A[i][j] % 5;
        }
    }""",
    """void k(int n, int m, double A[n][m], double r[n]) {
      double s = 0.5;
      for (int i = 0; i < n; i++) {
        s = 0;
        for (int j = i / 2; j < m; j += 2)
          s += A[i][j] * (j + 1);
        r[i] = s > 1 ? s : r[i] - s;
      }
    }""",
]
# a token is replaced by one of its own class, so that most mutants still parse
# (no "/" or "%": an integer division by zero would crash both sides; every local is
# initialised, so that no mutant reads an indeterminate value)
SEMANTIC_CLASSES = [["0", "1", "2", "3", "i", "j", "n", "m"], ["+", "-", "*"],
                    ["<", "<=", ">", ">=", "==", "!="], ["&&", "||"], ["+=", "-=", "*=", "="]]


def _mutable(toks: list[str]) -> list[tuple[int, list[str]]]:
    return [(k, cls) for k, t in enumerate(toks) for cls in SEMANTIC_CLASSES if t in cls]


def _inputs(definition, seed: int) -> list | None:
    from polycomp import islutil as U
    from polycomp.ir import TensorArg

    rng = np.random.default_rng(seed)
    sizes, args = {}, []
    for spec in definition.interface.inputs:
        if isinstance(spec, TensorArg):
            args.append(None)
        elif spec.is_size:
            sizes[spec.name] = int(rng.integers(0, 7))
            args.append(sizes[spec.name])
        else:
            args.append(float(rng.random()) if spec.dtype.startswith("float")
                        else int(rng.integers(-5, 5)))
    for k, spec in enumerate(definition.interface.inputs):
        if isinstance(spec, TensorArg):
            shape = [d if isinstance(d, int) else sizes[d] if isinstance(d, str)
                     else U.pw_aff_value(d, sizes) for d in spec.dims]
            if any(s is None or s < 0 for s in shape):
                return None
            args[k] = (rng.integers(-20, 20, size=shape).astype(spec.dtype)
                       if spec.dtype.startswith("int") else rng.random(shape))
    try:
        definition.lower(sizes)
    except PolycompError:
        return None
    return args


@pytest.mark.needs_cc
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(SEMANTIC_SEEDS))), st.data(), st.integers(0, 10_000))
def test_mutants_that_compile_agree_with_gcc(which: int, data: st.DataObject, seed: int):
    """Mutants the frontend accepts must compute what gcc computes (scheduler none)."""
    import polycomp
    from test_loops_frontend import FLAGS, _copy, assert_same, run_gcc

    toks = tokens(SEMANTIC_SEEDS[which])
    for _ in range(data.draw(st.integers(1, 2))):
        k, cls = data.draw(st.sampled_from(_mutable(toks)))
        toks[k] = data.draw(st.sampled_from(cls))
    source = "".join(toks)
    try:
        definition = parse_c(source).get()
        args = _inputs(definition, seed)
    except PolycompError:
        return
    if args is None:
        return
    expected, got = _copy(args), _copy(args)
    try:
        run_gcc(source, None, expected)
    except AssertionError:  # gcc rejects what the frontend accepted: not a semantic question
        return
    polycomp.compile_loops(source, scheduler="none", cflags=FLAGS)(*got)
    for e, g in zip(expected, got):
        if isinstance(e, np.ndarray):
            assert_same(e, g, source)
