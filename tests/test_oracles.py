"""polycomp.testing's independent oracles: a definition from C checked against its own
text under the C compiler at -O0, a TC definition against numpy, and each disagreement
reported under the check that saw it (an oracle that cannot fail checks nothing)."""

import pytest

import polycomp
from polycomp.frontend.loops import parse_c
from polycomp.testing import Oracle, c_oracle, check_against_reference

# floats through a math call and min/max (the oracle's prelude declares them), an
# integer recurrence compared bit for bit
SMOOTH = """
void smooth(int n, double a, double x[n], double y[n], int c[n]) {
  for (int i = 1; i < n - 1; i++) {
    y[i] = a * x[i] + sqrt(x[i - 1]) + max(y[i], y[i + 1]);
    c[i] = c[i - 1] * 3 + c[i];
  }
}"""

MM = "def mm(int32(M, K) A, int32(K, N) B) -> (C) { C(i, j) +=! A(i, k) * B(k, j) }"
MM_SIZES = {"M": 5, "K": 7, "N": 6}


@pytest.mark.needs_cc
def test_a_c_definition_agrees_with_its_text_under_gcc_o0():
    definition = parse_c(SMOOTH).get()
    oracle = c_oracle(SMOOTH, definition)
    assert "-O0" in oracle.name.split()
    result = check_against_reference(definition, {"n": 40}, {"scheduler": "isl"}, oracle=oracle)
    assert result.agreed == [oracle.name, "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
def test_the_c_oracle_sees_what_the_original_order_cannot():
    # as if the frontend had read `+ c[i]` as `- c[i]`: both compilations share the
    # misreading, only the C compiler's own reading of the text tells
    definition = parse_c(SMOOTH).get()
    oracle = c_oracle(SMOOTH.replace("* 3 + c[i]", "* 3 - c[i]"), definition)
    result = check_against_reference(definition, {"n": 40}, {"scheduler": "isl"}, oracle=oracle)
    assert result.agreed == ["scheduler=none"]
    assert [m.split(":")[0] for m in result.checks[oracle.name]] == ["c"]


@pytest.mark.needs_cc
def test_a_tc_definition_agrees_with_numpy_bit_for_bit():
    definition = polycomp.compile(MM).definition
    options = {"scheduler": "isl", "tile_sizes": (2, 4, 2)}
    result = check_against_reference(definition, MM_SIZES, options,
                                     oracle=Oracle("numpy", lambda A, B: {"C": A @ B}))
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches
    # one unit off in one value is a disagreement for integers
    def off_by_one(A, B):
        C = A @ B
        C[0, 0] += 1
        return {"C": C}
    result = check_against_reference(definition, MM_SIZES, options,
                                     oracle=Oracle("numpy", off_by_one))
    assert result.checks == {"numpy": ["C: 1 of 30 values differ"], "scheduler=none": []}
    assert not result.ok


@pytest.mark.needs_cc
def test_an_oracle_must_name_every_output_and_leave_inputs_alone():
    definition = polycomp.compile(MM).definition
    result = check_against_reference(definition, MM_SIZES, {"scheduler": "isl"},
                                     oracle=Oracle("numpy", lambda A, B: {}))
    assert result.checks["numpy"] == ["C: the oracle gave no value"]
    # an oracle that writes an input the kernel only reads disagrees with the kernel
    result = check_against_reference(
        definition, MM_SIZES, {"scheduler": "isl"},
        oracle=Oracle("numpy", lambda A, B: {"C": A @ B, "A": A + 1, "Z": A}))
    assert result.checks["numpy"] == ["A: 35 of 35 values differ",
                                      "Z: the oracle gave a value the kernel does not produce"]
