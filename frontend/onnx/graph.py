"""ONNX import, step 2: a checked model specialised to input shapes, as a static graph.

Input: a :class:`model.LoadedModel` and the shapes of its runtime inputs. Output: a
:class:`Graph` whose every value has a dtype and constant extents, whose nodes are in
dependence order, and whose compile-time computable nodes are folded away: initializers,
``Constant`` nodes, ``Shape``/``Size`` of statically shaped values and every node whose
inputs are all constants (torch's exporter wraps each Reshape in a Shape, Gather,
Unsqueeze, Concat chain) become constant values, evaluated by onnx's reference
evaluator. A dynamic dimension (batch, sequence) is fixed here, so each set of input
shapes gets its own Graph (and its own compiled groups), as TC specialises per size set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polycomp import expr as E
from polycomp.errors import Location, UnsupportedError

from .model import LoadedModel, ModelError, NeedsValueError, onnx

# TensorProto element type -> polycomp dtype (polycomp/expr.DTYPES)
ELEM_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
}
DTYPE_ELEMS = {v: k for k, v in ELEM_DTYPES.items()}
# TensorProto element types polycomp stores but does not compute with -> their storage
# format (polycomp/expr.FORMATS): a value of one has the format's storage dtype (uint16,
# uint8) and holds ml_dtypes' bit patterns; only the nodes in FORMAT_OPS (conversions)
# and the host views read or write it (ops/__init__.check_formats)
ELEM_FORMATS = {
    16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
    20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0",
    25: "uint2", 26: "int2",
}

# nodes never folded (their value differs per run) and nodes whose outputs are too big
# to keep as constants: past this many elements a constant stays a node (e.g. Expand)
NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
              "Multinomial", "Bernoulli"}
FOLD_LIMIT = 1 << 24
MAX_ELEMENTS = 1 << 31  # a larger tensor is refused before anything is allocated


@dataclass
class Value:
    name: str
    dtype: str
    shape: tuple[int, ...]
    const: np.ndarray | None = None  # in the storage dtype for a storage format
    format: str | None = None  # a storage format (ELEM_FORMATS): dtype is its storage


def storage_dtype(elem_type: int) -> str | None:
    """The dtype a storage-format element type is held in (None for other types)."""
    fmt = ELEM_FORMATS.get(elem_type)
    return None if fmt is None else E.FORMATS[fmt][0]


def to_storage(array: np.ndarray) -> np.ndarray:
    """An ml_dtypes array (bfloat16, float8, int4, ...) as its bit patterns in the storage
    dtype, without a copy; any other array as it is."""
    elem = _elem_type(array.dtype)
    dtype = storage_dtype(elem) if elem is not None else None
    return array if dtype is None else array.view(dtype)


def from_storage(array: np.ndarray, elem_type: int) -> np.ndarray:
    """The storage dtype's bit patterns as the ml_dtypes array of ``elem_type``."""
    if elem_type not in ELEM_FORMATS:
        return array
    return array.view(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def _elem_type(dtype: np.dtype) -> int | None:
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(dtype)
    except Exception:  # a dtype ONNX has no element type for
        return None


@dataclass
class Node:
    name: str  # the node's name, or "<op_type>#<k>" when it has none
    op_type: str
    domain: str
    inputs: list[str]  # "" for an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any]
    proto: Any = field(repr=False, default=None)

    @property
    def location(self) -> Location:
        return Location(node=f"{self.name} ({self.op_type})")


@dataclass
class Graph:
    name: str
    opset: int  # of the default domain
    nodes: list[Node]
    values: dict[str, Value]
    inputs: list[str]  # runtime inputs, in the model's order
    outputs: list[str]

    def value(self, name: str) -> Value:
        return self.values[name]

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    out.setdefault(name, []).append(node)
        return out


def unique_node_names(model) -> list[str]:
    """A distinct name per node, by position: its own when it has one no other node has,
    else ``<name or op type>#<position>``. Grouping and messages tell nodes apart by name,
    and ONNX does not require names to be unique (or present)."""
    given = [n.name for n in model.graph.node]
    count: dict[str, int] = {}
    for name in given:
        count[name] = count.get(name, 0) + 1
    taken: set[str] = {name for name in given if name and count[name] == 1}
    out = []
    for k, n in enumerate(model.graph.node):
        if n.name and count[n.name] == 1:
            out.append(n.name)
            continue
        name = f"{n.name or n.op_type}#{k}"
        while name in taken:
            name += "'"
        taken.add(name)
        out.append(name)
    return out


def dtype_of(elem_type: int, what: str, where: Location | None = None) -> str:
    """The dtype of values of ``elem_type`` (a storage format's storage dtype)."""
    if elem_type in ELEM_FORMATS:
        return E.FORMATS[ELEM_FORMATS[elem_type]][0]
    if elem_type not in ELEM_DTYPES:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise UnsupportedError(f"{what} has element type {name}, which polycomp does not "
                               "compute with", where,
                               hint="supported: " + ", ".join(sorted(set(ELEM_DTYPES.values())))
                               + " (and, for conversions only, " + ", ".join(
                                   ELEM_FORMATS.values()) + ")")
    return ELEM_DTYPES[elem_type]


def runtime_inputs(model) -> list:
    """The graph inputs that are not initializers (older models list weights as inputs)."""
    init = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init]


def declared_shape(info) -> tuple[int | str | None, ...]:
    """A value_info's dims: ints, symbolic names, or None for unknown."""
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return ()
    out: list[int | str | None] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return tuple(out)


def specialise(loaded: LoadedModel, shapes: dict[str, tuple[int, ...]],
               fixed: dict[str, np.ndarray] | None = None) -> Graph:
    """The model with its runtime inputs fixed to ``shapes``, shapes inferred, constants
    folded. ``fixed`` inputs are compiled in with these values (initializers): the
    session passes the small integer inputs a shape or an axis list comes from."""
    model = onnx.ModelProto()
    model.CopyFrom(loaded.model)
    for name, data in (fixed or {}).items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(data), name))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    _inline_functions(model, loaded.label)
    names = unique_node_names(model)
    check_values(model)
    _refuse_foreign_domains(model, names)
    _check_constant_nodes(model.graph)
    for sparse in model.graph.sparse_initializer:
        raise UnsupportedError(f"sparse initializer '{sparse.values.name}' is not supported",
                               Location(node=sparse.values.name),
                               hint="store it as a dense initializer")
    for info in list(model.graph.output) + list(model.graph.value_info):
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value == -1:
                d.Clear()  # an exporter's -1 for "dynamic": left to inference
    for info in runtime_inputs(model):
        if info.name not in shapes:
            raise ModelError(f"no shape for input '{info.name}'")
        dims = info.type.tensor_type.shape
        del dims.dim[:]
        for extent in shapes[info.name]:
            dims.dim.add().dim_value = int(extent)
    consts: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        consts[t.name] = _tensor_value(t)
    nodes = _ordered(model, names)
    values: dict[str, Value] = {}
    for _ in range(8):  # infer, fold, until nothing more folds
        inferred = _infer(_without_weights(model), loaded.label, [names[k] for k, _ in nodes])
        infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.input)
                 + list(inferred.graph.output)}
        folded = _fold(model, nodes, consts, infos, opset, names)
        if not folded:
            break
    values = _values(model, nodes, consts, infos, names)
    graph = Graph(model.graph.name or "model", opset, [], values,
                  [i.name for i in runtime_inputs(model)], [o.name for o in model.graph.output])
    for k, n in nodes:
        graph.nodes.append(Node(names[k], n.op_type, n.domain, list(n.input),
                                [o if o in values else "" for o in n.output],
                                {a.name: onnx.helper.get_attribute_value(a)
                                                 for a in n.attribute}, n))
    for name in graph.outputs:
        if name not in values:
            raise ModelError(f"graph output '{name}' is not computed by any node")
    return graph


def check_values(model) -> None:
    """The graph's inputs and outputs are tensors of element types polycomp computes with
    or stores (a sequence, map or optional value, or a string/complex tensor, is refused
    by name)."""
    for kind, infos in (("input", runtime_inputs(model)), ("output", model.graph.output)):
        for info in infos:
            where = Location(node=info.name)
            which = info.type.WhichOneof("value")
            if kind == "output" and (which is None or (
                    which == "tensor_type" and not info.type.tensor_type.elem_type)):
                continue  # an output may leave its type to inference
            if which != "tensor_type":
                raise UnsupportedError(f"graph {kind} '{info.name}' is a "
                                       f"{(which or 'untyped').replace('_type', '')} value, not "
                                       "a tensor", where,
                                       hint="polycomp compiles models over tensors")
            dtype_of(info.type.tensor_type.elem_type, f"graph {kind} '{info.name}'", where)


def _check_constant_nodes(graph) -> None:
    """Constant nodes (in subgraphs too) whose value would be too large once dense are
    refused before shape inference: its data propagation densifies a ``sparse_value``,
    and 12 bytes of a file can declare 2^40 elements (the process would be killed)."""
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _check_constant_nodes(g)
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        for a in node.attribute:
            dims = list(a.t.dims) if a.HasField("t") else \
                list(a.sparse_tensor.dims) if a.HasField("sparse_tensor") else None
            limit = FOLD_LIMIT if a.HasField("sparse_tensor") else MAX_ELEMENTS
            if dims is not None and (any(d < 0 for d in dims)
                                     or np.prod(dims, dtype=np.float64) > limit):
                raise ModelError(f"Constant node '{node.name or ''.join(node.output[:1])}' has a value "
                                 f"of shape {dims}",
                                 Location(node=f"{node.name or ''.join(node.output[:1])} (Constant)"),
                                 hint="every extent must be >= 0 and the value below 2^31 "
                                      "elements (2^24 for a sparse one)")


def _inline_functions(model, label: str) -> None:
    """Calls of the model's local functions replaced by their bodies (onnx's inliner)."""
    if not len(model.functions):
        return
    try:
        from onnx import inliner
        inlined = inliner.inline_local_functions(model)
    except Exception as exc:
        raise ModelError(f"cannot inline the local functions of {label}: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                         ) from None
    model.CopyFrom(inlined)


def _refuse_foreign_domains(model, names: list[str]) -> None:
    """A node of another domain than ONNX's default one (a custom op, ai.onnx.ml) is
    refused before shape inference, which cannot see through it."""
    for k, n in enumerate(model.graph.node):
        if n.domain not in ("", "ai.onnx"):
            raise UnsupportedError(f"node '{names[k]}': op type '{n.op_type}' of domain "
                                   f"'{n.domain}' is not supported",
                                   Location(node=f"{names[k]} ({n.op_type})"),
                                   hint="polycomp lowers ops of the default ONNX domain; "
                                        "polycomp.onnx.supported_ops() lists them")


def _refuse_unknown_op(name: str, node) -> None:
    """An op polycomp does not lower, named as such (rather than by the shape inference
    could not give its output)."""
    from .ops import HOST_OPS, LOWERINGS, _load
    _load()
    if node.op_type not in LOWERINGS and node.op_type not in HOST_OPS:
        raise UnsupportedError(f"node '{name}': op type '{node.op_type}' is not supported",
                               Location(node=f"{name} ({node.op_type})"),
                               hint="polycomp.onnx.supported_ops() lists the supported op types")


def _tensor_value(t) -> np.ndarray:
    where = Location(node=t.name)
    dtype_of(t.data_type, f"initializer '{t.name}'", where)
    if any(d < 0 for d in t.dims):
        raise ModelError(f"initializer '{t.name}' has a negative dimension {list(t.dims)}", where)
    if int(np.prod(t.dims, dtype=np.float64)) > MAX_ELEMENTS:
        raise ModelError(f"initializer '{t.name}' has {list(t.dims)} elements: too large", where)
    try:
        return onnx.numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelError(f"initializer '{t.name}' cannot be read: {exc}", where) from None


def _ordered(model, names: list[str]) -> list[tuple[int, Any]]:
    """The nodes in an order where every input is produced first (ONNX requires it;
    a cycle or a missing producer is an error naming the node)."""
    known = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    known.add("")
    pending = list(enumerate(model.graph.node))
    out: list[tuple[int, Any]] = []
    while pending:
        rest = []
        for k, n in pending:
            if all(i in known for i in n.input):
                out.append((k, n))
                known.update(n.output)
            else:
                rest.append((k, n))
        if len(rest) == len(pending):
            k, n = rest[0]
            missing = [i for i in n.input if i not in known]
            produced = {o for _, m in rest for o in m.output}
            why = "a cycle" if all(i in produced for i in missing) else "no producer"
            raise ModelError(f"input '{missing[0]}' of node '{names[k]}' has {why}",
                             Location(node=names[k]),
                             hint="every node input must be a graph input, an initializer "
                                  "or the output of an earlier node")
        pending = rest
    return out


# initializers above this many elements are left out of the model shape inference sees
# (declared as inputs of their type and shape): onnx's inference copies the whole model,
# and ResNet-50's 100 MB of weights made each round take seconds; shape arithmetic only
# ever needs small constants
INFERENCE_DATA_LIMIT = 4096


def _without_weights(model):
    """The model with its large initializers replaced by declarations."""
    big = [t for t in model.graph.initializer if np.prod(t.dims, dtype=np.float64) >
           INFERENCE_DATA_LIMIT]
    if not big:
        return model
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)  # inputs without initializers
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    declared = {i.name for i in model.graph.input}
    g.input.extend(model.graph.input)
    g.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in big if t.name not in declared)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    keep = {t.name for t in big}
    g.initializer.extend(t for t in model.graph.initializer if t.name not in keep)
    return light


def _infer(model, label: str, names: list[str]):
    added = _function_defaults(model)
    try:
        # first without data propagation, which materialises the values it propagates (a
        # constant Range of 2^40 elements would exhaust memory): a size too large is
        # refused from the shapes alone
        _check_sizes(onnx.shape_inference.infer_shapes(model, check_type=True,
                                                       strict_mode=True, data_prop=False))
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                 data_prop=True)
    except Exception as exc:
        if isinstance(exc, ModelError):
            raise
        text = str(exc).strip().splitlines()
        message = text[0] if text else type(exc).__name__
        node = None
        for k, n in enumerate(model.graph.node):
            name = names[k]
            if f"({n.op_type}, node {k}" in message or (n.name and f"node name: {n.name})"
                                                          in message):
                node = name
                break
        if node is not None and _has_function_body(model.graph.node[names.index(node)]):
            # onnx's strict inference also checks the op's function body, and some bodies
            # fail it (MeanVarianceNormalization at opset 13+ in onnx 1.23): the node's
            # own shapes are fine, so infer leniently; what stays unknown is refused later
            try:
                return onnx.shape_inference.infer_shapes(model, check_type=True,
                                                         strict_mode=False, data_prop=True)
            except Exception:
                pass
        raise ModelError(f"shape inference fails on {label}: {message}",
                         Location(node=node) if node else None,
                         hint="the model's shapes are inconsistent for these input shapes"
                         ) from None
    finally:
        for node, count in added:
            del node.attribute[len(node.attribute) - count:]


def _check_sizes(inferred) -> None:
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        shape = _static(info)
        if shape is not None and (any(d < 0 for d in shape)
                                  or np.prod(shape, dtype=np.float64) > MAX_ELEMENTS):
            raise ModelError(f"value '{info.name}' has shape {list(shape)}",
                             Location(node=info.name),
                             hint="every extent must be >= 0 and the tensor below 2^31 "
                                  "elements")


def _function_defaults(model) -> list[tuple[Any, int]]:
    """Spell out the default attributes of nodes whose op onnx defines by a function body,
    for the time of shape inference: in strict mode onnx infers through the body, whose
    nodes refer to the attributes (MeanVarianceNormalization's Constant reads ``axes``)
    and fail when the node leaves one to its default. Returns what was added, to remove."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    added = []
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        except Exception:  # an unknown op: the checker has named it already
            continue
        if not (schema.has_function or schema.has_context_dependent_function):
            continue
        present = {a.name for a in node.attribute}
        defaults = [a.default_value for name, a in schema.attributes.items()
                    if name not in present and a.default_value.name]
        if defaults:
            node.attribute.extend(defaults)
            added.append((node, len(defaults)))
    return added


def _has_function_body(node) -> bool:
    try:
        schema = onnx.defs.get_schema(node.op_type, domain=node.domain)
    except Exception:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _static(info) -> tuple[int, ...] | None:
    if info is None or not info.type.HasField("tensor_type"):
        return None
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = declared_shape(info)
    if any(not isinstance(d, int) for d in dims):
        return None
    return tuple(int(d) for d in dims)


def _fold(model, nodes: list, consts: dict[str, np.ndarray], infos: dict, opset: int,
          names: list[str]) -> bool:
    """Evaluate the nodes whose outputs are known now; they become constants."""
    from onnx.reference import ReferenceEvaluator

    changed = False
    keep = []
    for k, n in nodes:
        if n.op_type in NEVER_FOLD or n.domain not in ("", "ai.onnx"):
            keep.append((k, n))
            continue
        outputs: list[np.ndarray] | None = None
        if n.op_type in ("Shape", "Size") and n.input and n.input[0] not in consts:
            shape = _static(infos.get(n.input[0]))
            if shape is not None:
                outputs = [_shape_of(n, shape)]
        elif all(i == "" or i in consts for i in n.input):
            out_info = [_static(infos.get(o)) for o in n.output]
            if n.op_type == "Constant":  # folded whatever its size, but not past the limit
                _check_constant_size(n, names[k], out_info[0] if out_info else None)
            if all(s is not None and np.prod(s, dtype=np.float64) <= FOLD_LIMIT
                   for s in out_info) or n.op_type == "Constant":
                outputs = _evaluate(ReferenceEvaluator, n, model,
                                    {i: consts[i] for i in n.input if i}, opset, names[k])
        if outputs is None:
            keep.append((k, n))
            continue
        for name, value in zip(n.output, outputs):
            if name:
                consts[name] = np.asarray(value)
                model.graph.initializer.append(onnx.numpy_helper.from_array(
                    np.asarray(value), name))
        changed = True
    if changed:
        nodes[:] = keep
        del model.graph.node[:]
        model.graph.node.extend(n for _, n in keep)
    return changed


def _check_constant_size(node, name: str, shape: tuple[int, ...] | None) -> None:
    """A Constant whose value would be too large to build (a sparse_value with huge dense
    dims costs nothing in the file) is refused before onnx's evaluator allocates it."""
    if shape is None or any(d < 0 for d in shape) or \
            np.prod(shape, dtype=np.float64) > MAX_ELEMENTS:
        raise ModelError(f"Constant node '{name}' has shape "
                         f"{'unknown' if shape is None else list(shape)}",
                         Location(node=f"{name} (Constant)"),
                         hint="every extent must be >= 0 and the tensor below 2^31 elements")


def _shape_of(node, shape: tuple[int, ...]) -> np.ndarray:
    """Shape (with opset 15's start/end, clamped like Python slices) or Size."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return np.array(shape[start:None if end is None else int(end)], dtype=np.int64)


def _evaluate(evaluator, node, model, feeds: dict, opset: int, name: str) -> list[np.ndarray]:
    graph = onnx.helper.make_graph(
        [node], "fold",
        [onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(
            v.dtype), v.shape) for name, v in feeds.items()],
        [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o])
    one = onnx.helper.make_model(graph, opset_imports=list(model.opset_import),
                                 ir_version=model.ir_version)
    try:
        return list(evaluator(one).run(None, feeds))
    except Exception as exc:
        raise ModelError(f"cannot evaluate constant node '{name}': "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                         Location(node=f"{name} ({node.op_type})")) from None


def _values(model, nodes: list, consts: dict[str, np.ndarray], infos: dict,
            names: list[str]) -> dict[str, Value]:
    values: dict[str, Value] = {}
    for name, array in consts.items():
        elem = _elem_type(array.dtype)
        dtype = ELEM_DTYPES.get(elem) if elem is not None else None
        fmt = ELEM_FORMATS.get(elem) if elem is not None else None
        if dtype is None and fmt is None:
            raise UnsupportedError(f"constant '{name}' has dtype {array.dtype}",
                                   Location(node=name))
        if fmt is not None:
            array = to_storage(array)
            dtype = str(array.dtype)
        values[name] = Value(name, dtype, tuple(int(s) for s in array.shape), array, fmt)
    needed = [i.name for i in runtime_inputs(model)]
    for _, n in nodes:
        needed += [o for o in n.output if o]
    used = {i for _, n in nodes for i in n.input} | {o.name for o in model.graph.output}
    for name in needed:
        if name in values:
            continue
        info = infos.get(name)
        where = Location(node=name)
        shape = _static(info)
        if shape is None and name not in used:
            continue  # an output nothing reads (Dropout's mask): the node leaves it out
        if shape is None:
            producer = next(((names[k], n) for k, n in nodes if name in n.output), None)
            if producer is not None:
                _refuse_unknown_op(*producer)
                producer = f"{producer[0]} ({producer[1].op_type})"
            raise NeedsValueError(
                f"the shape of '{name}' is not known at compile time", name,
                Location(node=producer or name),
                hint="polycomp compiles a model per set of input shapes; a shape that depends "
                     "on input values (NonZero, data-dependent Reshape) is not supported")
        if any(d < 0 for d in shape) or np.prod(shape, dtype=np.float64) > MAX_ELEMENTS:
            raise ModelError(f"value '{name}' has shape {list(shape)}", where,
                             hint="every extent must be >= 0 and the tensor below 2^31 elements")
        elem = info.type.tensor_type.elem_type
        values[name] = Value(name, dtype_of(elem, f"value '{name}'", where), shape,
                             format=ELEM_FORMATS.get(elem))
    return values
