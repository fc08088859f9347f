"""Layout transposes between numpy's row-major operands and the ANE's (B, C, 1, S) layout.

A matmul lowered in the (B, C, 1, S) layout (``docs/compiler.md``) stores ``A`` of shape
(M, K) as K planes of M elements, its weights ``B^T`` as rows of K, and reads the output
back as N planes of M: three transposes per call.  numpy's strided copy does them on one
core; :func:`transpose` cuts the work in cache-sized blocks spread over Numba's threads.
fp16 values move as their uint16 patterns (Numba has no float16), so every copy is exact.
"""
import threading

import numba
import numpy as np
from numba import njit, prange

BLOCK = 32
#: below this many elements numpy's copy is cheaper than starting the threads
PARALLEL_MIN = 1 << 15
#: thread-safe Numba threading layers: others (workqueue) abort when two threads launch
#: parallel kernels at once, and the device runs its MAC kernels in whichever thread waits
_SAFE_LAYERS = ("omp", "tbb")
_safe = None
_lock = threading.Lock()


@njit(parallel=True, cache=True, boundscheck=False)
def transpose_u16(src, dst):
    """``dst[b, j, i] = src[b, i, j]`` for uint16 arrays ``src`` (B, M, K), ``dst`` (B, K, M),
    any strides."""
    nb, m, k = src.shape
    kb = (k + BLOCK - 1) // BLOCK
    for t in prange(nb * kb):
        b = t // kb
        j0 = (t % kb) * BLOCK
        j1 = min(k, j0 + BLOCK)
        for i0 in range(0, m, BLOCK):
            i1 = min(m, i0 + BLOCK)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    dst[b, j, i] = src[b, i, j]


def _parallel_safe() -> bool:
    """Whether parallel kernels may run from any thread (the threading layer is safe)."""
    global _safe
    if _safe is None:
        with _lock:
            if _safe is None:
                try:
                    layer = numba.threading_layer()
                except ValueError:          # no parallel kernel has run yet: start one
                    z = np.zeros((1, 1, 1), np.uint16)
                    transpose_u16(z, z.copy())
                    layer = numba.threading_layer()
                _safe = layer in _SAFE_LAYERS
    return _safe


def transpose(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst[...] = swapaxes(src, -1, -2)`` for fp16 arrays of 2 or 3 dimensions."""
    if (src.size < PARALLEL_MIN or src.dtype != np.float16 or dst.dtype != np.float16
            or not _parallel_safe()):
        dst[...] = np.swapaxes(src, -1, -2)
        return
    s = src.view(np.uint16)
    d = dst.view(np.uint16)
    if s.ndim == 2:
        s, d = s[None], d[None]
    transpose_u16(s, d)
