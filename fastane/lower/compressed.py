"""Compressed weights in the lowering: a palettized kernel stays compressed in KMem.

:class:`PalettizedWeight` is what :func:`fastane.palettize` and :func:`fastane.quantize`
return: ``bits``-bit codes of a ``(Cout, Cin/groups, Kh, Kw)`` weight into an fp16
palette.  A convolution lowered with one (``Conv.kernel_bits`` = its bits) lays out each
core's kernel buffer as the NE reads a palettized kernel (:mod:`fastane.device.palette`:
the palette, then the packed codes, then the biases and the LUT block), sets
``PalettizedEn``/``PalettizedBits`` in its TDs, and :func:`pack` writes the codes, never
the decompressed weights: KernelDMA moves the compressed bytes.  The result is bit for bit
that of the same call with :meth:`PalettizedWeight.decompress` as its weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import palette as _palette
from ..m1 import LUT_BLOCK
from ..operands import fp16_operand

__all__ = ["PalettizedWeight", "kernel_bytes", "td_fields", "pack"]


@dataclass(frozen=True, eq=False)
class PalettizedWeight:
    """A weight as ``bits``-bit ``codes`` (uint8, the weight's shape) into ``palette``
    (``2**bits`` fp16 values): ``weight = palette[codes]``.  ``kind`` says how it was made
    (``"palettized"`` or ``"quantized"``); ``scale``/``zero_point`` are a quantized weight's
    (``palette[i] = fp16(scale * (i - zero_point))`` for its integer values ``i``)."""

    codes: np.ndarray
    palette: np.ndarray
    bits: int
    kind: str = "palettized"
    scale: float | None = None
    zero_point: int | None = None
    dtype: str | None = None

    @property
    def shape(self) -> tuple:
        return self.codes.shape

    @property
    def ndim(self) -> int:
        return self.codes.ndim

    @property
    def size(self) -> int:
        return self.codes.size

    @property
    def nbytes(self) -> int:
        """Bytes of the packed codes and the palette (what the weight costs compressed)."""
        return -(-self.codes.size * self.bits // 8) + self.palette.nbytes

    def decompress(self) -> np.ndarray:
        """The fp16 weight ``palette[codes]``."""
        return self.palette[self.codes]

    def values(self) -> np.ndarray:
        """A quantized weight's integers (int8 or uint8, as quantized); else TypeError."""
        if self.kind != "quantized":
            raise TypeError("values(): only a quantized weight has integer values")
        return self.codes.astype(np.uint8).view(np.dtype(self.dtype))

    def reshaped(self, shape) -> "PalettizedWeight":
        """The same codes and palette viewed with another shape (as ``ndarray.reshape``)."""
        return PalettizedWeight(
            self.codes.reshape(shape),
            self.palette,
            self.bits,
            self.kind,
            self.scale,
            self.zero_point,
            self.dtype,
        )

    def __repr__(self) -> str:
        return (
            f"PalettizedWeight(shape={self.shape}, bits={self.bits}, kind={self.kind!r}, "
            f"{self.nbytes} bytes compressed vs {2 * self.codes.size} as fp16)"
        )


def kernel_bytes(c) -> tuple:
    """``(bytes of one output channel's kernel, bytes before a core's kernels)`` of the
    convolution ``c`` (a :class:`~fastane.lower.Conv`): fp16 weights, or ``c.kernel_bits``-bit
    codes after a palette, or an int8/uint8 kernel's bytes (``c.kernel_int8``: one a weight, no
    prefix).  What the tiler sizes a core's KMem by and the emitter lays out."""
    n = c.cin_g * c.kh * c.kw
    if c.kernel_int8:
        return n, 0
    fmt = _palette.Palettized(c.kernel_bits) if c.kernel_bits else 2
    return _palette.channel_bytes(fmt, n), _palette.prefix_bytes(fmt)


def td_fields(lay, bits: int) -> dict:
    """The TD fields of a palettized kernel group: ``PalettizedEn``/``Bits`` and every lane's
    buffer size (the template's are the fp16 layout's)."""
    fields = {"NE.KernelCfg.PalettizedEn": 1, "NE.KernelCfg.PalettizedBits": bits}
    rest = lay.wbytes + lay.bbytes
    for k in range(16):
        fields[f"KernelDMASrc.CoeffBfrSize[{k}].MemBfrSize"] = (lay.sizes[0] if k == 0 else rest) >> 6
    return fields


def pack(low, raw: np.ndarray, weight: PalettizedWeight, bias=None) -> None:
    """:meth:`fastane.lower.Lowered.pack` for a palettized weight: every kernel group's
    cores get the palette, their channels' codes, the biases and the LUT block."""
    c = low.conv
    per = c.cin_g * c.kh * c.kw
    codes = np.asarray(weight.codes).reshape(c.cout, c.cin_g, c.kh, c.kw)
    b = None if bias is None else fp16_operand(bias, "pack", "bias").reshape(-1)
    block = low.stage.block.to_bytes() if low.stage.lut else None
    for g in low.groups:
        lay = g.layout
        part, _ = _palette.pack(
            codes[g.co0 : g.co0 + g.cout],
            weight.palette,
            weight.bits,
            bias=None if b is None else b[g.co0 : g.co0 + g.cout],
            lut=block,
        )
        assert len(part) == lay.nbytes and lay.per_channel == _palette.channel_bytes(
            _palette.Palettized(weight.bits), per
        )
        raw[g.offset : g.offset + len(part)] = np.frombuffer(part, np.uint8)
    if low.stage.gate is not None:  # the table of the elementwise LUT task
        off = low.lut_offset
        raw[off : off + LUT_BLOCK] = np.frombuffer(low.stage.gate.to_bytes(), np.uint8)
