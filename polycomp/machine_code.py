"""The machine-code check: did every loop the schedule marks vector compile to vector code?

Place in the pipeline: after the build (polycomp/build.py), on the object or shared
library the C compiler wrote. Input: its path; the generated C it was compiled from is
found through the line table (polycomp builds with ``-g1``, which adds line tables and
changes no instruction, and keeps each translation unit's source beside its object in
the cache). Output: a MachineCodeReport, per loop marked ``#pragma omp simd`` in that
source, the floating-point arithmetic the compiler emitted for the loop's lines: packed
(``vfmadd231ps %zmm``) or scalar (``vfmadd213ss``), the widest vector register, the
gathers, and the distinct accumulators of its packed FMAs (the register tile).

Why: the schedule's vector mark is a request to the C compiler, and the compiler may
decline it without a word (gcc 12: "data ref analysis failed" on a reduction reading a
channel-blocked input through floord/mod, and twelve ResNet-50 convolutions ran at a
tenth of their speed). A marked loop whose arithmetic is all scalar is reported: a
PerformanceWarning when a kernel is built (with gcc's own reason, from the
``-fopt-info-vec-missed`` report the same compile writes beside the object), an error in the test suite (setup.cfg turns the warning into one), and
``polycomp.inspect`` prints the whole report.

Only x86-64 object code is read (objdump's AT&T syntax); elsewhere the report says so and
judges nothing. A marked loop with no floating-point arithmetic is not judged either: its
report says so. That is a loop whose C only copies elements and stores constants (a
layout change, a zero-fill: arithmetic the line table gives its lines is some fused
neighbour's), or one whose object code has none (integer code).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class PerformanceWarning(UserWarning):
    """Generated code is correct but slower than it was meant to be (a loop the schedule
    marks vector compiled to scalar arithmetic)."""


#: the flag every build adds for line tables (no effect on the instructions)
LINE_TABLE_FLAG = "-g1"

# a loop the schedule marks vector: ``omp simd``, or the innermost loop of a register tile
# printed with vector variables (codegen/vector_tile.MARKER)
_SIMD = re.compile(r"^\s*(?:#\s*pragma\s+omp\s+(?:parallel\s+for\s+)?simd\b"
                   r"|/\* polycomp: register tile \*/)")
_FOR = re.compile(r"^(\s*)for\s*\(")
_FUNCTION = re.compile(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")
# objdump -d --line-numbers: a function, a source position, an instruction
_SYMBOL = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")
_POSITION = re.compile(r"^(\S.*?):(\d+)(?: \(discriminator \d+\))?$")
# a statement that stores an element of an array or a literal into an element: indices
# hold integer arithmetic only (the printer's flat indices have no nested brackets)
_ELEMENT = r"[A-Za-z_]\w*\[[^\[\]]*\]"
_COPY = re.compile(rf"^{_ELEMENT}\s*=\s*(?:{_ELEMENT}|[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?f?"
                   r"|INFINITY))\s*;$")
_INSTRUCTION = re.compile(r"^\s+[0-9a-f]+:\s+(?:[0-9a-f]{2} )*\s*([a-z][\w.]*)\s*(.*)$")
# floating-point arithmetic, SSE and AVX encodings: (fma?, packed?)
_FP_ARITH = re.compile(r"^v?(?P<op>f(?:n?m(?:add|sub)(?:sub|add)?)\d{3}|add|sub|mul|div|max|min"
                       r"|sqrt)(?P<kind>ps|pd|ph|ss|sd|sh)$")
_GATHER = re.compile(r"^v(?:p?gather)")
_REGISTER = re.compile(r"%([xyz])mm(\d+)")
_WIDTH = {"x": 128, "y": 256, "z": 512}


@dataclass(frozen=True)
class MarkedLoop:
    """A loop marked ``#pragma omp simd`` in a generated C file (lines count from 1)."""

    source: str      # the C file's path
    function: str    # the C function it is in
    line: int        # its ``for`` line
    last: int        # the last line of its body
    statement: str   # its first statement, for the report
    # every statement of its body copies an element or stores a constant (a layout
    # change, a padded copy, a zero-fill): no floating-point arithmetic of its own, so
    # arithmetic that the line table puts on its lines (gcc fuses a short copy with the
    # loop after it) is not the loop's, and the loop is not judged
    copies_only: bool = False


@dataclass
class LoopCode:
    """What the compiler emitted for one marked loop's lines."""

    loop: MarkedLoop
    packed_fma: int = 0
    scalar_fma: int = 0
    packed_other: int = 0   # other packed FP arithmetic (add, mul, max, ...)
    scalar_other: int = 0
    gathers: int = 0
    reason: str = ""        # the compiler's word on why it did not vectorise the loop
    width: int = 0          # widest vector register among its packed arithmetic (bits)
    accumulators: set[str] = field(default_factory=set)  # packed FMAs' destinations

    @property
    def judged(self) -> bool:
        """Whether the loop has floating-point arithmetic to judge by."""
        if self.loop.copies_only:
            return False
        return bool(self.packed_fma + self.packed_other + self.scalar_fma + self.scalar_other)

    @property
    def scalar(self) -> bool:
        """Floating-point arithmetic, none of it packed: the vector mark was not honoured."""
        return self.judged and not (self.packed_fma or self.packed_other)


@dataclass
class MachineCodeReport:
    """The marked loops of one object or library, and per function its FMA counts."""

    path: str
    checked: bool                         # False: not x86-64 code, or no objdump
    why_unchecked: str = ""
    loops: list[LoopCode] = field(default_factory=list)
    functions: dict[str, tuple[int, int]] = field(default_factory=dict)  # (packed, scalar) FMAs
    groups: dict[str, str] = field(default_factory=dict)  # source path -> a model's group

    @property
    def scalar_loops(self) -> list[LoopCode]:
        return [c for c in self.loops if c.scalar]

    def summary(self) -> str:
        """A table per marked loop: where it is, packed and scalar FMAs, other packed
        arithmetic, width, accumulators, and the verdict (with the compiler's reason)."""
        if not self.checked:
            return f"{self.path}: not checked ({self.why_unchecked})"
        judged = [c for c in self.loops if c.judged]
        lines = [f"{os.path.basename(self.path)}: {len(self.loops)} loops marked vector, "
                 f"{len(judged)} with floating-point arithmetic, "
                 f"{len(self.scalar_loops)} of them compiled scalar",
                 f"  {'where':<44} {'line':>5} {'FMA packed':>10} {'scalar':>6} "
                 f"{'other packed':>12} {'scalar':>6} {'width':>5} {'acc':>4}  verdict"]
        for c in self.loops:
            where = self.groups.get(c.loop.source, c.loop.function)
            verdict = ("SCALAR" + (f" ({c.reason})" if c.reason else "") if c.scalar
                       else "vector" if c.judged else "no FP arithmetic")
            lines.append(f"  {where[:44]:<44} {c.loop.line:>5} {c.packed_fma:>10} "
                         f"{c.scalar_fma:>6} {c.packed_other:>12} {c.scalar_other:>6} "
                         f"{c.width or '-':>5} {len(c.accumulators):>4}  {verdict}")
        return "\n".join(lines)


# ---------------------------------------------------------------------- the C side
def marked_loops(text: str, source: str = "") -> list[MarkedLoop]:
    """The loops of generated C ``text`` marked ``#pragma omp simd``, with their body's
    line range: the lines after the ``for`` indented deeper than it, or, where the body
    is a block whose braces stand at the ``for``'s indentation, up to its closing brace."""
    lines = text.splitlines()
    out: list[MarkedLoop] = []
    function = ""
    for k, line in enumerate(lines):
        head = _FUNCTION.match(line)
        if head and not line.startswith((" ", "\t", "#")) and line.rstrip().endswith(")"):
            function = head.group(1)
        if not _SIMD.match(line):
            continue
        j = k + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        found = _FOR.match(lines[j]) if j < len(lines) else None
        if not found:
            continue
        indent = len(found.group(1).expandtabs())
        last = j
        m = j + 1
        if m < len(lines) and lines[m].strip() == "{" and \
                len(lines[m]) - len(lines[m].lstrip()) == indent:
            depth = 0
            for m in range(j + 1, len(lines)):
                depth += lines[m].count("{") - lines[m].count("}")
                if depth == 0:
                    break
            last = m
        else:
            while m < len(lines) and (not lines[m].strip() or
                                      len(lines[m].expandtabs()) - len(
                                          lines[m].expandtabs().lstrip()) > indent):
                last = m if lines[m].strip() else last
                m += 1
        body = [s.strip() for s in lines[j + 1:last + 1] if s.strip() not in ("", "{", "}")]
        copies = bool(body) and all(_COPY.match(s) for s in body)
        out.append(MarkedLoop(source, function, j + 1, last + 1,
                              (body[0] if body else lines[j].strip())[:120], copies))
    return out


# ---------------------------------------------------------------------- the machine side
@functools.lru_cache(maxsize=1)
def objdump() -> str | None:
    return shutil.which("objdump")


def is_x86_64() -> bool:
    return os.uname().machine in ("x86_64", "AMD64", "amd64")


def disassemble(path: str | os.PathLike) -> str:
    tool = objdump()
    if tool is None:
        raise FileNotFoundError("objdump")
    done = subprocess.run([tool, "-d", "--line-numbers", "--no-show-raw-insn", str(path)],
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise OSError(done.stderr.strip()[:500])
    return done.stdout


def _instructions(listing: str) -> Iterable[tuple[str, str, int, str, str]]:
    """(function symbol, source file, line, mnemonic, operands) per instruction that has
    a source position."""
    symbol, source, line = "", "", 0
    for text in listing.splitlines():
        if m := _SYMBOL.match(text):
            symbol, source, line = m.group(1), "", 0
        elif m := _POSITION.match(text):
            source, line = m.group(1), int(m.group(2))
        elif m := _INSTRUCTION.match(text):
            yield symbol, source, line, m.group(1), m.group(2)


def inspect_listing(listing: str, path: str, texts: dict[str, str] | None = None
                    ) -> MachineCodeReport:
    """The report for objdump's ``listing`` of ``path``. ``texts`` gives the C of the
    source files by path; a file not given is read from disk where it still exists."""
    texts = dict(texts or {})
    loops_by_source: dict[str, list[LoopCode]] = {}
    functions: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for symbol, source, line, mnemonic, operands in _instructions(listing):
        arith = _FP_ARITH.match(mnemonic)
        gather = bool(_GATHER.match(mnemonic))
        if not (arith or gather) or not source:
            continue
        if source not in loops_by_source:
            text = texts.get(source)
            if text is None and source.endswith((".c", ".cpp", ".cu")) and os.path.exists(source):
                text = Path(source).read_text(errors="replace")
            loops_by_source[source] = [LoopCode(loop) for loop in
                                       marked_loops(text, source)] if text else []
        packed = bool(arith) and arith.group("kind") in ("ps", "pd", "ph")
        fma = bool(arith) and arith.group("op").startswith("f")
        if fma:
            functions[symbol][0 if packed else 1] += 1
        for code in loops_by_source[source]:
            if code.loop.line <= line <= code.loop.last:
                if gather:
                    code.gathers += 1
                    continue
                registers = _REGISTER.findall(operands)
                if packed:
                    if fma:
                        code.packed_fma += 1
                        if registers:  # AT&T: the destination is the last operand
                            code.accumulators.add("%smm%s" % registers[-1])
                    else:
                        code.packed_other += 1
                    code.width = max([code.width] + [_WIDTH[r] for r, _ in registers])
                elif fma:
                    code.scalar_fma += 1
                else:
                    code.scalar_other += 1
    loops = [c for codes in loops_by_source.values() for c in codes]
    # loops whose lines carry no FP arithmetic at all still count as marked
    for source, text in texts.items():
        if source not in loops_by_source:
            loops.extend(LoopCode(loop) for loop in marked_loops(text, source))
    loops.sort(key=lambda c: (c.loop.source, c.loop.line))
    return MachineCodeReport(path, True, loops=loops,
                             functions={k: (v[0], v[1]) for k, v in functions.items()})


def inspect_binary(path: str | os.PathLike, texts: dict[str, str] | None = None
                   ) -> MachineCodeReport:
    """The report for an object file or shared library built with line tables."""
    if not is_x86_64():
        return MachineCodeReport(str(path), False, f"reads x86-64 code only, not "
                                                   f"{os.uname().machine}")
    if objdump() is None:
        return MachineCodeReport(str(path), False, "objdump (binutils) is not installed")
    report = inspect_listing(disassemble(path), str(path), texts)
    for code in report.scalar_loops:
        # the report of the compile that made the code: beside the library built from
        # one source, or beside each object of a library linked from several
        for missed in (vector_report_path(path),
                       vector_report_path(Path(code.loop.source).with_suffix(".o"))):
            if missed.exists():
                code.reason = compiler_reasons(missed.read_text(errors="replace"),
                                               [code.loop]).get(code.loop.line, "")
                break
    return report


def vector_report_path(binary: str | os.PathLike) -> Path:
    """Where a build writes gcc's report of the loops it did not vectorise (build.py)."""
    return Path(f"{binary}.vec-missed.txt")


_MISSED = re.compile(r":(\d+):\d+: missed:\s*(.*)$")


def compiler_reasons(report: str, loops: Sequence[MarkedLoop]) -> dict[int, str]:
    """gcc's own word (``-fopt-info-vec-missed``'s ``report``) on why each loop was not
    vectorised, by its ``for`` line: the first "not vectorized" or "failed" message
    within the loop's lines."""
    messages = [(int(m.group(1)), m.group(2)) for m in map(_MISSED.search, report.splitlines())
                if m and ("not vectorized" in m.group(2) or "failed" in m.group(2))]
    reasons: dict[int, str] = {}
    for loop in loops:
        for line, message in messages:
            if loop.line - 1 <= line <= loop.last:
                message = re.sub(r"^(?:couldn't vectorize loop|not vectorized:)\s*", "", message)
                reasons[loop.line] = re.sub(r"\s+", " ", message).strip()[:160]
                break
    return reasons


def warn_scalar_loops(report: MachineCodeReport, stacklevel: int = 2) -> None:
    """A PerformanceWarning per marked loop compiled to scalar arithmetic."""
    for code in report.scalar_loops:
        why = code.reason
        warnings.warn(
            f"the loop at line {code.loop.line} of {os.path.basename(code.loop.source)} "
            f"({code.loop.function}: {code.loop.statement}) is marked vector but compiled "
            f"to {code.scalar_fma + code.scalar_other} scalar floating-point instructions "
            f"and no packed ones" + (f"; the compiler says: {why}" if why else ""),
            PerformanceWarning, stacklevel=stacklevel + 1)
