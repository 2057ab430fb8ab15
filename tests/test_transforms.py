import islpy as isl
import numpy as np
import pytest

import polycomp
from polycomp.errors import IllegalScheduleError, OptionError
from polycomp.options import Options
from polycomp.scheduler import compute_dependences, get_scheduler
from polycomp.scheduler.transforms import ScheduleEditor

from programs import matmul, seidel1d


@pytest.fixture
def mm_editor():
    program = matmul()
    deps = compute_dependences(program)
    return ScheduleEditor(get_scheduler("isl")(program, deps, Options()), deps)


def test_interchange_and_skew_implement_their_relations(mm_editor):
    domain = mm_editor.schedule.get_domain()

    def relation(editor):
        return editor.schedule.get_map().intersect_domain(domain)

    assert relation(mm_editor.interchange(0, 0, 1)).is_equal(isl.UnionMap(
        "[M, N, K] -> { S1[i, j, k] -> [j, i, k, 1]; S0[i, j] -> [j, i, 0, 0] }"
    ).intersect_domain(domain))
    assert relation(mm_editor.skew(0, 1, 0, 2)).is_equal(isl.UnionMap(
        "[M, N, K] -> { S1[i, j, k] -> [i, 2i + j, k, 1]; S0[i, j] -> [i, 2i + j, 0, 0] }"
    ).intersect_domain(domain))


def test_illegal_transforms_are_refused_at_once(mm_editor):
    with pytest.raises(IllegalScheduleError, match="carries the dependence"):
        mm_editor.parallelize(0, 2)  # k carries the reduction
    with pytest.raises(IllegalScheduleError, match="dependence"):
        mm_editor.shift(0, 2, "S0", 5)  # the init would run after the first update
    with pytest.raises(OptionError):
        mm_editor.tile(0, [8, 8, 8, 8])
    with pytest.raises(OptionError, match="no band"):
        mm_editor.band("S9")


def test_distribute_then_fuse_round_trips(mm_editor):
    split = mm_editor.distribute(0)
    assert len(split.bands()) == 2
    fused = split.fuse(0)
    assert len(fused.bands()) == 1
    domain = mm_editor.schedule.get_domain()
    assert fused.schedule.get_map().intersect_domain(domain).is_equal(
        mm_editor.schedule.get_map().intersect_domain(domain))


@pytest.mark.needs_cc
def test_kernel_transform_runs_the_edited_schedule():
    # the tiles of tiles: the outer loop, the one parallelized, must have several
    # iterations (isl writes no loop for a member that takes one value, and no pragma)
    kernel = polycomp.compile_program(matmul(), sizes={"M": 400, "N": 24, "K": 16})
    tiled = kernel.transform(lambda s: s.tile("S1", [2, 2, 2]).parallelize("S1"))
    assert "#pragma omp parallel for" in tiled.c_source
    rng = np.random.default_rng(0)
    a, b = rng.random((400, 16), np.float32), rng.random((16, 24), np.float32)
    c = np.zeros((400, 24), np.float32)
    tiled(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


@pytest.mark.needs_cc
def test_kernel_transform_refuses_an_illegal_edit():
    kernel = polycomp.compile_program(seidel1d(), sizes={"T": 3, "N": 20}, scheduler="none")
    with pytest.raises(IllegalScheduleError):
        kernel.transform(lambda s: s.parallelize(0))
