"""The ONNX importer: a ``.onnx`` file (or ``onnx.ModelProto``) -> a :class:`~fastane.model.graph.Graph`.

The only module of fastane that imports ``onnx`` (lazily, when a model is loaded: the
``onnx`` extra).  Each ONNX op type is imported by the op record that names it
(:class:`~fastane.model.ops.opdef.OnnxName` in :data:`~fastane.model.ops.OPS`): its parse
normalises the attributes (``pads`` as ``(begin, end)`` pairs, ``auto_pad`` lower-case) and
turns operands that older opsets gave as attributes (``Squeeze`` axes, ``Clip`` bounds,
``Slice`` starts/ends, ``Pad`` pads, ``Reduce*`` axes, TopK ``k``, Split ``split``,
Upsample ``scales``) into constant inputs, through an :class:`OnnxContext`.

A hostile file gets a :class:`~fastane.errors.ModelError` before anything large is
allocated: the protobuf must parse, every initializer's declared size is checked against
:data:`~fastane.model.graph.MAX_TENSOR_ELEMENTS` and against the bytes it actually holds,
external data is refused, and ops outside the vocabulary are named.  Every node is checked
against ONNX's schema of its op (required attributes, attribute types, input and output
counts, no required input left empty), and whatever else goes wrong while a node is
converted is a ModelError naming the node.  A string field that is not valid UTF-8 (which
protobuf hands over as bytes) becomes a ``str`` with ``\\xNN`` escapes.

GELU spelled out in ONNX ops (the opsets before ``Gelu``) becomes one ``gelu`` node
(:mod:`.fuse`).
"""

from __future__ import annotations

import os

import numpy as np

from ....errors import ModelError, ModelNotImplementedError, quote
from ...budget import MAX_SUBGRAPH_DEPTH, beyond, check_nodes
from ...control import PLACEHOLDER, Body
from ...graph import DTYPES, Graph, Node, TensorType, check_size
from ...ops import OPS
from ...ops.opdef import ANE_FAMILIES
from ...tensor import read_protobuf
from .fuse import fuse_gelu

__all__ = ["load", "from_proto", "SUPPORTED", "docs_table"]


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - the extra is part of the test extra
        raise ImportError("loading ONNX models needs the onnx package: pip install 'fastane[onnx]'") from None
    return onnx


#: with ``weights=False``, initializers above this many elements are not decoded
SHAPE_ONLY_ABOVE = 4096


def load(path, weights: bool = True) -> Graph:
    """Read and import the ONNX model at ``path``.  ``weights=False``: large initializers
    keep their shape and dtype only (a read-only zero placeholder, no copy): enough for a
    stats-only report, refused by anything that computes."""
    onnx = _onnx()
    path = os.fspath(path)
    data = read_protobuf(path, "model")
    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise ModelError(f"{path}: not a valid ONNX model (protobuf parse failed: {exc})") from None
    if not proto.HasField("graph"):
        raise ModelError(f"{path}: not an ONNX model (no graph; is the file truncated or another format?)")
    return from_proto(proto, name=os.path.basename(path), weights=weights)


def _np_dtype(elem_type: int, what: str) -> np.dtype:
    onnx = _onnx()
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise ModelError(f"{what}: unsupported ONNX element type {elem_type}") from None
    if dt.type not in DTYPES:
        raise ModelError(f"{what}: element type {dt.name} is not supported by fastane")
    return dt


_TYPED_FIELDS = {
    np.dtype(np.float32): "float_data",
    np.dtype(np.float64): "double_data",
    np.dtype(np.int64): "int64_data",
    np.dtype(np.int32): "int32_data",
    np.dtype(np.int16): "int32_data",
    np.dtype(np.int8): "int32_data",
    np.dtype(np.uint8): "int32_data",
    np.dtype(np.bool_): "int32_data",
    np.dtype(np.float16): "int32_data",
}


def _tensor(t, what: str, values: bool = True) -> np.ndarray:
    """A TensorProto as a numpy array, its declared size checked before conversion
    (``values=False``: a zero placeholder of its shape when it is large)."""
    onnx = _onnx()
    what = f"{what} {quote(_text(t.name))}" if t.name else what
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise ModelError(
            f"{what}: external tensor data is not supported by fastane yet "
            f"(save the model with its weights inside the file)"
        )
    dt = _np_dtype(t.data_type, what)
    n = check_size(tuple(int(d) for d in t.dims), what)
    if t.segment.end or t.segment.begin:
        raise ModelError(f"{what}: segmented tensors are not supported")
    if t.HasField("raw_data") or t.raw_data:
        have = len(t.raw_data)
        if have != n * dt.itemsize:
            raise ModelError(
                f"{what}: declares shape {quote(tuple(t.dims), marks=False)} ({n * dt.itemsize} bytes of "
                f"{dt.name}) but holds {have} bytes"
            )
    else:
        have = len(getattr(t, _TYPED_FIELDS[dt]))
        if have != n:
            raise ModelError(
                f"{what}: declares shape {quote(tuple(t.dims), marks=False)} ({n} values) but holds {have}"
            )
    if not values and n > SHAPE_ONLY_ABOVE:
        return np.broadcast_to(np.zeros((), dt), tuple(int(d) for d in t.dims))
    try:
        arr = onnx.numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelError(f"{what}: cannot decode tensor data ({exc})") from None
    return np.asarray(arr.astype(dt, copy=False), order="C")


def _text(s) -> str:
    """A string field of the protobuf as ``str``: protobuf gives the bytes of a field that
    is not valid UTF-8, here decoded with ``\\xNN`` escapes for those bytes."""
    return s.decode("utf-8", "backslashreplace") if isinstance(s, bytes) else s


def _value_type(vi, what: str) -> TensorType:
    name = _text(vi.name)
    what = f"{what} {quote(name)}"
    if not vi.type.HasField("tensor_type"):
        raise ModelError(f"{what}: only tensor inputs are supported")
    tt = vi.type.tensor_type
    dt = _np_dtype(tt.elem_type, what)
    if not tt.HasField("shape"):
        raise ModelError(f"{what}: has no declared shape (rank unknown)")
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value != -1:
            if d.dim_value < 0:
                raise ModelError(f"{what}: negative dimension {d.dim_value}")
            dims.append(int(d.dim_value))
            continue
        # a named symbol is one size wherever it appears (only compared: its unprintable
        # characters escaped keep messages one line); -1, '?' and an empty dimension are
        # each their own unknown, named "input:axis"
        sym = _text(d.dim_param)
        dims.append(
            quote(sym, None, marks=False) if sym not in ("", "?") else f"{quote(name, None, marks=False)}:{i}"
        )
    return TensorType(dt, tuple(dims))


def _attrs(node, where: str) -> tuple:
    """``(values, types)``: the node's attributes by name, and their ONNX attribute types."""
    onnx = _onnx()
    out, types = {}, {}
    for a in node.attribute:
        k = _text(a.name)
        try:
            v = onnx.helper.get_attribute_value(a)
        except Exception as exc:
            raise ModelError(f"{where}: bad attribute {quote(k)} ({quote(str(exc), marks=False)})") from None
        if isinstance(v, bytes):
            v = _text(v)
        elif isinstance(v, list):
            v = [_text(x) for x in v]
        out[k], types[k] = v, a.type
    return out, types


def _check_schema(op: str, opset: int, types: dict, ins: list, outs: list, where: str) -> None:
    """The node against ONNX's schema of ``op`` at ``opset`` (the newest one when the op is
    newer than the model's opset): required attributes present, every known attribute of
    its declared type, the input and output counts within the op's, no required input
    left empty (a deprecated op's inputs are not checked: fastane also takes their older
    forms).  Attributes the schema does not name are ignored."""
    from onnx import AttributeProto, defs

    try:
        schema = defs.get_schema(op, opset, "")
    except (defs.SchemaError, TypeError):  # no schema at this opset; TypeError: beyond int32
        try:
            schema = defs.get_schema(op)
        except defs.SchemaError:  # pragma: no cover - every op of SUPPORTED has a schema
            return
    ver = f"{op}-{schema.since_version}"
    missing = [k for k, spec in schema.attributes.items() if spec.required and k not in types]
    for k, spec in schema.attributes.items():
        if k in types and types[k] != int(spec.type):
            got = (
                AttributeProto.AttributeType.Name(types[k])
                if types[k] in AttributeProto.AttributeType.values()
                else types[k]
            )
            raise ModelError(f"{where}: attribute {k!r} is {got}, {ver} takes {spec.type.name}")
    if missing:  # after the wrong types: a node with both is named for its wrong attribute
        raise ModelError(f"{where}: the required attribute {missing[0]!r} of {ver} is missing")
    counts = [("output", outs, schema.min_output, schema.max_output)]
    if not schema.deprecated:  # Upsample, Scatter: fastane also takes their older inputs
        counts.append(("input", ins, schema.min_input, schema.max_input))
    for what, names, lo, hi in counts:
        if not lo <= len(names) <= hi:
            takes = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi < 1 << 30 else f"at least {lo}"
            raise ModelError(
                f"{where}: has {len(names)} {what}{'s' if len(names) != 1 else ''}, {ver} takes {takes}"
            )
    for i, (formal, name) in enumerate(zip([] if schema.deprecated else schema.inputs, ins)):
        if not name and formal.option == defs.OpSchema.FormalParameterOption.Single:
            raise ModelError(f"{where}: input {i} ({formal.name}) is required but given as ''")


def _onnx_records() -> dict:
    """ONNX op type -> ``[(fastane op, OnnxName), ...]``, from the records of :data:`OPS`."""
    table: dict = {}
    for fop, d in OPS.items():
        for o in d.onnx:
            table.setdefault(o.name, []).append((fop, o))
    return table


_RECORDS = _onnx_records()
#: ONNX op types the importer maps (default domain): the records' and Constant
SUPPORTED = sorted(set(_RECORDS) | {"Constant"})


def docs_table() -> list:
    """The lines of docs/models.md's table of the ONNX op types the importer maps, from the
    records: where each record's op may run (its placement family, where the family's rule
    takes it, else the host; ``kind`` "layout"; the host), its ONNX op types and their
    ``doc``."""
    rows: dict = {runs: [] for runs in ANE_FAMILIES.values()}
    rows.update({"layout (host)": ["Constant (a constant of the graph)"], "host": []})
    for fop, d in OPS.items():
        runs = ANE_FAMILIES[d.ane] if d.ane else "layout (host)" if d.kind == "layout" else "host"
        rows[runs] += [f"{o.name} (`{fop}`{'; ' + o.doc if o.doc else ''})" for o in d.onnx]
    lines = ["| runs (else host) | ONNX op (`fastane op`) |", "| --- | --- |"]
    return lines + [f"| {runs} | {', '.join(sorted(ops))} |" for runs, ops in rows.items() if ops]


class _Builder:
    """The nodes and constants of a graph being imported: the model's, or a subgraph's
    (``parent`` the enclosing graph's builder, ``prefix`` what its own names get: the
    names of a subgraph are its own, and it reads the enclosing graphs' tensors, which
    :meth:`ref` records in ``outer``)."""

    def __init__(self, opset: int, parent: "_Builder | None" = None, prefix: str = ""):
        self.opset, self.parent, self.prefix = opset, parent, prefix
        self.root = self if parent is None else parent.root
        self.consts: dict = {}
        self.nodes: list = []
        self.local: dict = {}  # a subgraph's ONNX names -> its own (prefixed) names
        self.outer: dict = {}  # the enclosing graphs' tensors it reads, in order
        self.ranks: dict = {} if parent is None else self.root.ranks  # name -> declared rank
        self._n = 0

    def const(self, value, dtype) -> str:
        self.root._n += 1
        name = f"fastane::const{self.root._n}"
        self.consts[name] = np.asarray(np.asarray(value, dtype), order="C")
        return name

    def ref(self, name: str) -> str:
        """The tensor an ONNX node input ``name`` names here: this graph's own, else the
        enclosing graph's (then read from outside)."""
        if not name or self.parent is None:
            return name
        if name in self.local:
            return self.local[name]
        got = self.parent.ref(name)
        self.outer[got] = None
        return got

    def define(self, name: str) -> str:
        """The name of a tensor this graph defines (a subgraph's: prefixed)."""
        if not name or self.parent is None:
            return name
        self.local[name] = self.prefix + name
        return self.local[name]


def output_names(outs, name, where, op, n_out, keep=False) -> list:
    """The output names of the fastane node for ONNX node ``name`` (``where``: "node 'n'
    (Op)") whose outputs are ``outs``, of which fastane computes the first ``n_out``: an
    omitted (``""``) one before the last one used given a private name (with ``keep``,
    every one of the ``n_out``).  The model using a later output is a
    ModelNotImplementedError (the schema check has refused outputs the op does not
    define)."""
    used = [(i, o) for i, o in enumerate(outs) if o]
    if used and used[-1][0] >= n_out:
        i, o = used[-1]
        raise ModelNotImplementedError(
            f"{where}: fastane computes only {'output 0' if n_out == 1 else f'outputs 0 to {n_out - 1}'} "
            f"of {op}, the model uses output {i} ({quote(o)})"
        )
    last = n_out if keep else (used[-1][0] + 1 if used else 1)
    outs = list(outs[:last]) + [""] * (last - len(outs))
    return [o or f"fastane::{name}:unused{i}" for i, o in enumerate(outs)]


class OnnxContext:
    """What a record's ONNX parse (:class:`~fastane.model.ops.opdef.OnnxName`) is handed for
    one node: the model's ``opset``, the node's ``op`` type, ``name``, ``where`` (for
    messages), ``inputs``, ``outs``, and the record's op ``fop``."""

    def __init__(self, b: _Builder, op, fop, name, where, inputs, outs):
        self.opset, self.op, self.fop, self.name, self.where = b.opset, op, fop, name, where
        self.inputs, self.outs = inputs, outs
        self._b = b

    def rank_of(self, name):
        """The rank of tensor ``name`` when the model declares it, else None."""
        return self._b.ranks.get(name)

    def const(self, value, dtype) -> str:
        """The name of a new constant of ``value`` as ``dtype``."""
        return self._b.const(value, dtype)

    def tensor(self, t) -> np.ndarray:
        """A tensor attribute's value (an ONNX TensorProto, checked as initializers are)."""
        return _tensor(t, f"{self.where} attribute")

    def dtype(self, elem_type) -> np.dtype:
        """The numpy dtype of an ONNX element type (a ModelError for one fastane lacks)."""
        return _np_dtype(elem_type, self.where)

    def mk(self, attrs=None, inputs=None, n_out=1, keep=False, op=None) -> Node:
        """The record's node for the ONNX node (``inputs``: else the node's; ``op``: else the
        record's op), computing its first ``n_out`` outputs (``keep``: see :func:`output_names`)."""
        names = output_names(self.outs, self.name, self.where, self.op, n_out, keep)
        ins = list(self.inputs if inputs is None else inputs)
        return Node(op or self.fop, self.name, ins, names, attrs or {}, self.op)

    def add(self, op, suffix, inputs, outputs, attrs) -> None:
        """A node ``name/suffix`` of op ``op`` ahead of the node :meth:`mk` makes."""
        self._b.nodes.append(Node(op, f"{self.name}/{suffix}", inputs, outputs, attrs, self.op))

    def bodies(self, graphs: dict, lazy: bool = False) -> tuple:
        """``(bodies, inputs)``: the subgraphs ``graphs`` (key -> GraphProto) imported as
        :class:`~fastane.model.control.Body` (its names prefixed ``name/key/``), and the
        node's inputs: its own, then the enclosing graph's tensors the bodies read.
        ``lazy``: a body that does not import holds its error (raised if it is bound)."""
        made = {}
        for key, g in graphs.items():
            sub = _Builder(self.opset, self._b, f"{self.name}/{key}/")
            try:
                made[key] = (sub, _subgraph(g, sub, f"{self.name}/{key}"), len(g.input))
            except ModelError as exc:
                if not lazy:
                    raise
                made[key] = (None, exc, 0)
        inputs = list(self.inputs)
        pos = {}
        for sub, _, _ in made.values():
            for t in sub.outer if sub is not None else ():
                if t not in pos:
                    pos[t] = len(inputs)
                    inputs.append(t)
        out = {}
        for key, (sub, got, n_formal) in made.items():
            if sub is None:
                out[key] = Body(None, 0, (), got)
            else:
                out[key] = Body(got, n_formal, tuple(pos[t] for t in sub.outer))
        return out, inputs


def _subgraph(g, b: _Builder, name: str) -> Graph:
    """The subgraph ``g`` imported through its builder ``b``: its inputs (their types the
    node's, given when it is bound), initializers and nodes, the enclosing graphs'
    tensors it reads its inputs too."""
    formal = [b.define(_text(vi.name)) for vi in g.input]
    for t in g.initializer:
        b.consts[b.define(_text(t.name))] = _tensor(t, "initializer")
    if len(g.sparse_initializer):
        raise ModelError(f"subgraph {quote(name)}: sparse initializers are not supported by fastane")
    _declared_ranks(b, list(g.input) + list(g.value_info), lambda n: b.prefix + n)
    _convert_nodes(g, b)
    outputs = [b.ref(_text(o.name)) for o in g.output]
    b.nodes = fuse_gelu(b.nodes, b.consts, outputs)
    names = formal + list(b.outer)
    twice = next((n for i, n in enumerate(names) if n in names[:i] or n in b.consts), None)
    if twice is not None:
        raise ModelError(f"subgraph {quote(name)}: input {quote(twice)} is defined twice")
    return Graph(
        name, dict.fromkeys(names, PLACEHOLDER), outputs, b.nodes, b.consts, origin=f"onnx opset {b.opset}"
    )


def _declared_ranks(b: _Builder, infos, name_of) -> None:
    """The ranks ``infos`` (ValueInfoProto) declare, by the names ``name_of`` gives."""
    for vi in infos:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            b.ranks.setdefault(name_of(_text(vi.name)), len(vi.type.tensor_type.shape.dim))


def _nested(g, what: str) -> None:
    """The subgraphs of ``g`` nested at most :data:`MAX_SUBGRAPH_DEPTH` deep and the nodes
    of all its graphs at most :data:`~fastane.model.budget.MAX_NODES`, checked before
    anything is converted (without recursion)."""
    from onnx import AttributeProto

    count, todo = 0, [(g, 0)]
    while todo:
        graph, depth = todo.pop()
        if depth > MAX_SUBGRAPH_DEPTH:
            raise beyond(what, depth, "levels of nested subgraphs", "MAX_SUBGRAPH_DEPTH")
        count += len(graph.node)
        check_nodes(count, what + (" (its subgraphs' nodes counted)" if depth else ""))
        for node in graph.node:
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    todo.append((a.g, depth + 1))
                elif a.type == AttributeProto.GRAPHS:
                    todo.extend((sg, depth + 1) for sg in a.graphs)


def _constant(a, outs, where, b: _Builder) -> None:
    """ONNX Constant: its value becomes the constant ``outs[0]``."""
    if len(a) != 1:
        raise ModelError(f"{where}: needs exactly one value attribute, has {len(a)}")
    ((k, v),) = a.items()
    if k == "value":
        arr = _tensor(v, f"{where} value")
    elif k in ("value_float", "value_floats"):
        arr = np.asarray(v, np.float32)
    elif k in ("value_int", "value_ints"):
        arr = np.asarray(v, np.int64)
    else:
        raise ModelError(f"{where}: attribute {quote(k)} is not supported")
    b.consts[outs[0]] = arr


def _convert(node, b: _Builder) -> Node | None:
    """The fastane node of ONNX ``node`` (None for a Constant: it becomes a constant), made
    by the parse of the record that imports its op type.  A node that does not match its
    op's schema, or whose attributes or operands fastane cannot use, is a ModelError naming
    it, whatever went wrong."""
    op = _text(node.op_type)
    name = b.prefix + (_text(node.name) or f"{op}_{len(b.nodes)}")
    where = f"node {quote(name)} ({quote(op, marks=False)})"
    a, types = _attrs(node, where)
    ins = [b.ref(_text(i)) for i in node.input]
    outs = [b.define(_text(o)) for o in node.output]
    if op in SUPPORTED:
        _check_schema(op, b.opset, types, ins, outs, where)
    try:
        if op == "Constant":
            return _constant(a, outs, where, b)
        fop, spelling = _record(op, b.opset, name, where)
        c = OnnxContext(b, op, fop, name, where, ins, outs)
        return spelling.parse(c, a, ins) if spelling.parse else c.mk()
    except ModelError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise ModelError(
            f"{where}: cannot use its attributes or operands ({type(exc).__name__}: {quote(str(exc), marks=False)})"
        ) from None


def _convert_nodes(g, b: _Builder) -> None:
    """The nodes of graph ``g`` converted into ``b``."""
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            op = quote(f"{_text(node.domain)}.{_text(node.op_type)}")
            raise ModelError(
                f"node {quote(_text(node.name))}: op {op} (custom domain) is not supported by fastane"
            )
        n = _convert(node, b)
        if n is not None:
            b.nodes.append(n)


def _record(op, opset, name, where):
    """``(fastane op, OnnxName)`` importing ONNX ``op`` at ``opset``."""
    spellings = _RECORDS.get(op)
    if not spellings:
        raise ModelError(
            f"node {quote(name)}: ONNX op {quote(op)} is not supported by fastane (no ANE lowering "
            f"and no host implementation)"
        )
    for fop, o in spellings:
        if o.covers(opset):
            return fop, o
    spans = ", ".join(f"{o.since} to {o.until - 1}" if o.until else f"{o.since}+" for _, o in spellings)
    raise ModelNotImplementedError(f"{where}: fastane imports {op} at opsets {spans}, the model's is {opset}")


def from_proto(proto, name: str = "", weights: bool = True) -> Graph:
    """Import an ``onnx.ModelProto`` (``weights``: see :func:`load`)."""
    g = proto.graph
    opset = None
    for imp in proto.opset_import:
        if _text(imp.domain) in ("", "ai.onnx"):
            opset = int(imp.version)
    if opset is None:
        raise ModelError("the model imports no version of the default ONNX operator set")
    _nested(g, f"model {quote(_text(g.name) or name)}")
    b = _Builder(opset)
    for t in g.initializer:
        b.consts[_text(t.name)] = _tensor(t, "initializer", weights)
    if len(g.sparse_initializer):
        raise ModelError("sparse initializers are not supported by fastane")
    inputs = {}
    for vi in g.input:
        if _text(vi.name) in b.consts:
            continue  # an initializer listed as an input (IR < 4): a constant
        inputs[_text(vi.name)] = _value_type(vi, "input")
    b.ranks.update({n: len(t.shape) for n, t in inputs.items()})
    b.ranks.update({n: v.ndim for n, v in b.consts.items()})
    _declared_ranks(b, g.value_info, lambda n: n)
    _convert_nodes(g, b)
    outputs = [_text(o.name) for o in g.output]
    b.nodes = fuse_gelu(b.nodes, b.consts, outputs)
    return Graph(
        _text(g.name) or name,
        inputs,
        outputs,
        b.nodes,
        b.consts,
        origin=f"onnx opset {opset}",
        weights=weights,
    )
