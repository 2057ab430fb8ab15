"""``polycomp.inspect``: what the C compiler made of a compiled kernel or model.

Place in the pipeline: after the build, for users and tests. Input: a Kernel (with the
sizes of the variant to look at), an onnx InferenceSession (with input shapes), or the
path of a library polycomp built. Output: machine_code.MachineCodeReport, per loop the
schedule marks vector: packed and scalar FMAs, the vector width, the accumulators of its
packed FMAs (the register tile) and, for a loop compiled to scalar code, gcc's reason;
for a model each loop also names its fusion group (``report.groups``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import ArgumentError
from .machine_code import MachineCodeReport, inspect_binary


def inspect(kernel_or_session: object, sizes: Mapping[str, int] | None = None, *,
            shapes: Mapping[str, Sequence[int]] | None = None) -> MachineCodeReport:
    """The machine-code report of a Kernel's variant at ``sizes`` (built if it was not),
    of an InferenceSession's model at input ``shapes`` (the declared ones by default),
    or of a library at a path. ``print(report.summary())`` shows it as a table."""
    from .onnx.session import InferenceSession  # noqa: PLC0415 - onnx is optional
    from .runtime import Kernel  # noqa: PLC0415 - runtime imports the build, which us

    if isinstance(kernel_or_session, (str, os.PathLike)):
        return inspect_binary(kernel_or_session)
    if isinstance(kernel_or_session, InferenceSession):
        compiled = kernel_or_session.compiled(shapes)
        report = inspect_binary(compiled.library.path)
        report.groups = _groups_by_source(report, {
            step.name: ", ".join(f"{n.name} ({n.op_type})" for n in step.nodes)
            for step in compiled.plan.groups if step.program is not None}, compiled)
        return report
    if isinstance(kernel_or_session, Kernel):
        variant = kernel_or_session.specialize(dict(sizes or {}))
        build = getattr(variant.target, "build", None)
        if build is None:
            raise ArgumentError(f"target '{variant.options.target}' builds no host library "
                                f"to inspect", hint="inspect an OpenMP kernel")
        path = build(variant.compiled.source, variant.options)
        return inspect_binary(path)
    raise ArgumentError(f"inspect() takes a Kernel, an InferenceSession or a library path, "
                        f"not {type(kernel_or_session).__name__}",
                        hint="e.g. polycomp.inspect(polycomp.compile(src), sizes={'N': 64})")


def _groups_by_source(report: MachineCodeReport, nodes: Mapping[str, str],
                      compiled: object) -> dict[str, str]:
    """source path -> "group: its nodes" (the groups that share one kernel, joined), by
    the text each group's kernel printed: a model's translation unit is that text after
    one ``#define`` renaming its entry (onnx/library.py)."""
    texts: dict[str, list[str]] = {}
    for name, described in nodes.items():
        kernel = compiled.kernels[name]  # type: ignore[attr-defined]
        text = kernel.specialize({}, build=False).compiled.source.text
        texts.setdefault(text, []).append(f"{name}: {described}")
    out: dict[str, str] = {}
    for source in {c.loop.source for c in report.loops}:
        try:
            body = Path(source).read_text(errors="replace")
        except OSError:
            continue
        if body.startswith("#define "):
            body = body.split("\n", 1)[1] if "\n" in body else ""
        if body in texts:
            out[source] = "; ".join(texts[body])
    return out
