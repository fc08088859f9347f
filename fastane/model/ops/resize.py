"""Resize on the host (ONNX Resize/Upsample, Core ML ``resize``, ``upsample_*``,
``resize_*``): nearest (the four rounding modes), linear and cubic, with every
coordinate transform of ONNX Resize-19, separably one axis at a time in float64.

The vocabulary's ``resize`` node: inputs ``[x, roi, scales, sizes]`` (``""`` for an
absent one; ``roi``/``scales``/``sizes`` must be constants), attributes as ONNX names
them (``mode``, ``coordinate_transformation_mode``, ``nearest_mode``, ``cubic_coeff_a``,
``exclude_outside``, ``extrapolation_value``, ``axes``, ``keep_aspect_ratio_policy``,
``antialias``).  Antialiasing is refused (:class:`~fastane.errors.ModelNotImplementedError`).

Per output index ``y`` of an axis of input length ``n``, output length ``m`` and scale
``s`` (``m / n`` when sizes are given), the source coordinate ``x`` is
``half_pixel``: ``(y + 0.5) / s - 0.5``; ``half_pixel_symmetric``: the same shifted by
``n / 2 (1 - m / (s n))``; ``pytorch_half_pixel``: as half_pixel, 0 when ``m = 1``;
``align_corners``: ``y (n - 1) / (s n - 1)`` (0 when ``s n = 1``); ``asymmetric``:
``y / s``; ``tf_crop_and_resize``: ``roi_start (n - 1) + y (roi_end - roi_start) (n -
1) / (s n - 1)``, outside ``[0, n - 1]`` the extrapolation value.  Two more for Core ML's
sampling modes (coremltools' ``resize_bilinear`` documentation): ``align_corners_centred``
(ALIGN_CORNERS: as align_corners, ``(n - 1) / 2`` when ``m = 1``) and ``offset_corners``
(``d / 2 + y d``, ``d = max(1, n - 1) / m``).  Nearest picks
``floor(x)`` or ``floor(x) + 1`` by the rounding mode (an exact integer is itself);
linear and cubic weigh the 2 / 4 neighbours of ``floor(x)``, indices clamped to the
edge (cubic with ``exclude_outside``: outside taps get weight 0, the rest renormalised).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ModelNotImplementedError, quote
from .opdef import HostCost, OnnxName, elements, check_axis, need_const, need_float, need_input, register_op
from ..tensor import TensorType, check_size

_MODES = ("nearest", "linear", "cubic")
_COORDS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    # Core ML's sampling modes that no ONNX mode matches (resize_bilinear, resize)
    "align_corners_centred",
    "offset_corners",
)
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _opt(consts, node, i, what):
    """The constant input ``i`` as float64/int64 values, or None when absent or empty."""
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    v = np.asarray(need_const(consts, i, node, what))
    return None if v.size == 0 else v.reshape(-1)


def _plan(node, shape, roi, scales, sizes):
    """Per axis ``(scale, out_len, roi_start, roi_end)`` for an input of ``shape``."""
    a = node.attrs
    mode = str(a.get("mode", "nearest"))
    coord = str(a.get("coordinate_transformation_mode", "half_pixel"))
    if mode not in _MODES:
        raise ModelError(f"{node.describe()}: unknown mode {quote(mode)}")
    if coord not in _COORDS:
        raise ModelError(f"{node.describe()}: unknown coordinate_transformation_mode {quote(coord)}")
    if str(a.get("nearest_mode", "round_prefer_floor")) not in _NEAREST:
        raise ModelError(f"{node.describe()}: unknown nearest_mode {quote(a.get('nearest_mode'))}")
    if a.get("antialias", 0):
        raise ModelNotImplementedError(f"{node.describe()}: antialias = 1 is not implemented by fastane")
    r = len(shape)
    axes = a.get("axes")
    axes = list(range(r)) if axes is None else [check_axis(v, r, node) for v in axes]
    if len(set(axes)) != len(axes):
        raise ModelError(f"{node.describe()}: repeated axes {axes}")
    if (scales is None) == (sizes is None):
        raise ModelError(f"{node.describe()}: needs exactly one of scales and sizes")
    given = scales if sizes is None else sizes
    if len(given) != len(axes):
        raise ModelError(f"{node.describe()}: {len(given)} scales/sizes for {len(axes)} axes")
    if roi is not None and len(roi) != 2 * len(axes):
        if coord == "tf_crop_and_resize":
            raise ModelError(f"{node.describe()}: roi has {len(roi)} values, {2 * len(axes)} expected")
        roi = None
    if coord == "tf_crop_and_resize" and roi is None:
        raise ModelError(f"{node.describe()}: tf_crop_and_resize needs a roi")
    plan = [(1.0, int(d), 0.0, 1.0) for d in shape]
    if sizes is not None:
        want = [int(v) for v in sizes]
        if min(want) < 1 or any(shape[ax] < 1 for ax in axes):
            raise ModelError(f"{node.describe()}: sizes {want} must be >= 1 (input {tuple(shape)})")
        sc = [w / shape[ax] for w, ax in zip(want, axes)]
        policy = str(a.get("keep_aspect_ratio_policy", "stretch"))
        if policy in ("not_larger", "not_smaller"):
            s = min(sc) if policy == "not_larger" else max(sc)
            sc = [s] * len(axes)
            want = [int(s * shape[ax] + 0.5) for ax in axes]  # round half up
        elif policy != "stretch":
            raise ModelError(f"{node.describe()}: unknown keep_aspect_ratio_policy {quote(policy)}")
    else:
        sc = [float(v) for v in scales]
        if not all(math.isfinite(s) and s > 0 for s in sc):
            raise ModelError(f"{node.describe()}: scales {sc} must be finite and > 0")
        want = [math.floor(s * shape[ax]) for s, ax in zip(sc, axes)]
    out = list(shape)
    for i, ax in enumerate(axes):
        out[ax] = want[i]
    check_size(out, node.describe())
    for i, ax in enumerate(axes):
        lo, hi = (float(roi[i]), float(roi[i + len(axes)])) if roi is not None else (0.0, 1.0)
        plan[ax] = (sc[i], want[i], lo, hi)
    return plan


def _resize_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    roi = _opt(consts, node, 1, "roi")
    plan = _plan(node, x.shape, roi, _opt(consts, node, 2, "scales"), _opt(consts, node, 3, "sizes"))
    return [TensorType(x.dtype, tuple(p[1] for p in plan))]


def _source(node, n, m, s, lo, hi):
    """Source coordinates of the ``m`` outputs, and the extrapolated ones (or None)."""
    coord = str(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
    y = np.arange(m, dtype=np.float64)
    length = s * n  # the output length before flooring, as the definition uses it
    if coord == "half_pixel":
        return (y + 0.5) / s - 0.5, None
    if coord == "half_pixel_symmetric":
        return n / 2 * (1 - m / length) + (y + 0.5) / s - 0.5, None
    if coord == "pytorch_half_pixel":
        return ((y + 0.5) / s - 0.5 if m > 1 else np.zeros(m)), None
    if coord == "align_corners":
        return (y * (n - 1) / (length - 1) if length != 1 else np.zeros(m)), None
    if coord == "asymmetric":
        return y / s, None
    if coord == "align_corners_centred":  # Core ML ALIGN_CORNERS: one output samples the centre
        return (y * (n - 1) / (length - 1) if m > 1 else np.full(m, (n - 1) / 2)), None
    if coord == "offset_corners":  # Core ML OFFSET_CORNERS
        delta = max(1, n - 1) / m
        return 0.5 * delta + y * delta, None
    if length == 1:  # tf_crop_and_resize
        x = np.full(m, (hi - lo) * (n - 1) / 2)
    else:
        x = y * (hi - lo) * (n - 1) / (length - 1)
    x = x + lo * (n - 1)
    return x, (x < 0) | (x > n - 1)


def _cubic(t, A):
    """The four cubic weights for the taps at offsets -1, 0, 1, 2 of ``floor(x)``."""
    u = 1 - t
    return np.stack(
        [
            ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
            ((A + 2) * t - (A + 3)) * t * t + 1,
            ((A + 2) * u - (A + 3)) * u * u + 1,
            ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A,
        ],
        axis=-1,
    )


def _axis_resize(node, x, ax, s, m, lo, hi):
    a = node.attrs
    n = x.shape[ax]
    src, extra = _source(node, n, m, s, lo, hi)
    f = np.floor(src)
    t = src - f
    f = f.astype(np.int64)
    mode = str(a.get("mode", "nearest"))
    if mode == "nearest":
        nm = str(a.get("nearest_mode", "round_prefer_floor"))
        up = {
            "round_prefer_floor": t > 0.5,
            "round_prefer_ceil": t >= 0.5,
            "floor": np.zeros(m, bool),
            "ceil": t > 0,
        }[nm]
        idx, w = (f + up)[:, None], np.ones((m, 1))
    elif mode == "linear":
        idx, w = f[:, None] + np.arange(2), np.stack([1 - t, t], axis=-1)
    else:
        idx, w = f[:, None] + np.arange(-1, 3), _cubic(t, float(a.get("cubic_coeff_a", -0.75)))
        if a.get("exclude_outside", 0):
            w = np.where((idx < 0) | (idx >= n), 0.0, w)
            tot = w.sum(-1, keepdims=True)
            w = w / np.where(tot == 0, 1.0, tot)
    idx = np.clip(idx, 0, n - 1)
    bcast = (m,) + (1,) * (x.ndim - ax - 1)
    y = np.take(x, idx[:, 0], axis=ax) * w[:, 0].reshape(bcast)
    for k in range(1, idx.shape[1]):  # one tap at a time: no array beyond the output's size
        y += np.take(x, idx[:, k], axis=ax) * w[:, k].reshape(bcast)
    if extra is not None and extra.any():
        y = np.where(
            extra.reshape((m,) + (1,) * (x.ndim - ax - 1)), float(a.get("extrapolation_value", 0.0)), y
        )
    return y


def _resize_onnx(c, a, ins):
    mode = str(a.get("mode", "nearest")).lower()
    attrs = {k: v for k, v in a.items() if k != "scales"}
    attrs["mode"] = {"bilinear": "linear"}.get(mode, mode)
    if c.op == "Upsample" or c.opset < 11:  # Resize-10 / Upsample: scales only, x / scale
        scales = c.const(a["scales"], np.float32) if "scales" in a else (ins[1] if len(ins) > 1 else "")
        if not scales:
            raise ModelError(f"{c.where}: needs scales")
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        ins = [ins[0], "", scales, ""]
    else:
        ins = (list(ins) + ["", "", ""])[:4]
    if attrs["mode"] not in _MODES:
        raise ModelError(f"{c.where}: unknown mode {quote(str(a.get('mode')))}")
    return c.mk(attrs, ins, keep=True)


def _resize_cost(node, in_types, out_types):
    n_in, out = elements(in_types), out_types[0].shape
    n_out = math.prod(out)
    # float64 passes, one axis at a time
    return HostCost(8 * (n_in + 2 * n_out), 0, 4 * len(out) * n_out + n_in)


@register_op(
    "resize",
    _resize_infer,
    onnx=[OnnxName("Resize", _resize_onnx), OnnxName("Upsample", _resize_onnx)],
    cost=_resize_cost,
)
def _resize(node, x, roi=None, scales=None, sizes=None):
    def flat(v):
        return None if v is None or np.size(v) == 0 else np.asarray(v).reshape(-1)

    plan = _plan(node, x.shape, flat(roi), flat(scales), flat(sizes))
    y = x.astype(np.float64)
    coord = str(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
    # the shrinking axes first: an upscale before a downscale would make an intermediate
    # larger than both the input and the output
    order = sorted(range(len(plan)), key=lambda ax: plan[ax][1] / max(x.shape[ax], 1))
    for ax in order:
        s, m, lo, hi = plan[ax]
        if m == x.shape[ax] and s == 1.0 and (coord != "tf_crop_and_resize" or (lo, hi) == (0.0, 1.0)):
            continue  # an identity on this axis
        if m == 0:
            return np.zeros(tuple(p[1] for p in plan), np.float64)
        y = _axis_resize(node, y, ax, s, m, lo, hi)
    return y
