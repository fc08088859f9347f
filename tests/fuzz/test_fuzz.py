"""The fuzzing suite in CI: a bounded, seeded slice of the campaign, and the harness's own
checks (each failure class it must catch is provoked once).

The slice: :data:`CI_CASES` cases of campaign :data:`CI_SEED` (``FASTANE_FUZZ_CASES``
overrides), run as ``scripts/fuzz.sh`` runs them -- a separate process forking one child
per case, on one core -- with fewer corpus bases (:data:`CI_CORPUS_SHARE`), stopped after
:data:`CI_BUDGET` seconds on a busy machine.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

import fuzzkit
import harness

CI_SEED = 1
CI_CASES = int(os.environ.get("FASTANE_FUZZ_CASES", 2000))
CI_BUDGET = float(os.environ.get("FASTANE_FUZZ_BUDGET", 100))
#: of the TD cases, those mutating a corpus program (large tensors, the slow cases; the
#: campaigns use harness.CORPUS_SHARE)
CI_CORPUS_SHARE = 0.05
HERE = Path(__file__).parent


def test_a_seeded_slice_of_the_campaign_finds_nothing(tmp_path):
    proc, state, detail = fuzzkit.run_slice(
        HERE / "harness.py",
        tmp_path,
        CI_BUDGET,
        *("--cases", str(CI_CASES), "--seed", str(CI_SEED), "--corpus-share", str(CI_CORPUS_SHARE)),
    )
    assert proc.returncode == 0 and not state["failures"], (
        state["failures"],
        detail[:5],
        proc.stderr[-3000:],
    )
    ran = state["next"]
    assert ran >= min(CI_CASES, 200), f"only {ran} cases ran in {CI_BUDGET} s"
    kinds = state["kinds"]
    assert {"td", "api"} <= set(kinds), kinds
    outcomes = state["outcomes"]
    # the mutations reach both sides: programs accepted and run, and programs refused
    assert any(k.startswith("td: accepted") for k in outcomes), outcomes
    assert any(k.startswith("td: ") and "Fault" in k for k in outcomes), outcomes
    print(f"fuzz slice: {ran} cases, {json.dumps(kinds)}")


def test_case_generation_never_fails():
    """Every case is generated (case 9835 of seed 0 once set 2 into a 1-bit field at bit 31)."""
    for i in range(2000):
        harness.make_case(CI_SEED, i)
    assert harness.make_case(0, 9835)["kind"] == "td"


def test_cases_are_reproducible():
    assert harness.make_case(5, 17) == harness.make_case(5, 17)
    assert harness.make_case(5, 17) != harness.make_case(5, 18)


@pytest.mark.parametrize(
    "what,status",
    [("crash", "crash"), ("hang", "hang"), ("memory", "memory"), ("error", "error"), ("ok", "ok")],
)
def test_the_child_names_each_failure_class(what, status):
    got, detail = harness.run_isolated({"kind": "selftest", "what": what}, timeout=3)
    assert got == status, detail


def _first_case(pred, kind="td", seed=3):
    for i in range(2000):
        case = harness.make_case(seed, i)
        if case["kind"] == kind and pred(case):
            return case
    raise AssertionError("no such case")


def _plain(base):
    """An unmutated TD case of ``base`` (the program as built)."""
    prog = harness.bases()[base]
    return {
        "kind": "td",
        "index": 0,
        "base": base,
        "stream": prog.td_stream.hex(),
        "kernel": prog.kernel.hex(),
        "count": None,
        "bars": [],
        "mutations": [],
        "run_api": True,
        "seed": 1,
    }


def test_an_unmutated_program_is_accepted():
    assert harness.run_td(_plain("relu+tanh")) == "accepted; run:ok/ok"


def test_a_write_outside_the_destination_windows_is_caught(monkeypatch):
    from fastane.device import engine

    run = engine.Engine._run_task

    def stray(self, p):
        out = run(self, p)
        self.memory.data[0] ^= 0xFF  # one byte nobody names
        return out

    monkeypatch.setattr(engine.Engine, "_run_task", stray)
    with pytest.raises(harness.Violation, match="outside its destination windows"):
        harness.run_td(_plain("conv1x1"))


def test_a_write_before_a_fault_is_caught(monkeypatch):
    from fastane.device import engine
    from fastane.device.faults import DMARangeFault

    run = engine.Engine._run_task

    def late_fault(self, p):
        run(self, p)
        raise DMARangeFault("a fault found too late")

    monkeypatch.setattr(engine.Engine, "_run_task", late_fault)
    with pytest.raises(harness.Violation, match="after memory was written"):
        harness.run_td(_plain("conv1x1"))


def test_stats_disagreement_is_caught(monkeypatch):
    from fastane.device import engine

    real = engine.Engine.run

    def off_by_one(self, plans, stats_only=False):
        st = real(self, plans, stats_only)
        if not stats_only:
            st.macs += 1
        return st

    monkeypatch.setattr(engine.Engine, "run", off_by_one)
    with pytest.raises(harness.Violation, match="disagree on Stats.macs"):
        harness.run_td(_plain("conv1x1"))


def test_an_imprecise_exception_is_caught(monkeypatch):
    import fastane

    monkeypatch.setattr(fastane, "tanh", lambda *a, **k: {}["boom"])
    case = {
        "kind": "api",
        "seed": 0,
        "spec": {"func": "tanh", "args": [{"shape": [3], "dtype": "float16", "fill": "zero"}], "kw": {}},
    }
    with pytest.raises(harness.Violation, match="unexpected exception KeyError"):
        harness.run_api(case)
    monkeypatch.setattr(fastane, "tanh", lambda *a, **k: np.zeros(3, np.int8))
    with pytest.raises(harness.Violation, match="returned ndarray int8"):
        harness.run_api(case)


def test_shards_merge_into_one_campaign():
    """Two ``--start`` ranges of one seed are one campaign's figures; overlaps are refused."""
    a = {
        "seed": 0,
        "start": 0,
        "next": 3,
        "seconds": 1.0,
        "kinds": {"td": 3},
        "failures": {},
        "outcomes": {"x": 3},
    }
    b = {
        "seed": 0,
        "start": 3,
        "next": 5,
        "seconds": 2.0,
        "kinds": {"td": 1, "api": 1},
        "failures": {},
        "outcomes": {"x": 2},
    }
    m = harness.merge([b, a])
    assert (m["cases"], m["kinds"], m["outcomes"], m["shards"]) == (
        5,
        {"td": 4, "api": 1},
        {"x": 5},
        [(0, 3), (3, 5)],
    )
    assert "Cases run: 5 (seed 0, cases 0..2, 3..4" in harness.summary(m)
    with pytest.raises(ValueError, match="overlap"):
        harness.merge([a, dict(b, start=2)])
    with pytest.raises(ValueError, match="seeds"):
        harness.merge([a, dict(b, seed=1)])
