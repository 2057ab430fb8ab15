"""The loop-nest frontend: affine C loop nests (SCoPs) -> polycomp Programs with C's exact
sequential semantics.

    module = parse_c(text, file="kernel.c")          # every function of the file
    definition = module.get("kernel_gemm")           # or get(None): the only one / the SCoP
    definition.interface                              # how the kernel is called (C order)
    program = definition.lower({"ni": 20, ...})       # specialised; lower() is parametric

``polycomp.compile_loops(text)`` wraps this. Stages inside the package:

    source.py      text -> pycparser AST (comments, #include/#define/#pragma), locations
    macros.py      hygienic #define expansion on the AST
    parameters.py  the SCoP region, parameters (sizes vs scalars), loop headers
    lower.py       the walk: loops, ifs, assignments -> statements and 2d+1 times
    affine.py      bounds, conditions, subscripts -> isl PwAffs and sets (C division rules)
    iteration.py   the exact iteration set of a for loop
    values.py      statement values -> typed expression trees (C conversions made explicit)
    program.py     Program, context, schedule, Interface
    wholefile.py   whole programs: cc -E, the SCoP's function alone, the harness's sizes
    splice.py      the compiled region written back into the user's file (CLI --emit file)

Every user mistake raises a polycomp.errors.PolycompError with a file:line:column
location; docs/LOOPS.md lists what is accepted and rejected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl
from pycparser import c_ast

from polycomp.errors import (DuplicateNameError, ParseError, PolycompError, UnknownNameError,
                             UnsupportedError)
from polycomp.ir import Interface, Program

from .lower import FunctionLowering, Lowered
from .macros import Macros
from .program import c_parameters, interface, programs
from .source import STANDARD_TYPEDEFS, Source, parse
from .wholefile import Block, WholeFile, wants_preprocessor

__all__ = ["parse_c", "CModule", "LoopDefinition", "WholeFileModule"]

INTERNAL = "internal error in the loop frontend"


def parse_c(text: str, file: str | None = None, *, include_dirs: Sequence[str] = (),
            defines: Sequence[str] = (), preprocess: bool | None = None) -> CModule:
    """Parse C source text; syntax errors raise ParseError with line and column.

    A whole program (a ``main``, or an ``#include "x.h"`` of its own) goes through the
    system preprocessor with ``include_dirs`` and ``defines`` (NAME or NAME=VALUE), and
    only the SCoP's function is parsed (frontend/loops/wholefile.py); ``preprocess``
    forces (True) or forbids (False) that, None decides by the text."""
    if preprocess is None:
        preprocess = bool(include_dirs or defines) or wants_preprocessor(text)
    if preprocess:
        return _guarded(lambda: _whole_file_module(text, file, include_dirs, defines),
                        Source(text=text, file=file))

    def run() -> CModule:
        tree, source = parse(text, file)
        return CModule(_definitions(tree, source), source)
    return _guarded(run, Source(text=text, file=file))


def _definitions(tree: c_ast.FileAST, source: Source) -> dict[str, LoopDefinition]:
    macros = Macros(source)
    typedefs = {name: words.split() for name, words in STANDARD_TYPEDEFS.items()}
    typedefs.update({name: words.split() for name, words in source.type_macros.items()})
    functions: dict[str, LoopDefinition] = {}
    for ext in tree.ext:
        if isinstance(ext, c_ast.Typedef) and isinstance(ext.type, c_ast.TypeDecl) \
                and isinstance(ext.type.type, c_ast.IdentifierType):
            typedefs[ext.name] = list(ext.type.type.names)
        elif isinstance(ext, c_ast.FuncDef):
            name = ext.decl.name
            if not isinstance(ext.decl.type, c_ast.FuncDecl):
                # newer pycparser accepts `void f { ... }` as a definition
                raise ParseError(f"'{name}' is defined without a parameter list",
                                 source.location(ext.decl.coord.line, ext.decl.coord.column),
                                 hint=f"write '{name}(void)' or list its parameters")
            if name in functions:
                raise DuplicateNameError(f"function '{name}' is defined twice",
                                         source.location(ext.decl.coord.line,
                                                         ext.decl.coord.column))
            functions[name] = LoopDefinition(ext, source, macros, typedefs)
    return functions


class CModule:
    """The functions of one C file, by name."""

    def __init__(self, functions: dict[str, LoopDefinition], source: Source):
        self.functions = functions
        self.source = source

    def get(self, name: str | None = None) -> LoopDefinition:
        """The named function; None picks the only function, or else the only one with a
        ``#pragma scop``. Lowering errors of that function are raised here."""
        names = ", ".join(self.functions) or "none"
        where = self.source.location(None, None)
        if name is not None:
            if name not in self.functions:
                raise UnknownNameError(f"no function '{name}' in the C source (it defines: "
                                       f"{names})", where)
            chosen = self.functions[name]
        elif len(self.functions) == 1:
            chosen = next(iter(self.functions.values()))
        else:
            scops = [d for d in self.functions.values() if d.has_scop]
            if len(scops) != 1 or not self.functions:
                raise PolycompError(
                    f"the C source defines {len(self.functions)} functions ({names}) and "
                    f"{len(scops)} of them contain '#pragma scop'", where,
                    hint="name the function to compile (function=... or --entry NAME)")
            chosen = scops[0]
        chosen.interface  # noqa: B018 - analyse now, so errors surface at get()
        return chosen


class WholeFileModule(CModule):
    """A whole program read through the system preprocessor: ``functions`` holds the
    functions with a ``#pragma scop`` (or, without any, the file's only function); any
    other function of the user's file is parsed when ``get`` names it."""

    def __init__(self, whole: WholeFile):
        self.whole = whole
        defined = whole.functions()
        chosen = {n: b for n, b in defined.items() if whole.scop_lines(b)}
        if not chosen and len(defined) == 1:
            chosen = defined
        functions = {name: _whole_file_function(whole, block)
                     for name, block in chosen.items()}
        super().__init__(functions, Source(text=whole.text, file=whole.file,
                                           lines=whole.text.split("\n")))

    def get(self, name: str | None = None) -> LoopDefinition:
        if name is not None and name not in self.functions:
            block = self.whole.functions().get(name)
            if block is not None:
                self.functions[name] = _guarded(
                    lambda: _whole_file_function(self.whole, block), self.source)
        if name is None and not self.functions:
            names = ", ".join(self.whole.functions()) or "none"
            raise PolycompError(f"no function of the file has a '#pragma scop' region (it "
                                f"defines: {names})", self.source.location(None, None),
                                hint="mark the region with #pragma scop / #pragma endscop, "
                                     "or name the function (function=... or --entry NAME)")
        return super().get(name)


def _whole_file_module(text: str, file: str | None, include_dirs: Sequence[str],
                       defines: Sequence[str]) -> WholeFileModule:
    return WholeFileModule(WholeFile.load(text, file, include_dirs, defines))


def _whole_file_function(whole: WholeFile, block: Block) -> LoopDefinition:
    """One function of a preprocessed file, parsed alone; carets show the user's lines."""
    tree, source = parse(whole.function_text(block), whole.file, typedefs=whole.typedefs)
    source.lines = whole.text.split("\n")
    functions = _definitions(tree, source)
    if len(functions) != 1:
        raise UnsupportedError(f"cannot read the function '{block.function_name}' alone",
                               source.location(whole.header_line(block), None))
    definition = next(iter(functions.values()))
    definition.whole, definition.block = whole, block
    return definition


class LoopDefinition:
    """One C function as a polycomp definition (the runtime's Definition protocol)."""

    def __init__(self, func: c_ast.FuncDef, source: Source, macros: Macros,
                 typedefs: dict[str, list[str]]):
        self.name: str = func.decl.name
        self._func = func
        self._source = source
        self._macros = macros
        self._typedefs = typedefs
        self._lowered: Lowered | None = None
        self._interface: Interface | None = None
        self._programs: tuple[Program, Program] | None = None
        # set for a function read from a whole program (splice.py writes it back)
        self.whole: WholeFile | None = None
        self.block: Block | None = None
        args = func.decl.type.args
        self.c_parameters: tuple[str, ...] = _guarded(
            lambda: c_parameters(list(args.params) if args is not None else []), source)
        if self.c_parameters == ("void",):
            self.c_parameters = ()

    @property
    def has_scop(self) -> bool:
        def walk(node: c_ast.Node) -> bool:
            if isinstance(node, c_ast.Pragma) and node.string.strip() == "scop":
                return True
            return any(walk(child) for _, child in node.children())
        return walk(self._func.body)

    @property
    def interface(self) -> Interface:
        if self._interface is None:
            self._interface = _guarded(lambda: interface(self._lower_function()), self._source)
        return self._interface

    def lower(self, sizes: Mapping[str, int] | None = None) -> Program:
        """The Program: parametric (sizes as isl parameters) or specialised to ``sizes``."""
        def run() -> Program:
            if self._programs is None:
                self._programs = programs(self._lower_function())
            parametric, base = self._programs
            if sizes is None:
                return parametric
            return base.specialize(dict(sizes)).validate()
        return _guarded(run, self._source)

    @property
    def lowered(self) -> Lowered:
        """The walk's products: C names of parameters and locals (used by splice.py)."""
        return _guarded(self._lower_function, self._source)

    def _lower_function(self) -> Lowered:
        if self._lowered is None:
            self._lowered = FunctionLowering(self._func, self._source, self._macros,
                                             self._typedefs).run()
        return self._lowered

    def __repr__(self) -> str:
        return f"LoopDefinition({self.name}({', '.join(self.c_parameters)}))"


def _guarded(run, source: Source):  # noqa: ANN001, ANN202 - a thunk and its value
    """Run ``run``; anything but a PolycompError becomes one (isl limits, our bugs)."""
    try:
        return run()
    except PolycompError:
        raise
    except isl.Error as exc:
        raise UnsupportedError(f"isl could not handle this program: {str(exc).splitlines()[0]}",
                               source.location(None, None)) from exc
    except RecursionError:
        raise UnsupportedError("the program is nested too deeply",
                               source.location(None, None)) from None
    except Exception as exc:  # noqa: BLE001 - the promise: only PolycompError escapes
        raise UnsupportedError(f"{INTERNAL} ({type(exc).__name__}: {exc})",
                               source.location(None, None),
                               hint="please report this program") from exc
