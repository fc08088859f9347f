"""Buffer bindings: the device buffers a lowered program runs on, kept per program and
device for reuse, freed when the program leaves the cache (after its last run).
docs/lower.md, section 5.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import DeviceMemoryError
from ..kernels import dma as _kdma

__all__ = ["Binding", "Bound", "Resident"]


class Resident:
    """What a binding's kernel slot holds: private copies of the fp16 operands it was
    packed from (the weights as the caller passed them, before any transpose, and the
    bias), so that a call with **bit-identical** operands skips packing them again.

    The rule (docs/lower.md, section 5): numpy arrays are mutable and carry no version,
    so identity proves nothing; the kernel slot is reused only when the new operands have
    the same shape and the same bits as the copies taken when it was packed (a compare
    costs one read of each, a small fraction of a transpose and a pack).  Operands that
    are not float16 arrays are never remembered (they are packed every time); a program
    without weights (an activation's LUT block only) is packed once per binding.
    """

    __slots__ = ("weight", "bias", "key")

    def __init__(self, weight, bias):
        self.weight = _snapshot(weight)
        self.bias = _snapshot(bias)
        #: the identities of the constants held (:func:`constant_key`), or None
        self.key = _kept_key(self.weight, self.bias)

    @staticmethod
    def usable(weight, bias) -> bool:
        return (weight is None or _fp16(weight)) and (bias is None or _fp16(bias))

    def holds(self, weight, bias) -> bool:
        """Whether the slot was packed from operands with exactly these bits."""
        if self.key is not None and self.of_key(constant_key(weight, bias)):
            return True  # these very constants (identity: no bits read)
        return _same(self.weight, weight) and _same(self.bias, bias)

    def constant(self) -> bool:
        """Whether the slot holds fastane's constants that are all still alive (frozen
        operands are kept by weak reference: a constant nobody holds frees its slot)."""
        return self.key is not None and all(k is None or k[0]() is not None for k in (self.weight, self.bias))

    def of(self, weight, bias) -> bool:
        """Whether the slot holds these very constants (identity only: no bits read)."""
        return self.of_key(constant_key(weight, bias))

    def of_key(self, key) -> bool:
        """:meth:`of`, given the call's :func:`constant_key`."""
        return key is not None and key == self.key and self.constant()


# ---------------------------------------------------------------- frozen operands
# fp16 arrays fastane makes and owns (a model's compile-time weights): read-only, never
# handed out for writing, so a Resident may hold the array itself instead of a copy and
# know it unchanged by identity.  Keyed by id, checked against a weak reference (an id is
# reused only after its array is gone).
_FROZEN: dict = {}


def freeze(x) -> np.ndarray:
    """``x`` as a C-ordered float16 array fastane owns and never writes: read-only, and
    remembered as frozen (:class:`Resident` keeps it by weak reference, compared by identity).
    For fastane's own constants only (a user's array stays mutable and is copied)."""
    a = np.array(x, dtype=np.float16, order="C", copy=True)
    a.flags.writeable = False
    key = id(a)
    _FROZEN[key] = weakref.ref(a, lambda _, key=key: _FROZEN.pop(key, None))
    return a


def _frozen(x) -> bool:
    r = _FROZEN.get(id(x))
    return r is not None and r() is x


def _fp16(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == np.float16


def _canonical(x):
    """``x`` in the order its memory holds it: a transposed view (``linear``'s ``w.T``) is
    compared as the array it views, without copying it (a flag keeps the two apart)."""
    if x.ndim >= 2 and not x.flags.c_contiguous and x.T.flags.c_contiguous:
        return x.T, True
    return x, False


def _snapshot(x):
    if x is None:
        return None
    x, flipped = _canonical(x)
    if _whole_frozen(x):  # fastane's own read-only constant: kept by (weak) reference
        return weakref.ref(x.base if x.base is not None and _frozen(x.base) else x), flipped
    return np.array(x, dtype=np.float16, order="C", copy=True), flipped


def _identity(x):
    """``(id, transposed)`` of the frozen array ``x`` is or wholly views (in its own order or
    transposed); None for None; False when ``x`` is not one of fastane's constants."""
    if x is None:
        return None
    if not _fp16(x):
        return False
    x, flipped = _canonical(x)
    if _frozen(x):
        return id(x), flipped
    return (id(x.base), flipped) if _whole_frozen(x) else False


def constant_key(weight, bias):
    """The identities of a call's operands when they are fastane's constants (at least
    one given, none of them anything else), else None: equal to a live :class:`Resident`'s
    ``key`` only for those very arrays (an id is reused only after its array is gone, and
    the Resident's weak references tell)."""
    key = (_identity(weight), _identity(bias))
    return None if False in key or key == (None, None) else key


def _kept_key(weight, bias):
    """A Resident's ``key`` from its snapshots (None unless both are constants or None)."""
    key = []
    for k in (weight, bias):
        if k is not None and not isinstance(k[0], weakref.ref):
            return None  # a private copy: not a constant
        key.append(None if k is None else (id(k[0]()), k[1]))
    return None if key == [None, None] else tuple(key)


def _views(x, k) -> bool:
    """``x`` (canonical) is the frozen array ``k``, or a whole view of it."""
    return x is k or (_whole_frozen(x) and x.base is k)


def _whole_frozen(x) -> bool:
    """``x`` is a frozen array, or a view of one spanning all of it in its own order."""
    if _frozen(x):
        return True
    base = x.base
    return (
        base is not None
        and _frozen(base)
        and x.shape == base.shape
        and x.strides == base.strides
        and x.__array_interface__["data"][0] == base.__array_interface__["data"][0]
    )


def _same(kept, x) -> bool:
    """``x`` has the shape and the bit patterns of ``kept`` (NaN payloads, signed zeros)."""
    if kept is None or x is None:
        return kept is None and x is None
    if not _fp16(x):
        return False
    x, flipped = _canonical(x)
    kept, kflipped = kept
    if isinstance(kept, weakref.ref):  # a constant: gone means not the same
        kept = kept()
        if kept is None:
            return False
    if flipped != kflipped or x.shape != kept.shape:
        return False
    if _frozen(kept) and _views(x, kept):
        return True  # the very constant it was packed from: frozen, so unchanged
    if x.size <= _CHUNK:  # small: one bytes compare is cheapest
        return x.tobytes() == kept.tobytes()
    a = kept.reshape(-1).view(np.uint16)
    b = x.reshape(-1) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1)
    b = b.view(np.uint16)
    if a.size % 4 == 0:  # compare 64-bit words: a quarter of the elements
        a, b = a.view(np.uint64), b.view(np.uint64)
    return _kdma.equal_words(a, b)  # one pass, stopping at a difference


_CHUNK = 1 << 15  # elements: at most this many are compared as one bytes object


@dataclass
class Binding:
    """Buffers of one program on one device: input, output and kernel regions."""

    device: object
    regions: dict  # slot -> Region
    raw: dict  # slot -> uint8 view of the region
    #: the operands the kernel slot was packed from (:class:`Resident`), or None
    resident: object = field(default=None)

    def free(self) -> None:
        for r in self.regions.values():
            self.device.free(r)


class Bound:
    """What a lowered program keeps on devices: the programs it loaded, bindings free for
    reuse (per device), runs in flight, and whether the cache dropped it.  A subclass has
    ``programs`` and ``buffer_sizes()``."""

    def __post_init__(self):
        self._free = {}  # {id(device): [Binding, ...]}
        self._devices = {}  # {id(device): device} the programs were loaded on
        self._active = 0
        self._evicted = False
        self._lock = threading.Lock()

    def acquire(self, dev, stats_only: bool, reclaim=None, weight=None, bias=None) -> Binding:
        """A binding on ``dev`` (a kept one, or new buffers; in stats-only mode never
        written).  ``reclaim(dev)`` is called once when unified memory is full.

        ``weight`` and ``bias`` are the call's operands: a kept binding whose kernel slot
        holds fastane's constants (a model's weights, :func:`freeze`) is kept for them, so
        that layers of one shape with different constant weights each keep their own
        kernel slot, packed once (docs/lower.md, section 5): it is given back only for
        those very constants (identity), or once nobody holds them any more."""
        with self._lock:
            self._active += 1
            self._devices[id(dev)] = dev
            free = self._free.get(id(dev))
            if free and not stats_only:
                i = _pick(free, weight, bias)
                if i is not None:
                    return free.pop(i)
        regions = {}
        try:
            for slot, size in self.buffer_sizes().items():
                regions[slot] = alloc_buffer(
                    dev, size, f"{self.program.name}:{slot}", not stats_only, reclaim
                )
        except BaseException:
            for r in regions.values():
                dev.free(r)
            self._done()
            raise
        raw = {s: dev.memory.view(r.iova, r.size) for s, r in regions.items()}
        return Binding(dev, regions, raw)

    def release(self, b: Binding, keep: bool) -> None:
        """The run on ``b`` ended: keep ``b`` for the next run, or free it."""
        if keep:
            with self._lock:
                if not self._evicted:
                    self._free.setdefault(id(b.device), []).append(b)
                    b = None
        if b is not None:
            b.free()
        self._done()

    def drop_free(self, dev) -> None:
        """Free the bindings kept on ``dev``."""
        with self._lock:
            free = self._free.pop(id(dev), [])
        for b in free:
            b.free()

    def release_all(self) -> None:
        """The program left the cache: free its buffers and programs now, or after its last run."""
        with self._lock:
            self._evicted = True
            cleanup = self._active == 0
        if cleanup:
            self._cleanup()

    def _done(self) -> None:
        with self._lock:
            self._active -= 1
            cleanup = self._evicted and self._active == 0
        if cleanup:
            self._cleanup()

    def _cleanup(self) -> None:
        with self._lock:
            bindings = [b for bs in self._free.values() for b in bs]
            devices = list(self._devices.values())
            self._free.clear()
            self._devices.clear()
        for b in bindings:
            b.free()
        for dev in devices:
            for p in self.programs:
                dev.unload(p)


def _pick(free: list, weight, bias):
    """The index in ``free`` of the binding a call with ``weight`` and ``bias`` runs on, or
    None for new buffers: the one holding these very constants; else the most recently
    kept one not holding live constants (its slot is compared and repacked as needed)."""
    key = constant_key(weight, bias)
    spare = None
    for i in range(len(free) - 1, -1, -1):
        res = free[i].resident
        if res is not None and res.constant():
            if key is not None and res.key == key:
                return i
        elif spare is None:
            spare = i
    return spare


def alloc_buffer(dev, size, name, zero, reclaim):
    """Allocate ``size`` bytes on ``dev``; when memory is full, ``reclaim(dev)`` once and retry."""
    try:
        return dev.memory.alloc(size, name, zero=zero)
    except MemoryError:
        if reclaim is None:
            raise
        reclaim(dev)  # make room: drop the buffers cached programs keep on dev
        try:
            return dev.memory.alloc(size, name, zero=zero)
        except MemoryError as exc:
            raise DeviceMemoryError(
                f"{name}: {size:#x} bytes do not fit the device's unified memory "
                f"({dev.memory.size >> 20} MiB; {exc})"
            ) from None
