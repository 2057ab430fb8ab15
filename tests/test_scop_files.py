"""Whole C files in, as PPCG takes them (frontend/loops/wholefile.py, splice.py, the CLI).

A small program in PolyBench's style -- its own header with the sizes and macros, glibc
headers, a ``main`` harness, the kernel's ``#pragma scop`` region -- goes through
``polycomp compile FILE.c``; the written file is built with gcc (with and without
-fopenmp) and must print what the original prints.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import polycomp
from polycomp.cli import main
from polycomp.errors import NonAffineError, ParseError, PolycompError
from polycomp.frontend.loops import WholeFileModule, parse_c

CC = os.environ.get("CC", "gcc").split()

HEADER = """\
#ifndef MINI_H
# define MINI_H
# if !defined(N)
#  define N 37
# endif
# define DATA_TYPE double
# define _PB_N n
# define ARRAY_2D(v, d1, d2) v[d1][d2]
# define SQRT_FUN(x) sqrt(x)
#endif
"""

PROGRAM = """\
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "mini.h"

static void init(int n, DATA_TYPE ARRAY_2D(A, N, N), DATA_TYPE x[N])
{
  for (int i = 0; i < n; i++) {
    x[i] = (DATA_TYPE) (i % 7) / 7.0 + 1.0;
    for (int j = 0; j < n; j++)
      A[i][j] = (DATA_TYPE) ((i * j + 3) % n) / n;
  }
}

/* the kernel: a chained assignment, a local scalar, a math macro */
static
void kernel_mini(int n, DATA_TYPE alpha,
                 DATA_TYPE ARRAY_2D(A, N, N), DATA_TYPE x[N], DATA_TYPE y[N])
{
  int i, j;
  DATA_TYPE s, t;
#pragma scop
  for (i = 0; i < _PB_N; i++) {
    s = t = 0.0;
    for (j = 0; j < _PB_N; j++)
      s += A[i][j] * x[j];
    y[i] = alpha * SQRT_FUN(s) + t;
  }
  for (i = 1; i < _PB_N - 1; i++)
    for (j = 0; j < _PB_N; j++)
      A[i][j] = A[i - 1][j] + y[i] * A[i + 1][j];
#pragma endscop
}

int main(int argc, char **argv)
{
  int n = N;
  __attribute__((unused)) FILE *out = stdout;
  DATA_TYPE (*A)[N][N] = malloc(sizeof(*A));
  DATA_TYPE x[N], y[N];
  init(n, *A, x);
  kernel_mini(n, 1.5, *A, x, y);
  for (int i = 0; i < n; i++) {
    printf("%.17g\\n", y[i]);
    for (int j = 0; j < n; j++)
      printf("%.17g ", (*A)[i][j]);
  }
  free(A);
  return 0;
}
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "mini.h").write_text(HEADER)
    path = tmp_path / "mini.c"
    path.write_text(PROGRAM)
    return path


def build_and_run(source: Path, *flags: str) -> str:
    binary = source.with_suffix(".bin" + str(abs(hash(flags))))
    subprocess.run([*CC, "-O2", "-ffp-contract=off", *flags, "-I", str(source.parent),
                    str(source), "-lm", "-o", str(binary)], check=True, capture_output=True)
    return subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout


def test_a_whole_file_goes_through_the_preprocessor(program: Path):
    module = parse_c(program.read_text(), file=str(program))
    assert isinstance(module, WholeFileModule)
    assert list(module.functions) == ["kernel_mini"]  # main and init are never parsed
    definition = module.get()
    assert [a.name for a in definition.interface.inputs] == ["n", "alpha", "A", "x", "y"]
    assert definition.interface.inputs[2].dims == (37, 37)
    assert module.whole.call_arguments("kernel_mini")[0] == 37


def test_defines_reach_the_preprocessor(program: Path):
    module = parse_c(program.read_text(), file=str(program), defines=["N=12"])
    assert module.get().interface.inputs[2].dims == (12, 12)


def reference(n: int, alpha: float, A: np.ndarray, x: np.ndarray) -> tuple:
    A, y = A.copy(), np.zeros(n)
    for i in range(n):
        y[i] = alpha * np.sqrt(A[i] @ x)
    for i in range(1, n - 1):
        A[i] = A[i - 1] + y[i] * A[i + 1]
    return A, y


@pytest.mark.needs_cc
def test_compile_loops_takes_a_whole_file(program: Path):
    kernel = polycomp.compile_loops(program.read_text(), file=str(program))
    agrees_with_reference(kernel, 37, 1.5)


def agrees_with_reference(kernel: polycomp.Kernel, n: int, alpha: float) -> None:
    rng = np.random.default_rng(n)
    A, x, y = rng.random((n, n)), rng.random(n), np.zeros(n)
    want_A, want_y = reference(n, alpha, A, x)
    kernel(n, alpha, A, x, y)
    np.testing.assert_allclose(y, want_y, rtol=1e-12)
    np.testing.assert_allclose(A, want_A, rtol=1e-12)


@pytest.mark.needs_cc
def test_compile_loops_takes_include_dirs_and_defines(program: Path, tmp_path: Path):
    # the header is found only through include_dirs; N comes from defines
    (tmp_path / "inc").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "inc" / "mini.h").write_text(HEADER)
    text = program.read_text()
    file = str(tmp_path / "src" / "copy.c")
    with pytest.raises(ParseError):
        polycomp.compile_loops(text, file=file)
    kernel = polycomp.compile_loops(text, file=file, include_dirs=[str(tmp_path / "inc")],
                                    defines=["N=12"])
    assert kernel.definition.interface.inputs[2].dims == (12, 12)
    agrees_with_reference(kernel, 12, 0.5)
    with pytest.raises(PolycompError):
        polycomp.compile_loops(text, include_dirs="utilities")


@pytest.mark.needs_cc
@pytest.mark.parametrize("extra", [[], ["--sizes", "n=10"], ["--parametric"]],
                         ids=["harness-sizes", "other-sizes", "parametric"])
def test_cli_writes_the_whole_file_back(program: Path, extra: list[str]):
    """Specialised to the harness's n = 37, to n = 10 (the guard runs the original code
    for the harness's 37), or parametric: the output prints what the original prints,
    with OpenMP and without."""
    out = program.with_name("mini.polycomp.c")
    assert main(["compile", str(program), "-o", str(out), *extra]) == 0
    text = out.read_text()
    assert '#include "mini.h"' in text and "int main(int argc" in text  # the harness stays
    assert "#pragma scop" not in text and "polycomp_kernel_mini(" in text
    guard = {"harness-sizes": "n == 37", "other-sizes": "n == 10", "parametric": None}
    expected = guard["parametric" if "--parametric" in extra else
                     "other-sizes" if extra else "harness-sizes"]
    assert (f"if ({expected})" in text) if expected else "if (n ==" not in text
    want = build_and_run(program)
    assert build_and_run(out, "-fopenmp") == want
    assert build_and_run(out) == want


@pytest.mark.needs_cc
def test_cli_replaces_a_named_function_body(tmp_path: Path):
    """Without '#pragma scop' the function named by --entry is the region."""
    path = tmp_path / "body.c"
    path.write_text(PROGRAM.replace("#pragma scop\n", "").replace("#pragma endscop\n", "")
                    .replace('#include "mini.h"', HEADER))
    out = tmp_path / "body.polycomp.c"
    assert main(["compile", str(path), "--entry", "kernel_mini", "-o", str(out)]) == 0
    assert "if (n == 37)" in out.read_text()
    assert build_and_run(out, "-fopenmp") == build_and_run(path)


def test_errors_point_at_the_users_line(program: Path):
    text = program.read_text().replace("s += A[i][j] * x[j];", "s += A[i][j * i] * x[j];")
    with pytest.raises(NonAffineError) as info:
        parse_c(text, file=str(program)).get()
    assert info.value.location.line == PROGRAM.splitlines().index(
        "      s += A[i][j] * x[j];") + 1
    assert "A[i][j * i]" in (info.value.location.source_line or "")


def test_a_missing_header_is_a_parse_error(tmp_path: Path):
    path = tmp_path / "lonely.c"
    path.write_text(PROGRAM)  # no mini.h beside it
    with pytest.raises(ParseError, match="preprocessor failed"):
        parse_c(path.read_text(), file=str(path))
    assert main(["compile", str(path)]) == 1


def test_no_scop_and_several_functions_asks_for_a_name(tmp_path: Path, program: Path):
    text = PROGRAM.replace("#pragma scop\n", "").replace("#pragma endscop\n", "")
    with pytest.raises(PolycompError, match="no function of the file has a '#pragma scop'"):
        parse_c(text, file=str(program)).get()


def test_parametric_compile_has_a_time_limit(program: Path, capsys):
    assert main(["compile", str(program), "--parametric", "--time-limit", "0.001"]) == 1
    err = capsys.readouterr().err
    assert "took longer than 0.001 s" in err and "--sizes" in err


def test_sizes_from_the_harness_only_when_constant(program: Path):
    text = program.read_text().replace("int n = N;", "int n = argc > 5 ? 3 : N;")
    module = parse_c(text, file=str(program))
    assert module.whole.call_arguments("kernel_mini")[0] is None
    again = program.read_text().replace("init(n, *A, x);", "init(n, *A, x); n = n - 1;")
    assert parse_c(again, file=str(program)).whole.call_arguments("kernel_mini")[0] is None


# ----------------------------------------------------------------------------- chains

CHAIN = """
void chain(int n, double A[n], double B[n], float F[n], double k)
{
  double a1, a5;
  float f;
  for (int i = 0; i < n; i++) {
    a1 = a5 = k * i;
    A[i] = B[i] = a1 + a5;
    A[i] += f = 0.1 * i;
    F[i] = f;
  }
}
"""


@pytest.mark.needs_cc
def test_chained_assignments_are_sequenced_as_c_does():
    """``a = b = e`` is ``b = e; a = b``: the outer target gets the inner one's value,
    converted (``A[i] += f = 0.1 * i`` adds the float, not the double)."""
    kernel = polycomp.compile_loops(CHAIN, scheduler="none")
    n = 6
    A, B, F = np.zeros(n), np.zeros(n), np.zeros(n, np.float32)
    kernel(n, A, B, F, 2.5)
    i = np.arange(n)
    f = (0.1 * i).astype(np.float32)
    np.testing.assert_array_equal(B, 2 * 2.5 * i)
    np.testing.assert_array_equal(A, 2 * 2.5 * i + f.astype(np.float64))
    np.testing.assert_array_equal(F, f)
