"""The Tensor Comprehensions frontend: TC source text -> polycomp.ir.Program.

Stages (one module each, as in TC itself): lexer.py (tokens with offsets), parser.py
(recursive descent -> syntax.py trees), sema.py with typecheck.py and ranges.py (names,
types, where clauses, range inference), lower.py (-> Program). The language is
described in docs/TC.md.

    >>> module = parse("def mm(float(M,K) A, float(K,N) B) -> (C) "
    ...                "{ C(m, n) +=! A(m, k) * B(k, n) }")
    >>> program = module.get(None).lower({"M": 64, "N": 32, "K": 16})
    >>> [s.name for s in program.statements]
    ['S0', 'S1']
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from polycomp.errors import UnknownNameError, location_in_text
from polycomp.ir import Interface, Program

from .lower import format_ranges, lower_def
from .parser import parse_module
from .sema import CheckedDef, check_module

__all__ = ["TCDefinition", "TCModule", "parse"]


class TCDefinition:
    """One checked ``def``: its interface, and lowering to a Program.

    name          the def's name
    interface     inputs in declared order (TensorArg / ScalarArg), output names in order
    gradient      the name after ``<=>`` (metadata), or None; its arguments in
                  ``gradient_args``
    sizes         the size names ``lower`` needs values for (tensor dimension names, then
                  integer parameters used in indices)
    """

    def __init__(self, checked: CheckedDef):
        self._checked = checked
        self.name: str = checked.name
        self.interface: Interface = checked.interface
        grad = checked.gradient
        self.gradient: str | None = grad.name.name if grad else None
        self.gradient_args: tuple[str, ...] = tuple(a.name for a in grad.args) if grad else ()
        self.sizes: tuple[str, ...] = checked.sizes

    def __repr__(self) -> str:
        return f"<TCDefinition {self.name}>"

    def lower(self, sizes: Mapping[str, int] | None = None) -> Program:
        """The validated Program: specialised to ``sizes`` (no parameters), or parametric
        in the sizes when ``sizes`` is None."""
        return lower_def(self._checked, sizes).program

    def explain_ranges(self, sizes: Mapping[str, int] | None = None) -> str:
        """For each statement and index: its range and what bounded it, e.g.
        ``S1: k in 0:K  (bounded by A(m, k), dimension 1 of A)``."""
        lowered = lower_def(self._checked, sizes, validate=False)
        return format_ranges(lowered.ranges, lowered.program.context)

    def statement_sources(self) -> list[tuple[str, str]]:
        """(statement name, TC source text) for every statement of the lowered program;
        an init statement (``op=!``) shares the text of its update."""
        out = []
        k = 0
        for cs in self._checked.statements:
            copies = 2 if cs.init else 1
            for _ in range(copies):
                out.append((f"S{k}", cs.text))
                k += 1
        return out


class TCModule:
    """Every def of a TC source, checked, in source order."""

    def __init__(self, defs: dict[str, TCDefinition], source: str, file: str | None):
        self.defs = defs
        self.source, self.file = source, file

    def __repr__(self) -> str:
        return f"<TCModule {', '.join(self.defs)}>"

    def get(self, entry: str | None = None) -> TCDefinition:
        """The def named ``entry``; without a name, the only def of the source."""
        if entry is None:
            if len(self.defs) == 1:
                return next(iter(self.defs.values()))
            if not self.defs:
                raise UnknownNameError("the source defines no def", _file_loc(self),
                                       hint="write 'def name(inputs) -> (outputs) { ... }'")
            raise UnknownNameError(f"the source defines several defs ({', '.join(self.defs)}); "
                                   "say which one to use", _file_loc(self),
                                   hint=f"pass an entry name, one of {', '.join(self.defs)}")
        if entry not in self.defs:
            close = difflib.get_close_matches(entry, list(self.defs), n=1)
            hint = f"did you mean '{close[0]}'?" if close else \
                f"the defs are: {', '.join(self.defs) or 'none'}"
            raise UnknownNameError(f"no def named '{entry}'", _file_loc(self), hint=hint)
        return self.defs[entry]


def _file_loc(module: TCModule):
    return location_in_text(module.source, 0, 1, module.file) if module.source else None


def parse(source: str, file: str | None = None) -> TCModule:
    """Parse and check every def of a TC source; raises a PolycompError subclass with a
    source location on any error."""
    checked = check_module(parse_module(source, file))
    return TCModule({c.name: TCDefinition(c) for c in checked}, source, file)
