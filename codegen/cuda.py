"""The CUDA dialect of the C-family printer: the ``.cu`` Source of one kernel.

Place in the pipeline: the code generator of the ``cuda`` and ``cuda-emulated`` targets
(polycomp/targets/cuda.py), after the schedule is checked (scheduler/gpu_mapping.py put
the ``kernel``, ``block`` and ``thread`` marks; ``check_mapping`` checked them). Input: a
Program, its marked tree, Options, the dependences it was checked against. Output: one
translation unit for nvcc or, through the header's CPU emulation, for g++.

The text starts with ``#include "polycomp_cuda.h"`` (polycomp/targets/, the build adds
``-I``): the header gives ``__global__``, ``blockIdx`` and the rest under nvcc, and their
emulation on CPU threads otherwise, and the host macros used here (``POLYCOMP_LAUNCH``,
``POLYCOMP_LAUNCH_CHECK``, ``POLYCOMP_ALLOC``, ``POLYCOMP_COPY_IN``, ``POLYCOMP_COPY_OUT``,
``POLYCOMP_FREE``, ``POLYCOMP_SYNC``), each of which makes the entry return a non-zero
status when the device fails.

What is printed (codegen/c.py's CPrinter prints loops, statements and arrays):

- ``static int polycomp_<name>_launch(sizes, scalars, device arrays, scratch, status
  word)``: the host part of the isl AST (loops and ifs around kernels) launching each
  kernel, then a sync; the one launch sequence, which both entries call;
- the entry ``extern "C" int polycomp_<name>(sizes, scalars, host arrays)``, the OpenMP
  entry's arguments (polycomp/runtime.py calls both alike): it allocates a device copy of
  every array and scratch array, copies the arrays in, calls the launch function, copies
  the written arrays and the status back and frees;
- the device entry ``extern "C" int polycomp_<name>_device(...)``: the same arguments,
  the arrays already on the device (Kernel.on_device): it allocates only the scratch
  arrays and the temporaries passed as null pointers, takes the calling thread's kept
  status word (POLYCOMP_STATUS_WORD), calls the launch function and reads the status;
- one ``__global__`` function per kernel occurrence in the AST, taking the host loops'
  iterators, sizes, scalars, device arrays and the status word. A loop under a mapped
  mark is a strided loop: a value v runs in block (thread) ``v mod gridDim`` (``mod
  blockDim``) along the mark's axis, whatever the loop's start, so a value has one owner
  wherever isl prints the loop and any grid runs everything once;
- a part of the host AST with no kernel mark (a statement outside loops, or the whole
  AST when isl's tree build failed and the flat schedule gave no marks) runs as a
  single-thread kernel: correct, slow, never a failure.

A mark is mapped only where every occurrence of it in the kernel sits directly on its
member's loop with step 1 (isl writes no loop for a member that takes one value), and
only when every statement of the kernel lies inside its loop (a statement outside would
run in every thread); otherwise its loop is printed sequential. Axes: the deepest mapped
thread (block) depth is x, then y, z (scheduler/gpu_mapping.py orders the members so).
Block extents: Options.gpu_block (shrunk to the loop's extent when sizes are known);
grid extents: the values of the block loop over the whole kernel, within gpu_grid.

Statuses: each thread has its own ``polycomp_status`` (gathers out of bounds, integer
division faults: codegen/cexpr.py's guards, their helpers compiled for the device too);
a thread that set one stores it into the status word, which the entry copies back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import cgen as c
import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import UnsupportedError
from polycomp.ir import Program
from polycomp.options import Options
from polycomp.scheduler import gpu_mapping as G
from polycomp.scheduler import gpu_reduction as R
from polycomp.scheduler import gpu_rows as GR
from polycomp.scheduler import tree as T

from .ast import build_ast, expression_builder, loop_iterator
from .c import STATUS, CPrinter, entry_arguments, entry_name, statement
from .cexpr import ADD, ARG_CTYPES, CTYPES, Helpers, ast_expr
from .cuda_reduction import ReductionPrinting
from .cuda_promotion import (PROMOTE, PromotedValuePrinter, PromotionPrinting, Promotions,
                             numbered_promotions)
from .names import c_name
from .source import CArgument, Source

node_type = isl.ast_node_type

HEADER = "polycomp_cuda.h"
AXES = "xyz"
CLEANUP = "polycomp_cleanup"  # the entry's label before its frees

# A failing host macro of the header (POLYCOMP_FAIL) records its status and jumps to the
# entry's cleanup, which frees what was allocated; the C library's headers as C++ has
# them; the store of a thread's status (atomic: any number of threads may fail at once).
PRELUDE = f"""#define POLYCOMP_FAIL(status) do {{ {STATUS} = (status); goto {CLEANUP}; }} while (0)
#include "{HEADER}"
#include <stdint.h>
#include <string.h>
#include <math.h>

#ifdef __CUDACC__
#define POLYCOMP_STORE_STATUS(p, v) atomicExch((p), (v))
#else
#define POLYCOMP_STORE_STATUS(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#endif"""

# C++ keywords and the names the header, CUDA and the host macros use: a user name that
# c_name keeps but C++ or CUDA would read otherwise (an array called `new`, `threadIdx`
# or `free`) is escaped as c_name escapes C's keywords
CXX_RESERVED = frozenset("""
alignas alignof and and_eq asm bitand bitor bool catch char8_t char16_t char32_t class
compl concept consteval constexpr constinit const_cast co_await co_return co_yield
decltype delete dynamic_cast explicit export false friend mutable namespace new noexcept
not not_eq nullptr operator or or_eq private protected public reinterpret_cast requires
static_assert static_cast template this thread_local throw true try typeid typename using
virtual wchar_t xor xor_eq std dim3 uint3 threadIdx blockIdx blockDim gridDim warpSize
malloc calloc realloc free memcpy memset
""".split())
CXX_RESERVED_PREFIXES = ("cuda", "CUDA", "POLYCOMP", "atomic", "__")


def cuda_name(name: str) -> str:
    """The identifier of a user name in CUDA text: codegen/names.c_name, with C++'s and
    CUDA's reserved names escaped too (injective: c_name escapes every ``u_`` name)."""
    kept = c_name(name)
    if kept == name and (name in CXX_RESERVED or name.startswith(CXX_RESERVED_PREFIXES)):
        return "u_" + name.replace("_", "__")
    return kept


STATUS_OUT = "polycomp_status_out"  # a kernel's pointer to the status word
DEVICE_STATUS = "polycomp_dev_status"
DEVICE_SUFFIX = "_device"  # the device entry: <entry>_device (polycomp/targets/cuda.py)


def generate_cuda(program: Program, schedule: isl.Schedule, options: Options,
                  ordered: isl.UnionMap) -> Source:
    """The ``.cu`` text for ``schedule`` (module doc); ``ordered``: the dependences its
    AST must keep forward (codegen/verify.py)."""
    _refuse_unsupported(program)
    helpers = Helpers()
    names = {p: cuda_name(p) for p in program.params}
    arguments = entry_arguments(program)
    ranges = mapped_ranges(schedule)
    schedule, plans = numbered_promotions(schedule, program)
    promotions = Promotions(plans)
    ast = build_ast(program, with_gpu_depths(schedule), ordered, after_mark=promotions)
    promotions.settle(ast)
    printer = CudaPrinter(program, names, helpers, options, arguments, ranges, promotions)
    entry = printer.host_entry(ast)
    target = options.target if re.fullmatch(r"[\w-]+", options.target) else c_name(options.target)
    header = (f"/* {c_name(program.name)}: generated by polycomp "
              f"(target={target}, scheduler={c_name(options.scheduler)}) */")
    parts = [header, PRELUDE]
    if helpers.used:
        parts.append(device_helpers(helpers.text()))
    parts += printer.kernels
    parts.append(entry)
    text = "\n\n".join(parts).replace("(void )", "(void)") + "\n"
    return Source(text, "cuda", entry_name(program), arguments)


def _refuse_unsupported(program: Program) -> None:
    """float16 has no portable C++ type on both sides (g++ 12 has no _Float16 in C++,
    CUDA's is __half): refused with a clear error."""
    dtypes = {a.dtype for a in program.arrays} | {s.dtype for s in program.scalars}
    for s in program.statements:
        dtypes |= {n.dtype for n in E.walk(s.expr)} | {s.target.dtype}
    if "float16" in dtypes:
        raise UnsupportedError(f"'{program.name}' uses float16, which the CUDA targets do "
                               f"not support yet", hint="use float32, or target='openmp'")


def device_helpers(text: str) -> str:
    """codegen/cexpr.py's helpers, callable in kernels and on the host (grid sizes): the
    division guard's status store is a plain one (each thread has its own status)."""
    return (text.replace("static inline ", "static inline __host__ __device__ ")
            .replace("__atomic_store_n(status, 2, __ATOMIC_RELAXED)", "*status = 2")
            .replace("__builtin_memcpy", "memcpy"))


def with_gpu_depths(schedule: isl.Schedule) -> isl.Schedule:
    """Every ``block`` and ``thread`` mark renamed ``name@depth`` (the schedule depth of
    the member it maps), as codegen/ast.py does for the loop marks."""

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_mark(node, T.MARK_BLOCK) or T.is_mark(node, T.MARK_THREAD):
            name = f"{node.mark_get_id().get_name()}@{node.get_schedule_depth()}"
            node = node.delete().insert_mark(isl.Id(name))
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def mapped_ranges(schedule: isl.Schedule) -> dict[tuple[str, int], isl.Set]:
    """(statement, schedule depth) -> the values the member under each block or thread
    mark takes for that statement (over all host iterations): the launch's extents."""
    ranges: dict[tuple[str, int], isl.Set] = {}
    for node in T.nodes(schedule):
        if not (T.is_mark(node, T.MARK_BLOCK) or T.is_mark(node, T.MARK_THREAD)):
            continue
        band = node.child(0)
        while T.is_mark(band):
            band = band.child(0)
        if not T.is_band(band) or band.band_n_member() < 1:
            continue
        depth = band.get_schedule_depth()
        for piece in U.maps_of(T.member_union_map(band, 0)):
            key = (piece.get_tuple_name(isl.dim_type.in_), depth)
            values = piece.range()
            ranges[key] = values if key not in ranges else ranges[key].union(values)
    return ranges


class _Launch(c.Block):
    """A launch and its check: braced where a statement is expected, its lines spliced
    into the enclosing block."""


def _spliced(parts: list[c.Generable]) -> list[c.Generable]:
    out: list[c.Generable] = []
    for part in parts:
        out += part.contents if isinstance(part, _Launch) else [part]
    return out


@dataclass
class _Kernel:
    """What a pre-scan of one kernel's AST found: the mapped depths -> (mark, axis), and
    the statements it runs."""

    axes: dict[int, tuple[str, int]]
    statements: set[str]


class CudaPrinter(ReductionPrinting, PromotionPrinting, CPrinter):
    """CPrinter for the host entry and the kernels (module doc); the promotion marks'
    printing is codegen/cuda_promotion.py's, the block reductions'
    codegen/cuda_reduction.py's."""

    def __init__(self, program: Program, names: dict[str, str], helpers: Helpers,
                 options: Options, arguments: tuple[CArgument, ...],
                 ranges: dict[tuple[str, int], isl.Set],
                 promotions: Promotions | None = None):
        super().__init__(program, names, helpers)
        self.promotions = promotions if promotions is not None else Promotions([])
        self.staged = {}  # array -> its shared buffer or register below a promotion mark
        self.promoted_marks = 0
        self.scalars = {s.name: cuda_name(s.name) for s in program.scalars}
        self.arrays = {name: (cuda_name(name), extents)
                       for name, (_, extents) in self.arrays.items()}
        self.options = options
        self.arguments = arguments
        self.ranges = ranges
        self.scratch = [a for a in program.arrays if a.role == "scratch"]
        self.kernels: list[str] = []
        self.in_kernel = False
        self.rows = False  # inside a rows region: statements outside thread loops in thread 0
        self.axes: dict[int, tuple[str, int]] = {}
        self.written = {s.write.get_tuple_name(isl.dim_type.out) for s in program.statements}
        # the device copy of each array argument, and of each scratch array
        self.device = {a.name: f"polycomp_dev{k}"
                       for k, a in enumerate(x for x in arguments if x.kind == "array")}
        self.device.update({a.name: f"polycomp_scratch{k}" for k, a in enumerate(self.scratch)})

    # ------------------------------------------------------------------ the entries
    def host_entry(self, ast: isl.AstNode) -> str:
        """The launch function (the host part of the AST, its launches, the sync), then
        the device entry and the host entry that both call it (module doc)."""
        build = expression_builder(self.program)
        return "\n\n".join([self._launch_function(ast), self._device_entry(build),
                            self._copying_entry(build)])

    def _launch_function(self, ast: isl.AstNode) -> str:
        """``static int <entry>_launch(sizes, scalars, device arrays, scratch, status
        word)``: the one printed launch sequence. It returns a host macro's failure
        (polycomp_cuda.h) or 0; the kernels' own statuses are in the status word."""
        params = [self._kernel_declarator(a) if a.kind != "array" else
                  f"{self._const(a.name)}{a.ctype} *__restrict__ {self.device[a.name]}"
                  for a in self.arguments]
        params += [f"{CTYPES[a.dtype]} *__restrict__ {self.device[a.name]}"
                   for a in self.scratch]
        params.append(f"int *__restrict__ {DEVICE_STATUS}")
        body = self._scoped(lambda: self.emit(ast))
        statements: list[c.Generable] = [c.Line(f"int {STATUS} = 0;")]
        statements += _spliced(list(body.contents) if type(body) is c.Block else [body])
        statements += [c.Line("POLYCOMP_SYNC();"), c.Line(f"{CLEANUP}:"),
                       c.Statement(f"return {STATUS}")]
        signature = c.Line(f"static int {self._launch_name()}({', '.join(params)})")
        return str(c.FunctionBody(signature, c.Block(statements)))

    def _launch_name(self) -> str:
        return f"{entry_name(self.program)}_launch"

    def _launch_call(self) -> list[str]:
        """The lines calling the launch function (declarations all above: a jump may not
        pass one in C++)."""
        args = [self._kernel_argument(a) for a in self.arguments] + [
            self.device[a.name] for a in self.scratch] + [DEVICE_STATUS]
        return [f"{STATUS} = {self._launch_name()}({', '.join(args)});",
                f"if ({STATUS} != 0) goto {CLEANUP};"]

    def _allocation(self, build, array_name: str) -> tuple[str, str, str]:
        """(the device pointer's C type, its name, its size in bytes as C)."""
        array = self.program.array(array_name)
        ctype = CTYPES[array.dtype]
        count = " * ".join([f"sizeof({ctype})"] + [
            f"(size_t)({self._extent(build, pa).code})" for pa in array.shape])
        return ctype, self.device[array_name], count

    def _device_entry(self, build) -> str:
        """``extern "C" int <entry>_device(...)``: the host entry's arguments, the arrays
        device pointers (host pointers under the emulation). It allocates the scratch
        arrays, and the temporaries given as null pointers (the runtime passes null for
        those no caller supplies), launches on the given arrays, synchronises and returns
        the status; the status word is the calling thread's own, kept from call to call
        (POLYCOMP_STATUS_WORD)."""
        params = [self._host_declarator(a) for a in self.arguments] or ["void"]
        lines, allocs, frees = [f"int {STATUS} = 0;"], [], []
        for a in self.arguments:
            if a.kind != "array":
                continue
            ctype, dev, count = self._allocation(build, a.name)
            lines.append(f"{self._const(a.name)}{ctype} *{dev} = {cuda_name(a.name)};")
            if self.program.array(a.name).role != "temporary" or a.name not in self.written:
                continue
            own = f"{dev}_own"
            lines.append(f"{ctype} *{own} = 0;")
            allocs += [f"if ({dev} == 0) {{", f"  POLYCOMP_ALLOC({own}, {count});",
                       f"  {dev} = {own};", "}"]
            frees.append(f"POLYCOMP_FREE({own});")
        for a in self.scratch:
            ctype, dev, count = self._allocation(build, a.name)
            lines.append(f"{ctype} *{dev} = 0;")
            allocs.append(f"POLYCOMP_ALLOC({dev}, {count});")
            frees.append(f"POLYCOMP_FREE({dev});")
        lines.append(f"int *{DEVICE_STATUS} = 0;")
        allocs.append(f"POLYCOMP_STATUS_WORD({DEVICE_STATUS});")
        body = lines + allocs + self._launch_call() + [
            f"POLYCOMP_COPY_OUT(&{STATUS}, {DEVICE_STATUS}, sizeof(int));", f"{CLEANUP}:",
            *frees, f"return {STATUS};"]
        signature = f'extern "C" int {entry_name(self.program)}{DEVICE_SUFFIX}({", ".join(params)})'
        return str(c.FunctionBody(c.Line(signature), c.Block([c.Line(x) for x in body])))

    def _copying_entry(self, build) -> str:
        """``extern "C" int <entry>(...)`` on host arrays: device copies of every array
        (and scratch array), the copies in, the launch function, the copies out, the
        frees."""
        params = [self._host_declarator(a) for a in self.arguments] or ["void"]
        lines = [f"int {STATUS} = 0;"]
        copies_in, copies_out, frees = [], [], []
        for a in [*self.arguments, *self.scratch]:
            if isinstance(a, CArgument) and a.kind != "array":
                continue
            ctype, dev, count = self._allocation(build, a.name)
            size = f"{dev}_bytes"
            lines.append(f"{ctype} *{dev} = 0;")
            lines.append(f"size_t {size} = {count};")
            copies_in.append(f"POLYCOMP_ALLOC({dev}, {size});")
            if isinstance(a, CArgument):
                copies_in.append(f"POLYCOMP_COPY_IN({dev}, {cuda_name(a.name)}, {size});")
                if a.name in self.written:
                    copies_out.append(f"POLYCOMP_COPY_OUT({cuda_name(a.name)}, {dev}, {size});")
            frees.append(f"POLYCOMP_FREE({dev});")
        lines.append(f"int *{DEVICE_STATUS} = 0;")
        copies_in += [f"POLYCOMP_ALLOC({DEVICE_STATUS}, sizeof(int));",
                      f"POLYCOMP_COPY_IN({DEVICE_STATUS}, &{STATUS}, sizeof(int));"]
        copies_out.append(f"POLYCOMP_COPY_OUT(&{STATUS}, {DEVICE_STATUS}, sizeof(int));")
        frees.append(f"POLYCOMP_FREE({DEVICE_STATUS});")
        # every declaration is above the first jump here (C++ forbids jumping past one)
        body = lines + copies_in + self._launch_call() + copies_out + [f"{CLEANUP}:"] + frees
        statements: list[c.Generable] = [c.Line(line) for line in body]
        statements.append(c.Statement(f"return {STATUS}"))
        signature = c.Line(f'extern "C" int {entry_name(self.program)}({", ".join(params)})')
        return str(c.FunctionBody(signature, c.Block(statements)))

    def _const(self, name: str) -> str:
        return "" if name in self.written else "const "

    def _host_declarator(self, arg: CArgument) -> str:
        name = cuda_name(arg.name)
        if arg.kind != "array":
            return f"{arg.ctype} {name}"
        const = "" if arg.name in self.written else "const "
        return f"{const}{arg.ctype} *__restrict__ {name}"

    # ------------------------------------------------------------------ host level
    def emit(self, node: isl.AstNode) -> c.Generable:
        if self.in_kernel:
            return super().emit(node)
        if not contains_kernel(node):
            return self._launch([node], mapped=False)
        kind = node.get_type()
        if kind == node_type.block:
            out: list[c.Generable] = []
            run: list[isl.AstNode] = []  # consecutive parts without kernels: one launch
            for child in U.to_list(node.block_get_children()):
                if contains_kernel(child):
                    if run:
                        out.append(self._launch(run, mapped=False))
                        run = []
                    out.append(self.emit(child))
                else:
                    run.append(child)
            if run:
                out.append(self._launch(run, mapped=False))
            return c.Block(_spliced(out))
        if kind == node_type.mark:
            inner = node.mark_get_node()
            if node.mark_get_id().get_name() == T.MARK_KERNEL:
                return self._launch([inner], mapped=True)
            return self.emit(inner)
        return super().emit(node)  # loops and ifs on the host

    def _launch(self, nodes: list[isl.AstNode], mapped: bool) -> c.Generable:
        """A ``__global__`` function running ``nodes`` and the host lines launching it."""
        scan = scan_kernel(nodes) if mapped else _Kernel({}, _statements(nodes))
        iterators = list(self.scope)  # the host loops around the launch
        gathers, guards = self.gathers, self.helpers.guards
        self.in_kernel, self.axes = True, scan.axes
        try:
            body = self._scoped(lambda: c.Block([self.emit(n) for n in nodes])
                                if len(nodes) > 1 else self.emit(nodes[0]))
        finally:
            self.in_kernel, self.axes = False, {}
        status = self.gathers != gathers or self.helpers.guards != guards
        name = f"{entry_name(self.program)}_kernel{len(self.kernels)}"
        params = [f"long {it}" for it in iterators] + [
            self._kernel_declarator(a) for a in self.arguments] + [
            f"{CTYPES[a.dtype]} *__restrict__ {cuda_name(a.name)}" for a in self.scratch] + [
            f"int *__restrict__ {STATUS_OUT}"]
        inside: list[c.Generable] = []
        if status:
            inside.append(c.Line(f"int {STATUS} = 0;"))
        inside += list(body.contents) if type(body) is c.Block else [body]
        if status:
            inside.append(c.Line(f"if ({STATUS}) POLYCOMP_STORE_STATUS({STATUS_OUT}, {STATUS});"))
        grid, block = self._launch_shape(scan)
        # the block's size bounds the registers ptxas gives a thread, so that the launch
        # always has enough of them
        threads = 1
        for extent in block:
            threads *= int(extent)
        signature = c.Line(f"__global__ void __launch_bounds__({threads}) {name}("
                           f"{', '.join(params)})")
        self.kernels.append(str(c.FunctionBody(signature, c.Block(inside))))
        args = iterators + [self._kernel_argument(a) for a in self.arguments] + [
            self.device[a.name] for a in self.scratch] + [DEVICE_STATUS]
        return _Launch([c.Line(f"POLYCOMP_LAUNCH({name}, dim3({', '.join(grid)}), "
                               f"dim3({', '.join(block)}), {', '.join(args)});"),
                        c.Line("POLYCOMP_LAUNCH_CHECK();")])

    def _kernel_declarator(self, arg: CArgument) -> str:
        name = cuda_name(arg.name)
        if arg.kind == "size":
            return f"long {name}"
        if arg.kind == "scalar":
            return f"{ARG_CTYPES[arg.dtype]} {name}"
        const = "" if arg.name in self.written else "const "
        return f"{const}{arg.ctype} *__restrict__ {name}"

    def _kernel_argument(self, arg: CArgument) -> str:
        return self.device[arg.name] if arg.kind == "array" else cuda_name(arg.name)

    def _launch_shape(self, scan: _Kernel) -> tuple[list[str], list[str]]:
        """(grid, block) extents along x, y, z as C expressions."""
        grid, block = ["1", "1", "1"], ["1", "1", "1"]
        threads = sum(1 for mark, _ in scan.axes.values() if mark == T.MARK_THREAD)
        shape = G.block_shape(self.options, threads)
        for depth, (mark, axis) in scan.axes.items():
            extent = self._extent_of(scan.statements, depth)
            if mark == T.MARK_THREAD:
                size = shape[axis] if axis < len(shape) else 1
                if isinstance(extent, int):
                    size = max(1, min(size, extent))
                block[axis] = str(size)
            else:
                limit = G.grid_limit(self.options, axis)
                if isinstance(extent, int):
                    grid[axis] = str(max(1, min(extent, limit)))
                else:
                    imin, imax = self.helpers.need("imin"), self.helpers.need("imax")
                    grid[axis] = f"(unsigned int){imin}({imax}({extent}, 1), {limit})"
        return grid, block

    def _extent_of(self, statements: set[str], depth: int) -> int | str:
        """How many values the member at ``depth`` takes in a kernel running
        ``statements``: an int when the sizes are known, else a C expression."""
        values = None
        for s in statements:
            part = self.ranges.get((s, depth))
            if part is not None:
                values = part if values is None else values.union(part)
        if values is None:
            return 1
        values = values.coalesce()
        if not self.program.params:
            low, high = values.dim_min_val(0), values.dim_max_val(0)
            if low.is_int() and high.is_int():
                return int(high.to_python()) - int(low.to_python()) + 1
            return 1
        count = values.dim_max(0).sub(values.dim_min(0)).add_constant_val(
            isl.Val.int_from_si(U.CTX, 1))
        one = U.constant_pw_aff(1, U.param_names(count))
        count = count.union_max(one.align_params(count.get_domain_space()))
        build = expression_builder(self.program)
        return ast_expr(build.expr_from_pw_aff(count), self.names, self.helpers).code

    # ------------------------------------------------------------------ kernels
    def _local(self, name: str, inner: isl.AstNode) -> c.Generable:
        """A contracted temporary, private to the thread that runs the loop body."""
        array = self.program.array(name)
        count = 1
        for extent in array.extents():
            count *= extent
        self.local_scopes[-1][name] = f"{CTYPES[array.dtype]} {cuda_name(name)}[{count}];"
        return self.emit(inner)

    def _mark(self, node: isl.AstNode) -> c.Generable:
        name, _, depth = node.mark_get_id().get_name().partition("@")
        inner = node.mark_get_node()
        if name.startswith(f"{PROMOTE}#"):
            return self._promotion_mark(name, inner) if self.in_kernel else self.emit(inner)
        if R.parse_mark(name) is not None:
            return self._reduce_mark(name, inner) if self.in_kernel else self.emit(inner)
        if name == GR.MARK_ROWS:
            return self._rows_mark(inner) if self.in_kernel else self.emit(inner)
        if self.in_kernel and name in (T.MARK_BLOCK, T.MARK_THREAD) and depth \
                and int(depth) in self.axes:
            if inner.get_type() == node_type.block:  # a block reduction's peeled loop
                return c.Block([self._mapped_for(child, *self.axes[int(depth)])
                                if _is_loop_of(child, int(depth)) else self.emit(child)
                                for child in U.to_list(inner.block_get_children())])
            return self._mapped_for(inner, *self.axes[int(depth)])
        if name in (T.MARK_KERNEL, T.MARK_BLOCK, T.MARK_THREAD):
            return self.emit(inner)  # not mapped here: a sequential loop
        return super()._mark(node)

    def _rows_mark(self, inner: isl.AstNode) -> c.Generable:
        """A ``rows`` region (scheduler/gpu_rows.py): its sequence's children, each
        followed by a barrier; a statement outside the thread loops runs in thread 0
        (``_reduced_user``)."""
        saved = self.rows
        self.rows = True
        try:
            parts = (U.to_list(inner.block_get_children())
                     if inner.get_type() == node_type.block else [inner])
            body: list[c.Generable] = []
            for part in parts:
                body += [self.emit(part), c.Line("__syncthreads();")]
        finally:
            self.rows = saved
        return c.Block(body)

    def _user(self, call: isl.AstExpr) -> c.Generable:
        return self._reduced_user(self._plain_user(call))

    def _plain_user(self, call: isl.AstExpr) -> c.Generable:
        if not self.staged:
            return super()._user(call)
        stmt = self.statements[call.get_op_arg(0).get_id().get_name()]
        values = [self._expr(call.get_op_arg(k + 1)) for k in range(call.get_op_n_arg() - 1)]
        printer = PromotedValuePrinter(self.staged, dict(zip(stmt.iterators, values)),
                                       self.params, self.scalars, self.arrays, self.helpers)
        return statement(stmt, printer, self)

    def _mapped_for(self, loop: isl.AstNode, mark: str, axis: int) -> c.Generable:
        """The loop shared out along ``axis``: value v runs in index ``v mod extent``."""
        it = loop.for_get_iterator().get_id().get_name()
        which = "blockIdx" if mark == T.MARK_BLOCK else "threadIdx"
        extent = "gridDim" if mark == T.MARK_BLOCK else "blockDim"
        index, step = f"(long){which}.{AXES[axis]}", f"(long){extent}.{AXES[axis]}"
        init = self._expr(loop.for_get_init())
        if init.code == "0":
            start = index
        else:
            floorm = self.helpers.need("floorm")
            start = f"{init.at(ADD)} + {floorm}({index} - {init.at(ADD + 1)}, {step})"
        self.scope.append(it)
        threaded = self.reduce_threaded
        self.reduce_threaded = threaded or mark == T.MARK_THREAD
        try:
            body = self._scoped(lambda: self.emit(loop.for_get_body()))
        finally:
            self.scope.pop()
            self.reduce_threaded = threaded
        return c.For(f"long {it} = {start}", self._expr(loop.for_get_cond()).code,
                     f"{it} += {step}", body)


# ----------------------------------------------------------------------------- AST scans

def contains_kernel(node: isl.AstNode) -> bool:
    """Whether a ``kernel`` mark lies at or below ``node``."""
    kind = node.get_type()
    if kind == node_type.mark:
        return (node.mark_get_id().get_name() == T.MARK_KERNEL
                or contains_kernel(node.mark_get_node()))
    return any(contains_kernel(child) for child in _children(node))


def _children(node: isl.AstNode) -> list[isl.AstNode]:
    kind = node.get_type()
    if kind == node_type.for_:
        return [node.for_get_body()]
    if kind == node_type.if_:
        return [node.if_get_then_node()] + (
            [node.if_get_else_node()] if node.if_has_else_node() else [])
    if kind == node_type.block:
        return U.to_list(node.block_get_children())
    if kind == node_type.mark:
        return [node.mark_get_node()]
    return []


def _statements(nodes: list[isl.AstNode]) -> set[str]:
    found: set[str] = set()

    def go(node: isl.AstNode) -> None:
        if node.get_type() == node_type.user:
            found.add(node.user_get_expr().get_op_arg(0).get_id().get_name())
        for child in _children(node):
            go(child)

    for n in nodes:
        go(n)
    return found


def scan_kernel(nodes: list[isl.AstNode]) -> _Kernel:
    """The mapped depths of a kernel (module doc): a block or thread mark's depth is
    mapped when each of its occurrences is on its member's loop, with step 1, and every
    statement of the kernel runs inside it; the deepest mapped thread (block) depth is
    axis x, then y, z."""
    kinds: dict[int, str] = {}
    broken: set[int] = set()
    paths: list[set[int]] = []  # per statement call: the mark depths around it

    def go(node: isl.AstNode, around: frozenset[int], reducing: bool) -> None:
        kind = node.get_type()
        if kind == node_type.user:
            paths.append(set(around))
            return
        if kind == node_type.mark:
            name, _, depth = node.mark_get_id().get_name().partition("@")
            if R.parse_mark(name) is not None:
                # what isl prints outside the thread loop of a block reduction runs in
                # thread 0 (codegen/cuda_reduction.py): as if inside the loop
                around = around | _thread_depths(node.mark_get_node())
                reducing = True
            if name == GR.MARK_ROWS:
                # a rows region's statements outside its thread loops run in thread 0
                around = around | _thread_depths(node.mark_get_node())
            if name in (T.MARK_BLOCK, T.MARK_THREAD) and depth:
                d = int(depth)
                inner = node.mark_get_node()
                on_loop = (_beside_own_loop(inner, d) if reducing and name == T.MARK_THREAD
                           else _on_own_loop(inner, d))
                if kinds.setdefault(d, name) != name or not on_loop:
                    broken.add(d)
                around = around | {d}
        for child in _children(node):
            go(child, around, reducing)

    for n in nodes:
        go(n, frozenset(), False)
    mapped = set(kinds) - broken
    for path in paths:
        mapped &= path
    axes: dict[int, tuple[str, int]] = {}
    for mark in (T.MARK_BLOCK, T.MARK_THREAD):
        depths = sorted((d for d in mapped if kinds[d] == mark), reverse=True)[:len(AXES)]
        axes.update({d: (mark, axis) for axis, d in enumerate(depths)})
    return _Kernel(axes, _statements(nodes))


def _beside_own_loop(node: isl.AstNode, depth: int) -> bool:
    """``node`` is the loop of schedule depth ``depth`` with step 1, or a block of such
    loops and of parts without that loop (statements isl peeled off it: in a block
    reduction, thread 0 runs them)."""
    if node.get_type() != node_type.block:
        return _on_own_loop(node, depth)
    children = U.to_list(node.block_get_children())
    loops = [child for child in children if _is_loop_of(child, depth)]
    return bool(loops) and all(_on_own_loop(loop, depth) for loop in loops) and not any(
        _has_loop_of(child, depth) for child in children if not _is_loop_of(child, depth))


def _is_loop_of(node: isl.AstNode, depth: int) -> bool:
    return (node.get_type() == node_type.for_
            and node.for_get_iterator().get_id().get_name() == loop_iterator(depth))


def _has_loop_of(node: isl.AstNode, depth: int) -> bool:
    return _is_loop_of(node, depth) or any(_has_loop_of(child, depth)
                                           for child in _children(node))


def _thread_depths(node: isl.AstNode) -> frozenset[int]:
    """The depths of the thread marks at or below ``node``."""
    found: set[int] = set()

    def go(n: isl.AstNode) -> None:
        if n.get_type() == node_type.mark:
            name, _, depth = n.mark_get_id().get_name().partition("@")
            if name == T.MARK_THREAD and depth:
                found.add(int(depth))
        for child in _children(n):
            go(child)

    go(node)
    return frozenset(found)


def _on_own_loop(node: isl.AstNode, depth: int) -> bool:
    """``node`` is the loop of schedule depth ``depth``, stepping by 1."""
    if node.get_type() != node_type.for_:
        return False
    if node.for_get_iterator().get_id().get_name() != loop_iterator(depth):
        return False
    inc = node.for_get_inc()
    return inc.get_type() == isl.ast_expr_type.int and inc.get_val().to_python() == 1
