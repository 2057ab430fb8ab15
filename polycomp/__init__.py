"""polycomp: a polyhedral auto-scheduling compiler for tensor programs.

Public API:
    compile(source, entry=None, *, sizes=None, **options) -> Kernel     (Tensor Comprehensions)
    compile_loops(c_source, function=None, **options) -> Kernel         (affine C loop nests)
    compile_program(program, *, sizes=None, **options) -> Kernel        (a Program, e.g. from_isl)
    compile_onnx(model, **options) -> polycomp.onnx.InferenceSession   (an ONNX model)
    tune(source_or_kernel, sizes=..., trials=64, executor=None, records=None) -> TuneResult
                                 (search tile sizes per band; compile(..., **best_options))
    Program.from_isl(...)                                               (the research door)
    set_num_threads(n)                                                  (OpenMP threads)
    set_dynamic(flag)                        (fewer threads while other processes are busy)
    inspect(kernel_or_session, sizes=None) -> MachineCodeReport
                       (per loop marked vector: packed/scalar FMAs, width, register tile)
    PerformanceWarning     (a loop marked vector compiled to scalar code)
    Options, PolycompError (and its subclasses in polycomp.errors)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .arguments import check_sizes
from .errors import ArgumentError, PolycompError
from .inspection import inspect
from .ir import Program
from .machine_code import PerformanceWarning
from .options import Options
from .runtime import Kernel
from .threads import set_dynamic, set_num_threads

__version__ = "0.1.0"


def compile(source: str, entry: str | None = None, *, sizes: Mapping[str, int] | None = None,
            file: str | None = None, **options: object) -> Kernel:
    """Compile a Tensor Comprehensions def to a Kernel.

    ``sizes`` compiles eagerly for those sizes; otherwise the kernel is specialised to the
    argument sizes on its first call per size set. ``options`` are Options fields
    (target, scheduler, parametric, parallel, ...).
    """
    from .frontend.tc import parse

    _check_api("compile", source, entry, "entry", file)
    opts = Options.create(**options)
    definition = parse(source, file=file).get(entry)
    return _finish(_kernel(definition, opts), sizes)


def compile_loops(c_source: str, function: str | None = None, *,
                  sizes: Mapping[str, int] | None = None, file: str | None = None,
                  include_dirs: Sequence[str] = (), defines: Sequence[str] = (),
                  **options: object) -> Kernel:
    """Compile an affine C loop nest (a function, or its ``#pragma scop`` region).

    ``c_source`` may be a whole C file with its includes and ``main``, as ppcg takes them:
    it then goes through the system preprocessor with ``include_dirs`` (-I) and
    ``defines`` ("NAME" or "NAME=VALUE", -D), and only the SCoP's function is analysed.
    The kernel takes the C function's arguments in order: numpy arrays for arrays
    (updated in place, as the C function would), Python numbers for scalars and sizes.
    """
    from .frontend.loops import parse_c

    _check_api("compile_loops", c_source, function, "function", file)
    for what, values in (("include_dirs", include_dirs), ("defines", defines)):
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise ArgumentError(f"compile_loops: {what} must be a list of strings, "
                                f"not {values!r}", hint=f"e.g. {what}=['utilities']"
                                if what == "include_dirs" else "e.g. defines=['N=1000']")
    opts = Options.create(**options)
    definition = parse_c(c_source, file=file, include_dirs=tuple(include_dirs),
                         defines=tuple(defines)).get(function)
    return _finish(_kernel(definition, opts), sizes)


def compile_program(program: Program, *, sizes: Mapping[str, int] | None = None,
                    **options: object) -> Kernel:
    """A Kernel for a Program built directly (``Program.from_isl``): every array is an
    argument updated in place."""
    if not isinstance(program, Program):
        raise ArgumentError(f"compile_program takes a Program, not {type(program).__name__}",
                            hint="build one with Program.from_isl(...)")
    return _finish(_kernel(ProgramDefinition(program), Options.create(**options)), sizes)


def tune(source_or_kernel: object, sizes: Mapping[str, int] | None = None, trials: int = 64,
         executor: object = None, records: object = None, **kwargs: object):
    """Search the tiling configuration of a kernel at ``sizes``: a TuneResult with
    ``best_options`` (keywords for compile), ``best_time``, ``default_time``, ``curve``
    (polycomp/tuning/api.py documents the other keywords)."""
    from .tuning.api import tune as _tune

    return _tune(source_or_kernel, sizes, trials, executor, records, **kwargs)


def compile_onnx(model: object, **options: object):
    """An ONNX model (a path, its bytes or an onnx.ModelProto) compiled by polycomp: an
    ``InferenceSession`` with onnxruntime's interface (polycomp.onnx; needs the onnx
    extra). ``options`` are Options fields."""
    from .onnx import compile_onnx as _compile_onnx

    return _compile_onnx(model, **options)


class ProgramDefinition:
    """Adapts a ready Program to the runtime's Definition protocol."""

    def __init__(self, program: Program):
        self.program = program
        self.name = program.name
        self.interface = program.interface()

    def lower(self, sizes: Mapping[str, int] | None = None) -> Program:
        return self.program if sizes is None else self.program.specialize(sizes)


def _check_api(function: str, source: object, entry: object, entry_word: str,
               file: object) -> None:
    """The plain Python arguments of compile/compile_loops, before any parsing."""
    if isinstance(source, (bytes, bytearray)):
        raise ArgumentError(f"{function} takes the source as str, not {type(source).__name__}",
                            hint="decode it first, e.g. source.decode('utf-8')")
    if not isinstance(source, str):
        raise ArgumentError(f"{function} takes the source as str, not {type(source).__name__}",
                            hint="pass the program text (read a file with open(path).read())")
    if entry is not None and not isinstance(entry, str):
        raise ArgumentError(f"{function}: {entry_word} must be a name (str) or None, "
                            f"not {entry!r}", hint=f"e.g. {entry_word}='main'")
    if file is not None and not isinstance(file, str):
        raise ArgumentError(f"{function}: file must be a file name (str) or None, not {file!r}",
                            hint="file= only names the source in error messages")


def _kernel(definition: object, options: Options) -> Kernel:
    """A Kernel; one that applies the best tuning record of each size set when
    ``tuning="records"`` and no band_config is given (polycomp/tuning/api.py)."""
    if options.tuning == "records" and not options.band_config:
        from .tuning.api import RecordsKernel

        return RecordsKernel(definition, options)  # type: ignore[arg-type]
    return Kernel(definition, options)  # type: ignore[arg-type]


def _finish(kernel: Kernel, sizes: Mapping[str, int] | None) -> Kernel:
    if sizes is not None or kernel.options.parametric:
        kernel.specialize(check_sizes(sizes if sizes is not None else {}))
    return kernel


__all__ = ["compile", "compile_loops", "compile_onnx", "compile_program", "Kernel", "Options", "PolycompError", "Program",
           "PerformanceWarning", "inspect", "set_dynamic", "set_num_threads", "tune"]
