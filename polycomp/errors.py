"""Every error a user can cause, with where it happened and what to do about it.

All stages raise subclasses of :class:`PolycompError`. Each carries a
:class:`Location` (file, line and column with the source line for a caret excerpt,
or an ONNX node name) and a one-line hint. ``str(error)`` renders the whole message:

    kernel.tc:3:17: error: unknown tensor 'X'
        C(m, n) +=! X(m, k) * B(k, n)
                    ^
    hint: declare 'X' as an input in the def's parameter list

Errors in polycomp itself (a schedule we produced failing its own check) are
:class:`InternalError`, which is deliberately *not* a PolycompError: it is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """Where in the user's input something is: a source span or a graph node."""

    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    source_line: str | None = None  # text of the line, for the caret excerpt
    length: int = 1
    node: str | None = None  # ONNX node name, or a statement/argument name

    def __str__(self) -> str:
        parts = []
        if self.file:
            parts.append(self.file)
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        text = ":".join(parts)
        if self.node:
            text = f"{text} (in {self.node})" if text else f"in {self.node}"
        return text

    def excerpt(self) -> str:
        """The source line with a caret under the span, or '' without a source line."""
        if self.source_line is None or self.column is None:
            return ""
        line = self.source_line.rstrip("\n").expandtabs(1)
        marks = "^" * max(1, min(self.length, max(1, len(line) - self.column + 1)))
        return f"    {line}\n    {' ' * (self.column - 1)}{marks}"


def location_in_text(text: str, offset: int, length: int = 1, file: str | None = None) -> Location:
    """The Location of character ``offset`` in ``text`` (line and column 1-based)."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    source_line = text[start:] if end < 0 else text[start:end]
    return Location(file=file, line=line, column=offset - start + 1,
                    source_line=source_line, length=max(1, length))


class PolycompError(Exception):
    """Base class of every error a user's input or arguments can cause."""

    def __init__(self, message: str, location: Location | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location
        self.hint = hint

    def __str__(self) -> str:
        head = f"error: {self.message}"
        if self.location is not None and str(self.location):
            head = f"{self.location}: {head}"
        lines = [head]
        if self.location is not None and self.location.excerpt():
            lines.append(self.location.excerpt())
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


class ParseError(PolycompError):
    """The text is not a well-formed program (lexical or syntax error)."""


class UnknownNameError(PolycompError):
    """A tensor, function, index or size that is not declared."""


class DuplicateNameError(PolycompError):
    """A name declared twice."""


class RankMismatchError(PolycompError):
    """A tensor used with the wrong number of indices."""


class TypeMismatchError(PolycompError):
    """Operand or argument types that do not fit together."""


class NonAffineError(PolycompError):
    """An index, bound or condition that is not affine where it must be."""


class RangeInferenceError(PolycompError):
    """An index whose range cannot be inferred, or is ambiguous."""


class DefinitionOrderError(PolycompError):
    """A tensor read before any statement writes it, or statements that depend in a cycle."""


class OutOfBoundsError(PolycompError):
    """An access that can touch an element outside its array."""


class UnsupportedError(PolycompError):
    """Well-formed input that polycomp does not handle (yet, or in this mode)."""


class OptionError(PolycompError):
    """An unknown option or an option value out of its range."""


class UnknownTargetError(OptionError):
    """Options.target names no registered target (polycomp/targets/); the hint lists
    the known ones."""


class ArgumentError(PolycompError):
    """A kernel called with arguments of the wrong kind, dtype, rank or shape, or an API
    function (compile, compile_loops, Program.from_isl...) given a value of the wrong kind."""


class IntegerDivisionError(PolycompError):
    """An integer division or modulo by zero (or the overflowing MIN / -1): refused at
    compile time when the divisor is a constant, and otherwise met while a kernel ran
    (C leaves it undefined and the CPU traps, so generated code checks the divisor and
    the call raises this instead)."""


class IllegalScheduleError(PolycompError):
    """A user-supplied schedule or transform that violates a dependence."""


class CompilerError(PolycompError):
    """The C compiler failed or is missing."""


class ResourceLimitError(PolycompError):
    """A GPU kernel needs more per block than the device allows: threads, registers or
    shared memory (polycomp/cuda.py check_limits, and ptxas's own refusal)."""


class InternalError(RuntimeError):
    """A bug in polycomp: a check on something polycomp itself produced failed."""
