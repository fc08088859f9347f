"""The program cache: lowered programs kept by call (an LRU of :data:`CACHE_SIZE`), so a
repeated call does not lower again.  :func:`build` is the lowering's entry point.
"""

from __future__ import annotations

import collections
import threading

from ..m1 import LIMITS, Limits
from .emit import emit_conv, emit_eltwise
from .problems import Eltwise

__all__ = ["CACHE_SIZE", "build", "cached", "cache_info", "cache_clear", "reclaim"]

#: lowered programs kept (an LRU keyed by the call and the limits)
CACHE_SIZE = 128
_CACHE: "collections.OrderedDict" = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()
_STATS = {"hits": 0, "misses": 0}


def build(problem, limits: Limits = LIMITS):
    """Lower a :class:`~fastane.lower.Conv` (to a :class:`~fastane.lower.Lowered`) or an
    :class:`~fastane.lower.Eltwise` (to a :class:`~fastane.lower.LoweredEltwise`) to TDs
    (cached: the same call gives the same object)."""
    if isinstance(problem, Eltwise):
        return cached((problem, limits), lambda: emit_eltwise(problem, limits))
    return cached((problem, limits), lambda: emit_conv(problem, limits))


def cached(key, make):
    """The lowered program kept under ``key`` (hashable), lowered by ``make()`` on a miss:
    the one LRU of every kind of lowered program that binds device buffers (a
    :class:`~fastane.lower.bind.Bound`), so that an evicted one frees them and
    :func:`reclaim` reaches them all."""
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            _STATS["hits"] += 1
            return hit
    low = make()
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:  # another thread lowered it meanwhile
            _STATS["hits"] += 1
            return hit
        _STATS["misses"] += 1
        _CACHE[key] = low
        while len(_CACHE) > CACHE_SIZE:
            _, old = _CACHE.popitem(last=False)
            old.release_all()
    return low


def cache_info() -> dict:
    """``{"hits", "misses", "size", "maxsize"}`` of the lowered-program cache."""
    with _CACHE_LOCK:
        return {**_STATS, "size": len(_CACHE), "maxsize": CACHE_SIZE}


def cache_clear() -> None:
    """Forget every lowered program (and free the buffers they hold on devices)."""
    with _CACHE_LOCK:
        old = list(_CACHE.values())
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)
    for low in old:
        low.release_all()


def reclaim(dev) -> None:
    """Free the buffers the cached programs keep on ``dev`` (unified memory is full)."""
    with _CACHE_LOCK:
        lows = list(_CACHE.values())
    for low in lows:
        low.drop_free(dev)
