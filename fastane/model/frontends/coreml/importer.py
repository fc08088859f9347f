"""The Core ML importer: an ``.mlpackage`` (ML Program) or ``.mlmodel`` (neural network, or
an ML Program without weight files) -> a :class:`~fastane.model.graph.Graph`.

The importer's only entry point; its parts (:mod:`~fastane.model.frontends.coreml.blob`,
``mil``, ``mil_layout``, ``nn``) are the only modules of fastane that
import ``coremltools`` (lazily, inside functions, when a model is loaded: the ``coreml``
extra), and only its protobuf classes (``coremltools.proto``): no macOS API, no
``MLModel.predict``.  The weight blob (``weights/weight.bin``) is read by fastane
(``blob``), with every offset and size checked against the file before anything is
allocated; compressed weights are decompressed as the ops define them (coremltools' MIL
op reference, ``constexpr_*``):

* ``constexpr_affine_dequantize`` (iOS16): ``scale * (q - zero_point)``, scale and zero
  point scalars or vectors along ``axis``;
* ``constexpr_blockwise_shift_scale`` (iOS18): ``scale * (data - offset)``, ``scale`` and
  ``offset`` of the data's rank, each entry covering a block of ``data.shape[d] /
  scale.shape[d]`` along every axis ``d``;
* ``constexpr_lut_to_dense``: iOS16, a 1-D table of ``2^nbits`` entries and ``nbits``-bit
  indices packed into bytes (least significant bit first) for a given ``shape``; iOS18,
  ``lut`` of rank ``indices.rank + 2`` (one table per block, ``NUM_PALETTES x
  VECTOR_SIZE``), ``indices`` a ``uintN`` tensor, ``vector_axis`` for vector palettes;
* ``constexpr_sparse_to_dense``: iOS16, a bit mask (packed, least significant bit first)
  and the non-zero values in row-major order for ``shape``; iOS18, ``mask`` a ``uint1``
  tensor of the output's shape;
* ``constexpr_lut_to_sparse`` and ``constexpr_sparse_blockwise_shift_scale`` (iOS18): the
  same on the non-zero values of a sparse pair (mask, values);
* ``constexpr_cast``: a dtype change.

The decompressed weights are float32 in the graph (an fp16 value widens exactly), as the
ANE entry points round every operand to fp16 once.  Ops are mapped onto fastane's
vocabulary (:mod:`fastane.model.ops`); a composite MIL op without a vocabulary entry
becomes its plain composition (``silu -> sigmoid, mul``; ``softsign -> abs, add, div``;
``softplus -> exp, add 1, log``; ``reduce_log_sum_exp -> exp, reduce_sum, log``; ...),
the way a compiler would emit it, with no numerical safeguard (no max subtraction, no
clamping): it shows what the ANE does, not what it should do.  See docs/models.md, "Core ML".
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace

import numpy as np

from ....errors import ModelError, quote, quote_names
from ...budget import MAX_CONST_BYTES, beyond
from ...cost import nbytes
from ...graph import Graph, Node, TensorType, check_size
from ...files import inside, read_file
from ...tensor import read_protobuf, shape_text

__all__ = ["load", "is_coreml", "MIL_OPS", "NN_LAYERS", "decompress"]

from . import mil_host, mil_layout  # noqa: F401  (register their ops in MIL_OPS)
from .blob import (
    flexible_inputs,
    SHAPE_ONLY_ABOVE,
    Blobs,
    ct_proto,
    dtype_name,
    mil_dtypes,
    tensor_shape,
    decompress,
    unpack_bits,
)
from .mil import MIL_OPS
from .nn import NN_LAYERS, neural_network, unpack_bits_msb  # noqa: F401


# ------------------------------------------------------------------ files
def is_coreml(path) -> bool:
    """Whether ``path`` looks like a Core ML model: an ``.mlpackage`` directory (a
    ``Manifest.json``), or an ``.mlmodel`` file (by suffix; a file of another suffix is
    tried as a Core ML spec only when it is not an ONNX model: see load_model)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return os.path.isfile(os.path.join(p, "Manifest.json"))
    return p.lower().endswith(".mlmodel")


#: the largest Manifest.json read (a package's manifest is a few hundred bytes)
MAX_MANIFEST_BYTES = 1 << 20


def _package_spec(path: str):
    """``(spec file, weights directory)`` of an .mlpackage, from its Manifest.json (every
    file of the package opened under :mod:`~fastane.model.files`' rule)."""
    man = inside(path, "Manifest.json", f"{path}: Manifest.json")
    raw = read_file(
        man,
        f"{path}: Manifest.json",
        MAX_MANIFEST_BYTES,
        "1 MiB, for a manifest of a few hundred bytes",
        missing=f"{path}: not an .mlpackage (no Manifest.json)",
        root=path,
    )
    try:
        info = json.loads(raw)
        entries = info["itemInfoEntries"]
        root = info.get("rootModelIdentifier")
        item = (
            entries[root]
            if root in entries
            else next(e for e in entries.values() if str(e.get("path", "")).endswith(".mlmodel"))
        )
        rel = os.path.join("Data", str(item["path"]))
    except RecursionError:
        raise ModelError(
            f"{path}: Manifest.json is not a valid package manifest (nested too deeply)"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError, StopIteration) as exc:
        raise ModelError(
            f"{path}: Manifest.json is not a valid package manifest ({quote(repr(exc), 160, marks=False)})"
        ) from None
    spec = inside(path, rel, f"{path}: Manifest.json")
    if not os.path.exists(spec):
        raise ModelError(f"{path}: the manifest names {quote(rel)}, which does not exist")
    return spec, os.path.join(os.path.dirname(spec), "weights")


def _read_spec(path: str, root=None):
    return parse_spec(read_protobuf(path, "Core ML spec", root), path)


def parse_spec(data: bytes, path: str):
    """The Core ML ``Model`` spec parsed from ``data`` (the bytes of ``path``); a ModelError if
    it is not one."""
    Model_pb2, _ = ct_proto()
    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError
        raise ModelError(f"{path}: not a valid Core ML spec (protobuf parse failed: {exc})") from None
    if not spec.specificationVersion or spec.WhichOneof("Type") is None:
        raise ModelError(
            f"{path}: not a Core ML model (no specification version or model type; "
            f"is the file truncated or another format?)"
        )
    return spec


def _file_bytes(path: str) -> int:
    """The bytes of the model at ``path``: the file, or the regular files of the package
    directory (symbolic links not followed: nothing outside the package is read)."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    total = 0
    for top, dirs, files in os.walk(path):  # followlinks False: a linked directory is skipped
        for f in files:
            st = os.lstat(os.path.join(top, f))
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def load(path, weights: bool = True) -> Graph:
    """Read and import the Core ML model at ``path`` (an .mlpackage directory or an .mlmodel
    file).  ``weights=False``: large constants keep their shape only (a read-only zero
    placeholder): enough for a stats-only report."""
    p = os.fspath(path)
    if os.path.isdir(p):
        spec_path, wdir, root = *_package_spec(p), p
    else:
        spec_path, wdir, root = p, None, None
    spec = _read_spec(spec_path, root)
    kind = spec.WhichOneof("Type")
    name = os.path.basename(p.rstrip("/"))
    size = _file_bytes(p)
    if kind == "mlProgram":
        return replace(_Program(spec, Blobs(wdir, root), name, weights).graph(), file_bytes=size)
    if kind in ("neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor"):
        try:
            return replace(neural_network(spec, getattr(spec, kind), name, weights), file_bytes=size)
        except ModelError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
            raise ModelError(
                f"{p}: malformed neural network ({type(exc).__name__}: {quote(str(exc), 160, marks=False)})"
            ) from None
    raise ModelError(
        f"{p}: Core ML model type {quote(kind)} is not supported by fastane (ML Program "
        f"and neural network models only)"
    )


class _Program:
    """One ML Program's main function, converted op by op."""

    def __init__(self, spec, blobs, name, weights):
        self.spec, self.name, self.weights = spec, name, weights
        self.blobs = blobs
        self.consts: dict = {}
        self.compressed: set = set()  # consts a constexpr_* op decompressed (blob)
        self.code_bits: dict = {}  # of those, the palette code width by type (blob)
        self.nodes: list = []
        self.types: dict = {}  # tensor name -> declared shape (dynamic ones)
        self.declared: dict = {}  # tensor name -> its declared float dtype (Graph.declared)
        self.alias: dict = {}  # MIL name -> graph name (fp16 inputs; a state's last write)
        self.states: dict = {}  # state input -> the tensor last written to it (None: unwritten)
        self._n = 0
        self.decoded: dict = {}  # (file, offset, type, shape) -> a blob's value, decoded once
        self.widened: dict = {}  # id of a decoded blob value -> (it, its float32 copy)
        self.const_bytes = 0  # decoded at load so far (MAX_CONST_BYTES)

    def spend(self, shape, dtype, what: str):
        """Count a constant of ``shape`` and ``dtype`` decoded at load (a float at 4 bytes,
        as the graph holds it) against :data:`~fastane.model.budget.MAX_CONST_BYTES`: a
        blob's value before it is decoded, a ``constexpr_*`` output (its size checked
        while it is computed) before it is kept."""
        check_size(shape, what)
        dt = np.dtype(dtype)
        self.const_bytes += nbytes(TensorType(dt, tuple(shape)))
        if self.const_bytes > MAX_CONST_BYTES:
            raise beyond(
                f"{what}: {shape_text(shape)} {dt.name}: the constants decoded so far",
                self.const_bytes,
                "bytes",
                "MAX_CONST_BYTES",
            )

    # ---------------------------------------------------------- values
    def value(self, v, what: str) -> np.ndarray:
        """A MIL Value (immediate or blob) as a numpy array."""
        if not v.type.HasField("tensorType"):
            raise ModelError(f"{what}: only tensor values are supported, got {v.type.WhichOneof('type')}")
        tt = v.type.tensorType
        shape = tensor_shape(tt, what)
        table = mil_dtypes()
        if tt.dataType not in table:
            raise ModelError(f"{what}: data type {dtype_name(tt.dataType)} is not supported by fastane")
        dt, bits = table[tt.dataType]
        n = check_size(shape, what)
        kind = v.WhichOneof("value")
        if kind == "blobFileValue":
            nbytes = -(-n * bits // 8)
            if not self.weights and n > SHAPE_ONLY_ABOVE and bits >= 8:
                return np.broadcast_to(np.zeros((), dt), shape)
            key = (v.blobFileValue.fileName, int(v.blobFileValue.offset), tt.dataType, shape)
            if key not in self.decoded:
                raw = self.blobs.read(key[0], key[1], nbytes, what)
                if bits:
                    self.spend(shape, dt, what)
                val = self._decode(raw, dt, bits, n, shape, tt.dataType, what)
                val.flags.writeable = False  # shared by every op that refers to the blob
                self.decoded[key] = val
            return self.decoded[key]
        if kind != "immediateValue":
            raise ModelError(f"{what}: value kind {quote(kind)} is not supported")
        iv = v.immediateValue
        if iv.WhichOneof("value") != "tensor":
            raise ModelError(f"{what}: only tensor immediate values are supported")
        t = iv.tensor
        field = t.WhichOneof("value")
        if field is None:
            vals = np.zeros(0, dt)
        elif field == "bytes":
            if bits:
                self.spend(shape, dt, what)
            return self._decode(t.bytes.values, dt, bits, n, shape, tt.dataType, what)
        else:
            seq = getattr(t, field).values
            if field == "strings":
                if n != len(seq):
                    raise ModelError(f"{what}: declares {n} strings, holds {len(seq)}")
                return np.array(list(seq), dtype=object).reshape(shape)
            vals = np.asarray(seq)
        if vals.size != n:
            raise ModelError(f"{what}: declares shape {shape} ({n} values) but holds {vals.size}")
        return np.asarray(vals.astype(dt), order="C").reshape(shape)

    def _decode(self, raw, dt, bits, n, shape, code, what):
        if bits == 0:
            raise ModelError(f"{what}: string tensors must be immediate string values")
        if bits < 8:
            _, MIL_pb2 = ct_proto()
            try:
                vals = unpack_bits(raw, bits, n, signed=code == MIL_pb2.INT4)
            except ValueError as exc:
                raise ModelError(f"{what}: {exc}") from None
            return vals.reshape(shape)
        item = np.dtype(dt).itemsize
        if len(raw) != n * item:
            raise ModelError(
                f"{what}: declares shape {shape} ({n * item} bytes of "
                f"{np.dtype(dt).name}) but holds {len(raw)} bytes"
            )
        return np.frombuffer(raw, np.dtype(dt).newbyteorder("<")).astype(dt).reshape(shape)

    def const(self, value, dtype=None) -> str:
        self._n += 1
        name = f"fastane::const{self._n}"
        arr = np.asarray(value if dtype is None else np.asarray(value, dtype))
        self.consts[name] = np.asarray(arr, order="C")
        return name

    def rank_hint(self, name):
        """The declared shape of tensor ``name`` (a constant's, or the MIL type's), or None."""
        if name in self.consts:
            return self.consts[name].shape
        return self.types.get(name)

    def rank_of(self, name, what) -> int:
        shape = self.rank_hint(name)
        if shape is None:
            raise ModelError(f"{what}: input {quote(name)} of unknown rank")
        return len(shape)

    def tmp(self) -> str:
        self._n += 1
        return f"fastane::t{self._n}"

    # ---------------------------------------------------------- the program
    def graph(self) -> Graph:
        prog = self.spec.mlProgram
        if "main" not in prog.functions:
            fns = list(prog.functions)
            raise ModelError(
                f"{self.name}: the ML Program has no 'main' function (functions: {quote_names(fns)})"
            )
        fn = prog.functions["main"]
        if fn.opset not in fn.block_specializations:
            raise ModelError(f"{self.name}: function 'main' has no block for its opset {quote(fn.opset)}")
        block = fn.block_specializations[fn.opset]
        inputs = {}
        table = mil_dtypes()
        for nv in fn.inputs:
            what = f"input {quote(nv.name)}"
            vt = nv.type
            if vt.WhichOneof("type") == "stateType":  # an input, its last write an output
                vt = vt.stateType.wrappedType
                self.states[nv.name] = None
            if not vt.HasField("tensorType"):
                raise ModelError(f"{what}: only tensor inputs are supported")
            tt = vt.tensorType
            if tt.dataType not in table or table[tt.dataType][1] < 8:
                raise ModelError(f"{what}: data type {dtype_name(tt.dataType)} is not supported")
            dt = np.dtype(table[tt.dataType][0])
            shape = tensor_shape(tt, what, symbols=True)
            self.types[nv.name] = shape
            if dt.kind == "f":
                self.declared[nv.name] = dt
            if dt == np.float16:
                # the caller's array becomes fp16 (the input's rounding); the graph computes
                # in float32 from there (exact)
                raw = f"fastane::input16:{nv.name}"
                inputs[nv.name] = TensorType(dt, shape)
                self.nodes.append(
                    Node("cast", f"{nv.name}:to_fp32", [nv.name], [raw], {"to": np.dtype(np.float32)}, "cast")
                )
                self.alias[nv.name] = raw
                self.types[raw] = shape
                self.declared[raw] = dt
            else:
                inputs[nv.name] = TensorType(dt, shape)
        self.opset = fn.opset
        for op in block.operations:
            self.convert(op)
        # an output that is an fp16 input itself stays that input (already rounded to fp16)
        outputs = list(block.outputs)
        states = {}
        for s, last in self.states.items():  # a written state: its value after the run
            if last is not None:
                states[s] = self.emit(
                    "identity", [last], [f"{s}:next"], source="write_state", name=f"{s}:next"
                )
                outputs.append(states[s])
        version = self.spec.specificationVersion
        defaults, allowed = flexible_inputs(self.spec)
        return Graph(
            self.name,
            inputs,
            outputs,
            self.nodes,
            self.consts,
            origin=f"coreml mlProgram (spec {version}, opset {fn.opset})",
            weights=self.weights,
            compressed=self.compressed,
            code_bits=self.code_bits,
            declared=self.declared,
            default_shapes=defaults,
            allowed_shapes=allowed,
            states=states,
        )

    # ---------------------------------------------------------- one op
    def arg(self, op, key, what, required=True):
        """The tensor name bound to parameter ``key`` (an immediate value becomes a constant)."""
        if key not in op.inputs:
            if required:
                raise ModelError(f"{what}: missing parameter {quote(key)}")
            return None
        args = op.inputs[key].arguments
        if len(args) != 1:
            raise ModelError(f"{what}: parameter {quote(key)} has {len(args)} arguments, expected 1")
        return self.binding(args[0], f"{what}, parameter {quote(key)}")

    def args(self, op, key, what):
        if key not in op.inputs:
            raise ModelError(f"{what}: missing parameter {quote(key)}")
        return [self.binding(a, f"{what}, parameter {quote(key)}") for a in op.inputs[key].arguments]

    def binding(self, b, what):
        kind = b.WhichOneof("binding")
        if kind == "name":
            name = self.alias.get(b.name, b.name)
            return name
        if kind == "value":
            return self.const(self.value(b.value, what))
        raise ModelError(f"{what}: empty binding")

    def cval(self, op, key, what, default=None):
        """The constant value of parameter ``key`` (a ModelError if it is not constant)."""
        if key not in op.inputs:
            if key in op.attributes and key != "name":
                return self.value(op.attributes[key], f"{what}, attribute {quote(key)}")
            return default
        t = self.arg(op, key, what)
        if t not in self.consts:
            raise ModelError(
                f"{what}: parameter {quote(key)} must be a constant; fastane does not run "
                f"data-dependent {quote(key, marks=False)}"
            )
        return self.consts[t]

    def convert(self, op):
        t = op.type
        outs = [o.name for o in op.outputs]
        what = f"op {quote(outs[0] if outs else '?')} ({quote(t, marks=False)})"
        if t not in MIL_OPS:
            raise ModelError(
                f"{what}: MIL op {quote(t)} is not supported by fastane (no ANE lowering and "
                f"no host implementation)"
            )
        for o in op.outputs:
            if o.type.HasField("tensorType"):
                self.types[o.name] = tensor_shape(o.type.tensorType, f"{what} output", symbols=True)
                dt = mil_dtypes().get(o.type.tensorType.dataType, (None,))[0]
                if dt in (np.float16, np.float32):
                    self.declared[o.name] = np.dtype(dt)
        self.cur = outs[0] if outs else t
        try:
            MIL_OPS[t](self, op, outs, what)
        except ModelError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
            # a parameter missing or of the wrong kind (a hostile or mistyped program), or
            # one that makes the arithmetic fail (a division by a zero size)
            raise ModelError(
                f"{what}: malformed parameters ({type(exc).__name__}: {quote(str(exc), 160, marks=False)})"
            ) from None

    def emit(self, fop, inputs, outputs, attrs=None, source="", name=None):
        """A node of the current MIL op (named after the op's output; the parts of a
        composition after it, ``name/op``)."""
        cur = getattr(self, "cur", None)
        if name is None:
            name = cur if cur and cur in outputs else (f"{cur}/{fop}" if cur else outputs[0])
        self.nodes.append(Node(fop, name, list(inputs), list(outputs), attrs or {}, source))
        return outputs[0]
