"""The public softmax / normalization / reduction calls (fastane.rowops): numpy-style
shapes, axes and errors; values bit for bit against tests/helpers/reference_rows.py."""

import numpy as np
import pytest
from tests.helpers import reference_rows as R
from tests.helpers.planar import F16, bits

import fastane


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(2).standard_normal((3, 4, 20)) * 3


def same(a, b):
    return np.array_equal(bits(a), bits(b))


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2])
def test_softmax_along_any_axis(x, axis):
    y = fastane.softmax(x, axis=axis)
    assert y.dtype == np.float16 and y.shape == x.shape
    moved = np.moveaxis(x.astype(F16), axis, -1)
    want = R.ref_softmax(moved.reshape(-1, moved.shape[-1])).reshape(moved.shape)
    assert same(y, np.moveaxis(want, -1, axis))
    assert fastane.last_stats().tasks == 5


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"])
def test_reductions(x, name):
    fn = getattr(fastane, name)
    for axis, keep in ((-1, False), (1, True), (0, False)):
        y = fn(x, axis=axis, keepdims=keep)
        moved = np.moveaxis(x.astype(F16), axis, -1)
        want = R.ref_reduce(name, moved.reshape(-1, moved.shape[-1])).reshape(moved.shape[:-1])
        if keep:
            want = np.expand_dims(want, axis)
        assert y.shape == want.shape and y.dtype == np.float16
        assert same(y, want)
    want = {
        "reduce_sum": 7.0,
        "reduce_mean": float(np.float16(7 * float(np.float16(1 / 3)))),
        "reduce_max": 4.0,
    }
    assert float(fn([1.0, 2.0, 4.0])) == want.get(name, 1.0)


def test_norms(x):
    g = np.linspace(0.5, 2, 20)
    b = np.linspace(-1, 1, 20)
    rows = x.astype(F16).reshape(-1, 20)
    y = fastane.layer_norm(x, g, b, eps=1e-3)
    assert y.shape == x.shape and same(
        y.reshape(-1, 20), R.ref_layer_norm(rows, g.astype(F16), b.astype(F16), 1e-3)
    )
    y = fastane.rms_norm(x, g)
    assert same(y.reshape(-1, 20), R.ref_rms_norm(rows, g.astype(F16)))
    y = fastane.log_softmax(x)
    assert same(y.reshape(-1, 20), R.ref_log_softmax(rows))


def test_empty_and_errors():
    assert fastane.softmax(np.zeros((0, 5))).shape == (0, 5)
    assert fastane.reduce_sum(np.zeros((3, 0))).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="no identity"):
        fastane.reduce_max(np.zeros((3, 0)))
    with pytest.raises(ValueError, match="at least one dimension"):
        fastane.softmax(3.0)
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        fastane.softmax(np.ones((2, 2)), axis=2)
    with pytest.raises(TypeError, match="axis must be an integer"):
        fastane.reduce_sum(np.ones((2, 2)), axis=(0, 1))
    with pytest.raises(TypeError, match="complex"):
        fastane.softmax(np.ones(3, complex))
    with pytest.raises(ValueError, match=r"scale has shape \(3,\); it must be \(4,\)"):
        fastane.layer_norm(np.ones((2, 4)), np.ones(3))
    with pytest.raises(ValueError, match="eps must be a finite number"):
        fastane.rms_norm(np.ones((2, 4)), eps=-1)
    with pytest.raises(NotImplementedError, match="exceeds the 16384"):
        fastane.softmax(np.ones((1, 20000)))
