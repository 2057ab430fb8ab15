"""Source: what codegen hands to the build stage.

The text of a C (or later CUDA) translation unit, the entry function's name, and its
C arguments in order, so the runtime can call it without parsing C.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CArgument:
    """One parameter of the entry function.

    kind  "size" (an int64 size parameter, parametric mode), "scalar" (a value),
          or "array" (a pointer to the first element of a C-contiguous array)
    name  the program's name for it (array, scalar or parameter name)
    ctype the C type of the value or of the array element
    """

    kind: str
    name: str
    ctype: str
    dtype: str


@dataclass(frozen=True)
class Source:
    text: str
    language: str  # "c"
    entry: str
    arguments: tuple[CArgument, ...]

    def __str__(self) -> str:
        return self.text
