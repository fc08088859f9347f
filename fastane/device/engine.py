"""The engine: a TD chain through the fixed datapath, one task at a time.

Per TD: ControlDMA (fetch the TD from unified memory and decode it into a register
file) -> KernelDMA (coefficient lanes into the 16 KMems) -> TileDMASrc (DRAM -> L2, or
the result an earlier task left in L2) -> MAC (convolution, or pass-through) -> NE (bias,
scale, nonlinearity) -> TileDMADst (L2 -> DRAM, or keep the result in L2).

Two phases, so that a faulting program leaves memory untouched: :meth:`Engine.plan`
walks the whole chain (``NextPointer``/``NextSize`` until ``EON``; loops and chains longer
than the pushed TD count are faults) and checks every block of every task -- BAR slots,
DMA ranges against their regions, KMem and L2 capacity, L2 sources -- computing each
task's byte and MAC counts from its registers alone.  Only then does :meth:`Engine.run`
move data and call the kernels.  A stats-only run stops after planning: same Stats,
except the counters that depend on the data (saturated, nan_outputs, lut_*), which stay 0.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from dataclasses import dataclass

from ..errors import TDError
from ..stats import Stats
from ..td import TaskDescriptor
from ..td.fields import TD_SIZE
from . import kernel_dma, l2, mac, ne, planar, tile_dma
from .faults import BARFault, ChainFault, DecodeFault, DMARangeFault
from .memory import BARTable, UnifiedMemory

#: the longest chain followed when the pushed TD count is 0 (unknown)
MAX_CHAIN = 0xFFFF
#: checked plans kept by :meth:`Engine.plan` (chains)
PLAN_CACHE = 256
_FMT_BYTES = {0: 1, 1: 1, 2: 2}


@dataclass
class TaskPlan:
    """One checked task: its register file and every block's plan."""

    index: int
    addr: int
    regs: dict
    what: str
    geometry: object
    ne: object = None
    kdma: object = None
    l2: object = None
    src: object = None
    dst: object = None
    is_planar: bool = False
    planar: object = None      # planar.PlanarConfig of a planar task
    src1: object = None        # a planar task's second operand (TileDMA plan or L2 operand)
    stats: Stats = dataclasses.field(default_factory=Stats)


@functools.lru_cache(maxsize=4096)
def decode(raw: bytes) -> dict:
    """ControlDMA: TD bytes -> register file ``{canonical field name: value}`` (read-only;
    cached by content, so re-running a program skips the decode)."""
    return planar.registers(TaskDescriptor.from_bytes(raw))


class Engine:
    """The datapath of one ANE: KMem, L2 and the blocks between them and unified memory."""

    def __init__(self, memory: UnifiedMemory):
        self.memory = memory
        self.kmem = kernel_dma.KMem()
        self.l2 = l2.L2Memory()
        self._plans = collections.OrderedDict()   # checked plans of DRAM-to-DRAM chains

    # ------------------------------------------------------------------ ControlDMA
    def fetch(self, addr: int, td_size: int, td_count: int, bars: BARTable) -> list:
        """Follow the chain from ``addr``: ``[(addr, register file), ...]`` (checked)."""
        limit = td_count or MAX_CHAIN
        chain, seen, cur, size = [], set(), addr, td_size
        while True:
            where = f"TD {len(chain)} at {cur:#x}"
            if cur in seen:
                raise ChainFault(f"{where}: the chain loops back to an earlier TD", addr=cur)
            if len(chain) >= limit:
                raise ChainFault(f"the chain from {addr:#x} did not reach EON within the {limit} "
                                 f"TDs pushed (TM_INFO count)", addr=addr, count=limit)
            seen.add(cur)
            if size != TD_SIZE:
                raise DecodeFault(f"{where}: TD size {size:#x} is not the M1 TD size {TD_SIZE:#x}",
                                  addr=cur)
            region = self.memory.region_of(cur)
            if region is None or region.size < size:
                raise DMARangeFault(f"ControlDMA: {where} (+{size:#x} bytes) is not inside mapped "
                                    f"memory", addr=cur)
            off = self.memory.offset(cur, size, "ControlDMA")
            try:
                regs = decode(self.memory.data[off:off + size].tobytes())
            except TDError as exc:
                raise DecodeFault(f"ControlDMA: {where} is malformed: {exc}", addr=cur) from exc
            chain.append((cur, regs))
            if regs["Header.EON"]:
                return chain
            if regs["Header.NextSize"] == 0:
                raise ChainFault(f"{where}: neither EON nor a next TD (NextSize = 0): the chain "
                                 f"never ends", addr=cur)
            size = (regs["Header.NextSize"] + 1) * 4
            nxt = regs["Header.NextPointer"]
            if regs["Header.TBE"]:
                slot = regs["Header.TBase"]
                region = bars[slot]
                if region is None:
                    raise BARFault(f"{where}: the next TD is in BAR slot {slot} (TBase), which is "
                                   f"not mapped", slot=slot)
                bars.resolve(slot, nxt, size, f"{where}: NextPointer {nxt:#x}")
                cur = region.iova + nxt
            else:
                cur = addr + nxt

    # ------------------------------------------------------------------ planning
    def plan(self, addr: int, td_size: int, td_count: int, bars: BARTable,
             stats_only: bool = False) -> list[TaskPlan]:
        """Fetch, decode and check the whole chain; nothing moves yet.

        The checked plan of a chain that streams DRAM to DRAM (no L2-resident source or
        result, no planar task) depends only on its register files and its BAR regions:
        it is kept (:data:`PLAN_CACHE` chains), so re-running a program with the same
        buffers re-fetches and re-decodes its TDs but skips the block checks."""
        chain = self.fetch(addr, td_size, td_count, bars)
        key = None
        if all(r["L2.SourceCfg.SourceType"] == l2.DRAM and r["L2.ResultCfg.ResultType"] == l2.DRAM
               and not planar.is_planar(r) for _, r in chain):
            # the register files are decode()'s cached dicts, kept alive by the cached plans
            key = (tuple((a, id(r)) for a, r in chain), stats_only,
                   tuple((s.iova, s.size) if s is not None else None for s in bars.slots))
            hit = self._plans.get(key)
            if hit is not None:
                self._plans.move_to_end(key)
                return hit
        resident = {a: v for a, v in self.l2.resident.items() if stats_only or v[2] is not None}
        plans = [self._plan_task(i, a, regs, bars, resident, stats_only)
                 for i, (a, regs) in enumerate(chain)]
        if key is not None:
            self._plans[key] = plans
            if len(self._plans) > PLAN_CACHE:
                self._plans.popitem(last=False)
        return plans

    def _plan_task(self, index, addr, regs, bars, resident, stats_only) -> TaskPlan:
        what = f"TD {index} (NID {regs['Header.NID']}) at {addr:#x}"
        if planar.is_planar(regs):
            cfg = planar.config(regs, what, strict=not stats_only)
            g = planar.geometry(regs, cfg, what, strict=not stats_only)
            p = TaskPlan(index, addr, regs, what, g, is_planar=True, planar=cfg)
        else:
            g = mac.geometry(regs, what)
            p = TaskPlan(index, addr, regs, what, g, ne=ne.config(regs, what))
        p.kdma = kernel_dma.plan(regs, bars, f"{what}: KernelDMA")
        if g.mode == mac.CONV:
            kernel_dma.check_loaded(p.kdma, g.cout, g.cin_g, g.kh, g.kw, g.kernel_fmt, f"{what}: MAC")
        if p.ne is not None:
            ne.check_loaded(p.ne, p.kdma, f"{what}: NE")
        p.l2 = l2.plan(regs, g, _FMT_BYTES[g.in_fmt], _FMT_BYTES[g.out_fmt], resident, what)
        if p.l2.source_type == l2.DRAM:
            if not regs["TileDMASrc.DMAConfig.En"]:
                raise DecodeFault(f"{what}: SourceType 2 (DRAM) with TileDMASrc disabled")
            p.src = (planar.plan_source(regs, bars, g, what) if p.is_planar
                     else tile_dma.plan_src(regs, bars, g.cin, g.hin, g.win, what))
        if p.is_planar:     # the second operand, checked before this task's result lands in L2
            p.src1 = planar.plan_second(p.planar, regs, bars, g, resident, what)
        if p.l2.result_type == l2.DRAM:
            if not regs["TileDMADst.DMAConfig.En"]:
                raise DecodeFault(f"{what}: ResultType 2 (DRAM) with TileDMADst disabled")
            p.dst = tile_dma.plan_dst(regs, bars, g.cout, g.hout, g.wout, what)
        else:
            l2.keep(resident, p.l2.result[0], p.l2.shape_out, p.l2.result[1], True)
        src_bytes = (p.src.nbytes if p.src else 0) + (p.src1.nbytes if p.src1 else 0)
        p.stats = Stats(tasks=1, macs=g.macs, planar_ops=planar.ops(regs) if p.is_planar else 0,
                        control_dma_bytes=TD_SIZE, kernel_dma_bytes=p.kdma.nbytes,
                        tile_dma_src_bytes=src_bytes, tile_dma_dst_bytes=p.dst.nbytes if p.dst else 0)
        return p

    # ------------------------------------------------------------------ running
    def run(self, plans: list[TaskPlan], stats_only: bool = False) -> Stats:
        """Run checked plans; the program's Stats with one ``tasks_detail`` entry per TD."""
        details = [self._run_task(p) if not stats_only else dataclasses.replace(p.stats)
                   for p in plans]
        total = sum(details, Stats())
        total.tasks_detail = details
        return total

    def _run_task(self, p: TaskPlan) -> Stats:
        data = self.memory.data
        g = p.geometry
        self.kmem.load(p.kdma, data)
        x = tile_dma.read(p.src, data) if p.src is not None else self.l2.read(p.l2.source[0])
        if p.is_planar:
            values, nans = planar.run(p.planar, g, x, planar.read_operand(p.src1, data, self.l2))
            saturated = lut_under = lut_over = 0
        else:
            w = None
            if g.mode == mac.CONV:
                w = kernel_dma.unpack_weights(self.kmem, g.cout, g.cin_g, g.kh, g.kw, g.kernel_fmt)
            values, saturated, nans = mac.run(g, x, w)
            values, lut_under, lut_over = ne.run(p.ne, values, self.kmem, as_fp16=p.dst is not None)
        if p.dst is not None:
            tile_dma.write(p.dst, data, values)
        else:
            self.l2.keep(p.l2.result[0], values, p.l2.result[1])
        return dataclasses.replace(p.stats, saturated=saturated, nan_outputs=nans,
                                   lut_underflow=lut_under, lut_overflow=lut_over)

    def execute(self, addr: int, td_size: int, td_count: int, bars: BARTable,
                stats_only: bool = False) -> Stats:
        """Plan (all checks), then run, the chain pushed at ``addr``."""
        return self.run(self.plan(addr, td_size, td_count, bars, stats_only), stats_only)
