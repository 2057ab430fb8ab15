"""The ``cuda`` and ``cuda-emulated`` targets: CUDA from the schedule tree, for a GPU or
for CPU threads.

Place in the pipeline (targets/base.py lists what a target owns); both targets share:

- no channel blocking (``packs_channels`` off: a CPU vector layout) and no CPU tiling
  (``neutral_tiling`` off), then the pass ``gpu_mapping``
  (scheduler/gpu_mapping.py: ``kernel``, ``block``, ``thread`` marks, tiles shaped like
  the blocks), then ``gpu_promotion`` (scheduler/gpu_promotion.py: ``shared:`` and
  ``private:`` marks, unless ``Options.gpu_promotion`` is off), the marks they print;
- after the legality check (``annotate``): the mapped loops checked
  (gpu_mapping.check_mapping: a mapped loop carries no dependence inside its kernel);
- code: codegen/cuda.py, one ``.cu`` text whose host entry takes the OpenMP entry's
  arguments, so polycomp/runtime.py calls either alike, and a device entry
  (``<entry>_device``, ``load_device``) with the same arguments on arrays already on
  the device, which ``Kernel.on_device`` calls;
- a status beyond codegen's own (1 gather, 2 division, 3 memory) is the device's or the
  emulation's failure: ``DeviceError``.

``cuda``: built by nvcc (``-shared -Xcompiler -fPIC -arch=sm_80``, PTX included so newer
GPUs run it too) and loaded with ctypes only where polycomp.cuda.available() says a GPU
is usable. Without one the source is still generated and checked (``Kernel.source``),
and a call raises ``DeviceUnavailableError`` with the reason. Cache keys hash nvcc's
version and the header.

``cuda-emulated``: the same text built by g++ (``$CXX``) as C++20 with the header's CPU
emulation (blocks one after another, the threads of a block as threads with a barrier
for ``__syncthreads()``), loaded with ctypes: it runs anywhere, to check the CUDA path
against numpy.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import islpy as isl

from polycomp import build
from polycomp.codegen.cuda import DEVICE_SUFFIX, HEADER, generate_cuda
from polycomp.codegen.source import Source
from polycomp.errors import CompilerError, IllegalScheduleError, InternalError, PolycompError
from polycomp.ir import Program
from polycomp.options import Options
from polycomp.scheduler import tree as T
from polycomp.scheduler.dependences import Dependences
from polycomp.scheduler.gpu_mapping import check_mapping, map_to_gpu
from polycomp.scheduler.gpu_promotion import promote

from .native import NativeTarget

HEADER_DIR = Path(__file__).resolve().parent  # polycomp_cuda.h lives beside this module
CUDA_ARCH = "sm_80"
# the entry's statuses that codegen gives a meaning (polycomp/runtime.py raises them)
KNOWN_STATUSES = (0, 1, 2, 3)


class DeviceUnavailableError(PolycompError):
    """A ``cuda`` kernel called where no GPU can run it (no driver, no device, no
    nvcc; pycuda is optional, polycomp.cuda.available()): the reason, and what to do
    instead."""


class DeviceError(PolycompError):
    """The device (or the CPU emulation of one) failed while a kernel ran: an allocation,
    a copy, a launch."""


def gpu_available() -> tuple[bool, str]:
    """polycomp.cuda.available() when that module is there, else (False, why); never
    raises."""
    try:
        from polycomp import cuda  # noqa: PLC0415 (optional: the GPU runtime)
    except ImportError as exc:
        return False, f"polycomp's CUDA runtime support is missing ({exc})"
    try:
        ok, reason = cuda.available()
    except Exception as exc:  # noqa: BLE001 - available() must not take the caller down
        return False, f"checking for a GPU failed: {exc}"
    return bool(ok), str(reason)


def nvcc_path() -> str | None:
    """nvcc's path: polycomp.cuda's discovery when there, else $CUDA_HOME/bin, the PATH,
    /usr/local/cuda/bin."""
    try:
        from polycomp import cuda  # noqa: PLC0415
        find = getattr(cuda, "find_nvcc", None) or getattr(cuda, "nvcc_path", None)
        if find is not None:
            found = find()
            if found:
                return str(found)
    except Exception:  # noqa: BLE001 - fall back to the plain search below
        pass
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = ([str(Path(home) / "bin" / "nvcc")] if home else []) + [
        shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@functools.lru_cache(maxsize=4)
def _file_digest(path: Path, stamp: float) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def header_digest() -> str:
    """A hash of polycomp_cuda.h (part of the cache keys: the build includes it)."""
    path = HEADER_DIR / HEADER
    try:
        return _file_digest(path, path.stat().st_mtime)
    except OSError:
        return "no header"


def _gpu_mapping(schedule: isl.Schedule, program: Program, deps: Dependences,
                 options: Options) -> isl.Schedule:
    return map_to_gpu(schedule, program, deps, options)


class _CudaText(NativeTarget):
    """What the two CUDA targets share: passes, marks, the check, the code, the status."""

    marks = frozenset({T.MARK_KERNEL, T.MARK_BLOCK, T.MARK_THREAD})
    passes = (("gpu_mapping", _gpu_mapping), ("gpu_promotion", promote))
    neutral_tiling = False
    launch_knobs = True
    packs_channels = False
    source_suffix = ".cu"

    def annotate(self, schedule: isl.Schedule, program: Program, deps: Dependences,
                 options: Options) -> isl.Schedule:
        try:
            check_mapping(schedule, deps, program)
        except IllegalScheduleError as exc:
            if options.scheduler == "custom":
                raise  # the user's mapping
            raise InternalError(f"the GPU mapping of '{program.name}' is wrong: "
                                f"{exc.message}") from exc
        return schedule

    def generate(self, program: Program, schedule: isl.Schedule, options: Options,
                 ordered: isl.UnionMap) -> Source:
        return generate_cuda(program, schedule, options, ordered)

    def load(self, source: Source, options: Options) -> Callable[..., int]:
        return _checked_status(super().load(source, options), self.name)

    def load_device(self, source: Source, options: Options) -> Callable[..., int]:
        """The device entry (``<entry>_device``, codegen/cuda.py): the entry's arguments
        with device pointers for the arrays (host pointers under the emulation);
        polycomp/runtime.py's ``Kernel.on_device`` calls it."""
        return _checked_status(self.load_symbol(source, options, source.entry + DEVICE_SUFFIX),
                               self.name)


class CudaTarget(_CudaText):
    """CUDA for NVIDIA GPUs, built by nvcc (module doc)."""

    name = "cuda"

    def compiler_command(self, options: Options) -> tuple[list[str], list[str]]:
        nvcc = nvcc_path()
        if nvcc is None:
            raise CompilerError("nvcc, the CUDA compiler, was not found",
                                hint="install the CUDA toolkit and put its bin/ on the PATH "
                                     "(or set CUDA_HOME), or use target='cuda-emulated'")
        return [nvcc], ["-O3"]

    def build_flags(self, step: str, texts: Sequence[str]) -> tuple[list[str], list[str]]:
        common = ["-Xcompiler", "-fPIC", f"-arch={CUDA_ARCH}", "-I", str(HEADER_DIR)]
        if step == "library":
            return ["-shared", *common, "-x", "cu"], []
        if step == "object":
            return ["-c", *common, "-x", "cu"], []
        if step == "link":
            return ["-shared", "-Xcompiler", "-fPIC", f"-arch={CUDA_ARCH}"], []
        raise ValueError(f"no build step '{step}'")

    def key_fields(self, options: Options) -> tuple[str, ...]:
        compiler, _ = self.compiler_command(options)
        return build.compiler_identity(tuple(compiler)), header_digest()

    def load(self, source: Source, options: Options) -> Callable[..., int]:
        ok, reason = gpu_available()
        if not ok:
            return _unavailable(reason)
        return super().load(source, options)

    def load_device(self, source: Source, options: Options) -> Callable[..., int]:
        ok, reason = gpu_available()
        if not ok:
            return _unavailable(reason)
        return super().load_device(source, options)


class CudaEmulatedTarget(_CudaText):
    """The CUDA text on CPU threads, built by g++ with the header's emulation."""

    name = "cuda-emulated"

    def compiler_command(self, options: Options) -> tuple[list[str], list[str]]:
        compiler = os.environ.get("CXX") or "g++"
        flags = list(options.cflags) if options.cflags is not None else ["-O1"]
        return compiler.split(), flags

    def build_flags(self, step: str, texts: Sequence[str]) -> tuple[list[str], list[str]]:
        common = ["-std=c++17", "-pthread", "-fPIC", "-I", str(HEADER_DIR)]
        if step == "library":
            return ["-shared", *common, "-x", "c++"], ["-lm"]
        if step == "object":
            return ["-c", *common, "-x", "c++"], []
        if step == "link":
            return ["-shared", "-pthread", "-fPIC"], ["-lm"]
        raise ValueError(f"no build step '{step}'")

    def key_fields(self, options: Options) -> tuple[str, ...]:
        compiler, _ = self.compiler_command(options)
        return build.compiler_identity(tuple(compiler)), header_digest()


def _unavailable(reason: str) -> Callable[..., int]:
    def call(*args: object) -> int:
        raise DeviceUnavailableError(
            f"cannot run a target='cuda' kernel here: {reason}",
            hint="compile with target='cuda-emulated' to run the same CUDA code on the "
                 "CPU, or run on a machine with an NVIDIA GPU and its driver "
                 "(Kernel.source has the generated code either way)")

    return call


def _checked_status(function: Callable[..., int], target: str) -> Callable[..., int]:
    """``function`` raising DeviceError for a status codegen does not give (the header's
    device failures)."""

    try:
        from polycomp.cuda import STATUS_MESSAGES  # noqa: PLC0415
    except ImportError:
        STATUS_MESSAGES = {}  # noqa: N806
    device = "the CPU emulation of the GPU" if target == "cuda-emulated" else "the GPU"

    def call(*args: object) -> int:
        status = function(*args)
        if status not in KNOWN_STATUSES:
            what = STATUS_MESSAGES.get(status, "an allocation, a copy or a launch failed")
            raise DeviceError(f"{device} failed while the kernel ran: {what} (status "
                              f"{status})", hint="check the free device memory and the "
                                                 "launch sizes (gpu_block, gpu_grid)")
        return status

    return call
