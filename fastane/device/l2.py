"""The shared 2 MiB L2 (tile memory): capacity model and results kept for the next task.

**Decisions** (the L2's internals are not public; these are fastane's model):

* ``L2.SourceBase``/``ResultBase`` and the L2 strides are in 16-byte units (17-bit
  fields: exactly 2 MiB of address space).
* The hardware streams a task through L2 in tiles of ``Common.TileCfg.TileHeight`` output
  rows and in vertical strips of ``SourceChannelStride x 16`` bytes per channel row.  A
  task's L2 *working set* is therefore:

  - source: ``rows_in x SourceRowStride x 16`` bytes at ``SourceBase``, with
    ``rows_in = min(Hin, (TileHeight - 1) x Sy + (Kh - 1) x dy + 1)``;
  - result: ``rows x row_bytes`` at ``ResultBase``, where ``row_bytes`` is
    ``ConvResultRowStride x 16`` or, when 0, ``Cout`` channel rows of the source strip
    width; ``rows`` is ``TileHeight``, or all ``Hout`` rows when the result stays in L2.

  Zero strides fall back to the dense layout (channel rows padded to 16 bytes).  Both
  ranges must end inside 2 MiB, else :class:`L2Overflow`.
* ``SourceType``: 2 = the source comes from DRAM through TileDMASrc; 3 = it is the
  result an earlier task left in L2 at ``SourceBase`` (reading an address no task wrote,
  or a tensor of another shape, is an :class:`L2Fault`).  ``ResultType``: 2 = the result
  goes to DRAM through TileDMADst; 3 = it stays in L2 at ``ResultBase`` (and displaces
  whatever it overlaps).  Type 0 (source and result) is an L2 *vector*: the compact
  layout the corpus's softmax/norm chains use for one value per row (16- or 32-byte row
  strides); functionally it is the same as 3, a tensor kept at an L2 address.  A planar
  task may read a ``(1, C, H, 1)`` vector as a ``(1, C, H, W)`` operand broadcast along
  the row (``Common.Broadcast.Src0``), and a planar row reduction keeps a
  ``(1, 1, NumGroups, 1)`` vector, group g at ``ResultBase + g x ResultGroupStride``.
  Type 1 never occurs in the corpus and is not emulated (:class:`UnsupportedTask`).
* Functionally, fastane keeps each resident result as a whole tensor keyed by its L2
  address; the bytes-level streaming is not needed for the values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..m1 import L2_BYTES, L2_UNIT, round_up
from .faults import L2Fault, L2Overflow, UnsupportedTask

VECTOR, DRAM, L2 = 0, 2, 3
SOURCE_TYPES = {VECTOR: "L2 vector", DRAM: "DRAM", L2: "L2"}
#: the types whose data stays in L2
IN_L2 = (VECTOR, L2)


@dataclass(frozen=True)
class L2Plan:
    source_type: int
    result_type: int
    source: tuple  # (L2 byte address, bytes) of the source working set
    result: tuple  # (L2 byte address, bytes) of the result working set
    shape_in: tuple
    shape_out: tuple


def _check(what: str, name: str, addr: int, nbytes: int):
    if addr + nbytes > L2_BYTES:
        raise L2Overflow(
            f"{what}: the {name} working set [{addr:#x}, {addr + nbytes:#x}) does not "
            f"fit the {L2_BYTES >> 20} MiB L2",
            addr=addr,
            nbytes=nbytes,
        )


def plan(regs: dict, conv, in_bytes: int, out_bytes: int, resident: dict, what: str) -> L2Plan:
    """Check a task's L2 use against capacity and against the results resident in L2.

    ``conv`` carries the task's geometry (cin, hin, win, cout, hout, wout, kh, sy, dy);
    ``resident`` maps L2 address -> (shape, bytes) of results left by earlier tasks.
    """
    st, rt = regs["L2.SourceCfg.SourceType"], regs["L2.ResultCfg.ResultType"]
    if st not in SOURCE_TYPES:
        raise UnsupportedTask(
            f"{what}: L2.SourceCfg.SourceType = {st} is not emulated "
            f"(2 = DRAM via TileDMASrc, 3 = a result kept in L2, 0 = an L2 "
            f"vector)",
            source_type=st,
        )
    if rt not in SOURCE_TYPES:
        raise UnsupportedTask(
            f"{what}: L2.ResultCfg.ResultType = {rt} is not emulated "
            f"(2 = DRAM via TileDMADst, 3 = keep in L2, 0 = an L2 vector)",
            result_type=rt,
        )
    tile = regs["Common.TileCfg.TileHeight"] or conv.hout
    ch_stride = regs["L2.SourceChannelStride.Stride"] * L2_UNIT
    strip = min(conv.win, ch_stride // in_bytes) if ch_stride else conv.win
    src_row = regs["L2.SourceRowStride.Stride"] * L2_UNIT or conv.cin * round_up(strip * in_bytes, L2_UNIT)
    rows_in = min(conv.hin, (min(tile, conv.hout) - 1) * conv.sy + (conv.kh - 1) * conv.dy + 1)
    source = (regs["L2.SourceBase.Addr"] * L2_UNIT, rows_in * src_row)
    res_row = regs["L2.ConvResultRowStride.Stride"] * L2_UNIT or conv.cout * round_up(
        min(conv.wout, strip) * out_bytes, L2_UNIT
    )
    rows_out = conv.hout if rt in IN_L2 else min(tile, conv.hout)
    result = (regs["L2.ResultBase.Addr"] * L2_UNIT, rows_out * res_row)
    shape_out = (1, conv.cout, conv.hout, conv.wout)
    groups = getattr(conv, "reduce_groups", 0)  # a planar row reduction: one value per group
    if groups:
        if rt not in IN_L2:
            raise UnsupportedTask(
                f"{what}: a row reduction with ResultType = {rt}: every corpus "
                f"reduction keeps its values in L2 (type 0); their DRAM layout is "
                f"unknown",
                result_type=rt,
            )
        step = regs.get("L2.ResultGroupStride.Stride", 0) * L2_UNIT or L2_UNIT
        result = (result[0], groups * step)
        shape_out = (1, 1, groups, 1)
    _check(what, "source", *source)
    _check(what, "result", *result)
    shape_in = (1, conv.cin, conv.hin, conv.win)
    if st in IN_L2:
        held = resident.get(source[0])
        if held is None:
            raise L2Fault(
                f"{what}: SourceType = {st} reads L2 at {source[0]:#x}, where no earlier task left a result",
                addr=source[0],
            )
        ok = {shape_in}
        if getattr(conv, "src_broadcast", False):
            ok.add(shape_in[:3] + (1,))
        if held[0] not in ok:
            raise L2Fault(
                f"{what}: the result in L2 at {source[0]:#x} is {held[0]}, the task reads "
                f"{' or '.join(map(str, sorted(ok)))}",
                addr=source[0],
            )
    return L2Plan(st, rt, source, result, shape_in, shape_out)


def keep(resident: dict, addr: int, shape: tuple, nbytes: int, value=None) -> None:
    """Record a result kept at ``addr``; results it overlaps are displaced."""
    end = addr + max(nbytes, 1)
    for other in [a for a, (_, n, _v) in resident.items() if a < end and addr < a + max(n, 1)]:
        del resident[other]
    resident[addr] = (shape, nbytes, value)


class L2Memory:
    """The L2's functional state: results kept by tasks with ``ResultType = 3``."""

    def __init__(self):
        self.resident: dict[int, tuple] = {}  # address -> (shape, bytes, fp16 or float64 tensor)

    def shapes(self) -> dict:
        """``address -> (shape, bytes, None)``: what a chain validation starts from."""
        return {a: (s, n, None) for a, (s, n, _v) in self.resident.items()}

    def read(self, addr: int) -> np.ndarray:
        """The result kept at ``addr`` as float64 (the fp16 lane keeps fp16 tensors:
        decoded here, exactly, as the block path decodes its fp16 results)."""
        value = self.resident[addr][2]
        return value.astype(np.float64) if value.dtype == np.float16 else value

    def keep(self, addr: int, value: np.ndarray, nbytes: int) -> None:
        keep(self.resident, addr, value.shape, nbytes, value)

    def clear(self) -> None:
        self.resident.clear()
