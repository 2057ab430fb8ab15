"""Shared test setup: a private kernel cache per test session, and small helpers."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_CACHE = tempfile.mkdtemp(prefix="polycomp-test-cache-")
os.environ["POLYCOMP_CACHE_DIR"] = _CACHE
# The suite runs beside its own xdist workers: with the load-adaptive thread count
# (polycomp/threads.py) a test asking for 3 threads would run on 1 and never exercise
# the parallel code. tests/test_threads_load.py turns it back on where it is the subject.
os.environ["OMP_DYNAMIC"] = "false"


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest hook signature
    shutil.rmtree(_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    if shutil.which(os.environ.get("CC", "gcc").split()[0]) is None:
        skip = pytest.mark.skip(reason="no C compiler")
        for item in items:
            if "needs_cc" in item.keywords:
                item.add_marker(skip)
    # nvcc and a GPU are looked for only when a collected test asks (cuInit is not
    # called in a run without GPU tests)
    marked = {m: [i for i in items if m in i.keywords] for m in ("needs_nvcc", "needs_gpu")}
    if marked["needs_nvcc"] or marked["needs_gpu"]:
        from polycomp import cuda

        reasons = {"needs_nvcc": None if cuda.nvcc_path() else "nvcc (the CUDA compiler) not found"}
        if marked["needs_gpu"]:
            ok, why = cuda.available()
            reasons["needs_gpu"] = None if ok else f"no GPU to run on: {why}"
        for marker, reason in reasons.items():
            for item in marked[marker] if reason else ():
                item.add_marker(pytest.mark.skip(reason=reason))
