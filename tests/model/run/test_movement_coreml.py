"""The crop path of MIL slices (fastane/model/run/movement.py): ``slice_by_size`` and
``slice_by_index`` with an offset on the last axis crop as on an M1 and not as on an M5;
``split``'s parts (imported as slices) and a strided last axis stay exact."""

import warnings

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import SaturationWarning  # noqa: E402
from fastane.model.run.movement import crop_limit  # noqa: E402
from tests.helpers.coreml import save  # noqa: E402
from tests.helpers.crop import slow_crop  # noqa: E402

SHAPE = (1, 2, 3, 8)


def big_input():
    rng = np.random.default_rng(3)
    x = rng.choice([2.0, 3000.0, 4094.0, 4096.0, 8000.0], size=SHAPE)
    return (x * rng.choice([1.0, -1.0], size=SHAPE)).astype(np.float32)


def load(tmp_path, name, body):
    @mb.program(input_specs=[mb.TensorSpec(shape=SHAPE)], opset_version=ct.target.iOS17)
    def prog(x):
        return body(mb.mul(x=x, y=1.0))  # an ANE layer before the slice

    return fastane.load_model(save(prog, tmp_path / f"{name}.mlpackage", ct.target.iOS17, fp16=True))


def run(m, x, chip):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)
        return list(m(x, chip=chip).values())


@pytest.mark.parametrize(
    "name, body, window",
    [
        ("by_size", lambda x: mb.slice_by_size(x=x, begin=[0, 0, 0, 2], size=[1, 2, 3, 5]), np.s_[..., 2:7]),
        (
            "by_index",
            lambda x: mb.slice_by_index(x=x, begin=[0, 1, 0, 3], end=[1, 2, 3, 8]),
            np.s_[:, 1:2, :, 3:8],
        ),
    ],
)
def test_mil_slices_with_a_last_axis_offset_crop_as_on_an_m1(tmp_path, name, body, window):
    m = load(tmp_path, name, body)
    x = big_input()
    exact = x.astype(np.float16)[window]
    (y1,) = run(m, x, "m1")
    (y5,) = run(m, x, "m5")
    assert np.isinf(y1).any()
    np.testing.assert_array_equal(y1, slow_crop(exact, crop_limit("m1"))[0])
    np.testing.assert_array_equal(y5, exact)


@pytest.mark.parametrize(
    "name, body, windows",
    [
        (
            "split",
            lambda x: mb.split(x=x, split_sizes=[3, 5], axis=3),
            [np.s_[..., 0:3], np.s_[..., 3:8]],
        ),
        (
            "strided",
            lambda x: mb.slice_by_index(x=x, begin=[0, 0, 0, 1], end=[1, 2, 3, 8], stride=[1, 1, 1, 2]),
            [np.s_[..., 1:8:2]],
        ),
        (
            "other_axis",
            lambda x: mb.slice_by_size(x=x, begin=[0, 1, 1, 0], size=[1, 1, 2, 8]),
            [np.s_[:, 1:2, 1:3, :]],
        ),
    ],
)
def test_other_mil_slices_stay_exact(tmp_path, name, body, windows):
    m = load(tmp_path, name, body)
    x = big_input()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)  # nothing cropped
        ys = list(m(x, chip="m1").values())
    for y, w in zip(ys, windows):
        np.testing.assert_array_equal(y, x.astype(np.float16)[w])
