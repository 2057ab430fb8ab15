"""Code generation that gcc or isl got wrong, and the guards against it.

Each case comes from /work/shared/reliability/: outlined parallel bodies that gcc 12.2
deleted (ipa-pure-const), gcc 12.2's loop distribution moving a store above a load,
isl's AST generator dropping instances of strided domains or failing on "unknown divs",
a program name that closed the header comment, and kernel names too long for a cache
file name. codegen/verify.py reads every AST back; its own tests are here too.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp
from polycomp import Program
from polycomp.build import (GCC12_AVX512VL_FLAGS, GCC12_VRP_FLAGS, MATH_ERRNO_FLAGS,
                            build_library, compiler_command, gcc_major, is_gcc)
from polycomp.codegen import ast as A
from polycomp.codegen import openmp
from polycomp.codegen.verify import check_ast, executed_instances
from polycomp.errors import InternalError
from polycomp.options import Options
from polycomp.machine_code import LINE_TABLE_FLAG

# --- gcc 12.2 deleted the calls of outlined parallel bodies ------------------------------

OUTLINED = """
void k(long X[6][10]) {
  for (int i = 3; i <= 5; i += 2)
    for (int j = 1; j < i; j++)
      X[i][j] = X[0][2 * j + 1] % 1009;
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["pluto", "none"])
def test_outlined_parallel_bodies_run(scheduler):
    x0 = np.zeros((6, 10), np.int64)
    x0[0] = -40 - np.arange(10)
    want = x0.copy()
    for i in (3, 5):
        for j in range(1, i):
            want[i, j] = int(np.fmod(want[0, 2 * j + 1], 1009))
    kernel = polycomp.compile_loops(OUTLINED, scheduler=scheduler, parallel_min_work=0)
    x = x0.copy()
    kernel(x)
    assert "POLYCOMP_OUTLINED" in kernel.c_source  # the body was outlined
    np.testing.assert_array_equal(x, want)


# --- gcc 12.2 -O3 loop distribution ------------------------------------------------------

LDIST = """
void kern(long C[7][6], long D[9][6]) {
  for (int i = 0; i <= 4; i++) {
    D[i + 1][5 - i] = C[i][i + 1];
    for (int j = 0; j <= i; j++)
      D[i + j][i] = -1;
  }
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("cflags", [None, ["-O3", "-march=native"]], ids=["default", "user-O3"])
def test_gcc_loop_distribution_is_off(cflags):
    rng = np.random.default_rng(0)
    c0, d0 = rng.integers(-50, 50, (7, 6)), rng.integers(-50, 50, (9, 6))
    want = d0.copy()
    for i in range(5):
        want[i + 1, 5 - i] = c0[i, i + 1]
        for j in range(i + 1):
            want[i + j, i] = -1
    d = d0.copy()
    polycomp.compile_loops(LDIST, cflags=cflags)(c0.copy(), d)
    np.testing.assert_array_equal(d, want)


@pytest.mark.needs_cc
def test_gcc_flags_keep_an_explicit_choice():
    compiler, _ = compiler_command(Options())
    if not is_gcc(tuple(compiler)):
        pytest.skip("the C compiler is not gcc")  # the flag is gcc's only
    vl = (list(GCC12_AVX512VL_FLAGS) + list(GCC12_VRP_FLAGS)
          if gcc_major(tuple(compiler)) == 12 else [])
    errno = list(MATH_ERRNO_FLAGS)
    lines = [LINE_TABLE_FLAG]  # line tables for the machine-code check, last
    assert compiler_command(Options())[1][-1 - len(vl) - 2] == "-fno-tree-loop-distribution"
    assert compiler_command(Options(cflags=("-O3",)))[1] == [
        "-O3", "-fno-tree-loop-distribution"] + errno + vl + lines
    chosen = ("-O3", "-ftree-loop-distribution")
    assert compiler_command(Options(cflags=chosen))[1] == list(chosen) + errno + vl + lines
    # a user's own -g is kept, and no second one is added
    assert compiler_command(Options(cflags=("-O2", "-g")))[1] == [
        "-O2", "-g", "-fno-tree-loop-distribution"] + errno + vl
    assert "-mno-avx512vl" not in compiler_command(Options(cflags=("-O3", "-mavx512vl")))[1]
    assert "-fno-tree-vrp" not in compiler_command(Options(cflags=("-O3", "-ftree-vrp")))[1]
    assert "-fno-math-errno" not in compiler_command(Options(cflags=("-O3", "-fmath-errno")))[1]


@pytest.mark.needs_cc
@pytest.mark.parametrize("cflags", [None, ["-O3", "-march=native"]], ids=["default", "user-O3"])
def test_a_vectorised_select_over_a_small_nest_is_right(cflags):
    # gcc 12.2 with AVX-512VL reused one mask for every masked load of S here (onnx's
    # PRelu case): -mno-avx512vl is added for gcc 12 (polycomp/build.py)
    kernel = polycomp.compile("def prelu(float(A, B) X, float(A, B) S) -> (Y) {\n"
                              "  Y(a, b) = X(a, b) < 0 ? S(a, b) * X(a, b) : X(a, b)\n}",
                              cflags=cflags)
    rng = np.random.default_rng(3)
    for shape in ((4, 5), (3, 7), (8, 3)):
        x = rng.standard_normal(shape).astype(np.float32)
        s = rng.uniform(0.1, 1.0, shape).astype(np.float32)
        np.testing.assert_array_equal(kernel(x, s), np.where(x < 0, s * x, x))


PADDED_COPY = """
void pad(float X[2][3][2], float P[2][4][2]) {
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 2; j++) {
        P[c][i][j] = 0;
        if (i >= 1)
          P[c][i][j] = X[c][i - 1][j];
      }
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("cflags", [None, ["-O3", "-march=native"]], ids=["default", "user-O3"])
@pytest.mark.parametrize("parallel_min_work", [None, 0])
def test_a_conditional_copy_gets_a_mask_per_row(cflags, parallel_min_work):
    # a conv's top row of padding: gcc 12.2 loaded rows 2-3 of the padded copy under the
    # mask of rows 0-1 (zeros where X's values belong); -fno-tree-vrp is added for gcc 12
    options = {} if parallel_min_work is None else {"parallel_min_work": 0}
    kernel = polycomp.compile_loops(PADDED_COPY, cflags=cflags, **options)
    x = np.arange(1, 13, dtype=np.float32).reshape(2, 3, 2)
    p = np.full((2, 4, 2), -1, dtype=np.float32)
    kernel(x, p)
    np.testing.assert_array_equal(p, np.pad(x, ((0, 0), (1, 0), (0, 0))))


PADDED_MIDDLE = """
void pad(float X[3][2], float P[5][3]) {
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++) {
      P[i][j] = 0;
      if (i >= 1 && i <= 3 && j <= 1)
        P[i][j] = X[i - 1][j];
    }
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("cflags", [None, ["-O3", "-march=native"]], ids=["default", "user-O3"])
def test_a_conditional_copy_keeps_its_middle_rows(cflags):
    # a 1-channel conv's input padded by [1, 0, 1, 1]: gcc 12.2, VRP off, vectorised the
    # row loop with masked loads and stores and dropped row 2 (-mavx2 and -march=skylake
    # alike); the printer compiles such a function without loop if-conversion
    kernel = polycomp.compile_loops(PADDED_MIDDLE, cflags=cflags)
    assert openmp.REWRITE_BEGIN in kernel.source
    x = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    p = np.full((5, 3), -1, dtype=np.float32)
    kernel(x, p)
    np.testing.assert_array_equal(p, np.pad(x, ((1, 1), (0, 1))))


# --- isl's AST generator on strided domains ----------------------------------------------

STRIDED = """
void kern(int w[13][10]) {
  int s0 = 0;
  for (int i = 0; i <= 4; i++)
    for (int j = 0; j <= 5; j++) {
      for (int k = 0; k < 5; k += 2)
        s0 += w[i - j + 5][j + 4];
      w[i + 6][j + 4] = s0;
    }
}
"""
STRIDED_SKEWED = """void kern(int A[11]) {
  for (int i = 0; i <= 6; i++)
    for (int j = 0; j <= 7; j++)
      for (int k = 1; k < 7; k += 2)
        A[i + 3] = A[j + 1];
}"""
UNKNOWN_DIVS = """void kern(long X[8][9], long A[6]) {
  long s0;
  for (int i = 0; i < 5; i++) {
    s0 = 1;
    for (int j = 0; j < 5 - i; j++)
      s0 = X[i][j];
    A[i] = s0;
  }
}"""


def _same_as_original(source: str, args, **options) -> None:
    want = [a.copy() for a in args]
    polycomp.compile_loops(source, scheduler="none", parallel=False, tile=False)(*want)
    got = [a.copy() for a in args]
    polycomp.compile_loops(source, **options)(*got)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.needs_cc
@pytest.mark.parametrize("source, args, options", [
    (STRIDED, "w", dict(tile_sizes=[1, 5])),   # compaction alone fixes it
    (STRIDED, "w", dict(tile_sizes=[5])),      # needs the "separate" rebuild
    (STRIDED_SKEWED, "a", dict(scheduler="isl")),
    (UNKNOWN_DIVS, "xa", dict(tile_sizes=[2, 5])),  # isl error: needs the flat rebuild
], ids=["tiled-1-5", "tiled-5", "isl-skewed", "unknown-divs"])
def test_strided_domains_run_every_instance(source, args, options):
    rng = np.random.default_rng(1)
    arrays = {"w": [rng.integers(-50, 50, (13, 10)).astype(np.int32)],
              "a": [np.arange(11, dtype=np.int32) * 10 - 30],
              "xa": [rng.integers(-9, 9, (8, 9)), np.zeros(6, np.int64)]}[args]
    _same_as_original(source, arrays, **options)


# the skewed band from isl's scheduler: isl's AST runs 42 of its 168 instances
SKEWED_TREE = ('{ domain: "{ S[i, j, k] : (1 + k) mod 2 = 0 and 0 <= i <= 6 and 0 <= j <= 7 '
               'and 0 < k <= 6 }", child: { schedule: "[{ S[i, j, k] -> [(41i + 5j + k)] }]", '
               'child: { schedule: "[{ S[i, j, k] -> [(i)] }, { S[i, j, k] -> [(j)] }]", '
               'permutable: 1 } } }')
UNIVERSE = isl.Set("{ : }")


def test_the_check_catches_isls_dropped_instances():
    schedule = isl.Schedule(SKEWED_TREE)
    wrong = isl.AstBuild.from_context(UNIVERSE).node_from_schedule(schedule)
    with pytest.raises(InternalError, match="codegen: .* missing"):
        check_ast(wrong, schedule.get_domain(), (), UNIVERSE, "skewed")


class _Stub:
    """The three fields of a Program that build_ast reads."""

    def __init__(self, name="p", params=(), context=UNIVERSE):
        self.name, self.params, self.context = name, params, context


def test_compacted_strides_give_a_correct_ast():
    node = A.build_ast(_Stub(), isl.Schedule(SKEWED_TREE))  # checked inside
    (instances,) = executed_instances(node, (), UNIVERSE)
    assert instances.range().is_equal(isl.Set(str(isl.Schedule(SKEWED_TREE).get_domain())))


def _ast_of_map(relation: str) -> isl.AstNode:
    return isl.AstBuild.from_context(UNIVERSE).node_from_schedule_map(isl.UnionMap(relation))


def test_instances_run_twice_or_never_are_caught():
    domain = isl.UnionSet("{ S[i] : 0 <= i < 4 }")
    check_ast(_ast_of_map("{ S[i] -> [i] : 0 <= i < 4 }"), domain, (), UNIVERSE, "once")
    with pytest.raises(InternalError, match="missing .*S\\[i = 3\\]"):
        check_ast(_ast_of_map("{ S[i] -> [i] : 0 <= i < 3 }"), domain, (), UNIVERSE, "short")
    with pytest.raises(InternalError, match="more than once"):  # one loop, two passes
        check_ast(_ast_of_map("{ S[i] -> [t, i] : 0 <= i < 4 and 0 <= t <= 1 }"),
                  domain, (), UNIVERSE, "twice")
    with pytest.raises(InternalError, match="in two places"):  # two loops
        check_ast(_ast_of_map("{ S[i] -> [0, i] : 0 <= i < 4; S[i] -> [2, 3 - i] : 0 <= i < 4 }"),
                  domain, (), UNIVERSE, "two loops")


def test_an_ast_that_runs_a_dependence_backwards_is_caught():
    """Each instance once is not enough: the order is read back too (fuzz 1212:1649)."""
    domain = isl.UnionSet("{ S[i] : 0 <= i < 4; T[i] : 0 <= i < 4 }")
    chain = isl.UnionMap("{ S[i] -> S[i + 1] : 0 <= i < 3; S[i] -> T[i] : 0 <= i < 4 }")
    forward = "{ S[i] -> [i, 0] : 0 <= i < 4; T[i] -> [i, 1] : 0 <= i < 4 }"
    assert check_ast(_ast_of_map(forward), domain, (), UNIVERSE, "ok", ordered=chain)
    with pytest.raises(InternalError, match="backwards: { S\\[x0\\] -> S\\[x0' = 1 \\+ x0\\]"):
        check_ast(_ast_of_map("{ S[i] -> [3 - i, 0] : 0 <= i < 4; T[i] -> [4, i] : 0 <= i < 4 }"),
                  domain, (), UNIVERSE, "reversed", ordered=chain)
    with pytest.raises(InternalError, match="backwards: { S\\[x0\\] -> T\\["):
        check_ast(_ast_of_map("{ S[i] -> [i, 1] : 0 <= i < 4; T[i] -> [i, 0] : 0 <= i < 4 }"),
                  domain, (), UNIVERSE, "swapped", ordered=chain)
    # the same ASTs with no dependence to keep: nothing to object to
    check_ast(_ast_of_map("{ S[i] -> [i, 1] : 0 <= i < 4; T[i] -> [i, 0] : 0 <= i < 4 }"),
              domain, (), UNIVERSE, "free")


def test_an_isl_failure_in_codegen_is_an_internal_error(monkeypatch):
    def refuse(*_):
        raise isl.Error("call to isl_ast_build_node_from_schedule failed: unknown divs")

    for attempt in ("_as_tree", "_separated", "_flattened"):
        monkeypatch.setattr(A, attempt, refuse)
    with pytest.raises(InternalError, match="^codegen: no correct isl AST for 'p'"):
        A.build_ast(_Stub(), isl.Schedule(SKEWED_TREE))


@settings(max_examples=25, deadline=None)
@given(stride=st.integers(1, 3), offset=st.integers(0, 2), n=st.integers(1, 6),
       skew=st.integers(-3, 3), tile=st.integers(1, 4))
def test_every_point_runs_once_after_compaction(stride, offset, n, skew, tile):
    """Random strided 2-d domains under a skewed, tiled schedule: the checked AST's
    instances are exactly the domain's, counted point by point."""
    domain = (f"[N] -> {{ S[i, k] : 0 <= i < N and 0 <= k < 7 and "
              f"(k - {offset}) mod {stride} = 0 }}")
    tree = (f'{{ domain: "{domain}", child: {{ schedule: '
            f'"[N] -> [{{ S[i, k] -> [(floor(({skew}i + k)/{tile}))] }}, '
            f'{{ S[i, k] -> [(i)] }}, {{ S[i, k] -> [(k)] }}]" }} }}')
    context = isl.Set(f"[N] -> {{ : N = {n} }}")
    node = A.build_ast(_Stub(params=("N",), context=context), isl.Schedule(tree))
    points = []
    for instances in executed_instances(node, ("N",), context):
        instances.range().foreach_point(points.append)
    want = sum(1 for i in range(n) for k in range(7) if (k - offset) % stride == 0)
    assert len(points) == want


# --- user names in C and in file names ---------------------------------------------------

def _copy_program(name: str) -> Program:
    return Program.from_isl(name, arrays={"A": ("float64", (4,)), "B": ("float64", (4,))},
                            statements=[dict(domain="{ S0[i] : 0 <= i < 4 }",
                                             write="{ S0[i] -> B[i] }",
                                             reads=["{ S0[i] -> A[i] }"])])


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ['*/int injected = 1;/*', "a\nint injected = 1;"])
def test_program_name_stays_inside_the_header_comment(name):
    kernel = polycomp.compile_program(_copy_program(name), cache=False)
    a, b = np.arange(4.0), np.zeros(4)
    kernel(a, b)
    header = kernel.c_source.splitlines()[0]
    assert header.startswith("/* ") and header.endswith(" */")
    assert header.count("*/") == 1 and "injected = 1" not in kernel.c_source
    np.testing.assert_array_equal(b, a)


@pytest.mark.needs_cc
def test_long_kernel_names_fit_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path))
    name = "k" * 250
    a = np.zeros(3)
    polycomp.compile_loops(f"void {name}(int n, double A[n]) "
                           "{ for (int i = 0; i < n; i++) A[i] = i; }")(3, a)
    np.testing.assert_array_equal(a, [0, 1, 2])
    library = build_library("int f(void) { return 0; }\n", "polycomp_" + "x" * 300, Options())
    assert library.exists() and all(len(p.name) < 120 for p in tmp_path.iterdir())
