import numpy as np
import pytest

import polycomp
from polycomp.codegen.cexpr import constant
from polycomp.codegen.names import c_name

from programs import jacobi1d, matmul, seidel1d


def test_c_names_keep_plain_names_and_escape_the_rest_injectively():
    assert c_name("A") == "A"
    assert c_name("weights_1") == "weights_1"
    names = ["for", "u_for", "exp", "c0", "conv1/weight:0", "conv1_2fweight_3a0", "_x", "S0"]
    escaped = [c_name(n) for n in names]
    assert len(set(escaped)) == len(names)
    assert all(e.isidentifier() for e in escaped)
    assert c_name("for") != "for" and c_name("exp") != "exp" and c_name("c0") != "c0"


def test_constants_are_typed_literals():
    assert constant(1.5, "float32").code == "1.5f"
    assert constant(2, "float64").code == "2.0"
    assert constant(float("-inf"), "float32").code == "-INFINITY"
    assert constant(2**63 - 1, "int64").code.endswith("LL")
    assert constant(True, "bool").code == "true"


@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["none", "isl"])
@pytest.mark.parametrize("parametric", [False, True])
def test_matmul_from_isl_matches_numpy(scheduler, parametric):
    # 33 x 17 x 29 is below the default parallel_min_work: ask for the region anyway
    kernel = polycomp.compile_program(matmul(), scheduler=scheduler, parametric=parametric,
                                      parallel_min_work=0)
    rng = np.random.default_rng(1)
    a, b = rng.random((33, 17), np.float32), rng.random((17, 29), np.float32)
    c = np.full((33, 29), 5.0, np.float32)
    assert kernel(a, b, c) is None
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "#pragma omp parallel for" in kernel.c_source
    assert ("long M" in kernel.c_source) == parametric


@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["none", "isl"])
def test_integer_programs_are_bit_identical(scheduler):
    program = seidel1d()
    a = np.arange(40, dtype=np.int64) % 7
    want = a.copy()
    with np.errstate(over="ignore"):  # int64 wraps around in C and in numpy alike
        for _ in range(3):
            for i in range(1, 39):
                want[i] = want[i - 1] * 3 + want[i + 1]
    kernel = polycomp.compile_program(program, scheduler=scheduler)
    got = a.copy()
    kernel(3, got)  # T is no array's extent: it comes first, as an integer
    assert np.array_equal(got, want)


@pytest.mark.needs_cc
def test_jacobi_matches_numpy():
    kernel = polycomp.compile_program(jacobi1d(), sizes={"T": 5, "N": 50})
    a = np.linspace(0, 1, 50)
    b = np.zeros(50)
    ref_a, ref_b = a.copy(), b.copy()
    for _ in range(5):
        ref_b[1:-1] = (ref_a[:-2] + ref_a[1:-1] + ref_a[2:]) * 0.33333
        ref_a[1:-1] = ref_b[1:-1]
    kernel(5, a, b)
    np.testing.assert_allclose(a, ref_a, rtol=1e-12)


@pytest.mark.needs_cc
def test_a_parallel_mark_on_a_member_with_one_value_parallelises_no_deeper_loop():
    # the marked member floor(t/64) takes one value for T < 64: isl writes no loop for it,
    # and the loop found below the mark is t's, which carries every dependence
    from polycomp.scheduler.legality import check_schedule

    tree = ('{ domain: "{ S0[t, i] : 0 <= t < 20 and 1 <= i < 49 }", child: '
            '{ mark: "omp_parallel", child: { schedule: "[{ S0[t, i] -> [(floor((t)/64))] }]",'
            ' child: { schedule: "[{ S0[t, i] -> [(t)] }, { S0[t, i] -> [(i)] }]" } } } }')
    kernel = polycomp.compile_program(seidel1d(), scheduler="custom", schedule=tree,
                                      sizes={"T": 20, "N": 50}, tile=False, vectorize=False,
                                      unroll=0)
    check_schedule(kernel.schedule, kernel.dependences)  # the mark itself is legal
    assert "omp parallel" not in kernel.c_source
    a = np.arange(50, dtype=np.int64)
    got, want = a.copy(), a.copy()
    kernel(20, got)
    polycomp.compile_program(seidel1d(), scheduler="none")(20, want)
    assert np.array_equal(got, want)
