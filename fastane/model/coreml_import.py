"""The Core ML importer: an ``.mlpackage`` (ML Program) or ``.mlmodel`` (neural network, or
an ML Program without weight files) -> a :class:`~fastane.model.graph.Graph`.

The only module of fastane that imports ``coremltools`` (lazily, when a model is loaded:
the ``coreml`` extra), and only its protobuf classes (``coremltools.proto``): no macOS
API, no ``MLModel.predict``.  The weight blob (``weights/weight.bin``) is read here, by
fastane, with every offset and size checked against the file before anything is
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
import math
import mmap
import os

import numpy as np

from ..errors import ModelError
from .graph import Graph, Node, TensorType, check_size

__all__ = ["load", "is_coreml", "MIL_OPS", "NN_LAYERS", "decompress"]

#: the largest spec file fastane parses (protobuf's own limit is 2 GiB)
MAX_SPEC_BYTES = 2 << 30
#: with ``weights=False``, constants above this many elements are not decoded
SHAPE_ONLY_ABOVE = 4096


def _ct_proto():
    try:
        from coremltools.proto import MIL_pb2, Model_pb2
    except ImportError:  # pragma: no cover - the extra is part of the test extra
        raise ImportError("loading Core ML models needs coremltools: pip install 'fastane[coreml]'") from None
    return Model_pb2, MIL_pb2


# ------------------------------------------------------------------ files
def is_coreml(path) -> bool:
    """Whether ``path`` looks like a Core ML model: an ``.mlpackage`` directory (a
    ``Manifest.json``), or an ``.mlmodel`` file (by suffix; a file of another suffix is
    tried as a Core ML spec only when it is not an ONNX model: see load_model)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return os.path.isfile(os.path.join(p, "Manifest.json"))
    return p.lower().endswith(".mlmodel")


def _inside(root: str, rel: str, what: str) -> str:
    full = os.path.realpath(os.path.join(root, rel))
    base = os.path.realpath(root)
    if os.path.commonpath([full, base]) != base:
        raise ModelError(f"{what}: path {rel!r} points outside the package")
    return full


def _package_spec(path: str):
    """``(spec file, weights directory)`` of an .mlpackage, from its Manifest.json."""
    man = os.path.join(path, "Manifest.json")
    try:
        with open(man, "rb") as f:
            raw = f.read(1 << 20)
        info = json.loads(raw)
        entries = info["itemInfoEntries"]
        root = info.get("rootModelIdentifier")
        item = entries[root] if root in entries else next(
            e for e in entries.values() if str(e.get("path", "")).endswith(".mlmodel"))
        rel = os.path.join("Data", str(item["path"]))
    except FileNotFoundError:
        raise ModelError(f"{path}: not an .mlpackage (no Manifest.json)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as exc:
        raise ModelError(f"{path}: Manifest.json is not a valid package manifest ({exc!r})") from None
    spec = _inside(path, rel, f"{path}: Manifest.json")
    if not os.path.isfile(spec):
        raise ModelError(f"{path}: the manifest names {rel!r}, which does not exist")
    return spec, os.path.join(os.path.dirname(spec), "weights")


def _read_spec(path: str):
    Model_pb2, _ = _ct_proto()
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise ModelError(f"cannot read model {path!r}: {exc.strerror or exc}") from None
    if size > MAX_SPEC_BYTES:
        raise ModelError(f"{path}: {size} bytes, beyond the 2 GiB a protobuf spec can hold")
    with open(path, "rb") as f:
        data = f.read()
    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError
        raise ModelError(f"{path}: not a valid Core ML spec (protobuf parse failed: {exc})") from None
    if not spec.specificationVersion or spec.WhichOneof("Type") is None:
        raise ModelError(f"{path}: not a Core ML model (no specification version or model type; "
                         f"is the file truncated or another format?)")
    return spec


def load(path, weights: bool = True) -> Graph:
    """Read and import the Core ML model at ``path`` (an .mlpackage directory or an .mlmodel
    file).  ``weights=False``: large constants keep their shape only (a read-only zero
    placeholder): enough for a stats-only report."""
    p = os.fspath(path)
    if os.path.isdir(p):
        spec_path, wdir = _package_spec(p)
    else:
        spec_path, wdir = p, None
    spec = _read_spec(spec_path)
    kind = spec.WhichOneof("Type")
    name = os.path.basename(p.rstrip("/"))
    if kind == "mlProgram":
        return _Program(spec, wdir, name, weights).graph()
    if kind in ("neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor"):
        try:
            return _neural_network(spec, getattr(spec, kind), name, weights)
        except ModelError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:
            raise ModelError(f"{p}: malformed neural network ({type(exc).__name__}: {exc})") from None
    raise ModelError(f"{p}: Core ML model type {kind!r} is not supported by fastane (ML Program "
                     f"and neural network models only)")


# ------------------------------------------------------------------ the weight blob
#: MIL storage blob header and per-blob metadata (little-endian): the file starts with a
#: 64-byte header (u32 count, u32 version); each blob's metadata (64 bytes, where the
#: spec's offset points) is u32 sentinel 0xDEADBEEF, u32 data type, u64 size in bytes,
#: u64 offset of the data
_SENTINEL = 0xDEADBEEF
_BLOB_HEADER = 64


class _Blobs:
    """The weight files of a package, opened lazily, every read bounds-checked."""

    def __init__(self, wdir):
        self.wdir = wdir
        self.files: dict = {}

    def read(self, file_name: str, offset: int, nbytes: int, what: str) -> memoryview:
        if self.wdir is None:
            raise ModelError(f"{what}: refers to weight file {file_name!r}, but a bare .mlmodel has "
                             f"no weights directory (load the .mlpackage)")
        prefix = "@model_path/weights/"
        if not file_name.startswith(prefix):
            raise ModelError(f"{what}: weight file {file_name!r} is not under @model_path/weights/")
        rel = file_name[len(prefix):]
        if rel not in self.files:
            full = _inside(self.wdir, rel, what)
            try:
                # mapped, not read: a blob is copied only when a constant is decoded
                with open(full, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    self.files[rel] = memoryview(
                        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b"")
            except FileNotFoundError:
                raise ModelError(f"{what}: weight file {file_name!r} is missing from the package") from None
            except OSError as exc:
                raise ModelError(f"{what}: cannot read weight file {file_name!r}: {exc.strerror or exc}") from None
        buf = self.files[rel]
        size = len(buf)
        if size < _BLOB_HEADER:
            raise ModelError(f"{what}: weight file {file_name!r} has {size} bytes, less than its "
                             f"{_BLOB_HEADER}-byte header (truncated)")
        if offset < _BLOB_HEADER or offset + 64 > size:
            raise ModelError(f"{what}: blob metadata at offset {offset} lies outside the "
                             f"{size}-byte weight file {file_name!r}")
        sentinel, _dtype, nb, data_off = np.frombuffer(buf[offset:offset + 24], "<u4", 2).tolist() + \
            np.frombuffer(buf[offset + 8:offset + 24], "<u8", 2).tolist()
        if sentinel != _SENTINEL:
            raise ModelError(f"{what}: no blob at offset {offset} of {file_name!r} (sentinel "
                             f"{sentinel:#x}, expected {_SENTINEL:#x}): corrupted weight file")
        if nb != nbytes:
            raise ModelError(f"{what}: the blob at offset {offset} holds {nb} bytes, the declared "
                             f"type needs {nbytes}")
        if data_off + nb > size:
            raise ModelError(f"{what}: the blob's data ({nb} bytes at offset {data_off}) runs past "
                             f"the end of the {size}-byte weight file {file_name!r} (truncated)")
        return buf[data_off:data_off + nb]


# ------------------------------------------------------------------ MIL values
_DT = None


def _dtypes():
    """MIL DataType -> (numpy dtype, bits) (sub-byte unsigned/signed ints unpacked to
    uint8/int8)."""
    global _DT
    if _DT is None:
        _, MIL_pb2 = _ct_proto()
        D = MIL_pb2
        _DT = {D.BOOL: (np.bool_, 8), D.FLOAT16: (np.float16, 16), D.FLOAT32: (np.float32, 32),
               D.FLOAT64: (np.float64, 64), D.INT8: (np.int8, 8), D.INT16: (np.int16, 16),
               D.INT32: (np.int32, 32), D.INT64: (np.int64, 64), D.UINT8: (np.uint8, 8),
               D.UINT16: (np.uint16, 16), D.UINT32: (np.uint32, 32), D.UINT64: (np.uint64, 64),
               D.INT4: (np.int8, 4), D.UINT4: (np.uint8, 4), D.UINT2: (np.uint8, 2),
               D.UINT1: (np.uint8, 1), D.UINT3: (np.uint8, 3), D.UINT6: (np.uint8, 6),
               D.STRING: (np.str_, 0)}
    return _DT


def _dt_name(code) -> str:
    _, MIL_pb2 = _ct_proto()
    try:
        return MIL_pb2.DataType.Name(code)
    except ValueError:
        return str(code)


def unpack_bits(raw, nbits: int, count: int, signed: bool = False) -> np.ndarray:
    """``count`` ``nbits``-bit integers packed into bytes least significant bit first (the
    MIL storage's sub-byte layout), as uint8 (int8 for ``signed``)."""
    raw = np.frombuffer(raw, np.uint8)
    need = -(-count * nbits // 8)
    if raw.size < need:
        raise ValueError(f"{count} values of {nbits} bits need {need} bytes, got {raw.size}")
    bits = np.unpackbits(raw[:need], bitorder="little")[:count * nbits].reshape(count, nbits)
    vals = (bits.astype(np.uint16) << np.arange(nbits, dtype=np.uint16)).sum(axis=1)
    if signed:
        vals = np.where(vals >= 1 << (nbits - 1), vals.astype(np.int16) - (1 << nbits), vals)
        return vals.astype(np.int8)
    return vals.astype(np.uint8)


def _tensor_shape(tt, what: str, symbols=False):
    if tt.rank != len(tt.dimensions):
        raise ModelError(f"{what}: rank {tt.rank} but {len(tt.dimensions)} dimensions")
    dims = []
    for i, d in enumerate(tt.dimensions):
        if d.WhichOneof("dimension") == "constant":
            dims.append(int(d.constant.size))
        elif symbols:
            dims.append(f"{what}:{i}")
        else:
            raise ModelError(f"{what}: dimension {i} is not a constant")
    return tuple(dims)


class _Program:
    """One ML Program's main function, converted op by op."""

    def __init__(self, spec, wdir, name, weights):
        self.spec, self.name, self.weights = spec, name, weights
        self.blobs = _Blobs(wdir)
        self.consts: dict = {}
        self.nodes: list = []
        self.types: dict = {}          # tensor name -> declared shape (dynamic ones)
        self.alias: dict = {}          # MIL name -> graph name (fp16 inputs)
        self._n = 0

    # ---------------------------------------------------------- values
    def value(self, v, what: str) -> np.ndarray:
        """A MIL Value (immediate or blob) as a numpy array."""
        if not v.type.HasField("tensorType"):
            raise ModelError(f"{what}: only tensor values are supported, got {v.type.WhichOneof('type')}")
        tt = v.type.tensorType
        shape = _tensor_shape(tt, what)
        table = _dtypes()
        if tt.dataType not in table:
            raise ModelError(f"{what}: data type {_dt_name(tt.dataType)} is not supported by fastane")
        dt, bits = table[tt.dataType]
        n = check_size(shape, what)
        kind = v.WhichOneof("value")
        if kind == "blobFileValue":
            nbytes = -(-n * bits // 8)
            if not self.weights and n > SHAPE_ONLY_ABOVE and bits >= 8:
                return np.broadcast_to(np.zeros((), dt), shape)
            raw = self.blobs.read(v.blobFileValue.fileName, int(v.blobFileValue.offset), nbytes, what)
            return self._decode(raw, dt, bits, n, shape, tt.dataType, what)
        if kind != "immediateValue":
            raise ModelError(f"{what}: value kind {kind!r} is not supported")
        iv = v.immediateValue
        if iv.WhichOneof("value") != "tensor":
            raise ModelError(f"{what}: only tensor immediate values are supported")
        t = iv.tensor
        field = t.WhichOneof("value")
        if field is None:
            vals = np.zeros(0, dt)
        elif field == "bytes":
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
            _, MIL_pb2 = _ct_proto()
            try:
                vals = unpack_bits(raw, bits, n, signed=code == MIL_pb2.INT4)
            except ValueError as exc:
                raise ModelError(f"{what}: {exc}") from None
            return vals.reshape(shape)
        item = np.dtype(dt).itemsize
        if len(raw) != n * item:
            raise ModelError(f"{what}: declares shape {shape} ({n * item} bytes of "
                             f"{np.dtype(dt).name}) but holds {len(raw)} bytes")
        return np.frombuffer(raw, np.dtype(dt).newbyteorder("<")).astype(dt).reshape(shape).copy()

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
            raise ModelError(f"{what}: input {name!r} of unknown rank")
        return len(shape)

    def tmp(self) -> str:
        self._n += 1
        return f"fastane::t{self._n}"

    # ---------------------------------------------------------- the program
    def graph(self) -> Graph:
        prog = self.spec.mlProgram
        if "main" not in prog.functions:
            fns = list(prog.functions)
            raise ModelError(f"{self.name}: the ML Program has no 'main' function (functions: {fns})")
        fn = prog.functions["main"]
        if fn.opset not in fn.block_specializations:
            raise ModelError(f"{self.name}: function 'main' has no block for its opset {fn.opset!r}")
        block = fn.block_specializations[fn.opset]
        inputs = {}
        table = _dtypes()
        for nv in fn.inputs:
            what = f"input {nv.name!r}"
            if not nv.type.HasField("tensorType"):
                raise ModelError(f"{what}: only tensor inputs are supported")
            tt = nv.type.tensorType
            if tt.dataType not in table or table[tt.dataType][1] < 8:
                raise ModelError(f"{what}: data type {_dt_name(tt.dataType)} is not supported")
            dt = np.dtype(table[tt.dataType][0])
            shape = _tensor_shape(tt, what, symbols=True)
            self.types[nv.name] = shape
            if dt == np.float16:
                # the caller's array becomes fp16 (the input's rounding); the graph computes
                # in float32 from there (exact)
                raw = f"fastane::input16:{nv.name}"
                inputs[nv.name] = TensorType(dt, shape)
                self.nodes.append(Node("cast", f"{nv.name}:to_fp32", [nv.name], [raw],
                                       {"to": np.dtype(np.float32)}, "cast"))
                self.alias[nv.name] = raw
                self.types[raw] = shape
            else:
                inputs[nv.name] = TensorType(dt, shape)
        self.opset = fn.opset
        for op in block.operations:
            self.convert(op)
        # an output that is an fp16 input itself stays that input (already rounded to fp16)
        outputs = list(block.outputs)
        version = self.spec.specificationVersion
        return Graph(self.name, inputs, outputs, self.nodes, self.consts,
                     origin=f"coreml mlProgram (spec {version}, opset {fn.opset})", weights=self.weights)

    # ---------------------------------------------------------- one op
    def arg(self, op, key, what, required=True):
        """The tensor name bound to parameter ``key`` (an immediate value becomes a constant)."""
        if key not in op.inputs:
            if required:
                raise ModelError(f"{what}: missing parameter {key!r}")
            return None
        args = op.inputs[key].arguments
        if len(args) != 1:
            raise ModelError(f"{what}: parameter {key!r} has {len(args)} arguments, expected 1")
        return self.binding(args[0], f"{what}, parameter {key!r}")

    def args(self, op, key, what):
        if key not in op.inputs:
            raise ModelError(f"{what}: missing parameter {key!r}")
        return [self.binding(a, f"{what}, parameter {key!r}") for a in op.inputs[key].arguments]

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
                return self.value(op.attributes[key], f"{what}, attribute {key!r}")
            return default
        t = self.arg(op, key, what)
        if t not in self.consts:
            raise ModelError(f"{what}: parameter {key!r} must be a constant; fastane does not run "
                             f"data-dependent {key}")
        return self.consts[t]

    def convert(self, op):
        t = op.type
        outs = [o.name for o in op.outputs]
        what = f"op {outs[0] if outs else '?'!r} ({t})"
        if t not in MIL_OPS:
            raise ModelError(f"{what}: MIL op {t!r} is not supported by fastane (no ANE lowering and "
                             f"no host implementation)")
        for o in op.outputs:
            if o.type.HasField("tensorType"):
                self.types[o.name] = _tensor_shape(o.type.tensorType, f"{what} output", symbols=True)
        self.cur = outs[0] if outs else t
        try:
            MIL_OPS[t](self, op, outs, what)
        except ModelError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:
            # a parameter missing or of the wrong kind (a hostile or mistyped program)
            raise ModelError(f"{what}: malformed parameters ({type(exc).__name__}: {exc})") from None

    def emit(self, fop, inputs, outputs, attrs=None, source="", name=None):
        """A node of the current MIL op (named after the op's output; the parts of a
        composition after it, ``name/op``)."""
        cur = getattr(self, "cur", None)
        if name is None:
            name = cur if cur and cur in outputs else (f"{cur}/{fop}" if cur else outputs[0])
        self.nodes.append(Node(fop, name, list(inputs), list(outputs), attrs or {}, source))
        return outputs[0]


def _check_nout(outs, n, what):
    if len(outs) != n:
        raise ModelError(f"{what}: has {len(outs)} outputs, fastane maps {n}")


# ------------------------------------------------------------------ decompression
def _float_out(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.kind == "f" else a


def decompress(op_type: str, **kw) -> np.ndarray:
    """The value a ``constexpr_*`` op defines, from its constant operands (numpy arrays;
    the iOS16 ``lut_to_dense``/``sparse_to_dense`` take packed ``uint8`` indices/mask and a
    ``shape``).  ValueError for operands that do not fit the op's definition."""
    if op_type == "constexpr_affine_dequantize":
        q, zp, sc = (np.asarray(kw[k]) for k in ("quantized_data", "zero_point", "scale"))
        axis = int(kw["axis"])
        r = q.ndim
        if not -r <= axis < r:
            raise ValueError(f"axis {axis} out of range for rank {r}")
        axis %= r
        sh = [1] * r
        for name, v in (("scale", sc), ("zero_point", zp)):
            if v.ndim > 1 or (v.ndim == 1 and v.size != q.shape[axis]):
                raise ValueError(f"{name} of shape {v.shape}: a scalar or a vector of "
                                 f"{q.shape[axis]} values is needed")
        sh[axis] = -1
        scv = sc.reshape(sh) if sc.ndim == 1 else sc
        zpv = zp.reshape(sh) if zp.ndim == 1 else zp
        return (scv.astype(sc.dtype) * (q.astype(np.float32) - zpv.astype(np.float32)).astype(sc.dtype)
                ).astype(sc.dtype)
    if op_type == "constexpr_blockwise_shift_scale":
        data, sc = np.asarray(kw["data"]), np.asarray(kw["scale"])
        off = kw.get("offset")
        if data.ndim != sc.ndim or data.ndim < 1:
            raise ValueError(f"data {data.shape} and scale {sc.shape} must have the same rank (>= 1)")
        blocks = []
        for d, s in zip(data.shape, sc.shape):
            if s < 1 or d % s:
                raise ValueError(f"scale shape {sc.shape} does not divide data shape {data.shape}")
            blocks.append(d // s)
        if off is not None and np.asarray(off).shape != sc.shape:
            raise ValueError(f"offset shape {np.asarray(off).shape} differs from scale shape {sc.shape}")
        x = data.astype(sc.dtype)
        scr, offr = sc, None if off is None else np.asarray(off).astype(sc.dtype)
        for axis, bs in enumerate(blocks):
            if bs > 1:
                scr = np.repeat(scr, bs, axis)
                if offr is not None:
                    offr = np.repeat(offr, bs, axis)
        if offr is not None:
            x = x - offr
        return scr * x
    if op_type == "constexpr_lut_to_dense" and "shape" in kw:            # iOS16
        lut, idx, shape = np.asarray(kw["lut"]), np.asarray(kw["indices"]), kw["shape"]
        shape = tuple(int(s) for s in np.asarray(shape).reshape(-1))
        n = check_size(shape, "constexpr_lut_to_dense shape")
        if lut.ndim != 1 or lut.size not in (2, 4, 16, 64, 256):
            raise ValueError(f"lut of shape {lut.shape}: a 1-D table of 2, 4, 16, 64 or 256 entries")
        nbits = int(math.log2(lut.size))
        return lut[unpack_bits(idx.astype(np.uint8).tobytes(), nbits, n)].reshape(shape)
    if op_type == "constexpr_lut_to_dense":                              # iOS18
        idx, lut = np.asarray(kw["indices"]), np.asarray(kw["lut"])
        va = kw.get("vector_axis")
        if idx.ndim < 1 or lut.ndim != idx.ndim + 2:
            raise ValueError(f"lut of rank {lut.ndim} for indices of rank {idx.ndim} (needs rank + 2)")
        P, V = lut.shape[-2:]
        if V > 1 and va is None:
            raise ValueError("vector palettes (VECTOR_SIZE > 1) need vector_axis")
        if idx.size and int(idx.max()) >= P:
            raise ValueError(f"an index {int(idx.max())} is beyond the {P} palette entries")
        blk = np.zeros(idx.shape, np.int64)
        for d in range(idx.ndim):
            if lut.shape[d] < 1 or idx.shape[d] % lut.shape[d]:
                raise ValueError(f"lut shape {lut.shape} does not divide indices shape {idx.shape}")
            pos = np.arange(idx.shape[d]) // (idx.shape[d] // lut.shape[d])
            blk = blk * lut.shape[d] + pos.reshape((-1,) + (1,) * (idx.ndim - 1 - d))
        vals = lut.reshape(-1, V)[blk * P + idx.astype(np.int64)]         # indices.shape + (V,)
        if V == 1:
            return vals[..., 0]
        a = int(np.asarray(va)) % idx.ndim
        vals = np.moveaxis(vals, -1, a + 1)
        shape = list(idx.shape)
        shape[a] *= V
        return vals.reshape(shape)
    if op_type == "constexpr_sparse_to_dense" and "shape" in kw:         # iOS16
        nz, mask = np.asarray(kw["nonzero_data"]), np.asarray(kw["mask"])
        shape = tuple(int(s) for s in np.asarray(kw["shape"]).reshape(-1))
        bits = unpack_bits(mask.astype(np.uint8).tobytes(), 1,
                           check_size(shape, "constexpr_sparse_to_dense shape")).reshape(shape)
        return _scatter(nz, bits)
    if op_type == "constexpr_sparse_to_dense":                           # iOS18
        return _scatter(np.asarray(kw["nonzero_data"]), np.asarray(kw["mask"]))
    if op_type == "constexpr_cast":
        return np.asarray(kw["source_val"]).astype(kw["output_dtype"])
    raise ValueError(f"unknown compression op {op_type!r}")


def _scatter(nz, mask):
    if nz.ndim != 1:
        raise ValueError(f"nonzero_data must be 1-D, got shape {nz.shape}")
    k = int(np.count_nonzero(mask))
    if k != nz.size:
        raise ValueError(f"the mask has {k} set bits but nonzero_data holds {nz.size} values")
    out = np.zeros(mask.shape, nz.dtype)
    out[mask != 0] = nz
    return out


_MIL_DTYPE = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "int8": np.int8,
              "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "bool": np.bool_,
              "int64": np.int64, "fp64": np.float64}


def _constexpr(p: _Program, op, outs, what):
    t = op.type
    keys = {"constexpr_affine_dequantize": ("quantized_data", "zero_point", "scale", "axis"),
            "constexpr_blockwise_shift_scale": ("data", "scale", "offset"),
            "constexpr_cast": ("source_val", "output_dtype"),
            "constexpr_lut_to_sparse": ("indices_mask", "indices_nonzero_data", "lut", "vector_axis"),
            "constexpr_sparse_blockwise_shift_scale": ("data_mask", "nonzero_data", "scale", "offset")}
    if t == "constexpr_lut_to_dense":
        ks = ("indices", "lut", "shape", "vector_axis")
    elif t == "constexpr_sparse_to_dense":
        ks = ("nonzero_data", "mask", "shape")
    else:
        ks = keys[t]
    kw = {}
    for k in ks:
        v = p.cval(op, k, what)
        if v is not None:
            kw[k] = v
    if not p.weights and any(_placeholder(v) for v in kw.values()):
        # weights=False: a placeholder of the output's declared type
        o = op.outputs[0].type.tensorType
        dt = _dtypes()[o.dataType][0]
        shape = _tensor_shape(o, what)
        for name in outs:
            p.consts[name] = np.broadcast_to(np.zeros((), np.float32 if np.dtype(dt).kind == "f" else dt), shape)
        return
    if "output_dtype" in kw:
        s = str(np.asarray(kw["output_dtype"]).reshape(-1)[0])
        if s not in _MIL_DTYPE:
            raise ModelError(f"{what}: output_dtype {s!r} is not supported")
        kw["output_dtype"] = _MIL_DTYPE[s]
    try:
        if t == "constexpr_lut_to_sparse":
            # the table applied over the mask's shape (the indices scattered into it), the
            # mask repeated VECTOR_SIZE times along vector_axis, the values where it is set
            mask = kw["indices_mask"]
            idx = _scatter(kw["indices_nonzero_data"], mask)
            va = {"vector_axis": kw["vector_axis"]} if "vector_axis" in kw else {}
            dense = decompress("constexpr_lut_to_dense", indices=idx, lut=kw["lut"], **va)
            if va:
                mask = np.repeat(mask, kw["lut"].shape[-1], axis=int(kw["vector_axis"]) % mask.ndim)
            outs_v = [mask, dense[mask != 0].reshape(-1)]
        elif t == "constexpr_sparse_blockwise_shift_scale":
            mask, nz = kw["data_mask"], kw["nonzero_data"]
            dense = _scatter(nz, mask)
            full = decompress("constexpr_blockwise_shift_scale", data=dense, scale=kw["scale"],
                              offset=kw.get("offset"))
            outs_v = [mask, full[mask != 0]]
        else:
            outs_v = [decompress(t, **kw)]
    except (ValueError, IndexError, KeyError) as exc:
        raise ModelError(f"{what}: {exc}") from None
    for name, v in zip(outs, outs_v):
        check_size(np.shape(v), what)
        p.consts[name] = np.asarray(_float_out(v), order="C")


def _const_op(p: _Program, op, outs, what):
    _check_nout(outs, 1, what)
    if "val" not in op.attributes:
        raise ModelError(f"{what}: const without a 'val' attribute")
    v = p.value(op.attributes["val"], what)
    if v.dtype == object:                # strings (pad_type, modes): kept for cval
        p.consts[outs[0]] = v
        return
    if _placeholder(v):
        p.consts[outs[0]] = np.broadcast_to(np.zeros((), np.float32), v.shape) if v.dtype.kind == "f" else v
    else:
        p.consts[outs[0]] = _float_out(v)


def _placeholder(v) -> bool:
    """A shape-only constant of a ``weights=False`` load (a zero-stride broadcast)."""
    return isinstance(v, np.ndarray) and v.size > SHAPE_ONLY_ABOVE and v.ndim > 0 and \
        all(s == 0 for s in v.strides)


# ------------------------------------------------------------------ MIL op mapping
MIL_OPS: dict = {}


def _mil(*names):
    def deco(fn):
        for n in names:
            MIL_OPS[n] = fn
        return fn
    return deco


for _n in ("constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_cast",
           "constexpr_lut_to_dense", "constexpr_sparse_to_dense", "constexpr_lut_to_sparse",
           "constexpr_sparse_blockwise_shift_scale"):
    MIL_OPS[_n] = _constexpr
MIL_OPS["const"] = _const_op

_UNARY = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
          "sqrt": "sqrt", "abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil",
          "erf": "erf", "identity": "identity"}


def _scalar(v, what, key):
    a = np.asarray(v)
    if a.size != 1:
        raise ModelError(f"{what}: {key} must be a scalar, got shape {a.shape}")
    return float(a.reshape(-1)[0])


@_mil(*_UNARY)
def _unary_op(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit(_UNARY[op.type], [x], outs[:1], source=op.type)


@_mil("relu6")
def _relu6(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("clip", [x, p.const(0.0, np.float32), p.const(6.0, np.float32)], outs, source="relu6")


@_mil("clip")
def _clip(p, op, outs, what):
    x = p.arg(op, "x", what)
    lo = _scalar(p.cval(op, "alpha", what), what, "alpha")
    hi = _scalar(p.cval(op, "beta", what), what, "beta")
    p.emit("clip", [x, p.const(lo, np.float32), p.const(hi, np.float32)], outs, source="clip")


@_mil("leaky_relu", "elu")
def _alpha_act(p, op, outs, what):
    x = p.arg(op, "x", what)
    alpha = _scalar(p.cval(op, "alpha", what, 0.01 if op.type == "leaky_relu" else 1.0), what, "alpha")
    p.emit(op.type, [x], outs, {"alpha": alpha}, source=op.type)


@_mil("gelu")
def _gelu(p, op, outs, what):
    x = p.arg(op, "x", what)
    mode = str(np.asarray(p.cval(op, "mode", what, "EXACT")).reshape(-1)[0])
    if mode == "EXACT":
        p.emit("gelu", [x], outs, {"approximate": "none"}, source="gelu")
    elif mode == "TANH_APPROXIMATION":
        p.emit("gelu", [x], outs, {"approximate": "tanh"}, source="gelu(tanh)")
    elif mode == "SIGMOID_APPROXIMATION":          # x * sigmoid(1.702 x)
        t = p.emit("mul", [x, p.const(1.702, np.float32)], [p.tmp()], source="gelu(sigmoid)")
        s = p.emit("sigmoid", [t], [p.tmp()], source="gelu(sigmoid)")
        p.emit("mul", [x, s], outs, source="gelu(sigmoid)")
    else:
        raise ModelError(f"{what}: unknown gelu mode {mode!r}")


@_mil("silu")
def _silu(p, op, outs, what):
    x = p.arg(op, "x", what)
    s = p.emit("sigmoid", [x], [p.tmp()], source="silu")
    p.emit("mul", [x, s], outs, source="(x*)")


@_mil("softplus")
def _softplus(p, op, outs, what):        # log(1 + exp(x)): the plain composition, no safeguard
    x = p.arg(op, "x", what)
    e = p.emit("exp", [x], [p.tmp()], source="softplus")
    a = p.emit("add", [e, p.const(1.0, np.float32)], [p.tmp()], source="softplus")
    p.emit("log", [a], outs, source="softplus")


@_mil("softsign")
def _softsign(p, op, outs, what):        # x / (1 + |x|)
    x = p.arg(op, "x", what)
    a = p.emit("abs", [x], [p.tmp()], source="softsign")
    d = p.emit("add", [a, p.const(1.0, np.float32)], [p.tmp()], source="softsign")
    p.emit("div", [x, d], outs, source="softsign")


@_mil("scaled_tanh")
def _scaled_tanh(p, op, outs, what):     # alpha * tanh(beta * x)
    x = p.arg(op, "x", what)
    al = _scalar(p.cval(op, "alpha", what, 1.0), what, "alpha")
    be = _scalar(p.cval(op, "beta", what, 1.0), what, "beta")
    t = p.emit("mul", [x, p.const(be, np.float32)], [p.tmp()], source="scaled_tanh")
    t = p.emit("tanh", [t], [p.tmp()], source="scaled_tanh")
    p.emit("mul", [t, p.const(al, np.float32)], outs, source="scaled_tanh")


@_mil("sigmoid_hard")
def _hard_sigmoid(p, op, outs, what):
    x = p.arg(op, "x", what)
    al = _scalar(p.cval(op, "alpha", what, 0.2), what, "alpha")
    be = _scalar(p.cval(op, "beta", what, 0.5), what, "beta")
    p.emit("hard_sigmoid", [x], outs, {"alpha": al, "beta": be}, source="sigmoid_hard")


@_mil("clamped_relu")
def _clamped_relu(p, op, outs, what):    # min(max(x, 0), beta) + alpha * min(x, 0)
    x = p.arg(op, "x", what)
    al = _scalar(p.cval(op, "alpha", what), what, "alpha")
    be = _scalar(p.cval(op, "beta", what), what, "beta")
    pos = p.emit("clip", [x, p.const(0.0, np.float32), p.const(be, np.float32)], [p.tmp()],
                 source="clamped_relu")
    neg = p.emit("min", [x, p.const(0.0, np.float32)], [p.tmp()], source="clamped_relu")
    neg = p.emit("mul", [neg, p.const(al, np.float32)], [p.tmp()], source="clamped_relu")
    p.emit("add", [pos, neg], outs, source="clamped_relu")


@_mil("thresholded_relu")
def _thresholded_relu(p, op, outs, what):   # x if x > alpha else 0
    x = p.arg(op, "x", what)
    al = _scalar(p.cval(op, "alpha", what, 1.0), what, "alpha")
    c = p.emit("greater", [x, p.const(al, np.float32)], [p.tmp()], source="thresholded_relu")
    p.emit("where", [c, x, p.const(0.0, np.float32)], outs, source="thresholded_relu")


@_mil("prelu")
def _prelu(p, op, outs, what):
    x = p.arg(op, "x", what)
    al = p.cval(op, "alpha", what)
    rank = p.rank_of(x, what)
    slope = np.asarray(al, np.float32).reshape((-1,) + (1,) * max(rank - 2, 0))
    p.emit("prelu", [x, p.const(slope)], outs, source="prelu")




@_mil("square")
def _square(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("pow", [x, p.const(2.0, np.float32)], outs, source="square")


@_mil("inverse", "rsqrt")
def _inverse(p, op, outs, what):         # 1 / (x + eps), 1 / sqrt(x + eps): the epsilon added first
    x = p.arg(op, "x", what)
    eps = _scalar(p.cval(op, "epsilon", what, 1e-4 if op.type == "inverse" else 1e-12), what, "epsilon")
    t = p.emit("add", [x, p.const(eps, np.float32)], [p.tmp()], source=op.type) if eps else x
    p.emit("reciprocal" if op.type == "inverse" else "rsqrt", [t], outs, source=op.type)


@_mil("exp2")
def _exp2(p, op, outs, what):            # the NE's exp2 table (Apple's exp is exp2 after a scale)
    p.emit("exp2", [p.arg(op, "x", what)], outs, source="exp2")


_BIN = {"add": "add", "sub": "sub", "mul": "mul", "real_div": "div", "maximum": "max",
        "minimum": "min", "pow": "pow", "equal": "equal", "less": "less", "greater": "greater"}


@_mil(*_BIN)
def _binary(p, op, outs, what):
    x, y = p.arg(op, "x", what), p.arg(op, "y", what)
    p.emit(_BIN[op.type], [x, y], outs, source=op.type)


@_mil("greater_equal", "less_equal", "not_equal")
def _negated_compare(p, op, outs, what):   # not(x < y), not(x > y), not(x == y): a select of bools
    x, y = p.arg(op, "x", what), p.arg(op, "y", what)
    base = {"greater_equal": "less", "less_equal": "greater", "not_equal": "equal"}[op.type]
    c = p.emit(base, [x, y], [p.tmp()], source=op.type)
    p.emit("where", [c, p.const(np.False_), p.const(np.True_)], outs, source=op.type)


@_mil("logical_not")
def _logical_not(p, op, outs, what):
    p.emit("where", [p.arg(op, "x", what), p.const(np.False_), p.const(np.True_)], outs,
           source="logical_not")


@_mil("shape")
def _shape(p, op, outs, what):
    p.emit("shape", [p.arg(op, "x", what)], outs, source="shape")


@_mil("fill")
def _fill(p, op, outs, what):            # a constant broadcast to a (constant) shape
    shape = p.arg(op, "shape", what)
    v = np.asarray(p.cval(op, "value", what, 0.0))
    p.emit("expand", [p.const(v.astype(np.float32) if v.dtype.kind == "f" else v), shape], outs, source="fill")


@_mil("range_1d")
def _range_1d(p, op, outs, what):
    p.emit("range", [p.arg(op, "start", what), p.arg(op, "end", what), p.arg(op, "step", what)], outs,
           source="range_1d")


@_mil("scaled_dot_product_attention")
def _sdpa(p, op, outs, what):
    """softmax(q k^T / sqrt(d) + mask) v, the plain composition (iOS18's op): two matmuls,
    a planar scale, the mask added (a boolean mask as 0 / -inf, the op's definition)."""
    q, k, v = p.arg(op, "query", what), p.arg(op, "key", what), p.arg(op, "value", what)
    mask = p.arg(op, "attn_mask", what, required=False)
    kshape = p.rank_hint(k)
    r = p.rank_of(k, what)
    d = kshape[-1]
    if isinstance(d, str):
        raise ModelError(f"{what}: the embedding dimension of key is symbolic")
    perm = list(range(r))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = p.emit("transpose", [k], [p.tmp()], {"perm": perm}, source="sdpa")
    sc = p.emit("matmul", [q, kt], [p.tmp()], source="sdpa")
    sc = p.emit("mul", [sc, p.const(1.0 / math.sqrt(d), np.float32)], [p.tmp()], source="sdpa")
    if mask:
        if mask in p.consts and p.consts[mask].dtype == np.bool_:
            mask = p.const(np.where(p.consts[mask], 0.0, -np.inf).astype(np.float32))
        elif mask not in p.consts:
            raise ModelError(f"{what}: a run-time attention mask is not supported (a constant one is)")
        sc = p.emit("add", [sc, mask], [p.tmp()], source="sdpa")
    a = p.emit("softmax", [sc], [p.tmp()], {"axis": -1}, source="sdpa")
    p.emit("matmul", [a, v], outs, source="sdpa")


@_mil("select")
def _select(p, op, outs, what):
    p.emit("where", [p.arg(op, "cond", what), p.arg(op, "a", what), p.arg(op, "b", what)], outs,
           source="select")


@_mil("cast")
def _cast(p, op, outs, what):
    x = p.arg(op, "x", what)
    to = str(np.asarray(p.cval(op, "dtype", what)).reshape(-1)[0])
    if to not in _MIL_DTYPE:
        raise ModelError(f"{what}: cast to {to!r} is not supported")
    dt = np.dtype(_MIL_DTYPE[to])
    if dt == np.float16:     # the fp16 rounding, then on in float32 (the graph's float type)
        t = p.emit("cast", [x], [p.tmp()], {"to": dt}, source="cast(fp16)")
        p.emit("cast", [t], outs, {"to": np.dtype(np.float32)}, source="cast(fp16)")
    elif dt.kind == "f":
        p.emit("cast", [x], outs, {"to": np.dtype(np.float32)}, source="cast")
    else:
        p.emit("cast", [x], outs, {"to": dt}, source="cast")


def _pads_mil(p, op, what, nsp):
    pad_type = str(np.asarray(p.cval(op, "pad_type", what, "valid")).reshape(-1)[0]).lower()
    if pad_type == "custom":
        pad = np.asarray(p.cval(op, "pad", what, np.zeros(2 * nsp, np.int64))).reshape(-1)
        if pad.size != 2 * nsp:
            raise ModelError(f"{what}: pad {pad.tolist()} must have {2 * nsp} values")
        return None, tuple((int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(nsp))
    table = {"valid": "valid", "same": "same_upper", "same_lower": "same_lower"}
    if pad_type not in table:
        raise ModelError(f"{what}: unknown pad_type {pad_type!r}")
    return table[pad_type], None


def _ints(v, default=None):
    return None if v is None else tuple(int(x) for x in np.asarray(v).reshape(-1))


@_mil("conv", "conv_transpose")
def _conv(p, op, outs, what):
    x, w = p.arg(op, "x", what), p.arg(op, "weight", what)
    b = p.arg(op, "bias", what, required=False)
    wshape = p.rank_hint(w)
    nsp = len(wshape) - 2 if wshape is not None else 2
    auto, pads = _pads_mil(p, op, what, nsp)
    attrs = {"strides": _ints(p.cval(op, "strides", what)), "dilations": _ints(p.cval(op, "dilations", what)),
             "pads": pads, "auto_pad": auto, "groups": int(_scalar(p.cval(op, "groups", what, 1), what, "groups"))}
    if op.type == "conv_transpose":
        osh = p.cval(op, "output_shape", what)
        attrs["output_shape"] = _ints(osh)
        if attrs["auto_pad"] == "valid":
            attrs["auto_pad"] = None
    p.emit(op.type, [x, w] + ([b] if b else []), outs, attrs, source=op.type)


@_mil("linear")
def _linear(p, op, outs, what):          # x @ W^T + b: matmul by the constant W^T, then add
    x = p.arg(op, "x", what)
    w = p.cval(op, "weight", what)
    if w.ndim != 2:
        raise ModelError(f"{what}: weight must be 2-D, got shape {w.shape}")
    b = p.cval(op, "bias", what)
    wt = p.const(np.broadcast_to(np.zeros((), w.dtype), w.shape[::-1]) if _placeholder(w)
                 else np.ascontiguousarray(w.T))
    if b is None:
        p.emit("matmul", [x, wt], outs, source="linear")
    else:
        t = p.emit("matmul", [x, wt], [p.tmp()], source="linear")
        p.emit("add", [t, p.const(np.asarray(b, np.float32).reshape(-1))], outs, source="(bias)")


@_mil("matmul")
def _matmul(p, op, outs, what):
    xs = []
    for key, tk in (("x", "transpose_x"), ("y", "transpose_y")):
        t = p.arg(op, key, what)
        if bool(np.asarray(p.cval(op, tk, what, False)).reshape(-1)[0]):
            if t in p.consts:
                c = np.swapaxes(p.consts[t], -1, -2)
                t = p.const(np.broadcast_to(np.zeros((), c.dtype), c.shape) if _placeholder(c)
                            else np.ascontiguousarray(c))
            else:
                r = p.rank_hint(t)
                if r is None:
                    raise ModelError(f"{what}: {tk} on a tensor of unknown rank")
                perm = list(range(len(r)))
                perm[-1], perm[-2] = perm[-2], perm[-1]
                t = p.emit("transpose", [t], [p.tmp()], {"perm": perm}, source="matmul(transpose)")
        xs.append(t)
    p.emit("matmul", xs, outs, source="matmul")


@_mil("batch_norm")
def _batch_norm(p, op, outs, what):
    x = p.arg(op, "x", what)
    mean, var = p.cval(op, "mean", what), p.cval(op, "variance", what)
    c = np.asarray(mean).size
    g = p.cval(op, "gamma", what, np.ones(c, np.float32))
    be = p.cval(op, "beta", what, np.zeros(c, np.float32))
    eps = _scalar(p.cval(op, "epsilon", what, 1e-5), what, "epsilon")
    ins = [x] + [p.const(np.asarray(v, np.float32).reshape(-1)) for v in (g, be, mean, var)]
    p.emit("batchnorm", ins, outs, {"epsilon": eps}, source="batch_norm")


@_mil("layer_norm", "instance_norm")
def _layer_norm(p, op, outs, what):
    x = p.arg(op, "x", what)
    r = p.rank_of(x, what)
    if op.type == "instance_norm":       # per sample and channel over the spatial axes
        axes = list(range(2, r))
        g, be = p.cval(op, "gamma", what), p.cval(op, "beta", what)
        eps = _scalar(p.cval(op, "epsilon", what, 1e-5), what, "epsilon")
        sh = (-1,) + (1,) * (r - 2)
        g = None if g is None else np.asarray(g, np.float32).reshape(sh)
        be = None if be is None else np.asarray(be, np.float32).reshape(sh)
        t = p.emit("layer_norm", [x, p.const(np.ones(1, np.float32))], [p.tmp()],
                   {"axis": 2, "epsilon": eps}, source="instance_norm")
        if g is not None:
            t = p.emit("mul", [t, p.const(g)], [p.tmp()] if be is not None else outs, source="instance_norm")
        if be is not None:
            t = p.emit("add", [t, p.const(be)], outs, source="instance_norm")
        if g is None and be is None:
            p.emit("identity", [t], outs, source="instance_norm")
        return
    axes = p.cval(op, "axes", what)
    axes = sorted({int(a) % r for a in np.asarray(axes).reshape(-1)}) if axes is not None else list(range(r))
    if axes != list(range(r - len(axes), r)):
        raise ModelError(f"{what}: layer_norm over axes {axes} of a {r}-D tensor: fastane normalises "
                         f"the trailing axes only")
    g, be = p.cval(op, "gamma", what), p.cval(op, "beta", what)
    eps = _scalar(p.cval(op, "epsilon", what, 1e-5), what, "epsilon")
    ins = [x, p.const(np.ones(1, np.float32) if g is None else np.asarray(g, np.float32))]
    if be is not None:
        ins.append(p.const(np.asarray(be, np.float32)))
    p.emit("layer_norm", ins, outs, {"axis": axes[0] if axes else r, "epsilon": eps}, source="layer_norm")


@_mil("softmax")
def _softmax(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("softmax", [x], outs, {"axis": int(_scalar(p.cval(op, "axis", what, -1), what, "axis"))},
           source="softmax")


_RED = {"reduce_sum": "reduce_sum", "reduce_mean": "reduce_mean", "reduce_max": "reduce_max",
        "reduce_min": "reduce_min"}


@_mil(*_RED, "reduce_log_sum_exp", "reduce_sum_square", "reduce_l2_norm", "reduce_log_sum")
def _reduce(p, op, outs, what):
    x = p.arg(op, "x", what)
    axes = p.cval(op, "axes", what)
    keep = int(bool(np.asarray(p.cval(op, "keep_dims", what, False)).reshape(-1)[0]))
    ax = [] if axes is None else [p.const(np.asarray(axes, np.int64).reshape(-1))]
    at = {"keepdims": keep}
    src = op.type
    if op.type in _RED:
        p.emit(_RED[op.type], [x] + ax, outs, at, source=src)
    elif op.type == "reduce_log_sum_exp":   # log(sum(exp(x))): the plain composition
        e = p.emit("exp", [x], [p.tmp()], source=src)
        sm = p.emit("reduce_sum", [e] + ax, [p.tmp()], at, source=src)
        p.emit("log", [sm], outs, source=src)
    elif op.type == "reduce_sum_square":
        sq = p.emit("pow", [x, p.const(2.0, np.float32)], [p.tmp()], source=src)
        p.emit("reduce_sum", [sq] + ax, outs, at, source=src)
    elif op.type == "reduce_l2_norm":
        sq = p.emit("pow", [x, p.const(2.0, np.float32)], [p.tmp()], source=src)
        s = p.emit("reduce_sum", [sq] + ax, [p.tmp()], at, source=src)
        p.emit("sqrt", [s], outs, source=src)
    else:                                   # reduce_log_sum
        s = p.emit("reduce_sum", [x] + ax, [p.tmp()], at, source=src)
        p.emit("log", [s], outs, source=src)


@_mil("max_pool", "avg_pool")
def _pool(p, op, outs, what):
    x = p.arg(op, "x", what)
    k = _ints(p.cval(op, "kernel_sizes", what))
    if not k:
        raise ModelError(f"{what}: kernel_sizes is required")
    auto, pads = _pads_mil(p, op, what, len(k))
    attrs = {"kernel": k, "strides": _ints(p.cval(op, "strides", what)), "pads": pads, "auto_pad": auto,
             "ceil_mode": int(bool(np.asarray(p.cval(op, "ceil_mode", what, False)).reshape(-1)[0]))}
    if op.type == "avg_pool":
        ex = bool(np.asarray(p.cval(op, "exclude_padding_from_average", what, False)).reshape(-1)[0])
        attrs["count_include_pad"] = int(not ex)
    p.emit(op.type, [x], outs, attrs, source=op.type)


@_mil("reshape")
def _reshape(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("reshape", [x, p.arg(op, "shape", what)], outs, source="reshape")


@_mil("transpose")
def _transpose(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("transpose", [x], outs, {"perm": list(_ints(p.cval(op, "perm", what)))}, source="transpose")


@_mil("concat")
def _concat(p, op, outs, what):
    vals = p.args(op, "values", what)
    if bool(np.asarray(p.cval(op, "interleave", what, False)).reshape(-1)[0]):
        raise ModelError(f"{what}: concat with interleave=True is not supported")
    p.emit("concat", vals, outs, {"axis": int(_scalar(p.cval(op, "axis", what), what, "axis"))},
           source="concat")


@_mil("squeeze", "expand_dims")
def _squeeze(p, op, outs, what):
    x = p.arg(op, "x", what)
    axes = p.cval(op, "axes", what)
    fop = "squeeze" if op.type == "squeeze" else "unsqueeze"
    ins = [x] + ([] if axes is None else [p.const(np.asarray(axes, np.int64).reshape(-1))])
    if fop == "unsqueeze" and axes is None:
        raise ModelError(f"{what}: expand_dims needs axes")
    p.emit(fop, ins, outs, source=op.type)


@_mil("slice_by_index")
def _slice_by_index(p, op, outs, what):
    x = p.arg(op, "x", what)
    r = p.rank_of(x, what)
    begin = np.asarray(p.cval(op, "begin", what), np.int64).reshape(-1)
    end = np.asarray(p.cval(op, "end", what), np.int64).reshape(-1)
    stride = np.asarray(p.cval(op, "stride", what, np.ones(r, np.int64)), np.int64).reshape(-1)
    bm = np.asarray(p.cval(op, "begin_mask", what, np.zeros(r, bool))).reshape(-1).astype(bool)
    em = np.asarray(p.cval(op, "end_mask", what, np.zeros(r, bool))).reshape(-1).astype(bool)
    sm = np.asarray(p.cval(op, "squeeze_mask", what, np.zeros(r, bool))).reshape(-1).astype(bool)
    if not len(begin) == len(end) == len(stride) == len(bm) == len(em) == len(sm) == r:
        raise ModelError(f"{what}: begin/end/stride/masks must have one value per axis ({r})")
    big = 1 << 62
    st = np.where(bm, np.where(stride > 0, 0, big), begin)
    en = np.where(em, np.where(stride > 0, big, -big), end)
    en = np.where(sm, np.where(begin == -1, big, begin + 1), en)
    st = np.where(sm, begin, st)
    ins = [x, p.const(st), p.const(en), p.const(np.arange(r, dtype=np.int64)),
           p.const(np.where(sm, 1, stride))]
    if sm.any():
        t = p.emit("slice", ins, [p.tmp()], source="slice_by_index")
        p.emit("squeeze", [t, p.const(np.flatnonzero(sm).astype(np.int64))], outs, source="slice_by_index")
    else:
        p.emit("slice", ins, outs, source="slice_by_index")


@_mil("slice_by_size")
def _slice_by_size(p, op, outs, what):
    x = p.arg(op, "x", what)
    begin = np.asarray(p.cval(op, "begin", what), np.int64).reshape(-1)
    size = np.asarray(p.cval(op, "size", what), np.int64).reshape(-1)
    if begin.shape != size.shape:
        raise ModelError(f"{what}: begin and size differ in length")
    end = np.where(size == -1, 1 << 62, begin + size)
    p.emit("slice", [x, p.const(begin), p.const(end)], outs, source="slice_by_size")


@_mil("pad")
def _pad(p, op, outs, what):
    x = p.arg(op, "x", what)
    r = p.rank_of(x, what)
    pad = np.asarray(p.cval(op, "pad", what), np.int64).reshape(-1)
    mode = str(np.asarray(p.cval(op, "mode", what, "constant")).reshape(-1)[0])
    val = _scalar(p.cval(op, "constant_val", what, 0.0), what, "constant_val")
    if pad.size % 2 or pad.size > 2 * r:
        raise ModelError(f"{what}: pad of {pad.size} values for a tensor of rank {r}")
    k = pad.size // 2
    begins = [0] * (r - k) + [int(pad[2 * i]) for i in range(k)]
    ends = [0] * (r - k) + [int(pad[2 * i + 1]) for i in range(k)]
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise ModelError(f"{what}: pad mode {mode!r} is not supported")
    p.emit("pad", [x, p.const(np.array(begins + ends, np.int64)), p.const(np.float32(val))], outs,
           {"mode": modes[mode]}, source="pad")


@_mil("gather")
def _gather(p, op, outs, what):
    x, i = p.arg(op, "x", what), p.arg(op, "indices", what)
    p.emit("gather", [x, i], outs, {"axis": int(_scalar(p.cval(op, "axis", what, 0), what, "axis"))},
           source="gather")


@_mil("split")
def _split(p, op, outs, what):
    x = p.arg(op, "x", what)
    shape = p.rank_hint(x)
    r = p.rank_of(x, what)
    axis = int(_scalar(p.cval(op, "axis", what), what, "axis"))
    if not -r <= axis < r or isinstance(shape[axis % r], str):
        raise ModelError(f"{what}: axis {axis} is out of range or symbolic for shape {shape}")
    axis %= r
    n = shape[axis]
    sizes = p.cval(op, "split_sizes", what)
    if sizes is None:
        k = int(_scalar(p.cval(op, "num_splits", what), what, "num_splits"))
        if k < 1:
            raise ModelError(f"{what}: num_splits {k} must be >= 1")
        sizes = [-(-n // k)] * (n // -(-n // k)) + ([n % -(-n // k)] if n % -(-n // k) else [])
    sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
    if sum(sizes) != n or len(sizes) != len(outs) or min(sizes) < 0:
        raise ModelError(f"{what}: split sizes {sizes} do not cover axis {axis} ({n}) in {len(outs)} outputs")
    start = 0
    for size, o in zip(sizes, outs):
        p.emit("slice", [x, p.const(np.array([start], np.int64)), p.const(np.array([start + size], np.int64)),
                         p.const(np.array([axis], np.int64))], [o], source="split", name=o)
        start += size


@_mil("upsample_nearest_neighbor")
def _upsample_nn(p, op, outs, what):     # integer scales: reshape, expand (a broadcast copy), reshape
    x = p.arg(op, "x", what)
    shape = p.rank_hint(x)
    if shape is None or len(shape) != 4 or any(isinstance(d, str) for d in shape):
        raise ModelError(f"{what}: needs a 4-D input of static shape, got {shape}")
    sh = _scalar(p.cval(op, "scale_factor_height", what, 1), what, "scale_factor_height")
    sw = _scalar(p.cval(op, "scale_factor_width", what, 1), what, "scale_factor_width")
    if sh != int(sh) or sw != int(sw) or sh < 1 or sw < 1:
        raise ModelError(f"{what}: only positive integer scale factors are supported, got {sh}, {sw}")
    sh, sw = int(sh), int(sw)
    n, c, h, w = shape
    t = p.emit("reshape", [x, p.const(np.array([n, c, h, 1, w, 1], np.int64))], [p.tmp()],
               source="upsample_nearest_neighbor")
    t = p.emit("expand", [t, p.const(np.array([n, c, h, sh, w, sw], np.int64))], [p.tmp()],
               source="upsample_nearest_neighbor")
    p.emit("reshape", [t, p.const(np.array([n, c, h * sh, w * sw], np.int64))], outs,
           source="upsample_nearest_neighbor")


@_mil("stack")
def _stack(p, op, outs, what):
    vals = p.args(op, "values", what)
    axis = int(_scalar(p.cval(op, "axis", what), what, "axis"))
    ex = [p.emit("unsqueeze", [v, p.const(np.array([axis], np.int64))], [p.tmp()], source="stack")
          for v in vals]
    p.emit("concat", ex, outs, {"axis": axis}, source="stack")


@_mil("flatten2d")
def _flatten2d(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("flatten", [x], outs, {"axis": int(_scalar(p.cval(op, "axis", what, 1), what, "axis"))},
           source="flatten2d")


@_mil("linear_activation")
def _linear_activation(p, op, outs, what):     # alpha * x + beta
    x = p.arg(op, "x", what)
    al = _scalar(p.cval(op, "alpha", what), what, "alpha")
    be = _scalar(p.cval(op, "beta", what, 0.0), what, "beta")
    t = p.emit("mul", [x, p.const(al, np.float32)], [p.tmp()], source="linear_activation")
    p.emit("add", [t, p.const(be, np.float32)], outs, source="linear_activation")


# ------------------------------------------------------------------ neural network (.mlmodel)
#: neural network layer types the importer maps
NN_LAYERS = ("convolution", "innerProduct", "batchnorm", "activation", "add", "multiply",
             "pooling", "softmax", "flatten", "concat", "reshapeStatic", "flattenTo2D")


def _weights(wp, n: int, what: str, weights: bool) -> np.ndarray:
    """A WeightParams as float32 (floatValue, float16Value, or 8-bit linear/LUT quantized)."""
    if len(wp.floatValue):
        if len(wp.floatValue) != n:
            raise ModelError(f"{what}: holds {len(wp.floatValue)} values, the layer needs {n}")
        return np.asarray(wp.floatValue, np.float32)
    if len(wp.float16Value):
        if len(wp.float16Value) != 2 * n:
            raise ModelError(f"{what}: holds {len(wp.float16Value)} bytes of fp16, the layer needs {2 * n}")
        return np.frombuffer(wp.float16Value, "<f2").astype(np.float32)
    if len(wp.rawValue):
        q = wp.quantization
        nb = q.numberOfBits
        if not 1 <= nb <= 8:
            raise ModelError(f"{what}: {nb}-bit quantization is not supported")
        try:
            idx = unpack_bits_msb(wp.rawValue, nb, n)
        except ValueError as exc:
            raise ModelError(f"{what}: {exc}") from None
        kind = q.WhichOneof("QuantizationType")
        if kind == "lookupTableQuantization":
            lut = np.asarray(q.lookupTableQuantization.floatValue, np.float32)
            if lut.size != 1 << nb:
                raise ModelError(f"{what}: a {nb}-bit table needs {1 << nb} entries, has {lut.size}")
            return lut[idx]
        if kind == "linearQuantization":
            # w = scale * q + bias, one (scale, bias) or one per output channel (axis 0)
            sc = np.asarray(q.linearQuantization.scale, np.float64)
            bi = np.asarray(q.linearQuantization.bias, np.float64)
            if sc.size != bi.size or sc.size < 1 or n % sc.size:
                raise ModelError(f"{what}: {sc.size} scales and {bi.size} biases do not fit {n} weights")
            per = n // sc.size
            with np.errstate(over="ignore", invalid="ignore"):
                return (idx.reshape(sc.size, per) * sc[:, None] + bi[:, None]).astype(np.float32).reshape(-1)
        raise ModelError(f"{what}: quantization {kind!r} is not supported")
    if n == 0:
        return np.zeros(0, np.float32)
    raise ModelError(f"{what}: no weight values (the layer needs {n})")


def unpack_bits_msb(raw, nbits: int, count: int) -> np.ndarray:
    """Neural network quantized weights: ``nbits``-bit indices packed most significant bit
    first (Core ML's NeuralNetwork.proto)."""
    raw = np.frombuffer(raw, np.uint8)
    need = -(-count * nbits // 8)
    if raw.size < need:
        raise ValueError(f"{count} values of {nbits} bits need {need} bytes, got {raw.size}")
    bits = np.unpackbits(raw[:need])[:count * nbits].reshape(count, nbits)
    return (bits.astype(np.uint16) << np.arange(nbits - 1, -1, -1, dtype=np.uint16)).sum(axis=1)


def _nn_input_type(fd, what):
    t = fd.type.WhichOneof("Type")
    if t != "multiArrayType":
        raise ModelError(f"{what}: only multi-array inputs are supported (got {t})")
    ma = fd.type.multiArrayType
    from coremltools.proto import FeatureTypes_pb2 as F
    dt = {F.ArrayFeatureType.FLOAT32: np.float32, F.ArrayFeatureType.DOUBLE: np.float64,
          F.ArrayFeatureType.FLOAT16: np.float16, F.ArrayFeatureType.INT32: np.int32}.get(ma.dataType)
    if dt is None:
        raise ModelError(f"{what}: array data type {ma.dataType} is not supported")
    shape = tuple(int(s) for s in ma.shape)
    if not shape or any(s < 1 for s in shape):
        raise ModelError(f"{what}: needs a fixed shape, got {shape}")
    return np.dtype(dt), shape


def _neural_network(spec, nn, name, weights) -> Graph:
    """A neural network spec: rank-3 (C, H, W) or rank-1 (C) inputs become (1, C, H, W) /
    (1, C) tensors (Core ML's batch of one); the outputs lose that batch axis again (an
    inner product's output is then (C,), not Core ML's (C, 1, 1))."""
    consts: dict = {}
    nodes: list = []
    inputs: dict = {}
    counter = [0]

    def const(v):
        counter[0] += 1
        k = f"fastane::nn{counter[0]}"
        consts[k] = np.asarray(v)
        return k

    def tmp():
        counter[0] += 1
        return f"fastane::nnt{counter[0]}"

    batch_axes: dict = {}
    for fd in spec.description.input:
        dt, shape = _nn_input_type(fd, f"input {fd.name!r}")
        inputs[fd.name] = TensorType(dt, shape)
        check_size(shape, f"input {fd.name!r}")
    alias = {}
    batched = False
    for k, t in inputs.items():
        cur = k
        if np.dtype(t.dtype) != np.float32:
            cur = tmp()
            nodes.append(Node("cast", f"{k}:to_fp32", [k], [cur], {"to": np.dtype(np.float32)}, "cast"))
        if len(t.shape) in (1, 3):
            batched = True
            nxt = tmp()
            nodes.append(Node("unsqueeze", f"{k}:batch", [cur, const(np.array([0], np.int64))], [nxt], {},
                              "batch"))
            cur = nxt
        alias[k] = cur
    for layer in nn.layers:
        kind = layer.WhichOneof("layer")
        what = f"layer {layer.name!r} ({kind})"
        if kind not in NN_LAYERS:
            raise ModelError(f"{what}: neural network layer {kind!r} is not supported by fastane")
        ins = [alias.get(i, i) for i in layer.input]
        outs = list(layer.output)
        if len(outs) != 1:
            raise ModelError(f"{what}: has {len(outs)} outputs, fastane maps 1")
        if not ins:
            raise ModelError(f"{what}: has no inputs")
        L = getattr(layer, kind)
        src = kind

        def emit(op, i, o, attrs=None):
            nodes.append(Node(op, layer.name if o == outs else f"{layer.name}:{op}", i, o, attrs or {}, src))
            return o[0]
        if kind == "convolution":
            if L.isDeconvolution:
                raise ModelError(f"{what}: deconvolution layers are not supported yet")
            co, kc = int(L.outputChannels), int(L.kernelChannels)
            kh, kw = (list(L.kernelSize) + [3, 3])[:2] if L.kernelSize else (3, 3)
            g = int(L.nGroups or 1)
            n = check_size((co, kc, kh, kw), what)
            w = _weights(L.weights, n, f"{what} weights", weights).reshape(co, kc, kh, kw)
            strides = tuple(L.stride) or (1, 1)
            dil = tuple(L.dilationFactor) or (1, 1)
            pk = L.WhichOneof("ConvolutionPaddingType")
            if pk == "same":
                auto, pads = ("same_upper" if L.same.asymmetryMode == 0 else "same_lower"), None
            else:
                auto = None
                bs = L.valid.paddingAmounts.borderAmounts
                pads = tuple((int(b.startEdgeSize), int(b.endEdgeSize)) for b in bs) if len(bs) == 2 else None
            ii = [ins[0], const(w)]
            if L.hasBias:
                ii.append(const(_weights(L.bias, co, f"{what} bias", weights)))
            emit("conv", ii, outs, {"strides": strides, "dilations": dil, "pads": pads, "auto_pad": auto,
                                    "groups": g})
        elif kind == "innerProduct":
            co, ci = int(L.outputChannels), int(L.inputChannels)
            n = check_size((co, ci), what)
            w = _weights(L.weights, n, f"{what} weights", weights).reshape(co, ci)
            x = ins[0]
            t = tmp()
            nodes.append(Node("flatten", f"{layer.name}:flatten", [x], [t], {"axis": 1}, src))
            ii = [t, const(np.ascontiguousarray(w.T))]
            if L.hasBias:
                m = emit("matmul", ii, [tmp()])
                emit("add", [m, const(_weights(L.bias, co, f"{what} bias", weights))], outs)
            else:
                emit("matmul", ii, outs)
        elif kind == "batchnorm":
            c = int(L.channels)
            vals = [_weights(getattr(L, k), c, f"{what} {k}", weights) for k in ("gamma", "beta", "mean", "variance")]
            emit("batchnorm", [ins[0]] + [const(v) for v in vals], outs, {"epsilon": float(L.epsilon or 1e-5)})
        elif kind == "activation":
            a = L.WhichOneof("NonlinearityType")
            table = {"ReLU": ("relu", {}), "sigmoid": ("sigmoid", {}), "tanh": ("tanh", {}),
                     "softplus": ("softplus", {}), "leakyReLU": ("leaky_relu", {"alpha": L.leakyReLU.alpha}),
                     "ELU": ("elu", {"alpha": L.ELU.alpha})}
            if a not in table and a != "linear":
                raise ModelError(f"{what}: activation {a!r} is not supported")
            if a == "linear":
                t = emit("mul", [ins[0], const(np.float32(L.linear.alpha))], [tmp()])
                emit("add", [t, const(np.float32(L.linear.beta))], outs)
            else:
                emit(table[a][0], ins[:1], outs, table[a][1])
        elif kind in ("add", "multiply"):
            op = "add" if kind == "add" else "mul"
            if len(ins) == 1:
                emit(op, [ins[0], const(np.float32(L.alpha))], outs)
            else:
                cur = ins[0]
                for i, other in enumerate(ins[1:]):
                    cur = emit(op, [cur, other], outs if i == len(ins) - 2 else [tmp()])
        elif kind == "pooling":
            k = tuple(L.kernelSize) or (3, 3)
            typ = L.type          # MAX 0, AVERAGE 1
            if typ not in (0, 1):
                raise ModelError(f"{what}: L2 pooling is not supported")
            if L.globalPooling:
                emit("global_max_pool" if typ == 0 else "global_avg_pool", ins[:1], outs)
            else:
                pk = L.WhichOneof("PoolingPaddingType")
                auto, pads = (None, None)
                if pk == "same":
                    auto = "same_upper"
                elif pk == "valid":
                    bs = L.valid.paddingAmounts.borderAmounts
                    pads = tuple((int(b.startEdgeSize), int(b.endEdgeSize)) for b in bs) if len(bs) == 2 else None
                else:
                    raise ModelError(f"{what}: includeLastPixel padding is not supported")
                attrs = {"kernel": k, "strides": tuple(L.stride) or (1, 1), "pads": pads, "auto_pad": auto}
                if typ == 1:
                    attrs["count_include_pad"] = int(not L.avgPoolExcludePadding)
                emit("max_pool" if typ == 0 else "avg_pool", ins[:1], outs, attrs)
        elif kind == "softmax":
            emit("softmax", ins[:1], outs, {"axis": 1})
        elif kind in ("flatten", "flattenTo2D"):
            emit("flatten", ins[:1], outs, {"axis": 1})
        elif kind == "concat":
            emit("concat", ins, outs, {"axis": 1})
        elif kind == "reshapeStatic":
            emit("reshape", [ins[0], const(np.array((1,) + tuple(L.targetShape), np.int64))], outs)
    out_names = []
    for fd in spec.description.output:
        out_names.append(fd.name)
    # drop the batch axis again where the declared output has none
    final = []
    produced = {o for n in nodes for o in n.outputs}
    for o in out_names:
        if o not in produced and o not in alias:
            raise ModelError(f"model output {o!r} is not produced by any layer")
        if batched:
            inner = f"fastane::nnout:{o}"
            for n in nodes:
                n.outputs = [inner if t == o else t for t in n.outputs]
                n.inputs = [inner if t == o else t for t in n.inputs]
            nodes.append(Node("squeeze", f"{o}:batch", [inner, const(np.array([0], np.int64))], [o], {}, "batch"))
        final.append(o)
    return Graph(name, inputs, final, nodes, consts,
                 origin=f"coreml neuralNetwork (spec {spec.specificationVersion})", weights=weights)
