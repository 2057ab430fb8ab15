"""float32 matrix multiplication GFLOP/s: polycomp against numpy.

    python -m benchmarks.matmul [--size 2048] [--threads 1,2] [--schedulers isl]
    python -m benchmarks.polybench --matmul [...]          (the same)

* polycomp: ``polycomp.compile(TC_MM, scheduler=S)`` called as ``kernel(A, B)``
  and returning ``C``, on N threads (``polycomp.set_num_threads(N)``); its
  result is checked against numpy's before its time counts.
* numpy: ``A @ B`` (OpenBLAS in numpy's wheels), run in a subprocess so that
  the thread count (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS) and, for the
  second row, ``OPENBLAS_CORETYPE=SkylakeX`` are in the environment before
  numpy is imported.  The subprocess reports the OpenBLAS core it chose when
  it can find ``openblas_get_corename``.

GFLOP/s = 2*M*N*K / median seconds / 1e9.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

TC_MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"

_NUMPY_SCRIPT = r"""
import ctypes, json, sys, time
n, repeat, budget = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
import numpy as np

def corename():
    names = ("openblas_get_corename", "openblas_get_corename64_",
             "scipy_openblas_get_corename", "scipy_openblas_get_corename64_")
    try:
        paths = sorted({l.split()[-1] for l in open("/proc/self/maps")
                        if "openblas" in l.lower() and ".so" in l})
    except OSError:
        return None
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        for nm in names:
            fn = getattr(lib, nm, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None

rng = np.random.default_rng(0)
A = rng.standard_normal((n, n), dtype=np.float32)
B = rng.standard_normal((n, n), dtype=np.float32)
A @ B
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    C = A @ B
    times.append(time.perf_counter() - t0)
    if sum(times) >= budget:
        break
print(json.dumps({"times": times, "core": corename(), "numpy": np.__version__}))
"""


def gflops(n: int, seconds: float) -> float:
    return 2.0 * n * n * n / seconds / 1e9


def numpy_subprocess(n: int, threads: int, repeat: int, budget: float = 30.0,
                     coretype: str | None = None, timeout: float = 900.0) -> dict:
    """Time ``A @ B`` in a fresh interpreter; returns {"seconds", "core"} or {"error"}."""
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    argv = [sys.executable, "-c", _NUMPY_SCRIPT, str(n), str(repeat), str(budget)]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"bad output: {proc.stdout[-200:]!r}"}
    return {"seconds": statistics.median(data["times"]), "core": data.get("core")}


def polycomp_run(n: int, scheduler: str, threads: int, repeat: int,
                 budget: float = 30.0) -> dict:
    try:
        import polycomp  # noqa: PLC0415
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"error": f"import polycomp failed: {type(exc).__name__}: {exc}"}
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)
    try:
        kernel = polycomp.compile(TC_MM, scheduler=scheduler)
        polycomp.set_num_threads(threads)
        t0 = time.perf_counter()
        C = kernel(A, B)
        first = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
    times = [first]
    while len(times) < repeat and sum(times) < budget:
        t0 = time.perf_counter()
        kernel(A, B)
        times.append(time.perf_counter() - t0)
    # the check comes after the timing: OpenBLAS's threads spin for a while after A @ B
    # and took a core from the kernel (1024^3, 2 threads: 0.026 s per call just after it,
    # 0.013 s without)
    ref = A @ B
    C = np.asarray(C)
    if C.shape != ref.shape:
        return {"error": f"WRONG: shape {C.shape}"}
    scale = float(np.max(np.abs(ref)))
    if not np.allclose(C, ref, rtol=1e-3, atol=1e-4 * scale):
        return {"error": "WRONG: result differs from numpy"}
    return {"seconds": statistics.median(times)}


def run(size: int = 2048, threads: Sequence[int] = (1, 2),
        schedulers: Sequence[str] | None = None, repeat: int = 5,
        budget: float = 30.0) -> list[dict]:
    if schedulers is None:
        from .polybench.runner import default_schedulers  # noqa: PLC0415

        schedulers = [s for s in default_schedulers() if s != "none"]
    rows = []
    for t in threads:
        for label, core in (("numpy", None), ("numpy (OPENBLAS_CORETYPE=SkylakeX)", "SkylakeX")):
            r = numpy_subprocess(size, t, repeat, budget, coretype=core)
            rows.append({"variant": label, "threads": t, **r})
        for s in schedulers:
            r = polycomp_run(size, s, t, repeat, budget)
            rows.append({"variant": f"polycomp-{s}", "threads": t, **r})
    for r in rows:
        if "seconds" in r:
            r["gflops"] = gflops(size, r["seconds"])
    return rows


def table(rows: Sequence[dict], size: int) -> str:
    lines = [f"## matmul {size}x{size}x{size} float32", "",
             "| variant | threads | seconds | GFLOP/s | note |", "|---|---|---|---|---|"]
    for r in rows:
        if "seconds" in r:
            note = f"OpenBLAS core: {r['core']}" if r.get("core") else ""
            lines.append(f"| {r['variant']} | {r['threads']} | {r['seconds']:.4f} | "
                         f"{r['gflops']:.1f} | {note} |")
        else:
            err = r.get("error", "").replace("|", "/")
            status = "WRONG" if err.startswith("WRONG") else "ERROR"
            lines.append(f"| {r['variant']} | {r['threads']} | {status} | - | {err} |")
    return "\n".join(lines) + "\n"


def main_from_runner(size: int, threads: Sequence[int], schedulers: Sequence[str] | None,
                     repeat: int, out_dir: Path | None = None) -> int:
    rows = run(size, threads, schedulers, repeat)
    text = table(rows, size)
    print(text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"matmul_{size}.md").write_text(text)
        (out_dir / f"matmul_{size}.json").write_text(json.dumps(rows, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.matmul", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--schedulers", default=None,
                   help="comma-separated (default: isl, and pluto when available)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = p.parse_args(argv)
    threads = [int(t) for t in a.threads.split(",") if t]
    scheds = None if a.schedulers is None else [s for s in a.schedulers.split(",") if s]
    return main_from_runner(a.size, threads, scheds, a.repeat, Path(a.out))


if __name__ == "__main__":
    sys.exit(main())
