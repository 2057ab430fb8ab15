"""TC parser: tokens -> syntax tree (frontend/tc/syntax.py), by recursive descent.

Input: source text (tokenized by lexer.py). Output: a :class:`syntax.Module` holding
every def in source order; nothing is checked beyond the grammar (sema.py does names,
types and ranges). Grammar, informally::

    module  := def*
    def     := 'def' NAME '(' [param {',' param}] ')' '->' '(' [output {',' output}] ')'
               '{' {stmt [';']} '}' ['<=>' NAME ['(' [NAME {',' NAME}] ')']]
    param   := TYPE ['(' [dim {',' dim}] ')'] NAME          dim := NAME | INT
    output  := [TYPE ['(' [dim {',' dim}] ')']] NAME
    stmt    := NAME ['(' [NAME {',' NAME}] ')'] assign expr {'where' clause {',' clause}}
    assign  := '=' | '+=' | '*=' | 'max=' | 'min=' | '+=!' | '*=!' | 'max=!' | 'min=!'
    clause  := NAME 'in' expr ':' expr | NAME '=' expr | 'exists' expr
    expr    := or ['?' expr ':' expr]       (then || && ==,!= <,<=,>,>= +,- *,/,% unary)
    unary   := ('-' | '!') unary | primary
    primary := INT | FLOAT | 'true' | 'false' | '(' expr ')' | NAME '.' INT
             | NAME '(' [expr {',' expr}] ')' | NAME

Nesting is bounded (MAX_NESTING parser frames, MAX_DEPTH tree levels): deeper input is
a ParseError rather than a RecursionError here or in a later pass.
"""

from __future__ import annotations

from polycomp.errors import ParseError, location_in_text

from . import syntax as S
from .lexer import Token, tokenize

MAX_NESTING = 300  # parser recursion frames
MAX_DEPTH = 150  # levels of an expression tree

BINARY_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}

ASSIGN_HINT = "assignments are =, +=, *=, max=, min= or the initialising forms +=!, *=!, " \
              "max=!, min=!"


def parse_module(source: str, file: str | None = None) -> S.Module:
    """The syntax tree of every def in ``source``; raises ParseError."""
    return Parser(source, file).module()


class Parser:
    def __init__(self, source: str, file: str | None):
        self.source, self.file = source, file
        self.tokens = tokenize(source, file)
        self.pos = 0
        self.nesting = 0

    # ------------------------------------------------------------------ token helpers
    def peek(self, k: int = 0) -> Token:
        return self.tokens[min(self.pos + k, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return tok

    def accept(self, kind: str) -> Token | None:
        return self.next() if self.peek().kind == kind else None

    def error(self, message: str, tok: Token, hint: str, length: int | None = None) -> ParseError:
        size = length if length is not None else max(1, len(tok.text))
        return ParseError(message, location_in_text(self.source, tok.start, size, self.file),
                          hint=hint)

    def expect(self, kind: str, what: str, hint: str) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            raise self.error(f"expected {what}, found {_describe(tok)}", tok, hint)
        return self.next()

    def ident(self, what: str, hint: str) -> S.Ident:
        tok = self.expect("IDENT", what, hint)
        return S.Ident(tok.start, tok.end, tok.text)

    # ------------------------------------------------------------------ definitions
    def module(self) -> S.Module:
        defs = []
        while self.peek().kind != "EOF":
            if self.accept(";"):
                continue
            defs.append(self.definition())
        return S.Module(self.source, self.file, tuple(defs))

    def definition(self) -> S.Def:
        start = self.expect("def", "'def'", "a TC source is a sequence of "
                            "'def name(inputs) -> (outputs) { statements }'")
        name = self.ident("the name of the def", "write 'def name(...) -> (...) { ... }'")
        self.expect("(", "'(' after the def's name", "the inputs follow the name in parentheses")
        params = self.comma_list(")", self.param)
        self.expect(")", "',' or ')' in the input list", "inputs look like 'float(M, N) A'")
        self.expect("->", "'->' after the inputs", "outputs are listed after '->' as '(C, D)'")
        self.expect("(", "'(' before the outputs", "outputs are listed in parentheses")
        outputs = self.comma_list(")", self.output)
        self.expect(")", "',' or ')' in the output list", "outputs look like 'C' or "
                    "'float(M, N) C'")
        self.expect("{", "'{' before the statements", "the statements go between braces")
        stmts = []
        while self.peek().kind != "}":
            if self.accept(";"):
                continue
            if self.peek().kind == "EOF":
                raise self.error("missing '}' at the end of the def", self.peek(),
                                 "close the def with '}'")
            stmts.append(self.statement())
        end = self.next()
        gradient = self.gradient()
        stop = gradient.end if gradient else end.end
        return S.Def(start.start, stop, name, tuple(params), tuple(outputs), tuple(stmts), gradient)

    def comma_list(self, close: str, item):
        out = []
        if self.peek().kind == close:
            return out
        out.append(item())
        while self.accept(","):
            out.append(item())
        return out

    def type_spec(self, allow_scalar: bool) -> S.TypeSpec:
        tok = self.peek()
        if tok.kind != "IDENT" or tok.text not in S.TYPE_NAMES:
            raise self.error(f"expected a type, found {_describe(tok)}", tok,
                             "types are " + ", ".join(S.TYPE_NAMES))
        self.next()
        dims = None
        end = tok.end
        if self.accept("("):
            dims = tuple(self.comma_list(")", self.dim))
            end = self.expect(")", "',' or ')' in the dimension list",
                              "dimensions are size names or positive integers").end
        elif not allow_scalar:
            raise self.error("expected '(' with the dimensions after the type", self.peek(),
                             "outputs with a type also give their shape, e.g. 'float(M, N) C'")
        return S.TypeSpec(tok.start, end, S.TYPE_NAMES[tok.text], dims)

    def dim(self) -> S.Ident | S.IntLit:
        tok = self.peek()
        if tok.kind == "INT":
            self.next()
            if tok.value < 1:
                raise self.error(f"a dimension must be positive, not {tok.text}", tok,
                                 "write a positive integer or a size name")
            return S.IntLit(tok.start, tok.end, 1, int(tok.value))
        return self.ident("a size name or an integer", "dimensions are size names (M, N, ...) "
                          "or positive integers")

    def param(self) -> S.Param:
        spec = self.type_spec(allow_scalar=True)
        name = self.ident("the parameter's name", "a parameter is 'TYPE NAME' or "
                          "'TYPE(dims) NAME'")
        return S.Param(spec.start, name.end, spec, name)

    def output(self) -> S.Output:
        tok, after = self.peek(), self.peek(1)
        if tok.kind == "IDENT" and tok.text in S.TYPE_NAMES and after.kind in ("IDENT", "("):
            spec = self.type_spec(allow_scalar=False)
            name = self.ident("the output's name", "a typed output is 'TYPE(dims) NAME'")
            return S.Output(spec.start, name.end, spec, name)
        name = self.ident("an output name", "outputs are names, optionally typed: "
                          "'C' or 'float(M, N) C'")
        return S.Output(name.start, name.end, None, name)

    def gradient(self) -> S.Gradient | None:
        if not self.accept("<=>"):
            return None
        name = self.ident("the gradient's name after '<=>'", "write '<=> name(args)'")
        args: list[S.Ident] = []
        end = name.end
        if self.accept("("):
            args = self.comma_list(")", lambda: self.ident("a name", "gradient arguments "
                                                           "are names"))
            end = self.expect(")", "')' after the gradient's arguments",
                              "write '<=> name(A, B)'").end
        return S.Gradient(name.start, end, name, tuple(args))

    # ------------------------------------------------------------------ statements
    def statement(self) -> S.Stmt:
        tok = self.peek()
        if tok.kind != "IDENT":
            raise self.error(f"expected a statement, found {_describe(tok)}", tok,
                             "statements look like 'C(i, j) = A(i, j) + 1'")
        lhs = self.ident("a tensor name", "")
        indices: list[S.Ident] = []
        if self.accept("("):
            indices = self.comma_list(")", self.lhs_index)
            self.expect(")", "',' or ')' after the left-hand side indices",
                        "the left-hand side is 'T(i, j, ...)'")
        op, init, op_start, op_end = self.assign_op(lhs)
        rhs = self.expr()
        where: list[S.Clause] = []
        while self.accept("where"):
            where.append(self.clause())
            while self.accept(","):
                where.append(self.clause())
        end = where[-1].end if where else rhs.end
        return S.Stmt(lhs.start, end, lhs, tuple(indices), op, init, op_start, op_end, rhs,
                      tuple(where))

    def lhs_index(self) -> S.Ident:
        tok = self.peek()
        if tok.kind == "IDENT" and self.peek(1).kind in (",", ")"):
            self.next()
            return S.Ident(tok.start, tok.end, tok.text)
        raise self.error("left-hand side indices must be plain index names", tok,
                         "write the statement over new indices, e.g. 'O(i) = A(i + 1)' "
                         "instead of 'O(i - 1) = A(i)'")

    def assign_op(self, lhs: S.Ident) -> tuple[str | None, bool, int, int]:
        tok = self.peek()
        simple = {"=": (None, False), "+=": ("+", False), "*=": ("*", False),
                  "+=!": ("+", True), "*=!": ("*", True)}
        if tok.kind in simple:
            self.next()
            op, init = simple[tok.kind]
            bang = self.peek()
            if tok.kind in ("+=", "*=") and bang.kind == "!" and bang.start == tok.end:
                init = True
                self.next()
            return op, init, tok.start, self.tokens[self.pos - 1].end
        if tok.kind == "IDENT" and tok.text in ("max", "min") and self.peek(1).kind in ("=", "=="):
            self.next()
            eq = self.next()
            if eq.kind == "==":
                raise self.error(f"'{tok.text}==' is not an assignment", eq, ASSIGN_HINT)
            init = False
            if self.peek().kind == "!" and self.peek().start == eq.end:
                init = True
                self.next()
            return tok.text, init, tok.start, self.tokens[self.pos - 1].end
        if tok.kind in ("-=", "/="):
            raise self.error(f"TC has no '{tok.text}' assignment", tok, ASSIGN_HINT)
        raise self.error(f"expected an assignment operator after '{lhs.name}(...)', "
                         f"found {_describe(tok)}", tok, ASSIGN_HINT)

    def clause(self) -> S.Clause:
        tok = self.peek()
        if self.accept("exists"):
            access = self.expr()
            return S.ExistsClause(tok.start, access.end, access)
        if tok.kind == "IDENT" and self.peek(1).kind == "in":
            name = self.ident("", "")
            self.next()
            lo = self.expr()
            self.expect(":", "':' between the bounds of the range",
                        "a range is 'i in lo:hi' (lo included, hi excluded)")
            hi = self.expr()
            return S.RangeClause(tok.start, hi.end, name, lo, hi)
        if tok.kind == "IDENT" and self.peek(1).kind == "=":
            name = self.ident("", "")
            self.next()
            value = self.expr()
            return S.LetClause(tok.start, value.end, name, value)
        raise self.error(f"expected a where clause, found {_describe(tok)}", tok,
                         "where clauses are 'i in lo:hi', 'name = expr' or 'exists T(i)'")

    # ------------------------------------------------------------------ expressions
    def enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.error("expression nested too deeply", self.peek(),
                             "split the expression with where bindings ('where t = ...')")

    def node(self, node: S.Expr) -> S.Expr:
        if node.depth > MAX_DEPTH:
            raise ParseError(f"expression too deep (more than {MAX_DEPTH} levels)",
                             location_in_text(self.source, node.start, node.end - node.start,
                                              self.file),
                             hint="split the expression with where bindings ('where t = ...')")
        return node

    def expr(self) -> S.Expr:
        self.enter()
        cond = self.binary(1)
        if self.accept("?"):
            then = self.expr()
            self.expect(":", "':' in the conditional expression", "write 'c ? a : b'")
            other = self.expr()
            cond = self.node(S.Ternary(cond.start, other.end,
                                       1 + max(cond.depth, then.depth, other.depth),
                                       cond, then, other))
        self.nesting -= 1
        return cond

    def binary(self, min_prec: int) -> S.Expr:
        self.enter()
        lhs = self.unary()
        while True:
            op = self.peek().kind
            prec = BINARY_PREC.get(op)
            if prec is None or prec < min_prec:
                break
            self.next()
            rhs = self.binary(prec + 1)
            lhs = self.node(S.Binary(lhs.start, rhs.end, 1 + max(lhs.depth, rhs.depth), op,
                                     lhs, rhs))
        self.nesting -= 1
        return lhs

    def unary(self) -> S.Expr:
        tok = self.peek()
        if tok.kind in ("-", "!"):
            self.enter()
            self.next()
            operand = self.unary()
            self.nesting -= 1
            return self.node(S.Unary(tok.start, operand.end, operand.depth + 1, tok.kind,
                                     operand))
        return self.primary()

    def primary(self) -> S.Expr:
        tok = self.next()
        if tok.kind == "INT":
            return S.IntLit(tok.start, tok.end, 1, int(tok.value))
        if tok.kind == "FLOAT":
            return S.FloatLit(tok.start, tok.end, 1, float(tok.value))
        if tok.kind in ("true", "false"):
            return S.BoolLit(tok.start, tok.end, 1, tok.kind == "true")
        if tok.kind == "(":
            inner = self.expr()
            self.expect(")", "')'", "parentheses must balance")
            return inner
        if tok.kind == "IDENT":
            ident = S.Ident(tok.start, tok.end, tok.text)
            if self.accept("("):
                args = self.comma_list(")", self.expr)
                close = self.expect(")", "',' or ')' in the argument list",
                                    "arguments are separated by ','")
                depth = 1 + max((a.depth for a in args), default=0)
                return self.node(S.Apply(tok.start, close.end, depth, ident, tuple(args)))
            if self.peek().kind == "." :
                self.next()
                num = self.expect("INT", "a dimension number after '.'",
                                  f"'{tok.text}.0' is the extent of dimension 0 of {tok.text}")
                return S.DimRef(tok.start, num.end, 1, ident, int(num.value))
            return S.Name(tok.start, tok.end, 1, ident)
        raise self.error(f"expected an expression, found {_describe(tok)}", tok,
                         "an expression is built from tensor accesses, indices, sizes, "
                         "numbers, operators and function calls")


def _describe(tok: Token) -> str:
    if tok.kind == "EOF":
        return "the end of the input"
    if tok.kind in ("IDENT", "INT", "FLOAT"):
        return f"'{tok.text}'"
    return f"'{tok.text}'"
