"""The measured floating-point peak of this machine: FP32 multiply-adds per second.

Place: beside the runtime, for reports (the per-group profile of a model,
polycomp/onnx/profile.py) that say how close a kernel comes to what the cores can do.
Input: a thread count. Output: GFLOP/s, measured once per machine and thread count with
a micro-benchmark and cached in the compile cache (``peak.json``).

The micro-benchmark: independent chains of vector FMAs (``acc = acc * a + b`` on GCC
vector types as wide as the compiler's ISA, ``-march=native``: 16 lanes with AVX-512, 8
with AVX), enough chains to cover the FMA latency times the ports (16 with AVX-512's 32
registers, 10 with AVX's 16), each thread its own, for a fixed number of steps; 2 flops
per lane per FMA. The fastest of several runs counts, as a peak should.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path

from . import build
from .options import Options

STEPS = 2_000_000  # per thread and run: about 10 ms on a 3 GHz core with 2 FMA ports
RUNS = 5

SOURCE = r"""
#if defined(__AVX512F__)
#define LANES 16
#define CHAINS 16
#elif defined(__AVX__)
#define LANES 8
#define CHAINS 10
#else
#define LANES 4
#define CHAINS 8
#endif
typedef float vec __attribute__((vector_size(4 * LANES)));

long polycomp_peak_lanes(void) { return LANES * CHAINS; }

/* each thread: CHAINS independent chains of `steps` FMAs; the sum is returned so that
   nothing is optimised away */
double polycomp_peak_run(long steps, float a, float b)
{
  double sink = 0.0;
  #pragma omp parallel reduction(+:sink)
  {
    vec acc[CHAINS];
    vec va = {0}, vb = {0};
    va += a; vb += b;
    for (int k = 0; k < CHAINS; k++) { acc[k] = (vec){0}; acc[k] += (float)k; }
    for (long s = 0; s < steps; s++) {
      #pragma GCC unroll 16
      for (int k = 0; k < CHAINS; k++) acc[k] = acc[k] * va + vb;
    }
    for (int k = 0; k < CHAINS; k++)
      for (int l = 0; l < LANES; l++) sink += acc[k][l];
  }
  return sink;
}
"""


def _library() -> ctypes.CDLL:
    options = Options.create(cflags=("-O2", "-march=native", "-ffp-contract=fast"))
    path = build.build_library(SOURCE, "polycomp_peak", options)
    lib = ctypes.CDLL(str(path))
    lib.polycomp_peak_run.restype = ctypes.c_double
    lib.polycomp_peak_run.argtypes = [ctypes.c_long, ctypes.c_float, ctypes.c_float]
    lib.polycomp_peak_lanes.restype = ctypes.c_long
    return lib


def measure_peak(threads: int) -> float:
    """FP32 GFLOP/s of ``threads`` threads running FMA chains (the fastest of RUNS)."""
    from .threads import call_threads  # noqa: PLC0415 - libgomp only when measuring

    lib = _library()
    flops = 2.0 * lib.polycomp_peak_lanes() * STEPS * threads
    best = float("inf")
    with call_threads(threads):
        lib.polycomp_peak_run(STEPS // 10, 0.999, 1e-3)  # warm-up: threads and clocks
        for _ in range(RUNS):
            start = time.perf_counter()
            lib.polycomp_peak_run(STEPS, 0.999, 1e-3)
            best = min(best, time.perf_counter() - start)
    return flops / best / 1e9


def peak_gflops(threads: int, cache: bool = True) -> float:
    """The machine's FP32 peak at ``threads`` threads: measured once, then read from the
    cache (keyed by the CPU model and the compiler, as every build is)."""
    path = Path(build.cache_dir()) / "peak.json"
    key = f"{build.cpu_identity()}|{threads}"
    known: dict[str, float] = {}
    if cache and path.exists():
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        if key in known:
            return float(known[key])
    value = measure_peak(threads)
    if cache:
        known[key] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, path)
    return value
