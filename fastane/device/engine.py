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

The fused path (a convolution streaming fp16 DRAM to DRAM: every task the numpy API
lowers) moves no byte twice: TileDMASrc decodes the fp16 input straight into the MAC
kernels' float64 operand (the input, or its im2col unfolding) together with the max |x|
their bound needs; the weights decoded out of KMem are kept while KMem holds the same
bytes; the accumulator readout, the NE stage (bias, PostScale, ReLU or LUT) and
TileDMADst are one pass writing fp16 patterns into the destination layout.  The results
and counters are bit for bit those of the block-by-block path, which the other tasks
(planar, kernel-less, L2-resident) take.
"""

from __future__ import annotations

import collections

import numpy as np

from ..errors import DeviceFault
from ..m1 import FORMATS, TD_SIZE
from ..stats import Stats
from . import control_dma, eltwise, kernel_dma, l2, mac, mac_int8, ne, planar, tile_dma
from .control_dma import decode
from .faults import DecodeFault, HostMemoryFault
from .memory import BARTable, UnifiedMemory, aligned_bytes
from .taskplan import TaskPlan, copy_stats, fast_path, locate, sum_stats, with_events

# the longest chain followed when the pushed TD count is 0 (unknown): fastane.m1.MAX_CHAIN
#: checked plans kept by :meth:`Engine.plan` (chains)
PLAN_CACHE = 256
#: transposed (fp16) weight sets kept by :meth:`Engine._weights_t`, and the bytes they may
#: hold in all (the transposed form and the KMem bytes it came from); the float64 weights
#: are decoded into one kept buffer per task (:meth:`Engine._weights`), never cached
WEIGHT_CACHE = 64
WEIGHT_CACHE_BYTES = 128 << 20
#: the largest scratch buffer :meth:`Engine._scratch` keeps (bytes), and how many of its
#: views (name, shape, dtype) it keeps to hand out again
SCRATCH_BYTES = 64 << 20
SCRATCH_VIEWS = 512
#: the most host memory one task may make the emulator allocate (bytes; the block-by-block
#: path's float64 operands, im2col columns, accumulators and results, as each block
#: estimates them from the registers: ``mac.host_bytes``, ``planar.host_bytes``).  The
#: DMA windows bound a tensor's bytes in DRAM, but zero row/plane strides read the same
#: bytes again: a 16 KiB buffer can name a 32767 x 8192 tensor.  A task above the cap is
#: refused at plan time (:class:`HostMemoryFault`) in both modes.  The largest task the
#: numpy API lowers needs well under 1/10 of it.
TASK_HOST_BYTES = 2 << 30


class Engine:
    """The datapath of one ANE: KMem, L2 and the blocks between them and unified memory."""

    def __init__(self, memory: UnifiedMemory):
        self.memory = memory
        self.kmem = kernel_dma.KMem()
        self.l2 = l2.L2Memory()
        self._plans = collections.OrderedDict()  # checked plans of DRAM-to-DRAM chains
        self._wcache = []  # transposed weights: [key, KMem bytes, (w^T, max |w|), generation]
        self._wlast = None  # (key, KMem generation, float64 weights) of the last decode
        self._quick = {}  # the same plans by push and BAR table: (table, slots, fetch trace, plans)
        self._buffers = {}  # scratch of the fused path: name -> bytes
        self._views = {}  # (name, shape, dtype) -> the array _scratch gave for them
        #: what the fused path's im2col buffer holds: {mac.unfolding_key: max |x| per
        #: channel}, valid within one chain until a task writes DRAM over its source
        self._columns = {}

    # ------------------------------------------------------------------ ControlDMA
    def fetch(self, addr: int, td_size: int, td_count: int, bars: BARTable, trace=None) -> list:
        """Follow the chain from ``addr``: ``[(addr, register file), ...]`` (checked;
        :func:`fastane.device.control_dma.fetch`)."""
        return control_dma.fetch(self.memory, addr, td_size, td_count, bars, trace)

    # ------------------------------------------------------------------ planning
    def plan(
        self, addr: int, td_size: int, td_count: int, bars: BARTable, stats_only: bool = False
    ) -> list[TaskPlan]:
        """Fetch, decode and check the whole chain; nothing moves yet.

        The checked plan of a chain depends only on its register files, its BAR regions
        and the shapes and sizes of the results L2 holds when it starts (what
        :func:`fastane.device.l2.plan` and :func:`fastane.device.planar.plan_second` check
        an L2 source against; not their values): it is kept under those
        (:data:`PLAN_CACHE` chains), so re-running a program with the same buffers
        re-fetches and re-decodes its TDs but skips the block checks.

        A push of the same chain with the same BAR table (the same object, mapping the
        same regions) skips the fetch as well, when what the fetch depended on is
        unchanged: the allocations holding the TDs are still live and every TD has the
        same bytes (compared, not hashed) -- then the chain, its register files and its
        checks are the same."""
        resident = self.l2.resident  # copied below: planning the chain writes into its dict
        resident = {a: v for a, v in resident.items() if stats_only or v[2] is not None} if resident else {}
        held = tuple(sorted((a, v[0], v[1]) for a, v in resident.items())) if resident else ()
        quick = (addr, td_size, td_count, stats_only, id(bars), held)
        hit = self._quick.get(quick)
        # the same table (kept alive by the entry, so its id is its own) mapping the same
        # regions (a list compare: identical entries compare at once)
        if hit is not None and hit[0] is bars and hit[1] == bars.slots:
            trace, plans = hit[2], hit[3]
            data = self.memory.data
            if all(
                data[t[0] : t[0] + len(t[1])].tobytes() == t[1]
                if isinstance(t, tuple)
                else self.memory.is_live(t)
                for t in trace
            ):
                self._check_data(plans)
                return plans
        trace = []
        try:
            chain = self.fetch(addr, td_size, td_count, bars, trace)
        except DeviceFault as exc:  # ControlDMA's faults name the TD they fetch as ``addr``
            locate(exc, None, getattr(exc, "addr", addr))
            raise
        # the register files are decode()'s cached dicts, kept alive by the cached plans
        key = (
            tuple((a, id(r)) for a, r in chain),
            stats_only,
            tuple((s.iova, s.size) if s is not None else None for s in bars.slots),
            held,
        )
        hit = self._plans.get(key)
        if hit is not None:
            self._plans.move_to_end(key)
            self._check_data(hit)
            return hit
        plans = []
        for i, (a, regs) in enumerate(chain):
            try:
                plans.append(self._plan_task(i, a, regs, bars, resident, stats_only))
            except DeviceFault as exc:
                locate(exc, i, a)
                raise
        self._check_data(plans)
        self._plans[key] = plans
        if len(self._plans) > PLAN_CACHE:
            self._plans.popitem(last=False)
        self._quick[quick] = (bars, list(bars.slots), trace, plans)
        if len(self._quick) > PLAN_CACHE:
            self._quick.pop(next(iter(self._quick)))
        return plans

    def _check_data(self, plans: list) -> None:
        """The checks that depend on the bytes in DRAM, not on the registers alone (so they
        run again for a cached plan): each LUT task's coefficient block, where its
        KernelDMA will read it.  A block that an earlier task of the chain writes cannot be
        checked before the chain runs, and is refused (:func:`ne.check_lut`)."""
        written = []
        for p in plans:
            if p.ne is not None and p.ne.nonlinear == ne.LUT:
                try:
                    ne.check_lut(p.ne, p.kdma, self.memory.data, written, f"{p.what}: NE")
                except DeviceFault as exc:
                    locate(exc, p.index, p.addr)
                    raise
            if p.dst is not None:
                written.append((p.dst.index, p.dst.index + p.dst.extent, p.index))

    def _plan_task(self, index, addr, regs, bars, resident, stats_only) -> TaskPlan:
        what = f"TD {index} (NID {regs['Header.NID']}) at {addr:#x}"
        if planar.is_planar(regs):
            cfg = planar.config(regs, what, strict=not stats_only)
            g = planar.geometry(regs, cfg, what, strict=not stats_only)
            p = TaskPlan(index, addr, regs, what, g, is_planar=True, planar=cfg)
        else:
            g = mac.geometry(regs, what)
            p = TaskPlan(index, addr, regs, what, g, ne=ne.config(regs, what))
        host = planar.host_bytes(g) if p.is_planar else mac.host_bytes(g)
        if host > TASK_HOST_BYTES:
            raise HostMemoryFault(
                f"{what}: the task's {g.cin}x{g.hin}x{g.win} -> {g.cout}x{g.hout}x"
                f"{g.wout} tensors would make the host allocate about {host >> 20} MiB,"
                f" more than the {TASK_HOST_BYTES >> 20} MiB a task may "
                f"(engine.TASK_HOST_BYTES)",
                nbytes=host,
                cap=TASK_HOST_BYTES,
            )
        p.kdma = kernel_dma.plan(regs, bars, f"{what}: KernelDMA")
        if g.mode == mac.CONV:
            kernel_dma.check_loaded(p.kdma, g.cout, g.cin_g, g.kh, g.kw, g.kernel_fmt, f"{what}: MAC")
        if p.ne is not None:
            ne.check_loaded(p.ne, p.kdma, f"{what}: NE")
        p.l2 = l2.plan(regs, g, FORMATS[g.in_fmt], FORMATS[g.out_fmt], resident, what)
        if p.l2.source_type == l2.DRAM:
            if not regs["TileDMASrc.DMAConfig.En"]:
                raise DecodeFault(f"{what}: SourceType 2 (DRAM) with TileDMASrc disabled")
            p.src = (
                planar.plan_source(regs, bars, g, what)
                if p.is_planar
                else tile_dma.plan_src(regs, bars, g.cin, g.hin, g.win, what)
            )
        if p.is_planar:  # the second operand, checked before this task's result lands in L2
            p.src1 = planar.plan_second(p.planar, regs, bars, g, resident, what)
        if p.l2.result_type == l2.DRAM:
            if not regs["TileDMADst.DMAConfig.En"]:
                raise DecodeFault(f"{what}: ResultType 2 (DRAM) with TileDMADst disabled")
            p.dst = tile_dma.plan_dst(regs, bars, g.cout, g.hout, g.wout, what)
            p.lazy_kmem = (
                not p.is_planar
                and p.src is not None
                and mac.skinny_candidate(g)
                and not _writes_kernel(p.dst, p.kdma)
            )
        else:
            l2.keep(resident, p.l2.result[0], p.l2.shape_out, p.l2.result[1], True)
        src_bytes = (p.src.nbytes if p.src else 0) + (p.src1.nbytes if p.src1 else 0)
        p.stats = Stats(
            tasks=1,
            macs=g.macs,
            planar_ops=planar.ops(regs) if p.is_planar else 0,
            control_dma_bytes=TD_SIZE,
            kernel_dma_bytes=p.kdma.nbytes,
            tile_dma_src_bytes=src_bytes,
            tile_dma_dst_bytes=p.dst.nbytes if p.dst else 0,
            int8_macs=g.macs if mac_int8.is_int8(p) else 0,
            pointwise_macs=g.macs if g.kh * g.kw == 1 else 0,
        )
        return p

    # ------------------------------------------------------------------ running
    def run(self, plans: list[TaskPlan], stats_only: bool = False) -> Stats:
        """Run checked plans; the program's Stats with one ``tasks_detail`` entry per TD."""
        if stats_only:  # nothing moves: the counts are the plans' (copied)
            details = [copy_stats(p.stats) for p in plans]
        else:
            self._columns.clear()  # the host may have written anything since the last chain
            try:
                details = [self._run_task(p) for p in plans]
            finally:  # a deferred KernelDMA copy is made before anything else writes memory
                self.kmem.settle()
        total = sum_stats(details)
        total.tasks_detail = details
        return total

    def _run_task(self, p: TaskPlan) -> Stats:
        data = self.memory.data
        self.kmem.load(p.kdma, data, p.lazy_kmem)
        fast = p.fast
        if fast is None:
            fast = p.fast = fast_path(p, data)
        if fast:
            stats = self._run_fast(p, *fast)
            if self._columns and p.dst is not None:  # the unfolded source, written over?
                lo, hi = next(iter(self._columns))[:2]
                if p.dst.index < hi and lo < p.dst.index + p.dst.extent:
                    self._columns.clear()
            return stats
        self._columns.clear()  # any other task: forget the unfolding (no bookkeeping)
        int8 = mac_int8.is_int8(p)
        done = None if int8 else eltwise.run(p, data, self.kmem, self.l2)
        if done is not None:  # the fp16 lane of the elementwise tasks
            return done
        g = p.geometry
        cmax = None
        if p.src is not None:
            x, cmax = tile_dma.read_max(p.src, data)
        else:
            x = self.l2.read(p.l2.source[0])
        if int8:  # the INT8 path: MAC and NE in one block (fastane.device.int8)
            w = self._weights(g, p) if g.mode == mac.CONV else None
            values, saturated, nans = mac_int8.run(p, x, w, self.kmem)
            lut_under = lut_over = 0
        elif p.is_planar:
            values, nans = planar.run(p.planar, g, x, planar.read_operand(p.src1, data, self.l2))
            saturated = lut_under = lut_over = 0
        elif g.mode == mac.CONV:
            acc, flag = mac.accumulate(g, x, self._weights(g, p), cmax)
            window = tile_dma.fp16_window(p.dst, data) if p.dst is not None else None
            if window is not None:  # readout, NE and TileDMADst in one pass
                nans, saturated, lut_under, lut_over = ne.finish(p.ne, acc, flag, self.kmem, window)
                return with_events(p.stats, saturated, nans, lut_under, lut_over)
            values, saturated, nans = mac.read_out(acc, flag)
            values, lut_under, lut_over = ne.run(p.ne, values, self.kmem, as_fp16=True)
        else:
            values, saturated, nans = mac.run(g, x, None, cmax=cmax)
            values, lut_under, lut_over = ne.run(p.ne, values, self.kmem, as_fp16=True)
        if p.dst is not None:
            tile_dma.write(p.dst, data, values)
        else:
            self.l2.keep(p.l2.result[0], values, p.l2.result[1])
        return with_events(p.stats, saturated, nans, lut_under, lut_over)

    def _run_fast(self, p: TaskPlan, src16, plane, row, window) -> Stats:
        """A convolution from DRAM to DRAM in fp16: TileDMASrc decodes straight into the
        MAC kernels' operand (the input, or its im2col unfolding, with max |x|), the MAC
        kernels accumulate, and the readout, the NE stage and TileDMADst write the fp16
        results in one pass.  The operand and the accumulators are kept buffers."""
        g = p.geometry
        key = p.columns_key
        if key is None:
            key = p.columns_key = mac.unfolding_key(g, p.src.index, p.src.index + p.src.extent, plane, row)
        acc, flag = mac.accumulate_fp16(
            g,
            src16,
            plane,
            row,
            lambda: self._weights(g, p),
            self._scratch,
            transposed=lambda: self._weights_t(g, p),
            kmem16=lambda: kernel_dma.fp16_channels(self.kmem, g.cout, g.cin_g, g.kh, g.kw, g.kernel_fmt),
            columns=(self._columns, key),
        )
        nans, saturated, lut_under, lut_over = ne.finish(p.ne, acc, flag, self.kmem, window)
        return with_events(p.stats, saturated, nans, lut_under, lut_over)

    def _scratch(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """A C-contiguous ``shape`` array from a buffer kept for the fused path (the MAC's
        operand and accumulators live only within one task, and one task runs at a time).
        Fresh multi-megabyte arrays would be new pages, faulted in by the MAC kernels'
        threads at once; kept ones stay mapped.  They are 64-byte aligned: the MAC kernels'
        vector loads and stores of rows that straddle cache lines cost about 6% at 512^3
        (numpy aligns to 16 bytes).  Buffers above :data:`SCRATCH_BYTES` are not kept."""
        key = (name, shape, dtype)
        view = self._views.get(key)
        if view is not None:
            return view
        n = 1
        for d in shape:
            n *= d
        nbytes = n * np.dtype(dtype).itemsize
        buf = self._buffers.get(name)
        if buf is None or buf.size < nbytes:
            if name == mac.COLUMNS:
                self._columns.clear()  # a new buffer holds no unfolding
            buf = aligned_bytes(max(nbytes, 64), 64, zero=False)
            if nbytes <= SCRATCH_BYTES:
                self._buffers[name] = buf
                self._views = {k: v for k, v in self._views.items() if k[0] != name}  # the old bytes
        view = buf[:nbytes].view(dtype).reshape(shape)
        if self._buffers.get(name) is buf and len(self._views) < SCRATCH_VIEWS:
            self._views[key] = view
        return view

    def _weights(self, g, p=None) -> np.ndarray:
        """The ``[Cout, Cin/groups, Kh, Kw]`` float64 weights the cores hold in KMem.

        They are decoded out of KMem into one kept buffer (no float64 copy of a model's
        weights outlives its task: KMem and the kernel region hold them once, in fp16 or
        the palettized form); a task that finds KMem unchanged since the last decode of
        the same kernel (same shape and KernelDMA sources, same KMem generation) reuses
        it.  Decoding is one pass over the fp16 bytes, about what comparing a kept copy
        with KMem costs."""
        key = (g.cout, g.cin_g, g.kh, g.kw, g.kernel_fmt, None if p is None else p.kdma.sources)
        gen = self.kmem.generation
        last = self._wlast
        if last is not None and last[0] == key and last[1] == gen:
            return last[2]
        buf = self._scratch("weights", (g.cout * g.cin_g * g.kh * g.kw,), np.float64)
        w = kernel_dma.unpack_weights(self.kmem, *key[:5], out=buf)
        self._wlast = (key, gen, w)
        return w

    def _weights_t(self, g, p=None):
        """``(w^T, max |w|)`` of the decoded weights of a 1x1 convolution
        (:func:`fastane.device.mac.transposed_weights`, float16): the operand of the
        transposed product that narrow outputs take (:func:`fastane.device.mac.
        accumulate_fp16`).  The last :data:`WEIGHT_CACHE` are kept with the KMem bytes
        they came from (and the task's KernelDMA sources, so that the tasks of one
        program each find their own entry at once), and reused when KMem holds exactly
        those bytes again (compared byte for byte, not hashed)."""
        key = (g.cout, g.cin_g, g.kh, g.kw, g.kernel_fmt, None if p is None else p.kdma.sources)
        cache = self._wcache
        gen = self.kmem.generation
        if cache and cache[0][0] == key and cache[0][3] == gen:
            return cache[0][2]  # KMem has not changed since these were derived
        for i, entry in enumerate(cache):
            if entry[0] == key and kernel_dma.holds(self.kmem, *key[:5], entry[1]):
                entry[3] = gen
                if i:
                    cache.insert(0, cache.pop(i))
                return entry[2]
        used = kernel_dma.used_bytes(self.kmem, *key[:5])
        derived = mac.transposed_weights(g, self._weights(g, p))
        if len(used) + derived[0].nbytes <= WEIGHT_CACHE_BYTES:
            cache.insert(0, [key, used, derived, gen])
            self._trim_weights()
        return derived

    def _trim_weights(self) -> None:
        """Keep at most :data:`WEIGHT_CACHE` transposed weight sets and
        :data:`WEIGHT_CACHE_BYTES` bytes."""
        cache = self._wcache
        total = 0
        for i, (_, snap, derived, _g) in enumerate(cache):
            total += len(snap) + derived[0].nbytes
            if i >= WEIGHT_CACHE or (total > WEIGHT_CACHE_BYTES and i):
                del cache[i:]
                break

    def execute(
        self, addr: int, td_size: int, td_count: int, bars: BARTable, stats_only: bool = False
    ) -> Stats:
        """Plan (all checks), then run, the chain pushed at ``addr``."""
        return self.run(self.plan(addr, td_size, td_count, bars, stats_only), stats_only)


__all__ = ["Engine", "TaskPlan", "decode"]


def _writes_kernel(dst, kdma) -> bool:
    """Whether TileDMADst's bytes ``dst`` overlap a byte the task's KernelDMA lanes read."""
    lo, hi = dst.index, dst.index + dst.extent
    return any(src < hi and lo < src + lane.nbytes for lane, src in zip(kdma.lanes, kdma.sources))
