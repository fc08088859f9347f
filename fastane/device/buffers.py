"""Host buffers for the ANE: aligned, padded, pooled, viewed and copied safely.

The rules (SPEC section 7) follow FluidAudio's ANE memory optimizer, with its two bugs
fixed:

* a :class:`Buffer` is 64-byte aligned; its innermost dimension is padded to a multiple
  of 16 *elements*; its storage is rounded up to a multiple of 64 bytes (at least 64);
* :class:`BufferPool` hands out the same buffer for the same key, shape and dtype and
  replaces it otherwise (thread-safe, with hit/miss/byte counters);
* :func:`zero_copy_view` checks the view against the real backing store *and strides*
  (FluidAudio counts logical elements, so its views can read past the data);
* :func:`copy_into` is stride-aware (a linear copy through a padded array scrambles it).

:class:`AneLayout` is the layout the ANE's tile DMA reads and writes in DRAM
(row stride = round_up(W * bytes, 64), plane stride = round_up(row * H, 64)), with
:meth:`AneLayout.tile` / :meth:`AneLayout.untile` converting from and to plain NCHW.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from ..m1 import ALIGN, DTYPES, round_up
from .memory import aligned_bytes

#: the innermost dimension is padded to a multiple of this many elements
PAD_ELEMENTS = 16

#: ANE element formats (InFmt/OutFmt/KernelFmt/MemFmt codes) -> numpy dtypes (fastane.m1)
FORMATS = DTYPES


def padded_shape(shape) -> tuple:
    """``shape`` with its innermost dimension rounded up to a multiple of 16 elements."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    if not shape:
        return shape
    return shape[:-1] + (round_up(shape[-1], PAD_ELEMENTS),)


def padded_strides(shape, dtype) -> tuple:
    """Row-major byte strides of ``shape`` laid out with a padded innermost dimension."""
    itemsize = np.dtype(dtype).itemsize
    strides, step = [], itemsize
    for extent in reversed(padded_shape(shape)):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def storage_nbytes(shape, dtype) -> int:
    """Bytes of storage for ``shape``: padded, rounded up to 64, at least 64."""
    count = math.prod(padded_shape(shape))
    return max(ALIGN, round_up(count * np.dtype(dtype).itemsize, ALIGN))


class Buffer:
    """A typed, padded array over an aligned byte store.

    ``storage`` is the byte range the buffer owns (its bounds are the bounds of every
    view made from it); ``array`` is the logical numpy view (``shape``/``dtype``,
    padded strides).  A Buffer works wherever numpy takes an array (``__array__``).
    """

    __slots__ = ("storage", "array", "__weakref__")

    def __init__(self, storage: np.ndarray, shape, dtype, strides=None):
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        strides = padded_strides(shape, dtype) if strides is None else tuple(strides)
        self.storage = storage
        # np.ndarray re-checks that shape and strides stay inside `storage`
        self.array = np.ndarray(shape, dtype, buffer=storage, strides=strides)

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)
    strides = property(lambda self: self.array.strides)
    ndim = property(lambda self: self.array.ndim)
    size = property(lambda self: self.array.size)
    padded_shape = property(lambda self: padded_shape(self.array.shape))
    #: bytes of storage owned by the buffer (padding included)
    nbytes = property(lambda self: self.storage.size)
    address = property(lambda self: self.storage.ctypes.data)

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self.array, dtype=dtype)
        return self.array if dtype is None else self.array.astype(dtype)

    def __getitem__(self, index):
        return self.array[index]

    def __setitem__(self, index, value):
        self.array[index] = value

    def __len__(self):
        return len(self.array)

    def view(self, shape, offset: int = 0) -> "Buffer":
        """A zero-copy view of ``shape`` at byte ``offset``; see :func:`zero_copy_view`."""
        return zero_copy_view(self, shape, offset)

    def copy_from(self, src) -> "Buffer":
        """Stride-aware copy of ``src`` into this buffer; see :func:`copy_into`."""
        copy_into(self, src)
        return self

    def fill(self, value) -> None:
        self.array.fill(value)

    def to_numpy(self) -> np.ndarray:
        """A plain contiguous copy of the logical contents."""
        return np.ascontiguousarray(self.array)

    def shares_memory(self, other) -> bool:
        other = other.storage if isinstance(other, Buffer) else other
        return np.shares_memory(self.storage, other)

    def __repr__(self) -> str:
        return (
            f"Buffer(shape={self.shape}, dtype={self.dtype}, padded={self.padded_shape}, "
            f"nbytes={self.nbytes}, address={self.address:#x})"
        )


def aligned_array(shape, dtype=np.float16, zero: bool = True) -> Buffer:
    """A new 64-byte-aligned :class:`Buffer` with its innermost dimension padded to 16."""
    dtype = np.dtype(dtype)
    return Buffer(aligned_bytes(storage_nbytes(shape, dtype), zero=zero), shape, dtype)


def _storage_of(source) -> tuple[np.ndarray, np.dtype]:
    if isinstance(source, Buffer):
        return source.storage, source.dtype
    if isinstance(source, np.ndarray):
        if not source.flags.c_contiguous:
            raise ValueError(
                "zero_copy_view needs a Buffer or a C-contiguous array "
                "(its bytes are the backing store the view is checked against)"
            )
        return source.reshape(-1).view(np.uint8), source.dtype
    raise TypeError(f"expected a Buffer or numpy array, got {type(source).__name__}")


def zero_copy_view(source, shape, offset: int = 0) -> Buffer:
    """A view of ``shape`` (padded strides, same dtype) at byte ``offset`` into ``source``.

    Shares memory with ``source``; never copies.  Unlike FluidAudio's check (which counts
    logical elements), the furthest byte the view can address, computed from its real
    padded strides, must lie inside the source's backing store; otherwise ValueError.
    """
    storage, dtype = _storage_of(source)
    shape = tuple(int(s) for s in shape)
    offset = int(offset)
    if offset < 0:
        raise ValueError(f"view offset must be non-negative, got {offset}")
    if offset % dtype.itemsize:
        raise ValueError(f"view offset {offset} is not a multiple of the element size {dtype.itemsize}")
    strides = padded_strides(shape, dtype)
    if math.prod(shape) == 0:
        extent = 0
    else:
        extent = sum((s - 1) * st for s, st in zip(shape, strides)) + dtype.itemsize
    if offset + extent > storage.size:
        raise ValueError(
            f"a view of shape {shape} ({dtype}) at byte offset {offset} reaches byte "
            f"{offset + extent}, past the {storage.size}-byte backing store of its source"
        )
    return Buffer(storage[offset : offset + extent], shape, dtype, strides)


def copy_into(dst, src) -> None:
    """Copy ``src`` into ``dst`` through ``dst``'s real strides (padding left untouched).

    ``src`` is an array of ``dst``'s shape, or a flat sequence of ``dst.size`` elements
    in logical row-major order (FluidAudio's linear fast copy scrambled padded arrays).
    """
    target = dst.array if isinstance(dst, Buffer) else dst
    if not isinstance(target, np.ndarray):
        raise TypeError(f"copy destination must be a Buffer or numpy array, got {type(dst).__name__}")
    src = np.asarray(src.array if isinstance(src, Buffer) else src)
    if src.shape != target.shape:
        if src.size != target.size or src.ndim != 1:
            raise ValueError(
                f"cannot copy an array of shape {src.shape} into a buffer of shape {target.shape}"
            )
        src = src.reshape(target.shape)
    np.copyto(target, src, casting="same_kind")


@dataclass
class PoolStats:
    """Counters of a :class:`BufferPool`."""

    hits: int = 0
    misses: int = 0
    replacements: int = 0
    #: bytes of storage currently held by the pool
    bytes: int = 0
    #: bytes allocated over the pool's life
    bytes_allocated: int = 0


class BufferPool:
    """Reusable buffers by name: same key, shape and dtype -> the very same buffer."""

    def __init__(self, zero: bool = True):
        self._lock = threading.Lock()
        self._buffers: dict[str, Buffer] = {}
        self.zero = zero
        self.stats = PoolStats()

    def get(self, key: str, shape, dtype=np.float16) -> Buffer:
        """The pooled buffer for ``key``; a new one if absent or of another shape/dtype."""
        shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        with self._lock:
            buf = self._buffers.get(key)
            if buf is not None and buf.shape == shape and buf.dtype == dtype:
                self.stats.hits += 1
                return buf
            self.stats.misses += 1
            if buf is not None:
                self.stats.replacements += 1
                self.stats.bytes -= buf.nbytes
            buf = aligned_array(shape, dtype, zero=self.zero)
            self._buffers[key] = buf
            self.stats.bytes += buf.nbytes
            self.stats.bytes_allocated += buf.nbytes
            return buf

    def release(self, key: str) -> None:
        """Drop one pooled buffer (no error if absent)."""
        with self._lock:
            buf = self._buffers.pop(key, None)
            if buf is not None:
                self.stats.bytes -= buf.nbytes

    def clear(self) -> None:
        """Drop every pooled buffer (the counters of hits and misses are kept)."""
        with self._lock:
            self._buffers.clear()
            self.stats.bytes = 0

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._buffers

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)

    def __repr__(self) -> str:
        s = self.stats
        return f"BufferPool({len(self)} buffers, {s.bytes} bytes, hits={s.hits}, misses={s.misses})"


@dataclass(frozen=True)
class AneLayout:
    """The DRAM layout of a C x H x W tensor as the tile DMA sees it (strides in bytes).

    Element ``(n, c, h, w)`` sits at ``n * batch_stride + c * plane_stride +
    h * row_stride + w * itemsize``.  :meth:`of` gives the canonical strides
    (row = round_up(W * bytes, 64), plane = round_up(row * H, 64)); a TD may use larger
    ones, which the constructor accepts if they are 64-byte multiples that do not overlap.
    """

    channels: int
    height: int
    width: int
    dtype: np.dtype
    row_stride: int
    plane_stride: int
    batch: int = 1
    batch_stride: int = 0

    def __post_init__(self):
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        if self.batch_stride == 0:
            object.__setattr__(self, "batch_stride", self.plane_stride * self.channels)
        c, h, w = self.channels, self.height, self.width
        if min(c, h, w, self.batch) < 1:
            raise ValueError(f"tensor dimensions must be positive, got N={self.batch} C={c} H={h} W={w}")
        for name in ("row_stride", "plane_stride", "batch_stride"):
            if getattr(self, name) % ALIGN:
                raise ValueError(f"{name} {getattr(self, name)} is not a multiple of {ALIGN} bytes")
        if (
            self.row_stride < w * self.dtype.itemsize
            or self.plane_stride < self.row_stride * h
            or self.batch_stride < self.plane_stride * c
        ):
            raise ValueError(
                f"strides row={self.row_stride} plane={self.plane_stride} "
                f"batch={self.batch_stride} overlap a {c}x{h}x{w} {self.dtype} tensor"
            )

    @classmethod
    def of(cls, shape, dtype=np.float16) -> "AneLayout":
        """Canonical layout of an ``(N, C, H, W)`` or ``(C, H, W)`` shape."""
        shape = tuple(int(s) for s in shape)
        if len(shape) == 3:
            shape = (1,) + shape
        if len(shape) != 4:
            raise ValueError(f"expected an (N, C, H, W) or (C, H, W) shape, got {shape}")
        n, c, h, w = shape
        dtype = np.dtype(dtype)
        row = round_up(w * dtype.itemsize, ALIGN)
        plane = round_up(row * h, ALIGN)
        return cls(c, h, w, dtype, row, plane, n)

    @property
    def shape(self) -> tuple:
        return (self.batch, self.channels, self.height, self.width)

    @property
    def strides(self) -> tuple:
        return (self.batch_stride, self.plane_stride, self.row_stride, self.dtype.itemsize)

    @property
    def nbytes(self) -> int:
        """Bytes from the first element to the end of the last plane."""
        return self.batch_stride * (self.batch - 1) + self.plane_stride * self.channels

    def view(self, raw: np.ndarray) -> np.ndarray:
        """The tensor as a strided (N, C, H, W) view of the byte array ``raw``."""
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise TypeError("expected a 1-D uint8 byte array")
        if raw.size < self.nbytes:
            raise ValueError(f"{raw.size} bytes cannot hold a layout of {self.nbytes} bytes")
        return np.ndarray(self.shape, self.dtype, buffer=raw, strides=self.strides)

    def tile(self, x, out: np.ndarray | None = None) -> np.ndarray:
        """Plain NCHW (or CHW) ``x`` -> bytes in this layout (padding zeroed)."""
        x = np.asarray(x)
        if x.ndim == 3:
            x = x[None]
        if x.shape != self.shape:
            raise ValueError(f"array of shape {x.shape} does not match layout shape {self.shape}")
        if out is None:
            out = aligned_bytes(self.nbytes)
        else:
            out[: self.nbytes] = 0
        np.copyto(self.view(out), x, casting="same_kind")
        return out

    def untile(self, raw: np.ndarray) -> np.ndarray:
        """Bytes in this layout -> a plain contiguous (N, C, H, W) array."""
        return np.ascontiguousarray(self.view(raw))


def tile(x, dtype=np.float16) -> np.ndarray:
    """``x`` (NCHW or CHW) in the canonical ANE layout, as 64-byte-aligned bytes."""
    x = np.asarray(x)
    return AneLayout.of(x.shape, dtype).tile(x.astype(dtype, copy=False))


def untile(raw: np.ndarray, shape, dtype=np.float16) -> np.ndarray:
    """Bytes in the canonical ANE layout of ``shape`` -> a plain NCHW array."""
    return AneLayout.of(shape, dtype).untile(raw)
