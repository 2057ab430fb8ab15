"""A schedule tree through text and back (scheduler/tree.to_portable / from_portable), as
the compile cache stores it: the same tree, and the same Python values on its marks' ids,
which isl text alone loses (a vector mark's lanes, a tiled band's settings) or cannot
read back at all (a mark above a leaf, as the GPU trees have)."""

from __future__ import annotations

import islpy as isl
import pytest

import polycomp
from polycomp import compile_cache, driver
from polycomp.compile_cache import CachedKernel
from polycomp.scheduler.tree import from_portable, is_mark, mark_user, nodes, to_portable

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
CENTER = """def center(float(M, N) A) -> (O) {
    mx() max=! A(i, j)
    O(i, j) = A(i, j) - mx()
}"""
CONV = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {
    O(n,f,h,w) +=! I(n,c,h+kh,w+kw) * Wt(f,c,kh,kw)
}"""


def _marks(schedule: isl.Schedule) -> list[tuple[str, object]]:
    return [(n.mark_get_id().get_name(), mark_user(n.mark_get_id()))
            for n in nodes(schedule) if is_mark(n)]


def _same_tree(a: isl.Schedule, b: isl.Schedule) -> bool:
    """The same nodes in the same order, each band with the same partial schedule and
    each filter with the same instances (isl may print a union's pieces in another
    order, so the texts can differ)."""
    left, right = list(nodes(a)), list(nodes(b))
    if [n.get_type() for n in left] != [n.get_type() for n in right]:
        return False
    for x, y in zip(left, right):
        kind = x.get_type()
        if kind == isl.schedule_node_type.band and not \
                x.band_get_partial_schedule_union_map().is_equal(
                    y.band_get_partial_schedule_union_map()):
            return False
        if kind == isl.schedule_node_type.filter and \
                not x.filter_get_filter().is_equal(y.filter_get_filter()):
            return False
    return a.get_map().is_equal(b.get_map())


def _compiled(source: str, sizes: dict[str, int], **options) -> driver.Compiled:
    kernel = polycomp.compile(source, **options)
    kernel.specialize(sizes, build=False)
    return kernel._last


CASES = {
    "vector matmul": (MATMUL, {"M": 64, "K": 48, "N": 64}, {}),
    "blocked conv": (CONV, {"N": 1, "C": 16, "H": 10, "W": 10, "F": 16, "KH": 3, "KW": 3}, {}),
    "gpu kernel above a leaf": (CENTER, {"M": 7, "N": 9},
                                {"target": "cuda-emulated", "gpu_block": (8, 4)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_compiled_tree_comes_back_with_its_marks_values(name):
    source, sizes, options = CASES[name]
    schedule = _compiled(source, sizes, **options).schedule
    marks = _marks(schedule)
    assert marks, "the case must have marks to carry"
    text, portable = to_portable(schedule)
    back = from_portable(text, portable)
    assert _same_tree(back, schedule)
    assert _marks(back) == marks
    if name == "gpu kernel above a leaf":
        with pytest.raises(isl.Error):  # why the text alone would not do
            isl.Schedule(schedule.to_str())
    else:
        assert any(value is not None for _, value in marks)
        assert all(value is None for _, value in _marks(isl.Schedule(schedule.to_str())))


def test_marks_above_marks_above_a_leaf_come_back():
    tree = isl.Schedule('{ domain: "{ S[i] : 0 <= i < 4; T[] }", child: { sequence: [ '
                        '{ filter: "{ T[] }" }, { filter: "{ S[i] }", child: '
                        '{ schedule: "[{ S[i] -> [(i)] }]" } } ] } }')
    leaf = tree.get_root().child(0).child(0).child(0)
    tree = leaf.insert_mark(isl.Id("inner", user=(3, "x"))).insert_mark(
        isl.Id("outer")).get_schedule()
    text, marks = to_portable(tree)
    assert [(path, name) for path, name, _ in marks] == [((0, 0, 0), "outer"),
                                                         ((0, 0, 0, 0), "inner")]
    back = from_portable(text, marks)
    assert _same_tree(back, tree)
    assert _marks(back) == [("outer", None), ("inner", (3, "x"))]


def test_text_whose_marks_do_not_match_is_refused():
    schedule = _compiled(MATMUL, {"M": 64, "K": 48, "N": 64}).schedule
    text, marks = to_portable(schedule)
    path, name, value = marks[0]
    with pytest.raises(ValueError, match="mark"):
        from_portable(text, ((path, name + "x", value), *marks[1:]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cache_hit_gives_the_tree_codegen_saw(name, monkeypatch):
    source, sizes, options = CASES[name]
    options = polycomp.Options.create(**options)
    definition = polycomp.compile(source).definition
    first = CachedKernel(definition, options)
    first.specialize(sizes, build=False)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again instead of reading the cache")
    monkeypatch.setattr(compile_cache, "compile_program", no_compile)
    second = CachedKernel(definition, options)
    second.specialize(sizes, build=False)
    assert second.source == first.source
    assert _same_tree(second.schedule, first.schedule)
    assert _marks(second.schedule) == _marks(first.schedule)
    # the AST printed from the cached tree is the one the code came from
    assert driver.emit(second._last, "ast") == driver.emit(first._last, "ast")
