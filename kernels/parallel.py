"""The parallel primitives every kernel shares: a work queue on Numba's threads.

A parallel kernel hands its tasks out through a shared counter (an int64 array of one
element, zero to start): each of the :func:`workers` ``prange`` iterations (one per
thread) loops on ``t = claim(counter)`` and does task ``t`` until ``t`` reaches the task
count; every task writes its own outputs only.

A work-queue kernel makes its counter with :func:`new_queue` (a ``np.zeros`` in a
parallel function is a parallel region of its own) and, where that costs no speed
(measured: ``dma.unfold_f16``, ``ne.readout_fast``; not the MAC's tile loops), keeps its
``prange`` body to one call of a plain function: Numba compiles a parallel region's
body again, with everything inlined into it, as a function of its own -- a second or
more of a cold compile for each.

Numba's own ``prange`` split is static; on a shared machine where one thread loses its
core for a while, the other threads then do the remaining tasks instead of waiting for
it.  Small work runs on the calling thread alone (:func:`threads_for`): a parallel region
costs a thread hand-off, and a worker thread waiting for a core can hold the whole call
up for a scheduler slice.

Numba's threading layer is TBB when it is installed (:data:`TBB`, the library this
module loads for Numba; docs/architecture.md says why TBB).

* ``new_queue() -> int64[1]`` (nopython): a work queue's counter, zero;
* ``claim(counter: int64[1]) -> int64`` (nopython): ``counter[0] += 1`` atomically,
  returns the value before;
* ``workers() -> int`` (Python): the worker count to pass to a work-queue kernel;
* ``threads_for(work: int, serial_below: int)`` (Python context manager): one thread
  inside when ``work < serial_below``;
* ``nan_max(m: float, v: float) -> float`` (nopython): ``max(m, v)`` where a NaN, once
  seen, stays;
* ``TBB: str | None``: the path of the TBB library loaded for Numba, None when none was.
"""

import contextlib
import ctypes
import os
import sys
import sysconfig

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["new_queue", "claim", "workers", "threads_for", "nan_max", "TBB"]


def _load_tbb() -> str | None:
    """Load the TBB runtime that ``pip install tbb`` put in the environment's ``lib``
    directory, where the dynamic linker does not look (numba/numba#6108), so that Numba's
    default search finds its first choice of threading layer: the path loaded, or None.

    Why TBB and not OpenMP: a TBB worker that runs out of work spins a while, yielding its
    core to any thread that wants it, then sleeps; a passive OpenMP worker sleeps at once
    and every parallel region then waits for it to wake (docs/architecture.md, "Numba's
    threads").  A user's ``NUMBA_THREADING_LAYER`` is kept; without the library, Numba
    falls back to OpenMP (passive, fastane/__init__.py)."""
    if os.environ.get("NUMBA_THREADING_LAYER", "default") not in ("default", "tbb"):
        return None
    name = {"linux": "libtbb.so.12", "darwin": "libtbb.12.dylib"}.get(sys.platform)
    if name is None:
        return None
    for scheme in (sysconfig.get_default_scheme(), f"{os.name}_user"):  # a venv or prefix; --user
        path = os.path.join(sysconfig.get_path("data", scheme), "lib", name)
        if os.path.exists(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            return path
    return None


#: the TBB runtime loaded for Numba's threading layer (None: not found, or not wanted)
TBB = _load_tbb()


@njit(cache=True)
def new_queue():
    """A work queue's counter: int64[1], zero (no task claimed yet)."""
    return np.zeros(1, np.int64)


@intrinsic
def claim(typingctx, counter):
    """``claim(counter)``: ``counter[0] += 1`` atomically (``counter`` an int64 array);
    returns the value before, an int64 (the task index this thread takes)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", ptr, context.get_constant(types.int64, 1), "monotonic")

    return types.int64(counter), codegen


def workers() -> int:
    """Worker count for the kernels' work queues: Numba's current thread count."""
    return numba.get_num_threads()


@contextlib.contextmanager
def threads_for(work: int, serial_below: int):
    """Within the block, Numba's kernels run on the calling thread alone when
    ``work < serial_below`` (the caller's measure of the work, e.g. multiply-adds);
    otherwise on Numba's current thread count.  The previous count is restored."""
    if work >= serial_below:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(old)


@njit
def nan_max(m, v):
    """``max(m, v)`` where a NaN, once seen, stays (``v > m`` is False for NaN either side).
    A plain call, which LLVM inlines (one select): not Numba's IR-level copy at each of the
    bounds' nine call sites."""
    return v if (v > m or v != v) else m
