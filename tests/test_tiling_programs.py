"""Programs and hand-built schedule trees shared by the tiling and intra-tile tests (no
tests here)."""

from __future__ import annotations

import islpy as isl

import polycomp
from polycomp import Program
from polycomp.options import Options, configure_isl
from polycomp.scheduler import compute_dependences, get_scheduler
from polycomp.scheduler import tree as T
from polycomp.scheduler.passes import run_passes


def jacobi2d(dtype: str = "float64") -> Program:
    """Two-statement jacobi-2d over T time steps (B from A, then A from B)."""
    dom = "[T, N] -> { %s[t, i, j] : 0 <= t < T and 1 <= i < N - 1 and 1 <= j < N - 1 }"
    return Program.from_isl(
        "jacobi2d", arrays={"A": (dtype, ("N", "N")), "B": (dtype, ("N", "N"))},
        statements=[
            dict(domain=dom % "S0", write="{ S0[t, i, j] -> B[i, j] }",
                 reads=["{ S0[t, i, j] -> A[i, j] }", "{ S0[t, i, j] -> A[i - 1, j] }",
                        "{ S0[t, i, j] -> A[i + 1, j] }", "{ S0[t, i, j] -> A[i, j - 1] }",
                        "{ S0[t, i, j] -> A[i, j + 1] }"],
                 body=lambda a, b, c, d, e: (a + b + c + d + e) * 0.2),
            dict(domain=dom % "S1", write="{ S1[t, i, j] -> A[i, j] }",
                 reads=["{ S1[t, i, j] -> B[i, j] }"])],
        context="[T, N] -> { : T >= 1 and N >= 3 }",
        schedule="{ S0[t, i, j] -> [t, 0, i, j]; S1[t, i, j] -> [t, 1, i, j] }")


def seidel2d(dtype: str = "int64") -> Program:
    """In-place 2-D Gauss-Seidel-like sweep on integers: every loop carries a dependence."""
    return Program.from_isl(
        "seidel2d", arrays={"A": (dtype, ("N", "N"))},
        statements=[dict(
            domain="[T, N] -> { S0[t, i, j] : 0 <= t < T and 1 <= i < N - 1 and 1 <= j < N - 1 }",
            write="{ S0[t, i, j] -> A[i, j] }",
            reads=["{ S0[t, i, j] -> A[i - 1, j] }", "{ S0[t, i, j] -> A[i, j - 1] }",
                   "{ S0[t, i, j] -> A[i + 1, j] }", "{ S0[t, i, j] -> A[i, j + 1] }"],
            body=lambda a, b, c, d: a + b + c - d)],
        context="[T, N] -> { : T >= 1 and N >= 3 }")


def transpose_add(dtype: str = "int32") -> Program:
    """B[i, j] += A[j, i]: a 2-D band where one reference has unit stride along each loop."""
    return Program.from_isl(
        "transpose_add", arrays={"A": (dtype, ("N", "M")), "B": (dtype, ("M", "N"))},
        statements=[dict(domain="[M, N] -> { S0[i, j] : 0 <= i < M and 0 <= j < N }",
                         write="{ S0[i, j] -> B[i, j] }",
                         reads=["{ S0[i, j] -> B[i, j] }", "{ S0[i, j] -> A[j, i] }"],
                         body=lambda b, a: b + a * 3)])


def row_sums(dtype: str = "float64") -> Program:
    """s[i] += A[i, j]: the only unit-stride loop (j) carries the reduction."""
    return Program.from_isl(
        "row_sums", arrays={"A": (dtype, ("M", "N")), "s": (dtype, ("M",))},
        statements=[
            dict(domain="[M] -> { S0[i] : 0 <= i < M }", write="{ S0[i] -> s[i] }", reads=[],
                 body=lambda: 0),
            dict(domain="[M, N] -> { S1[i, j] : 0 <= i < M and 0 <= j < N }",
                 write="{ S1[i, j] -> s[i] }", reads=["{ S1[i, j] -> A[i, j] }"],
                 body=lambda a: a, reduction="+")])


def band_schedule(program: Program, members: list[str], permutable: bool = True) -> isl.Schedule:
    """A schedule tree with one band (members: isl union-piecewise texts, outermost first)."""
    configure_isl()
    upas = [isl.UnionPwAff(text) for text in members]
    space = isl.Space.set_alloc(isl.DEFAULT_CONTEXT, 0, len(upas)).align_params(
        upas[0].get_space())
    listed = isl.UnionPwAffList.from_union_pw_aff(upas[0])
    for upa in upas[1:]:
        listed = listed.add(upa)
    mupa = isl.MultiUnionPwAff.from_union_pw_aff_list(space, listed)
    node = isl.Schedule.from_domain(program.domain()).insert_partial_schedule(mupa)
    return node.get_root().child(0).band_set_permutable(int(permutable)).get_schedule()


def scheduled(program: Program, **options) -> tuple[isl.Schedule, object]:
    """The schedule after the scheduler and every pass, and the dependences."""
    opts = Options.create(**options)
    configure_isl()
    deps = compute_dependences(program)
    schedule = get_scheduler(opts.scheduler)(program, deps, opts)
    return run_passes(schedule, program, deps, opts), deps


def marks(schedule: isl.Schedule, name: str) -> list[isl.ScheduleNode]:
    return [n for n in T.nodes(schedule) if T.is_mark(n, name)]


def definition(program: Program) -> polycomp.ProgramDefinition:
    return polycomp.ProgramDefinition(program)


def lu(dtype: str = "int64") -> Program:
    """LU-like triangular loop nest (sums in place of the arithmetic): the case where isl
    mixed up `separate` with `isolate` (scheduler/intratile.py)."""
    return Program.from_isl(
        "lu", arrays={"A": (dtype, ("N", "N"))},
        statements=[
            dict(domain="[N] -> { S0[i, j, k] : i < N and 0 <= j < i and 0 <= k < j }",
                 write="{ S0[i, j, k] -> A[i, j] }",
                 reads=["{ S0[i, j, k] -> A[i, k] }", "{ S0[i, j, k] -> A[k, j] }"],
                 body=lambda a, b: a + b, reduction="+"),
            dict(domain="[N] -> { S1[i, j] : 0 <= i < N and 0 <= j < i }",
                 write="{ S1[i, j] -> A[i, j] }",
                 reads=["{ S1[i, j] -> A[i, j] }", "{ S1[i, j] -> A[j, j] }"],
                 body=lambda a, b: a + b),
            dict(domain="[N] -> { S2[i, j, k] : i >= 0 and i <= j < N and 0 <= k < i }",
                 write="{ S2[i, j, k] -> A[i, j] }",
                 reads=["{ S2[i, j, k] -> A[i, k] }", "{ S2[i, j, k] -> A[k, j] }"],
                 body=lambda a, b: a + b, reduction="+")],
        schedule="{ S0[i, j, k] -> [i, 0, j, 0, k]; S1[i, j] -> [i, 0, j, 1, 0]; "
                 "S2[i, j, k] -> [i, 1, j, 0, k] }")
