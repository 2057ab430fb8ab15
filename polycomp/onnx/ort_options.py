"""What polycomp's InferenceSession makes of onnxruntime's session arguments.

Input: the ``sess_options``, ``providers``, ``provider_options`` (constructor) and
``run_options`` (``run``) an onnxruntime user passes. Output: SessionSettings, the part
polycomp honours, after warning about every setting it does not honour, so that no
setting a user changed vanishes without a word.

What is honoured:
- ``sess_options.intra_op_num_threads``: the OpenMP threads of every run (0, onnxruntime's
  default, leaves polycomp's: the calling thread's OpenMP count, lowered while other
  processes keep cores busy; threads.call_threads).
- ``providers``: polycomp runs whole models on the CPU. A list that asks only for devices
  (CUDAExecutionProvider, TensorrtExecutionProvider, ...) is refused with an
  UnsupportedError; a device provider listed before the CPU one falls back to the CPU with
  a ProviderFallbackWarning, as onnxruntime does where a provider is not available.
- ``run_options.terminate``: a run asked to terminate raises instead of running.

Logging settings (``log_severity_level``, ``log_verbosity_level``, ``logid``, ``run_tag``)
configure onnxruntime's own log; polycomp writes none, so nothing is lost and they are
accepted quietly. Every other setting that differs from onnxruntime's default raises an
UnsupportedOptionWarning naming it. The objects are read by attribute, so onnxruntime need
not be installed (any object with those attributes serves).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polycomp.errors import ArgumentError, UnsupportedError
from polycomp.threads import max_threads


class UnsupportedOptionWarning(UserWarning):
    """An onnxruntime session or run setting that polycomp does not honour."""


class ProviderFallbackWarning(UserWarning):
    """A device execution provider was asked for; the model runs on the CPU instead."""


#: the providers a polycomp session is: it runs the model's kernels on this CPU
CPU_PROVIDERS = ("CPUExecutionProvider", "PolycompExecutionProvider")

# onnxruntime's SessionOptions attributes polycomp does not honour -> (onnxruntime's
# default, why). Enum values are compared by name, so an onnxruntime enum and its name
# both read right.
SESSION_DEFAULTS: dict[str, tuple[object, str]] = {
    "inter_op_num_threads": (0, "polycomp runs the fused groups one after another"),
    "execution_mode": ("ORT_SEQUENTIAL", "polycomp runs the fused groups one after another"),
    "execution_order": ("DEFAULT", "polycomp orders the groups itself"),
    "graph_optimization_level": ("ORT_ENABLE_ALL", "polycomp always fuses and schedules "
                                 "the whole graph"),
    "enable_profiling": (False, "use session.profile(feed) for per-group times"),
    "optimized_model_filepath": ("", "polycomp writes no optimised ONNX model"),
    "enable_cpu_mem_arena": (True, "polycomp always plans one arena per run"),
    "enable_mem_pattern": (True, "polycomp always plans one arena per run"),
    "enable_mem_reuse": (True, "polycomp always reuses buffers whose values are dead"),
    "use_deterministic_compute": (False, "not a setting of polycomp's kernels"),
    "use_per_session_threads": (True, "polycomp's kernels use OpenMP's thread pool"),
}
RUN_DEFAULTS: dict[str, tuple[object, str]] = {
    "only_execute_path_to_fetches": (False, "polycomp runs the whole plan"),
}
# attributes that only configure onnxruntime's log
LOG_SETTINGS = ("log_severity_level", "log_verbosity_level", "logid", "run_tag")


@dataclass(frozen=True)
class SessionSettings:
    """What the session honours: ``threads`` for its runs (None: polycomp's default)."""

    threads: int | None = None


def _plain(value: object) -> object:
    """An onnxruntime enum as its name (ExecutionMode.ORT_SEQUENTIAL -> 'ORT_SEQUENTIAL')."""
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else value


def _warn_changed(obj: object, defaults: Mapping[str, tuple[object, str]], what: str) -> None:
    for attr, (default, why) in defaults.items():
        if not hasattr(obj, attr):
            continue
        value = _plain(getattr(obj, attr))
        if value != default:
            warnings.warn(f"{what}.{attr} = {value!r} is not honoured by polycomp ({why}); "
                          f"the session runs as with {default!r}",
                          UnsupportedOptionWarning, stacklevel=4)


def session_settings(sess_options: object = None, providers: object = None,
                     provider_options: object = None) -> SessionSettings:
    """The settings of a session from onnxruntime's constructor arguments; warnings for
    what is not honoured, an error for providers polycomp cannot run on."""
    check_providers(providers, provider_options)
    if sess_options is None:
        return SessionSettings()
    threads = getattr(sess_options, "intra_op_num_threads", 0)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ArgumentError(f"sess_options.intra_op_num_threads must be a non-negative "
                            f"integer, not {threads!r}",
                            hint="0 leaves polycomp's default thread count")
    if threads > max_threads():
        raise ArgumentError(f"sess_options.intra_op_num_threads = {threads} is more threads "
                            f"than this machine runs usefully ({max_threads()})",
                            hint="0 leaves polycomp's default thread count")
    _warn_changed(sess_options, SESSION_DEFAULTS, "sess_options")
    return SessionSettings(threads=threads or None)


def check_providers(providers: object, provider_options: object = None) -> None:
    """Refuse providers polycomp cannot run a model on; warn where it falls back to the
    CPU or drops a provider's options."""
    if providers is None:
        if provider_options is not None:
            raise ArgumentError("provider_options given without providers",
                                hint="pass providers=[...] with one options dict each")
        return
    if isinstance(providers, (str, bytes)) or not isinstance(providers, Sequence):
        raise ArgumentError(f"providers must be a list of provider names, not {providers!r}",
                            hint="e.g. providers=['CPUExecutionProvider']")
    names: list[str] = []
    options: list[object] = []
    for entry in providers:
        if isinstance(entry, tuple) and len(entry) == 2:  # (name, options), as onnxruntime
            entry, opts = entry
            options.append(opts)
        if not isinstance(entry, str):
            raise ArgumentError(f"a provider is a name or a (name, options) pair, not "
                                f"{entry!r}", hint="e.g. providers=['CPUExecutionProvider']")
        names.append(entry)
    if provider_options is not None:
        if isinstance(provider_options, Mapping) or not isinstance(provider_options, Sequence) \
                or len(provider_options) != len(names):
            raise ArgumentError("provider_options must be a list with one dict per provider",
                                hint=f"providers: {names}")
        options = list(provider_options)
    cpu = [n for n in names if n in CPU_PROVIDERS]
    if not cpu:
        raise UnsupportedError(
            f"polycomp runs whole ONNX models on the CPU; providers {names} ask for none",
            hint="add 'CPUExecutionProvider' (or leave providers out); whole models on the "
                 "CUDA target are not built yet")
    before = names[:names.index(cpu[0])]
    if before:
        warnings.warn(f"providers {before} are not available in polycomp: the model runs "
                      f"on the CPU ({cpu[0]})", ProviderFallbackWarning, stacklevel=4)
    for name, opts in zip(names, options):
        if name in CPU_PROVIDERS and opts:
            warnings.warn(f"options {dict(opts)!r} of {name} are not honoured by polycomp",
                          UnsupportedOptionWarning, stacklevel=4)


def check_run_options(run_options: object) -> None:
    """Warn about a run's settings polycomp does not honour; a run asked to terminate
    raises, as onnxruntime's does."""
    if run_options is None:
        return
    if getattr(run_options, "terminate", False) is True:
        raise ArgumentError("run_options.terminate is set: the run was asked to stop",
                            hint="set run_options.terminate = False to run")
    _warn_changed(run_options, RUN_DEFAULTS, "run_options")
