"""The error bounds of every LUT table over all finite fp16 inputs, measured once:
tests/test_lut_block.py checks each (test_error_bound_over_all_finite_fp16); the ONNX
backend tests and tests/helpers/row_bounds.py build their tolerances on them.

``python -m tests.helpers.lut_bounds NAME...`` (from the repository root) prints the measured
errors of those entries (:func:`measured`), the figures docs/lut.md gives.
"""

import sys

import math

import numpy as np

from fastane import lut
from fastane import activations as act


def _erf(v):
    return np.vectorize(math.erf, otypes=[float])(v)


_AL, _SC = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _blk(name):
    return lambda x: lut.get_block(name)(x)


# name: (function on fp16 array, meaning, domain mask, max abs error, max rel error)
# abs bound over the domain where the meaning is finite; rel bound where |meaning| >= 2**-14.
BOUNDS = {
    "tanh": (act.tanh, np.tanh, None, 1.7e-3, 5.9e-3),
    "sigmoid_stage": (_blk("sigmoid"), lambda x: 1 / (1 + np.exp(-x)) - 0.5, None, 8.3e-4, 5.9e-3),
    "sigmoid": (act.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None, 1.1e-3, None),
    "silu": (act.silu, lambda x: x / (1 + np.exp(-x)), None, 3.7e-3, None),
    "gelu": (act.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), None, 6.2e-3, None),
    "exp2": (act.exp2, np.exp2, None, None, 8.7e-4),
    "exp": (act.exp, np.exp, None, None, 5.4e-3),
    "reciprocal": (act.reciprocal, lambda x: 1 / x, lambda x: x != 0, None, 8.4e-4),
    "rsqrt": (act.rsqrt, lambda x: 1 / np.sqrt(x), lambda x: x > 0, None, 1.45e-3),
    "sqrt": (act.sqrt, np.sqrt, lambda x: x >= 0, None, 9.3e-4),
    "log2": (act.log2, np.log2, lambda x: x > 0, 8e-3, 1.4e-2),
    "relu6": (act.relu6, lambda x: np.clip(x, 0, 6), None, 0.0, 0.0),
    "hardtanh": (act.hardtanh, lambda x: np.clip(x, -1, 1), None, 0.0, 0.0),
    "leaky_relu": (act.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x), None, None, 7e-4),
    "rrelu": (_blk("rrelu"), lambda x: np.where(x >= 0, x, x * (1 / 8 + 1 / 3) / 2), None, None, 6.6e-4),
    "selu_neg": (act.selu, lambda x: _SC * _AL * np.expm1(x), lambda x: x <= 0, 1.25e-2, None),
    "selu_pos": (act.selu, lambda x: _SC * x, lambda x: x > 0, None, 5.6e-4),
    "elu": (act.elu, lambda x: np.where(x > 0, x, np.expm1(x)), None, 7e-3, None),
    "erf": (act.erf, _erf, None, 2.4e-3, 6.1e-3),
    "hard_sigmoid": (act.hard_sigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1), None, 3e-4, None),
    "hard_swish": (act.hard_swish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), None, 1.9e-3, None),
    "sign": (act.sign, np.sign, None, 0.0, 0.0),
    "relu_lut": (_blk("relu"), lambda x: np.maximum(x, 0), None, 0.0, 0.0),
    "step": (_blk("step"), lambda x: (x > 0).astype(float), None, 0.0, 0.0),
    "fraction": (_blk("fraction"), lambda x: x - np.trunc(x), None, 0.0, 0.0),
    "integer": (_blk("integer"), np.trunc, None, 0.0, 0.0),
    "atan_low": (
        _blk("atan_low"),
        lambda x: np.sign(x) * np.arctan(np.minimum(np.abs(x), 2)),
        None,
        8.8e-4,
        2e-3,
    ),
    "atan": (
        lambda x: (_blk("atan_low")(x).astype(float) + _blk("atan_high")(x).astype(float)).astype(np.float16),
        np.arctan,
        None,
        3.35e-2,
        2.8e-2,
    ),
    "ceil": (
        lambda x: (_blk("integer")(x).astype(float) + _blk("step")(_blk("fraction")(x)).astype(float)).astype(
            np.float16
        ),
        np.ceil,
        None,
        0.0,
        0.0,
    ),
}


def elu_bound(alpha) -> float:
    """The max abs error of ELU's block for ``alpha`` against ``alpha16 * expm1(x)`` (x <= 0;
    0 above): the alpha = 1 bound scaled by ``|alpha16|``, plus ``2**-9 |alpha16|`` for the
    knot and output roundings (relative to their binade, which alpha moves)."""
    return abs(float(np.float16(alpha))) * (BOUNDS["elu"][3] + 2.0**-9)


def hard_sigmoid_bound(alpha, beta) -> float:
    """A bound of ``|hard_sigmoid(x, alpha, beta) - clamp(alpha x + beta, 0, 1)|`` over every
    finite fp16 ``x``: the block computes ``clamp(a16 x + b16, 0, 1)`` rounded once (half an
    ulp, at most ``2**-12`` below 1), and since the clamp is 1-Lipschitz the parameters'
    roundings add ``|alpha - a16| |x| + |beta - b16|`` wherever one of the two lines is
    inside [0, 1], ``|x| <= max(|beta|, |1 - beta|) / |alpha|`` (either's; 65504 at most),
    and nothing beyond (both clamped to the same value)."""
    a16, b16 = float(np.float16(alpha)), float(np.float16(beta))
    reach = [max(abs(b), abs(1 - b)) / abs(a) if a else math.inf for a, b in ((alpha, beta), (a16, b16))]
    return abs(alpha - a16) * min(max(reach), 65504.0) + abs(beta - b16) + 2.0**-12


#: every finite fp16 value, as float16 and as float64
_X16 = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
_X16 = _X16[np.isfinite(_X16)]
_XF = _X16.astype(np.float64)


def measured(name: str) -> dict:
    """The errors of ``BOUNDS[name]``'s function against its meaning (float64) over every
    finite fp16 input of its domain where the meaning is finite in fp16: the max abs error
    and its input, the max relative error where ``|meaning| >= 2**-14`` and its input, and
    the share of results equal to the meaning rounded to fp16 (bit patterns, "CR")."""
    fn, meaning, dom, _, _ = BOUNDS[name]
    with np.errstate(all="ignore"):
        y = np.asarray(fn(_X16))
        ref = meaning(_XF)
        ref16 = ref.astype(np.float16)
    m = np.isfinite(ref16.astype(np.float64)) & (True if dom is None else dom(_XF))
    err = np.abs(y[m].astype(np.float64) - ref[m])
    r = np.abs(ref[m]) >= 2.0**-14
    rel = err[r] / np.abs(ref[m][r])
    return {
        "abs": float(err.max()),
        "abs_at": float(_XF[m][np.argmax(err)]),
        "rel": float(rel.max()),
        "rel_at": float(_XF[m][r][np.argmax(rel)]),
        "cr": float(np.mean(y[m].view(np.uint16) == ref16[m].view(np.uint16))),
    }


if __name__ == "__main__":
    for _name in sys.argv[1:] or sorted(BOUNDS):
        _e = measured(_name)
        print(
            f"{_name}: max abs {_e['abs']:.3g} (x = {_e['abs_at']:g}), max rel {_e['rel']:.3g} "
            f"(x = {_e['rel_at']:g}), CR {_e['cr']:.0%}"
        )
