"""Layout transposes between numpy's row-major operands and the ANE's (B, C, 1, S) layout.

A matmul lowered in the (B, C, 1, S) layout (``docs/compiler.md``) stores ``A`` of shape
(M, K) as K planes of M elements, its weights ``B^T`` as rows of K, and reads the output
back as N planes of M: three transposes per call.  fp16 values move as their bit
patterns (Numba has no float16), so every copy is exact.

How (:func:`transpose`):

* when both sides allow it (rows of a multiple of 4 elements, 8-byte aligned rows), the
  arrays are read as int64 words of four fp16 values and transposed in 4 x 4 blocks of
  fp16 with shifts and masks (:func:`transpose_4x4`): a quarter of the loads and
  stores of an element-wise copy, about 3x numpy's strided copy (0.15 ms for 512 x 512);
* otherwise an element-wise copy in cache-sized blocks (:func:`transpose_u16`);
* on the calling thread, below :data:`PARALLEL_MIN` elements: on a shared machine a
  parallel region waits for a descheduled worker thread for a whole scheduler slice
  (measured: median 0.24 ms, p90 12 ms for a 512 x 512 transpose on two threads, against
  0.15 ms / 0.2 ms on one).  Larger transposes hand out row tiles through a work queue
  on Numba's threads, when its threading layer is thread-safe (OpenMP or TBB; with
  ``workqueue``, which aborts on concurrent parallel launches, they stay serial).
"""

import threading

import numba
import numpy as np
from numba import njit, prange

from .parallel import claim, new_queue, workers

BLOCK = 32
#: below this many elements numpy's copy is cheaper than a kernel call
KERNEL_MIN = 1 << 10
#: from this many elements on, the transpose runs on Numba's threads (work queue)
PARALLEL_MIN = 1 << 24
#: rows (of the source) per task of the parallel transposes; a multiple of 4
ROWS_PER_TASK = 64
#: thread-safe Numba threading layers: others (workqueue) abort when two threads launch
#: parallel kernels at once, and the device runs its MAC kernels in whichever thread waits
_SAFE_LAYERS = ("omp", "tbb")
_safe = None
_lock = threading.Lock()

_LO16 = np.int64(0x0000FFFF0000FFFF)  # fp16 lanes 0 and 2 of a word
_LO32 = np.int64(0x00000000FFFFFFFF)  # fp16 lanes 0 and 1


@njit(inline="always")
def _block4(s, d, b, i, q):
    """The 4 x 4 fp16 block at source rows i..i+3, word q (columns 4q..4q+3): four int64
    words of s[b] -> four of d[b] (rows 4q..4q+3, word i // 4).  Lane 0 is the low 16 bits."""
    lo16 = _LO16
    hi16 = ~_LO16
    lo32 = _LO32
    hi32 = ~_LO32
    r0 = s[b, i, q]
    r1 = s[b, i + 1, q]
    r2 = s[b, i + 2, q]
    r3 = s[b, i + 3, q]
    t0 = (r0 & lo16) | ((r1 & lo16) << 16)  # r0.0 r1.0 r0.2 r1.2
    t1 = ((r0 >> 16) & lo16) | (r1 & hi16)  # r0.1 r1.1 r0.3 r1.3
    t2 = (r2 & lo16) | ((r3 & lo16) << 16)  # r2.0 r3.0 r2.2 r3.2
    t3 = ((r2 >> 16) & lo16) | (r3 & hi16)  # r2.1 r3.1 r2.3 r3.3
    c = i >> 2
    j = 4 * q
    d[b, j, c] = (t0 & lo32) | (t2 << 32)
    d[b, j + 1, c] = (t1 & lo32) | (t3 << 32)
    d[b, j + 2, c] = ((t0 >> 32) & lo32) | (t2 & hi32)
    d[b, j + 3, c] = ((t1 >> 32) & lo32) | (t3 & hi32)


@njit(inline="always")
def _rows4(s, d, b, i0, i1):
    """Source rows i0..i1 (multiples of 4) of batch b, in tiles of 16 rows x 8 words."""
    kq = s.shape[2]
    for r0 in range(i0, i1, 16):
        r1 = min(i1, r0 + 16)
        for q0 in range(0, kq, 8):
            for q in range(q0, min(kq, q0 + 8)):
                for i in range(r0, r1, 4):
                    _block4(s, d, b, i, q)


@njit(cache=True, boundscheck=False)
def transpose_4x4(s, d):
    """``d`` (B, K, M/4) int64 words <- transpose of ``s`` (B, M, K/4) int64 words, each word
    four fp16 patterns (M and K multiples of 4; any strides)."""
    for b in range(s.shape[0]):
        _rows4(s, d, b, 0, s.shape[1])


@njit(parallel=True, cache=True, boundscheck=False)
def transpose_4x4_parallel(s, d, workers):
    """:func:`transpose_4x4` with tasks of :data:`ROWS_PER_TASK` source rows handed out
    through a work queue (a thread that loses its core does fewer tasks)."""
    nb, m = s.shape[0], s.shape[1]
    per = (m + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    ntasks = nb * per
    counter = new_queue()
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            b = t // per
            i0 = (t % per) * ROWS_PER_TASK
            _rows4(s, d, b, i0, min(m, i0 + ROWS_PER_TASK))


@njit(inline="always")
def _tile_u16(src, dst, b, i0, i1, j0, j1):
    for j in range(j0, j1):
        for i in range(i0, i1):
            dst[b, j, i] = src[b, i, j]


@njit(cache=True, boundscheck=False)
def transpose_u16_serial(src, dst):
    """``dst[b, j, i] = src[b, i, j]`` for uint16 arrays, in BLOCK x BLOCK tiles, one thread."""
    nb, m, k = src.shape
    for b in range(nb):
        for i0 in range(0, m, BLOCK):
            for j0 in range(0, k, BLOCK):
                _tile_u16(src, dst, b, i0, min(m, i0 + BLOCK), j0, min(k, j0 + BLOCK))


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
            _tile_u16(src, dst, b, i0, min(m, i0 + BLOCK), j0, j1)


def _parallel_safe() -> bool:
    """Whether parallel kernels may run from any thread (the threading layer is safe)."""
    global _safe
    if _safe is None:
        with _lock:
            if _safe is None:
                try:
                    layer = numba.threading_layer()
                except ValueError:  # no parallel kernel has run yet: start one
                    z = np.zeros((1, 1, 1), np.uint16)
                    transpose_u16(z, z.copy())
                    layer = numba.threading_layer()
                _safe = layer in _SAFE_LAYERS
    return _safe


def _words(x: np.ndarray):
    """``x`` (B, R, W) uint16 as int64 words (B, R, W/4) (a view), or None when its rows
    are not whole, 8-byte aligned words."""
    if (
        x.shape[-1] % 4
        or x.strides[-1] != 2
        or x.ctypes.data % 8
        or any(s % 8 for s, n in zip(x.strides[:-1], x.shape[:-1]) if n > 1)
    ):
        return None
    return x.view(np.int64)


def transpose(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst[...] = swapaxes(src, -1, -2)`` for fp16 arrays of 2 or 3 dimensions."""
    if src.size < KERNEL_MIN or src.dtype != np.float16 or dst.dtype != np.float16:
        dst[...] = np.swapaxes(src, -1, -2)
        return
    s = src.view(np.uint16)
    d = dst.view(np.uint16)
    if s.ndim == 2:
        s, d = s[None], d[None]
    big = s.size >= PARALLEL_MIN and _parallel_safe()
    s64, d64 = _words(s), _words(d)
    if s64 is not None and d64 is not None and s.shape[1] % 4 == 0:
        if big:
            transpose_4x4_parallel(s64, d64, workers())
        else:
            transpose_4x4(s64, d64)
    elif big:
        transpose_u16(s, d)
    else:
        transpose_u16_serial(s, d)
