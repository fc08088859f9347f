"""ONNX's own backend node tests (``onnx.backend.test``) with fastane as the backend.

Only the node tests of the ops fastane places (or runs on the host as a model's layer) are
selected (``OPS``, tests/helpers/onnx_backend.py), so the run stays short.  A model fastane refuses (an op, attribute
or dtype it does not support) is skipped with the precise reason: that is the
"unsupported" count, never silent.  A case the ANE itself cannot pass is an expected
failure with its reason (:data:`XFAIL`).

Tolerances, by the class of what ran (the layers' placement):

* only host/layout layers: the fp32 result rounded once to fp16 at the output: within
  1 ulp of fp16 of the exact result (``|y - ref| <= ulp16(ref)``);
* an ANE layer: compared with ``ref16``, the same model in float32 on the inputs rounded
  to fp16 (the ANE rounds its operands to fp16; the difference ``|ref16 - ref|`` is added
  to the allowance, computed from the data), within

  - exact ops (relu, clip, sign): 1 ulp16;
  - MAC ops (Conv, ConvTranspose, Gemm, MatMul): ``K 2^-17`` (each product on the
    Q16.16 grid, K the reduction length) + ``2^-10 |y|`` (fp16 readout and the fp16 bias
    add), and, only where constants are scaled at compile time (Gemm alpha/beta, a folded
    BatchNormalization: rounded once more to fp16), ``2^-11 sum |a||b|``; + 1 ulp16;
  - table ops: the table's measured error over all fp16 inputs (docs/lut.md, the bounds
    ``tests/test_lut_block.py`` enforces) + 1 ulp16; the compositions (Log, Softplus) the
    bound of their chain built on those errors (tests/helpers/row_bounds.py).
"""

from __future__ import annotations

import math
import re
import unittest

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.base  # noqa: E402
import onnx.backend.test  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402

from tests.helpers.lut_bounds import BOUNDS, elu_bound, hard_sigmoid_bound  # noqa: E402  (the table bounds, measured once)
from tests.helpers import row_bounds  # noqa: E402  (the row operations' chain bounds)
from tests.helpers.onnx_backend import OPS  # noqa: E402  (the node tests selected)
from fastane.lower.binary import COMPOSED  # noqa: E402

#: expected failures: test name -> the reason the ANE itself cannot pass it
XFAIL: dict = {}


class _Rep(onnx.backend.base.BackendRep):
    last: dict = {}

    def __init__(self, model):
        self.model = model

    def run(self, inputs, **kwargs):
        feeds = dict(zip(self.model.inputs, inputs))
        frozen = {k: v for k, v in feeds.items() if k in _params(self.model)}
        try:
            model = self.model.freeze(frozen)
            feeds = {k: v for k, v in feeds.items() if k not in frozen}
            outs = model(feeds)
        except (ModelError, NotImplementedError) as exc:
            raise unittest.SkipTest(f"unsupported by fastane: {exc}") from None
        bound, layers = model.bind({k: np.shape(v) for k, v in feeds.items()})
        _Rep.last = {"model": model, "feeds": feeds, "layers": layers, "bound": bound}
        return [outs[n].astype(bound.types[n].dtype) for n in model.outputs]


#: inputs of an op that a converter for the ANE makes compile-time constants: weights,
#: biases, normalisation parameters, clip bounds; integer inputs (shapes, axes) too
_PARAM_INPUTS = {
    "conv": (1, 2),
    "conv_transpose": (1, 2),
    "gemm": (1, 2),
    "batchnorm": (1, 2, 3, 4),
    "clip": (1, 2),
    "prelu": (1,),
    "layer_norm": (1, 2),
    "rms_norm": (1, 2),
    "pow": (1,),
    "range": (0, 1, 2),
    "onehot": (1,),
    "resize": (1, 2, 3),
}


def _params(model) -> set:
    """The node tests feed weights as graph inputs; the backend freezes them (and every
    integer input) into constants before compiling, as a conversion for the ANE would."""
    names = {k for k, t in model.inputs.items() if np.dtype(t.dtype).kind in "iub"}
    for node in model.graph.nodes:
        for i in _PARAM_INPUTS.get(node.op, ()):
            if i < len(node.inputs) and node.inputs[i] in model.inputs:
                names.add(node.inputs[i])
    return names


class FastaneBackend(onnx.backend.base.Backend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        try:
            return _Rep(fastane.load_model(model))
        except (ModelError, NotImplementedError) as exc:
            raise unittest.SkipTest(f"unsupported by fastane: {exc}") from None

    @classmethod
    def supports_device(cls, device):
        return device == "CPU"


def _ulp16(v):
    a = np.abs(np.asarray(v, np.float64))
    with np.errstate(over="ignore"):
        h = np.minimum(a, 65504).astype(np.float16)
    return np.maximum(np.spacing(h).astype(np.float64), 2.0**-24)


def _table_bound(layer, ref):
    """The measured error of the layer's table (docs/lut.md) at ``ref``."""
    node = layer.nodes[-1]
    name = {
        "leaky_relu": "leaky_relu",
        "gelu": "gelu",
        "tanh": "tanh",
        "sigmoid": "sigmoid",
        "exp": "exp",
        "sqrt": "sqrt",
        "reciprocal": "reciprocal",
        "erf": "erf",
    }.get(node.op)
    a = np.abs(ref)
    if layer.call in ("silu", "hard_swish"):
        name = layer.call
    if node.op == "div":  # round16(a * r), r = recip(b) (1 + e), |e| <= the table's bound
        r = BOUNDS["reciprocal"][4]
        return (r + 2.0**-11 + r * 2.0**-11) * a
    if node.op == "selu":
        return BOUNDS["selu_neg"][3] + BOUNDS["selu_pos"][4] * a
    if node.op == "hard_sigmoid":  # the parameters' fp16 roundings and the one rounding
        return hard_sigmoid_bound(float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5)))
    if node.op == "elu":  # the block's bound for alpha16, and alpha rounded to fp16 (|expm1| <= 1)
        alpha = float(node.attrs.get("alpha", 1.0))
        return elu_bound(alpha) + abs(alpha - float(np.float16(alpha)))
    if node.op == "leaky_relu" and np.float32(node.attrs.get("alpha", 0.01)) != np.float32(0.01):
        return 2.0**-10 * a  # the slope rounded to fp16 in a lines-only block
    _, _, _, ab, rel = BOUNDS[name]
    return (ab or 0.0) + (rel or 0.0) * a


_ROW_CALLS = ("softmax", "log_softmax", "reduce_mean", "layer_norm", "rms_norm")


def _row_bound(layer, bound, feeds, y16):
    """The chain's error bound (tests/helpers/row_bounds.py) on the layer's own input; the
    node tests feed it directly."""
    node = layer.nodes[0]
    rows, width = layer.detail["rows"], layer.detail["width"]
    x = np.asarray(feeds[node.inputs[0]], np.float64).reshape(rows, width)
    params = (
        [bound.consts[t].reshape(-1) if t else None for t in (node.inputs[1:3] + [None, None])[:2]]
        if layer.call in ("layer_norm", "rms_norm")
        else [None, None]
    )
    params = [None if p is None else np.broadcast_to(p, (width,)) for p in params]
    eps = float(node.attrs.get("epsilon", 1e-5))
    y = np.asarray(y16, np.float64)
    if layer.call == "reduce_mean":
        return row_bounds.bound("reduce_mean", x, y.reshape(rows, 1)).reshape(y.shape)
    return row_bounds.bound(layer.call, x, y.reshape(rows, width), *params, eps).reshape(y.shape)


def _folds(layer) -> bool:
    """Whether the layer's constants were scaled at compile time (Gemm alpha/beta, a folded
    BatchNormalization, an AveragePool's weight fp16(1 / window)): one more rounding of
    each weight to fp16."""
    n = layer.nodes[0]
    return (
        layer.detail.get("folded_bn")
        or layer.detail.get("pool_weight")
        or (n.op == "gemm" and (n.attrs.get("alpha", 1.0) != 1.0 or n.attrs.get("beta", 1.0) != 1.0))
    )


def _mac_k(layer, bound):
    node = layer.nodes[0]
    t = [bound.types[n].shape for n in node.inputs if n]
    if node.op == "conv":
        return math.prod(t[1][1:])
    if node.op == "avg_pool":  # the depthwise convolution: one window
        return math.prod(node.attrs["kernel"])
    if node.op == "conv_transpose":  # the equivalent conv: Cin/groups x kernel
        return t[1][0] // int(node.attrs.get("groups", 1)) * math.prod(t[1][2:])
    if node.op == "gemm":
        return t[0][0] if node.attrs.get("trans_a") else t[0][-1]
    return t[0][-1]


def _allowance(ref, last):
    """Elementwise allowed |y - ref| for the model that ran last (see the module docs)."""
    model, feeds, layers, bound = (last[k] for k in ("model", "feeds", "layers", "bound"))
    ane = [lay for lay in layers if lay.placement == "ane"]
    outs = model.outputs
    if not ane:
        return {n: _ulp16(r) for n, r in zip(outs, ref)}
    r16 = {k: (v.astype(np.float16).astype(v.dtype) if v.dtype.kind == "f" else v) for k, v in feeds.items()}
    ref16 = model.reference(r16)
    allow = {}
    for n, r in zip(outs, ref):
        y16 = np.asarray(ref16[n], np.float64)
        tol = _ulp16(y16)
        for lay in ane:
            if lay.kind == "mac":
                absref = np.abs(
                    np.asarray(model.reference({k: np.abs(v) for k, v in r16.items()})[n], np.float64)
                )
                tol = tol + _mac_k(lay, bound) * 2.0**-17 + 2.0**-10 * np.abs(y16)
                if _folds(lay):  # constants scaled at compile time, rounded once
                    tol = tol + 2.0**-11 * absref
            elif lay.kind == "table" and lay.call in _ROW_CALLS:
                tol = tol + _row_bound(lay, bound, r16, y16)
            elif lay.kind == "table" and lay.call in COMPOSED:  # the node tests feed it directly
                tol = tol + row_bounds.composed(lay.call, r16[lay.nodes[0].inputs[0]])
            elif lay.kind == "table":
                tol = tol + _table_bound(lay, y16)
        with np.errstate(invalid="ignore"):
            inround = np.abs(y16 - np.asarray(r, np.float64))
        allow[n] = tol + np.where(np.isnan(inround), 0.0, inround)
    return allow


class FastaneBackendTest(onnx.backend.test.BackendTest):
    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None):
        assert len(outputs) == len(ref_outputs)
        last = _Rep.last
        allow = _allowance(ref_outputs, last)
        for name, y, r in zip(last["model"].outputs, outputs, ref_outputs):
            np.testing.assert_array_equal(y.shape, r.shape, err_msg=f"output {name}: shape")
            assert y.dtype == r.dtype, (name, y.dtype, r.dtype)
            if r.dtype.kind != "f":
                np.testing.assert_array_equal(y, r)
                continue
            y64, r64 = y.astype(np.float64), r.astype(np.float64)
            same = (y64 == r64) | (np.isnan(y64) & np.isnan(r64))
            with np.errstate(invalid="ignore"):
                err = np.where(same, 0.0, np.abs(y64 - r64))
            err = np.where(np.isnan(err), np.inf, err)
            bad = ~(err <= allow[name]) & ~same  # identical (or both NaN) is always within
            if bad.any():
                i = np.unravel_index(
                    np.argmax(np.where(bad, err - np.nan_to_num(allow[name]), -1)), err.shape
                )
                raise AssertionError(
                    f"output {name}: {int(bad.sum())} of {err.size} elements beyond the "
                    f"allowance; worst at {i}: fastane {y64[i]!r}, reference {r64[i]!r}, "
                    f"allowed {allow[name][i]!r}"
                )


_suite = FastaneBackendTest(FastaneBackend, __name__)
for _pat in OPS.values():
    _suite.include(rf"^{_pat}_cpu$")
_suite.exclude(r"_expanded")
for _name, _why in XFAIL.items():
    _suite.xfail(rf"^{_name}_cpu$")


_SELECTED = [re.compile(rf"^{p}_cpu$") for p in OPS.values()]


def _selected_only(cls):
    """Drop the generated tests outside the selection (onnx marks them skipped; they are
    not part of this suite)."""
    for name in [n for n in vars(cls) if n.startswith("test_")]:
        if "_expanded" in name or not any(p.match(name) for p in _SELECTED):
            delattr(cls, name)
    return cls


globals().update(
    {
        k: _selected_only(c)
        for k, c in _suite.test_cases.items()
        if any(n.startswith("test_") for n in vars(_selected_only(c)))
    }
)
