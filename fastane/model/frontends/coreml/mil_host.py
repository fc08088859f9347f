"""The Core ML importer's MIL ops that fastane runs only on the host (no ANE lowering):
einsum, topk, argsort, reduce_argmax/argmin, cumsum, tile, the gathers and scatters,
one_hot, band_part, the resizes, ``slice_update``, the state ops (a state is an input, zeros
unless given, and its last write an output ``NAME:next``) and ``lstm`` (as Core ML places
recurrent layers: on the CPU); and the MIL ops fastane refuses with the reason
(control flow, lists).  Registered in :data:`fastane.model.frontends.coreml.mil.MIL_OPS`.

Core ML's resize sampling modes (coremltools' MIL op reference, ``resize_bilinear``) map
onto the vocabulary's ``resize`` coordinate transforms: STRICT_ALIGN_CORNERS ->
align_corners, ALIGN_CORNERS -> align_corners_centred, DEFAULT -> asymmetric,
OFFSET_CORNERS -> offset_corners, UNALIGN_CORNERS -> half_pixel.  Nearest neighbour is
``floor(y n / m)`` (asymmetric, floor: an integer scale repeats each pixel; PyTorch's
``nearest``, which coremltools converts to these ops)."""

from __future__ import annotations

import math

import numpy as np

from ....errors import ModelError, ModelNotImplementedError, quote
from .mil import int_tuple, mil_op, scalar_value


def _flag(p, op, key, what, default=False):
    return bool(np.asarray(p.cval(op, key, what, default)).reshape(-1)[0])


def _int(p, op, key, what, default=None):
    v = p.cval(op, key, what, default)
    if v is None:
        raise ModelError(f"{what}: missing parameter {quote(key)}")
    return int(scalar_value(v, what, key))


def _str(p, op, key, what, default):
    return str(np.asarray(p.cval(op, key, what, default)).reshape(-1)[0])


def _static(p, x, what):
    shape = p.rank_hint(x)
    if shape is None or any(isinstance(d, str) for d in shape):
        raise ModelError(f"{what}: needs an input of static shape, got {shape}")
    return tuple(int(d) for d in shape)


@mil_op("einsum")
def _einsum(p, op, outs, what):
    eq = _str(p, op, "equation", what, "")
    p.emit("einsum", p.args(op, "values", what), outs, {"equation": eq}, source="einsum")


def _index_dtype(p, op, what):
    dt = _str(p, op, "output_indices_dtype", what, "int32")
    if dt != "int32":
        raise ModelNotImplementedError(
            f"{what}: output_indices_dtype {quote(dt)} is not implemented (int32 is)"
        )
    return np.dtype(np.int32)


@mil_op("topk")
def _topk(p, op, outs, what):
    x = p.arg(op, "x", what)
    k = _int(p, op, "k", what, 1)
    attrs = {
        "axis": _int(p, op, "axis", what, -1),
        "largest": int(not _flag(p, op, "ascending", what)),
        "index_dtype": _index_dtype(p, op, what),
    }
    o = list(outs) if len(outs) == 2 else [outs[0], p.tmp()]  # return_indices = False
    p.emit("topk", [x, p.const(np.array([k], np.int64))], o, attrs, source="topk")


@mil_op("argsort")
def _argsort(p, op, outs, what):
    x = p.arg(op, "x", what)
    shape = _static(p, x, what)
    axis = _int(p, op, "axis", what, -1)
    if not -len(shape) <= axis < len(shape):
        raise ModelError(f"{what}: axis {axis} out of range for shape {shape}")
    attrs = {
        "axis": axis,
        "largest": int(not _flag(p, op, "ascending", what)),
        "index_dtype": np.dtype(np.int32),
    }
    k = p.const(np.array([shape[axis]], np.int64))
    p.emit("topk", [x, k], [p.tmp(), outs[0]], attrs, source="argsort")


@mil_op("reduce_argmax", "reduce_argmin")
def _argmax(p, op, outs, what):
    x = p.arg(op, "x", what)
    attrs = {
        "axis": _int(p, op, "axis", what, -1),
        "keepdims": int(_flag(p, op, "keep_dims", what)),
        "index_dtype": np.dtype(np.int32),
    }
    p.emit("argmax" if op.type == "reduce_argmax" else "argmin", [x], outs, attrs, source=op.type)


@mil_op("cumsum")
def _cumsum(p, op, outs, what):
    x = p.arg(op, "x", what)
    attrs = {"exclusive": int(_flag(p, op, "exclusive", what)), "reverse": int(_flag(p, op, "reverse", what))}
    axis = p.const(np.array(_int(p, op, "axis", what, 0), np.int64))
    p.emit("cumsum", [x, axis], outs, attrs, source="cumsum")


@mil_op("tile")
def _tile(p, op, outs, what):
    x = p.arg(op, "x", what)
    reps = p.cval(op, "reps", what)
    if reps is None:
        raise ModelError(f"{what}: missing parameter 'reps'")
    p.emit("tile", [x, p.const(np.asarray(reps, np.int64).reshape(-1))], outs, source="tile")


@mil_op("gather_nd")
def _gather_nd(p, op, outs, what):
    ins = [p.arg(op, "x", what), p.arg(op, "indices", what)]
    p.emit("gather_nd", ins, outs, {"batch_dims": _int(p, op, "batch_dims", what, 0)}, source="gather_nd")


@mil_op("gather_along_axis")
def _gather_along_axis(p, op, outs, what):
    ins = [p.arg(op, "x", what), p.arg(op, "indices", what)]
    p.emit("gather_elements", ins, outs, {"axis": _int(p, op, "axis", what, 0)}, source="gather_along_axis")


_MODES = {
    "update": "none",
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "div",
    "max": "max",
    "min": "min",
}


def _mode(p, op, what):
    m = _str(p, op, "mode", what, "update")
    if m not in _MODES:
        raise ModelError(f"{what}: unknown scatter mode {quote(m)}")
    return _MODES[m]


@mil_op("scatter_nd", "scatter_along_axis")
def _scatter_nd(p, op, outs, what):
    ins = [p.arg(op, k, what) for k in ("data", "indices", "updates")]
    attrs = {"reduction": _mode(p, op, what)}
    if op.type == "scatter_along_axis":
        attrs["axis"] = _int(p, op, "axis", what, 0)
    p.emit("scatter_nd" if op.type == "scatter_nd" else "scatter_elements", ins, outs, attrs, source=op.type)


@mil_op("scatter")
def _scatter(p, op, outs, what):  # 1-D indices along axis: scatter_elements with them broadcast
    data, idx, upd = (p.arg(op, k, what) for k in ("data", "indices", "updates"))
    ushape = _static(p, upd, what)
    axis = _int(p, op, "axis", what, 0)
    r = len(ushape)
    if not -r <= axis < r:
        raise ModelError(f"{what}: axis {axis} out of range for updates of shape {ushape}")
    axis %= r
    lay = [1] * r
    lay[axis] = ushape[axis]
    t = p.emit("reshape", [idx, p.const(np.array(lay, np.int64))], [p.tmp()], source="scatter")
    t = p.emit("expand", [t, p.const(np.array(ushape, np.int64))], [p.tmp()], source="scatter")
    attrs = {"axis": axis, "reduction": _mode(p, op, what)}
    p.emit("scatter_elements", [data, t, upd], outs, attrs, source="scatter")


@mil_op("one_hot")
def _one_hot(p, op, outs, what):
    idx = p.arg(op, "indices", what)
    depth = _int(p, op, "one_hot_vector_size", what)
    on = p.cval(op, "on_value", what, 1.0)
    off = p.cval(op, "off_value", what, 0.0)
    v = np.array([scalar_value(off, what, "off_value"), scalar_value(on, what, "on_value")])
    kind = np.asarray(on).dtype.kind
    v = v.astype(np.float32) if kind == "f" else v.astype(np.int32)
    attrs = {"axis": _int(p, op, "axis", what, -1)}
    p.emit("onehot", [idx, p.const(np.array(depth, np.int64)), p.const(v)], outs, attrs, source="one_hot")


@mil_op("band_part")
def _band_part(p, op, outs, what):  # triu(-lower) then tril(upper); a negative bound keeps all
    x = p.arg(op, "x", what)
    lower, upper = _int(p, op, "lower", what, -1), _int(p, op, "upper", what, -1)
    steps = [(k, u) for k, u, keep in ((-lower, 1, lower >= 0), (upper, 0, upper >= 0)) if keep]
    if not steps:
        p.emit("identity", [x], outs, source="band_part")
    for i, (k, u) in enumerate(steps):
        dst = outs if i == len(steps) - 1 else [p.tmp()]
        x = p.emit("trilu", [x, p.const(np.array(k, np.int64))], dst, {"upper": u}, source="band_part")


# ------------------------------------------------------------------ resizing
_SAMPLING = {
    "STRICT_ALIGN_CORNERS": "align_corners",
    "ALIGN_CORNERS": "align_corners_centred",
    "DEFAULT": "asymmetric",
    "OFFSET_CORNERS": "offset_corners",
    "UNALIGN_CORNERS": "half_pixel",
}


def _emit_resize(p, x, outs, sizes, linear, coord, source):
    """A ``resize`` of the trailing ``len(sizes)`` axes of ``x`` to ``sizes``."""
    if min(sizes) < 1:
        raise ModelError(f"op {quote(outs[0])} ({source}): output sizes {sizes} must be >= 1")
    attrs = {
        "mode": "linear" if linear else "nearest",
        "coordinate_transformation_mode": coord,
        "nearest_mode": "floor",
        "axes": list(range(-len(sizes), 0)),
    }
    p.emit("resize", [x, "", "", p.const(np.array(sizes, np.int64))], outs, attrs, source=source)


def _hw(p, x, what):
    shape = _static(p, x, what)
    if len(shape) < 3:
        raise ModelError(f"{what}: needs an input of rank >= 3, got {shape}")
    return shape[-2:]


def _scaled(p, op, x, what):
    h, w = _hw(p, x, what)
    sh = scalar_value(p.cval(op, "scale_factor_height", what, 1), what, "scale_factor_height")
    sw = scalar_value(p.cval(op, "scale_factor_width", what, 1), what, "scale_factor_width")
    if not (math.isfinite(sh) and math.isfinite(sw) and sh > 0 and sw > 0):
        raise ModelError(f"{what}: scale factors {sh}, {sw} must be finite and > 0")
    return [math.floor(h * sh), math.floor(w * sw)]


def upsample_nearest_fractional(p, op, outs, what):
    """``upsample_nearest_neighbor`` with a fractional scale (the integer case is a
    broadcast copy, :mod:`fastane.model.frontends.coreml.mil_layout`)."""
    x = p.arg(op, "x", what)
    _emit_resize(p, x, outs, _scaled(p, op, x, what), False, "asymmetric", "upsample_nearest_neighbor")


@mil_op("upsample_bilinear")
def _upsample_bilinear(p, op, outs, what):
    x = p.arg(op, "x", what)
    align = _flag(p, op, "align_corners", what, True)
    half = _flag(p, op, "half_pixel_centers", what, not align)
    if align and half:
        raise ModelError(f"{what}: align_corners and half_pixel_centers cannot both be set")
    coord = "align_corners" if align else ("half_pixel" if half else "asymmetric")
    _emit_resize(p, x, outs, _scaled(p, op, x, what), True, coord, "upsample_bilinear")


def _sampling(p, op, what):
    m = _str(p, op, "sampling_mode", what, "DEFAULT")
    if m not in _SAMPLING:
        raise ModelError(f"{what}: unknown sampling_mode {quote(m)}")
    return m


@mil_op("resize_bilinear", "resize_nearest_neighbor")
def _resize_target(p, op, outs, what):
    x = p.arg(op, "x", what)
    _hw(p, x, what)
    sizes = [_int(p, op, "target_size_height", what, 1), _int(p, op, "target_size_width", what, 1)]
    if op.type == "resize_nearest_neighbor":
        _emit_resize(p, x, outs, sizes, False, "asymmetric", op.type)
    else:
        _emit_resize(p, x, outs, sizes, True, _SAMPLING[_sampling(p, op, what)], op.type)


@mil_op("resize")
def _resize(p, op, outs, what):  # iOS17: the trailing resized_dims axes from shape (0: keep)
    x = p.arg(op, "x", what)
    xs = _static(p, x, what)
    shape = int_tuple(p.cval(op, "shape", what))
    if shape is None:
        raise ModelError(f"{what}: missing parameter 'shape'")
    k = _int(p, op, "resized_dims", what)
    if not 0 < k <= min(len(shape), len(xs)):
        raise ModelError(f"{what}: resized_dims {k} for shape {list(shape)} and input {xs}")
    sizes = [s if s else xs[len(xs) - k + j] for j, s in enumerate(shape[len(shape) - k :])]
    mode = _str(p, op, "interpolation_mode", what, "LINEAR")
    sampling = _sampling(p, op, what)
    if mode == "LINEAR":
        _emit_resize(p, x, outs, sizes, True, _SAMPLING[sampling], "resize")
    elif mode == "NEAREST_NEIGHBOR":
        if sampling != "DEFAULT":
            raise ModelNotImplementedError(
                f"{what}: NEAREST_NEIGHBOR with sampling_mode {sampling} is not implemented "
                f"(the rounding is not documented; DEFAULT is)"
            )
        _emit_resize(p, x, outs, sizes, False, "asymmetric", "resize")
    else:
        raise ModelError(f"{what}: unknown interpolation_mode {quote(mode)}")


@mil_op("slice_update")
def _slice_update(p, op, outs, what):
    """iOS18 ``slice_update``: ``x`` with ``update`` written where ``slice_by_index`` with the
    same (constant) begin, end, stride and masks would read: a ``scatter_nd`` at those
    positions."""
    x, upd = p.arg(op, "x", what), p.arg(op, "update", what)
    shape = _static(p, x, what)
    r = len(shape)

    def vec(key, default):
        return np.asarray(p.cval(op, key, what, default)).reshape(-1)

    begin, end = vec("begin", None), vec("end", None)
    stride = vec("stride", np.ones(r, np.int64))
    bm, em, sm = (vec(k, np.zeros(r, bool)).astype(bool) for k in ("begin_mask", "end_mask", "squeeze_mask"))
    if not len(begin) == len(end) == len(stride) == len(bm) == len(em) == len(sm) == r:
        raise ModelError(f"{what}: begin/end/stride/masks must have one value per axis ({r})")
    picks = []
    for d in range(r):
        if sm[d]:
            if not -shape[d] <= int(begin[d]) < shape[d]:
                raise ModelError(f"{what}: index {int(begin[d])} out of range for axis {d} of {shape}")
            picks.append([int(begin[d]) % shape[d]])
            continue
        cut = slice(None if bm[d] else int(begin[d]), None if em[d] else int(end[d]), int(stride[d]) or None)
        picks.append(list(range(*cut.indices(shape[d]))))
    kept = tuple(len(k) for d, k in enumerate(picks) if not sm[d])
    want = p.rank_hint(upd)
    if want is not None and tuple(want) != kept:
        raise ModelError(f"{what}: update of shape {tuple(want)} for a slice of shape {kept}")
    idx = np.stack(np.meshgrid(*[np.array(k, np.int64) for k in picks], indexing="ij"), -1).reshape(
        kept + (r,)
    )
    p.emit("scatter_nd", [x, p.const(idx), upd], outs, {"reduction": "none"}, source="slice_update")


# ------------------------------------------------------------------ state (iOS18)
def _state(p, op, key, what) -> str:
    """The state input bound to parameter ``key`` (its MIL name)."""
    args = op.inputs[key].arguments if key in op.inputs else []
    if len(args) != 1 or args[0].WhichOneof("binding") != "name" or args[0].name not in p.states:
        raise ModelError(f"{what}: parameter {quote(key)} must name a state input of the model")
    return args[0].name


@mil_op("read_state")
def _read_state(p, op, outs, what):
    s = _state(p, op, "input", what)
    p.emit("identity", [p.alias.get(s, s)], outs, source="read_state")


def _write(p, s, value, what):
    """``value`` stored in state ``s`` (fp16: rounded as the state's storage rounds it); later
    reads see it, the last write is the model's output ``s:next``."""
    if p.declared.get(s) != np.float16:
        raise ModelNotImplementedError(f"{what}: a state of dtype {p.declared.get(s)} (fp16 is implemented)")
    t = p.emit("cast", [value], [p.tmp()], {"to": np.dtype(np.float16)}, source="write_state", name=p.tmp())
    p.states[s] = p.alias[s] = p.emit(
        "cast", [t], [p.tmp()], {"to": np.dtype(np.float32)}, source="write_state", name=p.tmp()
    )


@mil_op("write_state")
def _write_state(p, op, outs, what):
    _write(p, _state(p, op, "input", what), p.arg(op, "data", what), what)


@mil_op("coreml_update_state")
def _update_state(p, op, outs, what):
    s = _state(p, op, "state", what)
    _write(p, s, p.arg(op, "value", what), what)
    p.emit("identity", [p.alias[s]], outs, source="coreml_update_state")


# ------------------------------------------------------------------ recurrent
#: MIL's gate order (input, forget, output, cell) -> the vocabulary's (ONNX: input, output,
#: forget, cell); peepholes (input, forget, output) -> (input, output, forget)
_GATES, _PEEPS = (0, 2, 1, 3), (0, 2, 1)


def _blocks(v, order):
    """``v`` (gates x ... along axis 0) with its gate blocks put in ``order``."""
    parts = np.split(np.asarray(v, np.float32), len(order))
    return np.concatenate([parts[i] for i in order])


@mil_op("lstm")
def _lstm(p, op, outs, what):
    """MIL ``lstm`` as the vocabulary's ``lstm`` (ONNX semantics): constant weights with their
    gate blocks reordered, the states ``(b, D*H)`` <-> ``(D, b, H)``; Core ML runs it on the CPU."""
    x = p.arg(op, "x", what)
    direction = _str(p, op, "direction", what, "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ModelError(f"{what}: direction {quote(direction)} is not forward, reverse or bidirectional")
    acts = [
        _str(p, op, k, what, d)
        for k, d in (("recurrent_activation", "sigmoid"), ("cell_activation", "tanh"), ("activation", "tanh"))
    ]
    if acts != ["sigmoid", "tanh", "tanh"]:
        raise ModelNotImplementedError(
            f"{what}: activations {acts} are not implemented (only sigmoid, tanh, tanh)"
        )
    if p.cval(op, "clip", what) is not None:
        raise ModelNotImplementedError(f"{what}: clip (the cell gate clipped) is not implemented")
    dirs = [""] + (["_back"] if direction == "bidirectional" else [])
    w = [p.cval(op, "weight_ih" + d, what) for d in dirs]
    r = [p.cval(op, "weight_hh" + d, what) for d in dirs]
    if any(v is None for v in w + r):
        raise ModelError(
            f"{what}: missing weight_ih / weight_hh{' (and their _back)' if len(dirs) > 1 else ''}"
        )
    four_h, inp = np.shape(w[0])
    h = four_h // 4
    zero = lambda n: np.zeros(n, np.float32)  # noqa: E731
    b = [
        np.concatenate([_blocks(p.cval(op, "bias" + d, what, zero(4 * h)), _GATES), zero(4 * h)])
        for d in dirs
    ]
    pp = [_blocks(p.cval(op, "peephole" + d, what, zero(3 * h)), _PEEPS) for d in dirs]
    nd = len(dirs)
    shapes = {"W": (4 * h, inp), "R": (4 * h, h), "B": (8 * h,), "P": (3 * h,)}
    for key, vals in (("W", w), ("R", r), ("B", b), ("P", pp)):
        if any(np.shape(v) != shapes[key] for v in vals):
            raise ModelError(
                f"{what}: {key} weights of shapes {[np.shape(v) for v in vals]}, expected {shapes[key]}"
            )
    consts = [p.const(np.stack([_blocks(v, _GATES) for v in vals])) for vals in (w, r)]
    consts += [p.const(np.stack(b)), p.const(np.stack(pp))]

    def state(key):  # (b, D*H) -> (D, b, H)
        t = p.emit(
            "reshape",
            [p.arg(op, key, what), p.const(np.array([0, nd, h], np.int64))],
            [p.tmp()],
            source="lstm",
        )
        return p.emit("transpose", [t], [p.tmp()], {"perm": [1, 0, 2]}, source="lstm")

    y, yh, yc = p.tmp(), p.tmp(), p.tmp()
    attrs = {"direction": direction, "layout": 0, "hidden_size": h, "clip": None, "linear_before_reset": 0}
    ins = [x, consts[0], consts[1], consts[2], "", state("initial_h"), state("initial_c"), consts[3]]
    p.emit("lstm", ins, [y, yh, yc], attrs, source="lstm")

    def flat(t, dst, shape, perm):  # -> the MIL layout (..., b, D*H)
        t = p.emit("transpose", [t], [p.tmp()], {"perm": perm}, source="lstm")
        p.emit("reshape", [t, p.const(np.array(shape, np.int64))], [dst], source="lstm")

    seq = _flag(p, op, "output_sequence", what)
    names = list(outs) + [p.tmp() for _ in range(3 - len(outs))]
    if seq:  # Y: (s, D, b, H) -> (s, b, D*H)
        flat(y, names[0], [0, 0, nd * h], [0, 2, 1, 3])
    else:  # the final step's hidden states: (D, b, H) -> (1, b, D*H)
        flat(yh, names[0], [1, -1, nd * h], [1, 0, 2])
    flat(yh, names[1], [-1, nd * h], [1, 0, 2])
    flat(yc, names[2], [-1, nd * h], [1, 0, 2])


# ------------------------------------------------------------------ refused with the reason
_REFUSED = {
    "cond": "control flow (a branch on a run-time value)",
    "while_loop": "control flow (a loop on a run-time condition)",
    "make_list": "a tensor list (a run-time sized container)",
    "list_read": "a tensor list (a run-time sized container)",
    "list_write": "a tensor list (a run-time sized container)",
    "list_gather": "a tensor list (a run-time sized container)",
    "list_scatter": "a tensor list (a run-time sized container)",
    "list_length": "a tensor list (a run-time sized container)",
    "non_zero": "an output whose shape depends on the values",
}


def _refuse(p, op, outs, what):
    raise ModelError(
        f"{what}: {_REFUSED[op.type]} is not a dataflow graph of static shapes that fastane can "
        f"place on the ANE or the host; fastane refuses it"
    )


for _n in _REFUSED:
    mil_op(_n)(_refuse)
