import subprocess
import sys

import pytest

from polycomp.cli import main

MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n"
BROKEN = "def f(float(N) A) -> (B) {\n  B(i) = A(i) +* 2\n}\n"


@pytest.fixture
def tc_file(tmp_path):
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    return path


@pytest.mark.needs_cc
def test_compile_emits_each_stage(tc_file, capsys):
    # 64**3 instances are worth a parallel region; 8**3 are not (the kernel runs serially)
    assert main(["compile", str(tc_file), "--sizes", "M=64,N=64,K=64"]) == 0
    c_text = capsys.readouterr().out
    assert "int polycomp_matmul(" in c_text and "#pragma omp parallel for" in c_text
    assert main(["compile", str(tc_file), "--sizes", "M=8,N=8,K=8"]) == 0
    assert "#pragma omp parallel" not in capsys.readouterr().out
    assert main(["compile", str(tc_file), "--emit", "deps"]) == 0
    assert "flow" in capsys.readouterr().out
    assert main(["compile", str(tc_file), "--emit", "schedule", "--scheduler", "none"]) == 0
    assert "domain:" in capsys.readouterr().out
    # what Pluto found: a hyperplane per statement and band member, what each carries
    assert main(["compile", str(tc_file), "--emit", "schedule", "--scheduler", "pluto",
                 "--sizes", "M=64,N=64,K=64"]) == 0
    schedule_text = capsys.readouterr().out
    assert "S1: (" in schedule_text and "permutable" in schedule_text
    assert "carries:" in schedule_text and "domain:" in schedule_text
    # and that whole printout reads back as a custom schedule
    import numpy as np

    import polycomp
    again = polycomp.compile(MATMUL, scheduler="custom", schedule=schedule_text,
                             sizes={"M": 64, "N": 64, "K": 64})
    a, b = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    assert np.array_equal(again(a, b), a @ b)
    # (sized: the parametric program's code is not what this asks about, and checking
    # its isl AST takes seconds)
    assert main(["compile", str(tc_file), "--emit", "ir", "--sizes", "M=8,N=8,K=8"]) == 0
    assert "S1: C(m, n) += A(m, k) * B(k, n)" in capsys.readouterr().out
    assert main(["compile", str(tc_file), "--emit", "ranges"]) == 0
    assert "k in 0:K" in capsys.readouterr().out


def test_compile_writes_output_file(tc_file, tmp_path):
    out = tmp_path / "mm.c"
    assert main(["compile", str(tc_file), "-o", str(out)]) == 0
    assert "long M" in out.read_text()  # no sizes: parametric


def test_user_error_prints_location_and_exits_1(tmp_path, capsys):
    bad = tmp_path / "bad.tc"
    bad.write_text(BROKEN)
    assert main(["compile", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.tc:2:" in err and "^" in err and "Traceback" not in err


def test_bad_sizes_and_missing_file(tc_file, capsys):
    assert main(["compile", str(tc_file), "--sizes", "M=eight"]) == 1
    assert "M=512" in capsys.readouterr().err
    assert main(["compile", "/no/such/file.tc"]) == 1
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.needs_cc
def test_run_checks_against_original_order(tc_file, capsys):
    assert main(["run", str(tc_file), "--sizes", "M=16,N=12,K=8", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "matches scheduler=none" in out and "ms" in out


@pytest.mark.needs_cc
def test_a_schedule_file_is_checked_compiled_and_run(tc_file, tmp_path, capsys):
    tree = tmp_path / "mm.schedule"
    sizes = ["--sizes", "M=9,N=7,K=5"]
    assert main(["compile", str(tc_file), "--emit", "schedule", "--scheduler", "pluto",
                 "-o", str(tree), *sizes]) == 0
    assert main(["compile", str(tc_file), "--schedule", str(tree), *sizes]) == 0
    assert "scheduler=custom" in capsys.readouterr().out
    # a tree for other sizes does not fit, and says so
    assert main(["compile", str(tc_file), "--schedule", str(tree), "--sizes", "M=8,N=8,K=8"]) == 1
    assert "same sizes" in capsys.readouterr().err
    assert main(["run", str(tc_file), "--schedule", str(tree), *sizes, "--repeat", "1"]) == 0
    assert "matches scheduler=none" in capsys.readouterr().out
    # k running backwards reorders the reduction: refused, naming the dependence
    backwards = tmp_path / "backwards.map"
    backwards.write_text("{ S0[m, n] -> [m, n, 0]; S1[m, n, k] -> [m, n, 1 - k] }")
    assert main(["compile", str(tc_file), "--schedule", str(backwards)]) == 1
    err = capsys.readouterr().err
    assert "S1" in err and "Traceback" not in err
    assert main(["compile", str(tc_file), "--scheduler", "custom"]) == 1
    assert "--schedule" in capsys.readouterr().err
    assert main(["compile", str(tc_file), "--scheduler", "isl", "--schedule", str(tree)]) == 1
    assert "custom" in capsys.readouterr().err


def test_console_script_has_help_everywhere_and_no_traceback(tmp_path):
    for args in ([], ["compile"], ["run"], ["demo"]):
        done = subprocess.run([sys.executable, "-m", "polycomp.cli", *args, "--help"],
                              capture_output=True, text=True)
        assert done.returncode == 0 and "usage:" in done.stdout
    bad = tmp_path / "bad.tc"
    bad.write_text(BROKEN)
    done = subprocess.run([sys.executable, "-m", "polycomp.cli", "compile", str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "error:" in done.stderr
    done = subprocess.run([sys.executable, "-m", "polycomp.cli", "--debug", "compile", str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" in done.stderr
