"""C text -> pycparser AST, with the small preprocessor the loop frontend needs.

Input: the text of a C file. Output: a ``pycparser.c_ast.FileAST`` whose coordinates are
the user's own lines and columns, plus a :class:`Source` that turns those coordinates
into :class:`polycomp.errors.Location` objects and holds the file's macros.

pycparser does not run a preprocessor, so this module does the part that matters here:

* comments become spaces (newlines kept), so every line and column stays where it was;
* ``#include`` lines and null directives become blank lines;
* ``#pragma`` lines are kept (pycparser turns them into Pragma nodes: ``scop``/``endscop``);
* ``#define NAME body`` and ``#define NAME(a, b) body`` are recorded and blanked. A macro
  whose body is made of type keywords (``#define DATA_TYPE double``) becomes a typedef;
  the others are expanded at the AST level where they are used (frontend/loops/macros.py);
* every other directive (``#if``, ``#ifdef``, ``#undef``, ``#line``, ...) is rejected.

The parser sees a prelude of typedefs (``int32_t``, ``bool``, ``size_t``, ...) followed by
``#line 1``, so coordinates in the AST are those of the user's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pycparser import c_ast, c_parser

from polycomp.errors import Location, ParseError, UnsupportedError

# typedef name -> the C type words it stands for (the <stdint.h>/<stdbool.h> names)
STANDARD_TYPEDEFS = {
    "int8_t": "signed char", "int16_t": "short", "int32_t": "int", "int64_t": "long",
    "uint8_t": "unsigned char", "uint16_t": "unsigned short", "uint32_t": "unsigned int",
    "uint64_t": "unsigned long", "bool": "_Bool", "size_t": "unsigned long",
    "ptrdiff_t": "long",
}

TYPE_WORDS = frozenset("void char short int long float double signed unsigned _Bool const "
                       "volatile restrict".split())

_MARKER_FILE = "polycomp-input"
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Macro:
    """A ``#define``. ``params`` is None for an object-like macro."""

    name: str
    params: tuple[str, ...] | None
    body: str
    location: Location


@dataclass
class Source:
    """The user's text and what the preprocessor learned from it."""

    text: str
    file: str | None
    macros: dict[str, Macro] = field(default_factory=dict)
    type_macros: dict[str, str] = field(default_factory=dict)  # name -> type words
    lines: list[str] = field(default_factory=list)

    def location(self, line: int | None, column: int | None, length: int = 1) -> Location:
        if line is None:
            return Location(file=self.file)
        source_line = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        if column is not None and source_line is not None:
            column = max(1, min(column, len(source_line) + 1))
        return Location(file=self.file, line=line, column=column, source_line=source_line,
                        length=max(1, length))

    def prelude(self) -> str:
        """Typedefs the parser must know, then a line marker back to line 1 of the user's text."""
        types = {**STANDARD_TYPEDEFS, **self.type_macros}
        decls = " ".join(f"typedef {words} {name};" for name, words in types.items())
        return f"{decls}\n#line 1 \"{_MARKER_FILE}\"\n"


# ----------------------------------------------------------------------------- parsing

class _SyntaxError(Exception):
    def __init__(self, message: str, line: int | None, column: int | None):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


class _Parser(c_parser.CParser):
    """pycparser's parser, raising errors that always carry a line and column."""

    def _parse_error(self, msg, coord):  # noqa: ANN001 - pycparser's signature
        line = getattr(coord, "line", None)
        column = getattr(coord, "column", None)
        if line is None:  # pycparser gave only a file name: point at the next token
            try:
                tok = self._peek()
            except Exception:  # noqa: BLE001 - the token stream may itself be broken
                tok = None
            if tok is not None:
                line, column = tok.lineno, tok.column
        raise _SyntaxError(str(msg), line, column)


def parse(text: str, file: str | None = None, typedefs: dict[str, str] | None = None
          ) -> tuple[c_ast.FileAST, Source]:
    """The AST of ``text`` and its Source; a syntax error raises ParseError. ``typedefs``
    (name -> C type words) are known besides the file's own (a header's, see wholefile.py)."""
    source = Source(text=text, file=file, lines=text.split("\n"))
    source.type_macros.update(typedefs or {})
    cleaned = _strip_comments(text, source)
    cleaned = _directives(cleaned, source)
    return parse_text(source.prelude() + cleaned, source), source


def parse_text(text: str, source: Source) -> c_ast.FileAST:
    """Run pycparser on prepared text; nothing but ParseError escapes."""
    try:
        return _Parser().parse(text, _MARKER_FILE)
    except _SyntaxError as exc:
        raise _parse_error(exc.message, exc.line, exc.column, source) from None
    except RecursionError:
        raise ParseError("the program is nested too deeply to parse",
                         source.location(None, None)) from None
    except Exception as exc:  # noqa: BLE001 - pycparser may fail in unexpected ways
        line, column = _coord_in_message(str(exc))
        raise _parse_error(str(exc), line, column, source) from None


def _coord_in_message(message: str) -> tuple[int | None, int | None]:
    match = re.search(r":(\d+):(\d+):", message)
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


def _parse_error(message: str, line: int | None, column: int | None,
                 source: Source) -> ParseError:
    message = re.sub(rf"^{re.escape(_MARKER_FILE)}(:\d+)*:\s*", "", message)
    if message.startswith("before: "):
        message = f"syntax error before '{message[len('before: '):]}'"
    elif message == "Invalid expression":
        message = "syntax error: expected an expression"
    if line is not None and line > len(source.lines):
        line, column = len(source.lines), len(source.lines[-1]) + 1
    return ParseError(message, source.location(line, column),
                      hint="the loop frontend reads C99 (no preprocessor beyond #define, "
                           "#include and #pragma)")


# ----------------------------------------------------------------------------- comments

def _strip_comments(text: str, source: Source) -> str:
    """Comments replaced by spaces (newlines kept), string and char literals untouched."""
    out: list[str] = []
    k, n = 0, len(text)
    while k < n:
        ch = text[k]
        if ch in "\"'":
            end = k + 1
            while end < n and text[end] != ch and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            out.append(text[k:end + 1])
            k = end + 1
        elif text.startswith("//", k):
            end = text.find("\n", k)
            end = n if end < 0 else end
            out.append(" " * (end - k))
            k = end
        elif text.startswith("/*", k):
            end = text.find("*/", k + 2)
            if end < 0:
                line = text.count("\n", 0, k) + 1
                column = k - text.rfind("\n", 0, k)
                raise ParseError("unterminated comment", source.location(line, column, 2))
            out.append("".join(c if c == "\n" else " " for c in text[k:end + 2]))
            k = end + 2
        else:
            out.append(ch)
            k += 1
    return "".join(out)


# ----------------------------------------------------------------------------- directives

def _directives(text: str, source: Source) -> str:
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        stripped = lines[k].lstrip()
        if not stripped.startswith("#"):
            k += 1
            continue
        first, directive = k, lines[k]
        while directive.endswith("\\") and k + 1 < len(lines):  # line continuations
            k += 1
            directive = directive[:-1] + " " + lines[k]
            lines[k] = ""
        column = len(lines[first]) - len(stripped) + 1
        keep = _directive(directive.strip()[1:].strip(), first + 1, column, source)
        lines[first] = directive if keep else ""
        k += 1
    return "\n".join(lines)


def _directive(body: str, line: int, column: int, source: Source) -> bool:
    """Handle one directive (text after '#'); True to keep the line for the parser."""
    word_match = _IDENT.match(body)
    word = word_match.group(0) if word_match else ""
    rest = body[len(word):]
    where = source.location(line, column, len(word) + 1)
    if not body:
        return False
    if word == "pragma":
        return True
    if word == "include":
        return False
    if word == "define":
        _define(rest, line, source, where)
        return False
    raise UnsupportedError(f"preprocessor directive '#{word or body.split()[0]}' is not supported",
                           where, hint="the loop frontend handles #include, #define and "
                                       "#pragma; expand other directives before compiling")


def _define(rest: str, line: int, source: Source, where: Location) -> None:
    name_match = _IDENT.match(rest.lstrip())
    if not name_match:
        raise ParseError("#define needs a macro name", where)
    name = name_match.group(0)
    after = rest.lstrip()[len(name):]
    params: tuple[str, ...] | None = None
    if after.startswith("("):
        close = after.find(")")
        if close < 0:
            raise ParseError(f"unclosed parameter list in #define {name}", where)
        params = tuple(p.strip() for p in after[1:close].split(",") if p.strip())
        if any(not _IDENT.fullmatch(p) for p in params):
            raise UnsupportedError(f"macro {name} has parameters the frontend cannot read "
                                   f"(variadic?)", where)
        after = after[close + 1:]
    body = after.strip()
    words = body.split()
    if params is None and words and all(w in TYPE_WORDS for w in words):
        source.type_macros[name] = body
        return
    source.macros[name] = Macro(name, params, body, where)
