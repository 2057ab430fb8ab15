"""Time limits for isl computations that can run for minutes, and the warning a fallback gives.

Used by the schedulers (scheduler/isl_sched.py): ``in_time_limit(fn, seconds)`` runs
``fn`` (returning text: an isl object printed with ``str``) in a forked child process and
returns its text, or None when the child did not finish in time or failed.

Why a process and not isl's operation budget (``ctx.set_max_operations``): isl counts
tableau pivots, and on some small programs each pivot becomes slow (the ILP's integers
grow to thousands of digits, all the time goes to bignum gcds): a 20-line nest reached
2^16 pivots in 0.3 s, then ran for more than 100 s before 2^18, while deriche needs 2^20
to schedule normally. islpy holds the GIL inside isl, so no thread can call
``ctx.abort()`` either. A forked child costs a few milliseconds, and the parent's isl
objects are already in its memory; the result comes back as isl text.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
import warnings
from collections.abc import Callable


class SchedulerFallbackWarning(UserWarning):
    """The scheduler the user asked for gave up on a program and another one scheduled it."""


# True in a child of in_time_limit: its own children stay in its process group, so that
# killing the outermost child (os.killpg) also ends a limit nested inside it (the isl
# scheduler's, inside the whole scheduler's)
_IN_CHILD = False


def in_time_limit(fn: Callable[[], str], seconds: float) -> str | None:
    """``fn()`` computed in a child process: its text, None when ``fn`` raised, and
    TimeoutError when it ran past ``seconds`` (the child is killed). Where a process cannot
    fork (Windows) ``fn`` runs here, unbounded, its exceptions propagating. An exception
    here (KeyboardInterrupt) kills the child before it propagates."""
    if not hasattr(os, "fork"):
        return fn()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12 warns about forking a multi-threaded process (OpenMP workers from
        # an earlier kernel): the child only runs isl, which takes no lock of theirs
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: compute, write, leave without running the parent's atexit
        status = 1
        try:
            global _IN_CHILD
            if not _IN_CHILD:
                os.setpgid(0, 0)
                _IN_CHILD = True
            os.close(read_end)
            data = fn().encode()
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + seconds
    finished = timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                _kill(pid)
                timed_out = True
                break
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                finished = True
                break
            chunks.append(chunk)
    except BaseException:
        _kill(pid)  # interrupted (Ctrl-C): the wait below would last the child's whole run
        raise
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        raise TimeoutError(f"no result within {seconds} s")
    # a child that failed (an isl error) exits 1, having written nothing or part of its text
    if not finished or os.waitstatus_to_exitcode(status) != 0:
        return None
    return b"".join(chunks).decode()


def _kill(pid: int) -> None:
    """Kill the child ``pid`` and, when it leads a process group (the outermost limit),
    the children it started itself."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    except ProcessLookupError:
        pass
    os.kill(pid, signal.SIGKILL)


def call_in_time_limit(fn: Callable[[], object], seconds: float) -> object:
    """``fn()`` computed in a child process and brought back with pickle: its value, or its
    exception raised here; TimeoutError past ``seconds``. The warnings ``fn`` gave are
    given again here. ``fn``'s value must pickle (isl objects: return their text)."""
    def child() -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcome = ("value", fn())
            except Exception as exc:  # noqa: BLE001 - carried to the parent
                outcome = ("error", exc)
        given = [(w.category, str(w.message)) for w in caught]
        try:
            data = pickle.dumps((outcome, given))
        except Exception as exc:  # noqa: BLE001 - an exception that does not pickle
            data = pickle.dumps((("error", RuntimeError(f"{type(exc).__name__}: {exc}")), given))
        return data.hex()

    text = in_time_limit(child, seconds)
    if text is None:
        raise RuntimeError("the child process computing under a time limit failed")
    (kind, value), given = pickle.loads(bytes.fromhex(text))
    for category, message in given:
        warnings.warn(message, category, stacklevel=2)
    if kind == "error":
        raise value
    return value
