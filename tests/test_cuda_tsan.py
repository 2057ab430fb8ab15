"""Issue 14 item 7: the CUDA that polycomp generates for every program of the TC corpus
and every deep-learning operator (the list tests/test_cuda_nvcc_corpus.py sends through
nvcc, at the sizes its tests run them) runs under the ``cuda-emulated`` header with
ThreadSanitizer, TSan-clean, and matches the numpy reference of the program's own test.

Why: the emulated tests (test_cuda_codegen.py) run the generated kernels on fibers, which
TSan would see as one thread, and a race between two threads of a block can still give
the right numbers on a CPU. Built with -fsanitize=thread, the header runs each block's
threads as OS threads (-DPOLYCOMP_EMULATION_THREADS) meeting at mutex barriers, so TSan
reports any two accesses of a block's threads to one element, one of them a write, that
no barrier orders, whatever the timing (it checks happens-before, not overlap).

How: each program is compiled with ``target="cuda-emulated"`` and its default blocks (the
text nvcc checks, bar the target's name in a comment); its ``.cu`` (``Kernel.source``)
gets a small ``main`` appended that reads every array argument of the host entry from a
file numpy wrote, calls the entry with the sizes and scalars as literals, checks its
status and writes every array back. g++ builds it with -fsanitize=thread as an
executable (the TSan runtime never enters the Python process) and it runs with a time
limit. Outputs are compared with the reference (floats within tolerance, integers bit for
bit); inputs must come back untouched; outputs that the runtime would not zero start as
NaN (or a byte pattern) so an element nobody writes cannot pass.

Limits: the header runs a launch's blocks one after another, and the block switch is a
barrier, so TSan sees races between the threads of one block only, not between blocks
(which run at once on a GPU). ``test_tsan_reports_a_race_in_generated_code`` checks that
the harness does catch a race: the generated matmul with its thread mapping dropped
(every thread runs every iteration of the loops shared out over threads, so the threads
of a block write the same elements).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import polycomp
from cuda_samples import CXX, TSAN_OPTIONS, tsan_problem
from polycomp import cuda
from polycomp.arguments import bind
from polycomp.runtime import _written_whole, scalar_value
from test_cuda_codegen import OPERATORS, close
from test_cuda_nvcc_corpus import PROGRAMS
from test_tc_corpus import CORPUS

pytestmark = pytest.mark.needs_cc

# the numpy reference of each program of test_cuda_nvcc_corpus.PROGRAMS (same keys)
REFERENCES = {**{f"corpus/{k}": v[2] for k, v in CORPUS.items()},
              **{f"operator/{k}": v[2] for k, v in OPERATORS.items()}}

# -O1: TSan's instrumentation without the build time of -O2; -g: file:line in reports
TSAN_FLAGS = ["-std=c++17", "-pthread", "-O1", "-g", "-fsanitize=thread",
              "-DPOLYCOMP_EMULATION_THREADS", f"-I{cuda.header_dir()}", "-x", "c++"]


@dataclass
class Case:
    """One program ready to run outside Python: the .cu with its harness, the initial
    contents of the entry's arrays (by argument position) and what to compare."""

    text: str
    arrays: dict[int, np.ndarray]  # argument position -> initial contents
    inputs: dict[int, np.ndarray]  # the caller's arrays: must come back unchanged
    outputs: dict[int, str]        # argument position -> output name
    want: dict[str, object]        # output name -> reference value


def _literal(value: object, ctype: str) -> str:
    """A C++ expression of exactly ``value`` as a ``ctype``."""
    if ctype == "bool":
        return "true" if value else "false"
    if ctype in ("float", "double"):
        v = float(value)  # a float32 value is exact as a double, and its cast back
        if np.isnan(v):
            return f"({ctype})NAN"
        if np.isinf(v):
            return f"({ctype})({'-' if v < 0 else ''}INFINITY)"
        return f"({ctype}){v.hex()}"
    return f"({ctype})INT64_C({int(value)})"


def _initial(shape: tuple[int, ...], dtype: str, zero: bool) -> np.ndarray:
    """An array the caller does not give: zeros where the runtime zeroes it, otherwise
    NaN (floats) or 0xA5 bytes, so an element the kernel should write and does not shows."""
    if zero:
        return np.zeros(shape, dtype)
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.frombuffer(b"\xa5" * (int(np.prod(shape)) * np.dtype(dtype).itemsize),
                         dtype).reshape(shape).copy()


# The harness (make_case fills in the @...@): reads a<i>.bin into argument i, calls the
# entry, writes a<i>.out. Its names start with polycomp_test_ (generated names are the
# program's, escaped, or polycomp_ and no more).
HARNESS = r"""
/* ---- test harness (tests/test_cuda_tsan.py) ---- */
#include <cstdio>
#include <cstdlib>

static void *polycomp_test_read(const char *path, std::size_t bytes) {
    void *data = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    std::FILE *file = std::fopen(path, "rb");
    if (data == nullptr || file == nullptr || std::fread(data, 1, bytes, file) != bytes) {
        std::fprintf(stderr, "polycomp_test: cannot read %s\n", path);
        std::exit(90);
    }
    std::fclose(file);
    return data;
}

static void polycomp_test_write(const char *path, const void *data, std::size_t bytes) {
    std::FILE *file = std::fopen(path, "wb");
    if (file == nullptr || std::fwrite(data, 1, bytes, file) != bytes || std::fclose(file)) {
        std::fprintf(stderr, "polycomp_test: cannot write %s\n", path);
        std::exit(92);
    }
}

int main() {
@READ@
    int polycomp_test_status = @ENTRY@(@ARGS@);
    if (polycomp_test_status != 0) {
        std::fprintf(stderr, "polycomp_test: the entry returned status %d\n",
                     polycomp_test_status);
        return 91;
    }
@WRITE@
    std::puts("ok");
    return 0;
}
"""


def make_case(name: str) -> Case:
    source, make_inputs = PROGRAMS[name]
    kernel = polycomp.compile(source, target="cuda-emulated")
    values = make_inputs(np.random.default_rng(0))
    bound = bind(kernel.definition.name, kernel.interface, values)
    # the .cu only: the harness is the build (no library for ctypes)
    compiled = kernel.specialize(bound.sizes, build=False).compiled
    arrays = {a.name: a for a in compiled.program.arrays}
    case = Case(compiled.source.text, {}, {}, {}, {})
    reference = REFERENCES[name](*values)
    wanted = reference if isinstance(reference, tuple) else (reference,)
    case.want = dict(zip(kernel.interface.outputs, wanted, strict=True))
    read, args, write = [], [], []
    for i, arg in enumerate(compiled.source.arguments):
        if arg.kind == "size":
            args.append(_literal(bound.sizes[arg.name], "int64_t"))
            continue
        if arg.kind == "scalar":
            args.append(_literal(scalar_value(bound.values[arg.name], arg.dtype), arg.ctype))
            continue
        given = bound.values.get(arg.name)
        if isinstance(given, np.ndarray):
            case.arrays[i] = case.inputs[i] = np.ascontiguousarray(given)
        else:  # an output or a temporary, allocated as polycomp/runtime.py does
            array = arrays[arg.name]
            zero = array.role == "output" and not _written_whole(compiled, array)
            case.arrays[i] = _initial(array.extents(bound.sizes), array.dtype, zero)
            if arg.name in case.want:
                case.outputs[i] = arg.name
        nbytes = case.arrays[i].nbytes
        read.append(f"    auto *polycomp_test_a{i} = static_cast<{arg.ctype} *>("
                    f'polycomp_test_read("a{i}.bin", {nbytes}));')
        write.append(f'    polycomp_test_write("a{i}.out", polycomp_test_a{i}, {nbytes});')
        args.append(f"polycomp_test_a{i}")
    assert set(case.outputs.values()) == set(case.want), "an output is not an argument"
    case.text += (HARNESS.replace("@READ@", "\n".join(read))
                  .replace("@ENTRY@", compiled.source.entry).replace("@ARGS@", ", ".join(args))
                  .replace("@WRITE@", "\n".join(write)))
    return case


def run_under_tsan(folder: Path, case: Case, attempts: int = 1) -> subprocess.CompletedProcess:
    """Build ``case`` with ThreadSanitizer in ``folder`` and run it there (skips where
    TSan cannot run at all). ``attempts`` > 1, for a test that expects a race: the
    program runs again, up to that many times, until TSan reports one. The emulation's
    barrier is a mutex and a condition variable, so a thread that wakes late from the
    barrier before the missing one re-locks that mutex after the writer has passed it
    on the way to the next barrier: TSan then sees the accesses ordered, and a loaded
    machine makes that interleaving common (a race missed in one run of the suite in two
    here). A run without the race never reports, so the test can still fail."""
    problem = tsan_problem()
    if problem:
        pytest.skip(problem)
    source, program = folder / "kernel.cu", folder / "kernel"
    source.write_text(case.text)
    for i, array in case.arrays.items():
        array.tofile(folder / f"a{i}.bin")
    argv = [CXX, *TSAN_FLAGS, str(source), "-o", str(program), "-lm"]
    built = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, f"{' '.join(argv)}\n{built.stderr}"
    for _ in range(attempts):
        try:
            done = subprocess.run([str(program)], cwd=folder, capture_output=True, text=True,
                                  timeout=120,
                                  env={**os.environ, "TSAN_OPTIONS": TSAN_OPTIONS})
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the TSan build of the kernel ran past {exc.timeout} s (a hang?)")
        if "ThreadSanitizer" in done.stderr:
            break
    return done


def read_back(folder: Path, case: Case, i: int) -> np.ndarray:
    want = case.arrays[i]
    return np.fromfile(folder / f"a{i}.out", dtype=want.dtype).reshape(want.shape)


def assert_tsan_clean(folder: Path, case: Case, name: str) -> None:
    """``case`` built and run under TSan in ``folder``: no report, a clean exit, the
    outputs matching the reference and the inputs untouched."""
    done = run_under_tsan(folder, case)
    assert "ThreadSanitizer" not in done.stderr, f"{name}: TSan report\n{done.stderr}"
    assert done.returncode == 0 and done.stdout.strip() == "ok", (
        f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    for i, output in case.outputs.items():
        close(read_back(folder, case, i), case.want[output])
    for i, given in case.inputs.items():  # bit for bit: NaN payloads and all
        assert read_back(folder, case, i).tobytes() == given.tobytes(), (
            f"{name}: the kernel wrote its input argument {i}")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generated_cuda_is_tsan_clean_and_matches_numpy(tmp_path, name):
    assert_tsan_clean(tmp_path, make_case(name), name)


def test_every_program_has_a_reference():
    assert set(PROGRAMS) <= set(REFERENCES)


# A thread-mapped loop as codegen/cuda.py prints it: `c = (long)threadIdx.x` (or a
# floorm of it, for a loop that starts anywhere) and `c += (long)blockDim.x`. With the
# thread index 0 and the stride 1, every thread of a block runs the whole loop.
THREAD_INDEX = re.compile(r"\(long\)threadIdx\.[xyz]")
THREAD_STRIDE = re.compile(r"\(long\)blockDim\.[xyz]")


def test_tsan_reports_a_race_in_generated_code(tmp_path):
    case = make_case("operator/matmul")
    # the mapping is there to drop: thread loops, and blocks of more than one thread
    assert len(THREAD_INDEX.findall(case.text)) >= 2
    assert len(THREAD_STRIDE.findall(case.text)) >= 2
    assert re.search(r"dim3\(\d+, \d+, \d+\), dim3\((?!1, 1, 1\))", case.text)
    # (as generated, the same text is TSan-clean: the parametrized test above)
    case.text = THREAD_STRIDE.sub("1L", THREAD_INDEX.sub("0L", case.text))
    done = run_under_tsan(tmp_path, case, attempts=8)
    assert "WARNING: ThreadSanitizer: data race" in done.stderr, done.stderr
    assert done.returncode == 66  # TSAN_OPTIONS' exitcode, at the first report
    # the report points into a generated kernel of the .cu
    assert re.search(r"polycomp_matmul_kernel\d+\b.*kernel\.cu:\d+", done.stderr), done.stderr
