"""The scheduler stage on programs where isl gives up or runs away: dependence analysis
falls back to memory-based dependences, isl's scheduler to the specialised program or to
pluto, and a runaway isl computation is stopped by a time limit (scheduler/budget.py)."""

import time
import warnings

import islpy as isl
import numpy as np
import pytest

import polycomp
from polycomp.frontend.loops import parse_c
from polycomp.scheduler import compute_dependences, isl_sched
from polycomp.scheduler.budget import SchedulerFallbackWarning, in_time_limit
from polycomp.scheduler.dependences import _memory_based
from polycomp.testing import Oracle, c_oracle, check_against_reference

from programs import jacobi1d, matmul

# isl's compute_flow fails on it ("affine expression involves some of the domain
# dimensions"): a strided loop, an if that splits the domain, a scalar written twice
STRIDED_SPLIT = """void kern(int x[1], int y[4]) {
  for (int i = 0; i < 3; i += 2)
    for (int j = 0; j < 3; j++)
      if (i != j - 1) {
        x[0] = 1;
        for (int k = 0; k < 2; k++) { x[0] = 2; y[j + k] += x[0] + k; }
      }
}"""

# isl cannot carry the dependences of the generic (N >= 0) form of this nest
UNCARRIED = """
void kern(int N, long w[N + 2][N + 2]) {
  for (int i = 1; i < N - 2; i++) {
    for (int j = 0; j < N; j += 2) w[i][j] = 3;
    for (int j = 1; j < N - 2; j++) {
      for (int k = 0; k <= N; k++) w[i + k][k] = w[i + k][k + 1];
      for (int k = 0; k < N; k++) w[N - i - 1][i + 2] = k;
    }
  }
}"""

# isl's scheduler ran for minutes on it (bignum ILP), pluto takes a second
RUNAWAY = r"""
#define N 6
void kern(int A[13], short w[9][10]) {
  int s0 = 0;
  for (int i = 0; i <= N; i++) {
    for (int j = 0; j < N - i; j++) {
      s0 = 1;
      for (int k = i + 1; k < N; k++) {
        s0 -= (A[2 * i + 2] != A[N - i + 1] ? 5 : w[k + 1][j + i + 2]);
      }
      A[j + 2] = (s0 % 1009);
    }
    for (int j = 0; j <= N - 1; j++) {
      for (int k = N - 1; k >= 0; k--) {
        A[j + 2] -= (((w[i + 1][j + 2] > j ? (2 == w[i + 1][j + 2] ? w[i + 1][N - j + 1] : 5) : (w[i + 1][j + 2] + A[i])) + w[i + 2][j + 2]) % 7);
        w[i][j] = (5 % 97);
      }
      for (int k = 1; k < N - 2; k++) {
        w[j + 2][k + 2] = (w[i + 1][j + 1] % 97);
      }
    }
  }
}
"""


def _strided_split_reference(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.zeros(1, np.int32)
    y = y.copy()
    for i in range(0, 3, 2):
        for j in range(3):
            if i != j - 1:
                x[0] = 1
                for k in range(2):
                    x[0] = 2
                    y[j + k] += x[0] + k
    return x, y


def test_dependences_of_a_split_strided_domain():
    program = parse_c(STRIDED_SPLIT).get().lower({})
    deps = compute_dependences(program)  # raised islpy's isl.Error
    # S1 (x = 2) at k = 0 runs after S0 (x = 1) of the same (i, j): an output dependence
    assert isl.UnionMap("{ S0[0, 0] -> S1[0, 0, 0] }").is_subset(deps.output)


@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["none", "pluto", "isl"])
def test_split_strided_domain_compiles_and_runs(scheduler):
    y = np.arange(4, dtype=np.int32)
    x = np.zeros(1, np.int32)
    polycomp.compile_loops(STRIDED_SPLIT, scheduler=scheduler)(x, y_got := y.copy())
    want_x, want_y = _strided_split_reference(y)
    assert x[0] == want_x[0]
    assert np.array_equal(y_got, want_y)


@pytest.mark.parametrize("make", [matmul, jacobi1d])
def test_memory_based_dependences_contain_the_exact_ones(make):
    """The fallback is conservative: every exact dependence is among the memory-based
    ones, and live-in reads are the same."""
    program = make()
    exact = compute_dependences(program)
    context = program.context
    memory = _memory_based(program, program.reads().intersect_params(context),
                           program.writes().intersect_params(context),
                           program.original_schedule.intersect_params(context))
    for (kind, small), (_, big) in zip(exact.kinds(), memory.kinds()):
        assert small.is_subset(big), kind
    assert exact.live_in.is_equal(memory.live_in)


@pytest.mark.needs_cc
def test_isl_scheduler_falls_back_to_the_specialised_program():
    definition = parse_c(UNCARRIED).get()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SchedulerFallbackWarning)  # no pluto needed
        result = check_against_reference(definition, {"N": 4}, {"scheduler": "isl"},
                                         oracle=(oracle := c_oracle(UNCARRIED, definition)))
    assert result.agreed == [oracle.name, "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
def test_isl_scheduler_past_its_time_limit_falls_back_to_pluto(monkeypatch):
    monkeypatch.setattr(isl_sched, "TIME_LIMIT", 0.5)
    definition = parse_c(RUNAWAY).get()
    # the limit that fired is the one the warning names, and pluto's schedule is right
    with pytest.warns(SchedulerFallbackWarning,
                      match=r"ran for more than 0\.5 s\); scheduled with pluto"):
        result = check_against_reference(definition, {}, {"scheduler": "isl"},
                                         oracle=(oracle := c_oracle(RUNAWAY, definition)))
    assert result.agreed == [oracle.name, "scheduler=none"], result.mismatches


def test_time_limit_returns_text_none_or_timeout():
    assert in_time_limit(lambda: "ok", 5) == "ok"
    assert in_time_limit(lambda: 1 // 0, 5) is None  # noqa: B008 (raises in the child)
    big = "x" * 300_000  # more than a pipe holds at once
    assert in_time_limit(lambda: big, 5) == big
    with pytest.raises(TimeoutError, match=r"no result within 0\.3 s"):
        in_time_limit(lambda: time.sleep(30) or "late", 0.3)


# the parallel pass marks the inner (point) member of a fused band; the intra-tile pass
# must not sink that band below the sequence (the mark would sit above a sequence)
FUSED_TC = """def f(int32(6) D, int32(4) A) -> (O) {
    T0(i) +=! D(k) where i in 0:4
    T1(i) = A(i)
    O(i) +=! T0(i) + T1(k)
}"""
FUSED_LOOPS = """
void kern(int T, int tmp[6]) {
  for (int t = 0; t < T; t++) {
    tmp[3] = t;
    for (int i = 1; i <= 2; i++)
      tmp[i - 1] = i * 2;
    tmp[3] += t;
    for (int i = 0; i < 4; i++)
      tmp[i + 1] += t;
  }
}
"""


@pytest.mark.needs_cc
def test_parallel_mark_stays_above_its_band_tc():
    kernel = polycomp.compile(FUSED_TC, sizes={}, fusion="max", parallel_min_work=0)
    # O(i) = sum over k of (T0(i) + A(k)) = 4 * sum(D) + sum(A)
    oracle = Oracle("numpy", lambda D, A: {"O": np.full(4, 4 * D.sum() + A.sum(), np.int32)})
    result = check_against_reference(kernel.definition, {}, kernel.options, oracle=oracle)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
def test_parallel_mark_stays_above_its_band_loops():
    definition = parse_c(FUSED_LOOPS).get()
    result = check_against_reference(definition, {"T": 3}, {"parametric": True},
                                     oracle=(oracle := c_oracle(FUSED_LOOPS, definition)))
    assert result.agreed == [oracle.name, "scheduler=none"], result.mismatches


# pluto relaxed the strided dependence pieces of this nest (constants 99, 100 are
# "sizes") by copying their constraints without the div terms: (1 + n + i) mod 2 = 0
# became 1 + n + i = 0, and the parametric schedule broke a flow dependence
STRIDED_PARAMETRIC = """
void band(int n, int m, int A[n][m]) {
  int s;
  for (int i = n - 1; i >= 0; i -= 2)
    for (int j = max(0, i - 2); j < min(m, i + 3); j++) {
      s = A[i][j];
      if (i < j || i == 0) A[i][j] = s;
      else A[i][100 * j] = 3;
    }
}"""


def test_sizes_never_relax_a_piece_with_divisions():
    from polycomp.scheduler.farkas import Sizes
    poly = isl.Set("[n] -> { [i, j] : (1 + n + i) mod 2 = 0 and 0 <= i < n and j <= 99 }")
    sizes = Sizes.of([poly], ["n"])
    assert sizes.names  # 99 is a large constant
    assert sizes.relax(poly) is None
    plain = isl.Set("[n] -> { [i, j] : 0 <= i < n and j <= 99 }")
    assert plain.is_subset(sizes.relax(plain).project_out(isl.dim_type.param, 1, 1))


def test_pluto_parametric_schedule_of_a_strided_nest_is_legal():
    from polycomp.options import Options
    from polycomp.scheduler.legality import check_schedule
    from polycomp.scheduler.pluto import schedule_pluto
    program = parse_c(STRIDED_PARAMETRIC).get().lower(None)
    deps = compute_dependences(program)
    check_schedule(schedule_pluto(program, deps, Options.create(parametric=True)), deps)


@pytest.mark.needs_cc
def test_pluto_parametric_strided_nest_runs():
    definition = parse_c(STRIDED_PARAMETRIC).get()
    result = check_against_reference(definition, {"n": 5, "m": 700}, {"parametric": True},
                                     oracle=(oracle := c_oracle(STRIDED_PARAMETRIC,
                                                                definition)))
    assert result.agreed == [oracle.name, "scheduler=none"], result.mismatches


GEMM = """void gemm(int ni, int nj, int nk, double alpha, double C[ni][nj], double A[ni][nk], double B[nk][nj]) {
  for (int i = 0; i < ni; i++) {
    for (int j = 0; j < nj; j++) C[i][j] *= 0.5;
    for (int k = 0; k < nk; k++)
      for (int j = 0; j < nj; j++) C[i][j] += alpha * A[i][k] * B[k][j];
  }
}"""


def _unrolled_copies(schedule: isl.Schedule) -> list[int]:
    """Per fully unrolled band: statement copies isl writes (values per member, times
    statements)."""
    from polycomp.scheduler import tree as T
    out = []
    for node in T.nodes(schedule):
        if T.is_band(node) and all(node.band_member_get_ast_loop_type(k) == isl.ast_loop_type.unroll
                                   for k in range(node.band_n_member())):
            copies = len(U_sets(node.get_domain()))
            for k in range(node.band_n_member()):
                values = isl.Set.from_union_set(T.member_union_map(node, k).range())
                copies *= values.dim_max_val(0).to_python() - values.dim_min_val(0).to_python() + 1
            out.append(copies)
    return out


def U_sets(uset):
    from polycomp import islutil as U
    return U.sets_of(uset)


@pytest.mark.parametrize("unroll", [4, 64])
def test_unrolled_copies_are_bounded(unroll):
    from polycomp.driver import schedule_program
    from polycomp.options import Options
    from polycomp.scheduler.intratile import MAX_UNROLLED_COPIES
    program = parse_c(GEMM).get().lower(None)
    options = Options.create(parametric=True, unroll=unroll)
    copies = _unrolled_copies(schedule_program(program, compute_dependences(program), options))
    assert copies  # gemm's register tiles are unrolled
    assert max(copies) <= MAX_UNROLLED_COPIES


def test_isolate_of_full_register_tiles_is_bounded(monkeypatch):
    """Past its isl operation budget the isolate option is dropped, not waited for."""
    from polycomp.scheduler import intratile
    monkeypatch.setattr(intratile, "ISOLATE_OPERATIONS", 10)
    program = parse_c(GEMM).get().lower(None)
    from polycomp.driver import schedule_program
    from polycomp.options import Options
    schedule = schedule_program(program, compute_dependences(program),
                                Options.create(parametric=True, unroll=4))
    from polycomp.scheduler import tree as T
    assert all(node.band_get_ast_isolate_option().is_empty()
               for node in T.nodes(schedule) if T.is_band(node))
    assert isl.DEFAULT_CONTEXT.get_max_operations() == 0  # the budget is lifted again


def test_isl_errors_in_the_scheduler_stage_name_the_stage(monkeypatch):
    from polycomp.errors import InternalError
    from polycomp.options import Options
    from polycomp.scheduler import get_scheduler, passes

    def broken(*args):
        return isl.Set("{ [i] : ")  # isl.Error: a parse error standing for any isl failure

    program = matmul()
    deps = compute_dependences(program)
    monkeypatch.setattr(isl_sched, "schedule_isl", broken)
    with pytest.raises(InternalError, match="scheduler 'isl' failed"):
        get_scheduler("isl")(program, deps, Options())
    monkeypatch.setattr(passes, "PASSES", [("tiling", broken)])
    with pytest.raises(InternalError, match="the tiling pass failed"):
        passes.run_passes(get_scheduler("none")(program, deps, Options()), program, deps,
                          Options())
