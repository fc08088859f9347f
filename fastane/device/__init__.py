"""fastane.device: the emulated M1 ANE, block by block.

* :mod:`~fastane.device.memory`: unified memory (IOVA allocator, :class:`BARTable`);
* :mod:`~fastane.device.buffers`: aligned, padded, pooled host buffers and ANE layouts;
* :mod:`~fastane.device.taskmanager`: the task manager, 8 task queues, TM/TQ registers;
* :mod:`~fastane.device.engine`: one TD chain through ControlDMA, KernelDMA
  (:mod:`~fastane.device.kernel_dma`), TileDMA (:mod:`~fastane.device.tile_dma`), L2
  (:mod:`~fastane.device.l2`), MAC (:mod:`~fastane.device.mac`), NE
  (:mod:`~fastane.device.ne`) and the planar engine (:mod:`~fastane.device.planar`);
* :class:`Device`: all of it behind ``submit`` and ``run``.
"""

from .buffers import (
    AneLayout,
    Buffer,
    BufferPool,
    aligned_array,
    copy_into,
    padded_shape,
    tile,
    untile,
    zero_copy_view,
)
from .device import Device, LoadedProgram, Outputs, TensorSlot, tensor_slots
from .engine import Engine
from .faults import (
    BARFault,
    ChainFault,
    DecodeFault,
    DMARangeFault,
    HostMemoryFault,
    KMemOverflow,
    L2Fault,
    L2Overflow,
    QueueFault,
    UnsupportedTask,
)
from .kernel_dma import pack_weights, unpack_weights
from .memory import TILE, BARTable, Region, UnifiedMemory
from .taskmanager import QUEUE_PRIORITIES, Event, Task, TaskManager

__all__ = [
    "AneLayout",
    "BARFault",
    "BARTable",
    "Buffer",
    "BufferPool",
    "ChainFault",
    "DMARangeFault",
    "DecodeFault",
    "Device",
    "Engine",
    "Event",
    "HostMemoryFault",
    "KMemOverflow",
    "L2Fault",
    "L2Overflow",
    "LoadedProgram",
    "Outputs",
    "QUEUE_PRIORITIES",
    "QueueFault",
    "Region",
    "TILE",
    "Task",
    "TaskManager",
    "TensorSlot",
    "UnifiedMemory",
    "UnsupportedTask",
    "aligned_array",
    "copy_into",
    "pack_weights",
    "padded_shape",
    "tensor_slots",
    "tile",
    "unpack_weights",
    "untile",
    "zero_copy_view",
]
