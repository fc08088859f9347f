"""``fastane warm`` (fastane/warm.py): its manifest's types round-trip, its parts balance,
a stale entry is reported and skipped, and after a warm with an empty cache the demo
compiles nothing (the manifest covers it; scripts/warm_manifest.py rewrites it)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import types

from fastane import warm

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "t",
    [
        types.int64,
        types.float32,
        types.boolean,
        types.Array(types.uint16, 3, "C"),
        types.Array(types.float64, 1, "A", readonly=True),
        types.Array(types.int8, 2, "F"),
        types.UniTuple(types.int64, 10),
        types.Tuple([types.int64, types.float64, types.Array(types.int32, 1, "C")]),
    ],
)
def test_types_round_trip_through_json(t):
    assert warm.decode_type(json.loads(json.dumps(warm.encode_type(t)))) == t


def test_unrecordable_types_and_values_are_refused():
    with pytest.raises(ValueError, match="cannot record"):
        warm.encode_type(types.none)
    for bad in (["array", "float64", 1], ["matrix"], 3):
        with pytest.raises(ValueError, match="not a recorded argument type"):
            warm.decode_type(bad)


def test_partition_balances_modules_by_recorded_seconds():
    """A module's kernels stay in one part (they share callees); the parts balance."""
    mods = ["a", "b", "c", "c", "d", "e"]
    entries = [{"module": m, "seconds": s, "i": i} for i, (m, s) in enumerate(zip(mods, [5, 4, 3, 3, 2, 1]))]
    parts = warm.partition(entries, 2)
    assert sorted(e["i"] for p in parts for e in p) == list(range(6))
    assert sorted(sum(e["seconds"] for e in p) for p in parts) == [9, 9]
    assert all(
        len({e["module"] for e in p} & {e["module"] for e in q}) == 0
        for p in parts
        for q in parts
        if p is not q
    )
    assert len(warm.partition(entries[:1], 4)) == 1  # no empty parts


def test_the_manifest_names_kernels_that_exist():
    entries = warm.load_manifest()
    assert len(entries) >= 10
    for e in entries:
        assert hasattr(warm.kernel_of(e), "compile"), e
        [warm.decode_type(a) for a in e["args"]]


def test_a_manifest_that_is_not_one_is_refused(tmp_path, capsys):
    entry = '{"module": "m", "name": "k", "args": [], "seconds": %s}'
    for text in (
        "{not json",
        '{"kernels": 3}',
        '{"kernels": [{"module": "m"}]}',
        "[]",
        '{"kernels": [%s]}' % (entry % "null"),
    ):
        path = tmp_path / "m.json"
        path.write_text(text)
        with pytest.raises(ValueError):
            warm.load_manifest(path)
    assert warm.run(_args(manifest=str(tmp_path / "missing.json"))) == 2
    assert "cannot read the manifest" in capsys.readouterr().err
    assert warm.run(_args(jobs=0)) == 2
    assert "at least 1" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    warm.add_arguments(parser)
    with pytest.raises(SystemExit):  # the command line refuses it before
        parser.parse_args(["--jobs", "0"])


def _args(**kw):
    p = argparse.ArgumentParser()
    warm.add_arguments(p)
    args = p.parse_args([])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_a_stale_entry_is_reported_and_the_rest_compiled():
    good = {
        "module": "fastane.kernels.parallel",
        "name": "nan_max",
        "args": ["float64", "float64"],
        "seconds": 0,
    }
    gone = {"module": "fastane.kernels.parallel", "name": "no_such_kernel", "args": [], "seconds": 0}
    wrong = {
        "module": "fastane.kernels.parallel",
        "name": "nan_max",
        "args": [["array", "int64", 1, "C", False]],
    }
    res = warm.compile_entries([good, gone, {**wrong, "seconds": 0}])
    assert res["compiled"] == 1
    assert [k for k, _ in res["failed"]] == ["fastane.kernels.parallel.no_such_kernel"] * 1 + [
        "fastane.kernels.parallel.nan_max"
    ]


def test_after_a_warm_the_demo_compiles_nothing(tmp_path):
    """The real thing, with an empty Numba cache of its own: ``fastane warm`` on two
    processes, then ``fastane demo`` under scripts/compile_profile.py.  A kernel the demo
    compiles anyway is one the manifest misses: run scripts/warm_manifest.py."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "fastane.cli", "warm", "--jobs", "2"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "kernels compiled or loaded" in proc.stdout
    out = tmp_path / "compiles.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compile_profile.py"), "--json", str(out), "demo"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(out.read_text()) if "function" in r]
    missed = [r["function"] for r in rows if r["function"].startswith("fastane.")]
    assert not missed, f"compiled after a warm (run scripts/warm_manifest.py): {missed}"
