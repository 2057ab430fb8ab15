"""The loop-nest frontend's bad-input corpus: each program must raise the named
PolycompError subclass at the given line and column (1-based), with a message that starts
as written, a caret excerpt and nothing else escaping (no pycparser or isl exceptions).
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from polycomp.errors import (DuplicateNameError, NonAffineError, OutOfBoundsError, ParseError,
                             PolycompError, RankMismatchError, TypeMismatchError,
                             UnknownNameError, UnsupportedError)
from polycomp.frontend.loops import parse_c


class Bad(NamedTuple):
    name: str
    error: type
    line: int
    column: int
    message: str
    source: str


CORPUS = [
    Bad('syntax', ParseError, 3, 12, 'syntax error: expected an expressi', """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    A[i] = ;
}
"""),
    Bad('syntax_paren', ParseError, 3, 5, "syntax error before 'A'", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++
    A[i] = 1;
}
"""),
    Bad('unterminated_comment', ParseError, 2, 3, 'unterminated comment', """\
void f(int n, double A[n]) {
  /* oops
  A[0] = 1;
}
"""),
    Bad('pointer_param', UnsupportedError, 1, 22, "pointer parameter 'A' is not suppo", """\
void f(int n, double *A) {
  for (int i = 0; i < n; i++)
    A[i] = 0;
}
"""),
    Bad('no_parameter_list', ParseError, 1, 6, "'f' is defined without a parameter l", """\
void f {
  int i;
}
"""),
    Bad('while', UnsupportedError, 3, 3, "'while' loops cannot appear in a S", """\
void f(int n, double A[n]) {
  int i;
  while (i < n)
    A[i] = 0;
}
"""),
    Bad('do', UnsupportedError, 2, 3, "'do' loops cannot appear in a SCoP", """\
void f(int n, double A[n]) {
  do { A[0] = 1; } while (0);
}
"""),
    Bad('goto', UnsupportedError, 2, 3, "'goto' cannot appear in a SCoP", """\
void f(int n, double A[n]) {
  goto end;
  end: A[0] = 1;
}
"""),
    Bad('break', UnsupportedError, 4, 5, "'break' cannot appear in a SCoP", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++) {
    A[i] = 0;
    break;
  }
}
"""),
    Bad('return_inside', UnsupportedError, 4, 7, "'return' cannot appear in a SCoP", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    if (i > 2)
      return;
}
"""),
    Bad('data_bound', NonAffineError, 3, 25, 'an array element is not affine', """\
void f(int n, int B[n], double A[n][n]) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < B[i]; j++)
      A[i][j] = 0;
}
"""),
    Bad('data_if', NonAffineError, 3, 9, 'an array element is not affine', """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    if (A[i] > 0)
      A[i] = 0;
}
"""),
    Bad('indirect', NonAffineError, 3, 7, 'an array element is not affine', """\
void f(int n, int B[n], double A[n]) {
  for (int i = 0; i < n; i++)
    A[B[i]] = 1.0;
}
"""),
    Bad('product', NonAffineError, 4, 9, 'a product of two non-constant term', """\
void f(int n, double A[n], double C[n][n]) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      A[i * j] = C[i][j];
}
"""),
    Bad('unknown_call', UnsupportedError, 3, 12, "call to unknown function 'foo' (it", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    A[i] = foo(A[i]);
}
"""),
    Bad('call_statement', UnsupportedError, 3, 5, "call to function 'printf' (it may ", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    printf("%f", A[i]);
}
"""),
    Bad('assign_iterator', UnsupportedError, 4, 5, "assignment to loop iterator 'i'", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++) {
    A[i] = 0;
    i = i + 1;
  }
}
"""),
    Bad('assign_param', UnsupportedError, 3, 5, "assignment to parameter 'alpha'", """\
void f(int n, double alpha, double A[n]) {
  for (int i = 0; i < n; i++)
    alpha = A[i];
}
"""),
    Bad('increment_expr', UnsupportedError, 4, 7, "'++' used inside an expression is ", """\
void f(int n, double A[n]) {
  int k;
  for (int i = 0; i < n; i++)
    A[k++] = 0;
}
"""),
    Bad('negative_division', NonAffineError, 2, 24, "C's '/' truncates toward zero, and", """\
void f(int n, double A[n]) {
  for (int i = 0; i < (n - 10) / 2; i++)
    A[i] = 0;
}
"""),
    Bad('unknown_name', UnknownNameError, 3, 5, "'B' is not declared", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    B[i] = 0;
}
"""),
    Bad('rank', RankMismatchError, 3, 5, "'A' has 2 dimension(s) but is used", """\
void f(int n, double A[n][n]) {
  for (int i = 0; i < n; i++)
    A[i] = 0;
}
"""),
    Bad('step', UnsupportedError, 2, 26, 'the loop step must be i++, i--, i ', """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i += n)
    A[i] = 0;
}
"""),
    Bad('infinite', UnsupportedError, 2, 19, 'this loop may never terminate (e.g', """\
void f(int n, double A[n]) {
  for (int i = 0; i >= 0; i++)
    A[0] = i;
}
"""),
    Bad('float_mod', TypeMismatchError, 3, 12, "'%' needs integer operands", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    A[i] = A[i] % 2;
}
"""),
    Bad('float_bound', NonAffineError, 2, 23, 'the constant 2.5 is not affine', """\
void f(int n, double A[n]) {
  for (int i = 0; i < 2.5; i++)
    A[i] = 0;
}
"""),
    Bad('ifdef', UnsupportedError, 1, 1, "preprocessor directive '#ifdef' is", """\
#ifdef FOO
void f(int n, double A[n]) { }
#endif
"""),
    Bad('returns_int', UnsupportedError, 1, 5, "function 'f' must return void", """\
int f(int n, double A[n]) {
  A[0] = 1;
  return 0;
}
"""),
    Bad('nested_assignment', UnsupportedError, 3, 17, 'an assignment used as a value is n',
        """\
void f(int n, double A[n], double B[n]) {
  for (int i = 0; i < n; i++)
    A[i] = 1 + (B[i] = 0);
}
"""),
    Bad('bitwise', UnsupportedError, 3, 12, "bitwise operator '&' is not suppor", """\
void f(int n, int A[n]) {
  for (int i = 0; i < n; i++)
    A[i] = A[i] & 1;
}
"""),
    Bad('not_equal_stride', UnsupportedError, 2, 19, 'this loop may never terminate (e.g', """\
void f(int n, double A[n]) {
  for (int i = 0; i != n; i += 2)
    A[i] = 0;
}
"""),
    Bad('out_of_bounds', OutOfBoundsError, 3, 5, 'access A(i + 1) in statement S0 ca', """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    A[i + 1] = 0;
}
"""),
    Bad('code_before_scop', UnsupportedError, 3, 3, 'only declarations may come before ', """\
void f(int n, double A[n]) {
  int i;
  A[0] = 1;
#pragma scop
  for (i = 0; i < n; i++)
    A[i] = 0;
#pragma endscop
}
"""),
    Bad('macro', UnsupportedError, 3, 27, 'macro M (n + 1) is not a parenthes', """\
#define M n + 1
void f(int n, double A[2 * n + 2]) {
  for (int i = 0; i < 2 * M; i++)
    A[i] = 0;
}
"""),
    Bad('no_extent', UnsupportedError, 1, 22, "array 'A' has a dimension without ", """\
void f(int n, double A[][n]) {
  A[0][0] = 1;
}
"""),
    Bad('shadow', DuplicateNameError, 3, 12, "'n' shadows a parameter of the fun", """\
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++) {
    double n = 2;
    A[i] = n;
  }
}
"""),
    Bad('unsigned_iter', UnsupportedError, 2, 17, "loop iterator 'i' must be an int o", """\
void f(int n, double A[n]) {
  for (unsigned i = 0; i < n; i++)
    A[i] = 0;
}
"""),
    Bad('iterator_after_loop', UnsupportedError, 5, 10, "'i' is a loop iterator; its value ", """\
void f(int n, double A[n]) {
  int i;
  for (i = 0; i < n; i++)
    A[i] = 0;
  A[0] = i;
}
"""),
    Bad('scalar_subscript', TypeMismatchError, 3, 12, "'x' is a scalar, not an array", """\
void f(int n, double x, double A[n]) {
  for (int i = 0; i < n; i++)
    A[i] = x[i];
}
"""),
    Bad('struct', UnsupportedError, 2, 24, "parameter 'v' has a type the loop ", """\
struct s { int a; };
void f(int n, struct s v, double A[n]) {
  A[0] = 1;
}
"""),
    Bad('switch', UnsupportedError, 2, 3, "'switch' cannot appear in a SCoP", """\
void f(int n, double A[n]) {
  switch (n) { case 1: A[0] = 1; }
}
"""),
    Bad('string', UnsupportedError, 2, 10, 'string literals are not supported', """\
void f(int n, double A[n]) {
  A[0] = "x";
}
"""),
    Bad('comma', UnsupportedError, 2, 3, 'the for-initialisation must declar', """\
void f(int n, double A[n]) {
  for (int i = 0, j = 0; i < n; i++)
    A[i] = 0;
}
"""),
    Bad('too_many_args', TypeMismatchError, 4, 12, 'sqrt() takes 1 argument(s), got 2', """\
#include <math.h>
void f(int n, double A[n]) {
  for (int i = 0; i < n; i++)
    A[i] = sqrt(A[i], 2.0);
}
"""),
    Bad('while_in_scop_region', UnsupportedError, 3, 3, "'while' loops cannot appear in a S", """\
void f(int n, double A[n]) {
#pragma scop
  while (1) A[0] = 0;
#pragma endscop
}
"""),
    Bad('big_literal', TypeMismatchError, 2, 10, 'integer constant 99999999999999999', """\
void f(int n, double A[n]) {
  A[0] = 99999999999999999999;
}
"""),
]


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_bad_input_is_rejected_at_the_offending_construct(case: Bad):
    with pytest.raises(PolycompError) as info:
        parse_c(case.source, file="bad.c").get().lower()
    error = info.value
    assert type(error) is case.error, str(error)
    assert (error.location.file, error.location.line, error.location.column) == \
        ("bad.c", case.line, case.column), str(error)
    assert error.message.startswith(case.message), error.message
    text = str(error)
    assert text.startswith(f"bad.c:{case.line}:{case.column}: error: ")
    assert "^" in text  # the caret excerpt under the source line
    assert error.location.source_line == case.source.split("\n")[case.line - 1]


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 20
    assert len({c.error for c in CORPUS}) >= 7


def test_specialised_out_of_bounds_names_a_witness():
    src = "void f(int n, double A[n]) {\n  for (int i = 0; i < 5; i++)\n    A[i] = 0;\n}\n"
    definition = parse_c(src, file="bad.c").get()
    assert str(definition.lower().context) == "[n] -> {  : n >= 5 }"
    assert definition.lower({"n": 5}).params == ()
    with pytest.raises(OutOfBoundsError, match=r"touches A\[4\]") as info:
        definition.lower({"n": 4})
    assert info.value.location.line == 3


def test_negative_sizes_are_refused():
    src = "void f(int n, double A[n]) {\n  for (int i = 0; i < n; i++)\n    A[i] = 0;\n}\n"
    with pytest.raises(PolycompError, match="do not satisfy"):
        parse_c(src).get().lower({"n": -1})


def test_missing_size_is_refused():
    src = "void f(int n, int m, double A[n][m]) {\n  A[0][0] = 1;\n}\n"
    with pytest.raises(PolycompError, match="no value for size"):
        parse_c(src).get().lower({"n": 2})


def test_several_functions_need_a_name():
    src = "void f(int n, double A[n]) { A[0] = 1; }\nvoid g(int n, double A[n]) { A[0] = 2; }\n"
    with pytest.raises(PolycompError, match="name the function|2 functions"):
        parse_c(src).get()
    assert parse_c(src).get("g").name == "g"


def test_errors_of_other_functions_do_not_matter():
    src = "void f(int n, double A[n]) { while (1) A[0] = 1; }\nvoid g(double A[3]) { A[0] = 2; }\n"
    assert parse_c(src).get("g").lower().statements[0].name == "S0"
    with pytest.raises(UnsupportedError):
        parse_c(src).get("f")
