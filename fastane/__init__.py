"""fastane: a Numba-accelerated, bit-exact emulator of the Apple Neural Engine (M1)."""
from .errors import (DeviceFault, FastaneError, LUTRangeError, LUTRangeWarning,
                     SaturationError, SaturationWarning, TDError)
from .errstate import errstate, geterr, seterr
from .stats import Stats, last_stats
from .api import conv1d, conv2d, linear, matmul
from .activations import (exp, exp2, gelu, hardtanh, leaky_relu, log2, lut_table, reciprocal, relu,
                          relu6, rsqrt, selu, sigmoid, sign, silu, sqrt, tanh)
from .td import Program, TaskDescriptor, load_program
from .device import Device

__version__ = "0.1.0"
