"""A competing busy process, for timing kernels on a loaded machine.

Users run polycomp on shared machines: a kernel that splits its work over every core
must not lose to the plain serial loop because another process holds one of them.
``competing_load()`` starts a process that spins on one core (the last one the
benchmark may use, unless told otherwise) for as long as the ``with`` block lasts:

    with competing_load():
        ...time gcc on 1 thread against polycomp on 2 threads...

The spinner is a plain Python loop in a child process (no shell), pinned with
``sched_setaffinity`` where the platform has it, so that the operating system cannot
move it off the core it competes for. It is killed on leaving the block, also on errors, and ends by itself when the
benchmark's process is gone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

# spins until its parent is gone, so that a benchmark killed without cleanup (SIGKILL,
# a closed terminal) leaves no spinner behind
# (the parent's pid comes as an argument: the child may start after its parent is gone)
SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    pass\n"


def default_core() -> int | None:
    """The last core this process may run on (None where affinity is unknown)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


@contextlib.contextmanager
def competing_load(core: int | None = None, processes: int = 1) -> Iterator[list[int]]:
    """Run ``processes`` spinning processes on ``core`` (default: the last core) for the
    duration of the block; yields their pids."""
    core = default_core() if core is None else core
    children: list[subprocess.Popen] = []
    try:
        for _ in range(processes):
            child = subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                                     stdin=subprocess.DEVNULL)
            children.append(child)
            if core is not None:
                os.sched_setaffinity(child.pid, {core})
        yield [c.pid for c in children]
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()


def describe(core: int | None = None) -> str:
    core = default_core() if core is None else core
    where = f"pinned to CPU {core}" if core is not None else "not pinned"
    return f"a competing busy process (one spinning Python loop, {where}) ran throughout"
