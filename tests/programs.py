"""Programs built through the research door (Program.from_isl), shared by tests."""

from __future__ import annotations

from polycomp import Program


def matmul(dtype: str = "float32") -> Program:
    return Program.from_isl(
        "mm", arrays={"A": (dtype, ("M", "K")), "B": (dtype, ("K", "N")), "C": (dtype, ("M", "N"))},
        statements=[
            dict(domain="[M, N] -> { S0[i, j] : 0 <= i < M and 0 <= j < N }",
                 write="{ S0[i, j] -> C[i, j] }", reads=[], body=lambda: 0),
            dict(domain="[M, N, K] -> { S1[i, j, k] : 0 <= i < M and 0 <= j < N and 0 <= k < K }",
                 write="{ S1[i, j, k] -> C[i, j] }",
                 reads=["{ S1[i, j, k] -> A[i, k] }", "{ S1[i, j, k] -> B[k, j] }"],
                 body=lambda a, b: a * b, reduction="+")])


def jacobi1d(dtype: str = "float64") -> Program:
    """Two-statement jacobi-1d over T time steps (the classic time-iterated stencil)."""
    return Program.from_isl(
        "jacobi1d", arrays={"A": (dtype, ("N",)), "B": (dtype, ("N",))},
        statements=[
            dict(domain="[T, N] -> { S0[t, i] : 0 <= t < T and 1 <= i < N - 1 }",
                 write="{ S0[t, i] -> B[i] }",
                 reads=["{ S0[t, i] -> A[i - 1] }", "{ S0[t, i] -> A[i] }",
                        "{ S0[t, i] -> A[i + 1] }"],
                 body=lambda a, b, c: (a + b + c) * 0.33333),
            dict(domain="[T, N] -> { S1[t, i] : 0 <= t < T and 1 <= i < N - 1 }",
                 write="{ S1[t, i] -> A[i] }", reads=["{ S1[t, i] -> B[i] }"])],
        context="[T, N] -> { : T >= 1 and N >= 3 }",
        schedule="{ S0[t, i] -> [t, 0, i]; S1[t, i] -> [t, 1, i] }")


def seidel1d(dtype: str = "int64") -> Program:
    """In-place 1-D Gauss-Seidel-like sweep on integers (loop-carried in i and t)."""
    return Program.from_isl(
        "seidel1d", arrays={"A": (dtype, ("N",))},
        statements=[dict(domain="[T, N] -> { S0[t, i] : 0 <= t < T and 1 <= i < N - 1 }",
                         write="{ S0[t, i] -> A[i] }",
                         reads=["{ S0[t, i] -> A[i - 1] }", "{ S0[t, i] -> A[i + 1] }"],
                         body=lambda a, b: a * 3 + b)],
        context="[T, N] -> { : T >= 1 and N >= 3 }")
