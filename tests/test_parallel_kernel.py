"""The kernels' shared parallel primitives (fastane.kernels.parallel): the work queue's
atomic claim hands every task out exactly once across threads, threads_for runs small
work on one thread and restores the count, nan_max keeps a NaN once seen."""

import numba
import numpy as np
import pytest
from numba import njit, prange

from fastane.kernels import parallel


@njit(parallel=True)
def _claim_all(ntasks, workers, owner, seen):
    counter = np.zeros(1, np.int64)
    for w in prange(workers):
        while True:
            t = parallel.claim(counter)
            if t >= ntasks:
                break
            owner[t] = w
            seen[t] += 1


@pytest.mark.parametrize("ntasks", [0, 1, 7, 10000])
def test_claim_hands_out_every_task_once(ntasks):
    workers = max(2, parallel.workers())
    owner = np.full(ntasks, -1, np.int64)
    seen = np.zeros(ntasks, np.int64)
    _claim_all(ntasks, workers, owner, seen)
    assert np.all(seen == 1) and np.all((owner >= 0) & (owner < workers))


def test_threads_for_serial_below_the_threshold():
    before = numba.get_num_threads()
    with parallel.threads_for(10, 11):
        assert numba.get_num_threads() == 1 and parallel.workers() == 1
    assert numba.get_num_threads() == before
    with parallel.threads_for(11, 11):
        assert numba.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with parallel.threads_for(0, 1):
            raise RuntimeError("restored on the way out")
    assert numba.get_num_threads() == before


def test_nan_max_keeps_nan():
    @njit
    def run(x):
        m = 0.0
        for v in x:
            m = parallel.nan_max(m, v)
        return m

    assert run(np.array([1.0, 3.0, 2.0])) == 3.0
    assert np.isnan(run(np.array([1.0, np.nan, 5.0])))
    assert np.isnan(run(np.array([np.nan, 1.0])))
    assert run(np.array([np.inf, 1.0])) == np.inf
    assert run(np.zeros(0)) == 0.0
