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

Every user mistake raises a polycomp.errors.PolycompError with a file:line:column
location; docs/LOOPS.md lists what is accepted and rejected.
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl
from pycparser import c_ast

from polycomp.errors import (DuplicateNameError, ParseError, PolycompError, UnknownNameError,
                             UnsupportedError)
from polycomp.ir import Interface, Program

from .lower import FunctionLowering, Lowered
from .macros import Macros
from .program import c_parameters, interface, programs
from .source import STANDARD_TYPEDEFS, Source, parse

__all__ = ["parse_c", "CModule", "LoopDefinition"]

INTERNAL = "internal error in the loop frontend"


def parse_c(text: str, file: str | None = None) -> CModule:
    """Parse C source text; syntax errors raise ParseError with line and column."""
    def run() -> CModule:
        tree, source = parse(text, file)
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
        return CModule(functions, source)
    return _guarded(run, Source(text=text, file=file))


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
