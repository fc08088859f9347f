"""Predicted Core ML placement per layer for a compute-unit setting -- an **estimate**.

Core ML decides at load time which compute unit runs each op; nothing on Linux can ask
it.  This module predicts the decision from what is known (docs/models.md, "Core ML:
placement prediction", cites the sources):

* ``CPU_ONLY``: every op on the CPU; ``CPU_AND_GPU``: float ops on the GPU;
* ``ALL`` / ``CPU_AND_NE``: an op goes to the Neural Engine when

  - its tensors are floating point (the ANE computes fp16, SPEC 1; an integer or boolean
    tensor -- indices, masks, shapes -- is the CPU's);
  - its tensors fit the compile limits (SPEC 5: N and C in [1, 65536], H and W in [1,
    16384]; rank at most 5), else Core ML's ANE compiler refuses the model segment;
  - the op is one the ANE runs (convolutions, matrix products, the elementwise and
    activation ops, pooling, normalisation, softmax, reductions, data movement), not
    one known to fall back (dynamic gathers, comparisons and selects, casts to integers,
    custom layers);
  - the op is not control flow (If, Loop, Scan: the CPU, "likely");
  - the op is not one fastane runs only on the host (:data:`HOST_ONLY`: einsum, top-k,
    arg-max, cumsum, gathers/scatters, resize ...: predicted "cpu", "uncertain");
  - a convolution's per-output-channel kernel fits one core's KMem (64 KiB,
    :data:`fastane.m1.KMEM_CORE_BYTES`): beyond it fastane refuses the layer, and
    whether Apple's compiler splits it is not known ("uncertain");

  else the CPU (``CPU_AND_NE``) or the GPU (``ALL``: Core ML prefers the GPU for a float op
  the ANE cannot take).  Whether the layer's tensors fit the 2 MiB L2 is reported too
  (a layer that does not streams its tiles from DRAM: slower, still on the ANE).

The result for each layer is ``(unit, confidence, reason)``; ``confidence`` is "likely"
or "uncertain".  Compare with Xcode's performance report on a Mac (docs/models.md).
"""

from __future__ import annotations

import math

import numpy as np

from ... import m1
from ..ops import OPS
from .place import CONTROL_FLOW

__all__ = ["COMPUTE_UNITS", "predict", "Prediction"]

COMPUTE_UNITS = ("ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY")

#: ops (fastane's vocabulary) the ANE is known not to run (fall back to CPU/GPU)
_FALLBACK = {
    "gather": "a gather with run-time indices",
    "where": "a select on a boolean mask",
    "equal": "a comparison (boolean result)",
    "less": "a comparison (boolean result)",
    "greater": "a comparison (boolean result)",
    "range": "an integer sequence",
    "shape": "shape arithmetic",
}
#: ops fastane runs only on the host (no ANE lowering in fastane): predicted on the CPU
#: under every setting, the reason saying so (an estimate: whether Core ML's ANE compiler
#: has a lowering for some of them -- an einsum as a matmul, a resize -- is not known here)
HOST_ONLY = {
    "einsum": "an einsum",
    "topk": "a top-k sort",
    "argmax": "an arg-max",
    "argmin": "an arg-min",
    "hardmax": "a hardmax",
    "cumsum": "a cumulative sum",
    "trilu": "a triangular mask",
    "onehot": "a one-hot encoding",
    "gather_nd": "a gather with run-time indices",
    "gather_elements": "a gather with run-time indices",
    "scatter_nd": "a scatter with run-time indices",
    "scatter_elements": "a scatter with run-time indices",
    "tile": "a tile",
    "resize": "a resize",
    "reduce_prod": "a product reduction",
    "mod": "a modulo",
    "lstm": "a recurrent layer (Core ML places it on the CPU)",
    "gru": "a recurrent layer (Core ML places it on the CPU)",
    "rnn": "a recurrent layer (Core ML places it on the CPU)",
}
#: the most dimensions an ANE tensor has (N, D, C, H, W)
MAX_RANK = 5


class Prediction(tuple):
    """``(unit, confidence, reason)``."""

    __slots__ = ()

    def __new__(cls, unit, confidence, reason):
        return tuple.__new__(cls, (unit, confidence, reason))

    unit = property(lambda s: s[0])
    confidence = property(lambda s: s[1])
    reason = property(lambda s: s[2])


def _limits(shape) -> str:
    """The SPEC 5 limit a tensor of ``shape`` breaks, or ''."""
    if len(shape) > MAX_RANK:
        return f"rank {len(shape)} > {MAX_RANK}"
    dims = (1,) * (4 - len(shape)) + tuple(shape) if len(shape) < 4 else tuple(shape)
    L = m1.LIMITS
    n, c, h, w = dims[0] if len(dims) == 4 else dims[0] * dims[1], dims[-3], dims[-2], dims[-1]
    for name, v, hi in (("N", n, 65536), ("C", c, L.max_channels), ("H", h, L.max_hw), ("W", w, L.max_hw)):
        if v > hi:
            return f"{name} = {v} > {hi} (SPEC 5 compile limit)"
    return ""


def predict(layers, bound, compute_units: str = "ALL", chip="m1") -> list:
    """One :class:`Prediction` per layer of ``layers`` (:func:`fastane.model.placement.place.place`
    on ``bound``) on ``chip`` (a name of :mod:`fastane.roofline.chips`).  The limits the rules
    use are the M1's (SPEC 5, KMem): on another chip a decision one of them makes is
    "uncertain"."""
    from ...roofline import chips

    cu = str(compute_units).upper()
    if cu not in COMPUTE_UNITS:
        raise ValueError(f"compute units {compute_units!r}: one of {', '.join(COMPUTE_UNITS)}")
    chip = chips.get(chip)
    m1_limits = "likely" if chip.key == "m1" else "uncertain"
    on_chip = "" if chip.key == "m1" else f" (the M1's limit; {chip.name}'s is not known)"
    out = []
    other = "gpu" if cu == "ALL" else "cpu"
    for layer in layers:
        types = [bound.types[t] for t in list(layer.inputs) + list(layer.outputs) if t in bound.types]
        floats = all(np.dtype(t.dtype).kind == "f" for t in types)
        if cu == "CPU_ONLY":
            out.append(Prediction("cpu", "likely", "CPU_ONLY"))
            continue
        if cu == "CPU_AND_GPU":
            out.append(Prediction("gpu" if floats else "cpu", "likely", "CPU_AND_GPU: no Neural Engine"))
            continue
        ops = {n.op for n in layer.nodes}
        if any(OPS[op].ane == "control" for op in ops):
            out.append(Prediction("cpu", "likely", CONTROL_FLOW))
            continue
        host = next((why for op, why in HOST_ONLY.items() if op in ops), None)
        if host:
            out.append(Prediction("cpu", "uncertain", f"{host}: no ANE lowering in fastane, run on the host"))
            continue
        fb = next((why for op, why in _FALLBACK.items() if op in ops), None)
        if not floats:
            out.append(Prediction("cpu", "likely", "integer/boolean tensors: the ANE computes fp16"))
            continue
        if any(n.op == "cast" and np.dtype(n.attrs.get("to", np.float32)).kind != "f" for n in layer.nodes):
            out.append(Prediction("cpu", "likely", "a cast to an integer type"))
            continue
        if fb:
            out.append(Prediction(other, "likely", f"{fb}: not an ANE op"))
            continue
        lim = next((f"tensor {t}: {m}" for t in types if (m := _limits(t.shape))), "")
        if lim:
            out.append(Prediction(other, m1_limits, lim + on_chip))
            continue
        conf, notes = "likely", []
        if ops == {"cast"}:
            conf = "uncertain"
            notes.append(
                "a float cast: Core ML converts between fp32 and fp16 where a segment "
                "enters or leaves the ANE"
            )
        for n in layer.nodes:
            if n.op in ("conv", "conv_transpose") and n.inputs[1] in bound.consts:
                w = bound.consts[n.inputs[1]]
                per = math.prod(w.shape[1:]) * 2
                if per > m1.KMEM_CORE_BYTES:
                    conf = "uncertain"
                    notes.append(
                        f"a kernel of {per} bytes per output channel exceeds one core's "
                        f"KMem ({m1.size_str(m1.KMEM_CORE_BYTES)}){on_chip}"
                    )
        nbytes = sum(2 * t.size for t in types)
        notes.append(
            ("fits" if nbytes <= m1.L2_BYTES else "exceeds")
            + f" the {m1.size_str(m1.L2_BYTES)} L2 ({nbytes} fp16 bytes of tensors)"
        )
        if layer.placement == "host" and layer.kind not in ("layout",) and ops != {"cast"}:
            notes.insert(
                0, "fastane runs it on the host (no lowering yet); Core ML's ANE compiler has the op"
            )
        out.append(Prediction("ane", conf, "; ".join(notes)))
    return out
