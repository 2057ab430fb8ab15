"""The register model's machine facts (scheduler/register_tile.py): the FMA latency by
core, the registers left for unrolled taps by the size of the register file, and the
functions that hold a register tile compiled without gcc's predictive commoning
(codegen/openmp.py)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from polycomp.codegen import openmp
from polycomp.codegen import vector_tile as VT
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import register_tile as RT
from test_vector_tile import CONV, CONV_REFS, _conv_oracle, _random, assert_tiles_packed

import polycomp

ZEN2 = RT.RegisterFile(16, 32, RT.SLOW_FMA_LATENCY)
AVX2 = RT.RegisterFile(16, 32)
AVX512 = RT.RegisterFile(32, 64)


@pytest.mark.parametrize("identity,latency", [
    (("AuthenticAMD", 23, 49), 5),   # Zen 2 (EPYC Rome)
    (("AuthenticAMD", 23, 1), 5),    # Zen
    (("AuthenticAMD", 25, 1), 4),    # Zen 3
    (("GenuineIntel", 6, 63), 5),    # Haswell-E
    (("GenuineIntel", 6, 85), 4),    # Skylake-SP / Cascade Lake
    (("GenuineIntel", 6, 143), 4),   # Sapphire Rapids
    (None, RT.FMA_LATENCY),          # /proc/cpuinfo unreadable
])
def test_the_fma_latency_comes_from_the_core(identity, latency):
    assert RT.fma_latency(identity) == latency


def test_the_core_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\n"
                    "model\t\t: 49\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\n"
                    "vendor_id\t: GenuineIntel\n")
    assert CM.cpu_identity(str(info)) == ("AuthenticAMD", 23, 49)
    info.write_text("processor\t: 0\nmodel name\t: something else\n")
    assert CM.cpu_identity(str(info)) is None
    assert CM.cpu_identity(str(tmp_path / "missing")) is None


def test_a_quarter_of_the_register_file_is_left_for_unrolled_taps():
    assert AVX512.reserved_unrolled == 8 and AVX2.reserved_unrolled == 4
    assert ZEN2.min_accumulators == 10 and AVX2.min_accumulators == 8


@pytest.mark.parametrize("rows", [28, 14])
def test_a_3x3_conv_tile_covers_the_fma_latency_of_the_core(rows):
    # members: filter blocks, output rows, output columns, channels, kh, kw, lanes. With
    # 5-cycle FMAs a tile needs 10 accumulators: 1 block x 7 pixels (what 4 cycles and
    # 8 reserved registers left) ran a 128-channel 3x3 conv at 67 GFLOP/s on a Zen 2,
    # 2 blocks x 5 pixels at 90
    extents = [16, rows, rows, 32, 3, 3, 8]
    for registers in (ZEN2, AVX2):
        tile = RT.choose(CONV_REFS, 6, [0, 1, 2], extents, 8, registers)
        assert tile is not None and tile.taps == 3
        assert tile.accumulators >= registers.min_accumulators, (registers, tile)
        held = RT.column_bytes(tile, CONV_REFS, 6, extents, registers) // (
            registers.vector_bytes * RT.reduction_points(CONV_REFS, 6, extents))
        assert tile.accumulators + held + registers.reserved_unrolled <= registers.vectors


@pytest.mark.parametrize("rows", [28, 14])
def test_a_3x3_conv_tile_runs_along_its_row_of_pixels(rows):
    # at equal loads, the tile along the columns (its input broadcasts move along kw as
    # along the tile: neighbours, kept across the taps) rather than down the rows: 256
    # channels at 14 x 14 ran at 87.9 GFLOP/s against 83.6 on a Zen 2 (one core)
    extents = [16, rows, rows, 32, 3, 3, 8]
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], extents, 8, ZEN2)
    assert tile is not None and tile.along_taps
    assert 2 in dict(tile.factors) and 1 not in dict(tile.factors), tile
    # a 1x1 conv has no taps to share
    assert not RT.choose(CONV_REFS, 6, [0, 1, 2], [16, rows, rows, 32, 1, 1, 8], 8,
                         ZEN2).along_taps


def test_the_tiling_gives_a_3x3_conv_whole_rows_of_pixel_tiles(monkeypatch):
    # 28 columns in tiles of 16 left 5-pixel tiles with remainders of 1 and 2 (guarded,
    # in memory), so the tile went down the rows; 14 columns are 5 + 5 + 4
    from polycomp.scheduler import tiling  # noqa: PLC0415
    monkeypatch.setattr(RT, "machine_registers", lambda: ZEN2)
    monkeypatch.setattr(CM, "simd_bytes", lambda: 32)  # AVX2's 8 lanes on any machine
    monkeypatch.setattr(CM, "cache_sizes", lambda: {1: 32 * 1024, 2: 512 * 1024,
                                                    3: 16 * 1024 * 1024})
    extents = [16, 28, 28, 128, 3, 3, 8]
    sizes = tiling._column_in_l1((4, 14, 16, 32, 3, 3, 8), CONV_REFS, 6, list(range(7)),
                                 extents, 4)
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], list(sizes), 8, ZEN2,
                     shares=tiling._tile_shares(sizes, extents))
    assert tile is not None and tile.along_taps, (sizes, tile)
    assert extents[2] % sizes[2] == 0 or sizes[2] >= extents[2], sizes


def _tile_functions(source: str) -> tuple[set[str], set[str]]:
    """(functions between TILES_BEGIN and TILES_END, functions holding a tile marker)."""
    wrapped, marked = set(), set()
    inside, current = False, None
    for line in source.splitlines():
        if line.strip() == openmp.TILES_BEGIN:
            inside = True
        elif line.strip() == openmp.TILES_END:
            inside = False
        found = re.match(r"^(?:static )?int (?:POLYCOMP_OUTLINED )?(polycomp_\w+)\(", line)
        if found:
            current = found.group(1)
            if inside:
                wrapped.add(current)
        if VT.MARKER in line:
            marked.add(current)
    return wrapped, marked


@pytest.mark.needs_cc
@pytest.mark.parametrize("parallel_min_work", [0, 10 ** 12])
def test_functions_with_a_register_tile_run_without_predictive_commoning(parallel_min_work,
                                                                          tmp_path):
    # parallel: the tile sits in an outlined body; serial: in the entry itself
    sizes = {"N": 1, "C": 32, "H": 16, "W": 16, "F": 48, "KH": 3, "KW": 3}
    kernel = polycomp.compile(CONV, sizes=sizes, parallel_min_work=parallel_min_work)
    wrapped, marked = _tile_functions(kernel.source)
    assert marked and wrapped == marked, (wrapped, marked)
    x, w = _random((1, 32, 16, 16), 3), _random((48, 32, 3, 3), 4)
    np.testing.assert_allclose(kernel(x, w), _conv_oracle(x, w), rtol=1e-4, atol=1e-4)
    assert_tiles_packed(kernel, sizes)
    # gcc's own report: its predcom pass visits none of the wrapped functions
    gcc = shutil.which("gcc")
    assert gcc is not None, "the pragma is gcc's: this check needs gcc on the PATH"
    source = tmp_path / "k.c"
    source.write_text(kernel.source)
    subprocess.run([gcc, "-O3", "-fopenmp", "-fdump-tree-pcom", "-c", str(source),
                    "-o", str(tmp_path / "k.o")], check=True, cwd=tmp_path)
    # (no dump at all where the pass ran on no function: the serial entry is the only one)
    dumps = list(tmp_path.glob("k.c.*pcom*"))
    visited = {name for dump in dumps
               for name in re.findall(r"^;; Function (\w+)", dump.read_text(), re.M)}
    assert not visited & wrapped, visited
    if parallel_min_work == 0:
        assert visited, "the pass ran on none of the functions without a tile either"


@pytest.mark.needs_cc
def test_a_kernel_without_tiles_has_no_tile_pragmas():
    kernel = polycomp.compile("def add(float(N) A, float(N) B) -> (C) { C(i) = A(i) + B(i) }",
                              sizes={"N": 1000})
    assert openmp.TILES_BEGIN not in kernel.source
