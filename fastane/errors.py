"""fastane's exception and warning hierarchy.

User input errors are plain ``ValueError``/``TypeError`` (as numpy raises them).
Malformed programs and device faults derive from :class:`FastaneError`.
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
