"""The PolyBench suite in benchmarks/polybench: C kernels against their numpy
versions (MINI size), the C files' shape, the definitions table, and the
runner's table / geometric-mean code on made-up numbers."""

from __future__ import annotations

import csv
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pycparser
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.polybench import compare, defs, peers, report, runner  # noqa: E402
from benchmarks.polybench.report import ERROR, OK, SKIPPED, WRONG, Result  # noqa: E402

pytestmark = pytest.mark.needs_cc

NAMES = list(defs.KERNEL_NAMES)

requires_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not found")


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("polybench-so")


# ------------------------------------------------------------------ table


def test_thirty_kernels_with_files():
    assert len(NAMES) == 30
    assert len({k.c_file for k in defs.KERNELS.values()}) == 30
    on_disk = sorted(p.name for p in defs.KERNEL_DIR.glob("*.c"))
    assert on_disk == sorted(k.c_file for k in defs.KERNELS.values())


@pytest.mark.parametrize("name", NAMES)
def test_definition_consistent(name):
    k = defs.get_kernel(name)
    assert defs.get_kernel(k.function) is k
    assert defs.get_kernel(name.replace("-", "_")) is k
    assert set(k.sizes) == set(defs.SIZE_NAMES)
    for size, vals in k.sizes.items():
        assert set(vals) == set(k.int_params), size
    # sizes grow from MINI to LARGE
    firsts = [sum(k.sizes[s].values()) for s in defs.SIZE_NAMES]
    assert firsts == sorted(firsts)
    assert k.out_args, "a kernel writes something"
    if k.tc_source is not None:
        assert k.tc_reference is not None and k.tc_args
        assert all(a in {s.name for s in k.args} for a in k.tc_args)


_PARAM_RE = re.compile(r"^(int|double)\s+(\w+)((?:\s*\[[^\]]+\])*)$")


@pytest.mark.parametrize("name", NAMES)
def test_c_file_shape(name):
    """What the polycomp front end relies on: one function, the scop pragmas,
    no macros or comments, parameters exactly as in the definitions table."""
    k = defs.get_kernel(name)
    src = k.c_source()
    pre = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("#")]
    assert pre == ["#include <math.h>", "#pragma scop", "#pragma endscop"]
    for bad in ("/*", "//", "typedef", "restrict", "#define", "goto", "while", "->", "malloc"):
        assert bad not in src, bad
    funcs = re.findall(r"^\s*(?:void|int|double)\s+(\w+)\s*\(", src, flags=re.M)
    assert funcs == [k.function]
    sig = re.search(r"void\s+" + k.function + r"\s*\(([^)]*)\)", src, flags=re.S)
    assert sig
    params = [" ".join(p.split()) for p in sig.group(1).split(",")]
    assert len(params) == len(k.args)
    for text, spec in zip(params, k.args):
        m = _PARAM_RE.match(text)
        assert m, text
        ctype, pname, dims = m.groups()
        assert pname == spec.name
        if spec.kind == "array":
            want_t = "int" if spec.dtype == "int32" else "double"
            assert ctype == want_t
            got_dims = tuple(d.strip() for d in re.findall(r"\[([^\]]+)\]", dims))
            assert got_dims == tuple(str(d) for d in spec.shape)
        else:
            assert dims == ""
            assert ctype == spec.kind
    body = src[src.index("#pragma scop"):src.index("#pragma endscop")]
    assert "for (" in body or name == "durbin"


def test_pycparser_parses_kernels():
    for k in defs.KERNELS.values():
        text = "\n".join(ln for ln in k.c_source().splitlines()
                         if not ln.lstrip().startswith("#include"))
        ast = pycparser.CParser().parse(text, filename=k.c_file)
        funcs = [n for n in ast.ext if type(n).__name__ == "FuncDef"]
        assert [f.decl.name for f in funcs] == [k.function], k.name


# ------------------------------------------------------- C against numpy


@requires_gcc
@pytest.mark.parametrize("name", NAMES)
def test_gcc_kernel_matches_numpy(name, so_dir):
    k = defs.get_kernel(name)
    args0 = defs.make_args(k, "MINI")
    c_args = defs.copy_args(args0)
    peers.load_c_kernel(k, "gcc", out_dir=so_dir)(c_args)
    np_args = defs.copy_args(args0)
    k.numpy_impl(np_args)

    for spec in k.args:
        if spec.kind == "array":
            assert np.isfinite(c_args[spec.name]).all(), spec.name
            if not spec.out:  # inputs stay as they were
                assert np.array_equal(c_args[spec.name], args0[spec.name]), spec.name
                assert np.array_equal(np_args[spec.name], args0[spec.name]), spec.name
    changed = [s.name for s in k.out_args
               if not np.array_equal(c_args[s.name], args0[s.name])]
    # heat-3d: PolyBench's linear initial state is a fixed point of the stencil
    assert changed or name == "heat-3d", "the kernel changed none of its outputs"
    msg = compare.compare_outputs(defs.outputs(k, c_args), defs.outputs(k, np_args),
                                  k.rtol, k.atol)
    assert msg is None, msg


# Kernels whose algorithm needs PolyBench's well-conditioned inputs.
_NEEDS_STRUCTURED_INPUT = {"cholesky", "lu", "ludcmp", "durbin", "gramschmidt", "trisolv"}


@requires_gcc
@pytest.mark.parametrize("name", [n for n in NAMES if n not in _NEEDS_STRUCTURED_INPUT])
def test_gcc_kernel_matches_numpy_on_random_data(name, so_dir):
    """PolyBench's inputs are smooth (heat-3d's is even a fixed point);
    random inputs make the C / numpy cross-check sharper."""
    k = defs.get_kernel(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    args0 = defs.make_args(k, "MINI")
    for spec in k.args:
        if spec.kind != "array":
            continue
        a = args0[spec.name]
        if name == "nussinov":
            if spec.name == "seq":
                a[...] = rng.integers(0, 4, a.shape)
        elif name == "floyd-warshall":
            a[...] = rng.integers(1, 30, a.shape)
        else:
            a[...] = rng.uniform(0.5, 1.5, a.shape)
    c_args = defs.copy_args(args0)
    peers.load_c_kernel(k, "gcc", out_dir=so_dir)(c_args)
    np_args = defs.copy_args(args0)
    k.numpy_impl(np_args)
    changed = [s.name for s in k.out_args
               if not np.array_equal(c_args[s.name], args0[s.name])]
    assert changed
    msg = compare.compare_outputs(defs.outputs(k, c_args), defs.outputs(k, np_args),
                                  k.rtol, k.atol)
    assert msg is None, msg


# How the outputs of the TC versions relate to the C kernel's arrays:
# tc output index -> (C array, lower-triangle only)
_TC_MAP = {
    "gemm": [("C", False)],
    "2mm": [("tmp", False), ("D", False)],
    "3mm": [("E", False), ("F", False), ("G", False)],
    "mvt": [("x1", False), ("x2", False)],
    "atax": [("tmp", False), ("y", False)],
    "bicg": [("s", False), ("q", False)],
    "doitgen": [("A", False)],
    "covariance": [("mean", False), ("data", False), ("cov", False)],
    "syrk": [("C", True)],
}


@requires_gcc
@pytest.mark.parametrize("name", sorted(_TC_MAP))
def test_tc_reference_matches_c(name, so_dir):
    k = defs.get_kernel(name)
    assert k.tc_source is not None
    head = re.match(r"def\s+(\w+)\s*\((.*?)\)\s*->\s*\(([^)]*)\)", k.tc_source, flags=re.S)
    assert head, k.tc_source
    outs = [o.strip() for o in head.group(3).split(",")]
    assert len(outs) == len(_TC_MAP[name])
    args0 = defs.make_args(k, "MINI")
    got = k.tc_reference(defs.copy_args(args0))
    assert len(got) == len(outs)
    c_args = defs.copy_args(args0)
    peers.load_c_kernel(k, "gcc", out_dir=so_dir)(c_args)
    for arr, (c_name, lower) in zip(got, _TC_MAP[name]):
        ref = c_args[c_name]
        if lower:
            arr, ref = np.tril(arr), np.tril(ref)
        assert compare.compare_array(arr, ref) is None, c_name


@requires_gcc
@pytest.mark.parametrize("name", ["heat-3d", "seidel-2d"])
def test_check_inputs_are_not_a_fixed_point(name, so_dir):
    """PolyBench's inputs for these are a fixed point; the runner's extra
    check inputs must not be, and C and numpy must agree on them."""
    k = defs.get_kernel(name)
    assert defs.make_check_args(defs.get_kernel("gemm"), "MINI") is None
    args0 = defs.make_check_args(k, "MINI")
    pb = defs.make_args(k, "MINI")
    assert not np.array_equal(args0["A"], pb["A"])
    c_args = defs.copy_args(args0)
    peers.load_c_kernel(k, "gcc", out_dir=so_dir)(c_args)
    rel = np.max(np.abs(c_args["A"] - args0["A"])) / np.max(np.abs(args0["A"]))
    assert rel > 1e-3
    np_args = defs.copy_args(args0)
    k.numpy_impl(np_args)
    assert compare.compare_outputs(defs.outputs(k, c_args), defs.outputs(k, np_args)) is None


def test_set_of_reference_only_numpy_versions():
    loops = {k.name for k in defs.KERNELS.values() if not k.numpy_vectorized}
    assert loops == {"nussinov", "adi", "seidel-2d"}
    assert all(k.numpy_impl is not None for k in defs.KERNELS.values())


# ------------------------------------------------------------- tolerance


def test_compare_tolerance():
    ref = np.linspace(1.0, 2.0, 50)
    assert compare.compare_array(ref * (1 + 1e-9), ref) is None
    assert compare.compare_array(ref * (1 + 1e-4), ref) is not None
    off = ref.copy()
    off[7] += 1e-3
    assert "1/50" in compare.compare_array(off, ref)
    assert compare.compare_array(ref[:-1], ref) is not None
    nan = ref.copy()
    nan[3] = np.nan
    assert compare.compare_array(nan, ref) is not None
    assert compare.compare_array(nan, nan.copy()) is None
    ints = np.arange(10, dtype=np.int32)
    assert compare.compare_array(ints, ints.copy()) is None
    assert compare.compare_array(ints + (ints == 3), ints) is not None
    # values near zero are judged against the array's scale
    small = np.array([1.0, 1e-20])
    assert compare.compare_array(np.array([1.0, 1e-12]), small) is None


# --------------------------------------------- runner, table and geomeans


def _fake_results() -> list[Result]:
    return [
        Result("k1", "gcc", OK, 1.0),
        Result("k1", "fast", OK, 0.5),  # 2x
        Result("k1", "broken", ERROR, message="boom"),
        Result("k2", "gcc", OK, 0.01),
        Result("k2", "fast", OK, 0.02),  # 0.5x
        Result("k2", "broken", OK, 0.001),  # 10x
        Result("k3", "gcc", OK, 0.1),
        Result("k3", "fast", WRONG, None, message="C: 3/9 elements off"),
        Result("k3", "broken", SKIPPED),
    ]


def test_geomean():
    assert report.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert report.geomean([3.0]) == pytest.approx(3.0)
    assert report.geomean([]) is None
    with pytest.raises(ValueError):
        report.geomean([1.0, 0.0])


def test_geomeans_skip_wrong_and_small():
    res = _fake_results()
    gm = report.geomeans(res, "gcc")
    assert gm["gcc"] == (pytest.approx(1.0), 3)
    assert gm["fast"][0] == pytest.approx(1.0) and gm["fast"][1] == 2  # WRONG k3 left out
    assert gm["broken"][0] == pytest.approx(10.0) and gm["broken"][1] == 1
    gm_big = report.geomeans(res, "gcc", min_base_s=0.05)  # k2 (0.01 s) left out
    assert gm_big["fast"][0] == pytest.approx(2.0) and gm_big["fast"][1] == 1
    assert gm_big["broken"] == (None, 0)
    assert report.speedup(res[0], res[1]) == pytest.approx(2.0)
    assert report.speedup(res[6], res[7]) is None


def test_markdown_table():
    text = report.markdown_table(_fake_results(), "gcc", min_base_s=0.05)
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("| kernel"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["kernel", "gcc", "fast", "broken"]
    row = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")[1:]]
           for ln in lines if ln.startswith("| k")}
    assert row["k1"] == ["1.00 s (1.00x)", "0.5 s (2.00x)", "ERROR: boom"]
    assert row["k2"][2] == "0.001 s (10.00x)"
    assert row["k3"][1] == "WRONG"  # never shown as a time
    assert row["k3"][2] == "skipped"
    gm_all = next(ln for ln in lines if "geomean (all)" in ln)
    assert "1.00x (n=2)" in gm_all and "10.00x (n=1)" in gm_all
    gm_big = next(ln for ln in lines if "geomean (base >= 0.05 s)" in ln)
    assert "2.00x (n=1)" in gm_big
    assert "C: 3/9 elements off" in text


def test_csv_and_png(tmp_path):
    res = _fake_results()
    report.write_csv(res, tmp_path / "r.csv", "gcc")
    with open(tmp_path / "r.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(res)
    fast_k1 = next(r for r in rows if r["kernel"] == "k1" and r["variant"] == "fast")
    assert float(fast_k1["speedup"]) == pytest.approx(2.0)
    wrong = next(r for r in rows if r["kernel"] == "k3" and r["variant"] == "fast")
    assert wrong["status"] == WRONG and wrong["seconds"] == "" and wrong["speedup"] == ""
    assert report.plot_speedups(res, tmp_path / "r.png", "gcc"), "matplotlib is missing"
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_plan_variants():
    names = [v.name for v in runner.plan_variants([1, 4], ["none", "isl"])]
    assert names == ["gcc", "polly", "polly-par/1t", "polly-par/4t",
                     "polycomp-none/1t", "polycomp-none/4t", "polycomp-isl/1t",
                     "polycomp-isl/4t", "numpy"]
    names = [v.name for v in runner.plan_variants([2], [], polly=False, polycomp=False)]
    assert names == ["gcc", "numpy"]


def test_measure_reports_wrong_results():
    k = defs.get_kernel("gemm")
    args0 = defs.make_args(k, "MINI")
    good = defs.copy_args(args0)
    k.numpy_impl(good)
    ref = defs.outputs(k, good)

    def broken(a):
        k.numpy_impl(a)
        a["C"][1, 2] += 0.01

    with peers.BigStackWorker(stack_mib=64) as w:
        status, times, msg, _ = runner.measure(k.numpy_impl, k, args0, ref, 3, 10.0, w)
        assert status == OK and len(times) == 3
        status, times, msg, _ = runner.measure(broken, k, args0, ref, 3, 10.0, w)
        assert status == WRONG and len(times) == 1 and "(1, 2)" in msg
    # the inputs given to measure are never modified
    assert np.array_equal(args0["C"], defs.make_args(k, "MINI")["C"])


@requires_gcc
def test_run_kernel_gcc_and_numpy(so_dir, monkeypatch):
    monkeypatch.setenv("POLYBENCH_CACHE", str(so_dir))
    k = defs.get_kernel("atax")
    variants = runner.plan_variants([1], [], polly=False, polycomp=False)
    res = runner.run_kernel(k, "MINI", variants, repeat=2, budget=5.0)
    assert [(r.variant, r.status) for r in res] == [("gcc", OK), ("numpy", OK)]
    assert all(r.seconds and r.seconds > 0 and len(r.times) == 2 for r in res)


@requires_gcc
def test_run_kernel_catches_fixed_point_cheat(so_dir, monkeypatch):
    """Doing nothing is 'right' on heat-3d's PolyBench inputs; the runner's
    perturbed-input check must still call it WRONG."""
    import dataclasses

    monkeypatch.setenv("POLYBENCH_CACHE", str(so_dir))
    k = defs.get_kernel("heat-3d")
    variants = runner.plan_variants([1], [], polly=False, polycomp=False)
    lazy = dataclasses.replace(k, numpy_impl=lambda a: None)
    res = runner.run_kernel(lazy, "MINI", variants, repeat=1, budget=5.0)
    assert [(r.variant, r.status) for r in res] == [("gcc", OK), ("numpy", WRONG)]
    assert "perturbed" in res[1].message
    res = runner.run_kernel(k, "MINI", variants, repeat=1, budget=5.0)
    assert [(r.variant, r.status) for r in res] == [("gcc", OK), ("numpy", OK)]


def test_polycomp_variant_is_built_before_it_is_timed(monkeypatch):
    """The build belongs to build_s, not to the first (possibly budget-ending) run."""
    import polycomp.runtime as rt

    builds = []
    real = rt.compile_program
    monkeypatch.setattr(rt, "compile_program",
                        lambda *a, **kw: builds.append(1) or real(*a, **kw))
    k = defs.get_kernel("atax")
    variant = next(v for v in runner.plan_variants([1], ["none"], polly=False)
                   if v.kind == "polycomp")
    fn = runner._Prepared(k, dict(k.sizes["MINI"])).get(variant)
    assert len(builds) == 1
    args = defs.make_args(k, "MINI")
    fn(args)
    assert len(builds) == 1
    ref = defs.make_args(k, "MINI")
    k.numpy_impl(ref)
    np.testing.assert_allclose(args["y"], ref["y"], rtol=1e-12)
