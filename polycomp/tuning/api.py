"""The tuner wired to the compiler: ``space_of``, ``tune`` and records applied at compile.

Place in the pipeline: around it. ``tune`` compiles the kernel once with the default
(analytical) policy while scheduler/tiling.observe_bands collects the bands it tiles;
those give the TuningSpace (space.py: tile sizes per member, unroll-and-jam, simd member,
L2 tiles per band, the analytical choice as default). The Sampler (sampler.py) then
proposes configurations, and each is measured by ``measure_trial`` in a child process
(measure.py): compiled with ``Options.band_config`` set to it (the tiling pass's
ConfiguredPolicy; the pipeline's check_schedule refuses anything illegal), run on fixed
random inputs, checked against the default's outputs, and timed in interleaved turns
beside the default (``TrialSpec.baseline_seconds``): its time is its seconds over the
default's in the same child, times the default's seconds in the tuner's process. Every
trial goes to the records (records.py), keyed by the lowered program's signature and
sizes (and the options, when not the defaults: ``record_signature``); the best record
at these sizes and the nearest at other sizes seed the search.

``prepare`` is the search's set-up alone (the default kernel, its space, featuriser and
reference outputs), for callers that run a search of their own (benchmarks/tuning.py);
``tune(search="random")`` runs the random baseline instead of the sampler.

``RecordsKernel`` is what polycomp.compile returns under ``tuning="records"`` (the
default): for each size set it looks up the best record of the lowered program and, if
there is one, compiles with its configuration. The lookup costs a file test when no
records exist, and a signature (about a millisecond) and one query when they do.
"""

from __future__ import annotations

import math
import os
import sqlite3
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from polycomp.arguments import bind, check_sizes
from polycomp.driver import Compiled, compile_program
from polycomp.errors import ArgumentError, OptionError
from polycomp.ir import Interface, Program, ScalarArg, TensorArg
from polycomp.options import Options
from polycomp.runtime import Kernel
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler.tiling import TiledBand, observe_bands
from polycomp.targets import get_target
from polycomp.testing import declared_extent

from .measure import (CopiesTimedWarning, Measurer, device_call, time_callable,
                      times_copies)
from .records import Record, Records, default_path
from .sampler import RandomSearch, Sampler, TuneResult
from .signature import kernel_signature, kernel_sizes
from .space import (GPU_TILE_LIMIT, GPU_TILE_MIN, UNROLL_FACTORS, BandInfo, Config, Featurizer,
                    TuningSpace, launch_fits, launch_knobs, min_parallel_tiles)

# seconds of timed calls per configuration (the minimum of them counts)
TIME_BUDGET = 0.2
# the re-measurement before a winner is declared (confirm): the search's best few and the
# default, in interleaved rounds; a candidate replaces the default only when it is faster
# by more than the margin (a tie keeps the analytical choice)
CONFIRM_TOP = 3
CONFIRM_ROUNDS = 5
CONFIRM_MARGIN = 0.01
# a trial timed beside the default (measure_trial): turns of each in this many rounds
PAIR_ROUNDS = 4
# relative tolerance of the output check by element type (reductions reorder with the
# tile sizes: float results differ in their last bits); the absolute one is this times
# the largest magnitude of the reference
TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-3, "float64": 1e-9}
# options that are the tuner's own, never passed on in best_options
_TUNER_FIELDS = ("band_config", "tuning", "records")


# ----------------------------------------------------------------------------- trials

@dataclass(frozen=True)
class FixedDefinition:
    """A Definition whose lowering is done: the user's calling convention (interface)
    over one lowered Program. Picklable: it travels to the measuring children."""

    name: str
    interface: Interface
    program: Program

    def lower(self, sizes: Mapping[str, int] | None = None) -> Program:
        return self.program


@dataclass(frozen=True)
class TrialSpec:
    """Everything a child needs to compile, run and time one configuration."""

    definition: FixedDefinition
    options: Mapping[str, Any]  # Options fields (keyword form), without the tuner's own
    sizes: Mapping[str, int]
    inputs: tuple | None = None  # the caller's arguments; None: random ones from seed
    seed: int = 0
    time_budget: float = TIME_BUDGET
    # the default's seconds in the tuner's own process (prepare): when set, a trial is
    # timed beside the default in its child and reports its share of these seconds
    # (measure_trial); None: its own seconds
    baseline_seconds: float | None = None

    def kernel(self, config: Mapping[str, int]) -> Kernel:
        options = Options.create(**self.options, band_config=dict(config), tuning="none")
        return Kernel(self.definition, options)

    def arguments(self) -> list[Any]:
        """Fresh arguments (copies: a kernel may update its arguments in place)."""
        if self.inputs is not None:
            return [np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                    for a in self.inputs]
        return random_arguments(self.definition.interface, self.sizes, self.seed)


def random_arguments(interface: Interface, sizes: Mapping[str, int], seed: int) -> list[Any]:
    """Arguments for ``interface`` at ``sizes``, the same for the same seed: floats in
    [-1, 1), integers in [1, 4] (no zero divisors), booleans at random; size scalars
    take their size."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for spec in interface.inputs:
        if isinstance(spec, ScalarArg):
            if spec.is_size:
                out.append(int(sizes[spec.name]))
            else:
                out.append(_random(rng, (), spec.dtype).item())
            continue
        shape = tuple(declared_extent(d, sizes, f"tune's argument '{spec.name}'",
                                      "pass sizes={{'{size}': ...}} (every size of the kernel)")
                      for d in spec.dims)
        out.append(_random(rng, shape, spec.dtype))
    return out


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    if kind == "b":
        return rng.random(size=shape) < 0.5
    if kind == "c":
        return (rng.uniform(-1, 1, size=shape) + 1j * rng.uniform(-1, 1, size=shape)).astype(dtype)
    return rng.integers(1, 5, size=shape).astype(dtype)


def run_outputs(kernel: Kernel, args: Sequence[Any]) -> tuple[np.ndarray, ...]:
    """One call's results: the returned outputs, then the arguments it updates in place
    (copies)."""
    result = kernel(*args)
    outs = list(result) if isinstance(result, tuple) else [] if result is None else [result]
    outs += [a for spec, a in zip(kernel.interface.inputs, args)
             if isinstance(spec, TensorArg) and spec.updated]
    return tuple(np.array(o, copy=True) for o in outs)


def measure_trial(config: Mapping[str, int], spec: TrialSpec) -> tuple[float, tuple]:
    """Compile, check and time one configuration (in a measuring child): its seconds and
    the outputs of its first call. The compile and the C compiler run before any timing;
    the first call is the warm-up.

    Without ``spec.baseline_seconds`` the seconds are the fastest call's. With them, the
    configuration and the default (band_config {}, built by prepare: a cache hit) take
    turns over PAIR_ROUNDS rounds (interleaved_minimums), and the seconds are the
    configuration's minimum over the default's, times ``baseline_seconds``; the two
    share their temporaries (Kernel.share_temporaries), so that where those lie is no
    difference between them. On a shared machine the speed drifts by 5 to 10 % over
    seconds, and one child runs slower than the next: two children measuring the same
    conv3x3 differed by up to 11 %, more than the tile choices near the best differ by,
    while its ratio to the default in the same child varied by 2 % at most
    (benchmarks/tuning_noise.py)."""
    kernel = spec.kernel(config)
    args = spec.arguments()
    kernel.specialize(spec.sizes)
    outputs = run_outputs(kernel, args)
    call = timed_call(kernel, args)
    if spec.baseline_seconds is None:
        return time_callable(call, budget=spec.time_budget, warmup=0), outputs
    default = spec.kernel({})
    default.specialize(spec.sizes)
    default.share_temporaries(kernel, spec.sizes)
    seconds, default_seconds = interleaved_minimums(
        [call, timed_call(default, args)], PAIR_ROUNDS, spec.time_budget / PAIR_ROUNDS)
    return seconds / default_seconds * spec.baseline_seconds, outputs


def timed_call(kernel: Kernel, args: Sequence[Any]) -> Any:
    """What a trial times: a GPU target's device entry on arrays staged on the device
    (the host entry's copies would swamp the kernels; measure.device_call), else a
    normal call. Its first call is the warm-up the caller leaves untimed."""
    device = device_call(kernel, args)
    if device is not None:
        device()
        return device
    return lambda: kernel(*args)


def confirm_candidates(spec: TrialSpec, configs: Sequence[Mapping[str, int]],
                       rounds: int | None = None) -> list[float]:
    """Seconds per configuration, re-measured side by side (in a measuring child):
    every kernel compiled and warmed up first, then ``rounds`` rounds in which each
    takes a turn (the order rotating, so none is always first or last) of an untimed
    call and timed calls for a share of the time budget; the minimum over the rounds
    counts. Turns of the candidates interleave, so a drift of the machine's speed
    touches them all alike, which one measurement after another does not; and they
    share their temporaries (Kernel.share_temporaries)."""
    rounds = CONFIRM_ROUNDS if rounds is None else rounds
    args = spec.arguments()
    calls, first = [], None
    for config in configs:
        kernel = spec.kernel(config)
        kernel.specialize(spec.sizes)
        if first is None:
            first = kernel
        else:
            kernel.share_temporaries(first, spec.sizes)
        calls.append(timed_call(kernel, args))
    # each configuration gets about 2 budgets
    return interleaved_minimums(calls, rounds, spec.time_budget / rounds * 2)


def interleaved_minimums(calls: Sequence[Any], rounds: int, turn: float) -> list[float]:
    """The fastest call of each of ``calls`` over ``rounds`` rounds, in which each takes
    a turn (the order rotating) of an untimed call and timed calls for ``turn`` seconds
    (at least one)."""
    best = [math.inf] * len(calls)
    for r in range(rounds):
        for i in [(r + j) % len(calls) for j in range(len(calls))]:
            best[i] = min(best[i], time_callable(calls[i], budget=turn, min_repeats=1))
    return best


# ----------------------------------------------------------------------------- the space

class BandFootprints:  # a picklable callable for space.Featurizer
    """``footprint(band_id, sizes)``: bytes one tile touches (scheduler/cache_model)."""

    def __init__(self, bands: Sequence[TiledBand]):
        self.references = {b.id: b.references for b in bands}

    def __call__(self, band: str, sizes: tuple[int, ...]) -> float:
        return CM.footprint(self.references[band], sizes)


def band_infos(bands: Sequence[TiledBand], options: Options) -> tuple[list[BandInfo], dict]:
    """BandInfo per tiled band and the default configuration (the analytical choice)."""
    infos, default = [], {}
    for b in bands:
        if b.gpu_members is not None:
            info = gpu_band_info(b)
            for knob in info.knobs():
                default[knob.name] = b.tiling.levels[-1][int(knob.name.rsplit("/tile", 1)[1])]
            infos.append(info)
            continue
        # a choice between at least two members, only when the pass vectorises at all
        simd = b.vector_members if options.vectorize and len(b.vector_members) > 1 else ()
        info = BandInfo(b.id, b.extents, lanes=b.lanes, simd_members=simd,
                        unroll=UNROLL_FACTORS, l2=True,
                        parallel=b.parallel if options.parallel else ())
        inner = b.tiling.levels[-1]
        for knob in info.knobs():
            what = knob.name.rsplit("/", 1)[1]
            default[knob.name] = (inner[int(what[4:])] if what.startswith("tile")
                                  else options.unroll if what == "unroll"
                                  else -1 if what == "simd" else int(options.l2_tile))
        infos.append(info)
    return infos, default


def gpu_band_info(band: TiledBand) -> BandInfo:
    """A GPU kernel band's BandInfo: tile knobs for its thread and sequential members,
    from GPU_TILE_MIN to GPU_TILE_LIMIT elements (within the extent)."""
    limits = tuple(GPU_TILE_LIMIT for _ in band.extents)
    floor = [min(GPU_TILE_MIN, e or GPU_TILE_MIN) for e in band.extents]
    # the candidates below the floor go; the member's default stays (TuningSpace adds it)
    return BandInfo(band.id, band.extents, lanes=1, unroll=(), l2=False, limits=limits,
                    members=tuple(m for m in band.gpu_members), parallel=(),
                    floors=tuple(floor))


def _space_from(bands: Sequence[TiledBand], options: Options
                ) -> tuple[TuningSpace, list[BandInfo]]:
    infos, default = band_infos(bands, options)
    if get_target(options.target).launch_knobs:
        return _gpu_space(infos, default, options), infos
    prune = None
    parallel = [i for i in infos if i.parallel]
    if parallel:
        # never ask for more parallel tiles than the threads, nor than the default gives
        # (a small kernel has fewer tiles than a big machine has cores)
        fewest = min(i.parallel_tiles(default) for i in parallel)
        threads = max(1, min(os.cpu_count() or 1, fewest))
        prune = min_parallel_tiles(parallel, threads)
    return TuningSpace.from_bands(infos, default=default, prune=prune), infos


def _gpu_space(infos: Sequence[BandInfo], default: dict[str, int],
               options: Options) -> TuningSpace:
    """A GPU target's space: its kernel bands' tile knobs and the launch knobs."""
    from polycomp.scheduler import gpu_mapping as G  # noqa: PLC0415

    axes = G.thread_axes(options)
    block = G.block_shape(options, axes)
    launch = launch_knobs(axes, block, G.grid_limit(options, 0))
    default.update({"gpu/threads": math.prod(block), "gpu/grid": G.grid_limit(options, 0)})
    if axes >= 2:
        default["gpu/x"] = block[0]
    knobs = [k for info in infos for k in info.knobs()] + launch
    return TuningSpace(tuple(knobs), default, launch_fits())


@dataclass
class _Target:
    definition: Any
    options: Options
    sizes: dict[str, int]
    inputs: tuple | None


def _target(target: object, sizes: Mapping[str, int] | None, inputs: Sequence[Any] | None,
            entry: str | None, options: Mapping[str, object], function: str) -> _Target:
    """The definition, Options, bound sizes and arguments of what the caller passed."""
    from polycomp import ProgramDefinition

    if isinstance(target, Kernel):
        opts = target.options.with_(**options) if options else target.options
        definition = target.definition
        if isinstance(definition, FixedDefinition):
            definition = ProgramDefinition(definition.program)
    else:
        opts = Options.create(**options)
        if isinstance(target, str):
            from polycomp.frontend.tc import parse
            definition = parse(target).get(entry)
        elif isinstance(target, Program):
            definition = ProgramDefinition(target)
        else:
            raise ArgumentError(f"{function} takes a TC source, a Kernel or a Program, "
                                f"not {type(target).__name__}",
                                hint="e.g. polycomp.tune(source, sizes={'M': 256, ...}) or "
                                     "polycomp.tune(polycomp.compile_loops(c_source), "
                                     "sizes=...)")
    if opts.parametric:
        raise OptionError(f"{function} tunes a kernel at fixed sizes, not a parametric one",
                          hint="leave parametric=False; tune once per size set that matters")
    if opts.band_config:
        raise OptionError(f"{function}: band_config is what the tuner searches",
                          hint="leave band_config out (the search starts from the analytical "
                               "choice)")
    opts = opts.with_(tuning="none")
    args = tuple(inputs) if inputs is not None else None
    if args is not None:
        bound = bind(definition.name, definition.interface, args).sizes
        if sizes is not None and any(bound.get(k) != int(v) for k, v in sizes.items()):
            raise ArgumentError(f"{function}: sizes= disagrees with the shapes of inputs=",
                                hint="pass one of them")
        sizes = bound
    if sizes is None:
        params = getattr(getattr(definition, "program", None), "params", None)
        if params == ():
            sizes = {}
        else:
            raise ArgumentError(f"{function} needs the sizes to tune for",
                                hint="pass sizes={'M': 256, ...} or inputs=(...) "
                                     "(the kernel's arguments)")
    sizes = check_sizes(sizes)
    if args is None:
        # the sizes the runtime binds from the call: the same variant key as the call
        sizes = dict(bind(definition.name, definition.interface,
                          random_arguments(definition.interface, sizes, 0)).sizes)
    return _Target(definition, opts, dict(sizes), args)


def _explore(target: _Target, seed: int = 0, time_budget: float = TIME_BUDGET,
             build: bool = False) -> tuple[TrialSpec, Kernel, list[TiledBand]]:
    """The kernel of the lowered program under the default (analytical) policy, compiled
    (and built, with ``build``) while the tiling pass reports the bands it tiles."""
    program = target.definition.lower(target.sizes)
    fixed = FixedDefinition(target.definition.name, target.definition.interface, program)
    spec = TrialSpec(fixed, _keywords(target.options), target.sizes, target.inputs, seed,
                     time_budget)
    kernel = spec.kernel({})
    with observe_bands() as seen:
        kernel.specialize(spec.sizes, build=build)
    return spec, kernel, list(seen)


def _keywords(options: Options) -> dict[str, Any]:
    """The Options fields that differ from the defaults, as compile keywords (without
    the tuner's own)."""
    default = Options()
    return {f.name: getattr(options, f.name) for f in fields(Options)
            if f.name not in _TUNER_FIELDS and getattr(options, f.name) != getattr(default, f.name)}


def space_of(kernel_or_program: object, options: Options | Mapping[str, object] | None = None,
             *, sizes: Mapping[str, int] | None = None, entry: str | None = None
             ) -> tuple[TuningSpace, list[BandInfo]]:
    """The tuning space of a kernel at ``sizes``: a knob per tile size of every band the
    tiling pass tiles, its unroll-and-jam factor, simd member (when there is a choice)
    and L2 tiles, with the analytical choice as the default; and the bands."""
    if isinstance(options, Options):
        options = _keywords(options)
    target = _target(kernel_or_program, sizes, None, entry, dict(options or {}), "space_of")
    _, _, bands = _explore(target)
    return _space_from(bands, target.options)


# ----------------------------------------------------------------------------- tune

# the searches tune(search=...) runs: the model-guided sampler, and the baseline it is
# judged against (benchmarks/tuning.py, polycomp tune --random)
SEARCHES = {"model": Sampler, "random": RandomSearch}


@dataclass
class Prepared:
    """What a search over one kernel at one size set needs (``prepare``): the trial
    spec the children compile from, the default kernel (built), the bands and their
    space, the featuriser, and the default's outputs every trial is checked against."""

    options: Options
    spec: TrialSpec
    kernel: Kernel
    bands: list[TiledBand]
    space: TuningSpace
    infos: list[BandInfo]
    featurize: Featurizer
    reference: tuple
    rtol: float
    atol: float


def prepare(source_or_kernel: object, sizes: Mapping[str, int] | None = None, *,
            entry: str | None = None, inputs: Sequence[Any] | None = None, seed: int = 0,
            time_budget: float = TIME_BUDGET, rtol: float | None = None,
            atol: float | None = None, function: str = "tune", paired: bool = True,
            **options: object) -> Prepared:
    """The first half of ``tune``: the kernel compiled and built with the analytical
    choice while the tiling pass reports its bands, their TuningSpace, and the reference
    outputs (for callers that run their own search, e.g. benchmarks/tuning.py); with
    ``paired``, the default timed here too, so that every trial is timed beside it
    (TrialSpec.baseline_seconds)."""
    target = _target(source_or_kernel, sizes, inputs, entry, options, function)
    # the default's outputs are the reference every trial is checked against: computed
    # here, by the compiler's own (analytical) choice
    spec, default_kernel, bands = _explore(target, seed, time_budget, build=True)
    if times_copies(default_kernel):
        warnings.warn(f"{function}: neither CuPy nor PyTorch is installed, so each trial "
                      f"times the host entry, copies to and from the GPU included; the "
                      f"kernels' own differences may drown in them",
                      CopiesTimedWarning, stacklevel=3)
    space, infos = _space_from(bands, target.options)
    args = spec.arguments()
    reference = run_outputs(default_kernel, args)
    if paired:
        spec = replace(spec, baseline_seconds=time_callable(
            timed_call(default_kernel, args), budget=time_budget))
    r, a = _tolerance(reference)
    featurize = Featurizer(space, infos, BandFootprints(bands),
                           caches=tuple(CM.cache_sizes()[level] for level in (1, 2)))
    return Prepared(target.options, spec, default_kernel, bands, space, infos, featurize,
                    reference, r if rtol is None else rtol, a if atol is None else atol)


def tune(source_or_kernel: object, sizes: Mapping[str, int] | None = None, trials: int = 64,
         executor: Any = None, records: object = None, *, entry: str | None = None,
         inputs: Sequence[Any] | None = None, seed: int = 0, timeout: float = 120.0,
         time_budget: float = TIME_BUDGET, batch_size: int | None = None,
         patience: int | None = None,
         rtol: float | None = None, atol: float | None = None,
         measure: Any = None, search: str = "model", progress: Any = None,
         confirm: bool = True, paired: bool = True, **options: object) -> TuneResult:
    """Search the tiling configurations of a kernel at ``sizes`` (module doc).

    source_or_kernel  a TC source (``entry`` picks the def), a Kernel (compile_loops'
                      too) or a Program
    sizes, inputs     the sizes to tune for, or the arguments to run it on (default:
                      fixed random ones)
    trials            how many configurations to measure (the default is the first)
    executor          any concurrent.futures.Executor (default: one local worker)
    records           a path or a Records (default: the cache directory's); False: none
    timeout           seconds per trial (compile, build, check, time) before it is killed
    time_budget       seconds of timed calls per trial (the minimum counts); with
                      ``paired``, the trial and the default each get that long
    paired            time each trial in turns beside the default in its child, and
                      count its time relative to the default's (measure_trial)
    rtol, atol        the output check (default: by element type)
    measure           a top-level ``fn(config, spec)`` replacing measure_trial
    search            "model" (the model-guided Sampler) or "random" (RandomSearch, the
                      baseline: the default, the records' seeds, then random points)
    progress          called with each trial's measure.Outcome as it comes back
    confirm           re-measure the best few and the default side by side before
                      declaring the winner (confirm_result); best_time and default_time
                      are then the re-measured seconds
    options           Options fields for every trial (as compile takes them)

    Returns the sampler's TuneResult with ``best_options``: keywords for
    ``polycomp.compile(source, sizes=sizes, **best_options)``.
    """
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ArgumentError(f"tune: trials must be a positive integer, not {trials!r}",
                            hint="e.g. trials=64")
    if search not in SEARCHES:
        raise ArgumentError(f"tune: search must be one of {', '.join(SEARCHES)}, "
                            f"not {search!r}", hint="search='model' (the default)")
    prepared = prepare(source_or_kernel, sizes, entry=entry, inputs=inputs, seed=seed,
                       time_budget=time_budget, rtol=rtol, atol=atol, paired=paired,
                       **options)
    spec, space = prepared.spec, prepared.space

    db = _records(prepared.options.records if records is None else records)
    signature = record_signature(spec.definition.program, prepared.options)
    size_key = kernel_sizes(spec.definition.program)
    seeds = []
    if db is not None:
        for record in (db.best(signature, size_key), db.nearest(signature, size_key)):
            if record is not None:
                seeds.append(record.config)

    with Measurer(measure or measure_trial, (spec,), executor=executor, timeout=timeout,
                  reference=prepared.reference, rtol=prepared.rtol, atol=prepared.atol,
                  on_outcome=progress) as measurer:
        batch = {} if batch_size is None else {"batch_size": min(batch_size, trials)}
        result = SEARCHES[search](space, prepared.featurize, measurer, budget=trials,
                                  seed=seed, patience=patience, seeds=seeds, **batch).run()
        if confirm and measure is None:  # a caller's own measure times something else
            result = confirm_result(result, measurer, spec, space)
    if db is not None:
        db.add_result(signature, size_key, result)
    result.best_options = dict(spec.options)
    if result.best_config is not None:
        result.best_options["band_config"] = dict(result.best_config)
    return result


def confirm_result(result: TuneResult, measurer: Measurer, spec: TrialSpec,
                   space: TuningSpace, top: int = CONFIRM_TOP,
                   margin: float = CONFIRM_MARGIN) -> TuneResult:
    """``result`` with its winner declared by a re-measurement (confirm_candidates,
    in a child through ``measurer``'s executor) of the default and the ``top`` fastest
    distinct valid trials: the fastest of them, unless it beats the default by no more
    than ``margin`` (then the default). When the re-measurement itself fails, the
    search's best stands (every trial of it was checked already)."""
    valid = sorted((t for t in result.trials if t.ok), key=lambda t: t.time)
    candidates: dict[tuple[int, ...], Config] = {}
    default_ok = result.default_time is not None
    if default_ok:
        candidates[space.key(result.default_config)] = dict(result.default_config)
    for trial in valid:
        if len(candidates) >= top + default_ok:
            break
        candidates.setdefault(space.key(trial.config), dict(trial.config))
    if len(candidates) < 2:
        return result
    configs = list(candidates.values())
    outcome = measurer.call(confirm_candidates, spec, configs,
                            timeout=measurer.timeout * len(configs))
    if not outcome.ok:
        warnings.warn(f"tune: re-measuring the best candidates failed ({outcome.status}: "
                      f"{outcome.detail}); the search's best stands", stacklevel=3)
        return result
    times = [float(t) for t in outcome.value]
    i = int(np.argmin(times))
    if default_ok and i != 0 and times[i] > times[0] * (1.0 - margin):
        i = 0
    result.confirmed = list(zip(configs, times))
    result.best_config, result.best_time = configs[i], times[i]
    if default_ok:
        result.default_time = times[0]
    return result


def _tolerance(reference: Sequence[np.ndarray]) -> tuple[float, float]:
    rtol = 0.0
    scale = 1.0
    for array in reference:
        kind = array.dtype.kind
        if kind in "fc":
            rtol = max(rtol, TOLERANCE.get(array.dtype.name, 1e-3))
            finite = np.abs(array[np.isfinite(array)])
            if finite.size:
                scale = max(scale, float(finite.max()))
    return rtol, rtol * scale


def _records(records: object) -> Records | None:
    if records is False:
        return None
    if records is None:
        return Records()
    if isinstance(records, Records):
        return records
    if isinstance(records, (str, os.PathLike)):
        return Records(records)
    raise ArgumentError(f"tune: records must be a path, a Records or False, not {records!r}",
                        hint="e.g. records='tuning.sqlite'")


# ----------------------------------------------------------------------------- at compile

def record_signature(program: Program, options: Options) -> str:
    """The records' key for a lowered program compiled with ``options``: its signature,
    and when some option other than the tuner's own and ``cache`` differs from the
    defaults, a digest of those too (a configuration tuned under scheduler="isl" names
    bands of another schedule, and one tuned with other flags was timed for them)."""
    import hashlib

    signature = kernel_signature(program)
    others = {k: v for k, v in _keywords(options).items() if k != "cache"}
    if not others:
        return signature
    digest = hashlib.sha256(repr(sorted(others.items())).encode()).hexdigest()[:16]
    return f"{signature}+{digest}"


def best_record(program: Program, options: Options | None = None,
                path: str | os.PathLike | None = None) -> Record | None:
    """The best valid record of this lowered program at its sizes under ``options`` on
    this machine, or None (no records, a parametric program, a database that cannot be
    read)."""
    if program.params:
        return None
    if path is None and options is not None and options.records:
        path = options.records
    path = default_path() if path is None else Path(path)
    if not path.is_file():
        return None
    try:
        return Records(path).best(record_signature(program, options or Options()),
                                  kernel_sizes(program))
    except (sqlite3.Error, OSError) as exc:
        warnings.warn(f"the tuning records at {path} cannot be read ({exc}); compiling "
                      "with the analytical choice", stacklevel=3)
        return None


class RecordsKernel(Kernel):
    """A Kernel that compiles each size set with the best tuning record of its lowered
    program when there is one (Options.tuning == "records"); ``record``: the last one
    applied."""

    record: Record | None = None

    def _compile(self, program: Program) -> Compiled:
        record = best_record(program, self.options)
        if record is not None:
            try:
                options = self.options.with_(band_config=record.config)
            except OptionError:
                record = None  # a record from another polycomp: its knobs mean nothing here
            else:
                self.record = record
                return compile_program(program, options)
        return super()._compile(program)


__all__ = ["FixedDefinition", "Prepared", "RecordsKernel", "SEARCHES", "TrialSpec", "band_infos",
           "best_record", "prepare",
           "record_signature",
           "measure_trial", "random_arguments", "run_outputs", "space_of", "tune"]
