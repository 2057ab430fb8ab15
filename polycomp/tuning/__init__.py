"""polycomp.tuning: an ML-guided search over tiling configurations (AKG's tile sampler).

The core, independent of the scheduler's internals:

    signature.py   Program -> canonical, name-free kernel signature and sizes; the machine
    space.py       BandInfo (plain data per tiled band) -> TuningSpace of Knobs
    cost_model.py  numpy models ranking configurations (ridge on a quadratic, boosted trees)
    measure.py     configurations -> Outcomes, each run isolated, through any Executor
    sampler.py     Sampler (model-guided evolution) and RandomSearch -> TuneResult
    records.py     sqlite records keyed by (signature, sizes, machine, compiler); JSON lines

Wired to the compiler (api.py): ``space_of(kernel)`` lists a kernel's space from the
bands the tiling pass tiles, ``tune`` (also ``polycomp.tune``) runs the search with
every trial compiled in a child, and ``RecordsKernel`` applies the best record at
compile time (``Options.tuning="records"``).

A tuning run: build a TuningSpace from the bands (default: the analytical model's
choice), look up ``Records.best`` / ``Records.nearest`` for seeds, run
``Sampler(space, featurize, Measurer(fn, ...), budget=...)``, store the result with
``Records.add_result``.
"""

from __future__ import annotations

from .cost_model import BoostedTrees, CostModel, Ensemble, RidgeModel, spearman
from .measure import Measurer, Outcome, time_callable
from .records import Record, Records
from .sampler import RandomSearch, Sampler, Trial, TuneResult
from .signature import kernel_signature, kernel_sizes, machine_identity
from .space import (BandInfo, Featurizer, Knob, TuningSpace, all_of, band_id,
                    min_parallel_tiles, tile_candidates)

from .api import RecordsKernel, best_record, measure_trial, space_of, tune  # noqa: E402

__all__ = ["BandInfo", "RecordsKernel", "best_record", "measure_trial", "space_of", "tune", "BoostedTrees", "CostModel", "Ensemble", "Featurizer", "Knob",
           "Measurer", "Outcome", "RandomSearch", "Record", "Records", "RidgeModel", "Sampler",
           "Trial", "TuneResult", "TuningSpace", "all_of", "band_id", "kernel_signature",
           "kernel_sizes", "machine_identity", "min_parallel_tiles", "spearman",
           "tile_candidates", "time_callable"]
