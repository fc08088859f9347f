"""The model-file fuzzing suite in CI: a bounded, seeded slice of the campaign, and the
harness's own checks (each failure class it must name is provoked once).

The slice: :data:`CI_CASES` cases of campaign :data:`CI_SEED` (``FASTANE_MODEL_FUZZ_CASES``
overrides), run as ``scripts/fuzz_models.sh`` runs them -- a separate process forking one
child per case, on one core -- stopped after :data:`CI_BUDGET` seconds
(``FASTANE_MODEL_FUZZ_BUDGET``) on a busy machine.
"""

import base64
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("coremltools")

import fuzzkit  # noqa: E402
import model_harness as mh  # noqa: E402

CI_SEED = 1
CI_CASES = int(os.environ.get("FASTANE_MODEL_FUZZ_CASES", 300))
CI_BUDGET = float(os.environ.get("FASTANE_MODEL_FUZZ_BUDGET", 60))
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return mh.seeds(tmp_path_factory.mktemp("model-fuzz") / "seeds")


def test_a_seeded_slice_of_the_model_campaign_finds_nothing(tmp_path):
    proc, state, detail = fuzzkit.run_slice(
        HERE / "model_harness.py", tmp_path, CI_BUDGET, "--cases", str(CI_CASES), "--seed", str(CI_SEED)
    )
    assert proc.returncode == 0 and not state["failures"], (state["failures"], detail, proc.stderr[-2000:])
    ran = state["next"]
    assert ran >= min(CI_CASES, 100), f"only {ran} cases ran in {CI_BUDGET} s"
    outcomes = state["outcomes"]
    # the mutations reach both sides: models accepted and run, and models refused
    assert any("run ok" in k for k in outcomes), outcomes
    assert any("run refused" in k for k in outcomes), outcomes
    assert {"onnx-cnn", "onnx-transformer", "mlprogram", "mlmodel"} <= set(state["kinds"]), state["kinds"]


def test_seeds_are_built_deterministically(tmp_path, seeds):
    mh.build_seeds(tmp_path)
    for name, s in seeds.items():
        for rel, data in s["files"].items():
            assert (tmp_path / name / rel).read_bytes() == data, (name, rel)


def test_cases_are_reproducible_and_generated(seeds):
    assert mh.make_case(5, 17) == mh.make_case(5, 17)
    assert mh.make_case(5, 17) != mh.make_case(5, 18)
    for i in range(300):
        case = mh.make_case(CI_SEED, i)
        assert case["mutations"] and case["argv"][0][0] == "run"


def _plain(name, seeds):
    s = seeds[name]
    return {
        "kind": name,
        "base": name,
        "model": s["model"],
        "files": {p: base64.b64encode(d).decode() for p, d in s["files"].items()},
        "links": {},
        "fifos": [],
        "dirs": [],
        "mutations": [],
        "argv": [["run", "--random", "--report", *s["shape"]], ["roofline"]],
    }


@pytest.mark.parametrize("name", ["onnx-cnn", "onnx-transformer", "mlprogram", "mlmodel"])
def test_every_seed_runs(name, seeds):
    assert mh.run_isolated(_plain(name, seeds), timeout=60) == ("ok", "run --report ok / roofline ok")


def test_a_refused_model_is_a_clean_error(seeds):
    case = _plain("onnx-cnn", seeds)
    case["files"]["model.onnx"] = base64.b64encode(b"not a model").decode()
    assert mh.run_isolated(case, timeout=60) == ("ok", "run --report refused / roofline refused")


def _failing(monkeypatch, seeds, what):
    """A seed case whose run goes wrong as ``what`` says, in the child."""
    from fastane import cli

    main = cli.main

    def bad(argv):
        fuzzkit.misbehave(what)
        if what == "traceback":
            raise KeyError("not a precise error")
        if what == "read-outside":
            open("/etc/hostname", "rb").close()
        if what == "multi-line":
            print("fastane run: error: one\nand another line", file=sys.stderr)
            return 2
        if what == "exit-1":
            return 1
        return main(argv)

    monkeypatch.setattr(cli, "main", bad)
    return _plain("onnx-cnn", seeds)


@pytest.mark.parametrize(
    "what,status,words",
    [
        ("crash", "crash", "SIGSEGV"),
        ("hang", "hang", "in misbehave"),
        ("memory", "memory", "MemoryError"),
        ("traceback", "traceback", "KeyError: 'not a precise error' at"),
        ("read-outside", "read-outside", "/etc/hostname"),
        ("multi-line", "traceback", "exit status 2, 2 error lines"),
        ("exit-1", "traceback", "exit status 1"),
        ("ok", "ok", "run --report ok / roofline ok"),
    ],
)
def test_the_child_names_each_failure_class(monkeypatch, seeds, what, status, words):
    got, detail = mh.run_isolated(_failing(monkeypatch, seeds, what), timeout=5)
    assert got == status and words in detail, detail


def test_a_link_out_of_the_package_is_named(seeds):
    """The package game of a weights/ folder linked to a folder outside the package is
    refused (a clean error), or it is named a read outside."""
    case = _plain("mlprogram", seeds)
    mh._place(case, f"{mh.PACKAGE}/{mh.WEIGHTS}", "links", "@outside")
    got, detail = mh.run_isolated(case, timeout=60)
    assert (got, "outside/weight.bin" in detail) == ("read-outside", True) or (
        got == "ok" and "run --report refused" in detail
    ), detail
