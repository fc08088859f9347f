"""An evaluation's tasks on Dask (``dask.distributed``, the ``eval`` extra).

With no scheduler, an embedded ``LocalCluster`` of ``workers`` processes, one thread each,
each with one thread for Numba and BLAS too (the cores are the workers'); with a scheduler's
address, the cluster behind it (its workers should be started the same way: docs/eval.md).

The dataset (and the model, when it is an object rather than a path) is scattered to every
worker once; each task carries only its input indices and their labels.  A worker's tasks
log their start on a topic of this run's own (:func:`.runner.run_batch`); a task that starts
twice ran again because a worker died, and its inputs are counted as retried: the inputs the
dead worker was running, and those of tasks it had finished whose results it still held
(Dask computes a lost result again; the driver keeps the rows of a task once).  When a
worker that dies held the only copy of the scattered dataset (or model), Dask cancels the
tasks that read it: the driver scatters them again and submits those tasks again, under new
keys, their inputs counted as retried (at most :data:`MAX_RESUBMITS` times a task).  A task
whose workers died ``distributed.scheduler.allowed-failures`` times (3 by default) stops the
run with a :class:`~fastane.errors.ModelError`.
"""

from __future__ import annotations

import logging
import uuid

from ...errors import ModelError, quote
from .runner import labels_of, run_batch

__all__ = ["run_on_dask", "WORKER_ENV", "NO_TRIM"]

#: the environment of an embedded cluster's workers: one thread each for Numba, OpenMP and
#: BLAS (one worker process per core)
WORKER_ENV = {
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
#: Dask's nannies start workers with glibc's ``MALLOC_TRIM_THRESHOLD_`` at 64 KiB, which turns
#: off glibc's adaptive mmap threshold: every array above 128 KiB is then mapped and unmapped
#: anew, and a ResNet-style evaluation ran at 19 inputs/s per worker instead of 50 (2026-12-06,
#: bench/eval_scaling.py at 64x64).  The embedded cluster's workers start without it.
NO_TRIM = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


#: times a task is submitted again when the data scattered to the workers died with one (Dask
#: cancels the tasks that read it: a worker that held the only copy of the dataset)
MAX_RESUBMITS = 3
#: how long the driver tries to reach a scheduler it is given
CONNECT_TIMEOUT = "20s"


def _connect(distributed, scheduler: str):
    """A client of the scheduler at ``scheduler``, or a ModelError within
    :data:`CONNECT_TIMEOUT` and a few seconds: the connection is made in a thread of its
    own, so that an address that accepts and never answers (not a Dask scheduler) cannot
    hang the run, and whatever it fails with (an address that sends garbage can make Dask
    try to allocate what it claims) is one error."""
    import threading

    got: dict = {}

    def connect():
        try:
            got["client"] = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT)
        except BaseException as exc:  # noqa: B036 (reported to the caller below)
            got["error"] = exc

    t = threading.Thread(target=connect, name="fastane-eval-connect", daemon=True)
    t.start()
    t.join(_seconds(CONNECT_TIMEOUT) + 5)
    if "client" in got:
        return got["client"]
    why = got.get("error")
    detail = f"{type(why).__name__}: {str(why).splitlines()[0] if str(why) else ''}" if why else "no answer"
    raise ModelError(f"cannot reach the Dask scheduler {quote(str(scheduler))}: {detail}")


def _seconds(text: str) -> float:
    from dask.utils import parse_timedelta

    return float(parse_timedelta(text))


def _client(workers: int, scheduler):
    try:
        import distributed
    except ImportError:
        raise ModelError(
            "more than one worker, or a scheduler, needs Dask: pip install 'fastane[eval]'"
        ) from None
    if scheduler is not None:
        return _connect(distributed, scheduler), None
    import dask

    with dask.config.set(NO_TRIM):
        cluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # any free port: its HTTP server starts anyway
            silence_logs=logging.ERROR,
            env=WORKER_ENV,
        )
    return distributed.Client(cluster), cluster


def run_on_dask(job, dataset, batches: list, labels, model, workers: int, scheduler, sink) -> int:
    """Run ``batches`` (lists of input indices) as tasks; ``sink(rows)`` receives each task's
    rows as it finishes.  Returns the number of inputs run again after a worker died."""
    from concurrent.futures import CancelledError

    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    client, cluster = _client(workers, scheduler)
    topic = f"fastane-eval-{uuid.uuid4().hex}"
    futures: list = []
    scattered: list = []

    def scatter():
        scattered[:] = [client.scatter(dataset, broadcast=True, hash=False)]
        scattered.append(client.scatter(model, broadcast=True, hash=False) if model is not None else None)

    def submit(k: int, key: str):
        b = batches[k]
        fut = client.submit(
            run_batch, job, scattered[0], b, labels_of(labels, b), scattered[1], topic, key=key, pure=False
        )
        futures.append(fut)
        return fut

    try:
        scatter()
        batch_of = {submit(k, f"{topic}-{k}").key: k for k in range(len(batches))}
        again: dict = {}  # batch -> times it was submitted again
        done = as_completed(list(futures), with_results=True)
        try:
            for fut, rows in done:
                if isinstance(rows, CancelledError):  # its scattered inputs died with a worker
                    k = batch_of[fut.key]
                    again[k] = again.get(k, 0) + 1
                    if again[k] > MAX_RESUBMITS:
                        raise ModelError(
                            f"the data scattered to the workers was lost {MAX_RESUBMITS + 1} times "
                            f"(the task of inputs {batches[k][0]}-{batches[k][-1]})"
                        )
                    if any(f is not None and f.status != "finished" for f in scattered):
                        scatter()
                    new = submit(k, f"{topic}-{k}-again{again[k]}")
                    batch_of[new.key] = k
                    done.add(new)
                    continue
                sink(rows)
                fut.release()
        except KilledWorker as exc:
            raise ModelError(f"the workers running a task died too often: {exc}") from None
        starts: dict = {}
        for _, msg in client.get_events(topic):
            starts[msg["key"]] = starts.get(msg["key"], 0) + 1
        sizes = {key: len(batches[k]) for key, k in batch_of.items()}
        rerun = sum(sizes.get(key, 0) * (c - 1) for key, c in starts.items() if c > 1)
        return rerun + sum(len(batches[k]) * n for k, n in again.items())
    finally:
        for f in futures:
            f.cancel()
        client.close()
        if cluster is not None:
            cluster.close()
