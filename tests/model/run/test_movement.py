"""The fixed-point crop path of slices (fastane/model/run/movement.py): the crop against a
plain Python loop, which slices take the path, and a model run as on chips of every
generation: the outputs, the events, the report, the first-divergence hunt and ``--chip``."""

import contextlib
import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastane
from fastane.errors import SaturationError, SaturationWarning
from fastane.model.graph import Node
from fastane.model.run.hunt import first_divergence
from fastane.model.run.movement import FP16_MAX, crop, crop_limit, takes_crop_path
from fastane.roofline import chips
from fastane.stats import Stats
from tests.helpers.crop import slow_crop

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from fastane.cli import main  # noqa: E402

#: the largest magnitude the crop path keeps on the chips that have it (the M1's record)
LIMIT = chips.FAMILIES["h13"].slice_crop.value
#: one chip of every generation in the table
ONE_A_GENERATION = {
    f.key: next(c.key for c in chips.CHIPS.values() if c.family is f) for f in chips.FAMILIES.values()
}


def same(a, b) -> bool:
    """Equal element for element, NaN for NaN, with the same dtype and signs of zero."""
    a, b = np.asarray(a), np.asarray(b)
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))))
    )


#: values around the limit, fp16's edges and the specials
EDGES = [
    4094.0,
    -4094.0,
    4095.0,
    -4095.0,
    4096.0,
    -4096.0,
    4094.99,
    4095.0001,
    4093.0,
    65504.0,
    -65504.0,
    65519.0,
    65520.0,
    1e6,
    0.0,
    -0.0,
    2.0**-24,
    math.inf,
    -math.inf,
    math.nan,
]
values = st.one_of(
    st.sampled_from(EDGES),
    st.floats(min_value=3000.0, max_value=5000.0, width=32),
    st.floats(min_value=-5000.0, max_value=-3000.0, width=32),
    st.floats(width=32),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, min_size=1, max_size=64), st.sampled_from([np.float16, np.float32]))
def test_crop_matches_the_loop(xs, dtype):
    with np.errstate(over="ignore"):
        x = np.asarray(xs, dtype)
    y, n = crop(x, LIMIT)
    ref, n_ref = slow_crop(x, LIMIT)
    assert same(y, ref) and n == n_ref


def test_crop_at_the_limit():
    h = np.array([4094, -4094, 4096, -4096, 2048, np.inf, -np.inf, np.nan, -0.0], np.float16)
    y, n = crop(h, LIMIT)
    assert same(y, np.array([4094, -4094, np.inf, -np.inf, 2048, np.inf, -np.inf, np.nan, -0.0], np.float16))
    assert n == 2  # the infinities given are not counted
    # a float32 value's fp16 rounding decides: 4095 rounds to 4096, 4094.99 to 4094 (kept as it is)
    y, n = crop(np.array([4095.0, 4094.99, 70000.0], np.float32), LIMIT)
    assert same(y, np.array([np.inf, 4094.99, 70000.0], np.float32)) and n == 1
    ints = np.array([5000, -5000], np.int64)
    assert crop(ints, LIMIT)[0] is ints and crop(ints, LIMIT)[1] == 0


def test_every_generation_has_a_sourced_crop_figure():
    for f in chips.FAMILIES.values():
        fig = f.slice_crop
        assert fig.source.strip() and fig.value > 0, f.key
        assert fig.kind == "measured" or fig.note, f.key
        assert fig.value in (LIMIT, FP16_MAX), f.key
    by: dict = {}
    for k, f in chips.FAMILIES.items():
        by.setdefault((f.slice_crop.value < FP16_MAX, f.slice_crop.kind), []).append(k)
    # measured on chips of H13 (M1, M1 Max) and H14 (M2 Pro, M2 Max); measured absent on H16
    # (M4, M4 Pro, M4 Max) and H17 (M5, M5 Pro); assumed (the M1's) where nothing was measured
    assert by == {
        (True, "measured"): ["h13", "h14"],
        (False, "measured"): ["h16", "h17"],
        (True, "assumption"): ["h15", "unknown"],
    }


@pytest.mark.parametrize("family, chip", sorted(ONE_A_GENERATION.items()))
def test_crop_limit_follows_the_chips_generation(family, chip):
    fig = chips.FAMILIES[family].slice_crop
    assert crop_limit(chip) == (None if fig.value >= FP16_MAX else fig.value)
    assert crop_limit(chips.get(chip)) == crop_limit(chip)


def test_a_hand_built_chip_is_of_the_unknown_generation():
    from dataclasses import replace

    bare = replace(chips.get("m4"), family=None)
    assert chips.family_of(bare) is chips.FAMILIES["unknown"]
    assert crop_limit(bare) == chips.FAMILIES["unknown"].slice_crop.value


# ------------------------------------------------------------------ which slices
def _slice_node(source="Slice"):
    return Node("slice", "s", ["x", "st", "en", "ax", "sp"], ["y"], {}, source)


@pytest.mark.parametrize(
    "starts, ends, axes, steps, crops",
    [
        ([1], [8], [3], [1], True),  # an offset on the last axis
        ([1], [8], [-1], [1], True),  # the last axis by a negative index
        ([-3], [8], [3], [1], True),  # a negative begin: 5
        ([0], [5], [3], [1], False),  # a zero begin on the last axis
        ([-8], [5], [3], [1], False),  # a negative begin clamped to 0
        ([1, 0], [4, 8], [2, 3], [1, 1], False),  # an offset on another axis only
        ([1, 2], [4, 8], [2, 3], [1, 1], True),  # offsets on both
        ([1], [8], [3], [2], False),  # a strided last axis: not measured, exact
        ([6], [2], [3], [1], False),  # an empty window
        ([9], [12], [3], [1], False),  # beyond the axis: empty
    ],
)
def test_which_slices_take_the_crop_path(starts, ends, axes, steps, crops):
    consts = {
        n: np.array(v, np.int64) for n, v in (("st", starts), ("en", ends), ("ax", axes), ("sp", steps))
    }
    assert takes_crop_path(_slice_node(), (1, 2, 4, 8), consts) is crops


def test_split_parts_and_other_ops_stay_exact():
    consts = {n: np.array(v, np.int64) for n, v in (("st", [4]), ("en", [8]), ("ax", [3]), ("sp", [1]))}
    assert not takes_crop_path(_slice_node("split"), (1, 2, 4, 8), consts)  # MIL split's parts
    assert not takes_crop_path(Node("transpose", "t", ["x"], ["y"]), (1, 2, 4, 8), {})


# ------------------------------------------------------------------ a model
def slice_model(starts, ends, axes, shape=(1, 2, 4, 8)):
    """x -> Relu -> Slice(starts, ends, axes) -> y (the Relu runs on the ANE, so the slice
    moves fp16 data, as between two ANE layers)."""
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    inits = [
        helper.make_tensor(n, TensorProto.INT64, [len(v)], v)
        for n, v in (("st", starts), ("en", ends), ("ax", axes))
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Slice", ["r", "st", "en", "ax"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "crop", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def big_input(seed=0, shape=(1, 2, 4, 8)):
    """Magnitudes on both sides of the limit (the Relu keeps the positive ones)."""
    rng = np.random.default_rng(seed)
    x = rng.choice([1.0, 100.0, 4000.0, 4094.0, 4095.0, 4096.0, 5000.0, 60000.0], size=shape)
    return (x * rng.choice([1.0, -1.0], size=shape)).astype(np.float32)


@contextlib.contextmanager
def quiet():
    """The crop events ignored (the tests count them from the report)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)
        yield


@pytest.mark.parametrize("family, chip", sorted(ONE_A_GENERATION.items()))
def test_a_model_runs_as_on_each_generation(family, chip):
    m = fastane.load_model(slice_model([1], [8], [3]))
    x = big_input()
    exact = np.maximum(x, 0).astype(np.float16)[..., 1:8]
    limit = crop_limit(chip)
    want, n = (exact, 0) if limit is None else slow_crop(exact, limit)
    assert n > 0 or limit is None  # the input reaches beyond the limit
    with quiet():
        y = m(x, chip=chip)["y"]
        rep = m.report(x, chip)
    assert same(y, want)
    layer = next(r for r in rep.layers if r.layer.op == "Slice")
    assert layer.stats.cropped == n and layer.inf_born == n
    assert (rep.first_bad == layer.layer.name) is (n > 0)
    assert rep.as_dict()["layers"][-1]["cropped"] == n
    assert (
        f"by the crop path of a slice with a last-axis offset on {chips.get(chip).key}" in rep.table()
    ) is (n > 0)


def test_the_m1_is_the_default_and_crops():
    m = fastane.load_model(slice_model([1], [8], [3]))
    x = big_input()
    with pytest.warns(SaturationWarning, match=r"as on M1 .*read out as \+-inf: beyond the magnitude"):
        y = m(x)["y"]
    ref, n = slow_crop(np.maximum(x, 0).astype(np.float16)[..., 1:8], LIMIT)
    assert n and same(y, ref) and m.chip is chips.get("m1")


def test_the_models_chip_and_the_calls():
    m = fastane.load_model(slice_model([1], [8], [3]), chip="m4")
    x = big_input()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)  # nothing cropped as on an M4
        y4 = m(x)["y"]
        assert m.report(x).chip == "m4"
    assert same(y4, np.maximum(x, 0).astype(np.float16)[..., 1:8])
    with quiet():
        y2 = m(x, chip="m2")["y"]
    assert y2.dtype == y4.dtype and np.isinf(y2).any()
    assert m.freeze({}).chip is m.chip
    with pytest.raises(ValueError, match="unknown chip"):
        fastane.load_model(slice_model([1], [8], [3]), chip="m99")


def test_the_event_follows_errstate():
    m = fastane.load_model(slice_model([1], [8], [3]))
    with fastane.errstate(saturation="raise"), pytest.raises(SaturationError, match="crop path"):
        m(big_input())
    with fastane.errstate(saturation="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        m(big_input())


@pytest.mark.parametrize(
    "starts, ends, axes",
    [([0], [5], [3]), ([1], [4], [2]), ([1, 0], [2, 8], [1, 3])],  # zero last-axis begin; other axes
)
def test_slices_off_the_crop_path_stay_exact_on_every_chip(starts, ends, axes):
    m = fastane.load_model(slice_model(starts, ends, axes))
    x = big_input(1)
    want = m.reference(x)["y"].astype(np.float16)
    for chip in ONE_A_GENERATION.values():
        with warnings.catch_warnings():
            warnings.simplefilter("error", SaturationWarning)
            assert same(m(x, chip=chip)["y"], want), chip


def test_first_divergence_names_the_slice_where_the_chip_crops():
    m = fastane.load_model(slice_model([1], [8], [3]))
    x = big_input()
    with quiet():
        d = first_divergence(m, x, chip="m1")
    assert d.layer == "Slice_1" and d.op == "Slice" and d.inf_born > 0
    assert first_divergence(m, x, chip="m5").layer is None


def test_stats_add_the_crop_count():
    assert (Stats(cropped=2) + Stats(cropped=3)).cropped == 5
    assert Stats(cropped=2).plus_counts(Stats(cropped=1)).cropped == 3


# ------------------------------------------------------------------ the command line
@pytest.fixture(scope="module")
def crop_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("crop")
    onnx.save(slice_model([1], [8], [3]), str(d / "crop.onnx"))
    np.save(d / "x.npy", big_input())
    return d


def _run(capsys, *argv):
    rc = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_first_divergence_follows_the_chip(crop_files, capsys):
    args = (crop_files / "crop.onnx", "-i", f"x={crop_files / 'x.npy'}", "--first-divergence")
    with quiet():
        rc, out, _ = _run(capsys, *args, "--chip", "m1")
    assert rc == 0 and out.startswith("first divergence: layer 'Slice_1' (Slice, layout)")
    rc, out, _ = _run(capsys, *args, "--chip", "m4")
    assert rc == 0 and out.startswith("no layer left its tolerance")


def test_cli_outputs_and_report_follow_the_chip(crop_files, capsys, tmp_path):
    args = (crop_files / "crop.onnx", "-i", f"x={crop_files / 'x.npy'}")
    for chip in ("m2", "m5"):
        with quiet():
            rc, _, _ = _run(capsys, *args, "--chip", chip, "-o", tmp_path / f"{chip}.npz")
        assert rc == 0
    x = np.load(crop_files / "x.npy")
    exact = np.maximum(x, 0).astype(np.float16)[..., 1:8]
    assert same(np.load(tmp_path / "m5.npz")["y"], exact)
    assert same(np.load(tmp_path / "m2.npz")["y"], slow_crop(exact, crop_limit("m2"))[0])
    with quiet():
        rc, out, _ = _run(capsys, *args, "--report", "--chip", "m2")
    assert rc == 0 and "first layer beyond its tolerance: Slice_1" in out and "crop path" in out
    rc, out, err = _run(capsys, *args, "--chip", "m99")
    assert rc == 2 and "m99" in err


def test_cli_sweep_follows_the_chip(crop_files, capsys):
    sweeps = {}
    for chip in ("m1", "m4"):
        with quiet():
            rc = main(
                ["sweep", str(crop_files / "crop.onnx"), "--input", "x", "--range", "4090:4100:6"]
                + ["--json", "--chip", chip]
            )
        assert rc == 0
        sweeps[chip] = {p["x"]: p["ane"] for p in json.loads(capsys.readouterr().out)["points"]}
    # fp16 4094 (from 4094) is kept; 4096 (from 4096 and 4098) is cut as on the M1 only
    assert sweeps["m1"][4094.0] == 4094.0 and sweeps["m1"][4096.0] == sweeps["m1"][4098.0] == "inf"
    assert sweeps["m4"][4096.0] == 4096.0 and sweeps["m4"][4098.0] == 4096.0
