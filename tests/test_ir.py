import islpy as isl
import pytest

from polycomp import Program
from polycomp.errors import OutOfBoundsError, ParseError, PolycompError
from polycomp.ir import format_statement

from programs import jacobi1d, matmul


def test_from_isl_builds_statements_and_original_order():
    p = matmul()
    assert p.params == ("M", "N", "K")
    assert [s.name for s in p.statements] == ["S0", "S1"]
    assert format_statement(p.statements[1]) == "S1: C(i, j) += A(i, k) * B(k, j)"
    expected = isl.UnionMap("[M, N, K] -> { S0[i, j] -> [0, i, j, 0] : 0 <= i < M and 0 <= j < N;"
                            " S1[i, j, k] -> [1, i, j, k] : 0 <= i < M and 0 <= j < N and 0 <= k < K }")
    assert p.original_schedule.is_equal(expected)
    # the reduction reads its own target: reads = A, B, then C
    assert [r.get_tuple_name(isl.dim_type.out) for r in p.statements[1].reads] == ["A", "B", "C"]


def test_array_bounds_set():
    p = matmul()
    assert p.array("A").bounds().is_equal(isl.Set("[M, K] -> { A[a, b] : 0 <= a < M and 0 <= b < K }"))


def test_out_of_bounds_access_names_statement_access_and_witness():
    with pytest.raises(OutOfBoundsError) as err:
        Program.from_isl("bad", arrays={"A": ("float64", ("N",)), "B": ("float64", ("N",))},
                         statements=[dict(domain="[N] -> { S0[i] : 0 <= i < N }",
                                          write="{ S0[i] -> B[i] }", reads=["{ S0[i] -> A[i + 1] }"])])
    text = str(err.value)
    assert "S0" in text and "A(i + 1)" in text
    assert "i = " in text and "N = " in text and "touches A[" in text


def test_specialize_substitutes_every_parameter():
    p = jacobi1d().specialize({"T": 4, "N": 10})
    assert p.params == ()
    assert p.statements[0].domain.is_equal(isl.Set("{ S0[t, i] : 0 <= t < 4 and 1 <= i < 9 }"))
    assert p.array("A").extents() == (10,)
    assert dict(p.sizes) == {"T": 4, "N": 10}


def test_specialize_rejects_sizes_outside_the_context():
    with pytest.raises(PolycompError, match="do not satisfy the program's constraints") as info:
        jacobi1d().specialize({"T": 4, "N": 2})
    assert "'N': 2" in str(info.value) and "N >= 3" in str(info.value)


def test_bad_isl_text_is_a_parse_error():
    with pytest.raises(ParseError):
        Program.from_isl("x", arrays={"A": ("float64", (4,))},
                         statements=[dict(domain="{ S0[i] : 0 <= i < }", write="{ S0[i] -> A[i] }")])
