"""``#define`` macros, expanded on the AST where they are used.

Input: the macros :mod:`frontend.loops.source` recorded. Output: for an identifier or a
call that names a macro, the AST of its expansion (every node at the use site's
coordinates). Expanding on the AST instead of the tokens is exact only when the macro
cannot change how its surroundings parse, so a macro is expanded only when it is
*hygienic*:

* object-like: a single token, a signed number, or a body in one pair of parentheses
  (``#define N 100``, ``#define M (N + 1)``; not ``#define M N + 1``);
* function-like: the body is in one pair of parentheses and every use of a parameter is
  parenthesised (``#define SQR(x) ((x) * (x))``), or else every argument at the use site
  is an identifier, a constant, an array element or a call, which token substitution
  cannot split either (``#define min(a, b) (a < b ? a : b)`` used as ``min(i, n)``).

Anything else raises UnsupportedError with a hint to parenthesise the macro.
"""

from __future__ import annotations

import copy
import re

from pycparser import c_ast

from polycomp.errors import UnsupportedError

from .source import Macro, Source, parse_text

MAX_DEPTH = 32
_TOKEN = re.compile(r"\s*([A-Za-z_]\w*|\d[\w.]*|\.\d[\w.]*|'(?:\\.|[^'])*'|\"(?:\\.|[^\"])*\"|"
                    r"->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||##|\S)")
_SIMPLE_ARGS = (c_ast.ID, c_ast.Constant, c_ast.ArrayRef, c_ast.FuncCall)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _fully_parenthesised(toks: list[str]) -> bool:
    if len(toks) < 2 or toks[0] != "(" or toks[-1] != ")":
        return False
    depth = 0
    for k, t in enumerate(toks):
        depth += (t == "(") - (t == ")")
        if depth == 0 and k != len(toks) - 1:
            return False
    return True


def _params_parenthesised(toks: list[str], params: tuple[str, ...]) -> bool:
    for k, t in enumerate(toks):
        if t in params and not (0 < k < len(toks) - 1 and toks[k - 1] == "("
                                and toks[k + 1] == ")"):
            return False
    return True


class Macros:
    """The macros of one file, with their bodies parsed on first use."""

    def __init__(self, source: Source):
        self.source = source
        self._bodies: dict[str, c_ast.Node] = {}

    def get(self, name: str) -> Macro | None:
        return self.source.macros.get(name)

    def is_function_like(self, name: str) -> bool:
        macro = self.get(name)
        return macro is not None and macro.params is not None

    def expand(self, node: c_ast.Node, depth: int = 0) -> c_ast.Node | None:
        """The expansion of an ID or FuncCall naming a macro (recursively), else None."""
        if isinstance(node, c_ast.ID):
            macro = self.get(node.name)
            if macro is None or macro.params is not None:
                return None
            self._check_object_like(macro, node)
            out = self._body(macro, node)
        elif isinstance(node, c_ast.FuncCall) and isinstance(node.name, c_ast.ID):
            macro = self.get(node.name.name)
            if macro is None or macro.params is None:
                return None
            args = list(node.args.exprs) if node.args is not None else []
            if len(args) != len(macro.params):
                raise UnsupportedError(
                    f"macro {macro.name} takes {len(macro.params)} argument(s), got {len(args)}",
                    self.source.location(*_coord(node)))
            self._check_function_like(macro, node, args)
            out = _substitute(self._body(macro, node), dict(zip(macro.params, args)))
        else:
            return None
        if depth > MAX_DEPTH:
            raise UnsupportedError("macros expand too deeply (recursive macro?)",
                                   self.source.location(*_coord(node)))
        again = self.expand(out, depth + 1)
        return out if again is None else again

    # ------------------------------------------------------------------ checks
    def _check_object_like(self, macro: Macro, use: c_ast.Node) -> None:
        toks = tokens(macro.body)
        if len(toks) == 1 or (len(toks) == 2 and toks[0] in "+-" and toks[1][:1].isdigit()) \
                or _fully_parenthesised(toks):
            return
        raise UnsupportedError(
            f"macro {macro.name} ({macro.body or 'empty'}) is not a parenthesised expression",
            self.source.location(*_coord(use), len(macro.name)),
            hint=f"write #define {macro.name} ({macro.body or '...'}) so that it expands as "
                 f"one operand")

    def _check_function_like(self, macro: Macro, use: c_ast.Node, args: list) -> None:
        toks = tokens(macro.body)
        if "#" in toks or "##" in toks:
            raise UnsupportedError(f"macro {macro.name} uses # or ##",
                                   self.source.location(*_coord(use)))
        params = macro.params or ()
        if _fully_parenthesised(toks) and _params_parenthesised(toks, params):
            return
        if (_fully_parenthesised(toks) or len(toks) == 1) \
                and all(isinstance(a, _SIMPLE_ARGS) for a in args):
            return
        raise UnsupportedError(
            f"macro {macro.name} does not parenthesise its parameters, so its expansion "
            f"here depends on the argument tokens",
            self.source.location(*_coord(use), len(macro.name)),
            hint=f"parenthesise the body and every parameter: e.g. #define {macro.name}"
                 f"({', '.join(params)}) (... (x) ...), or pass plain names/constants")

    # ------------------------------------------------------------------ bodies
    def _body(self, macro: Macro, use: c_ast.Node) -> c_ast.Node:
        if macro.name not in self._bodies:
            if not macro.body.strip():
                raise UnsupportedError(f"macro {macro.name} is empty and cannot be used as a "
                                       f"value", self.source.location(*_coord(use)))
            text = (self.source.prelude()
                    + f"void polycomp_macro_body(void) {{ ({macro.body}); }}\n")
            try:
                tree = parse_text(text, Source(text="", file=self.source.file))
            except Exception:  # noqa: BLE001 - any failure: not an expression
                raise UnsupportedError(f"the body of macro {macro.name} is not a C expression",
                                       self.source.location(*_coord(use), len(macro.name)),
                                       hint="only constant and expression macros are "
                                            "supported") from None
            self._bodies[macro.name] = tree.ext[-1].body.block_items[0]
        body = copy.deepcopy(self._bodies[macro.name])
        _set_coord(body, getattr(use, "coord", None))
        return body


def _coord(node: c_ast.Node) -> tuple[int | None, int | None]:
    coord = getattr(node, "coord", None)
    return (getattr(coord, "line", None), getattr(coord, "column", None))


def _set_coord(node: c_ast.Node, coord: object) -> None:
    node.coord = coord
    for _, child in node.children():
        _set_coord(child, coord)


def _substitute(node: c_ast.Node, args: dict[str, c_ast.Node]) -> c_ast.Node:
    """``node`` with every ID naming a parameter replaced by (a copy of) its argument."""
    if isinstance(node, c_ast.ID) and node.name in args:
        return copy.deepcopy(args[node.name])
    for attr in node.__slots__:
        if attr in ("coord", "__weakref__"):
            continue
        value = getattr(node, attr, None)
        if isinstance(value, c_ast.Node):
            setattr(node, attr, _substitute(value, args))
        elif isinstance(value, list):
            setattr(node, attr, [_substitute(v, args) if isinstance(v, c_ast.Node) else v
                                 for v in value])
    return node
