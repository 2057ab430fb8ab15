"""A whole C file, as PPCG takes it: the system preprocessor, then only the SCoP's function.

Input: the text of a complete C program -- ``#include "kernel.h"`` with the sizes and
``DATA_TYPE``, glibc headers, a ``main`` harness, the kernel with a ``#pragma scop`` region.
Output: a :class:`WholeFile`: the preprocessed text cut into top-level blocks, and for the
function that holds the region (or the one named) a text that pycparser can read: that
function alone, every line at its line in the user's file. The rest of the file -- glibc's
GNU C, the harness -- is never parsed, so nothing there can stop the compile.

    #include "gemm.h"                 cc -E -iquote DIR -I ... -D ...   (argv, no shell)
    static void kernel_gemm(int ni,   ──► static void kernel_gemm(int ni, ...
        DATA_TYPE POLYBENCH_2D(C,...)        double C[ 1000 + 0][1100 + 0], ...)
    #pragma scop                           #pragma scop
      for (i = 0; i < _PB_NI; i++)           for (i = 0; i < ni; i++)

The preprocessor's line markers (``# 88 "<stdin>"``) give each preprocessed line its line
in the user's file; tokens that come from a system header's macro (``stderr``) are put
back on the line that used them. Scalar typedefs of the headers (``typedef unsigned long
size_t;``) are collected by pattern, so the function may use them.

The sizes a harness passes (``int ni = 1000; ... kernel_gemm(ni, ...)``) are read from the
one call of the function: the calling function alone is parsed, and an argument counts only
when it is a constant expression or a local initialised with one and never assigned again.
frontend/loops/splice.py writes the compiled region back into the original text.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from pycparser import c_ast, c_parser

from polycomp.errors import Location, ParseError, UnsupportedError

from .source import STANDARD_TYPEDEFS, TYPE_WORDS

STDIN = "<stdin>"
_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')
_TYPEDEF = re.compile(r"\btypedef\s+([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*;")
_SCOP = re.compile(r"\s*#\s*pragma\s+scop\s*\Z")
_ENDSCOP = re.compile(r"\s*#\s*pragma\s+endscop\s*\Z")
_NOT_NAMES = frozenset("__attribute__ __declspec __asm__ asm if while for switch return "
                       "sizeof".split())


def wants_preprocessor(text: str) -> bool:
    """True for a whole program (a ``main``) or a file with its own header (``#include
    "x.h"``): what the built-in directive handling cannot read exactly."""
    return bool(re.search(r'^\s*#\s*include\s*"', text, re.M)
                or re.search(r"\bmain\s*\([^;{]*\)\s*\{", text))


def preprocess(text: str, file: str | None, include_dirs: Sequence[str] = (),
               defines: Sequence[str] = ()) -> str:
    """``text`` through ``cc -E`` (CC, else gcc): the file's own directory first for
    ``#include "..."``, then ``include_dirs``; ``defines`` as NAME or NAME=VALUE."""
    where = Location(file=file)
    cc = shlex.split(os.environ.get("CC") or "gcc") or ["gcc"]
    argv = [*cc, "-E", "-x", "c"]
    argv += ["-iquote", os.path.dirname(os.path.abspath(file)) if file else os.getcwd()]
    argv += [f"-I{d}" for d in include_dirs]
    for define in defines:
        name = define.partition("=")[0]
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise UnsupportedError(f"cannot define macro {define!r}", where,
                                   hint="write -D NAME or -D NAME=VALUE")
        argv.append(f"-D{define}")
    argv.append("-")
    try:
        done = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UnsupportedError(f"no C preprocessor: '{cc[0]}' was not found", where,
                               hint="install gcc or set CC to a C compiler") from None
    except subprocess.TimeoutExpired:
        raise UnsupportedError("the C preprocessor did not finish in 120 s", where) from None
    if done.returncode != 0:
        message = done.stderr.replace(STDIN, file or STDIN).strip().splitlines()
        first = next((m for m in message if "error" in m), message[0] if message else "")
        raise ParseError(f"the C preprocessor failed: {first}", where,
                         hint="give the include directories (-I DIR) and macros (-D NAME) "
                              "the file needs")
    return done.stdout


@dataclass(frozen=True)
class Block:
    """A top-level ``{ ... }`` of the preprocessed text: positions are (line, column)
    indices into the preprocessed lines."""

    header: tuple[int, int]
    open: tuple[int, int]
    close: tuple[int, int]
    header_text: str

    @property
    def function_name(self) -> str | None:
        """The defined function's name, when the header looks like ``... name(...)``."""
        text = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", self.header_text).strip()
        if not text.endswith(")"):
            return None
        for match in re.finditer(r"([A-Za-z_]\w*)\s*\(", text):
            if match.group(1) not in _NOT_NAMES:
                return match.group(1)
        return None


@dataclass
class WholeFile:
    """The user's file, its preprocessed form, and where each preprocessed line came from."""

    text: str
    file: str | None
    lines: list[str]  # preprocessed lines
    origin: list[int | None]  # the user's line (1-based) of each preprocessed line
    blocks: list[Block] = field(default_factory=list)
    typedefs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, text: str, file: str | None, include_dirs: Sequence[str] = (),
             defines: Sequence[str] = ()) -> WholeFile:
        return cls.from_preprocessed(text, file, preprocess(text, file, include_dirs, defines))

    @classmethod
    def from_preprocessed(cls, text: str, file: str | None, output: str) -> WholeFile:
        lines = output.split("\n")
        origin: list[int | None] = []
        current_file, line, last_main = STDIN, 1, None
        for raw in lines:
            marker = _MARKER.match(raw.lstrip()) if raw.lstrip().startswith("#") else None
            if marker:
                current_file, line = marker.group(2), int(marker.group(1))
                origin.append(None)
                continue
            if current_file == STDIN:
                last_main = line
                origin.append(line)
            else:
                # a system header's tokens inside a main-file line (``stderr``): they belong
                # to the main-file line that used them; a header's own lines have none
                origin.append(-last_main if last_main is not None else None)
            line += 1
        whole = cls(text, file, lines, origin)
        whole.blocks = whole._scan()
        whole.typedefs = _typedefs(output)
        return whole

    # ------------------------------------------------------------------ the blocks
    def _scan(self) -> list[Block]:
        """Top-level brace blocks; a header starts after the last top-level ';' or '}'."""
        blocks: list[Block] = []
        depth, after, opened = 0, (0, 0), (0, 0)
        for k, raw in enumerate(self.lines):
            if raw.lstrip().startswith("#"):
                continue
            col, n = 0, len(raw)
            while col < n:
                ch = raw[col]
                if ch in "\"'":
                    col = _skip_literal(raw, col)
                    continue
                if ch == "{":
                    if depth == 0:
                        opened = (k, col)
                    depth += 1
                elif ch == "}":
                    depth = max(0, depth - 1)
                    if depth == 0:
                        header = self._between(after, opened)
                        blocks.append(Block(after, opened, (k, col), header))
                        after = (k, col + 1)
                elif ch == ";" and depth == 0:
                    after = (k, col + 1)
                col += 1
        return blocks

    def _between(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        parts = []
        for k in range(start[0], end[0] + 1):
            raw = self.lines[k]
            if raw.lstrip().startswith("#"):
                continue
            lo = start[1] if k == start[0] else 0
            hi = end[1] if k == end[0] else len(raw)
            parts.append(raw[lo:hi])
        return " ".join(parts)

    def in_main_file(self, block: Block) -> bool:
        return any(o is not None and o > 0 for o in self.origin[block.open[0]:block.close[0] + 1])

    def functions(self) -> dict[str, Block]:
        """The functions defined in the user's own file, by name."""
        found: dict[str, Block] = {}
        for block in self.blocks:
            name = block.function_name
            if name is not None and self.in_main_file(block):
                found.setdefault(name, block)
        return found

    def scop_lines(self, block: Block) -> tuple[int, int] | None:
        """The user's lines of the block's ``#pragma scop`` and ``#pragma endscop``."""
        scop = end = None
        for k in range(block.open[0], block.close[0] + 1):
            if self.origin[k] is None or self.origin[k] < 0:
                continue
            if scop is None and _SCOP.match(self.lines[k]):
                scop = self.origin[k]
            elif scop is not None and _ENDSCOP.match(self.lines[k]):
                end = self.origin[k]
        return (scop, end) if scop is not None and end is not None else None

    def header_line(self, block: Block) -> int:
        """The user's line where the function's definition starts (its first token)."""
        for k in range(block.header[0], block.open[0] + 1):
            raw = self.lines[k]
            lo = block.header[1] if k == block.header[0] else 0
            if self.origin[k] is not None and self.origin[k] > 0 and raw[lo:].strip():
                return self.origin[k]
        return abs(self.origin[block.open[0]] or 1)

    def function_text(self, block: Block) -> str:
        """The function alone, each line at its line in the user's file (the others
        blank), so that pycparser's coordinates are the user's."""
        slots = [""] * max(1, self.text.count("\n") + 1)
        for k in range(block.header[0], block.close[0] + 1):
            line = self.origin[k]
            if line is None:
                continue
            raw = self.lines[k]
            if k == block.close[0]:
                raw = raw[:block.close[1] + 1]
            if k == block.header[0]:
                raw = " " * block.header[1] + raw[block.header[1]:]
            slot = min(abs(line), len(slots)) - 1
            slots[slot] = f"{slots[slot]} {raw.strip()}" if slots[slot] else raw
        return "\n".join(slots)

    # ------------------------------------------------------------------ call site
    def call_arguments(self, name: str) -> list[int | None] | None:
        """The constant value of each argument of the one call of ``name`` (None where
        it is not a known constant); None when there is not exactly one call or the
        caller cannot be read."""
        call_re = re.compile(rf"\b{re.escape(name)}\s*\(")
        calls: list[tuple[c_ast.FuncCall, c_ast.FuncDef]] = []
        for caller_name, block in self.functions().items():
            if caller_name == name:
                continue
            body = self._between(block.header, (block.close[0], block.close[1] + 1))
            if not call_re.search(body.split("{", 1)[-1]):
                continue
            caller = _parse_function(body, self.typedefs, self._type_names())
            if caller is None:
                return None
            calls += [(call, caller) for call in _calls(caller, name)]
        if len(calls) != 1:
            return None
        call, caller = calls[0]
        constants = _constant_locals(caller)
        return [_evaluate(arg, constants) for arg in (call.args.exprs if call.args else [])]

    def _type_names(self) -> set[str]:
        """Every name a typedef of the file defines (``FILE``, ``va_list``), scalar or not."""
        text = "\n".join(line for line in self.lines if not line.lstrip().startswith("#"))
        names = set(re.findall(r"\btypedef\b[^;{}()]*?\b([A-Za-z_]\w*)\s*;", text))
        names |= set(re.findall(r"\}\s*([A-Za-z_]\w*)\s*;", text))  # typedef struct {..} T;
        return names - TYPE_WORDS


def _skip_literal(raw: str, col: int) -> int:
    quote, col = raw[col], col + 1
    while col < len(raw) and raw[col] != quote:
        col += 2 if raw[col] == "\\" else 1
    return col + 1


def _typedefs(output: str) -> dict[str, str]:
    """Scalar typedefs (``typedef unsigned long int size_t;``) -> their C type words."""
    known = dict(STANDARD_TYPEDEFS)
    found: dict[str, str] = {}
    for match in _TYPEDEF.finditer(output):
        words, name = match.group(1).split(), match.group(2)
        resolved: list[str] = []
        for word in words:
            if word in TYPE_WORDS:
                resolved.append(word)
            elif word in known and len(words) == 1:
                resolved.extend(known[word].split())
            else:
                resolved = []
                break
        if resolved and name not in TYPE_WORDS:
            known[name] = found[name] = " ".join(resolved)
    return found


def _parse_function(text: str, typedefs: dict[str, str], opaque: set[str]
                    ) -> c_ast.FuncDef | None:
    """The caller alone, to read its call: the other typedef names (``FILE``) stand for
    ``int`` here, and GNU keywords pycparser does not know are dropped."""
    words = {name: "int" for name in opaque}
    words.update({**STANDARD_TYPEDEFS, **typedefs})
    prelude = " ".join(f"typedef {w} {name};" for name, w in words.items())
    text = _without_gnu(text)
    try:
        tree = c_parser.CParser().parse(prelude + "\n" + text, "caller")
    except Exception:  # noqa: BLE001 - GNU C the parser does not read: no sizes from here
        return None
    defs = [e for e in tree.ext if isinstance(e, c_ast.FuncDef)]
    return defs[0] if len(defs) == 1 else None


_GNU_WORDS = re.compile(r"\b(?:__extension__|__inline__|__inline|__restrict__|__restrict|"
                        r"__volatile__|__const)\b")
_GNU_CALLS = re.compile(r"\b(?:__attribute__|__asm__|__asm|asm|__declspec)\s*\(")


def _without_gnu(text: str) -> str:
    """``text`` without GNU attributes, asm labels and keywords (balanced parentheses)."""
    text = _GNU_WORDS.sub(" ", text)
    while (match := _GNU_CALLS.search(text)) is not None:
        depth, k = 0, match.end() - 1
        while k < len(text):
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                break
        text = text[:match.start()] + " " + text[k:]
    return text


def _calls(node: c_ast.Node, name: str) -> list[c_ast.FuncCall]:
    found = []
    if (isinstance(node, c_ast.FuncCall) and isinstance(node.name, c_ast.ID)
            and node.name.name == name):
        found.append(node)
    for _, child in node.children():
        found += _calls(child, name)
    return found


def _constant_locals(func: c_ast.FuncDef) -> dict[str, int]:
    """Locals of ``func``'s outermost block initialised with a constant and never assigned,
    incremented or taken the address of anywhere in the function."""
    values: dict[str, int] = {}
    declared: dict[str, int] = {}
    changed: set[str] = set()

    def walk(node: c_ast.Node) -> None:
        if isinstance(node, c_ast.Decl) and node.name:
            declared[node.name] = declared.get(node.name, 0) + 1
        if isinstance(node, c_ast.Assignment) and isinstance(node.lvalue, c_ast.ID):
            changed.add(node.lvalue.name)
        if (isinstance(node, c_ast.UnaryOp) and node.op in ("++", "--", "p++", "p--", "&")
                and isinstance(node.expr, c_ast.ID)):
            changed.add(node.expr.name)
        for _, child in node.children():
            walk(child)

    walk(func)
    for item in func.body.block_items or []:
        if isinstance(item, c_ast.Decl) and item.init is not None and item.name:
            value = _evaluate(item.init, values)
            if value is not None and declared[item.name] == 1 and item.name not in changed:
                values[item.name] = value
    return values


_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _evaluate(node: c_ast.Node, constants: dict[str, int]) -> int | None:
    """An integer constant expression's value (names from ``constants``), else None."""
    if isinstance(node, c_ast.Constant) and node.type in ("int", "long int"):
        text = node.value.rstrip("uUlL")
        try:
            return int(text, 0) if not re.fullmatch(r"0\d+", text) else int(text, 8)
        except ValueError:
            return None
    if isinstance(node, c_ast.ID):
        return constants.get(node.name)
    if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
        value = _evaluate(node.expr, constants)
        return None if value is None else (-value if node.op == "-" else value)
    if isinstance(node, c_ast.BinaryOp) and node.op in _BINARY:
        left, right = _evaluate(node.left, constants), _evaluate(node.right, constants)
        return None if left is None or right is None else _BINARY[node.op](left, right)
    if isinstance(node, c_ast.Cast) and isinstance(node.to_type.type, c_ast.TypeDecl):
        return _evaluate(node.expr, constants)
    return None
