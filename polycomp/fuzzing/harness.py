"""The fuzz harness: random options, the worker process, outcomes and their classes.

Place in the pipeline: the parent side of the differential fuzzer. A ``Case`` (a generated
program, Options keywords, a thread count, an input seed) goes to a ``Worker`` child
process (``fuzzing.worker``) with a time limit; the ``Outcome`` says what happened:

    ok        polycomp and the oracle agree on every array
    mismatch  they differ (wrong code)                                      finding
    rejected  a PolycompError on a valid program                            finding
    internal  InternalError, a raw isl/Python error, the frontend's guard   finding
    crash     the worker died inside polycomp (signal, abort)               finding
    hang      no answer within the time limit                               finding
    discard   undefined behaviour in the program (the sanitised oracle trapped)
    invalid   the generator wrote something gcc rejects (a fuzzer defect)
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from .draw import Draw

FINDINGS = ("mismatch", "rejected", "internal", "crash", "hang")
TOLERANCE = {"float32": 1e-4, "float64": 1e-9}


@dataclass
class Case:
    kind: str  # "loops" or "tc"
    program: object  # loopgen.LoopCase or tcgen.TcCase
    options: dict
    threads: int = 1
    seed: int = 0

    def describe(self) -> str:
        return (f"options={self.options!r} threads={self.threads} input seed={self.seed}\n"
                f"sizes={getattr(self.program, 'sizes', {})}\n{self.program.source}")


@dataclass
class Outcome:
    status: str
    detail: str = ""
    stage: str = ""

    @property
    def finding(self) -> bool:
        return self.status in FINDINGS


def compare(pairs) -> Outcome:
    """Integers bit for bit; floats within a tolerance (FMA contraction at -O3)."""
    bad = []
    for name, want, got in pairs:
        if want.dtype.kind in "biu":
            same = np.array_equal(want, got)
        else:
            tol = TOLERANCE.get(want.dtype.name, 1e-9)
            same = np.allclose(want, got, rtol=tol, atol=tol, equal_nan=True)
        if not same:
            where = np.argwhere(want != got)[:4].tolist() if want.shape == got.shape else "shape"
            bad.append(f"{name}: expected {np.array2string(want.ravel()[:24])} got "
                       f"{np.array2string(got.ravel()[:24])} (first differences at {where})")
    return Outcome("mismatch", "\n".join(bad), "result") if bad else Outcome("ok")


# ----------------------------------------------------------------------------- options

TILE_SIZES = [None, None, (1,), (2,), (3,), (5,), (1, 5), (2, 5), (5, 1), (1, 3), (3, 2),
              (7, 3, 2), (2, 2, 2), (4, 1, 3), (32,)]
CFLAGS = [None, None, None, ("-O3", "-march=native"), ("-O2",), ("-O1",), ("-O0",)]


def sample_options(draw: Draw) -> tuple[dict, int]:
    """Options keywords and a thread count (1..4); None entries stay at the defaults."""
    opts: dict = {"scheduler": draw.choice(["pluto", "isl", "none", "pluto"])}
    if draw.chance(0.6):
        opts["fusion"] = draw.choice(["smart", "max", "typed", "none"])
    if draw.chance(0.5):
        opts["tile_sizes"] = draw.choice(TILE_SIZES)
    for name, p in (("tile", 0.15), ("parallel", 0.15), ("wavefront", 0.15),
                    ("vectorize", 0.15)):
        if draw.chance(p):
            opts[name] = False
    if draw.chance(0.1):
        opts["l2_tile"] = True
    if draw.chance(0.4):
        opts["unroll"] = draw.choice([0, 1, 2, 3, 4, 5, 8])
    if draw.chance(0.3):
        opts["parametric"] = True
    if draw.chance(0.6):  # tiny sizes: without this no loop is ever parallel
        opts["parallel_min_work"] = 0
    flags = draw.choice(CFLAGS)
    if flags is not None:
        opts["cflags"] = list(flags)
    opts = {k: v for k, v in opts.items() if v is not None}
    return opts, draw.integer(1, 4)


# ----------------------------------------------------------------------------- worker


class Worker:
    """One child process running cases; restarted after a crash or a hang."""

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()

    def _start(self) -> None:
        self.log.seek(0)
        self.log.truncate()
        env = dict(os.environ)
        env.setdefault("POLYCOMP_CACHE_DIR", tempfile.mkdtemp(prefix="polycomp-fuzz-cache-"))
        self.proc = subprocess.Popen([sys.executable, "-m", "polycomp.fuzzing.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-1500:]

    def _read(self, n: int, deadline: float) -> bytes | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd, out = self.proc.stdout.fileno(), b""
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def run(self, case: Case) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        data = pickle.dumps(case)
        stage = "start"
        deadline = time.monotonic() + self.timeout
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
            while True:
                head = self._read(8, deadline)
                body = None if head is None else self._read(struct.unpack("<Q", head)[0],
                                                              deadline)
                if body is None:
                    break
                kind, value = pickle.loads(body)
                if kind == "done":
                    return value
                stage = value
        except TimeoutError:
            self.close()
            if stage == "oracle":
                return Outcome("invalid", f"the oracle ran longer than {self.timeout} s", stage)
            return Outcome("hang", f"no result within {self.timeout:.0f} s", stage)
        except BrokenPipeError:
            pass
        code = self.proc.wait()
        tail = self._stderr_tail()
        self.close()
        how = (f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
        if stage == "oracle":  # the sanitised reference trapped: undefined behaviour
            return Outcome("discard", f"oracle died ({how})", stage)
        return Outcome("crash", f"the worker died ({how}) in stage {stage}\n{tail}", stage)


@dataclass
class Summary:
    cases: int = 0
    counts: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)  # (Case, Outcome)

    def add(self, case: Case, outcome: Outcome) -> None:
        self.cases += 1
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        if outcome.finding or outcome.status == "invalid":
            self.findings.append((case, outcome))

    def line(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return f"{self.cases} cases: {parts}"
