"""The lowering: numpy calls -> programs of real M1 task descriptors -> the device.

``fastane.matmul``/``linear``/``conv1d``/``conv2d`` do not compute anything themselves:
they describe the call as a :class:`Conv` (a matmul is a 1x1 convolution in the
``(B, C, 1, S)`` layout), :func:`build` turns it into a :class:`Lowered` program (TDs
chained for the device, a BAR plan, the DRAM layouts and the KMem layout of every task),
and :func:`execute` runs it on a :class:`~fastane.device.Device`.  Activations are
:class:`Eltwise` calls lowered the same way.  docs/lower.md walks through it.

One module per concern:

* :mod:`~fastane.lower.problems` -- the calls (:class:`Conv`, :class:`Eltwise`; each numpy
  call's from its operands' shapes: ``conv_problem``, ``linear_problem``,
  ``matmul_problem``) and the NE stage (:func:`ne_stage`, :func:`fold`);
* :mod:`~fastane.lower.tiler` -- the tiler (:func:`plan_tiling`, the only one: the
  roofline plans by lowering);
* :mod:`~fastane.lower.emit` -- TD emission through :mod:`fastane.td`;
* :mod:`~fastane.lower.lowered` -- lowered programs and where data sits in their slots;
* :mod:`~fastane.lower.cache` -- the program cache (:func:`build`);
* :mod:`~fastane.lower.bind`, :mod:`~fastane.lower.runtime` -- buffers, devices,
  :func:`execute`;
* :mod:`~fastane.lower.calls` -- the numpy API's calls (:func:`run_conv`,
  :func:`run_matmul`, :func:`run_eltwise`);
* :mod:`~fastane.lower.binary`, :mod:`~fastane.lower.rows` -- the planar engine's
  elementwise programs and its row programs (softmax, norms, reductions).
"""

from .cache import build, cache_clear, cache_info
from .calls import run_conv, run_eltwise, run_matmul
from .lowered import Lowered, LoweredEltwise
from .problems import Conv, Eltwise, NEStage, fold, ne_stage
from .runtime import default_device, execute, set_default_device, stats_device
from .tiler import Tiling, plan_tiling

__all__ = [
    "Conv",
    "Eltwise",
    "ne_stage",
    "fold",
    "plan_tiling",
    "build",
    "execute",
    "run_conv",
    "run_matmul",
    "run_eltwise",
    "default_device",
    "set_default_device",
    "cache_info",
    "cache_clear",
]
