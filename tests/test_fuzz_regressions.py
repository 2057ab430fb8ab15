"""Regressions found by the differential fuzzer (python -m polycomp.fuzzing), each run as
the fuzzer runs it: the C built by ``gcc -O0`` is the oracle, integers bit for bit.

* 77:263 -- ``if ((i + j + 2) % 3 == 1 && (i + 1) % 2 == 0)`` in a decreasing ``j`` loop:
  the guard and the array bounds leave ``2j = 1 + i`` in the domain, isl writes the
  time ``-j`` as the rational ``(-1 - i)/2`` on it, and ``PwAff.min_val`` refused that
  ("expecting integer affine expression") in the scheduler "none"'s tree builder.
  ``islutil.pw_aff_bounds`` now bounds the set of values instead.
* 5151:3535 -- a strided, skewed band tiled by 5 in parametric mode: isl's AST (guards
  with a dozen modulos) skipped ``S1(2, 1)`` at N = 4, and the AST check had accepted it
  on its cheap half because the exact half ran out of budget. A parametric AST must now
  pass the exact half, else the original order is compiled (SchedulerFallbackWarning).
* 7373:744 -- isl's schedule, parametric, tiled: the AST had ``if (a) { simd loop whose
  body is if (b) S3 } else { ... S2 ... }``; the printer braces a then-branch before an
  else unless it is a cgen Block, and cgen's Collection (the pragma with its loop) is a
  Block subclass printed without braces, so C gave the else to ``if (b)`` and S2 ran
  under the wrong guard. The emitter now tests the exact type.
* the suite's TC fuzz example with input seed 6821 -- a simd loop over i with the
  reduction over (r, q) unrolled inside it: isl wrote one copy under ``if (c2 == 3)``
  with the target O1[3], the code generator took that target (no c2 in its text) for a
  reduction along the loop and accumulated it in a local, which the loop's other copies
  (O1[c2]) never saw. Only the statements the scheduler proved to reduce along the loop
  (reductions.annotate_simd_reductions) are accumulated now.
* 1212:2554 -- a max reduction along a simd loop whose copies sat under guards inside it
  (N % 4 >= 2): the accumulators loaded and stored their targets before and after the
  loop whatever the guards, out of bounds at N = 1. A reduction under a guard inside the
  simd loop now leaves the loop scalar, and the accumulators run only when the loop runs.
* 1212:2311 -- isl printed the subtree of a contracted temporary's mark in three pieces,
  each with its own local array: the reduction's value never reached its consumer. The
  local is now declared once, at the top of the innermost loop body around the mark.
* 1212:1649 -- isl's schedule, specialised at N = 3, tiled: below the tiles a one-member
  band ``[S3 1; S4 l; S5 5 - k - l]`` whose value the outer loops fix; isl's AST ran
  S3(0, 4, 1) before S5(0, 3, 3, 2), which the tree orders the other way and which S3
  reads from. Every instance ran once, so the AST check passed; it now reads back the
  AST's execution order too and requires every dependence to go forward in it.
* 1313:854 -- parametric, 59 guarded calls of one statement: the new order check ran out
  of its budget on the original order itself, the last fallback, and a valid program
  became an InternalError. Past its budget the order is left unchecked.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp
from polycomp import islutil as U
from polycomp.codegen import ast as codegen_ast
from polycomp.codegen import verify
from polycomp.scheduler.budget import SchedulerFallbackWarning
from polycomp.fuzzing.harness import Case, Worker
from polycomp.fuzzing.loopgen import ArgSpec, LoopCase

SIGNATURE = "void kern(int N, int A[N + 8][N + 8], int B[N + 8][N + 8]) {\n"

# the fuzzer's minimised program (its only statement is a dead read, so the check is that
# it compiles and runs), then variants that write through the same kind of guard
PROGRAMS = {
    "minimised-77-263": """
  for (int i = 0; i < N; i++) {
    for (int j = N - 1 - 1; j >= 0; j--) {
      if ((i + j + 2) % 3 == 1 && (i + 1) % 2 == 0) {
        int t0 = A[-j + 3][-j + 3];
      }
    }
  }
""",
    "guarded-write": """
  for (int i = 0; i < N; i++) {
    for (int j = N - 1 - 1; j >= 0; j--) {
      if ((i + j + 2) % 3 == 1 && (i + 1) % 2 == 0) {
        A[-j + 3][i + 1] += i - 2 * j + B[j][i];
      }
    }
  }
""",
    "equality-guard-two-statements": """
  for (int i = 0; i < N; i++) {
    for (int j = N - 1; j >= 0; j--) {
      if (2 * j == i + 1) {
        A[j][i] = A[j + 1][i] * 3 + j;
      }
      B[i][j] += A[j][i];
    }
  }
""",
    "strided-guard-sequence": """
  for (int i = N - 1; i >= 0; i--) {
    B[i][0] = i;
    for (int j = N - 1; j >= 0; j--) {
      if ((i + 2 * j) % 3 == 2 && i % 2 == 1) {
        A[i][j] = B[i][0] - A[j][i] + j;
      }
    }
  }
""",
}


def make_case(body: str, n: int, options: dict) -> Case:
    shape = (n + 8, n + 8)
    args = [ArgSpec("N", "size", "int32", n), ArgSpec("A", "array", "int32", shape=shape),
            ArgSpec("B", "array", "int32", shape=shape)]
    program = LoopCase(SIGNATURE + body.strip("\n") + "\n}\n", "kern", args, {"N": n})
    return Case("loops", program, options, threads=1, seed=n)


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=60.0)
    yield w
    w.close()


@pytest.mark.needs_cc
@pytest.mark.parametrize("parametric", [True, False])
@pytest.mark.parametrize("scheduler", ["none", "isl", "pluto"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_divisibility_guards_agree_with_gcc_O0(worker, name, scheduler, parametric):
    for n in (2, 5):
        case = make_case(PROGRAMS[name], n, {"scheduler": scheduler, "parametric": parametric,
                                             "parallel_min_work": 0})
        outcome = worker.run(case)
        assert outcome.status == "ok", f"N={n}: {outcome.status} at {outcome.stage}: " \
                                       f"{outcome.detail}"


def test_pw_aff_bounds_of_a_rational_piece():
    """The piece isl wrote for the 77:263 program: PwAff.min_val refuses it."""
    pa = isl.PwAff("[N] -> { S0[i, j] -> [(-1 - i)/2] : 2j = 1 + i and N <= 5 and 0 <= i < N"
                   " and i <= -5 + 2N }")
    with pytest.raises(isl.Error):
        pa.min_val()
    lo, hi = U.pw_aff_bounds(pa)
    assert (lo.to_python(), hi.to_python()) == (-2, -1)
    param_only = isl.PwAff("[N] -> { [(1 + N)/2] : (1 + N) mod 2 = 0 and 0 <= N <= 9 }")
    assert [v.to_python() for v in U.pw_aff_bounds(param_only)] == [1, 5]
    assert U.pw_aff_value(param_only, {}) == 5
    assert U.pw_aff_value(param_only, {"N": 3}) == 2
    empty = isl.PwAff("{ S[i] -> [(i)] : 1 = 0 }")
    assert all(v.is_nan() for v in U.pw_aff_bounds(empty))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(a=st.integers(1, 4), b=st.integers(-3, 3), m=st.integers(2, 5), r=st.integers(0, 4),
       c=st.integers(-3, 3), hi=st.integers(0, 7))
def test_pw_aff_bounds_match_enumeration(a, b, m, r, c, hi):
    """Bounds of ``c*i - j`` on ``{ a*j = i + b, (i + j) mod m = r }``: the equality makes
    isl write the value with a denominator; the result is the enumerated min and max."""
    domain = isl.Set(f"{{ S[i, j] : 0 <= i <= {hi} and 0 <= j <= {hi} and {a}j = i + ({b})"
                     f" and (i + j) mod {m} = {r % m} }}")
    pa = isl.PwAff(f"{{ S[i, j] -> [({c}i - j)] }}").intersect_domain(domain)
    values = [c * i - j for i in range(hi + 1) for j in range(hi + 1)
              if a * j == i + b and (i + j) % m == r % m]
    lo, top = U.pw_aff_bounds(pa)
    if not values:
        assert lo.is_nan() and top.is_nan()
    else:
        assert (lo.to_python(), top.to_python()) == (min(values), max(values))


SKEWED_STRIDED = """
void kern(int N, double A[2 * N + 1][N + 1]) {
  for (int i = 2; i < N - 1; i += 2) {
    A[-i + N - 2][(i + 2) / 3] -= 9;
    for (int j = 1; j < N - 1; j += 2) {
      A[i + 2][j] -= (-A[2 * j + 2][j + 1]);
    }
  }
}
"""


def _skewed_strided_reference(n: int, a: np.ndarray) -> None:
    for i in range(2, n - 1, 2):
        a[-i + n - 2][(i + 2) // 3] -= 9
        for j in range(1, n - 1, 2):
            a[i + 2][j] -= -a[2 * j + 2][j + 1]


@pytest.mark.needs_cc
def test_parametric_ast_past_the_exact_check_budget_is_not_trusted(monkeypatch):
    # a tenth of the budgets: this AST's check runs past them as it ran past the real
    # ones (32 million operations or 20 s, 20 s of the suite), and the fallback is the same
    monkeypatch.setattr(codegen_ast, "PARAMETRIC_EXACT_OPERATIONS", 3_200_000)
    monkeypatch.setattr(verify, "EXACT_SECONDS", 2.0)
    with pytest.warns(SchedulerFallbackWarning, match="exact check"):
        kernel = polycomp.compile_loops(SKEWED_STRIDED, tile_sizes=(5,), parametric=True)
    for n in (4, 7, 10):
        a = np.random.default_rng(n).integers(-20, 20, (2 * n + 1, n + 1)).astype(np.float64)
        want = a.copy()
        _skewed_strided_reference(n, want)
        kernel(n, a)
        np.testing.assert_array_equal(a, want)


FUZZ_7373_744 = """\
void kern(int N, int M, int a0, long a1, unsigned long A[N + 11][2 * N + 10][N + 12], unsigned char B[12][2 * N + 3], signed char C[N + 7], unsigned D[N + 2 * M + 12][N + M + 8]) {
  for (int i = 1; i < N + 2; i++) {
    for (int j = N - 1 - 1; j >= 0; j -= 3) {
      for (int k = 1; k <= N - 1 - 1; k++) {
        for (int l = 4 + 2 - 1; l >= k + 1; l--) {
          A[N - l + 5][2 * k - l + 6][-l + 5] *= ((-((long) B[-i + 6][(k + l + 2) % 2 + 1])) % 6);
        }
      }
      for (int k = 0; k <= 4 - 1; k += 3) {
        C[j - k + 3] -= (((-((unsigned char) A[j + 2 * k + 6][N - k + 3][j + 2 * k + 7])) + ((D[i + 6][j + 2 * k] % 4) * M))) % 1009;
        for (int l = 1; l < M + 2; l += 2) {
          C[(l + 1) % 2 + 5] -= ((((a1 - a0) * ((unsigned char) D[k - l + 6][2 * k + l])) + D[k + 2 * l + 6][l + 1])) % 7;
        }
      }
    }
  }
}
"""


@pytest.mark.needs_cc
def test_else_after_a_simd_loop_keeps_its_if(worker):
    n, m = 2, 0
    args = [ArgSpec("N", "size", "int32", n), ArgSpec("M", "size", "int32", m),
            ArgSpec("a0", "scalar", "int32", 0), ArgSpec("a1", "scalar", "int64", 0),
            ArgSpec("A", "array", "uint64", shape=(n + 11, 2 * n + 10, n + 12)),
            ArgSpec("B", "array", "uint8", shape=(12, 2 * n + 3)),
            ArgSpec("C", "array", "int8", shape=(n + 7,)),
            ArgSpec("D", "array", "uint32", shape=(n + 2 * m + 12, n + m + 8))]
    program = LoopCase(FUZZ_7373_744, "kern", args, {"N": n, "M": m})
    case = Case("loops", program, {"scheduler": "isl", "parametric": True}, threads=3,
                seed=7373022863)
    outcome = worker.run(case)
    assert outcome.status == "ok", f"{outcome.status} at {outcome.stage}: {outcome.detail}"


UNROLLED_REDUCTION = """def fz(int32(N) XN, int32(N, N) A, int32 s) -> (int32(N) O0, int32(N) O1, int32() O2) {
  O0(i) = (((-min(XN(N - 1 - i), XN(i / 2))) - ((7 % 4) * (-A(i, i / 2)))) % 1009) where i in 0:N
  O1(i) +=! ((A(q, i / 2) + (XN(r / 2) + max((XN(N - 1 - i) * (s % 4)), (-(s + A(i / 2, N - 1 - q)))))) % 1009) where i in 0:N, r in 0:N, q in 0:i+1
  O2 = (min(((7 - O0(0)) * (-A(0, 0))), ((O0(0) / 5) % 5)) % 97)
}"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("seed", range(4))
def test_a_guarded_copy_in_a_simd_loop_is_no_reduction_along_it(seed):
    rng = np.random.default_rng(seed)
    n = 4
    xn = rng.integers(-50, 50, n).astype(np.int32)
    a = rng.integers(-50, 50, (n, n)).astype(np.int32)
    s = int(rng.integers(-20, 20))
    want = polycomp.compile(UNROLLED_REDUCTION, scheduler="none")(xn, a, s)
    got = polycomp.compile(UNROLLED_REDUCTION)(xn, a, s)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


TC_FUZZ_1212 = {
    2554: ("""def fz(int32(N) XN, int32(N, N) A) -> (int32() O0, int32(N) O2) {
  O0 = (XN(0) % 3)
  O2(i) max=! (A(r, N - 1 - i) + max(((XN(N - 1 - r) <= (-A(i, r))) ? (-A(i, r)) : (XN(i / 2) - XN(0))), XN(0))) where i in 0:N, r in 0:N
}""", {"fusion": "none", "parametric": True}),
    2311: ("""def fz(int32(N) XN, int32(M) XM, int32(N, M) A) -> (int32(N, M) O1) {
  T0(i, j) max=! ((XM(M - 1 - q) + (A(r, q) + (-(((XN(N - 1 - r) / 4) < XN(i)) ? XN(i) : (r * 8))))) % 97) where i in 0:N, j in 0:N, r in 0:j+1, q in 0:M
  O1(i, j) = (((((XN(i) / 5) - (XM(j) * T0(N - 1 - i, i))) == min((j % 3), j)) ? min((j % 3), j) : T0(0, N - 1 - i)) % 7) where i in 0:N, j in 0:M
}""", {"fusion": "max", "tile_sizes": (1, 3), "unroll": 3, "parallel_min_work": 0}),
}


@pytest.mark.needs_cc
@pytest.mark.parametrize("case", sorted(TC_FUZZ_1212))
@pytest.mark.parametrize("n", [1, 2, 5])
def test_reductions_and_locals_under_guards_agree_with_the_original_order(case, n):
    source, options = TC_FUZZ_1212[case]
    rng = np.random.default_rng(n)
    xn = rng.integers(-50, 50, n).astype(np.int32)
    if case == 2554:
        args = [xn, rng.integers(-50, 50, (n, n)).astype(np.int32)]
    else:
        m = n + 1
        args = [xn, rng.integers(-50, 50, m).astype(np.int32),
                rng.integers(-50, 50, (n, m)).astype(np.int32)]
    want = polycomp.compile(source, scheduler="none")(*args)
    got = polycomp.compile(source, **options)(*args)
    for w, g in zip(want if isinstance(want, tuple) else [want],
                    got if isinstance(got, tuple) else [got]):
        np.testing.assert_array_equal(g, w)


FUZZ_1212_1649 = """void kern(int N, int a0, signed char A[3 * N + 10][3 * N + 10], short B[2 * N + 6][2 * N + 10][N + 13], unsigned char C[2 * N + 16], int D[2 * N + 5][2 * N + 9][2 * N + 5]) {
  for (int i = 0; i < N - 1; i++) {
    A[(i) % 2 + 5][2 * i + 2] += ((-((-A[i + 7][2 * i + 4]) * ((i) / 2 != 2 * i + 1 || i + 1 != 4 ? 8 : A[-i + 3][2 * i + 2])))) % 1009;
    for (int j = i; j < 3 + 2; j++) {
      B[i][2 * j + 1][N - j + 4] += (((short) ((-j) * ((i) % 3 == 1 ? j : D[-i + 4][i - j + 4][j])))) % 97;
      A[-i + j + 5][j + 2] = (((((j) % 2 != 0 ? 1 : D[-j + 4][(j + 2) % 3 + 6][2 * i]) * (N < A[N - j + 4][2 * i + 2] ? A[N - j + 4][2 * i + 2] : j)) == 1 ? 1 : C[-i + 6])) % 1009;
      for (int k = 1; k < N + 1; k += 2) {
        A[i + 6][j - k + 5] = (((short) (-j)) + ((int) (C[(k + 1) % 3 + 5] - C[j - k + 5])));
        if ((k + 1) % 2 != 1) {
          for (int l = N - 1; l >= 1; l--) {
            C[i + 6] -= (-((k + l + 1) / 3 >= 2 ? (7 * B[N - l - 1][k + l - 2][N - l + 4]) : (A[i + 7][2 * k + l + 3] >= C[i + N + 7] ? C[i + N + 7] : A[l + 7][k + l + N + 2])));
          }
          if ((j + k + 2) / 2 > i - 1) {
            for (int l = 0; l < 3 + 2; l++) {
              C[k + l + 3] = A[2 * i + N + 5][l + 5];
            }
            C[2 * j + 2 * k + 7] *= (N * ((short) (A[2 * i + 5][j + k + 5] - B[j + k + 1][j + 2 * k][2 * j - k + 5])));
          } else {
            A[N - k + 4][j + 2 * k + 3] = (((k + B[2 * k - 2][j + k + 2][(i + 2) / 2 + 5]) % 3) >= 2 ? 2 : D[2 * k + 4][j + 2 * k + 4][i + 4]);
          }
        }
      }
    }
  }
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("cflags", [["-O0"], None])
def test_isls_ast_that_runs_a_dependence_backwards_is_not_used(worker, cflags):
    n = 3
    args = [ArgSpec("N", "size", "int32", n), ArgSpec("a0", "scalar", "int32", -1),
            ArgSpec("A", "array", "int8", shape=(19, 19)),
            ArgSpec("B", "array", "int16", shape=(12, 16, 16)),
            ArgSpec("C", "array", "uint8", shape=(22,)),
            ArgSpec("D", "array", "int32", shape=(11, 15, 11))]
    program = LoopCase(FUZZ_1212_1649, "kern", args, {"N": n})
    options = {"scheduler": "isl"} | ({"cflags": cflags} if cflags else {})
    outcome = worker.run(Case("loops", program, options, threads=1, seed=1212005285))
    assert outcome.status == "ok", f"{outcome.status} at {outcome.stage}: {outcome.detail}"


FUZZ_1313_854 = """void kern(int N, int M, unsigned char A[2 * N + 2 * M + 1], unsigned char B[M + 2][N + 5], long C[2 * N + M + 5], int D[2 * N + M + 1]) {
  for (int i = 0; i < M; i += 3) {
    for (int j = 0; j <= N - 1 - 1; j += 3) {
      if (i - j + 2 != M - 2) {
        if ((j) % 3 != 1) {
          for (int k = j; k < N - j; k += 3) {
            if (k >= M || (i) % 3 == 0) {
              if ((k + M + 2) / 3 == 4 || j + k + 1 < N) {
                C[-i + 4]++;
              }
            }
          }
        }
      }
    }
  }
}
"""


@pytest.mark.needs_cc
def test_an_order_check_past_its_budget_is_no_error(worker):
    n = m = 3
    args = [ArgSpec("N", "size", "int32", n), ArgSpec("M", "size", "int32", m),
            ArgSpec("A", "array", "uint8", shape=(2 * n + 2 * m + 1,)),
            ArgSpec("B", "array", "uint8", shape=(m + 2, n + 5)),
            ArgSpec("C", "array", "int64", shape=(2 * n + m + 5,)),
            ArgSpec("D", "array", "int32", shape=(2 * n + m + 1,))]
    program = LoopCase(FUZZ_1313_854, "kern", args, {"N": n, "M": m})
    outcome = worker.run(Case("loops", program, {"parametric": True}, threads=1,
                              seed=1313004793))
    assert outcome.status == "ok", f"{outcome.status} at {outcome.stage}: {outcome.detail}"
