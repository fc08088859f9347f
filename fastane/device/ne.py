"""The NE block: post-MAC bias, scale and nonlinearity (SPEC 3).

Order (SPEC decision): accumulator readout -> + ``AccBias`` (when ``MACCfg.BiasMode``
is 1; fp16, round to nearest even) -> x ``PostScale`` (fp16, RNE; 0x3c00 = 1.0 is the
identity) -> ``MACCfg.NonlinearMode`` (0 identity, 1 ReLU, 2 LUT).  **Decisions**:
``PostScale`` always applies (``PostScaleMode`` is 0 in every corpus TD); ``AccBias`` is
one fp16 value for every output channel; the integer-path fields
``AccBiasShift``/``PostRightShift`` must be 0 on the FP16 path.

The arithmetic is ``fastane.kernels.ne.ne_post``; this block decodes the registers and,
for the LUT, finds the table: the coefficient block KernelDMA loaded into core 0's KMem
(its first 0x80 bytes, 43 little-endian u16 words), unpacked by ``fastane.lut``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from .faults import UnsupportedTask

IDENTITY, RELU, LUT = 0, 1, 2
#: bytes of the LUT coefficient block at the start of core 0's KMem
LUT_BLOCK = 0x80


@dataclass(frozen=True)
class NEConfig:
    bias_mode: int
    acc_bias: int        # fp16 bits
    post_scale: int      # fp16 bits
    nonlinear: int

    @staticmethod
    def f16(bits: int) -> float:
        return float(np.uint16(bits).view(np.float16))


def config(regs: dict, what: str) -> NEConfig:
    """Decode and check the NE registers."""
    for name in ("NE.AccBias.AccBiasShift", "NE.PostScale.PostRightShift", "NE.MACCfg.MatrixBiasEn",
                 "NE.KernelCfg.PalettizedEn", "NE.KernelCfg.SparseFmt"):
        if regs[name]:
            raise UnsupportedTask(f"{what}: {name} = {regs[name]} is not emulated on the FP16 path")
    cfg = NEConfig(regs["NE.MACCfg.BiasMode"], regs["NE.AccBias.AccBias"],
                   regs["NE.PostScale.PostScale"], regs["NE.MACCfg.NonlinearMode"])
    if cfg.nonlinear not in (IDENTITY, RELU, LUT):
        raise UnsupportedTask(f"{what}: NE.MACCfg.NonlinearMode = {cfg.nonlinear} is not defined")
    if cfg.nonlinear == LUT and _lut_unpacker() is None:
        raise UnsupportedTask(f"{what}: NonlinearMode 2 (LUT) needs fastane.lut to read the "
                              f"coefficient block, which is not available yet")
    return cfg


def _lut_unpacker():
    """``fastane.lut``'s coefficient-block parser (words -> (lutf, luti)), if present."""
    try:
        mod = importlib.import_module("fastane.lut")
    except ImportError:
        return None
    return getattr(mod, "from_words", None)


_NO_LUT = (np.zeros(41), np.zeros(3, dtype=np.int64))


def run(cfg: NEConfig, values: np.ndarray, kmem=None):
    """``(values, lut_underflow, lut_overflow)`` after bias, scale and nonlinearity.

    ``values``: float64 ``[1, C, H, W]`` holding exact fp16 values; the result likewise.
    """
    from fastane.kernels.ne import ne_post
    n, c, h, w = values.shape
    y = np.ascontiguousarray(values).reshape(n, c, h * w)
    bias = np.full(c, cfg.f16(cfg.acc_bias)) if cfg.bias_mode else np.zeros(0)
    if cfg.nonlinear == LUT:
        words = kmem.data[0, :LUT_BLOCK].view("<u2")
        lutf, luti = _lut_unpacker()(words)
    else:
        lutf, luti = _NO_LUT
    out = np.empty(y.shape, dtype=np.uint16)
    counts = np.zeros(2, dtype=np.int64)
    ne_post(y, bias, cfg.f16(cfg.post_scale), cfg.nonlinear, lutf, luti, out, counts)
    result = out.view(np.float16).astype(np.float64).reshape(values.shape)
    return result, int(counts[0]), int(counts[1])
