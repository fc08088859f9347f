"""fastane: a Numba-accelerated, bit-exact emulator of the Apple Neural Engine (M1)."""

import os as _os

# Numba runs on TBB when fastane.kernels.parallel finds it (a dependency on Linux x86-64).
# Without it Numba runs on OpenMP, whose threads then sleep when idle instead of spinning
# (the default spins): on a machine shared with other work a spinning worker takes the
# core the others need, and every parallel region then waits for a scheduler slice -- a
# ResNet-50 forward on the 2-core machine next to a test run: 0.95-2.5 s spinning,
# 0.13-0.15 s passive.  Set before the OpenMP runtime loads; a value the user set is kept
# (docs/architecture.md).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .errors import (
    DeviceFault,
    DeviceMemoryError,
    FastaneError,
    LeavesANEWarning,
    LUTRangeError,
    LUTRangeWarning,
    ModelError,
    SaturationError,
    SaturationWarning,
    TDError,
)
from .errstate import errstate, geterr, seterr
from .stats import Stats, last_stats
from .api import constant, conv1d, conv2d, linear, matmul
from .compress import PalettizedWeight, palettize, quantize
from .activation_table import ACTIVATIONS as _ACTIVATIONS
from .activations import *  # noqa: F403 (each activation of _ACTIVATIONS)
from .activations import lut_table
from .rowops import (
    layer_norm,
    log_softmax,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_sum,
    rms_norm,
    softmax,
)
from .td import Program, TaskDescriptor, load_program
from .device import Device
from .model import Model, load_model
from .model.evaluate import evaluate

__version__ = "0.1.0"

#: the public names (modules such as fastane.lower, fastane.td, fastane.device and
#: fastane.roofline are imported by name, not re-exported)
__all__ = [
    # the numpy surface and the activations
    "matmul",
    "linear",
    "conv1d",
    "conv2d",
    "constant",
    "palettize",
    "quantize",
    "PalettizedWeight",
    *_ACTIVATIONS,  # relu, tanh, sigmoid, ...: fastane.activation_table
    "lut_table",
    # softmax, normalizations, reductions (the planar engine)
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    # events, counters and errors
    "errstate",
    "geterr",
    "seterr",
    "Stats",
    "last_stats",
    "FastaneError",
    "TDError",
    "DeviceFault",
    "DeviceMemoryError",
    "SaturationError",
    "SaturationWarning",
    "LUTRangeError",
    "LUTRangeWarning",
    "ModelError",
    "LeavesANEWarning",
    # models
    "load_model",
    "evaluate",
    "Model",
    # programs and the device
    "Program",
    "TaskDescriptor",
    "load_program",
    "Device",
    "__version__",
]
