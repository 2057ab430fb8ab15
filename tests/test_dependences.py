import islpy as isl

from polycomp.scheduler import compute_dependences

from programs import jacobi1d, matmul


def test_matmul_flow_is_value_based():
    deps = compute_dependences(matmul())
    expected = isl.UnionMap(
        "[M, N, K] -> { S0[i, j] -> S1[i, j, 0] : 0 <= i < M and 0 <= j < N and K > 0;"
        " S1[i, j, k] -> S1[i, j, k + 1] : 0 <= i < M and 0 <= j < N and 0 <= k < K - 1 }")
    assert deps.flow.is_equal(expected)
    # output dependences to the next write of C[i, j] only (every other conflict is a chain)
    assert deps.output.is_equal(expected)
    assert deps.anti.is_equal(isl.UnionMap(
        "[M, N, K] -> { S1[i, j, k] -> S1[i, j, k + 1] : 0 <= i < M and 0 <= j < N and 0 <= k < K - 1 }"))
    # A and B are read without a source: live-in
    assert not deps.live_in.is_empty()


def test_jacobi_dependences_and_printout():
    deps = compute_dependences(jacobi1d())
    flow = deps.flow
    # S0 at (t, i) reads A[i +- 1] written by S1 at (t - 1, i +- 1)
    assert isl.UnionMap("[T, N] -> { S1[t, i] -> S0[t + 1, i + 1] : 0 <= t < T - 1 and 1 <= i < N - 2 }"
                        ).is_subset(flow)
    # anti: S0 reads A[i] before S1 overwrites it in the same step
    assert isl.UnionMap("[T, N] -> { S0[t, i] -> S1[t, i] : 0 <= t < T and 1 <= i < N - 1 }"
                        ).is_subset(deps.anti)
    text = str(deps)
    assert "flow" in text and "anti" in text and "S1 -> S0" in text
