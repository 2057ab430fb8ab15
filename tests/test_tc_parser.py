"""TC frontend: parsing and lowering of each language feature (frontend/tc).

Structural tests: domains and access maps are compared with isl sets and maps written
out in the test (``is_equal``), shapes with PwAffs, bodies with expression trees.
"""

from __future__ import annotations

import islpy as isl
import pytest
from polycomp.frontend.tc import parse

from polycomp import expr as E
from polycomp.errors import ArgumentError, PolycompError, RangeInferenceError, UnsupportedError
from polycomp.ir import ScalarArg, TensorArg

MATMUL = """
def matmul(float(M, K) A, float(K, N) B) -> (C) {
  C(m, n) +=! A(m, k) * B(k, n)
}
"""



def conv(stride: int) -> str:
    return ("def conv2d(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {\n"
            f"  O(n, m, h, w) +=! I(n, c, {stride}*h + kh, {stride}*w + kw) * Wt(m, c, kh, kw)\n"
            "}\n")


def lower(src: str, sizes=None, entry=None):
    return parse(src).get(entry).lower(sizes)


def same_set(actual: isl.Set, expected: str) -> None:
    assert actual.is_equal(isl.Set(expected)), f"{actual} != {expected}"


def same_map(actual: isl.Map, expected: str) -> None:
    assert actual.is_equal(isl.Map(expected)), f"{actual} != {expected}"


def same_extent(program, array: str, expected: list[str]) -> None:
    """Parametric extents, compared inside the program's context."""
    shape = program.array(array).shape
    assert len(shape) == len(expected)
    for pa, text in zip(shape, expected):
        want = isl.PwAff(text).intersect_params(program.context)
        got = pa.intersect_params(program.context)
        assert got.is_equal(want), f"{pa} != {text}"


# ----------------------------------------------------------------------------- matmul

def test_matmul_parametric_domains_maps_and_interface():
    d = parse(MATMUL).get(None)
    assert d.name == "matmul"
    assert d.interface.inputs == (TensorArg("A", "float32", ("M", "K")),
                                  TensorArg("B", "float32", ("K", "N")))
    assert d.interface.outputs == ("C",)
    p = d.lower()
    assert p.params == ("M", "K", "N")
    init, update = p.statements
    assert (init.name, update.name) == ("S0", "S1")
    same_set(init.domain, "[M, K, N] -> { S0[m, n] : 0 <= m < M and 0 <= n < N }")
    same_set(update.domain, "[M, K, N] -> { S1[m, n, k] : 0 <= m < M and 0 <= n < N "
                            "and 0 <= k < K }")
    same_map(update.write, "[M, K, N] -> { S1[m, n, k] -> C[m, n] }")
    assert len(update.reads) == 3
    same_map(update.reads[0], "[M, K, N] -> { S1[m, n, k] -> A[m, k] }")
    same_map(update.reads[1], "[M, K, N] -> { S1[m, n, k] -> B[k, n] }")
    same_map(update.reads[2], "[M, K, N] -> { S1[m, n, k] -> C[m, n] }")
    assert update.reduction == "+" and init.reduction is None
    assert init.reads == () and init.expr == E.Const(0, "float32")
    assert update.expr == E.Binary("mul", E.Access("A", (E.Iter("m"), E.Iter("k")), "float32"),
                                   E.Access("B", (E.Iter("k"), E.Iter("n")), "float32"), "float32")
    assert update.target.loc is not None and update.target.loc.line == 3
    assert [(a.name, a.role) for a in p.arrays] == [("A", "input"), ("B", "input"),
                                                    ("C", "output")]
    same_extent(p, "C", ["[M, K, N] -> { [(M)] }", "[M, K, N] -> { [(N)] }"])
    same_set(p.context, "[M, K, N] -> { : M >= 1 and K >= 1 and N >= 1 }")
    schedule = isl.UnionMap("[M, K, N] -> { S0[m, n] -> [0, m, n, 0]; "
                            "S1[m, n, k] -> [1, m, n, k] }")
    assert p.original_schedule.intersect_domain(p.domain()).is_equal(
        schedule.intersect_domain(p.domain()))


def test_matmul_specialised_is_constant():
    p = lower(MATMUL, {"M": 4, "N": 5, "K": 6})
    assert p.params == ()
    assert dict(p.sizes) == {"M": 4, "N": 5, "K": 6}
    same_set(p.statements[1].domain, "{ S1[m, n, k] : 0 <= m < 4 and 0 <= n < 5 and 0 <= k < 6 }")
    assert [a.extents() for a in p.arrays] == [(4, 6), (6, 5), (4, 5)]
    for s in p.statements:
        assert s.domain.dim(isl.dim_type.param) == 0
        assert all(r.dim(isl.dim_type.param) == 0 for r in s.reads)


def test_specialize_of_parametric_equals_direct_specialisation():
    d = parse(conv(2)).get(None)
    sizes = {"N": 2, "C": 3, "H": 9, "W": 8, "M": 4, "KH": 3, "KW": 2}
    a, b = d.lower().specialize(sizes), d.lower(sizes)
    for s, t in zip(a.statements, b.statements):
        assert s.domain.is_equal(t.domain)
    assert [x.extents() for x in a.arrays] == [x.extents() for x in b.arrays]


# ----------------------------------------------------------------------------- inferred shapes

def test_conv2d_stride1_shapes_and_context():
    d = parse(conv(1)).get(None)
    p = d.lower()
    same_extent(p, "O", ["[N, C, H, W, M, KH, KW] -> { [(N)] }",
                         "[N, C, H, W, M, KH, KW] -> { [(M)] }",
                         "[N, C, H, W, M, KH, KW] -> { [(H - KH + 1)] }",
                         "[N, C, H, W, M, KH, KW] -> { [(W - KW + 1)] }"])
    assert p.context.is_subset(isl.Set("[H, KH, W, KW] -> { : H >= KH and W >= KW }"))
    same_set(p.statements[1].domain,
             "[N, C, H, W, M, KH, KW] -> { S1[n, m, h, w, c, kh, kw] : 0 <= n < N and 0 <= m < M "
             "and 0 <= h <= H - KH and 0 <= w <= W - KW and 0 <= c < C and 0 <= kh < KH "
             "and 0 <= kw < KW }")
    s = d.lower({"N": 1, "C": 2, "H": 8, "W": 7, "M": 3, "KH": 3, "KW": 2})
    assert s.array("O").extents() == (1, 3, 6, 6)


def test_conv2d_stride2_shape_is_floor():
    d = parse(conv(2)).get(None)
    p = d.lower()
    same_extent(p, "O", ["[N, C, H, W, M, KH, KW] -> { [(N)] }",
                         "[N, C, H, W, M, KH, KW] -> { [(M)] }",
                         "[N, C, H, W, M, KH, KW] -> { [(floor((H - KH)/2) + 1)] }",
                         "[N, C, H, W, M, KH, KW] -> { [(floor((W - KW)/2) + 1)] }"])
    same_map(p.statements[1].reads[0], "[N, C, H, W, M, KH, KW] -> { S1[n, m, h, w, c, kh, kw] "
                                       "-> I[n, c, 2h + kh, 2w + kw] }")
    for h, kh, out in ((9, 3, 4), (8, 3, 3), (3, 3, 1), (7, 1, 4)):
        sizes = {"N": 1, "C": 1, "H": h, "W": h, "M": 1, "KH": kh, "KW": kh}
        assert d.lower(sizes).array("O").extents()[2:] == (out, out)


def test_stride_by_integer_parameter_needs_sizes():
    src = """def conv(float(N, C, H, W) I, float(M, C, KH, KW) Wt, int32 S) -> (O) {
      O(n, m, h, w) +=! I(n, c, S*h + kh, S*w + kw) * Wt(m, c, kh, kw)
    }"""
    d = parse(src).get(None)
    assert d.interface.inputs[2] == ScalarArg("S", "int32", True)
    assert "S" in d.sizes
    with pytest.raises(UnsupportedError, match="parametric mode") as info:
        d.lower()
    assert info.value.location.line == 2
    p = d.lower({"N": 1, "C": 1, "H": 9, "W": 9, "M": 1, "KH": 3, "KW": 3, "S": 2})
    assert p.params == () and p.array("O").extents() == (1, 1, 4, 4)
    same_map(p.statements[1].reads[0], "{ S1[n, m, h, w, c, kh, kw] -> I[n, c, 2h + kh, 2w + kw] }")
    assert p.scalars == ()  # S is only used in indices


def test_size_times_index_is_a_stride_too():
    d = parse("def f(float(N) A, float(M) B) -> (O) { O(i) = A(M*i) + B(0) }").get(None)
    with pytest.raises(UnsupportedError, match="parametric"):
        d.lower()
    assert d.lower({"N": 10, "M": 3}).array("O").extents() == (4,)


def test_pooling_where_ranges():
    src = """def maxpool(float(N, C, H, W) I) -> (O) {
      O(n, c, h, w) max=! I(n, c, 2*h + kh, 2*w + kw) where kh in 0:2, kw in 0:2
    }"""
    p = lower(src)
    same_set(p.statements[1].domain,
             "[N, C, H, W] -> { S1[n, c, h, w, kh, kw] : 0 <= n < N and 0 <= c < C and "
             "0 <= 2h <= H - 2 and 0 <= 2w <= W - 2 and 0 <= kh < 2 and 0 <= kw < 2 }")
    same_extent(p, "O", ["[N, C, H, W] -> { [(N)] }", "[N, C, H, W] -> { [(C)] }",
                         "[N, C, H, W] -> { [(floor(H/2))] }",
                         "[N, C, H, W] -> { [(floor(W/2))] }"])
    assert p.statements[0].expr == E.Const(-float("inf"), "float32")
    assert p.statements[1].reduction == "max"


def test_triangular_where_range_depends_on_index():
    src = "def tri(float(N, N) A) -> (O) { O(i) +=! A(i, k) where k in 0:i+1 }"
    p = lower(src)
    init, update = p.statements
    same_set(update.domain, "[N] -> { S1[i, k] : 0 <= i < N and 0 <= k <= i }")
    same_set(init.domain, "[N] -> { S0[i] : 0 <= i < N }")
    same_extent(p, "O", ["[N] -> { [(N)] }"])


def test_empty_reduction_rows_are_still_initialised():
    p = lower("def f(float(N, N) A) -> (O) { O(i) +=! A(i, k) where k in 0:i }")
    same_set(p.statements[0].domain, "[N] -> { S0[i] : 0 <= i < N }")
    same_set(p.statements[1].domain, "[N] -> { S1[i, k] : 0 <= k < i < N }")


def test_triangular_bound_limits_the_other_index():
    # A is N x K: for all k <= i, A(i, k) in bounds means i < min(N, K)
    p = lower("def f(float(N, K) A) -> (O) { O(i) +=! A(i, k) where k in 0:i+1 }")
    same_set(p.statements[0].domain, "[N, K] -> { S0[i] : 0 <= i < N and i < K }")


# ----------------------------------------------------------------------------- statements

@pytest.mark.parametrize("op,dtype,identity", [
    ("+=!", "float32", 0), ("*=!", "float32", 1), ("max=!", "float32", -float("inf")),
    ("min=!", "float64", float("inf")), ("max=!", "int32", -(2**31)), ("min=!", "int8", 127)])
def test_init_update_split(op, dtype, identity):
    p = lower(f"def f({dtype}(N, M) A) -> (O) {{ O(i) {op} A(i, j) }}")
    init, update = p.statements
    assert init.expr == E.Const(identity, dtype)
    assert init.reads == () and init.reduction is None
    assert update.reduction == op[:-2]
    same_map(update.reads[-1], "[N, M] -> { S1[i, j] -> O[i] }")
    same_map(init.write, "[N, M] -> { S0[i] -> O[i] }")
    assert p.array("O").dtype == dtype


def test_reduction_without_init_after_a_write():
    p = lower("def f(float(N, M) A) -> (O) { O(i) = 1 where i in 0:N\n O(i) += A(i, j) }")
    assert [s.reduction for s in p.statements] == [None, "+"]
    assert len(p.statements) == 2
    same_map(p.statements[1].reads[-1], "[N, M] -> { S1[i, j] -> O[i] }")


def test_statement_reads_its_own_left_side_after_a_write():
    p = lower("def f(float(N) A, float(N) B) -> (O) {\n O(i) = A(i); O(i) = O(i) + B(i)\n}")
    same_map(p.statements[1].reads[0], "[N] -> { S1[i] -> O[i] }")
    same_map(p.statements[1].reads[1], "[N] -> { S1[i] -> B[i] }")


def test_several_statements_temporaries_and_roles():
    src = """
    def softmax(float(N, C) X) -> (O) {
      mx(n) max=! X(n, c)
      e(n, c) = exp(X(n, c) - mx(n))
      s(n) +=! e(n, c)
      O(n, c) = e(n, c) / s(n)
    }"""
    p = lower(src)
    assert [s.name for s in p.statements] == [f"S{k}" for k in range(6)]
    assert [(a.name, a.role) for a in p.arrays] == [
        ("X", "input"), ("O", "output"), ("mx", "temporary"), ("e", "temporary"),
        ("s", "temporary")]
    same_extent(p, "e", ["[N, C] -> { [(N)] }", "[N, C] -> { [(C)] }"])
    same_extent(p, "s", ["[N, C] -> { [(N)] }"])
    same_set(p.statements[2].domain, "[N, C] -> { S2[n, c] : 0 <= n < N and 0 <= c < C }")
    assert p.statements[2].expr.func == "exp"


def test_typed_output_bounds_its_left_side():
    p = lower("def f(float(N) A) -> (float64(N) B) { B(i) = 0 }")
    assert p.array("B").dtype == "float64"
    assert p.statements[0].expr == E.Const(0.0, "float64")
    same_set(p.statements[0].domain, "[N] -> { S0[i] : 0 <= i < N }")


def test_separators_comments_and_newlines():
    src = """# a comment
    def f(float(N) A) -> (B, C) {   # outputs
      B(i) = A(i) ;;  C(i) = A(i) * 2   # two statements on one line
      ;
    }
    """
    p = lower(src)
    assert [s.target.array for s in p.statements] == ["B", "C"]


def test_integer_dims_repeated_sizes_and_scalars():
    d = parse("def f(float(4, N) X, float(N, N) Y, float eps, int32 S) -> (Z) "
              "{ Z(i, j) = X(i, j) * Y(j, j) + eps + S }").get(None)
    assert d.interface.inputs == (TensorArg("X", "float32", (4, "N")),
                                  TensorArg("Y", "float32", ("N", "N")),
                                  ScalarArg("eps", "float32", False),
                                  ScalarArg("S", "int32", False))
    p = d.lower()
    assert p.params == ("N",)
    assert p.scalars == (ScalarArg("eps", "float32", False), ScalarArg("S", "int32", False))
    same_extent(p, "Z", ["[N] -> { [(4)] }", "[N] -> { [(N)] }"])


def test_integer_parameter_used_as_size_and_value():
    d = parse("def f(float(N) A, int32 P) -> (B) { B(i) = A(i + P) * P where i in 0:N - P }"
              ).get(None)
    p = d.lower()
    assert p.params == ("N", "P")
    assert p.scalars == (ScalarArg("P", "int32", True),)
    same_set(p.context, "[N, P] -> { : 0 <= P < N }")
    assert isinstance(p.statements[0].expr.rhs, E.Scalar)
    assert d.lower({"N": 10, "P": 3}).array("B").extents() == (7,)


# ----------------------------------------------------------------------------- where clauses

def test_let_bindings_are_substituted():
    p = lower("def f(float(N) A) -> (O) { O(i) = t * t + u where t = A(i) * 2, u = t - 1 }")
    s = p.statements[0]
    a = E.Access("A", (E.Iter("i"),), "float32")
    t = E.Binary("mul", a, E.Const(2.0, "float32"), "float32")
    u = E.Binary("sub", t, E.Const(1.0, "float32"), "float32")
    assert s.expr == E.Binary("add", E.Binary("mul", t, t, "float32"), u, "float32")
    assert len(s.reads) == 3


def test_let_binding_in_an_index():
    p = lower("def f(float(N) A) -> (O) { O(i) = A(j) where j = N - 1 - i }")
    same_map(p.statements[0].reads[0], "[N] -> { S0[i] -> A[N - 1 - i] }")
    same_set(p.statements[0].domain, "[N] -> { S0[i] : 0 <= i < N }")


def test_exists_bounds_without_reading():
    d = parse("def f(float(N) A, float(M) B) -> (O) { O(i) = A(i) where exists B(i) }").get(None)
    p = d.lower()
    same_set(p.statements[0].domain, "[N, M] -> { S0[i] : 0 <= i < N and i < M }")
    assert len(p.statements[0].reads) == 1
    assert "B(i) (exists)" in d.explain_ranges()


def test_where_ranges_are_affine_in_sizes_and_tk():
    p = lower("def f(float(N, M) A) -> (O) { O(i, j) = A(i, j) where i in 1:A.0 - 1, j in 0:M }")
    same_set(p.statements[0].domain, "[N, M] -> { S0[i, j] : 1 <= i < N - 1 and 0 <= j < M }")
    same_extent(p, "O", ["[N, M] -> { [(N - 1)] }", "[N, M] -> { [(M)] }"])


# ----------------------------------------------------------------------------- expressions

def body(src: str, sizes=None):
    return lower(src, sizes).statements[-1].expr


@pytest.mark.parametrize("rhs,expected", [
    ("A(i) * 2", E.Binary("mul", E.Access("A", (E.Iter("i"),), "float32"),
                          E.Const(2.0, "float32"), "float32")),
    ("D(i) + 0.5", E.Binary("add", E.Access("D", (E.Iter("i"),), "float64"),
                            E.Const(0.5, "float64"), "float64")),
    ("I(i) * 2", E.Binary("mul", E.Access("I", (E.Iter("i"),), "int32"),
                          E.Const(2, "int32"), "int32")),
    ("I(i) * 0.5", E.Binary("mul", E.Access("I", (E.Iter("i"),), "int32"),
                            E.Const(0.5, "float32"), "float32")),
    ("A(i) + 1 / 2", E.Binary("add", E.Access("A", (E.Iter("i"),), "float32"),
                              E.Const(0.0, "float32"), "float32")),
    ("A(i) + -7 % 3 * 2.5", E.Binary("add", E.Access("A", (E.Iter("i"),), "float32"),
                                     E.Const(-2.5, "float32"), "float32")),
    ("A(i) > 0", E.Binary("gt", E.Access("A", (E.Iter("i"),), "float32"),
                          E.Const(0.0, "float32"), "bool")),
    ("fmax(A(i), 0)", E.Call("fmax", (E.Access("A", (E.Iter("i"),), "float32"),
                                      E.Const(0.0, "float32")), "float32")),
    ("A(i) + D(i)", E.Binary("add", E.Access("A", (E.Iter("i"),), "float32"),
                             E.Access("D", (E.Iter("i"),), "float64"), "float64")),
    ("float(I(i))", E.Cast(E.Access("I", (E.Iter("i"),), "int32"), "float32")),
    ("I(i) > 0 ? 1 : 2.5", E.Select(E.Binary("gt", E.Access("I", (E.Iter("i"),), "int32"),
                                             E.Const(0, "int32"), "bool"),
                                    E.Const(1.0, "float32"), E.Const(2.5, "float32"), "float32")),
    ("exp(I(i))", E.Call("exp", (E.Cast(E.Access("I", (E.Iter("i"),), "int32"), "float32"),),
                         "float32")),
])
def test_expression_typing(rhs, expected):
    src = f"def f(float(N) A, float64(N) D, int32(N) I) -> (O) {{ O(i) = {rhs} }}"
    assert body(src) == expected


@pytest.mark.parametrize("rhs,dtype", [
    ("1", "int32"), ("2.5", "float32"), ("1 + 2.5", "float32"), ("3000000000", "int64"),
    ("true", "bool"), ("1 < 2", "bool"), ("int8(5)", "int8"), ("double(1)", "float64"),
    ("i", "int64"), ("N", "int64"), ("A.0 * 2", "int64")])
def test_untyped_output_takes_the_type_of_its_value(rhs, dtype):
    p = lower(f"def f(float(N) A) -> (O) {{ O(i) = {rhs} where i in 0:N }}")
    assert p.array("O").dtype == dtype
    assert p.statements[0].expr.dtype == dtype


def test_literal_takes_the_output_type():
    p = lower("def f(int8(N) A) -> (int8(N) O, float16(N) P) { O(i) = 7; P(i) = 1 }")
    assert p.statements[0].expr == E.Const(7, "int8")
    assert p.statements[1].expr == E.Const(1.0, "float16")


def test_tk_lowers_to_sizes():
    src = "def f(float(N, M) A) -> (O) { O(i) = A(i, A.1 - 1) * A.0 }"
    p = lower(src)
    same_map(p.statements[0].reads[0], "[N, M] -> { S0[i] -> A[i, M - 1] }")
    assert p.statements[0].expr.rhs == E.Param("N")
    q = lower(src, {"N": 3, "M": 7})
    assert q.statements[0].expr.rhs == E.Const(3, "int64")
    same_map(q.statements[0].reads[0], "{ S0[i] -> A[i, 6] }")


def test_tk_of_a_temporary_uses_its_inferred_shape():
    src = "def f(float(N, K) A) -> (O) { T(i) +=! A(i, k)\n O(i) = T(i) / T.0 }"
    p = lower(src)
    assert p.statements[2].expr.rhs == E.Param("N")


def test_index_arithmetic_floor_division():
    p = lower("def f(float(N) A) -> (O) { O(i) = A(i / 2) }")
    same_map(p.statements[0].reads[0], "[N] -> { S0[i] -> A[floor(i/2)] }")
    same_set(p.statements[0].domain, "[N] -> { S0[i] : 0 <= i < 2N }")
    assert p.array("O").extents({"N": 5}) == (10,)
    # i % 2 < N excludes i = 1 when N = 1
    q = lower("def f(float(N) A) -> (O) { O(i) = A(i / 2) + A(i % 2) }")
    same_set(q.statements[0].domain, "[N] -> { S0[i] : 0 <= i < 2N and (N >= 2 or i = 0) }")


def test_gather_read_covers_the_whole_dimension():
    src = "def emb(float(V, D) T, int32(B, L) Idx) -> (O) { O(b, l, d) = T(Idx(b, l), d) }"
    p = lower(src)
    s = p.statements[0]
    same_map(s.reads[0], "[V, D, B, L] -> { S0[b, l, d] -> T[x, d] : 0 <= x < V }")
    same_map(s.reads[1], "[V, D, B, L] -> { S0[b, l, d] -> Idx[b, l] }")
    assert [a.array for a in E.accesses(s.expr)] == ["T", "Idx"]
    assert s.expr.indices[0] == E.Access("Idx", (E.Iter("b"), E.Iter("l")), "int32")
    same_set(s.domain, "[V, D, B, L] -> { S0[b, l, d] : 0 <= b < B and 0 <= l < L and 0 <= d < D }")
    q = lower(src, {"V": 10, "D": 4, "B": 2, "L": 3})
    same_map(q.statements[0].reads[0], "{ S0[b, l, d] -> T[x, d] : 0 <= x < 10 }")


# ----------------------------------------------------------------------------- zero rank, defs

def test_zero_rank_input_and_output():
    src = "def dot(float(N) X, float() w) -> (s) { s() +=! X(i) * X(i) * w }"
    d = parse(src).get(None)
    assert d.interface.inputs[1] == TensorArg("w", "float32", ())
    p = d.lower()
    init, update = p.statements
    same_set(init.domain, "{ S0[] }")
    same_set(update.domain, "[N] -> { S1[i] : 0 <= i < N }")
    same_map(update.write, "[N] -> { S1[i] -> s[] }")
    same_map(update.reads[2], "[N] -> { S1[i] -> w[] }")
    assert p.array("s").shape == () and p.array("w").rank == 0


def test_several_defs_and_gradient_metadata():
    src = """
    def first(float(N) A) -> (B) { B(i) = A(i) } <=> first_grad(A, B)
    def second(float(N) A) -> (C) { C(i) = A(i) + 1 }
    """
    m = parse(src, file="two.tc")
    assert list(m.defs) == ["first", "second"]
    assert m.get("first").gradient == "first_grad"
    assert m.get("first").gradient_args == ("A", "B")
    assert m.get("second").gradient is None
    assert m.get("second").lower({"N": 3}).statements[0].target.array == "C"
    with pytest.raises(PolycompError, match="first, second"):
        m.get(None)
    with pytest.raises(PolycompError, match="did you mean 'second'"):
        m.get("secnd")


def test_isl_keyword_names_are_renamed():
    src = "def f(float(mod, max) A) -> (B) { B(and, i) = A(and, i) + float(and) }"
    d = parse(src).get(None)
    assert d.interface.inputs[0].dims == ("mod_", "max_")
    p = d.lower()
    assert p.params == ("mod_", "max_")
    same_set(p.statements[0].domain,
             "[mod_, max_] -> { S0[and_, i] : 0 <= and_ < mod_ and 0 <= i < max_ }")
    isl.Set(str(p.statements[0].domain))  # prints and parses back
    assert d.lower({"mod": 2, "max": 3}).array("B").extents() == (2, 3)


# ----------------------------------------------------------------------------- reports

def test_explain_ranges_names_the_bounding_access():
    d = parse(MATMUL).get(None)
    text = d.explain_ranges()
    assert "S1: k in 0:K  (bounded by A(m, k), dimension 1 of A; B(k, n), dimension 0 of B)" in text
    assert "S0: m in 0:M  (bounded by A(m, k), dimension 0 of A)" in text
    assert "S1: m in 0:4" in d.explain_ranges({"M": 4, "N": 5, "K": 6})
    text = parse(conv(1)).get(None).explain_ranges()
    assert "h in 0:H - KH + 1  (round 2: bounded by I(n, c, 1*h + kh, 1*w + kw)" in text
    tri = parse("def t(float(N, N) A) -> (O) { O(i) +=! A(i, k) where k in 0:i+1 }").get(None)
    assert "S1: k in 0:i+1  (where clause)" in tri.explain_ranges()


def test_statement_sources():
    d = parse("def f(float(N, M) A) -> (O, P) {\n O(i) +=! A(i, j)\n P(i) = O(i) }").get(None)
    assert d.statement_sources() == [("S0", "O(i) +=! A(i, j)"), ("S1", "O(i) +=! A(i, j)"),
                                     ("S2", "P(i) = O(i)")]


# ----------------------------------------------------------------------------- sizes

def test_sizes_errors():
    d = parse(conv(1)).get(None)
    with pytest.raises(ArgumentError, match="no value for size"):
        d.lower({"N": 1})
    with pytest.raises(ArgumentError, match="at least 1"):
        d.lower({"N": 0, "C": 1, "H": 5, "W": 5, "M": 1, "KH": 3, "KW": 3})
    with pytest.raises(ArgumentError, match="empty"):
        d.lower({"N": 1, "C": 1, "H": 2, "W": 5, "M": 1, "KH": 3, "KW": 3})


def test_ambiguous_range_is_reported():
    with pytest.raises(RangeInferenceError, match="ambiguous") as info:
        parse("def f(float(N) A) -> (B) { B(i) +=! A(i + j) }")
    assert (info.value.location.line, info.value.location.column) == (1, 37)


def test_single_dimension_fallback_and_rounds():
    # A(i, i + j): i is bounded by dimension 0 once nothing else is left; j then by B and A
    p = lower("def f(float(N, K) A, float(M) B) -> (O) { O(i) +=! A(i, i + j) * B(j) }")
    same_set(p.statements[1].domain,
             "[N, K, M] -> { S1[i, j] : 0 <= j < M and 0 <= i < N and i + M <= K }")
