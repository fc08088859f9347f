"""The kernels' shared parallel primitives (fastane.kernels.parallel): the work queue's
atomic claim hands every task out exactly once across threads, threads_for runs small
work on one thread and restores the count, nan_max keeps a NaN once seen."""

import ast
import importlib.metadata
import os
from pathlib import Path

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


def test_numba_runs_on_tbb_when_it_is_installed():
    """pip puts TBB where the dynamic linker does not look; kernels.parallel loads it, so
    that Numba's default search takes it (docs/architecture.md, "Numba's threads")."""
    try:
        importlib.metadata.distribution("tbb")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tbb is not installed (fastane depends on it on Linux x86-64 only)")
    if os.environ.get("NUMBA_THREADING_LAYER", "default") not in ("default", "tbb"):
        pytest.skip("NUMBA_THREADING_LAYER chooses another layer")
    assert parallel.TBB is not None and os.path.exists(parallel.TBB)
    _claim_all(3, 2, np.zeros(3, np.int64), np.zeros(3, np.int64))  # a parallel kernel has run
    assert numba.threading_layer() == "tbb"


# ---------------------------------------------------------------- one region a kernel
_KERNELS = Path(parallel.__file__).parent
#: numpy calls Numba turns into a parallel loop of their own inside a parallel function
_PARFOR_CALLS = {"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "linspace"}


def _parallel_kernels():
    for path in sorted(_KERNELS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call)
                and any(k.arg == "parallel" and getattr(k.value, "value", False) is True for k in d.keywords)
                for d in node.decorator_list
            ):
                yield f"{path.name}:{node.name}", node


def _is_prange(node) -> bool:
    return (
        isinstance(node, ast.For)
        and isinstance(node.iter, ast.Call)
        and getattr(node.iter.func, "id", "") == "prange"
    )


def test_every_parallel_kernel_is_one_parallel_region():
    """Each ``parallel=True`` kernel has one ``prange`` loop and, outside it, nothing Numba
    makes a parallel loop of (``np.zeros`` and the like, a slice assignment): every extra
    loop is a region of its own, and every region wakes the sleeping worker threads (tens
    of microseconds on a virtual machine, docs/architecture.md)."""
    kernels = list(_parallel_kernels())
    assert len(kernels) >= 8  # the parse found them
    for name, fn in kernels:
        pranges = [n for n in ast.walk(fn) if _is_prange(n)]
        assert len(pranges) == 1, f"{name}: {len(pranges)} prange loops"
        inside = {id(n) for n in ast.walk(pranges[0])}
        for n in ast.walk(fn):
            if id(n) in inside:
                continue
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _PARFOR_CALLS:
                assert getattr(n.func.value, "id", "") != "np", f"{name}: np.{n.func.attr} outside its prange"
            targets = (
                n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
            )
            for t in targets:
                assert not (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Slice)), (
                    f"{name}: a slice assignment outside its prange (line {n.lineno})"
                )


@njit
def _scaled_sum(x, scale, out):
    """A plain function to call through its address: writes ``out[0]`` and returns a value."""
    s = 0.0
    for v in x.ravel():
        s += v
    out[0] = s * scale
    return s


@njit(parallel=True)
def _through_entry(entry, xs, scale, out, ret):
    for i in prange(xs.shape[0]):
        ret[i] = parallel.call_native(_scaled_sum, entry, (xs[i], scale, out[i]))


def test_call_native_calls_the_specialization_native_entry_gives():
    """A function called through its address from a parallel region gives what a direct
    call gives; native_entry tells apart the specializations (dtype, layout, readonly) a
    call of other types needs, and keeps one address per specialization."""
    xs = np.arange(12.0).reshape(3, 4)
    out = np.zeros((3, 1))
    ret = np.zeros(3)
    entry = parallel.native_entry(_scaled_sum, xs[0], 2.0, out[0])
    assert parallel.native_entry(_scaled_sum, xs[1], 3.0, out[1]) == entry  # the same types
    _through_entry(entry, xs, 2.0, out, ret)
    assert np.array_equal(ret, xs.sum(axis=1)) and np.array_equal(out[:, 0], 2.0 * xs.sum(axis=1))
    ro = xs.copy()
    ro.flags.writeable = False
    others = [
        parallel.native_entry(_scaled_sum, xs[0].astype(np.float32), 2.0, out[0]),
        parallel.native_entry(_scaled_sum, ro[0], 2.0, out[0]),
        parallel.native_entry(_scaled_sum, xs[:, 0], 2.0, out[0]),  # strided: layout "A"
        parallel.native_entry(_scaled_sum, xs[0], np.float32(2.0), out[0]),
    ]
    assert len({entry, *others}) == 5
    assert len(_scaled_sum.overloads) >= 5
    _scaled_sum.recompile()  # the kept address stays valid (Numba never unmaps code)
    again = parallel.native_entry(_scaled_sum, xs[0], 2.0, out[0])
    ret[:] = 0
    _through_entry(again, xs, 2.0, out, ret)
    assert np.array_equal(ret, xs.sum(axis=1))


def test_the_type_key_tells_apart_what_numba_types_apart():
    """native_entry's cheap key: values of different Numba types never share a key (a
    shared key would hand one specialization's address to another's arguments)."""
    import collections

    pair = collections.namedtuple("pair", "a b")
    rec = np.zeros(1, dtype=[("x", "i4")])[0], np.zeros(1, dtype=[("x", "f8")])[0]
    groups = [
        (np.zeros(3), np.zeros(3, np.float32), np.zeros((3, 1)), np.zeros((2, 3))[:, 0], np.zeros(3).view()),
        ((1, 2), pair(1, 2), (1.0, 2), (np.int32(1), 2)),
        (1, 2**63, 1.0, True, np.int32(1), np.float32(1.0), np.bool_(True)),
        (np.datetime64(1, "s"), np.datetime64(1, "ms"), *rec, [1], [1.0]),
    ]
    ro = np.zeros(3)
    ro.flags.writeable = False
    groups[0] = (*groups[0][:4], ro)
    for values in groups:
        keys = [parallel._type_key(v) for v in values]
        types_ = [numba.typeof(v) for v in values]
        for i in range(len(values)):
            for j in range(i):
                if types_[i] != types_[j]:
                    assert keys[i] != keys[j], (values[i], values[j])
