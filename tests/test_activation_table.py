"""The records of fastane.activation_table and what derives from them."""

import inspect
import re
from pathlib import Path

import pytest

import fastane
from fastane import activations, lut
from fastane.activation_table import ACTIVATIONS, TABLES
from fastane.lower.problems import MULTI_STAGE, SINGLE_STAGE, ne_stage

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_activation_reads_a_registered_table(name):
    rec = ACTIVATIONS[name]
    assert rec.nonlinear in ("lut", "relu", "identity")
    if rec.nonlinear == "lut":
        assert rec.table in TABLES
    assert rec.table is None or lut.get_block(name) is lut.get_block(rec.table)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_activation_is_a_documented_public_function(name):
    rec = ACTIVATIONS[name]
    f = getattr(activations, name)
    assert inspect.isfunction(f) and f.__name__ == name and f.__module__ == "fastane.activations"
    assert f.__doc__ == rec.doc and getattr(fastane, name) is f
    params = list(inspect.signature(f).parameters)
    assert params == ["x", *rec.params, "out"]


def test_the_exports_are_the_records():
    assert activations.__all__ == [*ACTIVATIONS, "lut_table", "last_stats"]
    assert set(ACTIVATIONS) | {"lut_table"} <= set(fastane.__all__)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_the_lowering_takes_every_activation(name):
    """SINGLE_STAGE and MULTI_STAGE split the table activations; ne_stage follows the record."""
    rec = ACTIVATIONS[name]
    assert (name in SINGLE_STAGE) + (name in MULTI_STAGE) == (rec.nonlinear != "relu")
    stage = ne_stage(name)
    assert (stage.name, stage.nonlinear, stage.post_scale) == (name, rec.nonlinear, rec.scale)
    assert stage.post == (None if rec.single_stage else name)
    assert (stage.block is None) == (rec.nonlinear != "lut")
    gated = stage.post is not None and rec.nonlinear == "identity"
    assert stage.gate is (lut.get_block(rec.table) if gated else None) and stage.offset == rec.offset


def test_the_chains_tasks_and_l2_tiles():
    """The TDs after the NE stage and the output-sized tiles a task's chain holds in L2, as
    they were written out per name before the gate and offset fields (hard_swish added)."""
    names = (None, "sigmoid", "silu", "hard_swish")
    assert [ne_stage(n).post_tasks for n in names] == [0, 1, 3, 2]
    assert [ne_stage(n).out_tiles for n in names] == [1, 2, 4, 3]
    assert [ne_stage(n).offset for n in names] == [0.0, 0.5, 0.5, 0.0]


def test_apple_identical_and_aliases_come_from_the_tables():
    assert lut.APPLE_IDENTICAL == {t.name: t.apple for t in TABLES.values() if t.apple is not None}
    assert "identity" not in lut.APPLE_IDENTICAL and lut.APPLE_IDENTICAL["gelu"] is False
    for t in TABLES.values():
        for alias in t.aliases:
            assert lut.get_block(alias) is lut.get_block(t.name)
    assert set(lut.table_names()) == {*TABLES, *ACTIVATIONS, "inv", "leakyrelu"}


def test_docs_name_every_table_and_activation():
    text = (ROOT / "docs" / "lut.md").read_text()
    missing = [n for n in (*TABLES, *ACTIVATIONS) if not re.search(rf"\b{n}\b", text)]
    assert not missing, missing


def test_the_derived_tables_hold_what_they_held_before_the_records():
    """The lists the records replaced, as they were written out at 24283de, with the
    activations added since (elu, erf, hard_sigmoid: single-stage, no corpus block;
    hard_swish: silu's chain with its own gate): the records must give them again (not only
    agree with themselves)."""
    assert lut.APPLE_IDENTICAL == {
        **dict.fromkeys(
            "tanh sigmoid exp2 reciprocal rsqrt sqrt log2 relu6 hardtanh leaky_relu rrelu selu "
            "sign relu step fraction integer atan_low atan_high".split(),
            True,
        ),
        "gelu": False,
    }
    assert {k: v[0] for k, v in SINGLE_STAGE.items()} == {
        "tanh": "tanh",
        "gelu": "gelu",
        "exp": "exp2",
        "exp2": "exp2",
        "relu6": "relu6",
        "hardtanh": "hardtanh",
        "leaky_relu": "leaky_relu",
        "selu": "selu",
        "elu": "elu",
        "erf": "erf",
        "hard_sigmoid": "hard_sigmoid",
        "sign": "sign",
        "reciprocal": "reciprocal",
        "rsqrt": "rsqrt",
        "sqrt": "sqrt",
        "log2": "log2",
    }
    assert {k: v[1] for k, v in SINGLE_STAGE.items() if v[1] != 1.0} == {"exp": 1.4423828125}
    assert list(MULTI_STAGE) == ["sigmoid", "silu", "hard_swish"]
