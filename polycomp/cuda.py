"""CUDA without a GPU in the loop: the toolkit, the driver, and what nvcc says a kernel needs.

Place in the pipeline: beside the ``cuda`` and ``cuda-emulated`` targets
(polycomp/targets/cuda.py, issue 14). Nothing here generates code; it answers

- where the toolkit is: ``nvcc_path()`` (nvcc on PATH, else under $CUDA_HOME /
  $CUDA_PATH, else /usr/local/cuda) and ``toolkit_root()`` ($CUDA_HOME may be unset:
  the root is found from nvcc's own location, symlinks resolved, and where nvcc on PATH
  is a wrapper script, from nvcc's ``--dryrun`` report of its ``TOP``);
- whether a kernel can run here: ``available() -> (bool, reason)``, which never raises
  (no driver, a failing ``cuInit``, no device: each has its reason). It asks pycuda
  where it is installed, else the driver library itself through ctypes: the ``cuda``
  target builds with nvcc and loads with ctypes, so a GPU machine without pycuda (one
  with PyTorch's stack, say) runs kernels too;
- what a kernel needs from the GPU: ``ptxas_resources(source, arch)`` compiles a .cu to
  a cubin (``nvcc -cubin -arch=sm_XX -Xptxas -v``, with the include folder of
  targets/polycomp_cuda.h) and parses ptxas's report per kernel (registers, static
  shared memory, spills, stack). ``-ptx`` alone would not do: shared-memory overflow
  is found by ptxas, which ``-ptx`` never runs. ``check_limits(resources,
  threads_per_block)`` refuses a launch the GPU would refuse (registers, shared memory,
  threads per block), with a ResourceLimitError.

The status codes of targets/polycomp_cuda.h's host macros are mirrored here
(``STATUS_MESSAGES``) for the runtime's error messages.

Every compiler is run without a shell (an argv list), with a time limit.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import CompilerError, ResourceLimitError

HEADER = Path(__file__).resolve().parent / "targets" / "polycomp_cuda.h"
NVCC_TIMEOUT = 300  # seconds for one nvcc run

# the host macros' status codes (targets/polycomp_cuda.h; codegen/c.py has 1-3)
STATUS_LAUNCH, STATUS_ALLOC, STATUS_COPY, STATUS_FREE, STATUS_SYNC = 20, 21, 22, 23, 24
STATUS_MESSAGES = {
    STATUS_LAUNCH: "a kernel launch was refused (block or grid size out of the device's "
                   "range, or not enough resources for the block)",
    STATUS_ALLOC: "device memory could not be allocated",
    STATUS_COPY: "a copy between host and device failed (or reported an earlier kernel "
                 "fault)",
    STATUS_FREE: "device memory could not be freed",
    STATUS_SYNC: "a kernel failed while running",
}


def header_dir() -> Path:
    """The folder to pass with -I so that ``#include "polycomp_cuda.h"`` finds the header."""
    return HEADER.parent


# ---------------------------------------------------------------------------- toolkit

def nvcc_path() -> str | None:
    """The nvcc to run: on PATH, else $CUDA_HOME/bin or $CUDA_PATH/bin, else
    /usr/local/cuda/bin; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return os.path.abspath(found)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidate = Path(root) / "bin" / "nvcc"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _is_toolkit(root: Path) -> bool:
    return (root / "include" / "cuda_runtime.h").is_file()


def toolkit_root() -> Path | None:
    """The CUDA toolkit's root folder (the one with include/cuda.h and lib), or None.

    $CUDA_HOME or $CUDA_PATH when set and a toolkit; else the folder above nvcc's own
    bin/ (symlinks resolved); else, when nvcc is a wrapper script somewhere else, the
    ``TOP`` nvcc reports under ``--dryrun``."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(variable)
        if value and _is_toolkit(Path(value)):
            return Path(value).resolve()
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    return _root_of(os.path.realpath(nvcc))


@functools.lru_cache(maxsize=8)
def _root_of(nvcc: str) -> Path | None:
    root = Path(nvcc).parent.parent
    if _is_toolkit(root):
        return root
    try:  # a wrapper (e.g. `exec /usr/local/cuda-13.0/bin/nvcc "$@"`): ask nvcc itself
        with tempfile.TemporaryDirectory(prefix="polycomp-nvcc-") as folder:
            empty = Path(folder) / "empty.cu"
            empty.write_text("")
            done = subprocess.run([nvcc, "--dryrun", "-c", str(empty), "-o",
                                   str(Path(folder) / "empty.o")],
                                  capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"^#\$ TOP=(.+)$", done.stdout + done.stderr, re.MULTILINE)
    if match:
        top = Path(os.path.normpath(match.group(1).strip()))
        if _is_toolkit(top):
            return top.resolve()
    return None


# ----------------------------------------------------------------------------- driver

def available() -> tuple[bool, str]:
    """(True, the devices) when a CUDA kernel can run here, else (False, why not).

    Never raises. The reasons: no driver (``import pycuda.driver`` fails, or without
    pycuda, libcuda.so.1 does not load); ``cuInit`` fails (the driver is there but does
    not start, e.g. older than the toolkit); there is no CUDA device."""
    try:
        return _available()
    except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
        return False, f"checking for a CUDA device failed: {type(exc).__name__}: {exc}"


def _available() -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("pycuda") is None:
        return _driver_available()
    try:
        import pycuda.driver as driver
    except ImportError as exc:
        text = str(exc)
        if "libcuda" in text or "undefined symbol: cu" in text:
            return False, f"no CUDA driver: import pycuda.driver failed ({text})"
        return False, f"pycuda is installed but does not import: {text}"
    try:
        driver.init()
    except Exception as exc:  # noqa: BLE001 - pycuda raises its own RuntimeError/LogicError
        text = str(exc)
        if "no CUDA-capable device" in text or "NO_DEVICE" in text.upper():
            return False, f"no CUDA device: {text}"
        return False, f"the CUDA driver did not start: {text}"
    count = driver.Device.count()
    if count < 1:
        return False, "no CUDA device: the driver started and found none"
    names = []
    for index in range(count):
        device = driver.Device(index)
        major, minor = device.compute_capability()
        names.append(f"{device.name()} (sm_{major}{minor})")
    return True, f"{count} CUDA device{'s' if count > 1 else ''}: {', '.join(names)}"


# the driver API's library (the GPU driver installs it; the toolkit has only a stub)
DRIVER_LIBRARY = "libcuda.so.1"
CUDA_ERROR_NO_DEVICE = 100
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


def _driver_available() -> tuple[bool, str]:
    """``available()`` without pycuda: the driver API through ctypes (cuInit,
    cuDeviceGetCount, the devices' names and compute capabilities)."""
    import ctypes

    library = DRIVER_LIBRARY

    try:
        driver = ctypes.CDLL(library)
    except OSError as exc:
        return False, f"no CUDA driver: {library} does not load ({exc})"
    status = driver.cuInit(0)
    if status == CUDA_ERROR_NO_DEVICE:
        return False, f"no CUDA device: cuInit failed ({_driver_error(driver, status)})"
    if status != 0:
        return False, f"the CUDA driver did not start: cuInit failed ({_driver_error(driver, status)})"
    count = ctypes.c_int(0)
    status = driver.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return False, f"the CUDA driver did not count its devices ({_driver_error(driver, status)})"
    if count.value < 1:
        return False, "no CUDA device: the driver started and found none"
    names = []
    for index in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        name = ctypes.create_string_buffer(256)
        if driver.cuDeviceGet(ctypes.byref(device), index) != 0:
            names.append(f"device {index} (not readable)")
            continue
        driver.cuDeviceGetName(name, len(name), device)
        driver.cuDeviceGetAttribute(ctypes.byref(major),
                                    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        driver.cuDeviceGetAttribute(ctypes.byref(minor),
                                    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        names.append(f"{name.value.decode(errors='replace')} (sm_{major.value}{minor.value})")
    n = count.value
    return True, f"{n} CUDA device{'s' if n > 1 else ''}: {', '.join(names)}"


def _driver_error(driver, status: int) -> str:  # noqa: ANN001 - a ctypes.CDLL
    """The driver's name for an error code (cuGetErrorName), or the number."""
    import ctypes

    text = ctypes.c_char_p()
    if driver.cuGetErrorName(status, ctypes.byref(text)) == 0 and text.value:
        return f"{text.value.decode(errors='replace')}, {status}"
    return f"error {status}"


# ------------------------------------------------------------------ ptxas resources

@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one ``__global__`` function of a cubin."""

    name: str            # the symbol as ptxas prints it (C++-mangled unless extern "C")
    kernel: str          # the function's own name (``vadd`` for ``_Z4vaddPKfS0_Pfl``)
    arch: str            # sm_80, sm_90, ...
    registers: int       # per thread
    shared_bytes: int    # static shared memory (``__shared__`` arrays) per block
    spill_stores: int    # bytes
    spill_loads: int     # bytes
    stack_bytes: int     # the stack frame (local arrays, spills) per thread
    local_bytes: int = 0  # ``lmem`` where ptxas reports it, per thread
    barriers: int = 0     # named barriers used (``used N barriers``; CUDA 13)


@dataclass(frozen=True)
class ArchLimits:
    """What one block may use on an architecture."""

    max_threads: int = 1024
    registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    static_shared_bytes: int = 48 * 1024
    register_unit: int = 256  # registers are given to a warp in units of this many
    warp_size: int = 32


# sm_80 (A100) and sm_90 (H100) agree on what a block may have; dynamic shared memory
# can go higher (163 / 227 KiB) but static __shared__ arrays stop at 48 KiB
ARCH_LIMITS: dict[str, ArchLimits] = {"sm_80": ArchLimits(), "sm_86": ArchLimits(),
                                      "sm_89": ArchLimits(), "sm_90": ArchLimits()}

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                         r"(\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_TOO_MUCH_SHARED = re.compile(r"Entry function '([^']+)' uses too much shared data "
                              r"\((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) max\)")


def kernel_name(symbol: str) -> str:
    """The function name inside a mangled symbol (``_Z4vaddPKfS0_Pfl`` -> ``vadd``);
    an unmangled (extern "C") symbol as it is."""
    match = re.match(r"_Z(\d+)", symbol)
    if not match:
        return symbol
    start = match.end()
    return symbol[start:start + int(match.group(1))]


def parse_ptxas(report: str) -> list[KernelResources]:
    """The kernels in ptxas's ``-v`` report, in its order."""
    kernels: list[KernelResources] = []
    current: dict | None = None

    def finish() -> None:
        if current is not None and "registers" in current:
            kernels.append(KernelResources(**current))

    for line in report.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            finish()
            current = {"name": entry.group(1), "kernel": kernel_name(entry.group(1)),
                       "arch": entry.group(2), "spill_stores": 0, "spill_loads": 0,
                       "stack_bytes": 0}
            continue
        if current is None:
            continue
        properties = _PROPERTIES.search(line)
        if properties:
            current["stack_bytes"], current["spill_stores"], current["spill_loads"] = (
                int(value) for value in properties.groups())
            continue
        used = _USED.search(line)
        if used:
            current["registers"] = int(used.group(1))
            current["shared_bytes"] = _bytes_of(line, "smem")
            current["local_bytes"] = _bytes_of(line, "lmem")
            barriers = re.search(r"used (\d+) barriers", line)
            current["barriers"] = int(barriers.group(1)) if barriers else 0
    finish()
    return kernels


def _bytes_of(line: str, space: str) -> int:
    match = re.search(rf"(\d+) bytes {space}\b", line)
    return int(match.group(1)) if match else 0


def ptxas_resources(source: str | os.PathLike, arch: str = "sm_80", *,
                    include_dirs: Sequence[str | os.PathLike] = (),
                    flags: Sequence[str] = (), nvcc: str | None = None
                    ) -> list[KernelResources]:
    """Each kernel's registers, shared memory, spills and stack, from ptxas, for ``arch``.

    ``source``: the .cu text (a str), or a path (an ``os.PathLike``) to a .cu file.
    Compiles with ``nvcc -cubin -arch=ARCH -Xptxas -v -I <polycomp_cuda.h's folder>
    [-I include_dirs] [flags]`` into a temporary folder. CompilerError when nvcc is
    missing or fails; ResourceLimitError when ptxas refuses a kernel's shared memory
    (more than the architecture's static limit)."""
    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise CompilerError("nvcc (the CUDA compiler) was not found",
                            hint="put the CUDA toolkit's bin/ on PATH, or set CUDA_HOME")
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise ValueError(f"an architecture is like 'sm_80', not {arch!r}")
    with tempfile.TemporaryDirectory(prefix="polycomp-ptxas-") as folder:
        if isinstance(source, os.PathLike):
            path = Path(source).resolve()
            include = [path.parent]
        else:
            path = Path(folder) / "kernel.cu"
            path.write_text(source)
            include = []
        argv = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", f"-I{header_dir()}",
                *(f"-I{d}" for d in [*include, *include_dirs]), *flags,
                "-o", str(Path(folder) / "kernel.cubin"), str(path)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=NVCC_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise CompilerError(f"nvcc ran longer than {NVCC_TIMEOUT} s on {path.name}",
                                hint="a smaller kernel, or fewer unrolled loops") from None
        except OSError as exc:
            raise CompilerError(f"cannot run nvcc ({nvcc}): {exc}",
                                hint="check the CUDA toolkit's installation") from None
    report = done.stdout + done.stderr
    if done.returncode != 0:
        too_much = _TOO_MUCH_SHARED.search(report)
        if too_much:
            symbol, used, limit = too_much.group(1), int(too_much.group(2), 16), \
                int(too_much.group(3), 16)
            raise ResourceLimitError(
                f"kernel '{kernel_name(symbol)}' needs {used} bytes of static shared "
                f"memory per block; {arch} allows {limit} (ptxas)",
                hint="smaller tiles (tile_sizes), or less shared-memory promotion")
        raise CompilerError(f"nvcc failed on {path.name} for {arch}:\n{_tail(report)}",
                            hint="the command was: " + " ".join(argv))
    return parse_ptxas(report)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def registers_per_block(registers: int, threads: int, limits: ArchLimits = ArchLimits()) -> int:
    """The registers a block of ``threads`` takes: per warp, ``registers`` x 32 rounded
    up to the allocation unit (256)."""
    warps = -(-threads // limits.warp_size)
    per_warp = -(-registers * limits.warp_size // limits.register_unit) * limits.register_unit
    return warps * per_warp


def check_limits(resources: KernelResources | Iterable[KernelResources],
                 threads_per_block: int) -> None:
    """ResourceLimitError unless every kernel in ``resources`` can be launched with
    blocks of ``threads_per_block`` threads on its architecture: at most 1024 threads,
    its registers for the whole block within 65536 (counted as the GPU hands them out:
    per warp, in units of 256), at most 48 KiB of static shared memory."""
    if isinstance(resources, KernelResources):
        resources = [resources]
    for kernel in resources:
        limits = ARCH_LIMITS.get(kernel.arch, ArchLimits())
        where = f"kernel '{kernel.kernel}' ({kernel.arch})"
        if not 1 <= threads_per_block <= limits.max_threads:
            raise ResourceLimitError(
                f"{where}: a block of {threads_per_block} threads; at most "
                f"{limits.max_threads} are allowed",
                hint="smaller thread-block sizes")
        needed = registers_per_block(kernel.registers, threads_per_block, limits)
        if needed > limits.registers_per_block:
            raise ResourceLimitError(
                f"{where}: {kernel.registers} registers per thread x {threads_per_block} "
                f"threads need {needed} registers per block; the block may have "
                f"{limits.registers_per_block}",
                hint="smaller thread-block sizes, or less register promotion")
        if kernel.shared_bytes > limits.static_shared_bytes:
            raise ResourceLimitError(
                f"{where}: {kernel.shared_bytes} bytes of static shared memory per block; "
                f"at most {limits.static_shared_bytes} are allowed",
                hint="smaller tiles (tile_sizes), or less shared-memory promotion")
