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

A chain may end in a **tail**: a planar binary op (:class:`Tail`: a residual add, add +
ReLU, a multiply) whose one operand is the last convolution's result, tile by tile: each
task of that convolution keeps its output tile in L2 (``ResultType`` 3) and a planar task
right after it reads the tile there as source 0 (``SourceType`` 3), the matching tile of
the other operand (source 1, slot :data:`SLOT_OPERAND`) through TileDMASrc from DRAM, and
writes the tile of the result, in bands of ``TileHeight`` rows whose source-1 window and
result staging (and, with ReLU, the planar result the NE task reads) fit L2 beside the
kept tile (and the layer's source, when it is kept in L2 too).  The producer may be
several tasks (kernel groups, spatial tiles): only one tile is in L2 at a time.

Links that fail a condition go through DRAM, as before.  The layers between two DRAM
links form a **segment**: one program (a :class:`ChainSegment`: every layer's weights in
one kernel slot at 64-byte aligned offsets, the segment's input and output in the input
and output slots), run by :func:`~fastane.lower.execute` like any lowered program.  The
device checks every L2 address and shape (``fastane/device/l2.py``), so a wrong plan is a
fault, not a silent result; the values are the same as the DRAM round trip (the
intermediate is the NE stage's fp16 output either way).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from ..m1 import ALIGN, L2_UNIT, LIMITS, Limits, round_up
from ..operands import fp16_operand
from ..td import BarSlot
from ..td.asm_planar import eltwise_td
from .cache import build
from .emit import COEFF_BASE, task_chains
from .lowered import SLOT_INPUT, SLOT_KERNEL, SLOT_OUTPUT, SLOT_TD, Lowered, Programs
from .problems import Conv

__all__ = [
    "Tail",
    "TAIL_OPS",
    "SLOT_OPERAND",
    "ChainSegment",
    "LoweredChain",
    "build_chain",
    "execute_chain",
    "link_reason",
    "runs",
    "plan_chain",
]


#: the planar ops a chain's tail may be (fastane.td.asm_planar names)
TAIL_OPS = ("add", "mul")
#: the BAR slot of a tail's second operand (read from DRAM)
SLOT_OPERAND = 6


@dataclass(frozen=True)
class Tail:
    """A planar binary op after a chain's last convolution, of the same shape as its
    result: ``op`` (one of :data:`TAIL_OPS`) of that result (source 0) and an operand read
    from DRAM (source 1), then a ReLU (an NE task) when ``relu``."""

    op: str
    relu: bool = False

    def __post_init__(self):
        if self.op not in TAIL_OPS:
            raise ValueError(f"a chain's tail is one of {TAIL_OPS}, not {self.op!r}")


class _NoRoom(Exception):
    """The tail's windows do not fit L2 beside the kept result."""


class _TooLong(ValueError):
    """A resident segment's TDs exceed one chain (:attr:`Limits.max_chain`)."""


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


def _producer_reason(a: Lowered) -> str | None:
    """Why ``a``'s whole result cannot be kept in L2 (None: it can)."""
    if a.conv.n != 1:
        return "the shapes do not chain (or batch > 1)"
    if len(a.tasks) != 1 or a.stage.post or a.tiling.mode == "im2col":
        return "the producer is more than one task (its result is split)"
    return None


def _tail_reason(a: Lowered) -> str | None:
    """Why a tail cannot read ``a``'s result tile by tile in L2 (None: it can)."""
    if a.conv.n != 1:
        return "batch > 1"
    if a.stage.post or a.tiling.mode == "im2col":
        return f"the producer's tasks end in a planar chain or run in {a.tiling.mode} mode"
    return None


def link_reason(a: Lowered, b: Lowered) -> str | None:
    """Why the output of ``a`` cannot stay in L2 as the source of ``b`` (None: it can,
    capacity aside; :func:`build_chain` also checks the L2 addresses)."""
    ca, cb = a.conv, b.conv
    if (ca.n, ca.cout, ca.hout, ca.wout) != (cb.n, cb.cin, cb.h, cb.w):
        return "the shapes do not chain (or batch > 1)"
    if (why := _producer_reason(a)) is not None:
        return why
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
    list of per-layer weights, ``bias``: the list of per-layer biases or None,
    ``operand``: the tail's second operand)."""

    layers: list  # Lowered per layer
    first: int
    offsets: list  # byte offset of each layer's kernel bytes in the kernel slot
    programs: list
    kernel_bytes: int
    tasks_per_layer: list  # TDs of each layer, in order (then the tail's)
    resident: list  # per link inside the segment: (L2 byte address, bytes)
    tail: Tail | None = None  # a planar op after the last layer, reading its result in L2
    #: the layer (index in ``layers``; ``len(layers)``: the tail) of each TD, in order;
    #: None: ``tasks_per_layer`` TDs of each layer one after the other
    owners: list | None = None

    def td_layers(self) -> list:
        """The layer of each TD (index in ``layers``; ``len(layers)`` for the tail's)."""
        if self.owners is not None:
            return self.owners
        return [j for j, n in enumerate(self.tasks_per_layer) for _ in range(n)]

    @property
    def in_layout(self):
        return self.layers[0].in_layout

    @property
    def out_layout(self):
        return self.layers[-1].out_layout

    def buffer_sizes(self) -> dict:
        sizes = {
            SLOT_INPUT: self.layers[0].in_layout.nbytes,
            SLOT_OUTPUT: self.layers[-1].out_layout.nbytes,
            SLOT_KERNEL: self.kernel_bytes,
        }
        if self.tail is not None:
            sizes[SLOT_OPERAND] = self.layers[-1].out_layout.nbytes
        return sizes

    def input_view(self, raw):
        return self.layers[0].input_view(raw)

    def write_input(self, raw, x) -> None:
        self.layers[0].write_input(raw, x)

    def output_view(self, raw):
        return self.layers[-1].output_view(raw)

    def write_operand(self, raw: dict, b) -> None:
        """Write the tail's second operand ``b`` (the shape of the last layer's result,
        rounded once to fp16) into its slot of ``raw`` (slot -> bytes), in the result's
        layout: each tail task reads the operand's tile at the offset of its own."""
        if self.tail is None:
            raise ValueError("this segment has no tail: it reads no second operand")
        if b is None:
            raise ValueError("a chain with a tail computes with the tail's second operand (operand=)")
        self.layers[-1].output_view(raw[SLOT_OPERAND])[...] = fp16_operand(b, "execute", "operand")

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
    tail: Tail | None = None
    #: None when the tail reads the last layer's result in L2, else why not (the tail is
    #: then not in the chain: the caller lowers it on its own); None without a tail
    tail_link: str | None = None

    @property
    def tail_chained(self) -> bool:
        return self.tail is not None and self.tail_link is None

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


def _free_regions(busy, lim: Limits) -> list:
    """``[(start, size)]``: the L2 outside the ``busy`` ``(address, bytes)`` ranges."""
    out, at = [], 0
    for addr, n in sorted(busy):
        if addr > at:
            out.append((at, addr - at))
        at = max(at, round_up(addr + n, L2_UNIT))
    if at < lim.l2_bytes:
        out.append((at, lim.l2_bytes - at))
    return out


def _tail_windows(busy: tuple, row: int, whole: int, h: int, lim: Limits):
    """``(th, src1, result, staging)``: the largest band height ``th`` (at most ``h``)
    and the L2 addresses of the tail's windows (source 1's band, the planar result kept
    whole when ``whole`` bytes, else None, and the result's band), each in one of the free
    regions outside the ``busy`` ``(address, bytes)`` ranges; th = 0 when nothing fits."""
    regions = _free_regions(busy, lim)
    items = ["src1", "staging"] + (["result"] if whole else [])
    best = (0, None)
    for where in itertools.product(range(len(regions)), repeat=len(items)):
        th = h
        for r, (_, size) in enumerate(regions):
            mine = [it for it, w in zip(items, where) if w == r]
            room = size - (whole if "result" in mine else 0)
            bands = sum(it != "result" for it in mine)
            if room < 0:
                th = 0
            elif bands:
                th = min(th, room // (bands * row))
        if th > best[0]:
            best = (th, where)
    th, where = best
    if not th:
        return 0, None, None, None
    at = {}
    nxt = [start for start, _ in regions]
    for it, r in zip(items, where):
        at[it] = nxt[r]
        nxt[r] += whole if it == "result" else th * row
    return th, at["src1"], at.get("result"), at["staging"]


def _tile(low: Lowered, task) -> tuple:
    """``(shape, DRAM byte offset)`` of a task's output tile (``task``: a row of
    ``low.tasks``) in the output layout."""
    g, lay = low.groups[int(task["k"])], low.out_layout
    th, tw = int(task["th"]), int(task["tw"])
    off = g.co0 * lay.plane_stride + int(task["oy0"]) * lay.row_stride + 2 * int(task["ox0"])
    return (g.cout, th, tw), off


def _tail_tds(low: Lowered, task, addr: int, busy: tuple, tail: Tail, lim: Limits, memo: dict) -> list:
    """The tail's TDs after one task of ``low`` (a row of ``low.tasks``) that keeps its
    output tile in L2 at ``addr``: one planar task over the tile (source 0 the kept tile,
    source 1 the operand's tile in slot :data:`SLOT_OPERAND` through TileDMASrc) writing
    the result's tile to the output slot, staged in bands of ``TileHeight`` rows; with
    ReLU the planar result is kept whole and an NE task writes its ReLU.  ``busy``: the
    L2 ranges the windows must avoid (the kept tile, a source kept for later tasks).
    :class:`_NoRoom` when not one row's band fits (:func:`_tail_windows`)."""
    (ch, h, w), off = _tile(low, task)
    row = _l2_tensor(ch, 1, w)  # one row of every channel
    kept = _l2_tensor(ch, h, w)
    key = (busy, row, kept if tail.relu else 0, h)
    if key not in memo:
        memo[key] = _tail_windows(*key, lim)
    th, l2_src1, res, staging = memo[key]
    if not th:
        raise _NoRoom
    lay = low.out_layout
    strides = (lay.row_stride, lay.plane_stride)
    out = dict(dst=SLOT_OUTPUT, dst_base=off, dst_strides=strides, tile_height=th, eon=False)
    src1 = dict(src1=SLOT_OPERAND, src1_base=off, src1_strides=strides, l2_src1=l2_src1)
    shape = (ch, h, w)
    if not tail.relu:
        return [eltwise_td(shape, op=tail.op, src_in_l2=True, l2_src=addr, l2_dst=staging, **src1, **out)]
    return [
        eltwise_td(shape, op=tail.op, src_in_l2=True, l2_src=addr, l2_dst=res, keep=True, **src1, **out),
        eltwise_td(shape, nonlinear="relu", src_in_l2=True, l2_src=res, l2_dst=staging, **out),
    ]


_KEEP = {"L2.ResultCfg.ResultType": 3, "Header.WBase": 0, "Header.WBE": 0, "TileDMADst.DMAConfig.En": 0}


def _segment(layers: list, first: int, lim: Limits, tail: Tail | None = None) -> ChainSegment:
    """One program of ``layers`` whose links all stay in L2 (already checked), and of
    ``tail`` after the last layer's tasks (its conditions checked by the caller, its room
    here: :class:`_NoRoom`)."""
    if len(layers) == 1 and tail is None:  # a layer alone: its own programs, as build made them
        low = layers[0]
        return ChainSegment(layers, first, [0], low.programs, low.kernel_bytes, [low.n_tasks], [])
    offsets, off = [], 0
    for low in layers:
        offsets.append(off)
        off += round_up(low.kernel_bytes, ALIGN)
    tds, per_layer, resident, owners, n_tail = [], [], [], [], 0
    src_addr, src_bytes = None, 0  # where this layer's source sits in L2 (None: DRAM)
    memo: dict = {}
    for j, low in enumerate(layers):
        keep = j + 1 < len(layers)
        tiles = j + 1 == len(layers) and tail is not None  # each task keeps its tile for the tail
        c = low.eff
        out_bytes = _l2_tensor(c.cout, c.hout, c.wout)
        layer_tds = 0
        for t, (task, td) in enumerate(zip(low.tasks, [t for p in low.programs for t in p.tds])):
            td = td.copy()
            _rebase_kernels(td, low, int(task["k"]), offsets[j])
            tile = _l2_tensor(*_tile(low, task)[0])
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
                    out_bytes
                    if keep
                    else tile
                    if tiles
                    else c.cout * int(low.tasks["th"].max()) * round_up(2 * c.wout, L2_UNIT)
                )
                res = 0 if staging <= src_addr else round_up(src_addr + src_bytes, L2_UNIT)
                td["L2.ResultBase.Addr"] = res // L2_UNIT
            if keep or tiles:
                td.update(_KEEP)
            tds.append(td)
            owners.append(j)
            layer_tds += 1
            if tiles:
                addr = td["L2.ResultBase.Addr"] * L2_UNIT
                if addr + tile > lim.l2_bytes:
                    raise _NoRoom
                later = src_addr is not None and t + 1 < len(low.tasks)  # the source is read again
                busy = ((addr, tile),) + (((src_addr, src_bytes),) if later else ())
                tail_tds = _tail_tds(low, task, addr, busy, tail, lim, memo)
                tds += tail_tds
                owners += [len(layers)] * len(tail_tds)
                n_tail += len(tail_tds)
        if keep:
            addr = tds[-1]["L2.ResultBase.Addr"] * L2_UNIT
            resident.append((addr, out_bytes))
            src_addr, src_bytes = addr, out_bytes
        per_layer.append(layer_tds)
    kernel_bytes = max(off, ALIGN)
    bars = {
        SLOT_TD: None,
        SLOT_KERNEL: BarSlot(SLOT_KERNEL, "kernel", kernel_bytes, "weights"),
        SLOT_OUTPUT: BarSlot(SLOT_OUTPUT, "output", layers[-1].out_layout.nbytes, "y"),
        SLOT_INPUT: BarSlot(SLOT_INPUT, "input", layers[0].in_layout.nbytes, "x"),
    }
    if tail is not None:
        per_layer.append(n_tail)
        bars[SLOT_OPERAND] = BarSlot(SLOT_OPERAND, "input", layers[-1].out_layout.nbytes, "b")
    if len(tds) > lim.max_chain:
        raise _TooLong("a resident segment exceeds one chain")  # build_chain prevents it
    programs = task_chains(tds, 1, dict(sorted(bars.items())), f"chain{first}-{first + len(layers) - 1}", lim)
    return ChainSegment(layers, first, offsets, programs, kernel_bytes, per_layer, resident, tail, owners)


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


#: the shares of L2 a producer alone in its segment is tiled for when the tail's windows
#: do not fit beside its tiles as :func:`~fastane.lower.build` tiles it (1: as built)
TAIL_SHARES = (1, 2, 4, 8)


def _with_tail(last: ChainSegment, limits: Limits, tail: Tail):
    """``(segment, None)``: ``last`` with ``tail`` after its last layer's tasks, or
    ``(None, why not)``.  A layer alone (its source in DRAM) is tiled again for a
    smaller share of L2 (:data:`TAIL_SHARES`) when the tail's windows do not fit beside
    its tiles; a layer that reads a kept source keeps its tiling (one tile)."""
    why = "the tail's windows do not fit L2 beside a kept tile"
    for share in TAIL_SHARES if len(last.layers) == 1 else TAIL_SHARES[:1]:
        layers = last.layers
        if share > 1:
            try:
                layers = [build(layers[0].conv, replace(limits, l2_bytes=limits.l2_bytes // share))]
            except (NotImplementedError, MemoryError, ValueError):
                break
        try:
            return _segment(layers, last.first, limits, tail), None
        except _NoRoom:
            continue
        except _TooLong:
            return None, "the segment would exceed one chain of TDs"
    return None, why


def build_chain(
    convs, limits: Limits = LIMITS, resident: bool = True, tail: Tail | None = None
) -> LoweredChain:
    """Lower ``convs`` (each one's input is the previous one's output) as a whole,
    keeping intermediates in L2 where they fit (``resident=False``: every intermediate
    through DRAM, one segment per layer, the layer-by-layer lowering).  ``tail``: a
    planar op on the last layer's result, in the last segment when that result can stay
    in L2 for it (:attr:`LoweredChain.tail_link` says why not otherwise)."""
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
    tail_link = None
    if tail is not None:
        tail_link = "residency off" if not resident else _tail_reason(layers[-1])
        if tail_link is None:
            seg, tail_link = _with_tail(segments[-1], limits, tail)
            if seg is not None:
                segments[-1], layers[-1] = seg, seg.layers[-1]
    return LoweredChain(convs, layers, segments, links, tail, tail_link)


def execute_chain(
    chain: LoweredChain,
    x=None,
    weights=None,
    biases=None,
    operand=None,
    *,
    device=None,
    stats_only: bool | None = None,
):
    """Run a :class:`LoweredChain`: ``(output, [Stats per segment])``.  ``x`` the first
    layer's input, ``weights``/``biases`` one per layer (biases may be None), ``operand``
    the tail's second operand (the shape of the last layer's result; the output is then
    the tail's).  Each segment's output is the next one's input (through the host: a DRAM
    link)."""
    from .runtime import execute

    n = len(chain.layers)
    weights = list(weights) if weights is not None else [None] * n
    biases = list(biases) if biases is not None else [None] * n
    if len(weights) != n or len(biases) != n:
        raise ValueError(f"a chain of {n} layers needs {n} weights and {n} biases (or None)")
    stats, y = [], x
    for seg in chain.segments:
        sl = slice(seg.first, seg.first + len(seg.layers))
        b = operand if seg.tail is not None else None
        y, st = execute(seg, y, weights[sl], biases[sl], device=device, stats_only=stats_only, operand=b)
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


def plan_chain(convs, limits: Limits = LIMITS, tail: Tail | None = None) -> list:
    """``convs`` lowered as one chain (:func:`build_chain`) and counted on the stats-only
    device: per layer ``(tasks, source_in_l2, result_in_l2)``, its per-task Stats and
    whether its source / result stayed in L2; then the ``tail``'s entry when it chained
    (its source in L2; one entry more than ``convs``), none when it did not.  Raises what
    :func:`build_chain` raises (``ValueError`` when the shapes do not chain,
    ``NotImplementedError``/``MemoryError`` past the lowering's limits)."""
    from .runtime import stats_device

    ch = build_chain(convs, limits, tail=tail)
    _, stats = execute_chain(ch, device=stats_device(), stats_only=True)
    links = ch.links + ([None] if ch.tail_chained else [])
    out = []
    for seg, st in zip(ch.segments, stats):
        per: list = [[] for _ in seg.tasks_per_layer]
        for task, j in zip(st.tasks_detail, seg.td_layers()):
            per[j].append(task)
        for j, tasks in enumerate(per):
            i = seg.first + j
            src = i > 0 and links[i - 1] is None
            res = i < len(links) and links[i] is None
            out.append((tasks, src, res))
    return out
