"""ONNX import, step 1: a model from a path, bytes or a ModelProto, checked and safe to read.

Input: what the user handed ``polycomp.onnx.InferenceSession``. Output: a checked
``onnx.ModelProto`` with its external data loaded, and the folder it came from. External
data must lie inside the model's folder (a hostile model must not make polycomp read
``/etc/passwd``); every problem is a PolycompError naming the tensor or node.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from polycomp.errors import ArgumentError, Location, ParseError, PolycompError, UnsupportedError

try:  # the onnx extra: polycomp runs without it, the ONNX entry points need it
    import onnx
except ImportError:  # pragma: no cover - exercised only without the extra
    onnx = None  # type: ignore[assignment]

# the default domain's opsets the lowering is written for (onnx's own limit above)
MIN_OPSET = 7


class ModelError(PolycompError):
    """An ONNX model that is malformed, inconsistent or hostile."""


class NeedsValueError(UnsupportedError):
    """A value that must be known at compile time (a shape, axes, pads or scales input)
    is not. The session catches it: when the value comes from small graph inputs, it
    compiles the model once per distinct value of those inputs (as it does per shape)."""

    def __init__(self, message: str, value: str, location=None, hint: str | None = None):
        super().__init__(message, location, hint)
        self.value = value


def require_onnx() -> None:
    if onnx is None:
        raise UnsupportedError("the ONNX frontend needs the onnx package",
                               hint="pip install 'polycomp[onnx]'")


@dataclass(frozen=True)
class LoadedModel:
    model: onnx.ModelProto  # type: ignore[name-defined]
    folder: str | None  # where external data may be read from; None for bytes/protos
    label: str  # for messages: the file name or "<bytes>"
    digest: str = ""  # sha256 of the model's bytes, its weights included


def load_model(source: object, checked: Callable[[str], bool] | None = None) -> LoadedModel:
    """Read and check a model; the user's mistakes are PolycompErrors. ``checked(digest)``
    says whether a model of these bytes passed onnx's checker before (the model cache
    keeps that): then the checker, seconds on a model of 500 MB, is not run again."""
    require_onnx()
    data = None
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        folder, label = None, "<ModelProto>"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        model = _parse(data, "<bytes>")
        folder, label = None, "<bytes>"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ArgumentError(f"cannot read the model file {path!r}: {exc.strerror}",
                                hint="pass the path of an .onnx file, its bytes or a ModelProto"
                                ) from None
        model = _parse(data, path)
        folder, label = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    else:
        raise ArgumentError(f"an ONNX model is a path, bytes or an onnx.ModelProto, not "
                            f"{type(source).__name__}",
                            hint="e.g. InferenceSession('model.onnx')")
    if _load_external(model, folder, label) or data is None:
        data = model.SerializeToString(deterministic=True)  # the external weights in it
    digest = hashlib.sha256(data).hexdigest()
    if checked is not None and checked(digest):
        _check_opsets(model, label)
    else:
        _check(model, label)
    return LoadedModel(model, folder, label, digest)


def _parse(data: bytes, label: str):
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise ParseError(f"{label} is not an ONNX model: {exc}",
                         hint="pass a serialised onnx.ModelProto (.onnx file)") from None
    if not model.HasField("graph"):
        raise ParseError(f"{label} is not an ONNX model: it has no graph",
                         hint="pass a serialised onnx.ModelProto (.onnx file)")
    return model


def _external_tensors(model):
    """Every TensorProto of the model that may hold data: initializers (dense and sparse)
    and tensor attributes, in the main graph, in every subgraph (If, Loop, Scan bodies)
    and in the model's local functions. A tensor missed here would keep its external
    location, and a later reader (onnx's reference evaluator folding a constant) would
    open it relative to the current directory."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _attribute_tensors(node)


def _graph_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _attribute_tensors(node)


def _attribute_tensors(node):
    for a in node.attribute:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("sparse_tensor"):
            yield a.sparse_tensor.values
            yield a.sparse_tensor.indices
        for sparse in a.sparse_tensors:
            yield sparse.values
            yield sparse.indices
        if a.HasField("g"):
            yield from _graph_tensors(a.g)
        for g in a.graphs:
            yield from _graph_tensors(g)


def _load_external(model, folder: str | None, label: str) -> bool:
    """Read external data, only from regular files inside ``folder``; whether there was
    any."""
    from onnx import external_data_helper as X
    found = False
    for tensor in _external_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        found = True
        info = {e.key: e.value for e in tensor.external_data}
        where = Location(node=tensor.name)
        if folder is None:
            raise ModelError(f"tensor '{tensor.name}' keeps its data in an external file, but "
                             "the model was given as bytes or a ModelProto", where,
                             hint="pass the model's path, so that its folder is known")
        location = info.get("location", "")
        target = _inside(folder, location)
        if target is None:
            raise ModelError(f"tensor '{tensor.name}' names external data {location!r} outside "
                             "the model's folder", where,
                             hint="external data files must lie in the model's folder")
        if not os.path.isfile(target):  # also refuses a folder, a FIFO, a device
            raise ModelError(f"tensor '{tensor.name}': external data file {location!r} "
                             "not found", where)
        try:
            X.load_external_data_for_tensor(tensor, folder)
        except Exception as exc:
            raise ModelError(f"tensor '{tensor.name}': cannot read external data {location!r}: "
                             f"{exc}", where) from None
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return found


def _inside(folder: str, location: str) -> str | None:
    """The real path of ``location`` relative to ``folder`` when it stays inside it (no
    absolute path, no ``..`` or symbolic link leading out), else None."""
    if not location or "\0" in location or os.path.isabs(location) \
            or location.startswith(("/", "\\")):
        return None
    try:
        root = os.path.realpath(folder)
        target = os.path.realpath(os.path.join(root, location))
        if os.path.commonpath([target, root]) != root or target == root:
            return None
    except (ValueError, OSError):  # odd characters, a path on another drive
        return None
    return target


def _check(model, label: str) -> None:
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx.checker.ValidationError, and C++ errors on odd protos
        # the checker's message spans lines ("... input 'w' of node: \nname: n1 OpType:
        # Add\n is not output of any previous nodes."): one line, of bounded length
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        message = message.replace("==> Context: ", "") or type(exc).__name__
        if len(message) > 400:
            message = message[:400] + "..."
        node = _node_in_message(model, str(exc))
        raise ModelError(f"{label} fails onnx's checker: {message}",
                         Location(node=node) if node else None,
                         hint="the model is malformed; check it with onnx.checker.check_model"
                         ) from None
    _check_opsets(model, label)


def _check_opsets(model, label: str) -> None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version < MIN_OPSET:
            raise UnsupportedError(f"{label} uses opset {opset.version} of the default domain; "
                                   f"polycomp reads opset {MIN_OPSET} and later",
                                   hint="convert it with onnx.version_converter")


def _node_in_message(model, message: str) -> str | None:
    """The node the checker's message is about: its context line reads
    ``Bad node spec for node. Name: <name> OpType: <op>``; older messages quote it."""
    import re
    match = re.search(r"[Nn]ame: (.*?) OpType: (\S+)", message)
    if match is not None:
        name, op = match.group(1), match.group(2)
        return f"{name} ({op})" if name else f"a {op} node"
    for node in model.graph.node:
        if node.name and f"'{node.name}'" in message:
            return node.name
    return None
