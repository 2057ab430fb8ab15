"""Hand-written CUDA shared by the header's tests (test_cuda_emulation.py) and the nvcc
checks (test_nvcc.py): a vector add's host entry written with polycomp_cuda.h's host
macros, as the generated code writes them (it launches a ``vadd`` kernel the including
source defines). And the ThreadSanitizer set-up that test_cuda_emulation.py (on
hand-written kernels) and test_cuda_tsan.py (on generated ones) share: the C++ compiler,
TSAN_OPTIONS and the probe that says why TSan programs cannot run here."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CXX = os.environ.get("CXX", "g++")
# halt at the first report, with an exit status no kernel returns (the header's are 20-24)
TSAN_OPTIONS = "halt_on_error=1 exitcode=66 report_signal_unsafe=0"

VADD_HOST = """\
extern "C" int polycomp_vadd(long n, const float *a, const float *b, float *c) {
    float *da = nullptr, *db = nullptr, *dc = nullptr;
    size_t bytes = n * sizeof(float);
    POLYCOMP_ALLOC(da, bytes);
    POLYCOMP_ALLOC(db, bytes);
    POLYCOMP_ALLOC(dc, bytes);
    POLYCOMP_COPY_IN(da, a, bytes);
    POLYCOMP_COPY_IN(db, b, bytes);
    POLYCOMP_LAUNCH(vadd, dim3((n + 127) / 128), dim3(128), da, db, dc, n);
    POLYCOMP_LAUNCH_CHECK();
    POLYCOMP_SYNC();
    POLYCOMP_COPY_OUT(c, dc, bytes);
    POLYCOMP_FREE(da);
    POLYCOMP_FREE(db);
    POLYCOMP_FREE(dc);
    return 0;
}
"""


@functools.lru_cache(maxsize=None)
def tsan_problem() -> str | None:
    """Why TSan programs cannot be built or run here, or None when they can."""
    if shutil.which(CXX) is None:
        return f"no C++ compiler ({CXX})"
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "probe.cc"
        source.write_text("#include <thread>\nint main() { std::thread t([] {}); "
                          "t.join(); return 0; }\n")
        program = Path(folder) / "probe"
        built = subprocess.run([CXX, "-fsanitize=thread", "-pthread", str(source), "-o",
                                str(program)], capture_output=True, text=True, timeout=120)
        if built.returncode != 0:
            return f"{CXX} cannot build with -fsanitize=thread: {built.stderr.strip()[-300:]}"
        ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "TSAN_OPTIONS": TSAN_OPTIONS})
        if ran.returncode != 0:  # e.g. "unexpected memory mapping" under some kernels
            return f"ThreadSanitizer programs do not run here: {ran.stderr.strip()[-300:]}"
    return None
