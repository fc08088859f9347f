"""One reporter of saturation and LUT range events (fastane.errstate.report_events): the
numpy API, the activations and Device.run surface them the same way, per errstate, with
the caller's line as the warning's location."""

import pathlib
import re
import warnings

import numpy as np
import pytest

import fastane
from fastane import LUTRangeError, LUTRangeWarning, SaturationError, SaturationWarning, lower
from fastane.device import Device

F16 = np.float16
BIG = np.full((1, 1), 30000.0)


def _program(activation=None):
    low = lower.build(lower.Conv(1, 1, 1, 4, 1, activation=activation))
    (program,) = low.with_weights(np.full((1, 1, 1, 1), 2.0, F16))
    return program


def _run(activation, x):
    return Device(memory_size=8 << 20).run(_program(activation), {lower.lowered.SLOT_INPUT: x})


SATURATING = {
    "matmul": lambda: fastane.matmul(BIG, np.full((1, 1), 2.0)),
    "conv2d": lambda: fastane.conv2d(np.full((1, 1, 1, 1), 30000.0), np.full((1, 1, 1, 1), 2.0)),
    "Device.run": lambda: _run(None, np.full((1, 1, 1, 4), 30000.0)),
}
OUT_OF_RANGE = {
    "tanh": lambda: fastane.tanh(np.array([9.0, 0.5])),
    "linear": lambda: fastane.linear(np.full((1, 1), 9.0), np.ones((1, 1)), activation="tanh"),
    "Device.run": lambda: _run("tanh", np.full((1, 1, 1, 4), 9.0)),
}


@pytest.mark.parametrize(
    "kind, calls, warning, error",
    [
        ("saturation", SATURATING, SaturationWarning, SaturationError),
        ("lut_range", OUT_OF_RANGE, LUTRangeWarning, LUTRangeError),
    ],
)
def test_every_entry_point_reports_alike(kind, calls, warning, error):
    for func, call in calls.items():
        with fastane.errstate(**{kind: "warn"}), warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            call()
        (w,) = [w for w in got if issubclass(w.category, warning)]
        assert str(w.message).startswith(f"{func}: ")
        assert (w.filename, w.lineno) == (__file__, _caller_line(call)), func
        with fastane.errstate(**{kind: "raise"}), pytest.raises(error, match=f"^{re.escape(func)}: "):
            call()
        with fastane.errstate(**{kind: "ignore"}), warnings.catch_warnings():
            warnings.simplefilter("error")
            call()


def _caller_line(call) -> int:
    """The line a warning must point at: the first frame outside fastane, i.e. the lambda
    in the table above, or the ``run`` line of ``_run`` for Device.run."""
    if "_run" in call.__code__.co_names:
        return _run.__code__.co_firstlineno + 1
    return call.__code__.co_firstlineno


def test_only_errstate_turns_counts_into_warnings_or_errors():
    """No other module warns or raises these events itself."""
    root = pathlib.Path(fastane.__file__).parent
    pattern = re.compile(
        r"warnings\.warn|SaturationError\(|LUTRangeError\(|Saturation"
        r"Warning\(|LUTRangeWarning\(|_surface\("
    )
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name not in ("errstate.py", "errors.py") and pattern.search(p.read_text())
    ]
    assert offenders == []
