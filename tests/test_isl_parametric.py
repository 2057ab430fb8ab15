"""The isl scheduler schedules the parametric program and specialises the tree.

Regression: on specialised programs isl's scheduler chose hyperplanes whose coefficients grow
with the sizes (ludcmp at SMALL: 14042i + 117j), which serialised the nest.
"""

import islpy as isl
import pytest

from benchmarks.polybench import defs
from polycomp import islutil as U
from polycomp.frontend.loops import parse_c
from polycomp.options import Options
from polycomp.scheduler import compute_dependences
from polycomp.scheduler import tree as T
from polycomp.scheduler.isl_sched import schedule_isl
from polycomp.scheduler.legality import check_schedule
from polycomp.scheduler.specialize import specialize_schedule


def lowered(name: str, size: str | None):
    kdef = defs.get_kernel(name)
    definition = parse_c(kdef.c_source(), file=str(kdef.c_path)).get(kdef.function)
    return kdef, definition.lower(None if size is None else kdef.sizes[size])


def largest_coefficient(schedule_map: isl.UnionMap) -> int:
    """The largest |coefficient| of a loop variable in any schedule dimension."""
    largest = 0

    def piece(_: isl.Set, maff: isl.MultiAff) -> None:
        nonlocal largest
        for k in range(maff.dim(isl.dim_type.out)):
            aff = maff.get_at(k)
            for j in range(aff.dim(isl.dim_type.in_)):
                value = aff.get_coefficient_val(isl.dim_type.in_, j).to_python()
                largest = max(largest, abs(int(value)))

    schedule_map.foreach_map(lambda m: isl.PwMultiAff.from_map(m).foreach_piece(piece))
    return largest


@pytest.mark.parametrize("name", ["ludcmp", "symm", "nussinov", "floyd-warshall"])
def test_isl_coefficients_do_not_grow_with_the_sizes(name):
    for size in ("SMALL", "MEDIUM"):
        _, program = lowered(name, size)
        deps = compute_dependences(program)
        schedule = schedule_isl(program, deps, Options.create(scheduler="isl"))
        check_schedule(schedule, deps)
        assert largest_coefficient(schedule.get_map()) <= 2, (name, size, schedule.get_map())


def test_program_remembers_its_parametric_form():
    kdef, generic = lowered("gemm", None)
    program = generic.specialize(kdef.sizes["MINI"])
    assert program.generic is generic and program.params == () and generic.params
    assert program.specialize({}).generic is generic


def flags(node: isl.ScheduleNode, out: list) -> list:
    kind = node.get_type()
    entry: tuple = (str(kind),)
    if T.is_band(node):
        entry += (node.band_get_permutable(),
                  tuple(node.band_member_get_coincident(k) for k in range(node.band_n_member())))
    out.append(entry)
    for i in range(node.n_children()):
        flags(node.child(i), out)
    return out


def test_specialised_tree_keeps_structure_flags_and_instances():
    kdef, generic = lowered("adi", None)
    sizes = kdef.sizes["MINI"]
    parametric = schedule_isl(generic, compute_dependences(generic), Options.create())
    program = generic.specialize(sizes)
    special = specialize_schedule(parametric, sizes, program.domain())
    assert flags(special.get_root(), []) == flags(parametric.get_root(), [])
    # the maps of both trees are not restricted to their domains (the bands are not)
    expected = U.specialize(parametric.get_map(), sizes).intersect_domain(program.domain())
    assert special.get_map().intersect_domain(program.domain()).is_equal(expected)
    check_schedule(special, compute_dependences(program))
