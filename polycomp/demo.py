"""``polycomp demo``: compile and run the bundled examples, check them, time them.

Each example is a Tensor Comprehensions file in polycomp/examples/ with a numpy
reference. For every scheduler the demo prints whether the kernel matches numpy and its
median time beside numpy's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import PolycompError
from .testing import median_time

EXAMPLES = Path(__file__).parent / "examples"


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm(x, gamma, beta, eps):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def _conv2d(i: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, c, h, wd = i.shape
    f, _, kh, kw = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(i, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,fcij->nfhw", windows, w, optimize=True).astype(i.dtype)


@dataclass(frozen=True)
class Example:
    file: str
    make_inputs: Callable[[np.random.Generator, bool], list]
    reference: Callable[..., np.ndarray]

    @property
    def source(self) -> str:
        return (EXAMPLES / self.file).read_text()


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(0.1, 1.0, size=shape).astype(np.float32)


EXAMPLE_LIST = [
    Example("matmul.tc", lambda r, q: [_f32(r, *(64, 48) if q else (512, 512)),
                                       _f32(r, *(48, 80) if q else (512, 512))],
            lambda a, b: a @ b),
    Example("conv2d.tc", lambda r, q: [_f32(r, *(1, 3, 12, 12) if q else (4, 16, 34, 34)),
                                       _f32(r, *(4, 3, 3, 3) if q else (32, 16, 3, 3))],
            _conv2d),
    Example("softmax.tc", lambda r, q: [_f32(r, *(8, 16) if q else (512, 1024))], _softmax),
    Example("layernorm.tc", lambda r, q: [_f32(r, *(8, 16) if q else (512, 1024)),
                                          _f32(r, 16 if q else 1024), _f32(r, 16 if q else 1024),
                                          1e-5],
            lambda x, g, b, eps: _layernorm(x, g, b, np.float32(eps))),
    Example("trisolve_like.tc", lambda r, q: [_f32(r, *(16, 16) if q else (1024, 1024)),
                                              _f32(r, 16 if q else 1024)],
            lambda l, x: np.tril(l) @ x),
]


def run_demo(quick: bool = False, schedulers: tuple[str, ...] = ("none", "isl", "pluto")) -> int:
    import polycomp

    rng = np.random.default_rng(0)
    failures = 0
    print(f"polycomp {polycomp.__version__} demo: each example against numpy "
          f"({'quick sizes' if quick else 'full sizes'}; times are medians of 5 runs)\n")
    header = f"{'example':18s} {'scheduler':9s} {'check':7s} {'compile':>9s} {'run':>10s} {'numpy':>10s}"
    print(header)
    print("-" * len(header))
    for example in EXAMPLE_LIST:
        args = example.make_inputs(rng, quick)
        want = example.reference(*args)
        numpy_time = median_time(lambda: example.reference(*args), 5)
        for scheduler in schedulers:
            name = example.file.removesuffix(".tc")
            try:
                start = time.perf_counter()
                kernel = polycomp.compile(example.source, file=example.file, scheduler=scheduler)
                got = kernel(*args)  # first call specialises and builds
                compile_time = time.perf_counter() - start
                ok = np.allclose(got, want, rtol=1e-3, atol=1e-4)
                run_time = median_time(lambda: kernel(*args), 5)
            except PolycompError as exc:
                print(f"{name:18s} {scheduler:9s} ERROR   {exc}")
                failures += 1
                continue
            failures += not ok
            print(f"{name:18s} {scheduler:9s} {'ok' if ok else 'WRONG':7s} {compile_time:8.2f}s "
                  f"{run_time * 1e3:8.2f}ms {numpy_time * 1e3:8.2f}ms")
    print()
    print("all examples match numpy" if not failures else f"{failures} example(s) FAILED")
    print(f"\nTry: polycomp compile {EXAMPLES / 'matmul.tc'} --sizes M=64,N=64,K=64")
    return 1 if failures else 0
