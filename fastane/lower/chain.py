"""Residency: a chain of convolutions lowered as a whole, each intermediate kept in L2
as the next layer's source when it fits (docs/lower.md, section 10).

:func:`build_chain` takes a list of :class:`~fastane.lower.Conv` where each one's input is
the previous one's output, lowers every layer as :func:`~fastane.lower.build` does (the
one tiler), and then decides, link by link, whether the intermediate stays on chip:

* the producer is **one task** (one kernel group, one tile) whose NE stage is one stage
  (no sigmoid/silu planar chain), so its whole result can be kept: ``ResultType`` = 3
  (L2), TileDMADst off;
* the consumer runs in ``direct`` mode (no padding materialized in DRAM, no im2col), has
  one row/column tile, and every task reads every input channel (no conv groups split
  across tasks), so each of its tasks reads the whole kept tensor: ``SourceType`` = 3,
  TileDMASrc off, ``SourceBase`` = where the producer kept it;
* the kept tensor and the consumer's result (kept whole when it is itself a producer,
  else its TileHeight rows of staging) fit the 2 MiB L2 at disjoint addresses.

Links that fail a condition go through DRAM, as before.  The layers between two DRAM
links form a **segment**: one program (a :class:`ChainSegment`: every layer's weights in
one kernel slot at 64-byte aligned offsets, the segment's input and output in the input
and output slots), run by :func:`~fastane.lower.execute` like any lowered program.  The
device checks every L2 address and shape (``fastane/device/l2.py``), so a wrong plan is a
fault, not a silent result; the values are the same as the DRAM round trip (the
intermediate is the NE stage's fp16 output either way).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..m1 import ALIGN, L2_UNIT, LIMITS, Limits, round_up
from ..td import BarSlot
from .cache import build
from .emit import COEFF_BASE, task_chains
from .lowered import SLOT_INPUT, SLOT_KERNEL, SLOT_OUTPUT, SLOT_TD, Lowered, Programs
from .problems import Conv

__all__ = [
    "ChainSegment",
    "LoweredChain",
    "build_chain",
    "execute_chain",
    "link_reason",
    "runs",
    "plan_chain",
]


def _l2_tensor(c: int, h: int, w: int) -> int:
    """Bytes a (c, h, w) fp16 tensor takes in L2 (16-byte channel rows)."""
    return c * h * round_up(2 * w, L2_UNIT)


def _single_tile(low: Lowered) -> bool:
    t = low.tasks
    c = low.eff
    return bool(
        np.all(t["r0"] == 0)
        and np.all(t["rows"] == c.h)
        and np.all(t["c0"] == 0)
        and np.all(t["cols"] == c.w)
        and np.all(t["th"] == c.hout)
        and np.all(t["tw"] == c.wout)
    )


def link_reason(a: Lowered, b: Lowered) -> str | None:
    """Why the output of ``a`` cannot stay in L2 as the source of ``b`` (None: it can,
    capacity aside; :func:`build_chain` also checks the L2 addresses)."""
    ca, cb = a.conv, b.conv
    if (ca.n, ca.cout, ca.hout, ca.wout) != (cb.n, cb.cin, cb.h, cb.w) or ca.n != 1:
        return "the shapes do not chain (or batch > 1)"
    if len(a.tasks) != 1 or a.stage.post or a.tiling.mode == "im2col":
        return "the producer is more than one task (its result is split)"
    if b.tiling.mode != "direct" or b.stage.post:
        return f"the consumer runs in {b.tiling.mode} mode"
    if not _single_tile(b):
        return "the consumer is tiled spatially"
    if any(g.ci0 != 0 or g.cin != cb.cin for g in b.groups):
        return "the consumer's tasks read part of the input channels"
    return None


@dataclass(eq=False)
class ChainSegment(Programs):
    """Layers ``first .. first + len(layers) - 1`` of a chain, their intermediates in L2:
    one program (or several of at most MAX_CHAIN TDs, split between layers only where no
    intermediate is in L2).  Runs with :func:`~fastane.lower.execute` (``weight``: the
    list of per-layer weights, ``bias``: the list of per-layer biases or None)."""

    layers: list  # Lowered per layer
    first: int
    offsets: list  # byte offset of each layer's kernel bytes in the kernel slot
    programs: list
    kernel_bytes: int
    tasks_per_layer: list  # TDs of each layer, in order
    resident: list  # per link inside the segment: (L2 byte address, bytes)

    @property
    def in_layout(self):
        return self.layers[0].in_layout

    @property
    def out_layout(self):
        return self.layers[-1].out_layout

    def buffer_sizes(self) -> dict:
        return {
            SLOT_INPUT: self.layers[0].in_layout.nbytes,
            SLOT_OUTPUT: self.layers[-1].out_layout.nbytes,
            SLOT_KERNEL: self.kernel_bytes,
        }

    def input_view(self, raw):
        return self.layers[0].input_view(raw)

    def write_input(self, raw, x) -> None:
        self.layers[0].write_input(raw, x)

    def output_view(self, raw):
        return self.layers[-1].output_view(raw)

    def pack(self, raw: np.ndarray, weight, bias=None) -> None:
        bias = bias if bias is not None else [None] * len(self.layers)
        for low, off, w, b in zip(self.layers, self.offsets, weight, bias):
            low.pack(raw[off : off + low.kernel_bytes], w, b)

    def pack_lut(self, raw: np.ndarray) -> None:
        """Each layer's LUT blocks only (a stats-only run: see :meth:`Lowered.pack_lut`)."""
        for low, off in zip(self.layers, self.offsets):
            low.pack_lut(raw[off : off + low.kernel_bytes])


@dataclass(eq=False)
class LoweredChain:
    """A chain of convolutions lowered as a whole: ``segments`` (each a
    :class:`ChainSegment`), ``links[i]`` = None when layer i's output stays in L2 for layer
    i + 1, else why it goes through DRAM."""

    convs: list
    layers: list  # Lowered per layer
    segments: list
    links: list

    @property
    def resident_links(self) -> int:
        return sum(r is None for r in self.links)

    def describe(self) -> str:
        return (
            f"chain of {len(self.layers)} layers: {len(self.segments)} programs, "
            f"{self.resident_links} of {len(self.links)} intermediates kept in L2"
        )


def _rebase_kernels(td, low: Lowered, k: int, offset: int) -> None:
    lay = low.groups[k].layout
    for lane in range(len(lay.offsets)):
        td[COEFF_BASE[lane]] = td[COEFF_BASE[lane]] + offset // ALIGN


def _segment(layers: list, first: int, lim: Limits) -> ChainSegment:
    """One program of ``layers`` whose links all stay in L2 (already checked)."""
    if len(layers) == 1:  # a layer alone: its own programs, as build made them
        low = layers[0]
        return ChainSegment(layers, first, [0], low.programs, low.kernel_bytes, [low.n_tasks], [])
    offsets, off = [], 0
    for low in layers:
        offsets.append(off)
        off += round_up(low.kernel_bytes, ALIGN)
    tds, per_layer, resident = [], [], []
    src_addr, src_bytes = None, 0  # where this layer's source sits in L2 (None: DRAM)
    for j, low in enumerate(layers):
        keep = j + 1 < len(layers)
        c = low.eff
        out_bytes = _l2_tensor(c.cout, c.hout, c.wout)
        layer_tds = []
        for k, td in zip(low.tasks["k"].tolist(), [t for p in low.programs for t in p.tds]):
            td = td.copy()
            _rebase_kernels(td, low, k, offsets[j])
            if src_addr is not None:
                td.update(
                    {
                        "L2.SourceCfg.SourceType": 3,
                        "L2.SourceBase.Addr": src_addr // L2_UNIT,
                        "TileDMASrc.DMAConfig.En": 0,
                        "Header.RBase0": 0,
                        "Header.RBE0": 0,
                    }
                )
                staging = (
                    out_bytes if keep else c.cout * int(low.tasks["th"].max()) * round_up(2 * c.wout, L2_UNIT)
                )
                res = 0 if staging <= src_addr else round_up(src_addr + src_bytes, L2_UNIT)
                td["L2.ResultBase.Addr"] = res // L2_UNIT
            if keep:
                td.update(
                    {
                        "L2.ResultCfg.ResultType": 3,
                        "Header.WBase": 0,
                        "Header.WBE": 0,
                        "TileDMADst.DMAConfig.En": 0,
                    }
                )
            layer_tds.append(td)
        if keep:
            addr = layer_tds[0]["L2.ResultBase.Addr"] * L2_UNIT
            resident.append((addr, out_bytes))
            src_addr, src_bytes = addr, out_bytes
        tds += layer_tds
        per_layer.append(len(layer_tds))
    kernel_bytes = max(off, ALIGN)
    bars = {
        SLOT_TD: None,
        SLOT_KERNEL: BarSlot(SLOT_KERNEL, "kernel", kernel_bytes, "weights"),
        SLOT_OUTPUT: BarSlot(SLOT_OUTPUT, "output", layers[-1].out_layout.nbytes, "y"),
        SLOT_INPUT: BarSlot(SLOT_INPUT, "input", layers[0].in_layout.nbytes, "x"),
    }
    if len(tds) > lim.max_chain:
        raise ValueError("a resident segment exceeds one chain")  # build_chain prevents it
    programs = task_chains(tds, 1, dict(sorted(bars.items())), f"chain{first}-{first + len(layers) - 1}", lim)
    return ChainSegment(layers, first, offsets, programs, kernel_bytes, per_layer, resident)


def _fits(a: Lowered, b: Lowered, b_keeps: bool, src_addr_a: int | None, lim: Limits) -> bool:
    """Whether a's whole result kept in L2 and b's result fit at disjoint addresses."""
    ca, cb = a.eff, b.eff
    kept = _l2_tensor(ca.cout, ca.hout, ca.wout)
    if src_addr_a is None:  # a reads DRAM: its result sits after its source window
        addr = _l2_tensor(ca.cin, ca.h, ca.w)
    else:
        addr = 0 if kept <= src_addr_a else round_up(src_addr_a + _l2_tensor(ca.cin, ca.h, ca.w), L2_UNIT)
    if addr + kept > lim.l2_bytes:
        return False
    th = int(b.tasks["th"].max())
    res = _l2_tensor(cb.cout, cb.hout if b_keeps else th, cb.wout)
    b_addr = 0 if res <= addr else addr + kept
    return b_addr + res <= lim.l2_bytes


def build_chain(convs, limits: Limits = LIMITS, resident: bool = True) -> LoweredChain:
    """Lower ``convs`` (each one's input is the previous one's output) as a whole,
    keeping intermediates in L2 where they fit (``resident=False``: every intermediate
    through DRAM, one segment per layer, the layer-by-layer lowering)."""
    convs = list(convs)
    if not convs:
        raise ValueError("a chain needs at least one convolution")
    for i, c in enumerate(convs):
        if not isinstance(c, Conv):
            raise TypeError(f"layer {i} of the chain is {type(c).__name__}, not a fastane.lower.Conv")
    layers = [build(c, limits) for c in convs]
    links = []
    for i in range(len(layers) - 1):
        a, b = layers[i], layers[i + 1]
        ca, cb = a.conv, b.conv
        if (ca.n, ca.cout, ca.hout, ca.wout) != (cb.n, cb.cin, cb.h, cb.w):
            raise ValueError(
                f"layer {i + 1} reads {(cb.n, cb.cin, cb.h, cb.w)}, layer {i} writes "
                f"{(ca.n, ca.cout, ca.hout, ca.wout)}: not a chain"
            )
        links.append(link_reason(a, b) if resident else "residency off")
    # a segment (one program) holds at most one chain of TDs: break links where it would not
    count = layers[0].n_tasks
    for i in range(1, len(layers)):
        if links[i - 1] is None and count + layers[i].n_tasks > limits.max_chain:
            links[i - 1] = "the segment would exceed one chain of TDs"
        count = count + layers[i].n_tasks if links[i - 1] is None else layers[i].n_tasks
    # capacity and addresses, walking the chain (a kept result's address depends on its
    # source; breaking a link only frees L2, so earlier decisions stay valid)
    src_addr = None
    for i in range(len(links)):
        if links[i] is None:
            b_keeps = i + 1 < len(links) and links[i + 1] is None
            if not _fits(layers[i], layers[i + 1], b_keeps, src_addr, limits):
                links[i] = "the intermediate and the next layer's result do not fit L2 together"
        if links[i] is None:
            ca = layers[i].eff
            kept = _l2_tensor(ca.cout, ca.hout, ca.wout)
            src_addr = (
                _l2_tensor(ca.cin, ca.h, ca.w)
                if src_addr is None
                else 0
                if kept <= src_addr
                else round_up(src_addr + _l2_tensor(ca.cin, ca.h, ca.w), L2_UNIT)
            )
        else:
            src_addr = None
    segments, start = [], 0
    for i in range(1, len(layers) + 1):
        if i == len(layers) or links[i - 1] is not None:
            segments.append(_segment(layers[start:i], start, limits))
            start = i
    return LoweredChain(convs, layers, segments, links)


def execute_chain(
    chain: LoweredChain, x=None, weights=None, biases=None, *, device=None, stats_only: bool | None = None
):
    """Run a :class:`LoweredChain`: ``(output, [Stats per segment])``.  ``x`` the first
    layer's input, ``weights``/``biases`` one per layer (biases may be None).  Each
    segment's output is the next one's input (through the host: a DRAM link)."""
    from .runtime import execute

    n = len(chain.layers)
    weights = list(weights) if weights is not None else [None] * n
    biases = list(biases) if biases is not None else [None] * n
    if len(weights) != n or len(biases) != n:
        raise ValueError(f"a chain of {n} layers needs {n} weights and {n} biases (or None)")
    stats, y = [], x
    for seg in chain.segments:
        sl = slice(seg.first, seg.first + len(seg.layers))
        y, st = execute(seg, y, weights[sl], biases[sl], device=device, stats_only=stats_only)
        stats.append(st)
    return y, stats


def runs(links) -> list:
    """The runs of layers joined by links: ``links[i]`` true when layer ``i + 1`` reads
    layer ``i``'s output (and may chain with it); ``[(start, stop)]`` of every run of two
    layers or more, in order."""
    out, start = [], 0
    n = len(links) + 1
    for i in range(1, n + 1):
        if i == n or not links[i - 1]:
            if i - start > 1:
                out.append((start, i))
            start = i
    return out


def plan_chain(convs, limits: Limits = LIMITS) -> list:
    """``convs`` lowered as one chain (:func:`build_chain`) and counted on the stats-only
    device: per layer ``(tasks, source_in_l2, result_in_l2)``, its per-task Stats and
    whether its source / result stayed in L2.  Raises what :func:`build_chain` raises
    (``ValueError`` when the shapes do not chain, ``NotImplementedError``/``MemoryError``
    past the lowering's limits)."""
    from .runtime import stats_device

    ch = build_chain(convs, limits)
    _, stats = execute_chain(ch, device=stats_device(), stats_only=True)
    out = []
    for seg, st in zip(ch.segments, stats):
        tasks = list(st.tasks_detail)
        for j, n in enumerate(seg.tasks_per_layer):
            i = seg.first + j
            src = i > 0 and ch.links[i - 1] is None
            res = i < len(ch.links) and ch.links[i] is None
            out.append((tasks[:n], src, res))
            tasks = tasks[n:]
    return out
