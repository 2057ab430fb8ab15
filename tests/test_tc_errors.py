"""TC frontend: a corpus of malformed programs, each with its error class and position.

Every case asserts the PolycompError subclass, the line and column the error points at,
that the message renders a caret excerpt under that column, and that there is a hint.
"""

from __future__ import annotations

import pytest
from polycomp.frontend.tc import parse

from polycomp.errors import (
    ArgumentError,
    DefinitionOrderError,
    DuplicateNameError,
    NonAffineError,
    OutOfBoundsError,
    ParseError,
    PolycompError,
    RangeInferenceError,
    RankMismatchError,
    TypeMismatchError,
    UnknownNameError,
    UnsupportedError,
)

HEAD = "def f(float(N, M) A, int32(N) I, float s) -> (B) {\n"  # statements start on line 2

# (name, source, error class, line, column, sizes to lower with: None = parse only,
#  "param" = parametric lowering, or a dict)
CASES = [
    # ---------------------------------------------------------------- syntax
    ("missing arrow", "def f(float(N) A) (B) {\n  B(i) = A(i)\n}", ParseError, 1, 19, None),
    ("bad character", HEAD + "  B(i) = A(i, 0) $ 2\n}", ParseError, 2, 18, None),
    ("unbalanced paren", HEAD + "  B(i) = (A(i, 0) + 1\n}", ParseError, 3, 1, None),
    ("missing brace", HEAD + "  B(i) = A(i, 0)\n", ParseError, 3, 1, None),
    ("lhs expression", HEAD + "  B(i + 1) = A(i, 0)\n}", ParseError, 2, 5, None),
    ("minus-assign", HEAD + "  B(i) -= A(i, 0)\n}", ParseError, 2, 8, None),
    ("missing operator", HEAD + "  B(i) A(i, 0)\n}", ParseError, 2, 8, None),
    ("malformed number", HEAD + "  B(i) = A(i, 0) * 2x\n}", ParseError, 2, 20, None),
    ("huge literal", HEAD + "  B(i) = A(i, 0) * 123456789012345678901234\n}", ParseError, 2, 20,
     None),
    ("unknown type", "def f(flaot(N) A) -> (B) {\n  B(i) = A(i)\n}", ParseError, 1, 7, None),
    ("exists needs an access", HEAD + "  B(i) = A(i, 0) where exists i + 1\n}", ParseError, 2,
     31, None),
    ("dimension number", HEAD + "  B(i) = A(i, 0) * A.x\n}", ParseError, 2, 22, None),
    ("deep nesting", HEAD + "  B(i) = " + "(" * 10000 + "A(i, 0)" + ")" * 10000 + "\n}",
     ParseError, 2, None, None),
    ("long chain", HEAD + "  B(i) = " + "A(i, 0) + " * 400 + "1\n}", ParseError, 2, 10, None),
    ("where clause", HEAD + "  B(i) = A(i, 0) where 3\n}", ParseError, 2, 24, None),
    # ---------------------------------------------------------------- names
    ("unknown tensor", HEAD + "  B(i) = X(i, 0)\n}", UnknownNameError, 2, 10, None),
    ("unknown function", HEAD + "  B(i) = exq(A(i, 0))\n}", UnknownNameError, 2, 10, None),
    ("unknown value name", HEAD + "  B(i) = A(i, 0) + q\n}", UnknownNameError, 2, 20, None),
    ("unused range", HEAD + "  B(i) = A(i, 0) where j in 0:3\n}", UnknownNameError, 2, 24,
     None),
    ("unknown output size", "def f(float(N) A) -> (float(Q) B) {\n  B(i) = A(i)\n}",
     UnknownNameError, 1, 29, None),
    ("exists unknown index", HEAD + "  B(i) = A(i, 0) where exists A(i, z)\n}", UnknownNameError,
     2, 36, None),
    ("binding used as tensor", HEAD + "  B(i) = t(i) where t = A(i, 0)\n}", UnknownNameError,
     2, 10, None),
    ("two entries", ("def f(float(N) A) -> (B) { B(i) = A(i) }\n"
                     "def g(float(N) A) -> (B) { B(i) = A(i) }"), UnknownNameError, 1, 1, "get"),
    # ---------------------------------------------------------------- duplicates
    ("two params", "def f(float(N) A, float(N) A) -> (B) {\n  B(i) = A(i)\n}",
     DuplicateNameError, 1, 28, None),
    ("output is input", "def f(float(N) A) -> (A) {\n  A(i) = 1\n}", DuplicateNameError, 1,
     23, None),
    ("two defs", ("def f(float(N) A) -> (B) { B(i) = A(i) }\n\n"
                  "def f(float(N) A) -> (B) { B(i) = A(i) }"), DuplicateNameError, 3, 5, None),
    ("index named like tensor", HEAD + "  B(A) = I(A)\n}", DuplicateNameError, 2, 5, None),
    ("binding named like tensor", HEAD + "  B(i) = A(i, 0) where I = 2\n}", DuplicateNameError,
     2, 24, None),
    ("repeated lhs index", "def f(float(N, N) A) -> (B) {\n  B(i, i) = A(i, i)\n}",
     DuplicateNameError, 2, 8, None),
    ("size named like tensor", "def f(float(A) A) -> (B) {\n  B(i) = A(i)\n}",
     DuplicateNameError, 1, 16, None),
    ("scalar named like function", "def f(float(N) A, float exp) -> (B) {\n  B(i) = A(i)\n}",
     DuplicateNameError, 1, 25, None),
    ("two ranges", HEAD + "  B(i) = A(i, 0) where i in 0:N, i in 0:3\n}", DuplicateNameError,
     2, 34, None),
    # ---------------------------------------------------------------- affine indices
    ("product of indices", HEAD + "  B(i) +=! A(i * j, 0)\n}", NonAffineError, 2, 14, None),
    ("division by index", HEAD + "  B(i) +=! A(i, i / j)\n}", NonAffineError, 2, 17, None),
    ("comparison in index", HEAD + "  B(i) = A(i < 2, 0) where i in 0:N\n}", NonAffineError,
     2, 12, None),
    ("bound reads a tensor", HEAD + "  B(i) = A(i, 0) where i in 0:I(0)\n}", NonAffineError,
     2, 31, None),
    ("division by zero", HEAD + "  B(i) = A(i / 0, 0)\n}", NonAffineError, 2, 12, None),
    # ---------------------------------------------------------------- ranks
    ("too many indices", HEAD + "  B(i) = A(i, 0, 1)\n}", RankMismatchError, 2, 10, None),
    ("too few indices", HEAD + "  B(i) = A(i)\n}", RankMismatchError, 2, 10, None),
    ("no such dimension", HEAD + "  B(i) = A(i, 0) * A.2\n}", RankMismatchError, 2, 20, None),
    ("tensor without indices", HEAD + "  B(i) = A(i, 0) * A\n}", RankMismatchError, 2, 20, None),
    ("temporary rank", HEAD + "  T(i) = A(i, 0)\n  B(i) = T(i, 0)\n}", RankMismatchError, 3,
     10, None),
    # ---------------------------------------------------------------- ranges
    ("not inferable", HEAD + "  B(i) = 1\n}", RangeInferenceError, 2, 5, None),
    ("ambiguous", HEAD + "  B(i) +=! A(i + j, 0)\n}", RangeInferenceError, 2, 12, None),
    ("range refers to itself", HEAD + "  B(i) = A(i, 0) where i in 0:i + 1\n}",
     RangeInferenceError, 2, 24, None),
    ("only a gather index", "def f(float(N) A, int32(N) I) -> (B) {\n  B(i) +=! A(I(j))\n}",
     RangeInferenceError, 2, 5, None),
    # ---------------------------------------------------------------- definition order
    ("output read first", "def f(float(N) A) -> (B, C) {\n  B(i) = C(i)\n  C(i) = A(i)\n}",
     DefinitionOrderError, 2, 10, None),
    ("temporary read first", HEAD + "  B(i) = T(i)\n  T(i) = A(i, 0)\n}", DefinitionOrderError,
     2, 10, None),
    ("binding cycle", HEAD + "  B(i) = A(i, 0) + t where t = u * 2, u = t + 1\n}",
     DefinitionOrderError, 2, 43, None),
    ("write to input", HEAD + "  A(i, j) = 1\n}", DefinitionOrderError, 2, 3, None),
    ("output never written", "def f(float(N) A) -> (B, C) {\n  B(i) = A(i)\n}",
     DefinitionOrderError, 1, 26, None),
    ("accumulate before write", HEAD + "  B(i) += A(i, j)\n}", DefinitionOrderError, 2, 3, None),
    ("init reads itself", HEAD + "  B(i) = A(i, 0)\n  B(i) +=! B(i) * A(i, j)\n}",
     DefinitionOrderError, 3, 3, None),
    ("shape not known", HEAD + "  B(i) = A(i, 0) * T.0\n  T(i) = A(i, 0)\n}",
     DefinitionOrderError, 2, 20, None),
    # ---------------------------------------------------------------- types
    ("and on floats", HEAD + "  B(i) = A(i, 0) && A(i, 1)\n}", TypeMismatchError, 2, 10, None),
    ("literal overflow", "def f(int8(N) A) -> (B) {\n  B(i) = A(i) + 300\n}",
     TypeMismatchError, 2, 10, None),
    ("float index", HEAD + "  B(i) = A(i, 1.5)\n}", TypeMismatchError, 2, 15, None),
    ("float gather", HEAD + "  B(i) = A(A(i, 0), 0)\n}", TypeMismatchError, 2, 12, None),
    ("assignment reduces", HEAD + "  B(i) = A(i, j)\n}", TypeMismatchError, 2, 3, None),
    ("bool into float", "def f(float(N) A) -> (float(N) B) {\n  B(i) = A(i) > 0\n}",
     TypeMismatchError, 2, 10, None),
    ("arity", HEAD + "  B(i) = fmax(A(i, 0))\n}", TypeMismatchError, 2, 10, None),
    ("not on a number", HEAD + "  B(i) = !A(i, 0)\n}", TypeMismatchError, 2, 11, None),
    ("float parameter in index", HEAD + "  B(i) = A(i, s)\n}", TypeMismatchError, 2, 15, None),
    ("bool reduction", HEAD + "  B(i) +=! A(i, j) > 0\n}", TypeMismatchError, 2, 3, None),
    # ---------------------------------------------------------------- lowering
    ("stride in parametric mode", "def f(float(N) A, int32 S) -> (B) {\n  B(i) = A(S * i)\n}",
     UnsupportedError, 2, 12, "param"),
    ("where range too large", "def f(float(N) A) -> (B) {\n  B(i) = A(i) where i in 0:N + 1\n}",
     OutOfBoundsError, 2, 10, "param"),
    ("sizes too small",
     "def f(float(N) A, float(K) W) -> (B) {\n  B(i) +=! A(i + k) * W(k)\n}",
     ArgumentError, 2, 12, {"N": 2, "K": 5}),
]


def _raise(source: str, stage):
    module = parse(source, file="bad.tc")
    if stage == "get":
        module.get(None)
    elif stage == "param":
        for d in module.defs.values():
            d.lower()
    elif isinstance(stage, dict):
        for d in module.defs.values():
            d.lower(stage)


@pytest.mark.parametrize("name,source,cls,line,column,stage", CASES, ids=[c[0] for c in CASES])
def test_error(name, source, cls, line, column, stage):
    with pytest.raises(PolycompError) as info:
        _raise(source, stage)
    err = info.value
    assert type(err) is cls, f"{name}: expected {cls.__name__}, got {type(err).__name__}: {err}"
    loc = err.location
    assert loc is not None and loc.file == "bad.tc"
    assert loc.line == line, str(err)
    if column is not None:
        assert loc.column == column, str(err)
    text = str(err)
    assert text.startswith(f"bad.tc:{line}:{loc.column}: error: ")
    caret_line = [ln for ln in text.splitlines() if ln.strip().startswith("^")]
    assert len(caret_line) == 1, text
    assert caret_line[0].index("^") == 4 + loc.column - 1, text
    assert err.hint, f"{name}: no hint"


def test_corpus_is_large_enough():
    assert len(CASES) >= 30
    assert len({c[2] for c in CASES}) >= 10
