"""The 30 PolyBench/C 4.2 kernels (benchmarks/polybench/kernels/*.c) through the loop
frontend: every file found parses and lowers, parametric and at its MINI sizes (from
benchmarks/polybench/defs.py); a handful are also compiled and compared with gcc.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from polycomp.frontend.loops import parse_c

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is not installed: import it from the checkout
    sys.path.insert(0, str(ROOT))

from benchmarks.polybench import defs  # noqa: E402

KERNEL_DIR = ROOT / "benchmarks" / "polybench" / "kernels"
FILES = sorted(KERNEL_DIR.glob("*.c"))
BY_FILE = {k.c_file: k for k in defs.KERNELS.values()}

# compared with gcc under both schedulers (isl's scheduler takes minutes on heat-3d)
COMPARED = ("gemm.c", "atax.c", "trisolv.c", "nussinov.c", "durbin.c", "correlation.c",
            "jacobi_2d.c", "seidel_2d.c", "fdtd_2d.c", "ludcmp.c")


def test_the_kernels_are_there():
    assert len(FILES) >= 30


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_kernel_lowers(path: Path):
    definition = parse_c(path.read_text(), file=str(path)).get()
    program = definition.lower()
    assert program.statements and program.params
    kdef = BY_FILE.get(path.name)
    if kdef is None:
        pytest.fail(f"benchmarks/polybench/defs.py has no entry for {path.name}")
    assert definition.name == kdef.function
    assert [spec.name for spec in definition.interface.inputs] == [a.name for a in kdef.args]
    mini = definition.lower(kdef.sizes["MINI"])
    assert mini.params == () and len(mini.statements) == len(program.statements)
    written = {spec.name for spec in definition.interface.inputs if getattr(spec, "updated", False)}
    assert written == {a.name for a in kdef.out_args}


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", COMPARED)
def test_kernel_matches_gcc_at_mini_size(name: str):
    from test_loops_frontend import check

    kdef = BY_FILE.get(name)
    if kdef is None:
        pytest.fail(f"benchmarks/polybench/defs.py has no entry for {name}")
    args = defs.call_args(kdef, defs.make_args(kdef, "MINI"))
    results = check(kdef.c_source(), args, kdef.function)
    assert any(isinstance(r, np.ndarray) and r.size for r in results)
