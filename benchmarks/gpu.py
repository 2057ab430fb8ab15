"""polycomp's CUDA kernels against cuBLAS, cuDNN and PyTorch eager, on one GPU (issue 14,
item 8).

Place in the pipeline: a benchmark of the ``cuda`` target's output (codegen/cuda.py)
through its device entry (``Kernel.device_runner`` / ``on_device``, polycomp/runtime.py),
so that no host-device copy is timed: the arrays live on the GPU as PyTorch tensors, and
both sides read and write them in place.

    python3 -m benchmarks.gpu                    # on a GPU: the table, and --out files
    python3 -m benchmarks.gpu --only sgemm       # one case (sgemm, conv, softmax, layernorm)
    python3 -m benchmarks.gpu --repeat 20 --out /tmp/gpu-results
    python3 -m benchmarks.gpu --emulated-smoke   # anywhere: the plumbing, tiny sizes
    python3 -m benchmarks.gpu --allow-no-gpu     # exit 0, not 2, where there is no GPU

Cases (float32, batch 1; the TC sources are the CPU benchmarks': benchmarks/matmul.py's
``TC_MM`` and benchmarks/operators/defs.py's conv, softmax and layernorm):

- sgemm 4096^3: ``C = A B`` against ``torch.matmul`` (cuBLAS) with TF32 off
  (``torch.backends.cuda.matmul.allow_tf32 = False``), so both do fp32 arithmetic;
- conv 3x3 at ResNet-50 shapes (C = K = 64 at 56x56, C = K = 256 at 14x14), on an
  input already padded, against ``torch.nn.functional.conv2d`` with padding 0 (cuDNN,
  ``torch.backends.cudnn.allow_tf32 = False``; benchmark mode on, so cuDNN picks its
  fastest algorithm in the warm-up);
- softmax over the last axis and layernorm at BERT shapes (128x768, 4096x1024), against
  ``torch.softmax`` and ``torch.nn.functional.layer_norm`` (eager).

Method: each polycomp result is checked against PyTorch's (``torch.allclose``) before
anything is timed; then warm-up calls; then ``--repeat`` rounds, the two sides
interleaved in each round (polycomp, peer, polycomp, ...), each measurement a CUDA
event pair around ``inner`` calls (inner chosen in the warm-up so that one measurement
lasts about a millisecond), the time per call the minimum over the rounds. polycomp's
calls go through ``device_runner`` (the argument checks done once), and each call waits
for the GPU and reads back the kernel's status word (about 10-20 us of host round trip
per call): that counts against polycomp in the memory-bound rows, where PyTorch's calls
queue up without waiting. Columns: polycomp ms, peer ms, ``peer/polycomp`` (the speed
ratio: above 1 polycomp is faster), and GFLOP/s (sgemm, conv) or GB/s (softmax,
layernorm: bytes read and written once) of each side.

Output: the markdown table on stdout; ``gpu.md``, ``gpu.csv`` and ``gpu.png`` (the speed
ratios, when matplotlib is there) under ``--out`` (default benchmarks/results).

Without a GPU (``polycomp.cuda.available()`` false, or PyTorch without CUDA) it prints
why and exits with 2, or 0 under ``--allow-no-gpu``: a run that measured nothing is not
mistaken for one that did.

``--emulated-smoke``: the polycomp side only, at tiny sizes, with
``target="cuda-emulated"`` (the same CUDA text on CPU threads) and numpy as the peer; it
checks the script's plumbing (compile, device_layout, device_runner on numpy arrays,
the check against the peer, the table and files) on any machine. Its times are the CPU
emulation's and mean nothing. Files: ``gpu-smoke.md`` and ``gpu-smoke.csv``.

Recipe for a session lent a GPU. The device machine has python3 3.12 with torch, cupy,
numpy, pytest, hypothesis, setuptools and nvcc 13, but neither islpy nor cgen (nor
pycuda: ``polycomp.cuda.available()`` then asks libcuda through ctypes), and no
network. The device tool sends the checkout the session was started in, so this branch
must be merged there first. Here, in that checkout's root, once:

    echo /.whl/ >> .git/info/exclude
    sh benchmarks/gpu_wheels.sh            # islpy, cgen, pytools, pycparser, platformdirs,
                                           # siphash24 for CPython 3.12 x86-64 into .whl/

then one device ``run`` (timeout_s 600) with ``carry: [".whl"]`` and the command:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit; export PYTHONUNBUFFERED=1; nvidia-smi -L; python3 -c 'import polycomp.cuda as c; print(c.available())'; python3 -m pytest -q -p no:cacheprovider -n 4 -rs tests/test_cuda_gpu.py tests/test_cuda_device_entry.py tests/test_nvcc.py 2>&1 | tee $OUT/tests.log; python3 -m benchmarks.gpu --out $OUT 2>&1 | tee $OUT/bench.log

(the editable install maps ``polycomp.codegen`` and ``polycomp.scheduler`` onto the
checkout's folders, which ``PYTHONPATH`` alone would not; ``$OUT/gpu.md``, ``gpu.csv``,
``gpu.png`` and the two logs come back). This sequence was rehearsed without a GPU in a
bare CPython 3.12 environment with the carried wheels: the GPU tests skip there with
``available()``'s reason and the rest pass.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
NO_GPU_EXIT = 2


@dataclass(frozen=True)
class Case:
    """One row: a TC def, its inputs' shapes, the peer (``peer(inputs) -> output``, on
    torch tensors, or numpy arrays in the smoke), the work (flops or bytes)."""

    name: str
    tc: str
    inputs: tuple[tuple[int, ...], ...]
    peer: Callable
    work: float
    unit: str  # "GFLOP/s" or "GB/s"
    tolerance: float = 1e-4  # rtol and atol of the check (scaled by the reduction depth)


def cases(smoke: bool, only: Sequence[str] = ()) -> list[Case]:
    from benchmarks.matmul import TC_MM
    from benchmarks.operators import defs

    torch_side = not smoke
    out: list[Case] = []

    n = 32 if smoke else 4096
    mm_peer = (lambda a, b: a @ b) if smoke else _torch("matmul")
    out.append(Case(f"sgemm {n}^3", TC_MM, ((n, n), (n, n)), mm_peer, 2.0 * n ** 3,
                    "GFLOP/s", 1e-3))
    for c, hw in ((4, 6), (8, 5)) if smoke else ((64, 56), (256, 14)):
        op = defs.conv(f"conv3x3_{c}", "ResNet-50", c=c, f=c, hw=hw, k=3)
        out.append(Case(f"conv3x3 C=K={c} {hw}x{hw}", op.tc,
                        tuple(shape for _, shape in op.inputs),
                        _torch("conv2d") if torch_side else _numpy_conv, op.work,
                        op.unit, 1e-3))
    for m, d in ((4, 16), (8, 24)) if smoke else ((128, 768), (4096, 1024)):
        op = defs.softmax(1, m, d)
        out.append(Case(f"softmax {m}x{d}", op.tc, ((1, m, d),),
                        _torch("softmax") if torch_side else op.numpy, op.work, op.unit))
        op = defs.layernorm(m, d)
        out.append(Case(f"layernorm {m}x{d}", op.tc, ((m, d), (d,), (d,)),
                        _torch("layernorm") if torch_side else op.numpy, op.work, op.unit))
    if only:
        out = [c for c in out if any(c.name.startswith(o) for o in only)]
    return out


def _torch(which: str) -> Callable:
    """The PyTorch peer (imported at its first call: the cases are listed without it)."""

    def peer(*xs):
        import torch

        if which == "matmul":
            return torch.matmul(*xs)
        if which == "conv2d":
            return torch.nn.functional.conv2d(*xs)
        if which == "softmax":
            return torch.softmax(xs[0], dim=-1)
        x, g, b = xs
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)

    return peer


def _numpy_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    kh, kw = w.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,fcij->nfhw", windows, w).astype(np.float32)


# ----------------------------------------------------------------------------- running

def gpu_reason() -> str | None:
    """Why this machine cannot run the GPU benchmark, or None."""
    import polycomp.cuda

    ok, why = polycomp.cuda.available()
    if not ok:
        return why
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch, the peer, is not installed ({exc})"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    return None


def run_case(case: Case, smoke: bool, repeat: int, warmup: int) -> dict:
    import polycomp

    target = "cuda-emulated" if smoke else "cuda"
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(shape).astype(np.float32) for shape in case.inputs]
    kernel = polycomp.compile(case.tc, target=target)
    if smoke:
        inputs = host
        layout = kernel.device_layout(*inputs)
        buffers = {n: np.empty(s, d) for n, (s, d, _) in layout.items()}
    else:
        import torch

        inputs = [torch.from_numpy(a).cuda() for a in host]
        layout = kernel.device_layout(*inputs)
        buffers = {n: torch.empty(s, dtype=getattr(torch, d), device="cuda")
                   for n, (s, d, _) in layout.items()}
    out = {n: b for n, b in buffers.items() if layout[n][2] == "out"}
    work = {n: b for n, b in buffers.items() if layout[n][2] == "work"}
    runner = kernel.device_runner(*inputs, out=out, work=work)
    result = runner()
    expected = case.peer(*inputs)
    depth = max(1, int(np.prod(case.inputs[-1][1:])) if "conv" in case.name else
                case.inputs[0][-1] if "sgemm" in case.name else 1)
    tol = case.tolerance * max(1.0, depth ** 0.5 / 8)
    if smoke:
        ok = np.allclose(result, expected, rtol=tol, atol=tol)
        error = float(np.max(np.abs(result - expected)))
    else:
        import torch

        ok = bool(torch.allclose(result, expected, rtol=tol, atol=tol))
        error = float((result - expected).abs().max())
    row = {"case": case.name, "check": "ok" if ok else f"WRONG (max |diff| {error:.3g})",
           "max_diff": error, "unit": case.unit}
    if not ok:
        return row
    peer_call = lambda: case.peer(*inputs)  # noqa: E731
    polycomp_ms, peer_ms = (_time_host(runner, peer_call, repeat, warmup) if smoke else
                            _time_events(runner, peer_call, repeat, warmup))
    row.update(polycomp_ms=polycomp_ms, peer_ms=peer_ms, ratio=peer_ms / polycomp_ms,
               polycomp_rate=case.work / polycomp_ms / 1e6, peer_rate=case.work / peer_ms / 1e6)
    return row


def _time_events(ours: Callable, peer: Callable, repeat: int, warmup: int) -> tuple[float, float]:
    """ms per call of each, CUDA events around ``inner`` calls, interleaved, minimum."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def measure(call: Callable, inner: int) -> float:
        start.record()
        for _ in range(inner):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / inner

    inners = []
    for call in (ours, peer):
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        once = measure(call, 1)
        inners.append(max(1, min(1000, int(1.0 / max(once, 1e-4)))))
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for k, call in enumerate((ours, peer)):
            best[k] = min(best[k], measure(call, inners[k]))
    return best[0], best[1]


def _time_host(ours: Callable, peer: Callable, repeat: int, warmup: int) -> tuple[float, float]:
    """The smoke's times: perf_counter, interleaved, minimum (the CPU emulation's)."""
    best = [float("inf"), float("inf")]
    for _ in range(warmup):
        ours(), peer()
    for _ in range(repeat):
        for k, call in enumerate((ours, peer)):
            t = time.perf_counter()
            call()
            best[k] = min(best[k], (time.perf_counter() - t) * 1e3)
    return best[0], best[1]


# ----------------------------------------------------------------------------- output

def table(rows: Sequence[dict], peer: str) -> str:
    lines = [f"| case | polycomp ms | {peer} ms | {peer}/polycomp | polycomp rate | "
             f"{peer} rate | check |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "polycomp_ms" not in r:
            lines.append(f"| {r['case']} | | | | | | {r['check']} |")
            continue
        lines.append(f"| {r['case']} | {r['polycomp_ms']:.4f} | {r['peer_ms']:.4f} | "
                     f"{r['ratio']:.2f}x | {r['polycomp_rate']:.1f} {r['unit']} | "
                     f"{r['peer_rate']:.1f} {r['unit']} | {r['check']} |")
    return "\n".join(lines)


def write(rows: Sequence[dict], text: str, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"{stem}.md", out / f"{stem}.csv"]
    written[0].write_text(text + "\n")
    fields = ["case", "polycomp_ms", "peer_ms", "ratio", "polycomp_rate", "peer_rate",
              "unit", "check", "max_diff"]
    with open(written[1], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    timed = [r for r in rows if "ratio" in r]
    if timed:
        fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(timed)))
        ax.barh([r["case"] for r in timed], [r["ratio"] for r in timed])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("peer time / polycomp time (above 1: polycomp faster)")
        ax.invert_yaxis()
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=120)
        plt.close(fig)
        written.append(out / f"{stem}.png")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help=f"folder for the md/csv/png (default {RESULTS})")
    p.add_argument("--repeat", type=int, default=10, help="timed rounds (the minimum is kept)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated: sgemm, conv3x3, softmax, layernorm")
    p.add_argument("--emulated-smoke", action="store_true",
                   help="tiny sizes on target=cuda-emulated against numpy (no timing claims)")
    p.add_argument("--allow-no-gpu", action="store_true", help="exit 0 where there is no GPU")
    args = p.parse_args(argv)
    only = [o.strip() for o in args.only.split(",") if o.strip()]
    out = Path(args.out) if args.out else RESULTS
    if args.emulated_smoke:
        rows = [run_case(c, True, min(args.repeat, 2), min(args.warmup, 1))
                for c in cases(True, only)]
        text = ("emulated smoke (target=cuda-emulated, numpy as the peer): a plumbing "
                "check; the times are the CPU emulation's\n\n" + table(rows, "numpy"))
        print(text)
        for path in write(rows, text, out, "gpu-smoke"):
            print(f"wrote {path}")
        return 0 if all(r["check"] == "ok" for r in rows) else 1
    why = gpu_reason()
    if why is not None:
        print(f"benchmarks.gpu: no GPU to measure on: {why}", file=sys.stderr)
        return 0 if args.allow_no_gpu else NO_GPU_EXIT
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    device = torch.cuda.get_device_name()
    rows = []
    for case in cases(False, only):
        print(f"... {case.name}", file=sys.stderr, flush=True)
        rows.append(run_case(case, False, args.repeat, args.warmup))
    text = (f"{device}, torch {torch.__version__}, TF32 off; minimum of {args.repeat} "
            f"interleaved rounds (CUDA events)\n\n" + table(rows, "torch"))
    print(text)
    for path in write(rows, text, out, "gpu"):
        print(f"wrote {path}")
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
