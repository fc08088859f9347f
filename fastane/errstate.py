"""``fastane.errstate``: how saturation and LUT range events are surfaced.

Works like :func:`numpy.errstate`: a context manager (also usable as a decorator) that
sets, for the current thread/context, what happens when an event is counted:
``"ignore"``, ``"warn"`` (a :class:`~fastane.SaturationWarning`) or ``"raise"``
(a :class:`~fastane.SaturationError`).  Defaults: saturation warns, LUT range ignored.
:func:`warn_user` gives fastane's other warnings (:class:`~fastane.LeavesANEWarning`),
pointing at the user's code as these do.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings

from .errors import LUTRangeError, LUTRangeWarning, SaturationError, SaturationWarning

_ACTIONS = ("ignore", "warn", "raise")
_DEFAULT = {"saturation": "warn", "lut_range": "ignore"}
_state: contextvars.ContextVar[dict] = contextvars.ContextVar("fastane_errstate", default=_DEFAULT)
_KINDS = {
    "saturation": (SaturationWarning, SaturationError),
    "lut_range": (LUTRangeWarning, LUTRangeError),
}


def geterr() -> dict:
    """The current settings, e.g. ``{"saturation": "warn", "lut_range": "ignore"}``."""
    return dict(_state.get())


def _updated(kwargs: dict, caller: str) -> dict:
    new = dict(_state.get())
    for kind, action in kwargs.items():
        if kind not in _DEFAULT:
            raise TypeError(f"{caller}() got an unexpected keyword argument '{kind}'")
        if action not in _ACTIONS:
            raise ValueError(f"invalid action {action!r} for {kind}; expected one of {_ACTIONS}")
        new[kind] = action
    return new


def seterr(**kwargs) -> dict:
    """Set actions for the current context; returns the previous settings."""
    old = geterr()
    _state.set(_updated(kwargs, "seterr"))
    return old


class errstate(contextlib.ContextDecorator):
    """Context manager for event handling: ``with fastane.errstate(saturation="raise"):``."""

    def __init__(self, **kwargs):
        _updated(kwargs, "errstate")  # validate eagerly
        self._kwargs = kwargs
        self._tokens = []

    def __enter__(self):
        self._tokens.append(_state.set(_updated(self._kwargs, "errstate")))
        return self

    def __exit__(self, *exc):
        _state.reset(self._tokens.pop())
        return False


def report_events(stats, func: str, outputs: int | None = None) -> None:
    """Surface the saturation and LUT range events counted in ``stats`` (a
    :class:`~fastane.Stats`; a slice's crop path, ``cropped``, counts as saturation) according
    to the current errstate: the one place where event
    counts become warnings or errors (the numpy API, the activations and ``Device.run``
    all call it).  ``func`` names the caller in the message; ``outputs``, when given, is
    the number of output elements.  A warning points at the first frame outside fastane.
    """
    sat = stats.saturated
    if sat > 0:
        of = f" of {outputs} outputs" if outputs is not None else " output(s)"
        if getattr(stats, "int8_macs", 0):  # the INT8 path (docs/numerics.md): accumulator or output range
            what = (
                "saturated: the 32-bit integer accumulator clamped, or the result was clamped to the "
                "integer output's range"
            )
        else:
            what = "saturated the Q16.16 accumulator (a partial sum left [-32768, 32768)); they read out as +-inf"
        _surface("saturation", f"{func}: {sat}{of} {what}")
    cropped = getattr(stats, "cropped", 0)
    if cropped > 0:
        _surface(
            "saturation",
            f"{func}: {cropped} value(s) read out as +-inf: beyond the magnitude the fixed-point crop "
            "path of a slice with an offset on its last axis keeps",
        )
    under, over = stats.lut_underflow, stats.lut_overflow
    if under + over > 0:
        _surface(
            "lut_range",
            f"{func}: {under + over} input(s) outside the LUT table range ({under} below, {over} above)",
        )


def _surface(kind: str, what: str) -> None:
    action = _state.get()[kind]
    if action == "ignore":
        return
    warning, error = _KINDS[kind]
    if action == "raise":
        raise error(what)
    warnings.warn(what, warning, stacklevel=_user_stacklevel())


def warn_user(category, message: str) -> None:
    """``warnings.warn(message, category)`` pointing at the first frame outside fastane."""
    warnings.warn(message, category, stacklevel=_user_stacklevel())


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside fastane (so warnings point at user code)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep):
        frame, level = frame.f_back, level + 1
    return level
