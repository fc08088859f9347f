"""fastane's exception and warning hierarchy.

User input errors are plain ``ValueError``/``TypeError`` (as numpy raises them).
Malformed programs and device faults derive from :class:`FastaneError`.  A message that
cites text from a model file (a name, a string attribute) cites it through :func:`quote`.
"""


class FastaneError(Exception):
    """Base class of every fastane-specific error."""


class SaturationError(FastaneError, FloatingPointError):
    """A MAC accumulator clamped at the Q16.16 limits under ``errstate(saturation="raise")``."""


class SaturationWarning(RuntimeWarning):
    """A MAC accumulator clamped at the Q16.16 limits (the default is to warn)."""


class LUTRangeError(FastaneError, FloatingPointError):
    """An input fell outside a LUT's table range under ``errstate(lut_range="raise")``."""


class LUTRangeWarning(RuntimeWarning):
    """An input fell outside a LUT's table range (ignored by default)."""


class LeavesANEWarning(UserWarning):
    """The predicted Core ML compute plan of a model leaves the ANE: ops the ANE runs in
    another precision, size or input shape (or that fastane runs there) predicted on the
    CPU or the GPU, ops predicted on the ANE at risk of leaving it (a range-shaped input),
    or most of the modelled work on the CPU or the GPU
    (:meth:`fastane.model.placement.compute_plan.ComputePlan.leaves_ane`; an estimate)."""


class TDError(FastaneError, ValueError):
    """A task descriptor or program is malformed (bad packet header, field overflow...)."""


class DeviceFault(FastaneError):
    """The emulated device faulted while running a program (bad BAR, DMA out of range...)."""


class DeviceMemoryError(FastaneError, MemoryError):
    """The emulated device's unified memory cannot hold an allocation (it is full, or a
    tensor is larger than it).  A ``MemoryError`` subclass, so ``except MemoryError`` still
    catches it, but never a host allocation failure: those surface as numpy's own
    ``MemoryError`` (and a task that would make the host allocate beyond the per-task cap is
    refused first with :class:`fastane.device.HostMemoryFault`)."""


class ModelError(FastaneError, ValueError):
    """A model file or graph is malformed, hostile or outside what fastane can run (a
    truncated file, an unknown op, a shape that does not check, a tensor beyond the size
    limits); the message names the node or tensor."""


class ModelNotImplementedError(ModelError, NotImplementedError):
    """A model uses a documented variant of an op that fastane does not implement (yet):
    a :class:`ModelError` (the model cannot be run) that is also a ``NotImplementedError``
    (the op itself is valid); the message names the node and the variant."""


def quote(text, limit: int | None = 80, marks: bool = True) -> str:
    """``text`` (a name, string or bytes taken from a model file) fit for a one-line
    message: control and other unprintable characters escaped as ``repr`` escapes them,
    bytes that are not UTF-8 as ``\\xNN``, cut after ``limit`` characters (None: never)
    with ``...`` and the full length; between quotes unless ``marks`` is false (a table
    cell)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "backslashreplace")
    text = str(text)
    out, n = [], 0
    for c in text:
        e = c if c.isprintable() else repr(c)[1:-1]
        if limit is not None and n + len(e) > limit:
            out.append(f"...({len(text)} characters)")
            break
        out.append(e)
        n += len(e)
    body = "".join(out)
    return f"'{body}'" if marks else body


def quote_names(names, limit: int = 4) -> str:
    """The first ``limit`` of ``names``, each through :func:`quote`, and how many more."""
    names = list(names)
    text = ", ".join(quote(n) for n in names[:limit])
    return text + (f" and {len(names) - limit} more" if len(names) > limit else "")
