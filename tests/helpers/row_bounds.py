"""Error bounds of the row operations' ANE chains (fastane.lower.rows, docs/lower.md
section 11) and of the compositions of fastane.lower.binary.COMPOSED (log, softplus), for
the ONNX backend tests: derived stage by stage from the chain -- every
planar stage one fp16 rounding (unit roundoff u = 2^-11), the fp16 constants' own error
(log2 e, ln 2, 1/n, eps), each table's measured error (tests/helpers/lut_bounds.BOUNDS) --
and evaluated on the layer's actual inputs.  They are not fitted to fastane's output."""

from __future__ import annotations

import numpy as np
from tests.helpers.lut_bounds import BOUNDS

U = 2.0**-11
TINY = 2.0**-23  # two subnormal roundings
LOG2E = np.log2(np.e)
EPS_L = abs(float(np.float16(LOG2E)) / LOG2E - 1)  # fp16 log2(e)
EPS_LN2 = abs(float(np.float16(np.log(2))) / np.log(2) - 1)
R_EXP2, R_SQRT, R_RECIP = BOUNDS["exp2"][4], BOUNDS["sqrt"][4], BOUNDS["reciprocal"][4]
R_EXP = BOUNDS["exp"][4]
A_LOG2, R_LOG2 = BOUNDS["log2"][3], BOUNDS["log2"][4]


def _grow(*eps):
    """``prod(1 + e) - 1``."""
    out = 1.0
    for e in eps:
        out = out * (1 + np.asarray(e, np.float64))
    return out - 1


def softmax_rel(x):
    """Relative error bound of each softmax output (rows of ``x``, fp16 values)."""
    z = x - x.max(axis=-1, keepdims=True)
    dt = np.abs(z) * LOG2E * _grow(U, EPS_L, U)  # t = round16(L round16(z))
    e = _grow(np.exp2(dt) - 1, R_EXP2)  # the exp2 table
    s = _grow(e.max(axis=-1, keepdims=True), U)  # the row sum, rounded once
    return _grow(e, s, U, U)  # 1/sum rounded, the product rounded


def _norm(x, scale, bias, eps, centered):
    w = x.shape[-1]
    inv = _grow(U, abs(float(np.float16(1 / w)) * w - 1))  # sum rounded, fp16(1/w), product
    mu = x.mean(axis=-1, keepdims=True) if centered else np.zeros_like(x[..., :1])
    e_d = np.abs(mu) * _grow(inv, U) + U * np.abs(x - mu) if centered else 0.0 * x
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    dvar = var * _grow(U, inv) + ((2 * np.abs(d) * e_d + e_d**2) * (1 + U)).mean(axis=-1, keepdims=True) * (
        1 + inv
    )
    eps16 = float(np.float16(eps))
    veps = var + eps
    ev = (dvar + abs(eps16 - eps) + U * (veps + dvar)) / veps
    er = _grow(0.5 * ev / (1 - ev), R_SQRT, R_RECIP)  # sqrt and reciprocal tables
    r = 1 / np.sqrt(veps)
    y0 = d * r
    g = np.ones(w) if scale is None else np.abs(np.asarray(scale, np.float64))
    b = 0.0 if bias is None else np.asarray(bias, np.float64)
    err = (np.abs(y0) * _grow(er, U) + r * e_d * (1 + er) * (1 + U)) * g * (1 + U)
    if scale is not None:
        err = err + U * np.abs(y0) * g
    if bias is not None:
        err = err + U * np.abs(y0 * g + b)
    return err + TINY


def bound(call: str, x, y, scale=None, bias=None, eps=0.0):
    """Allowed |fastane - exact| for row operation ``call`` with rows ``x`` (rows, width)
    and exact result ``y`` (same rows)."""
    x = np.asarray(x, np.float64)
    y = np.abs(np.asarray(y, np.float64))
    if call == "softmax":
        rel = softmax_rel(x)
        return y * rel * (1 + rel) + TINY
    if call == "log_softmax":  # y = ln2 round16(log2 table(p)), |ln(p (1 + e))| <= e (1 + e)
        rel = softmax_rel(x).max(axis=-1, keepdims=True)
        return np.log(2) * A_LOG2 + R_LOG2 * y + rel * (1 + rel) + y * _grow(EPS_LN2, U, U) + TINY
    if call == "reduce_mean":
        return y * _grow(U, U, U, abs(float(np.float16(1 / x.shape[-1])) * x.shape[-1] - 1)) + TINY
    if call in ("layer_norm", "rms_norm"):
        return _norm(x, scale, bias, eps, call == "layer_norm")
    raise KeyError(call)


def composed(call: str, x):
    """Allowed |fastane - exact| for composition ``call`` of the fp16 values ``x`` (valid
    while exp does not overflow fp16): the log2 table's absolute error, scaled by fp16 ln 2,
    plus one rounding; softplus adds what exp's table (relative, or 2^-24 where its result
    is subnormal or flushed) and the planar + 1 do to the log's argument."""
    x = np.asarray(x, np.float64)
    if call == "log":
        y, rel_s = np.log(x), 0.0
    elif call == "softplus":
        e = np.exp(x)
        y = np.log1p(e)
        rel_s = (e * R_EXP + TINY / 2) / (1 + e) + U * (1 + R_EXP)  # s = round16(1 + exp table)
    else:
        raise KeyError(call)
    d_ln = rel_s * (1 + rel_s)  # |ln s - ln(1 + e^x)|
    return (np.abs(y) * EPS_LN2 + np.log(2) * A_LOG2 + d_ln) * (1 + EPS_LN2) * (1 + U) + U * np.abs(y) + TINY
