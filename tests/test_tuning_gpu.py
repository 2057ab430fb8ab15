"""The tuner's space for the GPU targets (issue 14 item 2, issue 13 item 1): each kernel
band's block tile per thread and sequential member, and the launch knobs (threads per
block, threads along x, most blocks along x), entering through the tile policy seam
(scheduler/tiling.py) and checked like every other configuration."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp
from polycomp.errors import OptionError
from polycomp.scheduler.tiling import gpu_block_shape
from polycomp.tuning.api import space_of, timed_call

MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
SIZES = {"M": 48, "N": 40, "K": 36}
LAUNCH = re.compile(r"POLYCOMP_LAUNCH\((\w+), dim3\((\d+), (\d+), (\d+)\), "
                    r"dim3\((\d+), (\d+), (\d+)\)")


def launches(source: str) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """kernel name -> (grid, block) of each launch with constant extents."""
    return {m.group(1): (tuple(int(v) for v in m.groups()[1:4]),
                         tuple(int(v) for v in m.groups()[4:7]))
            for m in LAUNCH.finditer(source)}


def inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal((SIZES["M"], SIZES["K"])).astype(np.float32),
            rng.standard_normal((SIZES["K"], SIZES["N"])).astype(np.float32))


def test_the_space_has_block_tiles_and_launch_knobs_and_no_cpu_knobs():
    space, infos = space_of(MM, {"target": "cuda-emulated"}, sizes=SIZES)
    names = set(space.names)
    assert {"gpu/threads", "gpu/x", "gpu/grid"} <= names
    # the matmul band: m and n to threads, k the sequential tile staged in shared memory
    assert {"S1@0/tile0", "S1@0/tile1", "S1@0/tile2"} <= names
    assert not [n for n in names if n.endswith(("/unroll", "/simd", "/l2"))]
    assert space.default["gpu/threads"] == 256 and space.default["gpu/x"] == 32
    assert space.default["S1@0/tile2"] == 32  # gpu_mapping.SEQUENTIAL_TILE
    assert all(min(space.knob(n).values) >= 4 for n in names if "/tile" in n)


def test_an_untiled_band_offers_its_thread_members_only():
    space, _ = space_of(MM, {"target": "cuda-emulated", "tile": False}, sizes=SIZES)
    tiles = sorted(n for n in space.names if n.startswith("S1@0/"))
    assert tiles == ["S1@0/tile0", "S1@0/tile1"]


def test_the_default_configuration_is_the_mapping_s_own_choice():
    space, _ = space_of(MM, {"target": "cuda"}, sizes=SIZES)
    plain = polycomp.compile(MM, target="cuda")
    configured = polycomp.compile(MM, target="cuda", band_config=space.default)
    plain.specialize(SIZES)
    configured.specialize(SIZES)
    body = lambda text: text.split("\n", 1)[1]  # noqa: E731 - the first line names options
    assert body(configured.source) == body(plain.source)


def test_sampled_configurations_run_right_and_launch_as_configured():
    space, _ = space_of(MM, {"target": "cuda-emulated"}, sizes=SIZES)
    rng = np.random.default_rng(7)
    a, b = inputs(rng)
    for _ in range(5):
        config = space.sample(rng)
        kernel = polycomp.compile(MM, target="cuda-emulated", band_config=config)
        got = kernel(a, b)
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
        shapes = launches(kernel.source)
        assert shapes, kernel.source
        for name, (grid, block) in shapes.items():
            assert block[0] * block[1] * block[2] <= config["gpu/threads"], (name, config)
            assert block[0] <= config["gpu/x"], (name, config)
            assert grid[0] <= config["gpu/grid"], (name, config)
        # the matmul kernel's blocks are its configured tiles, capped by the launch knobs
        grid, block = shapes["polycomp_mm_kernel1"]
        assert block[0] <= config["S1@0/tile1"] and block[1] <= config["S1@0/tile0"]


@pytest.mark.parametrize("bad", [{"gpu/threads": 0}, {"gpu/threads": 2048}, {"gpu/x": -1},
                                 {"gpu/grid": 0}, {"gpu/y": 4}])
def test_launch_knobs_are_checked(bad):
    with pytest.raises(OptionError, match="band_config"):
        polycomp.compile(MM, target="cuda-emulated", band_config=bad)


@settings(max_examples=200, deadline=None)
@given(block=st.lists(st.integers(1, 64), min_size=1, max_size=3).map(tuple),
       threads=st.one_of(st.none(), st.integers(1, 1024)),
       x=st.one_of(st.none(), st.integers(1, 1024)))
def test_launch_knobs_reshape_any_block_within_its_threads(block, threads, x):
    shape = gpu_block_shape(block, threads, x)
    assert len(shape) == len(block) and all(v >= 1 for v in shape)
    total = int(np.prod(block)) if threads is None else threads
    assert int(np.prod(shape)) <= max(total, 1)
    if threads is None and x is None:
        assert shape == block
    if len(block) == 2 and x is not None and x <= total and total % x == 0:
        assert shape == (x, total // x)


def test_tune_searches_the_gpu_space_and_times_the_device_entry():
    result = polycomp.tune(MM, sizes=SIZES, trials=4, records=False, target="cuda-emulated",
                           time_budget=0.02, confirm=False)
    assert [t.status for t in result.trials] == ["valid"] * 4
    assert all("gpu/threads" in t.config for t in result.trials)
    options = result.best_options
    assert options["target"] == "cuda-emulated" and "gpu/threads" in options["band_config"]
    a, b = inputs(np.random.default_rng(1))
    kernel = polycomp.compile(MM, **options)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # a trial times the device entry on staged arrays, not the host entry's copies
    call = timed_call(kernel, [a, b])
    assert hasattr(call, "arrays")
    openmp = polycomp.compile(MM)
    assert not hasattr(timed_call(openmp, [a, b]), "arrays")


@pytest.mark.parametrize("installed,expected", [((), True), (("torch",), False),
                                                (("cupy",), False)])
def test_tuning_for_the_gpu_without_an_array_library_times_copies(monkeypatch, installed,
                                                                   expected):
    import importlib.util

    from polycomp.tuning import measure
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name in installed else None)
    assert measure.times_copies(polycomp.compile(MM, target="cuda")) is expected
    # the emulated target stages its arrays with numpy; the CPU has no device entry
    assert not measure.times_copies(polycomp.compile(MM, target="cuda-emulated"))
    assert not measure.times_copies(polycomp.compile(MM))


def test_tuning_that_times_copies_warns(monkeypatch):
    from polycomp.tuning import api
    from polycomp.tuning.measure import CopiesTimedWarning
    monkeypatch.setattr(api, "times_copies", lambda kernel: True)
    with pytest.warns(CopiesTimedWarning, match="copies"):
        api.prepare(MM, SIZES, target="cuda-emulated", time_budget=0.01, paired=False)
