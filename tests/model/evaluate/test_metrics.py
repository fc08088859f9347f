"""The rows' aggregate (fastane.model.evaluate.metrics): counts that do not depend on the
order of the rows, error bins, the task metric's choice."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastane.errors import ModelError
from fastane.model.evaluate.metrics import ERROR_BINS, ROW_COLUMNS, Aggregate, Task, error_bin


def test_error_bins():
    assert [ERROR_BINS[error_bin(e)] for e in (0.0, 1e-6, 1e-5, 5e-4, 0.5, 1.0, 7.0, math.inf, math.nan)] == [
        "0",
        "<1e-5",
        "<1e-4",
        "<1e-3",
        "<1",
        ">=1",
        ">=1",
        "inf/nan",
        "inf/nan",
    ]


def test_task_resolves_from_the_output_shape():
    t = Task()
    assert t.resolve(np.zeros((1, 10))) == "classify"
    assert t.resolve(np.zeros((10,))) == "classify"
    assert t.resolve(np.zeros((1, 7, 50))) == "sequence"
    assert t.resolve(np.zeros((1, 1))) == "regress"
    assert t.resolve(np.zeros((1, 3, 8, 8))) == "regress"
    assert Task("regress").resolve(np.zeros((1, 10))) == "regress"
    with pytest.raises(ModelError, match="expected one of"):
        Task("top5")
    with pytest.raises(ModelError, match="target output 'y'"):
        Task(target="y").output({"logits": np.zeros(3)})


errors = st.one_of(st.sampled_from([0.0, 1e-3, 1e-3, math.inf, math.nan]), st.floats(0, 10))


@st.composite
def rows(draw):
    n = draw(st.integers(1, 12))
    out = []
    for i in range(n):
        ane, ref = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        label = draw(st.one_of(st.none(), st.integers(0, 2)))
        row = dict.fromkeys(ROW_COLUMNS)
        row.update(
            index=i,
            id=f"in{i}",
            label=label,
            ane=ane,
            ref=ref,
            agree=ane == ref,
            ane_correct=None if label is None else ane == label,
            ref_correct=None if label is None else ref == label,
            max_abs_err=draw(errors),
            error=draw(errors),
            nonfinite=draw(st.integers(0, 2)),
            saturated=draw(st.integers(0, 3)),
            lut_underflow=0,
            lut_overflow=draw(st.integers(0, 1)),
            cropped=0,
            first_beyond=draw(st.sampled_from(["", "a", "b"])),
        )
        row["layers"] = [
            [
                p,
                name,
                "MatMul",
                "ane",
                draw(st.one_of(st.none(), errors)),
                draw(st.booleans()),
                draw(st.integers(0, 2)),
                0,
                0,
            ]
            for p, name in enumerate(("a", "b"))
        ]
        out.append(row)
    return out


def _dump(agg) -> str:
    import json

    return json.dumps(agg.as_dict(), allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(rows(), st.randoms(use_true_random=False))
def test_aggregate_does_not_depend_on_the_order_of_rows(rs, rnd):
    a, b = Aggregate(worst=3), Aggregate(worst=3)
    for r in rs:
        a.add(r)
    shuffled = list(rs)
    rnd.shuffle(shuffled)
    for r in shuffled:
        b.add(r)
    assert _dump(a) == _dump(b)
    d = a.as_dict()
    assert d["inputs"] == len(rs)
    assert [c["index"] for c in d["changed"]] == [r["index"] for r in rs if not r["agree"]]
    assert d["agreement"]["agree"] == sum(r["agree"] for r in rs)
    for L in d["layers"]:
        errs = [r["layers"][0 if L["name"] == "a" else 1][4] for r in rs]
        assert sum(L["histogram"]) == L["inputs"] == sum(e is not None for e in errs)
        # the worst inputs: NaN first, then the largest errors, ties by index
        keyed = sorted(
            ((-math.inf if math.isnan(e) else -e), r["index"]) for r, e in zip(rs, errs) if e is not None
        )
        assert [w["index"] for w in L["worst"]] == [i for _, i in keyed[:3]]
