"""Tile DMA data movement: strided gathers and scatters over the unified-memory bytes.

Pure functions on plain arrays; the front end (``fastane.device.tile_dma``) has already
checked that every byte they touch lies inside the task's BAR region (``extent``
below), so these only build views of ``mem[offset:offset + extent]`` -- numpy re-checks
the strides against that window, so an out-of-range index cannot reach other memory.
The copies are numpy's strided loops (already memory-bound); no Numba is needed here.
"""
import numpy as np


def extent(shape, strides, itemsize, burst=64):
    """Bytes from the first element to the end of the last row's last 64-byte burst."""
    *outer, w = shape
    last_row = sum((n - 1) * s for n, s in zip(outer, strides[:-1]))
    return last_row + -(-w * itemsize // burst) * burst


def gather(mem, offset, shape, strides, dtype):
    """The tensor of ``shape`` at byte ``offset`` of ``mem`` (byte ``strides``), as float64.

    ``strides[-1]`` is the element size (rows are contiguous).  Integer formats and fp16
    convert exactly.
    """
    dtype = np.dtype(dtype)
    window = mem[offset:offset + extent(shape, strides, dtype.itemsize)]
    view = np.ndarray(shape, dtype, buffer=window, strides=strides)
    return view.astype(np.float64)


def scatter(mem, offset, values, strides, dtype, zero_tail=True, burst=64):
    """Write ``values`` (exactly representable in ``dtype``) at ``offset`` with ``strides``.

    With ``zero_tail`` the bytes from the end of each row to the end of its last 64-byte
    burst are zeroed (the DMA writes whole bursts).
    """
    dtype = np.dtype(dtype)
    shape = values.shape
    size = extent(shape, strides, dtype.itemsize, burst)
    window = mem[offset:offset + size]
    view = np.ndarray(shape, dtype, buffer=window, strides=strides)
    view[...] = values
    row = shape[-1] * dtype.itemsize
    tail = -(-row // burst) * burst - row
    if zero_tail and tail:
        tails = np.ndarray(shape[:-1] + (tail,), np.uint8, buffer=window, offset=row,
                           strides=strides[:-1] + (1,))
        tails[...] = 0
