"""Lowered programs: the TDs of a call with their buffer plan, and how the call's input,
weights and output sit in the BAR slots (:class:`Lowered` for a convolution,
:class:`LoweredEltwise` for an activation).  docs/lower.md, sections 4 and 9.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..m1 import LUT_BLOCK, KernelLayout
from ..operands import fp16_operand
from ..td import Program
from . import compressed as _compressed
from .bind import Bound
from .problems import Conv, Eltwise, NEStage
from .tiler import Tiling

__all__ = [
    "KernelGroup",
    "Lowered",
    "LoweredEltwise",
    "SLOT_TD",
    "SLOT_KERNEL",
    "SLOT_INTERMEDIATE",
    "SLOT_OUTPUT",
    "SLOT_INPUT",
]

#: BAR slots of a lowered program (SPEC 6's convention: 0 TDs, 1 kernel, 4.. outputs, then
#: inputs; 3 an elementwise program's intermediate tensor, silu's sigmoid (hard_swish's
#: gate), as in Apple's activation/silu.bin)
SLOT_TD, SLOT_KERNEL, SLOT_INTERMEDIATE, SLOT_OUTPUT, SLOT_INPUT = 0, 1, 3, 4, 5


class Programs(Bound):
    """What both kinds of lowered program share: their chains and BAR plan, and the
    programs with their kernel bytes filled in.  A subclass has ``programs``,
    ``kernel_bytes`` and ``pack(raw, weight, bias)``."""

    @property
    def program(self) -> Program:
        """The (first) program: ``fastane disasm`` prints ``program.to_bytes()``."""
        return self.programs[0]

    @property
    def bars(self) -> dict:
        return self.programs[0].bars

    def with_weights(self, weight=None, bias=None) -> list:
        """The programs with their kernel bytes (weights, biases, LUT block) filled in, as
        standalone :class:`~fastane.td.Program` objects (``Program.to_bytes()`` gives the
        corpus ``.bin`` layout).  A one-tile program runs with ``Device.run(program,
        {SLOT_INPUT: x})``; a tiled one through :func:`~fastane.lower.execute`, which knows
        every tile."""
        raw = np.zeros(self.kernel_bytes, np.uint8)
        self.pack(raw, weight, bias)
        kernel = raw.tobytes()
        return [dataclasses.replace(p, kernel=kernel) for p in self.programs]


@dataclass(frozen=True)
class KernelGroup:
    """One kernel group: its output channels, input channels and place in the kernel slot."""

    co0: int
    cout: int
    ci0: int
    cin: int
    groups: int
    offset: int
    layout: KernelLayout


@dataclass(eq=False)
class Lowered(Programs):
    """A convolution lowered to TDs: the program(s), the buffer plan, and how to fill it.

    ``programs`` are chains of at most :data:`fastane.m1.MAX_CHAIN` TDs (usually one), run in order;
    ``tasks`` describes every TD (one row per task: image, kernel group, tile); the
    input, output and kernel BAR slots hold ``in_layout``, ``out_layout`` and
    ``kernel_bytes`` bytes.
    """

    conv: Conv  # the call
    eff: Conv  # what the TDs compute (after padding/unfolding)
    tiling: Tiling
    stage: NEStage
    groups: list  # KernelGroup
    tasks: np.ndarray  # structured: n, k, oy0, th, r0, rows, padt, ox0, tw, c0, cols, padl
    programs: list  # Program
    in_layout: object  # AneLayout of eff's input (N, Cin, H, W)
    out_layout: object  # AneLayout of the output (N, Cout, Hout, Wout)
    kernel_bytes: int

    @property
    def n_tasks(self) -> int:
        """TDs of the program(s): one per row of ``tasks``, plus the chain after each
        (sigmoid, silu, hard_swish)."""
        return len(self.tasks) * self.tds_per_task

    @property
    def tds_per_task(self) -> int:
        """TDs per row of ``tasks``: the convolution, then its planar chain."""
        return 1 + self.stage.post_tasks

    @property
    def lut_offset(self) -> int:
        """Where the separate LUT task of silu or hard_swish finds its gate's block in the
        kernel slot (after every kernel group)."""
        return self.groups[-1].offset + self.groups[-1].layout.nbytes if self.groups else 0

    def buffer_sizes(self) -> dict:
        """Bytes of the BAR slots a run binds: ``{slot: bytes}``."""
        return {
            SLOT_INPUT: self.in_layout.nbytes,
            SLOT_OUTPUT: self.out_layout.nbytes,
            SLOT_KERNEL: self.kernel_bytes,
        }

    def describe(self) -> str:
        c = self.conv
        post = (
            f", then {self.stage.post_tasks} planar-chain TDs each ({self.stage.post})"
            if self.stage.post
            else ""
        )
        return (
            f"conv {c.cin}x{c.h}x{c.w} -> {c.cout}x{c.hout}x{c.wout} (k {c.kh}x{c.kw}, "
            f"s {c.stride}, g {c.groups}, n {c.n}): {self.n_tasks} tasks, "
            f"{self.tiling.describe()}{post}"
        )

    # -------------------------------------------------------------- data placement
    def input_view(self, raw: np.ndarray) -> np.ndarray:
        """The call's input ``(N, Cin, H, W)`` as a view into the input slot's bytes
        (direct and padded modes; the padded border stays zero)."""
        v = self.in_layout.view(raw)
        if self.tiling.mode == "padded":
            (pt, pb), (pl, pr) = self.conv.pad
            v = v[:, :, pt : pt + self.conv.h, pl : pl + self.conv.w]
        elif self.tiling.mode == "im2col":
            raise TypeError("an unfolded (im2col) program has no view of the original input")
        return v

    def write_input(self, raw: np.ndarray, x) -> None:
        """Write the call's input ``x`` (N, Cin, H, W; any strides) into the slot bytes."""
        if self.tiling.mode != "im2col":
            self.input_view(raw)[...] = x
            return
        c = self.conv
        lay = self.in_layout
        v = np.ndarray(
            (c.n, c.cin, c.kh, c.kw, c.hout, c.wout),
            np.float16,
            buffer=raw,
            strides=(
                lay.batch_stride,
                c.kh * c.kw * lay.plane_stride,
                c.kw * lay.plane_stride,
                lay.plane_stride,
                2 * c.wout,
                2,
            ),
        )
        (pt, pb), (pl, pr) = c.pad
        xp = np.zeros((c.n, c.cin, c.h + pt + pb, c.w + pl + pr), np.float16)
        xp[:, :, pt : pt + c.h, pl : pl + c.w] = x
        sy, sx = c.stride
        dy, dx = c.dilation
        for ky in range(c.kh):
            for kx in range(c.kw):
                y0, x0 = ky * dy, kx * dx
                v[:, :, ky, kx] = xp[
                    :, :, y0 : y0 + (c.hout - 1) * sy + 1 : sy, x0 : x0 + (c.wout - 1) * sx + 1 : sx
                ]

    def output_view(self, raw: np.ndarray) -> np.ndarray:
        """The output ``(N, Cout, Hout, Wout)`` as a view into the output slot's bytes."""
        if self.tiling.mode == "im2col":  # Hout x Wout pixels in one row of each plane
            c, lay = self.conv, self.out_layout
            return np.ndarray(
                (c.n, c.cout, c.hout, c.wout),
                np.float16,
                buffer=raw,
                strides=(lay.batch_stride, lay.plane_stride, 2 * c.wout, 2),
            )
        return self.out_layout.view(raw)

    def pack(self, raw: np.ndarray, weight, bias=None) -> None:
        """Write the weights ``(Cout, Cin/groups, Kh, Kw)`` (fp16; any strides), the bias
        ``(Cout,)`` and the LUT block into the kernel slot bytes, as every task's KernelDMA
        lanes expect them (:class:`~fastane.m1.KernelLayout`); a palettized weight stays
        compressed (:func:`fastane.lower.compressed.pack`)."""
        if isinstance(weight, _compressed.PalettizedWeight):
            return _compressed.pack(self, raw, weight, bias)
        per = self.eff.cin_g * self.eff.kh * self.eff.kw
        w2 = fp16_operand(weight, "pack", "weight").reshape(self.conv.cout, per)  # one rounding
        k16 = raw[: self.kernel_bytes].view(np.float16)
        block = None
        if self.stage.lut:
            block = np.frombuffer(self.stage.block.to_bytes(), np.float16)
        b = None if bias is None else fp16_operand(bias, "pack", "bias").reshape(-1)
        for g in self.groups:
            lay = g.layout
            m, L = lay.m, lay.lanes
            base = g.offset // 2
            rest = (lay.wbytes + lay.bbytes) // 2
            first = lay.sizes[0] // 2
            src = w2[g.co0 : g.co0 + g.cout]
            full = g.cout // m  # lanes holding m channels
            lane = np.ndarray((m, per), np.float16, buffer=k16, offset=2 * base, strides=(2 * per, 2))
            lane[: min(m, g.cout)] = src[:m]
            if full > 1:
                lanes = np.ndarray(
                    (full - 1, m, per),
                    np.float16,
                    buffer=k16,
                    offset=2 * (base + first),
                    strides=(2 * rest, 2 * per, 2),
                )
                lanes[...] = src[m : full * m].reshape(full - 1, m, per)
            if L > max(full, 1):  # a last lane with fewer channels
                off = base + first + (L - 2) * rest
                k16[off : off + (g.cout - (L - 1) * m) * per] = src[(L - 1) * m :].reshape(-1)
            if b is not None:
                bb = b[g.co0 : g.co0 + g.cout]
                woff = lay.wbytes // 2
                k16[base + woff : base + woff + min(m, g.cout)] = bb[:m]
                for ln in range(1, L):
                    off = base + first + (ln - 1) * rest + woff
                    part = bb[ln * m : (ln + 1) * m]
                    k16[off : off + part.size] = part
            if block is not None:
                off = base + (lay.wbytes + lay.bbytes) // 2
                k16[off : off + LUT_BLOCK // 2] = block
        if self.stage.gate is not None:  # the table of the elementwise LUT task
            off = self.lut_offset // 2
            k16[off : off + LUT_BLOCK // 2] = np.frombuffer(self.stage.gate.to_bytes(), np.float16)

    def pack_lut(self, raw: np.ndarray) -> None:
        """Write only the LUT blocks (where :meth:`pack` puts them): a stats-only run
        moves no weights, but the device checks every LUT block while planning."""
        k16 = raw[: self.kernel_bytes].view(np.float16)
        if self.stage.lut:
            block = np.frombuffer(self.stage.block.to_bytes(), np.float16)
            for g in self.groups:
                off = g.offset // 2 + (g.layout.wbytes + g.layout.bbytes) // 2
                k16[off : off + LUT_BLOCK // 2] = block
        if self.stage.gate is not None:
            off = self.lut_offset // 2
            k16[off : off + LUT_BLOCK // 2] = np.frombuffer(self.stage.gate.to_bytes(), np.float16)


@dataclass(eq=False)
class LoweredEltwise(Programs):
    """An activation lowered to elementwise TDs (see :func:`~fastane.lower.run_eltwise`).

    The ``n`` elements sit flat and dense in the input slot (and likewise in the output
    and intermediate slots): the tasks see them as ``(1, 1, rows, width)`` tiles of
    ``width``-element rows (a multiple of 32 when there are several rows, so every row
    is whole 64-byte bursts and every tile starts on one), plus, when ``width`` does not
    divide ``n``, one ``(1, 1, 1, rem)`` tile for the rest.  Each tile runs the chain of
    ``tds_per_tile`` TDs; ``tiles`` lists ``(first element, rows, width)``.
    """

    op: Eltwise
    stage: NEStage
    block: object  # the LUT block the NE task reads (None: relu / identity)
    width: int
    rows: int
    rem: int
    tiles: list
    tds_per_tile: int
    programs: list
    nbytes: int  # bytes of the input, output (and intermediate) slots
    kernel_bytes: int

    @property
    def n_tasks(self) -> int:
        return len(self.tiles) * self.tds_per_tile

    def describe(self) -> str:
        shape = f"{self.rows} x {self.width}" + (f" + {self.rem}" if self.rem else "")
        return (
            f"{self.stage.name} on {self.op.n} elements ({shape}): {self.n_tasks} tasks, "
            f"{len(self.tiles)} tiles of {self.tds_per_tile} TD(s)"
        )

    def buffer_sizes(self) -> dict:
        sizes = {SLOT_INPUT: self.nbytes, SLOT_OUTPUT: self.nbytes, SLOT_KERNEL: self.kernel_bytes}
        if self.stage.gate is not None:
            sizes[SLOT_INTERMEDIATE] = self.nbytes
        return sizes

    def input_view(self, raw: np.ndarray) -> np.ndarray:
        """The ``n`` input elements (flat fp16) as a view of the input slot's bytes."""
        return raw[: 2 * self.op.n].view(np.float16)

    def write_input(self, raw: np.ndarray, x) -> None:
        x = np.asarray(x)
        self.input_view(raw).reshape(x.shape)[...] = x

    def output_view(self, raw: np.ndarray) -> np.ndarray:
        return raw[: 2 * self.op.n].view(np.float16)

    def pack(self, raw: np.ndarray, weight=None, bias=None) -> None:
        """Write the LUT block where the NE task's KernelDMA lane 0 reads it (slot offset 0)."""
        if self.block is not None:
            raw[:LUT_BLOCK] = np.frombuffer(self.block.to_bytes(), np.uint8)

    def pack_lut(self, raw: np.ndarray) -> None:
        self.pack(raw)
