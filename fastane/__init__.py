"""fastane: a Numba-accelerated, bit-exact emulator of the Apple Neural Engine (M1)."""
from .errors import (DeviceFault, FastaneError, LUTRangeError, LUTRangeWarning,
                     SaturationError, SaturationWarning, TDError)
from .errstate import errstate, geterr, seterr
from .stats import Stats

__version__ = "0.1.0"
