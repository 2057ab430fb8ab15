"""The target seam (polycomp/targets/): the registry, Options.target, the neutral mark
names and their old aliases, what a target owns (passes, marks, code, build, cache keys),
and the OpenMP target's C."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polycomp
from polycomp.codegen import vector_tile as VT
from polycomp import build, compile_cache
from polycomp.cli import main
from polycomp.codegen.openmp import generate_openmp
from polycomp.errors import IllegalScheduleError, OptionError, PolycompError, UnknownTargetError
from polycomp.options import Options
from polycomp.scheduler import tree as T
from polycomp.targets import Target, get_target, register_target, target_names, unregister_target
from polycomp.targets.native import NativeTarget
from polycomp.targets.openmp import OpenMPTarget

MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n"
SIZES = {"M": 64, "N": 64, "K": 64}


def matmul_tree(parallel: str, vector: str) -> str:
    """A hand-written tree for MATMUL at SIZES: the init S0 and the update S1 each in
    their own nest, ``parallel`` on m, ``vector`` on n (innermost; k between for S1)."""
    domain = ("{ S0[m, n] : 0 <= m < 64 and 0 <= n < 64; "
              "S1[m, n, k] : 0 <= m < 64 and 0 <= n < 64 and 0 <= k < 64 }")
    return f"""domain: "{domain}"
child:
  sequence:
  - filter: "{{ S0[m, n] }}"
    child:
      mark: "{parallel}"
      child:
        schedule: "[{{ S0[m, n] -> [(m)] }}]"
        child:
          mark: "{vector}"
          child:
            schedule: "[{{ S0[m, n] -> [(n)] }}]"
  - filter: "{{ S1[m, n, k] }}"
    child:
      mark: "{parallel}"
      child:
        schedule: "[{{ S1[m, n, k] -> [(m)] }}]"
        child:
          schedule: "[{{ S1[m, n, k] -> [(k)] }}]"
          child:
            mark: "{vector}"
            child:
              schedule: "[{{ S1[m, n, k] -> [(n)] }}]"
"""


def marks(schedule) -> list[str]:
    return [n.mark_get_id().get_name() for n in T.nodes(schedule) if T.is_mark(n)]


class FakeTarget(OpenMPTarget):
    """A second native target: OpenMP's code with a line of its own, no passes of its
    own (so no parallel or vector marks), and a define its build adds."""

    name = "fake"
    passes = ()

    def generate(self, program, schedule, options, ordered):
        source = super().generate(program, schedule, options, ordered)
        text = "#ifndef POLYCOMP_FAKE\n#error built without the fake target's flags\n#endif\n"
        return type(source)(text + source.text, source.language, source.entry, source.arguments)

    def build_flags(self, step, texts):
        before, after = super().build_flags(step, texts)
        return [*before, "-DPOLYCOMP_FAKE=1"], after


@pytest.fixture
def fake_target():
    register_target("fake", FakeTarget)
    yield get_target("fake")
    unregister_target("fake")


# ---------------------------------------------------------------- the registry
def test_the_registry_knows_openmp_and_builds_its_target_once():
    assert "openmp" in target_names()
    target = get_target("openmp")
    assert isinstance(target, OpenMPTarget) and isinstance(target, NativeTarget)
    assert isinstance(target, Target) and target.name == "openmp"
    assert get_target("openmp") is target
    assert target.marks == {T.MARK_PARALLEL, T.MARK_VECTOR}
    assert [name for name, _ in target.passes] == ["parallel", "tile_fusion", "intratile"]
    assert Options().target == "openmp"


def test_a_registered_target_is_known_until_it_is_unregistered(fake_target):
    assert "fake" in target_names() and fake_target.name == "fake"
    assert Options(target="fake").target == "fake"
    unregister_target("fake")
    assert "fake" not in target_names()
    with pytest.raises(UnknownTargetError):
        Options(target="fake")


def test_an_unknown_target_is_a_polycomp_error_listing_the_known_ones():
    with pytest.raises(UnknownTargetError) as caught:
        Options(target="vulkan")
    error = caught.value
    assert isinstance(error, OptionError) and isinstance(error, PolycompError)
    assert "vulkan" in error.message
    assert "known targets: openmp, cuda, cuda-emulated" in error.hint
    with pytest.raises(UnknownTargetError, match="opnemp") as caught:
        polycomp.compile(MATMUL, target="opnemp")
    assert "did you mean 'openmp'" in caught.value.hint
    with pytest.raises(UnknownTargetError):
        get_target("no-such-target")


# ---------------------------------------------------------------- mark names
@pytest.mark.needs_cc
def test_emit_schedule_shows_the_neutral_mark_names(tmp_path, capsys):
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    assert main(["compile", str(path), "--emit", "schedule", "--sizes", "M=64,N=64,K=64"]) == 0
    text = capsys.readouterr().out
    assert 'mark: "parallel"' in text and 'mark: "vector"' in text
    assert "mark 'parallel' over" in text and "mark 'vector' over" in text
    assert "omp_" not in text


@pytest.mark.needs_cc
def test_a_custom_schedule_with_the_old_mark_names_compiles_as_with_the_new():
    # exactly the tree (no tiling, vector marks or unrolling added by the passes)
    fixed = {"sizes": SIZES, "scheduler": "custom", "tile": False, "vectorize": False,
             "unroll": 0}
    old = polycomp.compile(MATMUL, schedule=matmul_tree("omp_parallel", "omp_simd"), **fixed)
    new = polycomp.compile(MATMUL, schedule=matmul_tree("parallel", "vector"), **fixed)
    assert sorted(marks(old.schedule)) == sorted(marks(new.schedule)) == [
        "parallel", "parallel", "vector", "vector"]
    assert old.source == new.source
    assert old.source.count("#pragma omp parallel for") == 2
    # each vector mark: an omp simd loop, or a register tile where the nest above it keeps
    # C's row in registers (codegen/vector_tile.py)
    assert old.source.count("#pragma omp simd") + old.source.count(VT.MARKER) == 2
    rng = np.random.default_rng(0)
    a, b = rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)
    np.testing.assert_allclose(old(a, b), a @ b, rtol=1e-4)


def test_the_old_names_are_aliases_of_the_new():
    assert T.MARK_ALIASES == {"omp_parallel": T.MARK_PARALLEL, "omp_simd": T.MARK_VECTOR}
    assert (T.MARK_PARALLEL, T.MARK_VECTOR) == ("parallel", "vector")
    assert {T.MARK_KERNEL, T.MARK_BLOCK, T.MARK_THREAD} == {"kernel", "block", "thread"}
    assert set(T.LOOP_MARKS) <= set(T.DECISION_MARKS)


@pytest.mark.needs_cc
def test_a_mark_the_target_does_not_print_is_refused():
    tree = matmul_tree("block", "vector")
    with pytest.raises(IllegalScheduleError, match="'block' mark.*target 'openmp'") as caught:
        polycomp.compile(MATMUL, sizes=SIZES, scheduler="custom", schedule=tree, tile=False)
    assert "parallel, vector" in caught.value.hint


# ---------------------------------------------------------------- what a target owns
@pytest.mark.needs_cc
def test_a_target_owns_its_passes_code_and_build(fake_target):
    kernel = polycomp.compile(MATMUL, sizes=SIZES, target="fake")
    assert not set(marks(kernel.schedule)) & set(T.DECISION_MARKS)  # no passes of its own
    assert kernel.source.startswith("#ifndef POLYCOMP_FAKE")  # its code generator
    assert "#pragma omp" not in kernel.source
    rng = np.random.default_rng(1)
    a, b = rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)
    # built with its flags (the #error would stop the build), loaded, called
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4)
    openmp = polycomp.compile(MATMUL, sizes=SIZES)
    assert "#pragma omp parallel for" in openmp.source and T.MARK_PARALLEL in marks(openmp.schedule)


@pytest.mark.needs_cc
def test_cache_keys_differ_between_targets(fake_target, tmp_path, monkeypatch):
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path))
    text = ("#ifdef POLYCOMP_FAKE\nint f(void) { return 1; }\n"
            "#else\nint f(void) { return 0; }\n#endif\n")
    as_openmp = build.build_library(text, "polycomp_f", Options())
    as_fake = build.build_library(text, "polycomp_f", Options(target="fake"))
    assert as_openmp != as_fake and as_openmp.exists() and as_fake.exists()
    # with the same flags too: the target's name alone keeps the keys apart
    plain = type("Plain", (OpenMPTarget,), {"name": "plain"})()
    same_flags = build.build_library(text, "polycomp_f", Options(), plain)
    assert same_flags not in (as_openmp, as_fake)
    assert build.build_library(text, "polycomp_f", Options()) == as_openmp  # a hit
    # the compiled records of the pipeline (compile_cache) are keyed by target as well
    program = polycomp.compile(MATMUL, sizes=SIZES).program
    assert (compile_cache.cache_key(program, Options())
            != compile_cache.cache_key(program, Options(target="fake")))
    assert get_target("openmp").key_fields(Options()) == (
        build.compiler_identity(tuple(build.compiler_command(Options())[0])), build.cpu_identity())


# ---------------------------------------------------------------- the OpenMP target's C
@pytest.mark.needs_cc
def test_openmp_source_has_the_hand_checked_shape_of_a_tiled_parallel_matmul():
    kernel = polycomp.compile(MATMUL, sizes=SIZES, parallel_min_work=0)
    text = kernel.source
    assert text == kernel.c_source
    assert text.startswith("/* matmul: generated by polycomp (scheduler=pluto) */\n")
    assert "#include <stdbool.h>\n#include <stdint.h>\n#include <math.h>" in text
    # the entry: inputs const, the output written, the status returned
    assert re.search(r"^int polycomp_matmul\(const float \*restrict A, const float \*restrict B, "
                     r"float \*restrict C\)$", text, re.MULTILINE)
    assert text.rstrip().endswith("return polycomp_status;\n}")
    # the parallel tile loops' bodies are outlined noipa functions with restrict arrays
    outlined = re.findall(r"^static int POLYCOMP_OUTLINED (polycomp_matmul_par\d+)\(long c0, "
                          r"const float \*restrict A, const float \*restrict B, "
                          r"float \*restrict C\)$", text, re.MULTILINE)
    assert outlined and outlined == [f"polycomp_matmul_par{k}" for k in range(len(outlined))]
    assert text.count("#pragma omp parallel for") == len(outlined)
    for name in outlined:
        assert f"{name}(c0, A, B, C);" in text
    # vector loops with the lane count, C's register tile as vector variables
    assert re.search(r"#pragma omp simd simdlen\(\d+\)", text)
    assert VT.MARKER in text and "polycomp_reg0_0 += " in text
    # the target's generate is the OpenMP dialect's
    compiled = kernel.specialize(SIZES).compiled
    again = get_target("openmp").generate(compiled.program, compiled.schedule, kernel.options,
                                          compiled.dependences.all())
    assert again.text == text == generate_openmp(compiled.program, compiled.schedule,
                                                 kernel.options, compiled.dependences.all()).text
    rng = np.random.default_rng(2)
    a, b = rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4)
