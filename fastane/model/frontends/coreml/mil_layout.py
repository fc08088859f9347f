"""The Core ML importer's MIL layout ops (reshape, transpose, concat, slices, pad,
gather, split, upsample, stack), registered in :data:`fastane.model.frontends.coreml.mil.MIL_OPS`."""

from __future__ import annotations

import numpy as np

from ....errors import ModelError
from .mil import axis_list, mil_op, scalar_value
from .mil_host import upsample_nearest_fractional


@mil_op("reshape")
def _reshape(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("reshape", [x, p.arg(op, "shape", what)], outs, source="reshape")


@mil_op("transpose")
def _transpose(p, op, outs, what):
    x = p.arg(op, "x", what)
    perm = p.cval(op, "perm", what)
    if perm is None:
        raise ModelError(f"{what}: missing parameter 'perm'")
    shape = p.rank_hint(x)
    rank = np.asarray(perm).size if shape is None else len(shape)
    perm = axis_list(perm, rank, what, "perm")  # (0, 2, -3, -1): coremltools writes negative axes
    if len(perm) != rank:
        raise ModelError(f"{what}: perm {perm} has {len(perm)} axes, the input has {rank}")
    p.emit("transpose", [x], outs, {"perm": perm}, source="transpose")


@mil_op("concat")
def _concat(p, op, outs, what):
    vals = p.args(op, "values", what)
    if bool(np.asarray(p.cval(op, "interleave", what, False)).reshape(-1)[0]):
        raise ModelError(f"{what}: concat with interleave=True is not supported")
    p.emit(
        "concat",
        vals,
        outs,
        {"axis": int(scalar_value(p.cval(op, "axis", what), what, "axis"))},
        source="concat",
    )


@mil_op("squeeze", "expand_dims")
def _squeeze(p, op, outs, what):
    x = p.arg(op, "x", what)
    axes = p.cval(op, "axes", what)
    fop = "squeeze" if op.type == "squeeze" else "unsqueeze"
    ins = [x] + ([] if axes is None else [p.const(np.asarray(axes, np.int64).reshape(-1))])
    if fop == "unsqueeze" and axes is None:
        raise ModelError(f"{what}: expand_dims needs axes")
    p.emit(fop, ins, outs, source=op.type)


@mil_op("slice_by_index")
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
    ins = [
        x,
        p.const(st),
        p.const(en),
        p.const(np.arange(r, dtype=np.int64)),
        p.const(np.where(sm, 1, stride)),
    ]
    if sm.any():
        t = p.emit("slice", ins, [p.tmp()], source="slice_by_index")
        p.emit("squeeze", [t, p.const(np.flatnonzero(sm).astype(np.int64))], outs, source="slice_by_index")
    else:
        p.emit("slice", ins, outs, source="slice_by_index")


@mil_op("slice_by_size")
def _slice_by_size(p, op, outs, what):
    x = p.arg(op, "x", what)
    begin = np.asarray(p.cval(op, "begin", what), np.int64).reshape(-1)
    size = np.asarray(p.cval(op, "size", what), np.int64).reshape(-1)
    if begin.shape != size.shape:
        raise ModelError(f"{what}: begin and size differ in length")
    end = np.where(size == -1, 1 << 62, begin + size)
    p.emit("slice", [x, p.const(begin), p.const(end)], outs, source="slice_by_size")


@mil_op("pad")
def _pad(p, op, outs, what):
    x = p.arg(op, "x", what)
    r = p.rank_of(x, what)
    pad = np.asarray(p.cval(op, "pad", what), np.int64).reshape(-1)
    mode = str(np.asarray(p.cval(op, "mode", what, "constant")).reshape(-1)[0])
    val = scalar_value(p.cval(op, "constant_val", what, 0.0), what, "constant_val")
    if pad.size % 2 or pad.size > 2 * r:
        raise ModelError(f"{what}: pad of {pad.size} values for a tensor of rank {r}")
    k = pad.size // 2
    begins = [0] * (r - k) + [int(pad[2 * i]) for i in range(k)]
    ends = [0] * (r - k) + [int(pad[2 * i + 1]) for i in range(k)]
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise ModelError(f"{what}: pad mode {mode!r} is not supported")
    p.emit(
        "pad",
        [x, p.const(np.array(begins + ends, np.int64)), p.const(np.float32(val))],
        outs,
        {"mode": modes[mode]},
        source="pad",
    )


@mil_op("gather")
def _gather(p, op, outs, what):
    x, i = p.arg(op, "x", what), p.arg(op, "indices", what)
    p.emit(
        "gather",
        [x, i],
        outs,
        {"axis": int(scalar_value(p.cval(op, "axis", what, 0), what, "axis"))},
        source="gather",
    )


@mil_op("split")
def _split(p, op, outs, what):
    x = p.arg(op, "x", what)
    shape = p.rank_hint(x)
    r = p.rank_of(x, what)
    axis = int(scalar_value(p.cval(op, "axis", what), what, "axis"))
    if not -r <= axis < r or isinstance(shape[axis % r], str):
        raise ModelError(f"{what}: axis {axis} is out of range or symbolic for shape {shape}")
    axis %= r
    n = shape[axis]
    sizes = p.cval(op, "split_sizes", what)
    if sizes is None:
        k = int(scalar_value(p.cval(op, "num_splits", what), what, "num_splits"))
        if k < 1:
            raise ModelError(f"{what}: num_splits {k} must be >= 1")
        sizes = [-(-n // k)] * (n // -(-n // k)) + ([n % -(-n // k)] if n % -(-n // k) else [])
    sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
    if sum(sizes) != n or len(sizes) != len(outs) or min(sizes) < 0:
        raise ModelError(f"{what}: split sizes {sizes} do not cover axis {axis} ({n}) in {len(outs)} outputs")
    start = 0
    for size, o in zip(sizes, outs):
        p.emit(
            "slice",
            [
                x,
                p.const(np.array([start], np.int64)),
                p.const(np.array([start + size], np.int64)),
                p.const(np.array([axis], np.int64)),
            ],
            [o],
            source="split",
            name=o,
        )
        start += size


@mil_op("upsample_nearest_neighbor")
def _upsample_nn(p, op, outs, what):  # integer scales: reshape, expand (a broadcast copy), reshape
    x = p.arg(op, "x", what)
    shape = p.rank_hint(x)
    sh = scalar_value(p.cval(op, "scale_factor_height", what, 1), what, "scale_factor_height")
    sw = scalar_value(p.cval(op, "scale_factor_width", what, 1), what, "scale_factor_width")
    if sh != int(sh) or sw != int(sw) or sh < 1 or sw < 1 or (shape is not None and len(shape) != 4):
        return upsample_nearest_fractional(p, op, outs, what)  # a resize on the host
    if shape is None or any(isinstance(d, str) for d in shape):
        raise ModelError(f"{what}: needs a 4-D input of static shape, got {shape}")
    sh, sw = int(sh), int(sw)
    n, c, h, w = shape
    t = p.emit(
        "reshape",
        [x, p.const(np.array([n, c, h, 1, w, 1], np.int64))],
        [p.tmp()],
        source="upsample_nearest_neighbor",
    )
    t = p.emit(
        "expand",
        [t, p.const(np.array([n, c, h, sh, w, sw], np.int64))],
        [p.tmp()],
        source="upsample_nearest_neighbor",
    )
    p.emit(
        "reshape",
        [t, p.const(np.array([n, c, h * sh, w * sw], np.int64))],
        outs,
        source="upsample_nearest_neighbor",
    )


@mil_op("stack")
def _stack(p, op, outs, what):
    vals = p.args(op, "values", what)
    axis = int(scalar_value(p.cval(op, "axis", what), what, "axis"))
    ex = [
        p.emit("unsqueeze", [v, p.const(np.array([axis], np.int64))], [p.tmp()], source="stack") for v in vals
    ]
    p.emit("concat", ex, outs, {"axis": axis}, source="stack")


@mil_op("flatten2d")
def _flatten2d(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit(
        "flatten",
        [x],
        outs,
        {"axis": int(scalar_value(p.cval(op, "axis", what, 1), what, "axis"))},
        source="flatten2d",
    )


@mil_op("linear_activation")
def _linear_activation(p, op, outs, what):  # alpha * x + beta
    x = p.arg(op, "x", what)
    al = scalar_value(p.cval(op, "alpha", what), what, "alpha")
    be = scalar_value(p.cval(op, "beta", what, 0.0), what, "beta")
    t = p.emit("mul", [x, p.const(al, np.float32)], [p.tmp()], source="linear_activation")
    p.emit("add", [t, p.const(be, np.float32)], outs, source="linear_activation")
