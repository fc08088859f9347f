"""Data movement numerics that differ between ANE generations: the fixed-point crop path of
a slice, applied to a model run as on a chip (:meth:`fastane.Model.report`,
:meth:`fastane.Model.__call__`, ``fastane run --chip``).

fastane moves a layout layer's data on the host, or as NE pass-through tasks on the ANE
(:mod:`fastane.lower.moves`), which changes no value (reshape, transpose, concat, slice ...).
One path of the ANE does change values, by generation: on the chips
ANEForge measured up to the M2 generation, a slice with a non-zero begin on its *last* axis
goes through a Q.4 fixed-point crop DMA with an implied x16 scale, and a sliced value beyond
4094 (= 65504 / 16) in magnitude reads out as +-inf; a zero begin on the last axis, or an
offset on another axis, takes a clean route (ANEForge ``docs/numeric-cliffs.md``,
``docs/cross-chip.md``, ``aneforge/_targets.py`` @020dcad; the probe
``bench/numeric_cliffs.py`` @7ec4a50 and its results in ``bench/results/ROOFLINES.md``: "clamp
@ 4094" on the M1, M1 Max, M2 Pro and M2 Max, "exact (no clamp)" on the M4, M4 Pro, M4 Max,
M5 and M5 Pro).  Which generation has the path, and its limit, is the family's
``slice_crop`` figure in :mod:`fastane.roofline.chips`, with its sources; this module only
reads it.

What the probe shows and what is taken beyond it:

* it bisects one positive value in a ``(1, 1, 1, 8)`` fp16 tensor cropped by 1 on the last
  axis: 4094 comes back finite, 4096 (the next fp16 value) as inf.  The sign of a negative
  value (-inf) is ANEForge's "+/-inf"; values within the limit pass unchanged (only their
  finiteness was probed; ``_targets.py`` calls the M2's result "bit-exact, same as M1");
* the rule covers fastane's ``slice`` node (ONNX ``Slice``, MIL ``slice_by_index`` and
  ``slice_by_size``) with a step of 1 on the last axis.  A strided last axis and the parts of
  a MIL ``split`` (imported as slices) were not measured: they stay exact;
* an element's magnitude is that of its fp16 value (a float32 tensor from the host crosses
  to the ANE as fp16); a value already infinite, or NaN, passes as it is, and is not counted.

Core ML may place a slice between two CPU layers on the CPU, where there is no crop path;
fastane applies the rule to every slice layer, moved by the ANE or by the host, after the move
(the predicted compute plan says where Core ML would likely run it).
"""

from __future__ import annotations

import numpy as np

from ...roofline import chips as _chips
from ..ops.layout import last_axis_window

__all__ = ["FP16_MAX", "crop_limit", "takes_crop_path", "crop"]

#: fp16's largest finite value: a ``slice_crop`` figure of this value means no crop path
FP16_MAX = float(np.finfo(np.float16).max)


def crop_limit(chip) -> float | None:
    """The largest magnitude a slice with a last-axis offset keeps as on ``chip`` (a name or a
    :class:`~fastane.roofline.chips.Chip`); None where its generation has no crop path."""
    fig = _chips.family_of(chip).slice_crop
    return float(fig.value) if fig.value < FP16_MAX else None


def takes_crop_path(node, shape, consts: dict) -> bool:
    """Whether the layout node ``node``, whose data input has ``shape`` (its other inputs
    constants in ``consts``), is a slice the crop path moves: a non-empty window that begins
    past 0 on the last axis, with a step of 1 (see the module docs)."""
    if node.op != "slice" or node.source == "split" or not shape:
        return False
    args = [consts[t] if t else None for t in node.inputs[1:5]]
    start, stop, step = last_axis_window(node, shape, *args)
    return start != 0 and step == 1 and stop > start


def crop(x, limit: float) -> tuple:
    """``(y, n)``: ``x`` with each element whose fp16 value is finite and beyond ``limit`` in
    magnitude replaced by an infinity of its sign (``y`` of ``x``'s dtype), and ``n`` how many
    were; a non-float ``x`` unchanged."""
    a = np.asarray(x)
    if a.dtype.kind != "f":
        return a, 0
    with np.errstate(over="ignore"):
        h = np.abs(a.astype(np.float16))
    hit = np.isfinite(h) & (h > limit)
    n = int(np.count_nonzero(hit))
    if not n:
        return a, 0
    return np.where(hit, np.copysign(np.asarray(np.inf, a.dtype), a), a), n
