"""What a task makes the host allocate: the one estimate behind the per-task host cap.

The DMA windows bound a tensor's bytes in DRAM, not the host memory the emulator needs to
compute it (docs/device.md, "Host memory per task").  Each block counts, from the
registers, the values it holds in each kind of host buffer (``mac.host_bytes``,
``planar.host_bytes``); :func:`task_host_bytes` turns the counts into bytes.
"""

from __future__ import annotations

__all__ = ["F64_BYTES", "F32_BYTES", "F16_BYTES", "RESULT_BYTES", "FLAG_BYTES", "task_host_bytes"]

#: a float64 value: an operand, a weight, an im2col column entry, an accumulator, a readout
F64_BYTES = 8
#: a float32 value: the copy of a matmul's right operand the MAC kernels' float32 fast
#: path makes (``fastane.kernels.mac_f32``) when it is not given one
F32_BYTES = 4
#: an fp16 bit pattern: the im2col columns the MAC kernels read (``fastane.kernels.conv``)
F16_BYTES = 2
#: an output value as the NE leaves it: the fp16 result and its float64 copy
RESULT_BYTES = 2 + 8
#: a one-byte flag per value (the MAC accumulator's)
FLAG_BYTES = 1


def task_host_bytes(f64: int = 0, results: int = 0, flags: int = 0, f32: int = 0, f16: int = 0) -> int:
    """Host bytes of ``f64`` float64 values, ``results`` output values (fp16 and a float64
    copy each), ``flags`` one-byte flags, ``f32`` float32 values and ``f16`` fp16 patterns."""
    return F64_BYTES * f64 + RESULT_BYTES * results + FLAG_BYTES * flags + F32_BYTES * f32 + F16_BYTES * f16
