"""fastane.evaluate on Dask: an embedded LocalCluster of two worker processes gives the
single-process results byte for byte, and a worker killed in the middle of a task loses
nothing (its inputs run again and are counted)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("distributed", reason="scale-out needs dask.distributed (the eval extra)")
pytest.importorskip("onnx", reason="the evaluation tests build their model with onnx (the onnx extra)")
pytest.importorskip("onnxruntime", reason="the ONNX reference is onnxruntime (the onnx extra)")

import fastane
from tests.helpers.evaluate import DyingItems, labelled_job

N = 24


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    model, _, x, labels = labelled_job(d, N)
    one = fastane.evaluate(model, d / "data.npz", labels, batch=4, output=d / "one.csv", progress=False)
    return d, model, x, labels, one


def test_two_workers_give_the_single_process_results_byte_for_byte(job):
    d, model, _, labels, one = job
    two = fastane.evaluate(
        model, d / "data.npz", labels, batch=4, workers=2, output=d / "two.csv", progress=False
    )
    assert two.run["workers"] == 2 and two.run["retried_inputs"] == 0
    assert (d / "two.csv").read_bytes() == (d / "one.csv").read_bytes()
    assert json.dumps(two.summary) == json.dumps(one.summary)


def test_a_worker_that_dies_loses_nothing(job, tmp_path):
    d, model, x, labels, one = job
    marker = tmp_path / "died"
    data = DyingItems(list(x), die_at=9, marker=str(marker))
    ev = fastane.evaluate(model, data, labels, batch=4, workers=2, output=tmp_path / "r.csv", progress=False)
    assert marker.exists()  # a worker died in the middle of the task of inputs 8-11
    # the task of inputs 8-11 ran again, and any task whose result the dead worker held
    assert ev.run["retried_inputs"] >= 4 and ev.run["retried_inputs"] % 4 == 0
    assert [r["index"] for r in ev.rows] == list(range(N))
    assert json.dumps({k: v for k, v in ev.summary.items() if k not in ("model", "data")}) == json.dumps(
        {k: v for k, v in one.summary.items() if k not in ("model", "data")}
    )
    assert (tmp_path / "r.csv").read_bytes() == (d / "one.csv").read_bytes()


def test_a_scheduler_out_of_reach_is_one_error(job, monkeypatch):
    from fastane.errors import ModelError
    from fastane.model.evaluate import cluster

    d, model, _, _, _ = job
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", "1s")
    with pytest.raises(ModelError, match="cannot reach the Dask scheduler 'tcp://127.0.0.1:1'"):
        fastane.evaluate(model, d / "data.npz", scheduler="tcp://127.0.0.1:1", progress=False)


def test_the_default_moves_to_a_cluster_when_the_first_task_says_so(job, monkeypatch):
    from fastane.model import evaluate as ev_module

    d, model, _, labels, one = job
    here = fastane.evaluate(model, d / "data.npz", labels, batch=4, progress=False)
    assert here.run["workers"] == 1  # 24 small inputs: far below AUTO_CLUSTER_SECONDS
    if ev_module.cores() < 2:
        pytest.skip("one core: the default never starts a cluster")
    monkeypatch.setattr(ev_module, "AUTO_CLUSTER_SECONDS", 0.0)
    there = fastane.evaluate(model, d / "data.npz", labels, batch=4, progress=False)
    assert there.run["workers"] == ev_module.cores()
    assert there.rows == one.rows and json.dumps(there.summary) == json.dumps(here.summary)
