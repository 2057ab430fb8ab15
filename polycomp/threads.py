"""The OpenMP thread count of generated kernels, and how their threads wait.

Kernels link gcc's OpenMP runtime (libgomp); ``omp_set_num_threads`` called from the
Python thread that calls kernels sets how many threads their parallel loops use.

Waiting: libgomp's idle threads spin a while before they sleep. A short spin
(GOMP_SPINCOUNT=10000, some microseconds) was polycomp's choice while nothing else kept
a loaded machine from running parallel code on a core another process holds: a
spinning worker then used up its time slice and every region waited for it (trisolv at
LARGE at 0.08x gcc's serial loop beside two busy processes). Since each call now uses
only the cores other processes leave free (below), the short spin mostly cost the quiet
case: on this project's 2-vCPU machines a worker that slept between back-to-back calls
took 0.1 to 0.3 ms to wake (softmax at BERT's shape: 0.35 ms median on 2 threads against
0.13 ms on 1; with a 300000-round spin, libgomp's own default, 0.10 ms), while beside a
busy process the long spin kept every kernel measured ahead of gcc's serial loop
(trisolv 1.39x against 1.69x with the short spin, doitgen 6.98x against 6.94x, gemver
2.89x against 3.89x). So polycomp sets GOMP_SPINCOUNT=300000 unless the user chose a
wait policy or a spin count (explicitly: libgomp's default also depends on other
settings); libgomp reads the variables once, when it is loaded, which is why this
happens when polycomp is imported.

Sharing the cores: a short spin is not enough where another process keeps a core busy.
A static parallel loop gives that core's thread half the work, the thread then gets
half the core, and every barrier waits for it; a wavefront pays a descheduled worker's
time slice per step (doitgen at LARGE: 5.2 s on 2 threads beside one busy process,
0.42 s for gcc's serial loop). So, like libgomp's own OMP_DYNAMIC but from the number
of tasks running now rather than the 15-minute load average, each call of a kernel with
parallel code uses at most as many threads as there are cores that nothing else is
running on (threads_for_call): the requested count on an idle machine, 1 thread beside
a busy process on 2 cores. ``set_dynamic(False)``, or OMP_DYNAMIC=false in the
environment, keeps the requested count whatever the load (the fuzzer and the tests of
multi-threaded code need exactly that count).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import time

from .errors import OptionError

#: the environment polycomp sets for libgomp unless the user set either variable
WAIT_ENVIRONMENT = {"GOMP_SPINCOUNT": "300000"}


def prefer_short_spinning(environ: dict[str, str] | None = None) -> bool:
    """Set WAIT_ENVIRONMENT unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set already;
    whether it was set. Has an effect only before libgomp is loaded in this process."""
    environ = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return False
    environ.update(WAIT_ENVIRONMENT)
    return True


prefer_short_spinning()


def max_threads() -> int:
    """The largest thread count set_num_threads accepts: 4 threads per CPU of the machine,
    at least 64. More threads than that only slow a parallel loop down (each gets under
    a quarter of a core, and a static schedule waits for the slowest), while libgomp
    itself fails badly on absurd counts: it segfaults creating 100000 threads, and a
    count beyond a C int wraps (2**32 + 3 becomes 3) or asks for terabytes of thread
    descriptors and exits the process."""
    return max(64, 4 * (os.cpu_count() or 1))


@functools.lru_cache(maxsize=1)
def _libgomp() -> ctypes.CDLL:
    name = ctypes.util.find_library("gomp") or "libgomp.so.1"
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


def set_num_threads(n: int) -> None:
    """Use ``n`` OpenMP threads in every kernel called from this Python thread."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise OptionError(f"the thread count must be a positive integer, not {n!r}",
                          hint=f"e.g. set_num_threads({os.cpu_count() or 1})")
    if n > max_threads():
        raise OptionError(f"the thread count {n} is more than polycomp allows on this "
                          f"machine ({max_threads()}: 4 per CPU, at least 64)",
                          hint=f"this machine has {os.cpu_count()} CPUs; e.g. "
                               f"set_num_threads({os.cpu_count() or 1})")
    _libgomp().omp_set_num_threads(ctypes.c_int(n))


def get_max_threads() -> int:
    return int(_libgomp().omp_get_max_threads())


_dynamic = os.environ.get("OMP_DYNAMIC", "").strip().lower() not in ("false", "0", "no")


def set_dynamic(flag: bool) -> None:
    """Whether kernels use fewer threads than requested while other processes keep
    cores busy (the default; OMP_DYNAMIC=false in the environment turns it off)."""
    global _dynamic
    if not isinstance(flag, bool):
        raise OptionError(f"set_dynamic takes True or False, not {flag!r}")
    _dynamic = flag


def get_dynamic() -> bool:
    return _dynamic


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def running_tasks() -> int | None:
    """Tasks (threads) running or runnable on the whole machine now, from the kernel's
    /proc/loadavg; None where there is no such file."""
    try:
        return int(_read("/proc/loadavg").split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def own_running_tasks() -> int:
    """This process's threads that are running or runnable now (the caller included)."""
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for tid in tasks:
        try:
            stat = _read(f"/proc/self/task/{tid}/stat")
        except OSError:
            continue  # the thread ended
        state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
        count += state == b"R"
    return max(count, 1)


def threads_for_call(requested: int, cpus: int | None = None,
                     running: int | None = None, own: int | None = None) -> int:
    """How many threads the next parallel call uses: ``requested``, unless other
    processes' tasks are running, then at most one per core they leave free (at least
    1). The machine-wide counts are read now unless given (tests give them)."""
    if requested <= 1 or not _dynamic:
        return requested
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    running = running if running is not None else running_tasks()
    if running is None or running <= 1:
        return requested
    others = running - (own if own is not None else own_running_tasks())
    if others <= 0:
        return requested
    return max(1, min(requested, cpus - others))


# seconds a reading of the load serves for: reading it (/proc/loadavg and a stat file
# per thread of the process: onnxruntime's, libgomp's) took 45 us per call, a third of
# a softmax at BERT's shape, while load from other processes changes on the scale of
# their time slices (milliseconds)
LOAD_CHECK_S = 0.02
_last_check: tuple[float, int, int] | None = None  # (when, requested, threads used)


def forget_load() -> None:
    """Read the load again at the next call (tests that change it)."""
    global _last_check
    _last_check = None


def _threads_now(requested: int) -> int:
    """threads_for_call(requested), from a reading at most LOAD_CHECK_S old."""
    global _last_check
    now = time.monotonic()
    if (_last_check is not None and now - _last_check[0] < LOAD_CHECK_S
            and _last_check[1] == requested):
        return _last_check[2]
    use = threads_for_call(requested)
    _last_check = (now, requested, use)
    return use


class call_threads:
    """``with call_threads():`` around a kernel call with parallel code: lowers this
    Python thread's OpenMP count for the call when the machine is busy
    (threads_for_call, read at most every LOAD_CHECK_S), and restores it after.
    ``call_threads(n)`` asks for ``n`` threads for the call instead of this Python
    thread's count (an ONNX session's ``intra_op_num_threads``), lowered the same way."""

    __slots__ = ("threads", "restore")

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads

    def __enter__(self) -> None:
        self.restore = 0
        if not _dynamic and self.threads is None:
            return
        gomp = _libgomp()
        current = int(gomp.omp_get_max_threads())
        requested = self.threads if self.threads is not None else current
        use = _threads_now(requested) if _dynamic else requested
        if use != current:
            gomp.omp_set_num_threads(ctypes.c_int(use))
            self.restore = current

    def __exit__(self, *exc: object) -> None:
        if self.restore:
            _libgomp().omp_set_num_threads(ctypes.c_int(self.restore))
