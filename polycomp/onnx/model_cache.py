"""A disk cache of whole compiled models: model + input shapes + Options -> library.

A deployer restarting a service must get its session back in well under a second.
Rebuilding it from the per-group cache (polycomp/compile_cache.py) still lowers every
group, packs the weights and reads a record per kernel: 2 s for ResNet-50. This cache
keeps what a run needs and nothing else: the model's library (polycomp/onnx/
library.py: its path and slot tables) and every constant it reads after load-time
work (batch-norm folding, the packing channel blocking asks for, lowering tables), in
one file mapped read-only on a hit, never copied.

The key hashes the model's bytes (frontend/onnx/model.py's digest: weights included:
the C depends on some of their values, the constants on all), the shapes and values the session compiled for, the
Options and polycomp's code (compile_cache.code_identity). The entry is a pickle of the
library's description and the constants' layout; the constants file sits beside it.
Both are written under temporary names and renamed into place (the constants first),
so a reader never sees half an entry; a missing, partial or stale entry is a miss.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polycomp.build import cache_dir
from polycomp.compile_cache import code_identity
from polycomp.options import Options

from .library import ModelLibrary

FORMAT = 1
ALIGN = 64


@dataclass(frozen=True)
class CachedModel:
    """What a hit gives back: the library (not bound yet), its constants (views of the
    mapped file), and the session's own notes (graph outputs, memory figures)."""

    library: ModelLibrary
    constants: dict[str, np.ndarray]
    notes: dict


def was_checked(digest: str) -> bool:
    """Whether a model of this digest passed onnx's checker here before (a marker the
    first store leaves; frontend/onnx/model.py then skips the checker)."""
    return (cache_dir() / "models" / f"{digest}.checked").exists()


def model_key(digest: str, shapes: Mapping[str, tuple[int, ...]],
              fixed: Mapping[str, np.ndarray], options: Options, records: str = "") -> str:
    """``records``: the tuning records' stamp (Records.stamp) when they apply."""
    parts = [str(FORMAT), code_identity(), digest, repr(options),
             repr(sorted((k, tuple(v)) for k, v in shapes.items())), records]
    for name in sorted(fixed):
        value = np.asarray(fixed[name])
        parts.append(f"{name}|{value.dtype}|{value.shape}|{value.tobytes().hex()}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _paths(key: str) -> tuple[Path, Path]:
    folder = cache_dir() / "models"
    return folder / f"{key}.pickle", folder / f"{key}.constants"


def load(key: str, options: Options) -> CachedModel | None:
    if not options.cache:
        return None
    entry, data = _paths(key)
    try:
        with open(entry, "rb") as f:
            record = pickle.load(f)
        if not os.path.exists(record["library"].path):
            return None
        mapped = np.memmap(data, dtype=np.uint8, mode="r") if record["layout"] else None
    except Exception:  # a missing, partial or stale entry is a miss, never an error
        return None
    constants = {}
    for name, offset, shape, dtype in record["layout"]:
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * np.dtype(dtype).itemsize
        constants[name] = np.ndarray(shape, dtype, buffer=mapped, offset=offset) \
            if nbytes else np.zeros(shape, dtype)
    return CachedModel(record["library"], constants, record["notes"])


def store(key: str, library: ModelLibrary, constants: Mapping[str, np.ndarray],
          notes: dict, options: Options) -> None:
    if not options.cache:
        return
    entry, data = _paths(key)
    layout = []
    offset = 0
    for name in library.constants:
        array = np.ascontiguousarray(constants[name])
        layout.append((name, offset, array.shape, array.dtype.str))
        offset += -(-max(array.nbytes, 1) // ALIGN) * ALIGN
    record = {"library": library, "layout": layout, "notes": notes}
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".constants-", dir=entry.parent)
        with os.fdopen(fd, "wb") as f:
            for (name, start, _, _) in layout:
                f.seek(start)
                f.write(np.ascontiguousarray(constants[name]).tobytes())
            f.truncate(max(offset, 1))
        os.replace(tmp, data)
        text = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(prefix=".model-", dir=entry.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, entry)
        (entry.parent / f"{notes['digest']}.checked").touch()
    except (OSError, pickle.PicklingError, TypeError, AttributeError, KeyError):
        return  # the cache is an optimisation: a failure to store costs a recompile


__all__ = ["CachedModel", "load", "model_key", "store", "was_checked"]
