"""The C printer against isl's own printer, and a schedule that isl's AST generator
got wrong (found by adi at MEDIUM under scheduler="isl").

The printer test replaces every statement by a call that hashes its name and iteration
vector, prints the same isl AST twice (codegen/openmp.py and isl's to_C_str), runs both and
compares the instance sequences: a misplaced brace or else shows up as a different
sequence even where it would not change a result.
"""

import ctypes
import subprocess

import cgen
import numpy as np
import pytest

import polycomp
from polycomp.codegen.cexpr import Helpers
from polycomp.codegen.openmp import OpenMPPrinter
from polycomp.codegen.ast import build_ast

# two statements with no dependence between them, so that any order is legal
SOURCE = """
void k(double A[3][200][200], double B[3][200][200]) {
  for (int t = 1; t <= 2; t++)
    for (int i = 1; i <= 198; i++) {
      for (int j = 1; j <= 198; j++) A[t][i][j] = t + 2.0 * i + 3.0 * j;
      for (int j = 198; j >= 1; j--) B[t][i][j] = t - i + 0.5 * j;
    }
}
"""
DOMAIN = "1 <= t <= 2 and 1 <= i <= 198 and 1 <= j <= 198"


def _tree(*bands: str) -> str:
    """A schedule tree of nested one-member bands, each given as "S0 expr; S1 expr"."""
    text = ""
    for band in reversed(bands):
        s0, s1 = band.split(";")
        members = f'[{{ S0[t, i, j] -> [({s0.strip()})]; S1[t, i, j] -> [({s1.strip()})] }}]'
        text = f'child: {{ schedule: "{members}"' + (", " + text if text else "") + " }"
    return f'{{ domain: "{{ S0[t, i, j] : {DOMAIN}; S1[t, i, j] : {DOMAIN} }}", {text} }}'


# isl's scheduler put 788t + j outside a permutable band [-j, i]: -j is a function of
# the outer loop. Untiled, isl writes the right code for it.
ADI_LIKE = (
    f'{{ domain: "{{ S0[t, i, j] : {DOMAIN}; S1[t, i, j] : {DOMAIN} }}", '
    'child: { schedule: "[{ S0[t, i, j] -> [(788t + j)]; S1[t, i, j] -> [(790 + 788t - j)] }]", '
    'child: { schedule: "[{ S0[t, i, j] -> [(-j)]; S1[t, i, j] -> [(-j)] }, '
    '{ S0[t, i, j] -> [(i)]; S1[t, i, j] -> [(i)] }]", permutable: 1, coincident: [ 1, 1 ], '
    'child: { schedule: "[{ S0[t, i, j] -> [(2)]; S1[t, i, j] -> [(j)] }]" } } } }')
# tiled by 40: the AST has an `if (..) for (..) if (..) S; else ..` that needs braces in C,
# and isl's AST generator computes the degenerate point loop (-j) mod 40 wrongly
ADI_LIKE_TILED = _tree("788t + j; 790 + 788t - j", "floor((-j)/40); floor((-j)/40)",
                       "floor((i)/198); floor((i)/198)", "(-j) mod 40; (-j) mod 40",
                       "(i) mod 198; (i) mod 198", "2; j")

TRACE_PRELUDE = r"""
#include <stdint.h>
static uint64_t H = 1469598103934665603ULL, N = 0;
static void TR(int s, int n, const long *v)
{
  N++;
  H = (H ^ (uint64_t)s) * 1099511628211ULL;
  for (int k = 0; k < n; k++)
    H = (H ^ (uint64_t)v[k]) * 1099511628211ULL;
}
#define S0(...) TR(0, 3, (long[]){__VA_ARGS__})
#define S1(...) TR(1, 3, (long[]){__VA_ARGS__})
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
static inline long polycomp_imax(long a, long b) { return a > b ? a : b; }
static inline long polycomp_imin(long a, long b) { return a < b ? a : b; }
void reset(void) { H = 1469598103934665603ULL; N = 0; }
uint64_t hash(void) { return H; }
uint64_t count(void) { return N; }
"""


class _TracingEmitter(OpenMPPrinter):
    """The OpenMP target's printer with each statement replaced by a trace call."""

    def _user(self, call):
        name = call.get_op_arg(0).get_id().get_name()
        values = [self._expr(call.get_op_arg(k + 1)).code for k in range(call.get_op_n_arg() - 1)]
        return cgen.Statement(f"{name}({', '.join(values)})")


def _traces(program, schedule, tmp_path) -> dict[str, tuple[int, int]]:
    import islpy as isl  # noqa: PLC0415

    node = build_ast(program, isl.Schedule.read_from_str(isl.DEFAULT_CONTEXT, schedule))
    emitter = _TracingEmitter(program, {p: p for p in program.params}, Helpers())
    ours = str(emitter.emit(node))
    assert not emitter.outlined  # no marks in these trees: one function each
    source = (TRACE_PRELUDE + "void run_polycomp(void)\n{\n" + ours + "\n}\n"
              + "void run_isl(void)\n{\n" + node.to_C_str() + "\n}\n")
    (tmp_path / "trace.c").write_text(source)
    lib = tmp_path / "trace.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "trace.c")],
                   check=True, capture_output=True)
    so = ctypes.CDLL(str(lib))
    so.hash.restype = so.count.restype = ctypes.c_uint64
    out = {}
    for run in ("run_polycomp", "run_isl"):
        so.reset()
        getattr(so, run)()
        out[run] = (so.hash(), so.count())
    return out


@pytest.mark.needs_cc
@pytest.mark.parametrize("schedule", [ADI_LIKE, ADI_LIKE_TILED], ids=["untiled", "tiled"])
def test_printed_c_runs_the_instances_of_isls_own_printout_in_its_order(schedule, tmp_path):
    program = polycomp.compile_loops(SOURCE, scheduler="none").program
    traces = _traces(program, schedule, tmp_path)
    assert traces["run_polycomp"] == traces["run_isl"]


@pytest.mark.needs_cc
def test_a_member_fixed_by_the_loops_around_it_is_not_tiled():
    """Tiling -j under 788t + j gave isl's AST generator a modulo of the outer loop to
    solve for, which it solved wrongly: 78012 of 78408 writes of A went missing. The
    tiling pass now leaves such members alone, so the pipeline's code is right."""
    ref = polycomp.compile_loops(SOURCE, scheduler="none")
    want = [np.zeros((3, 200, 200)) for _ in range(2)]
    ref(*want)
    for sizes in [(40,), (40, 198)]:
        kernel = polycomp.compile_loops(SOURCE, scheduler="custom", schedule=ADI_LIKE,
                                        tile_sizes=sizes)
        got = [np.zeros((3, 200, 200)) for _ in range(2)]
        kernel(*got)
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), sizes
