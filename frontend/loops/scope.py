"""What a C name means inside the SCoP: symbols, block scopes, and isl-safe names.

A C identifier resolves (innermost block first) to one of

    ScalarParam  a by-value parameter: a size (an isl parameter) or a plain scalar value
    ArrayVar     an array: a parameter (``double A[n][m]``) or a local temporary; local
                 scalars (``double sum;``) are zero-dimensional arrays
    Iterator     the iterator of an enclosing ``for`` loop (a dimension of the domain)
    Local        a local scalar whose use is not known yet: it becomes an ArrayVar when it
                 is first used as a value, or the variable of loops when a loop uses it

Names given to isl (parameters, iterators, arrays) avoid isl's keywords and the
statement names ``S0, S1, ...``; they are built into isl objects programmatically, never
parsed, but a Program is printed and may be read back (``--load-schedule``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import islpy as isl
from pycparser import c_ast

# words isl's parser treats specially, and names polycomp reserves
ISL_RESERVED = frozenset("""
and or not xor implies exists min max floor ceil floord ceild mod cond infty NaN nan true
false rat domain range div
""".split())
_STATEMENT = re.compile(r"S\d+\Z")


class Names:
    """Hands out unique, isl-safe names."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def claim(self, base: str) -> str:
        name = base
        while name in ISL_RESERVED or name in self.used or _STATEMENT.match(name):
            name += "_"
        self.used.add(name)
        return name


@dataclass(eq=False)
class ScalarParam:
    c_name: str
    name: str  # isl / Program name
    dtype: str
    is_size: bool
    decl: c_ast.Decl


@dataclass(eq=False)
class ArrayVar:
    """An array; ``shape`` holds one parameter-only PwAff per dimension."""

    c_name: str
    name: str
    dtype: str
    shape: tuple[isl.PwAff, ...]
    is_param: bool
    decl: c_ast.Node
    declared: tuple[int | str | isl.PwAff, ...] = ()  # dims as the Interface shows them
    written: bool = False
    read: bool = False


@dataclass(eq=False)
class Iterator:
    c_name: str
    dim: str  # the domain dimension's name
    dtype: str


@dataclass(eq=False)
class Local:
    """A local scalar declared but not used yet (see the module docstring)."""

    c_name: str
    dtype: str
    decl: c_ast.Decl
    array: ArrayVar | None = None  # once used as a value
    loop_var: bool = False  # once used as the variable of a loop


Symbol = ScalarParam | ArrayVar | Iterator | Local


@dataclass
class Scopes:
    """A stack of block scopes, innermost last."""

    stack: list[dict[str, Symbol]] = field(default_factory=lambda: [{}])

    def lookup(self, name: str) -> Symbol | None:
        for scope in reversed(self.stack):
            if name in scope:
                return scope[name]
        return None

    def declare(self, name: str, symbol: Symbol) -> None:
        self.stack[-1][name] = symbol

    def declared_here(self, name: str) -> bool:
        return name in self.stack[-1]

    def push(self) -> None:
        self.stack.append({})

    def pop(self) -> None:
        self.stack.pop()
