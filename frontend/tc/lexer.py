"""TC lexer: source text -> tokens, each with its character offset.

Input: the text of a ``.tc`` file. Output: a list of :class:`Token` ending with an
``EOF`` token. Whitespace and newlines separate tokens and are otherwise ignored (the
parser finds statement boundaries from the grammar; ``;`` is optional); ``#`` starts a
comment that runs to the end of the line.

    C(m, n) +=! A(m, k)   ->   IDENT(C) ( IDENT(m) , IDENT(n) ) +=! IDENT(A) ( ...

Compound assignment operators are single tokens only when written without spaces:
``+=!`` is "initialise, then add", while ``+= !x`` adds the negation of ``x``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polycomp.errors import ParseError, location_in_text

KEYWORDS = frozenset({"def", "where", "in", "exists", "true", "false"})

# Longest first: the lexer tries them in this order.
SYMBOLS = ("<=>", "+=!", "*=!", "->", "<=", ">=", "==", "!=", "&&", "||", "+=", "*=",
           "-=", "/=", "(", ")", "{", "}", ",", ";", ":", ".", "+", "-", "*", "/", "%",
           "<", ">", "!", "?", "=")

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Token:
    """One token. ``kind`` is "IDENT", "INT", "FLOAT", "EOF", a keyword or a symbol."""

    kind: str
    text: str
    start: int  # character offset in the source
    value: int | float | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokenize(source: str, file: str | None = None) -> list[Token]:
    """All tokens of ``source``; raises ParseError on a character that starts no token."""
    tokens: list[Token] = []
    pos, n = 0, len(source)
    while pos < n:
        ch = source[pos]
        if ch in " \t\r\n\f\v":
            pos += 1
        elif ch == "#":
            end = source.find("\n", pos)
            pos = n if end < 0 else end
        elif ch.isascii() and (ch.isalpha() or ch == "_"):
            end = pos + 1
            while end < n and _word_char(source[end]):
                end += 1
            text = source[pos:end]
            tokens.append(Token(text if text in KEYWORDS else "IDENT", text, pos))
            pos = end
        elif ch.isascii() and ch.isdigit() or (ch == "." and _starts_fraction(source, pos, tokens)):
            token = _number(source, pos, file)
            tokens.append(token)
            pos = token.end
        else:
            for sym in SYMBOLS:
                if source.startswith(sym, pos):
                    tokens.append(Token(sym, sym, pos))
                    pos += len(sym)
                    break
            else:
                raise ParseError(f"unexpected character {ch!r}",
                                 location_in_text(source, pos, 1, file),
                                 hint="TC programs use identifiers, numbers, operators and "
                                      "'#' comments only")
    tokens.append(Token("EOF", "", n))
    return tokens


def _word_char(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


def _starts_fraction(source: str, pos: int, tokens: list[Token]) -> bool:
    """'.5' is a number unless the '.' follows a name (``T.0`` is a dimension query)."""
    if pos + 1 >= len(source) or not (source[pos + 1].isascii() and source[pos + 1].isdigit()):
        return False
    return not tokens or tokens[-1].kind not in ("IDENT", "INT", "FLOAT", ")")


def _number(source: str, pos: int, file: str | None) -> Token:
    n = len(source)
    end = pos
    while end < n and source[end].isascii() and source[end].isdigit():
        end += 1
    is_float = False
    if end < n and source[end] == "." and not (end + 1 < n and source[end + 1] == "."):
        is_float = True
        end += 1
        while end < n and source[end].isascii() and source[end].isdigit():
            end += 1
    if end < n and source[end] in "eE":
        exp = end + 1
        if exp < n and source[exp] in "+-":
            exp += 1
        if exp < n and source[exp].isascii() and source[exp].isdigit():
            is_float = True
            end = exp
            while end < n and source[end].isascii() and source[end].isdigit():
                end += 1
    if end < n and (source[end].isascii() and (source[end].isalpha() or source[end] == "_")):
        stop = end
        while stop < n and _word_char(source[stop]):
            stop += 1
        raise ParseError(f"malformed number {source[pos:stop]!r}",
                         location_in_text(source, pos, stop - pos, file),
                         hint="numbers are written like 3, 0.5 or 1e-5, without suffixes")
    text = source[pos:end]
    if is_float:
        value: int | float = float(text) if len(text) < 400 else float("inf")
        if not math.isfinite(value):
            raise ParseError(f"floating-point literal {text!r} is out of range",
                             location_in_text(source, pos, len(text), file),
                             hint="use a value representable as a float64")
        return Token("FLOAT", text, pos, value)
    value = int(text) if len(text.lstrip("0")) <= 19 else INT64_MAX + 1
    if value > INT64_MAX:
        raise ParseError(f"integer literal {text} does not fit in 64 bits",
                         location_in_text(source, pos, len(text), file),
                         hint=f"integer literals must be at most {INT64_MAX}")
    return Token("INT", text, pos, value)
