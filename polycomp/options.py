"""Options: every decision a user (or the tuner) can make, in one frozen record.

It travels beside the Program through every stage and is hashed into the build cache
key. ``Options.create(**kwargs)`` is the checked constructor used by the public API:
unknown names and values out of range raise :class:`OptionError`.

This module is also the one place where isl's global context options are set
(:func:`configure_isl`): they change the behaviour of every later isl call.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import islpy as isl

from .errors import OptionError
from .targets.registry import check_target_name

SCHEDULERS = ("none", "isl", "pluto", "custom")
FUSIONS = ("smart", "max", "typed", "none")
TUNINGS = ("records", "none")
# a per-band knob: "<band id>/<knob>", the band id as polycomp.tuning.space.band_id writes
# it (its statements, sorted and joined by '+', '@' its position on their path)
BAND_KNOB = re.compile(r"(?P<band>[^/@]+@\d+)/(?P<knob>tile\d+|unroll|simd|l2)")
# the GPU targets' launch knobs, for every kernel of the program (scheduler/tiling.py's
# ConfiguredPolicy.gpu_launch): threads per block, threads along x, most blocks along x
GPU_KNOB = re.compile(r"gpu/(?P<knob>threads|x|grid)")
# a tile size is a C constant in loop bounds and strides: keep products of a tile size and
# a tile counter far from long overflow (no loop has 2**31 iterations in one tile anyway)
MAX_TILE = 2**31 - 1


@dataclass(frozen=True)
class Options:
    """What to build and how.

    target      the backend (polycomp/targets/; polycomp.targets.target_names() lists
                them): "openmp", OpenMP C for CPUs, is the one built in. An unknown
                name is an UnknownTargetError whose hint lists the known ones.
    scheduler   "pluto" (ours, the default), "isl" (isl's scheduler), "none" (original
                order), or "custom" (the user's ``schedule``, checked against the
                dependences).
    schedule    for scheduler="custom": an isl schedule tree (YAML) or union map, as text.
    parametric  keep sizes as C arguments instead of specialising to constants.
    parallel    mark outermost dependence-free loops parallel (OpenMP: ``omp parallel for``).
    parallel_min_work
                a loop inside serial loops becomes parallel only when each run of it has
                at least this many statement instances (0: every dependence-free loop).
    expand_scalars
                give each live range of a local scalar its own array, expanded over
                the loops around a reduction into it (scheduler/expansion.py), so that
                schedulers other than "none" may reorder those loops.
    block_channels
                block a convolution's output channels by the vector width, its
                weights packed to match (scheduler/blocking.py), so that the vector
                loop runs along them (specialised programs; not for "none" or
                "custom"; CPU targets: a GPU's threads keep the plain layout).
    exact_fp    keep every floating-point reduction in its original order (bit-for-bit
                the unscheduled result); by default their loops may be reordered,
                as TC and TVM do (scheduler/reductions.py). Integer reductions are
                exact in any order.
    fusion      fusion heuristic for schedulers that fuse ("smart", "max", "typed", "none").
    partition   force fusion groups: tuples of statement names that share a band.
    tile        tile permutable bands (sizes from ``tile_sizes`` or the cache model).
    fuse_tiles  run a contraction's initialisation and epilogue inside its outer tile
                loops (scheduler/tile_fusion.py; OpenMP target, tiled schedules).
    tile_sizes  one size per band member, outermost first (None: the analytical model).
    l2_tile     add a second level of tiles (L2 tiles of L1 tiles).
    wavefront   skew tile loops into wavefronts when no outer tile loop is parallel.
    vectorize   order point loops for stride-1 innermost access and mark them simd.
    unroll      unroll-and-jam factor for an outer point loop (0 or 1: off).
    band_config per-band settings that replace the analytical ones for the bands they
                name (scheduler/tiling.py's ConfiguredPolicy): (knob, value) pairs, knob
                "<band>/tile<m>" (tile size of member m), "<band>/unroll" (unroll-and-jam
                factor), "<band>/simd" (the member made the vector loop, -1: the pass's
                choice), "<band>/l2" (1: a second level of tiles); a dict is accepted.
                GPU targets: "<band>/tile<m>" is a kernel band's tile (along a thread
                member the block's extent in elements), and "gpu/threads", "gpu/x" and
                "gpu/grid" set every kernel's threads per block, threads along x and
                most blocks along x (over gpu_block and gpu_grid).
                What polycomp.tune finds; bands and members not named keep the model's.
    tuning      "records": apply the best tuning record of this kernel at these sizes on
                this machine, if there is one and ``band_config`` is empty (compile,
                compile_loops, compile_program, ONNX sessions); "none": never.
    records     the tuning records' sqlite file (polycomp/tuning/records.py) that
                ``tuning="records"`` reads; None: ``tuning.sqlite`` in the cache folder.
    gpu_block   GPU targets: threads per block along x, y, z (1 to 3 positive integers,
                at most 1024 in all and 64 along z); its length is how many loops of a
                kernel may be shared out over threads. None: (32, 8) for a kernel with
                two or more such loops, (256,) for one (scheduler/gpu_mapping.py).
    gpu_grid    GPU targets: the most blocks along x, y, z (1 to 3 positive integers);
                its length is how many loops may be shared out over blocks; a loop with
                more tiles than blocks runs them in turns. None: up to three loops, as
                many blocks as tiles (within CUDA's limits).
    gpu_promotion  GPU targets: stage reused or uncoalesced read-only tiles in shared
                memory and keep a thread's own elements in registers
                (scheduler/gpu_promotion.py); False prints every access to global memory.
    gpu_block_reduction  GPU targets: share a long reduction loop out over a block's
                threads (per-thread partials, a block reduction in shared memory) when
                the other loops leave threads idle (scheduler/gpu_reduction.py), and
                run a fused row-wise chain (softmax, layernorm) a row per block, its
                loops over the threads (scheduler/gpu_rows.py); False: a reduction
                stays in one thread.
    cc, cflags  compiler and optimisation flags; None means $CC/$CFLAGS or the defaults.
    cache       reuse compiled libraries from the on-disk cache.
    """

    target: str = "openmp"
    scheduler: str = "pluto"
    schedule: str | None = None
    parametric: bool = False
    parallel: bool = True
    # about 20 us of work against the few us it takes to start and join two threads
    parallel_min_work: int = 20000
    expand_scalars: bool = True
    block_channels: bool = True
    exact_fp: bool = False
    fusion: str = "smart"
    partition: tuple[tuple[str, ...], ...] | None = None
    tile: bool = True
    fuse_tiles: bool = True
    tile_sizes: tuple[int, ...] | None = None
    l2_tile: bool = False
    wavefront: bool = True
    vectorize: bool = True
    unroll: int = 4
    band_config: tuple[tuple[str, int], ...] = ()
    tuning: str = "records"
    records: str | None = None
    gpu_block: tuple[int, ...] | None = None
    gpu_grid: tuple[int, ...] | None = None
    gpu_promotion: bool = True
    gpu_block_reduction: bool = True
    cc: str | None = None
    cflags: tuple[str, ...] | None = None
    cache: bool = True

    def __post_init__(self) -> None:
        check_target_name(self.target)
        _check_choice("scheduler", self.scheduler, SCHEDULERS)
        _check_choice("fusion", self.fusion, FUSIONS)
        _check_choice("tuning", self.tuning, TUNINGS)
        _check_band_config(self.band_config)
        if self.records is not None and not isinstance(self.records, str):
            raise OptionError(f"option 'records' must be a path (a string), not "
                              f"{self.records!r}", hint="e.g. records='tuning.sqlite'")
        for name in ("parametric", "parallel", "cache", "tile", "l2_tile", "wavefront",
                     "vectorize", "expand_scalars", "block_channels", "exact_fp", "gpu_promotion",
                     "gpu_block_reduction"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"option '{name}' must be True or False, "
                                  f"not {getattr(self, name)!r}")
        if self.scheduler == "custom" and not isinstance(self.schedule, str):
            raise OptionError("scheduler='custom' needs schedule= (an isl schedule tree or "
                              "union map, as text)")
        if self.tile_sizes is not None and (
                isinstance(self.tile_sizes, (str, bytes)) or not all(
                    isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= MAX_TILE
                    for t in self.tile_sizes)):
            raise OptionError(f"option 'tile_sizes' must be integers from 1 to {MAX_TILE}, "
                              f"not {self.tile_sizes!r}", hint="e.g. tile_sizes=[32, 32, 8]")
        if (not isinstance(self.parallel_min_work, int) or isinstance(self.parallel_min_work, bool)
                or self.parallel_min_work < 0):
            raise OptionError("option 'parallel_min_work' must be a non-negative integer, "
                              f"not {self.parallel_min_work!r}")
        if not isinstance(self.unroll, int) or isinstance(self.unroll, bool) or not 0 <= self.unroll <= 64:
            raise OptionError(f"option 'unroll' must be an integer from 0 to 64, not {self.unroll!r}")
        if self.partition is not None and (
                isinstance(self.partition, str) or not all(
                    not isinstance(g, str) and all(isinstance(n, str) for n in g) for g in self.partition)):
            raise OptionError("option 'partition' must be groups of statement names",
                              hint="e.g. partition=[['S0', 'S1'], ['S2']]")
        if self.partition is not None:
            names = [n for g in self.partition for n in g]
            if any(len(g) == 0 for g in self.partition):
                raise OptionError("option 'partition' has an empty group",
                                  hint="every group names at least one statement, e.g. "
                                       "partition=[['S0', 'S1'], ['S2']]")
            if len(set(names)) != len(names):
                twice = sorted({n for n in names if names.count(n) > 1})
                raise OptionError(f"option 'partition' names {', '.join(twice)} more than once",
                                  hint="each statement belongs to one group")
        _check_gpu_sizes(self.gpu_block, self.gpu_grid)
        if self.cc is not None and (not isinstance(self.cc, str) or not self.cc):
            raise OptionError(f"option 'cc' must be a compiler command name, not {self.cc!r}")
        if self.cflags is not None:
            if isinstance(self.cflags, str) or not all(isinstance(f, str) for f in self.cflags):
                raise OptionError("option 'cflags' must be a list of strings",
                                  hint="e.g. cflags=['-O2', '-march=native']")

    @classmethod
    def create(cls, **kwargs: object) -> Options:
        """Options from keyword arguments, with a clear error for unknown names."""
        known = {f.name for f in fields(cls)}
        for name in kwargs:
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known options: {', '.join(sorted(known))}"
                raise OptionError(f"unknown option '{name}'", hint=hint)
        for name in ("cflags", "tile_sizes", "gpu_block", "gpu_grid"):
            if isinstance(kwargs.get(name), list):
                kwargs[name] = tuple(kwargs[name])  # type: ignore[arg-type]
        if "band_config" in kwargs:
            kwargs["band_config"] = _normalise_band_config(kwargs["band_config"])
        if isinstance(kwargs.get("records"), os.PathLike):
            kwargs["records"] = os.fspath(kwargs["records"])  # type: ignore[call-overload]
        if isinstance(kwargs.get("partition"), (list, tuple)):
            kwargs["partition"] = tuple(tuple(g) if isinstance(g, (list, tuple)) else g
                                        for g in kwargs["partition"])  # type: ignore[union-attr]
        return cls(**kwargs)  # type: ignore[arg-type]

    def with_(self, **kwargs: object) -> Options:
        """A copy with some fields changed (checked like ``create``)."""
        return Options.create(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **kwargs})

    def key(self) -> str:
        """A stable text form for cache keys."""
        return repr(tuple((f.name, getattr(self, f.name)) for f in fields(self)))


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of: {', '.join(choices)}"
        raise OptionError(f"option '{name}' cannot be {value!r}", hint=hint)


def _normalise_band_config(value: object) -> object:
    """A mapping or a list of pairs as sorted (knob, value) pairs (one order: the repr,
    and with it the cache keys, is the same however the settings were given); anything
    else is left for the check to refuse."""
    if isinstance(value, Mapping):
        value = list(value.items())
    if isinstance(value, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
            for p in value):
        # numpy integers (a record read back, a sampler's draw) count as integers
        return tuple(sorted((k, int(v) if hasattr(v, "__index__") and not isinstance(v, bool)
                             else v) for k, v in value))
    return value


_BAND_CONFIG_HINT = ('e.g. band_config={"S0+S1@0/tile0": 32, "S0+S1@0/unroll": 4}; '
                     "polycomp.tuning.space_of(kernel) lists a kernel's knobs")


def _check_band_config(config: object) -> None:
    if not isinstance(config, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in config):
        raise OptionError(f"option 'band_config' must map knob names to integers, "
                          f"not {config!r}", hint=_BAND_CONFIG_HINT)
    names = [k for k, _ in config]
    if len(set(names)) != len(names):
        raise OptionError("option 'band_config' names a knob more than once",
                          hint=_BAND_CONFIG_HINT)
    for name, value in config:
        match = BAND_KNOB.fullmatch(name) or GPU_KNOB.fullmatch(name)
        if match is None:
            raise OptionError(f"option 'band_config': '{name}' is no band knob",
                              hint="a knob is '<band>/tile<m>', '<band>/unroll', "
                                   "'<band>/simd', '<band>/l2', 'gpu/threads', 'gpu/x' or "
                                   "'gpu/grid'; " + _BAND_CONFIG_HINT)
        knob = match.group("knob")
        low, high = ((1, MAX_TILE) if knob.startswith("tile") else (0, 64) if knob == "unroll"
                     else (-1, 1023) if knob == "simd" else (0, 1) if knob == "l2"
                     else (1, MAX_BLOCK_THREADS) if knob in ("threads", "x")
                     else (1, GRID_AXIS_LIMITS[0]))
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise OptionError(f"option 'band_config': '{name}' must be an integer from "
                              f"{low} to {high}, not {value!r}", hint=_BAND_CONFIG_HINT)


# CUDA's limits: threads per block (in all, and along x, y, z), blocks along x, y, z
MAX_BLOCK_THREADS = 1024
BLOCK_AXIS_LIMITS = (1024, 1024, 64)
GRID_AXIS_LIMITS = (2**31 - 1, 65535, 65535)


def _check_gpu_sizes(block: object, grid: object) -> None:
    for name, value, limits in (("gpu_block", block, BLOCK_AXIS_LIMITS),
                                ("gpu_grid", grid, GRID_AXIS_LIMITS)):
        if value is None:
            continue
        example = "gpu_block=(32, 8)" if name == "gpu_block" else "gpu_grid=(1024, 64)"
        if (not isinstance(value, tuple) or not 1 <= len(value) <= 3 or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
            raise OptionError(f"option '{name}' must be 1 to 3 positive integers (x, y, z), "
                              f"not {value!r}", hint=f"e.g. {example}")
        for axis, (v, limit) in enumerate(zip(value, limits)):
            if v > limit:
                raise OptionError(f"option '{name}' asks for {v} along {'xyz'[axis]}; CUDA "
                                  f"allows at most {limit}", hint=f"e.g. {example}")
    if block is not None:
        threads = 1
        for v in block:  # type: ignore[union-attr]
            threads *= v
        if threads > MAX_BLOCK_THREADS:
            raise OptionError(f"option 'gpu_block' asks for {threads} threads per block; "
                              f"CUDA allows at most {MAX_BLOCK_THREADS}",
                              hint="e.g. gpu_block=(32, 8) (256 threads)")


_CONFIGURED = False


def configure_isl() -> isl.Context:
    """Set isl's context options once, for the whole process, and return the context."""
    global _CONFIGURED
    ctx = isl.DEFAULT_CONTEXT
    if not _CONFIGURED:
        # prefer outer parallel loops, as Pluto does (without the option, cholesky's
        # schedule took minutes when isl still scheduled the specialised program)
        ctx.set_schedule_outer_coincidence(1)
        ctx.set_schedule_serialize_sccs(0)  # let the isl scheduler fuse across SCCs
        # isl's guard against schedules that break coalescing adds constraints whose ILPs
        # grow with the (specialised) loop bounds: ludcmp took 0.5 s at MINI, 45 s at
        # MEDIUM and more than ten minutes at LARGE; 0.4 s at LARGE without it
        ctx.set_schedule_treat_coalescing(0)
        ctx.set_tile_scale_tile_loops(0)  # tile loops count tiles, not points
        ctx.set_tile_shift_point_loops(1)  # point loops run from 0 to the tile size
        _CONFIGURED = True
    return ctx


__all__ = ["Options", "configure_isl", "replace", "SCHEDULERS", "FUSIONS", "TUNINGS",
           "BAND_KNOB"]
