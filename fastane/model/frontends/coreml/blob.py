"""The Core ML importer's weight side: the MIL weight blob reader (every offset and size
checked against the file before anything is allocated), MIL value types, the sub-byte
unpacking and the ``constexpr_*`` decompression (see :mod:`fastane.model.frontends.coreml.importer`,
the entry point).  coremltools' protobuf classes only through :func:`ct_proto`, lazily."""

from __future__ import annotations

import math
import os

import numpy as np

from ....errors import ModelError, quote
from ...files import inside, map_file
from ...graph import check_size

#: with ``weights=False``, constants above this many elements are not decoded
SHAPE_ONLY_ABOVE = 4096


def ct_proto():
    """``(Model_pb2, MIL_pb2)`` of ``coremltools.proto``, imported when first needed."""
    try:
        from coremltools.proto import MIL_pb2, Model_pb2
    except ImportError:  # pragma: no cover - the extra is part of the test extra
        raise ImportError("loading Core ML models needs coremltools: pip install 'fastane[coreml]'") from None
    return Model_pb2, MIL_pb2


# ------------------------------------------------------------------ the weight blob
#: MIL storage blob header and per-blob metadata (little-endian): the file starts with a
#: 64-byte header (u32 count, u32 version); each blob's metadata (64 bytes, where the
#: spec's offset points) is u32 sentinel 0xDEADBEEF, u32 data type, u64 size in bytes,
#: u64 offset of the data
_SENTINEL = 0xDEADBEEF
_BLOB_HEADER = 64


class Blobs:
    """The weight files of a package (in ``wdir``, and like every file of the package inside
    the real path of ``root``, :mod:`~fastane.model.files`), opened lazily, every read
    bounds-checked."""

    def __init__(self, wdir, root):
        self.wdir, self.root = wdir, root
        self.files: dict = {}

    def read(self, file_name: str, offset: int, nbytes: int, what: str) -> memoryview:
        if self.wdir is None:
            raise ModelError(
                f"{what}: refers to weight file {quote(file_name)}, but a bare .mlmodel has "
                f"no weights directory (load the .mlpackage)"
            )
        prefix = "@model_path/weights/"
        if not file_name.startswith(prefix):
            raise ModelError(f"{what}: weight file {quote(file_name)} is not under @model_path/weights/")
        rel = file_name[len(prefix) :]
        if rel not in self.files:
            # checked against the package, not the weights folder: a weights folder that
            # is a link out of the package (weights -> /etc) is refused
            full = inside(self.root, os.path.join(self.wdir, rel), f"{what}: weight file {quote(file_name)}")
            missing = f"{what}: weight file {quote(file_name)} is missing from the package"
            # mapped, not read: a blob is copied only when a constant is decoded
            self.files[rel] = map_file(full, f"{what}: weight file {quote(file_name)}", missing, self.root)
        buf = self.files[rel]
        size = len(buf)
        if size < _BLOB_HEADER:
            raise ModelError(
                f"{what}: weight file {quote(file_name)} has {size} bytes, less than its "
                f"{_BLOB_HEADER}-byte header (truncated)"
            )
        if offset < _BLOB_HEADER or offset + 64 > size:
            raise ModelError(
                f"{what}: blob metadata at offset {offset} lies outside the "
                f"{size}-byte weight file {quote(file_name)}"
            )
        sentinel, _dtype, nb, data_off = (
            np.frombuffer(buf[offset : offset + 24], "<u4", 2).tolist()
            + np.frombuffer(buf[offset + 8 : offset + 24], "<u8", 2).tolist()
        )
        if sentinel != _SENTINEL:
            raise ModelError(
                f"{what}: no blob at offset {offset} of {quote(file_name)} (sentinel "
                f"{sentinel:#x}, expected {_SENTINEL:#x}): corrupted weight file"
            )
        if nb != nbytes:
            raise ModelError(
                f"{what}: the blob at offset {offset} holds {nb} bytes, the declared type needs {nbytes}"
            )
        if data_off + nb > size:
            raise ModelError(
                f"{what}: the blob's data ({nb} bytes at offset {data_off}) runs past "
                f"the end of the {size}-byte weight file {quote(file_name)} (truncated)"
            )
        return buf[data_off : data_off + nb]


# ------------------------------------------------------------------ MIL values
_DT = None


def flexible_inputs(spec) -> tuple:
    """``(defaults, allowed)`` of the inputs a model description declares flexible
    (``shapeRange`` / ``enumeratedShapes``): input name -> the default shape the description
    gives it, its ``shape`` (:attr:`~fastane.model.graph.Graph.default_shapes`; none where that
    is empty), and -> the shapes it allows (:attr:`~fastane.model.graph.Graph.allowed_shapes`,
    whose kinds are :attr:`~fastane.model.graph.Graph.flexible`)."""
    defaults, allowed = {}, {}
    for fd in spec.description.input:
        if fd.type.WhichOneof("Type") == "multiArrayType":
            t = fd.type.multiArrayType
            kind = t.WhichOneof("ShapeFlexibility")
            if kind not in ("shapeRange", "enumeratedShapes"):
                continue
            if len(t.shape):
                defaults[fd.name] = tuple(int(d) for d in t.shape)
            if kind == "shapeRange":
                allowed[fd.name] = (
                    "range",
                    tuple((int(r.lowerBound), int(r.upperBound)) for r in t.shapeRange.sizeRanges),
                )
            else:
                allowed[fd.name] = (
                    "enumerated",
                    tuple(tuple(int(d) for d in s.shape) for s in t.enumeratedShapes.shapes),
                )
    return defaults, allowed


def mil_dtypes():
    """MIL DataType -> (numpy dtype, bits) (sub-byte unsigned/signed ints unpacked to
    uint8/int8)."""
    global _DT
    if _DT is None:
        _, MIL_pb2 = ct_proto()
        D = MIL_pb2
        _DT = {
            D.BOOL: (np.bool_, 8),
            D.FLOAT16: (np.float16, 16),
            D.FLOAT32: (np.float32, 32),
            D.FLOAT64: (np.float64, 64),
            D.INT8: (np.int8, 8),
            D.INT16: (np.int16, 16),
            D.INT32: (np.int32, 32),
            D.INT64: (np.int64, 64),
            D.UINT8: (np.uint8, 8),
            D.UINT16: (np.uint16, 16),
            D.UINT32: (np.uint32, 32),
            D.UINT64: (np.uint64, 64),
            D.INT4: (np.int8, 4),
            D.UINT4: (np.uint8, 4),
            D.UINT2: (np.uint8, 2),
            D.UINT1: (np.uint8, 1),
            D.UINT3: (np.uint8, 3),
            D.UINT6: (np.uint8, 6),
            D.STRING: (np.str_, 0),
        }
    return _DT


def dtype_name(code) -> str:
    """The name of MIL DataType ``code`` (the number itself if it has none)."""
    _, MIL_pb2 = ct_proto()
    try:
        return MIL_pb2.DataType.Name(code)
    except ValueError:
        return str(code)


def unpack_bits(raw, nbits: int, count: int, signed: bool = False, msb: bool = False) -> np.ndarray:
    """``count`` ``nbits``-bit integers packed into bytes least significant bit first (the
    MIL storage's sub-byte layout; ``msb``: most significant bit first, the neural network
    weights' layout), as uint8 (int8 for ``signed``).  Unpacked a chunk at a time into the
    uint8 result: the temporaries stay small whatever ``count``."""
    raw = np.frombuffer(raw, np.uint8)
    need = -(-count * nbits // 8)
    if raw.size < need:
        raise ValueError(f"{count} values of {nbits} bits need {need} bytes, got {raw.size}")
    out = np.empty(count, np.uint8)
    step = _UNPACK_CHUNK  # a multiple of 8 values: each chunk starts on a byte
    for s in range(0, count, step):
        m = min(step, count - s)
        b0 = s * nbits // 8
        order = "big" if msb else "little"
        bits = np.unpackbits(raw[b0 : b0 + -(-m * nbits // 8)], bitorder=order, count=m * nbits)
        bits = bits.reshape(m, nbits)[:, ::-1] if msb else bits.reshape(m, nbits)
        v = out[s : s + m]
        v[...] = bits[:, 0]
        for b in range(1, nbits):
            v |= bits[:, b] << np.uint8(b)
    if signed:
        # two's complement of nbits, sign-extended to 8 bits in place
        out |= ((out >> np.uint8(nbits - 1)) & np.uint8(1)) * np.uint8((0xFF << nbits) & 0xFF)
        return out.view(np.int8)
    return out


#: values unpacked at a time by :func:`unpack_bits`
_UNPACK_CHUNK = 1 << 20


def tensor_shape(tt, what: str, symbols=False):
    """The shape of MIL TensorType ``tt``; a symbolic dimension becomes ``"what:i"`` with
    ``symbols``, else a ModelError."""
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


def _check_nout(outs, n, what):
    if len(outs) != n:
        raise ModelError(f"{what}: has {len(outs)} outputs, fastane maps {n}")


# ------------------------------------------------------------------ decompression
def _float_out(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.kind == "f" else a


def _affine_dequantize(kw) -> np.ndarray:
    """``constexpr_affine_dequantize``: ``scale * (quantized_data - zero_point)`` along ``axis``."""
    q, zp, sc = (np.asarray(kw[k]) for k in ("quantized_data", "zero_point", "scale"))
    axis = int(kw["axis"])
    r = q.ndim
    if not -r <= axis < r:
        raise ValueError(f"axis {axis} out of range for rank {r}")
    axis %= r
    sh = [1] * r
    for name, v in (("scale", sc), ("zero_point", zp)):
        if v.ndim > 1 or (v.ndim == 1 and v.size != q.shape[axis]):
            raise ValueError(
                f"{name} of shape {v.shape}: a scalar or a vector of {q.shape[axis]} values is needed"
            )
    sh[axis] = -1
    scv = sc.reshape(sh) if sc.ndim == 1 else sc
    zpv = zp.reshape(sh) if zp.ndim == 1 else zp
    return (scv.astype(sc.dtype) * (q.astype(np.float32) - zpv.astype(np.float32)).astype(sc.dtype)).astype(
        sc.dtype
    )


def _blockwise_shift_scale(kw) -> np.ndarray:
    """``constexpr_blockwise_shift_scale``: ``scale * (data - offset)``, each scale a block."""
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


def _lut_ios16(kw) -> np.ndarray:
    """iOS16 ``constexpr_lut_to_dense``: packed indices into one table, and a ``shape``."""
    lut, idx, shape = np.asarray(kw["lut"]), np.asarray(kw["indices"]), kw["shape"]
    shape = tuple(int(s) for s in np.asarray(shape).reshape(-1))
    n = check_size(shape, "constexpr_lut_to_dense shape")
    if lut.ndim != 1 or lut.size not in (2, 4, 16, 64, 256):
        raise ValueError(f"lut of shape {lut.shape}: a 1-D table of 2, 4, 16, 64 or 256 entries")
    nbits = int(math.log2(lut.size))
    return lut[unpack_bits(idx.astype(np.uint8).tobytes(), nbits, n)].reshape(shape)


def _lut_ios18(kw) -> np.ndarray:
    """iOS18 ``constexpr_lut_to_dense``: a table per block, optionally of vectors."""
    idx, lut = np.asarray(kw["indices"]), np.asarray(kw["lut"])
    va = kw.get("vector_axis")
    if idx.ndim < 1 or lut.ndim != idx.ndim + 2:
        raise ValueError(f"lut of rank {lut.ndim} for indices of rank {idx.ndim} (needs rank + 2)")
    P, V = lut.shape[-2:]
    if V > 1 and va is None:
        raise ValueError("vector palettes (VECTOR_SIZE > 1) need vector_axis")
    if idx.size and int(idx.max()) >= P:
        raise ValueError(f"an index {int(idx.max())} is beyond the {P} palette entries")
    check_size(idx.shape + (V,), "constexpr_lut_to_dense output")  # before it is built
    # each index's row in the flat table (block * P + index), in the smallest unsigned
    # type that holds them (one byte a value for up to 256 rows), not int64
    it = np.min_scalar_type(max(lut.size // max(V, 1) - 1, 0))
    blk = np.zeros(idx.shape, it)
    for d in range(idx.ndim):
        if lut.shape[d] < 1 or idx.shape[d] % lut.shape[d]:
            raise ValueError(f"lut shape {lut.shape} does not divide indices shape {idx.shape}")
        if lut.shape[d] > 1:
            pos = np.arange(lut.shape[d], dtype=it).repeat(idx.shape[d] // lut.shape[d])
            blk = blk * it.type(lut.shape[d]) + pos.reshape((-1,) + (1,) * (idx.ndim - 1 - d))
    blk *= it.type(P)
    blk += idx.astype(it, copy=False)
    vals = lut.reshape(-1, V)[blk]  # indices.shape + (V,)
    if V == 1:
        return vals[..., 0]
    a = int(np.asarray(va).reshape(-1)[0]) if np.size(va) == 1 else None
    if a is None or not -idx.ndim <= a < idx.ndim:
        raise ValueError(
            f"vector_axis {np.asarray(va).tolist()} is not an axis of indices of rank {idx.ndim}"
        )
    a %= idx.ndim
    vals = np.moveaxis(vals, -1, a + 1)
    shape = list(idx.shape)
    shape[a] *= V
    return vals.reshape(shape)


def _sparse_ios16(kw) -> np.ndarray:
    """iOS16 ``constexpr_sparse_to_dense``: a packed bit mask and a ``shape``."""
    nz, mask = np.asarray(kw["nonzero_data"]), np.asarray(kw["mask"])
    shape = tuple(int(s) for s in np.asarray(kw["shape"]).reshape(-1))
    bits = unpack_bits(
        mask.astype(np.uint8).tobytes(), 1, check_size(shape, "constexpr_sparse_to_dense shape")
    ).reshape(shape)
    return _scatter(nz, bits)


def _lut_to_dense(kw) -> np.ndarray:
    return _lut_ios16(kw) if "shape" in kw else _lut_ios18(kw)


def _sparse_to_dense(kw) -> np.ndarray:
    if "shape" in kw:  # iOS16
        return _sparse_ios16(kw)
    return _scatter(np.asarray(kw["nonzero_data"]), np.asarray(kw["mask"]))


#: ``constexpr_*`` op -> the function of its operands that makes the value it defines
_DECOMPRESS = {
    "constexpr_affine_dequantize": _affine_dequantize,
    "constexpr_blockwise_shift_scale": _blockwise_shift_scale,
    "constexpr_lut_to_dense": _lut_to_dense,
    "constexpr_sparse_to_dense": _sparse_to_dense,
    "constexpr_cast": lambda kw: np.asarray(kw["source_val"]).astype(kw["output_dtype"]),
}


def decompress(op_type: str, **kw) -> np.ndarray:
    """The value a ``constexpr_*`` op defines, from its constant operands (numpy arrays;
    the iOS16 ``lut_to_dense``/``sparse_to_dense`` take packed ``uint8`` indices/mask and a
    ``shape``).  ValueError for operands that do not fit the op's definition."""
    if op_type not in _DECOMPRESS:
        raise ValueError(f"unknown compression op {op_type!r}")
    return _DECOMPRESS[op_type](kw)


def _scatter(nz, mask):
    if nz.ndim != 1:
        raise ValueError(f"nonzero_data must be 1-D, got shape {nz.shape}")
    k = int(np.count_nonzero(mask))
    if k != nz.size:
        raise ValueError(f"the mask has {k} set bits but nonzero_data holds {nz.size} values")
    out = np.zeros(mask.shape, nz.dtype)
    out[mask != 0] = nz
    return out


MIL_DTYPE = {
    "fp16": np.float16,
    "fp32": np.float32,
    "int32": np.int32,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "bool": np.bool_,
    "int64": np.int64,
    "fp64": np.float64,
}


def constexpr(p: "_Program", op, outs, what):  # noqa: F821 (importer._Program)
    """The MIL handler of the ``constexpr_*`` ops: the decompressed weight as a constant."""
    t = op.type
    keys = {
        "constexpr_affine_dequantize": ("quantized_data", "zero_point", "scale", "axis"),
        "constexpr_blockwise_shift_scale": ("data", "scale", "offset"),
        "constexpr_cast": ("source_val", "output_dtype"),
        "constexpr_lut_to_sparse": ("indices_mask", "indices_nonzero_data", "lut", "vector_axis"),
        "constexpr_sparse_blockwise_shift_scale": ("data_mask", "nonzero_data", "scale", "offset"),
    }
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
    bits = _lut_bits(t, kw)
    if bits:
        p.code_bits[outs[0]] = bits
    if t in _COMPRESSED:
        p.compressed.add(outs[0])  # stored compressed: the placement keeps it so where lossless
    if not p.weights and any(is_placeholder(v) for v in kw.values()):
        # weights=False: a placeholder of the output's declared type
        o = op.outputs[0].type.tensorType
        dt = mil_dtypes()[o.dataType][0]
        shape = tensor_shape(o, what)
        for name in outs:
            p.consts[name] = np.broadcast_to(
                np.zeros((), np.float32 if np.dtype(dt).kind == "f" else dt), shape
            )
        return
    if "output_dtype" in kw:
        s = str(np.asarray(kw["output_dtype"]).reshape(-1)[0])
        if s not in MIL_DTYPE:
            raise ModelError(f"{what}: output_dtype {quote(s)} is not supported")
        kw["output_dtype"] = MIL_DTYPE[s]
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
            full = decompress(
                "constexpr_blockwise_shift_scale", data=dense, scale=kw["scale"], offset=kw.get("offset")
            )
            outs_v = [mask, full[mask != 0]]
        else:
            outs_v = [decompress(t, **kw)]
    except (ValueError, IndexError, KeyError) as exc:
        raise ModelError(f"{what}: {exc}") from None
    for name, v in zip(outs, outs_v):
        p.spend(np.shape(v), np.asarray(v).dtype, what)
        p.consts[name] = np.asarray(_float_out(v), order="C")


#: the constexpr ops whose output the model stores compressed (Graph.compressed)
_COMPRESSED = ("constexpr_lut_to_dense", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale")


def const_op(p: "_Program", op, outs, what):  # noqa: F821 (importer._Program)
    """The MIL handler of ``const``: its ``val`` attribute as a constant."""
    _check_nout(outs, 1, what)
    if "val" not in op.attributes:
        raise ModelError(f"{what}: const without a 'val' attribute")
    v = p.value(op.attributes["val"], what)
    if v.dtype == object:  # strings (pad_type, modes): kept for cval
        p.consts[outs[0]] = v
        return
    if is_placeholder(v):
        p.consts[outs[0]] = np.broadcast_to(np.zeros((), np.float32), v.shape) if v.dtype.kind == "f" else v
    elif not v.flags.writeable and v.dtype.kind == "f":
        # a blob's value (decoded once, shared): widened once too
        if id(v) not in p.widened:
            p.widened[id(v)] = (v, _float_out(v))
        p.consts[outs[0]] = p.widened[id(v)][1]
    else:
        p.consts[outs[0]] = _float_out(v)


def _lut_bits(op_type: str, kw: dict) -> int:
    """The code width of a ``constexpr_lut_to_dense`` weight from its table's shape alone
    (no values: a ``weights=False`` load has them too) when one table of ``2**bits`` scalars
    holds the whole tensor (an iOS16 table; an iOS18 one with a single palette and vector
    size 1); else 0.  What one fp16 palette a core can hold (docs/models.md)."""
    if op_type != "constexpr_lut_to_dense" or "lut" not in kw:
        return 0
    shape = np.shape(kw["lut"])
    if "shape" in kw:  # iOS16: a flat table
        n = shape[0] if len(shape) == 1 else 0
    else:  # iOS18: (*1 a palette per block, 2**bits, vector size)
        n = shape[-2] if len(shape) >= 2 and shape[-1] == 1 and all(s == 1 for s in shape[:-2]) else 0
    bits = int(n).bit_length() - 1 if n else 0
    return bits if 1 <= bits <= 8 and n == 1 << bits else 0


def is_placeholder(v) -> bool:
    """A shape-only constant of a ``weights=False`` load (a zero-stride broadcast)."""
    return (
        isinstance(v, np.ndarray)
        and v.size > SHAPE_ONLY_ABOVE
        and v.ndim > 0
        and all(s == 0 for s in v.strides)
    )
