"""The fuzz worker: a child process that runs cases, so that a crash or a hang is a finding.

Place in the pipeline: it drives the whole of polycomp (``compile_loops`` / ``compile``,
then the kernel) on one generated case at a time, beside the oracle. The parent
(``fuzzing.harness``) writes pickled cases to its stdin and reads pickled messages from
a private copy of its stdout (fd 1 itself is pointed at stderr, so that nothing printed
by a library corrupts the protocol):

    ("stage", "oracle")    before the reference runs: dying here means undefined behaviour
    ("stage", "polycomp")  before polycomp compiles and runs: dying here is a crash
    ("done", Outcome)      the result

Run as ``python -m polycomp.fuzzing.worker``.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback

import numpy as np

from .harness import Case, Outcome, compare


def _stage_of(tb) -> str:
    """file:function:line of the deepest polycomp frame of a traceback."""
    where = "?"
    for frame in traceback.extract_tb(tb):
        path = frame.filename.replace(os.sep, "/")
        for root in ("/frontend/", "/scheduler/", "/codegen/", "/polycomp/"):
            if root in path and "/fuzzing/" not in path:
                where = f"{root.strip('/')}/{path.rsplit('/', 1)[-1]}:{frame.name}:{frame.lineno}"
    return where


def _polycomp_error(exc: BaseException) -> Outcome:
    from polycomp.errors import InternalError, PolycompError

    stage = _stage_of(exc.__traceback__)
    text = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    if isinstance(exc, PolycompError) and not isinstance(exc, InternalError):
        # the loop frontend's last-resort guard turns foreign exceptions into this message
        internal = "internal error" in str(exc)
        return Outcome("internal" if internal else "rejected", text, stage)
    return Outcome("internal", text + "\n" + "".join(traceback.format_tb(exc.__traceback__)[-4:]),
                   stage)


# kernels of the last loop-nest cases, by source, function and options: a case that runs
# the same program at other sizes (a regression test's N = 2 and N = 5) reuses the
# Kernel, whose compiled variants (one if parametric, one per size set otherwise) it
# keeps; a parametric isl AST can take 15 s to check
_KERNELS: dict[str, object] = {}
_KERNELS_KEPT = 4


def _loop_kernel(polycomp, source: str, function: str, options: dict):  # noqa: ANN001
    key = repr((source, function, sorted(options.items())))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = polycomp.compile_loops(source, function, **options)
        if len(_KERNELS) >= _KERNELS_KEPT:
            _KERNELS.pop(next(iter(_KERNELS)))
        _KERNELS[key] = kernel
    return kernel


def run_case(case: Case, send) -> Outcome:
    import polycomp

    from . import oracle

    if case.kind == "selftest":  # the harness's own checks: program is "crash" or "hang"
        send(("stage", "polycomp"))
        if case.program == "crash":
            os.abort()
        import time
        time.sleep(3600)
    if case.kind == "loops":
        program = case.program
        args = oracle.make_arguments(program.args, case.seed)
        expected = oracle.copy_arguments(args)
        send(("stage", "oracle"))
        try:
            oracle.run_gcc(program.source, program.function, program.args, expected)
        except oracle.OracleError as exc:
            return Outcome("invalid", f"gcc rejects the generated program: {exc}", "oracle")
        send(("stage", "polycomp"))
        got = oracle.copy_arguments(args)
        try:
            polycomp.set_num_threads(case.threads)
            kernel = _loop_kernel(polycomp, program.source, program.function, case.options)
            kernel(*got)
        except Exception as exc:  # noqa: BLE001 - every exception is classified
            return _polycomp_error(exc)
        names = [s.name for s in program.args]
        pairs = [(n, e, g) for n, e, g in zip(names, expected, got) if isinstance(e, np.ndarray)]
        return compare(pairs)
    from . import tcgen

    program = case.program
    send(("stage", "oracle"))
    inputs = tcgen.make_inputs(program, case.seed)
    try:
        expected = tcgen.interpret(program, inputs)
    except tcgen.Undefined as exc:
        return Outcome("discard", f"int32 overflow in the interpreter ({exc})", "oracle")
    send(("stage", "polycomp"))
    try:
        polycomp.set_num_threads(case.threads)
        kernel = polycomp.compile(program.source, program.name, **case.options)
        returned = kernel(*[v for _, v in inputs])
    except Exception as exc:  # noqa: BLE001
        return _polycomp_error(exc)
    returned = list(returned) if isinstance(returned, tuple) else [returned]
    return compare([(n, expected[n], g) for n, g in zip(program.outputs, returned)])


def main() -> None:
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: object) -> None:
        data = pickle.dumps(message)
        proto.write(struct.pack("<Q", len(data)) + data)

    from polycomp.threads import set_dynamic
    set_dynamic(False)  # every case runs on exactly case.threads, busy machine or not
    stdin = sys.stdin.buffer
    while True:
        head = stdin.read(8)
        if len(head) < 8:
            return
        case = pickle.loads(stdin.read(struct.unpack("<Q", head)[0]))
        try:
            outcome = run_case(case, send)
        except Exception as exc:  # noqa: BLE001 - a fuzzer defect: say so, keep serving
            outcome = Outcome("invalid", "fuzzer error: " + "".join(
                traceback.format_exception(exc)[-6:]), "fuzzer")
        send(("done", outcome))


if __name__ == "__main__":
    main()
