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


class _Future:
    def __init__(self, key, value=None):
        self.key, self.value, self.status = key, value, "finished"

    def release(self):
        pass

    def cancel(self):
        pass


class _Client:
    """Dask's client as run_on_dask uses it: a task's result is its batch, except that the
    first submission of batch 1 is cancelled, as Dask cancels the tasks whose scattered
    inputs died with a worker (the dataset lost with it)."""

    def __init__(self):
        self.scattered, self.keys = [], []

    def scatter(self, value, **_):
        fut = _Future(f"scatter-{len(self.scattered)}", value)
        self.scattered.append(fut)
        return fut

    def submit(self, fn, job, data, batch, labels, obj, topic, key, pure):
        self.keys.append(key)
        if batch == [4, 5, 6, 7] and not key.endswith("again1"):
            data.status = "lost"  # the worker that held the dataset died
            return _Future(key, "cancelled")
        return _Future(key, [("row", i, data.key) for i in batch])

    def get_events(self, topic):
        return []

    def close(self):
        pass


class _AsCompleted:
    def __init__(self, futures, with_results):
        self.queue = list(futures)

    def add(self, fut):
        self.queue.append(fut)

    def __iter__(self):
        from concurrent.futures import CancelledError

        while self.queue:
            fut = self.queue.pop(0)
            yield fut, CancelledError(fut.key) if fut.value == "cancelled" else fut.value


def test_a_task_whose_scattered_data_died_runs_again(monkeypatch):
    import distributed

    from fastane.model.evaluate import cluster

    client = _Client()
    monkeypatch.setattr(cluster, "_client", lambda workers, scheduler: (client, None))
    monkeypatch.setattr(distributed, "as_completed", _AsCompleted)
    monkeypatch.setattr(cluster, "labels_of", lambda labels, b: None)
    rows = []
    batches = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    retried = cluster.run_on_dask(None, "dataset", batches, None, None, 2, None, rows.extend)
    # every input once; batch 1 submitted again under a key of its own, after the dataset was
    # scattered again (its first copy lost), and counted as retried
    assert sorted(i for _, i, _ in rows) == list(range(10))
    assert {d for _, i, d in rows if i in (4, 5, 6, 7)} == {"scatter-1"}
    assert retried == 4 and client.keys[-1].endswith("-1-again1")


def test_a_task_whose_scattered_data_dies_every_time_is_one_error(monkeypatch):
    import distributed

    from fastane.errors import ModelError
    from fastane.model.evaluate import cluster

    client = _Client()
    monkeypatch.setattr(client, "submit", lambda *a, key, **k: _Future(key, "cancelled"))
    monkeypatch.setattr(cluster, "_client", lambda workers, scheduler: (client, None))
    monkeypatch.setattr(distributed, "as_completed", _AsCompleted)
    monkeypatch.setattr(cluster, "labels_of", lambda labels, b: None)
    with pytest.raises(ModelError, match=r"lost 4 times \(the task of inputs 0-3\)"):
        cluster.run_on_dask(None, "dataset", [[0, 1, 2, 3]], None, None, 2, None, list)
