"""Write the compiled SCoP back into the user's whole file (the last step of
``polycomp compile FILE.c``, after wholefile.py read it and codegen printed the kernel).

Input: the LoopDefinition read from a whole file (wholefile.py), the codegen ``Source``
of its Program, the sizes it was specialised to (or None). Output: the user's text,
unchanged but for two places, so that it builds with its own harness:

* above the function, the generated translation unit (its entry made ``static``);
* the ``#pragma scop`` ... ``#pragma endscop`` lines (without a region, the function's
  body) become a call of that entry, with the enclosing function's own names:

      #pragma scop                         { /* polycomp: ... specialised to ni = 1000 ... */
      for (i = 0; i < _PB_NI; i++)   ──►     if (ni == 1000 && nj == 1100 && nk == 1200) {
        ...                                    (void)polycomp_kernel_gemm(alpha, beta,
      #pragma endscop                              &C[0][0], &A[0][0], &B[0][0]);
                                             } else {
                                               for (i = 0; i < _PB_NI; i++) ...  (the original)
                                             }
                                           }

A size argument of the generated code is the function's size parameter; a scalar is the
parameter's value; an array parameter is a pointer to its first element (the generated
code indexes it row-major with the declared extents, as C does). Locals the region uses
(temporaries of the Program: ``double sum;``) are the function's own when declared above
the region, else fresh locals declared as the function declared them. A specialised kernel
runs only when the sizes are the ones it was compiled for; other sizes run the original
code, so the output is correct for every call. The code needs no polycomp runtime, and
without ``-fopenmp`` the OpenMP pragmas are ignored and the code stays correct.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pycparser import c_ast, c_generator

from polycomp.codegen.source import Source as CSource
from polycomp.errors import Location, UnsupportedError

from .scope import ArrayVar, ScalarParam


def splice(definition, compiled: CSource, sizes: Mapping[str, int] | None,  # noqa: ANN001
           note: str = "") -> str:
    """The user's file with the region of ``definition`` replaced (see the module doc)."""
    whole, block = definition.whole, definition.block
    where = Location(file=whole.file if whole else None)
    if whole is None or block is None:
        raise UnsupportedError("only a function read from a whole file can be written back",
                               where, hint="use --emit c for the generated kernel alone")
    lines = whole.text.split("\n")
    region = whole.scop_lines(block)
    lowered = definition.lowered
    start = region[0] if region else abs(whole.origin[block.open[0]] or 1)
    call, locals_ = _call(lowered, compiled, start, sizes is None)
    guard = _guard(lowered, sizes)
    what = (f"specialised to {', '.join(f'{k} = {v}' for k, v in sorted(sizes.items()))}"
            if sizes else "parametric")
    comment = f"/* polycomp{note}: the region of {definition.name} runs the optimised " \
              f"code ({what}) */"
    fast = locals_ + [f"(void){call};"]
    if region:
        scop, end = region
        pad = re.match(r"\s*", lines[scop - 1]).group(0)
        original = lines[scop:end - 1]
        body = _guarded(pad, guard, fast, original, comment)
        out = lines[:scop - 1] + body + lines[end:]
    else:
        out = _replace_body(whole, block, lines, guard, fast, comment, where)
    unit = _static_entry(compiled)
    at = whole.header_line(block) - 1
    banner = f"/* ---- polycomp: optimised code for {definition.name}, used below ---- */"
    return "\n".join(out[:at] + [banner, unit.rstrip("\n"), "/* ---- end of polycomp code "
                                 "---- */", ""] + out[at:])


def _guarded(pad: str, guard: str | None, fast: list[str], original: list[str],
             comment: str) -> list[str]:
    if guard is None:
        return [f"{pad}{{ {comment}"] + [f"{pad}  {line}" for line in fast] + [f"{pad}}}"]
    return ([f"{pad}{{ {comment}", f"{pad}  if ({guard}) {{"]
            + [f"{pad}    {line}" for line in fast]
            + [f"{pad}  }} else {{"] + original + [f"{pad}  }}", f"{pad}}}"])


def _replace_body(whole, block, lines: list[str], guard: str | None,  # noqa: ANN001
                  fast: list[str], comment: str, where: Location) -> list[str]:
    """The function's body (no ``#pragma scop``): ``{ if (guard) call else { body } }``."""
    first, last = abs(whole.origin[block.open[0]] or 0), abs(whole.origin[block.close[0]] or 0)
    k_open = _nth(lines[first - 1], "{", _count(whole.lines[block.open[0]], "{", block.open[1]))
    k_close = _nth(lines[last - 1], "}", _count(whole.lines[block.close[0]], "}",
                                                block.close[1]))
    if not first or not last or k_open is None or k_close is None:
        raise UnsupportedError("cannot find the function's braces in the file's text", where,
                               hint="mark the region with #pragma scop / #pragma endscop")
    head, tail = lines[first - 1][:k_open + 1], lines[last - 1][k_close:]
    if first == last:
        inner = [lines[first - 1][k_open + 1:k_close]]
    else:
        inner = ([lines[first - 1][k_open + 1:]] + lines[first:last - 1]
                 + [lines[last - 1][:k_close]])
    body = _guarded("", guard, fast, ["{"] + inner + ["}"] if guard else [], comment)
    return lines[:first - 1] + [head] + body + [tail] + lines[last:]


def _count(text: str, ch: str, upto: int) -> int:
    return text[:upto].count(ch)


def _nth(text: str, ch: str, n: int) -> int | None:
    k = -1
    for _ in range(n + 1):
        k = text.find(ch, k + 1)
        if k < 0:
            return None
    return k


def _guard(lowered, sizes: Mapping[str, int] | None) -> str | None:  # noqa: ANN001
    if not sizes:
        return None
    names = {s.name: s.c_name for s in lowered.inputs if isinstance(s, ScalarParam)}
    return " && ".join(f"{names[k]} == {v}" for k, v in sorted(sizes.items()) if k in names) \
        or None


def _call(lowered, compiled: CSource, region_line: int,  # noqa: ANN001
          parametric: bool) -> tuple[str, list[str]]:
    """The entry's call with the function's names, and the fresh locals it needs."""
    scalars = {s.name: s for s in lowered.inputs if isinstance(s, ScalarParam)}
    arrays = {a.name: a for a in lowered.arrays}
    args: list[str] = []
    fresh: list[str] = []
    for arg in compiled.arguments:
        if arg.kind in ("size", "scalar"):
            args.append(scalars[arg.name].c_name)
            continue
        array: ArrayVar = arrays[arg.name]
        first = "[0]" * len(array.shape)
        if array.is_param or (array.decl.coord is not None
                              and array.decl.coord.line < region_line):
            args.append(f"&{array.c_name}{first}" if first else f"&{array.c_name}")
            continue
        name = f"polycomp_local{len(fresh)}"
        fresh.append(f"{arg.ctype} {name}{_dims(array.decl)};")
        args.append(f"&{name}{first}")
    return f"{compiled.entry}({', '.join(args)})", fresh


def _dims(decl: c_ast.Node) -> str:
    """``[n][m + 1]`` as the declaration wrote them (after preprocessing)."""
    text, node = "", getattr(decl, "type", None)
    generator = c_generator.CGenerator()
    while isinstance(node, c_ast.ArrayDecl):
        text += f"[{generator.visit(node.dim)}]"
        node = node.type
    return text


def _static_entry(compiled: CSource) -> str:
    """The unit with its entry ``static``: it is one function of the user's file now."""
    return re.sub(rf"^int {re.escape(compiled.entry)}\(", f"static int {compiled.entry}(",
                  compiled.text, count=1, flags=re.M)
