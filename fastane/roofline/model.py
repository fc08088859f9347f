"""The performance model: per-task times from :class:`~fastane.stats.Stats`, and an
analytic per-layer *task plan* that produces those Stats before the real lowering exists.

Two halves, kept apart so one can be swapped:

1. **The analytic plan** (:func:`plan_conv`, :func:`plan_matmul`, :func:`plan_eltwise`,
   :func:`plan_layer`, :func:`plan_workload`): how a layer splits into task descriptors
   on the M1 and what each task's DMA engines move.  It returns one ``Stats`` per task,
   the same counters the stats-only device mode fills when it runs a lowered program, so
   the lead can replace it by the real lowering and test that both agree.
2. **The time model** (:func:`task_times`, :func:`estimate`): Stats -> seconds, on a
   :class:`~fastane.roofline.chips.Chip`.

The plan's rules (an M1, :class:`Limits`):

- A convolution (a matmul is a 1x1 convolution with K input channels, N output channels
  and M positions along W) is cut into *kernel groups* of output channels and *tiles* of
  output rows x columns.  One task = one kernel group x one tile.
- KMem: the output channels of a task are spread over the 16 cores; each core's share of
  the kernel (``ceil(cout_t / 16) x cin x kh x kw x 2`` bytes) must fit its 64 KiB, so a
  task's kernel is at most 16 x 64 KiB = 1 MiB.  When one output channel's kernel alone
  exceeds 64 KiB (``cin x kh x kw > 32768``), or one input row cannot fit L2, the
  reduction is split (split-K): each chunk writes a partial fp16 result and planar adds
  combine them.
- L2: a task's input tile (with its halo) and output tile must both fit in the 2 MiB L2.
- Loop order: kernel group outer, tile inner; every task fetches its kernel again
  (weights are re-fetched per tile) and its input tile again (activations are re-read per
  kernel group).  Among kernel-group sizes (the largest that fits KMem, halved down to
  16 channels) the plan keeps the one with the least DRAM traffic; for each size the
  tile is the largest that fits L2, full width first.
- Bytes, counted as the device's engines count them: every TileDMA row is whole 64-byte
  bursts (row stride = round_up(W x 2, 64), SPEC 5), so a (C, 1, 1) decode vector costs
  C x 64 bytes; KernelDMA deals the output channels to the cores in blocks of
  ``m = ceil(cout / 16)`` and each enabled lane reads ``round_up(m x cin x kh x kw x 2, 64)``
  bytes (:mod:`fastane.device.kernel_dma`); each task's TD is 0x274 bytes of ControlDMA.
- Eltwise layers: planar tasks over channel groups (rows when one channel is too big)
  that fit L2 with all inputs and the output.

The time model:

``compute = 2 x MACs / peak_fp16 + planar_ops / planar_rate``
``dma = 0.939 x kernel/BW_kernel + 0.981 x tile_src/BW_tile + tile_dst/BW_tile + control/BW_tile``
(and at least all bytes / DRAM bandwidth)
``task = max(compute, dma) + dispatch``;  ``program = sum(task) + 0.001 s``

The seed measured (M3) ``T_AB = 0.001 + 0.939 T_A + 0.981 T_B``: KernelDMA and TileDMA
times add.  The seed gives no unit for the times; fastane reads them as **seconds**, so
the constant is **1 ms, once per measured execution** (one program submission), not per
task: the kernel/tile bandwidths the same text quotes are reciprocals of slopes in
seconds per byte (GB/s), and a regression intercept of 0.001 printed to three decimals
is a natural magnitude in seconds (0.5-1.5 ms, the order of a request's fixed cost) but
would be an implausibly exact +-0.5 us if the unit were milliseconds.  It is
``ModelParams.program_overhead_s``; set it to 1e-6 to explore the other reading.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..stats import Stats
from ..workloads import Conv2d, Eltwise, Matmul, Workload
from . import chips as _chips

__all__ = ["Limits", "M1_LIMITS", "ConvTiling", "tile_conv", "plan_conv", "plan_matmul",
           "plan_eltwise", "plan_layer", "plan_workload", "LayerPlan", "WorkloadPlan",
           "ModelParams", "DEFAULT_PARAMS", "task_times", "Estimate", "estimate",
           "sum_stats", "tokens_per_s_bound", "matmul_as_conv", "TD_BYTES"]

#: bytes of one M1 task descriptor, moved by ControlDMA (SPEC 5)
TD_BYTES = 0x274


@dataclass(frozen=True)
class Limits:
    """Per-task limits of the M1 ANE (SPEC 1 and 5)."""

    cores: int = 16
    kmem_core_bytes: int = 64 * 1024
    l2_bytes: int = 2 * 1024 * 1024
    td_bytes: int = TD_BYTES
    row_align: int = 64
    elem_bytes: int = 2
    #: compiler limits of one tensor dimension (SPEC 5): C, and H / W
    max_channels: int = 65536
    max_hw: int = 16384
    #: smallest kernel group the search tries (channels)
    min_group: int = 16

    @property
    def kmem_bytes(self) -> int:
        return self.cores * self.kmem_core_bytes

    def row_bytes(self, w):
        """DMA bytes of one row of ``w`` fp16 elements (padded to ``row_align``)."""
        a = self.row_align
        return (np.asarray(w) * self.elem_bytes + a - 1) // a * a


M1_LIMITS = Limits()


# ============================================================== the analytic task plan

def matmul_as_conv(mm: Matmul) -> Conv2d:
    """The 1x1 convolution one of ``mm``'s ``B`` products runs as: K -> N channels over a
    row of M positions (H = 1, W = M)."""
    return Conv2d(mm.name, mm.K, mm.N, 1, mm.M, activation=mm.activation)


@dataclass(frozen=True)
class ConvTiling:
    """How :func:`plan_conv` cuts a convolution into tasks."""

    #: output channels of a full kernel group (the last group may be smaller)
    cout_t: int
    #: whole conv groups per task (grouped convs; 0 when a task holds part of one group)
    groups_t: int
    #: input channels (per conv group) of one reduction chunk, and the number of chunks
    cin_t: int
    ks: int
    #: output tile rows and columns (the last tile of each may be smaller)
    th: int
    tw: int
    #: planar add tasks per partial sum (split-K only), so that 3 tiles fit L2
    add_pieces: int = 1

    def describe(self) -> str:
        s = f"kernel groups of {self.cout_t} ch, tiles {self.th}x{self.tw}"
        if self.ks > 1:
            s += f", split-K {self.ks} x {self.cin_t} ch"
        return s


def _chunks(total: int, size: int) -> np.ndarray:
    """Sizes of ``total`` cut into pieces of ``size`` (the last one smaller)."""
    n = -(-total // size)
    out = np.full(n, size, dtype=np.int64)
    out[-1] = total - size * (n - 1)
    return out


def _halo(n_out: int, t: int, stride: int, k: int, pad: int, n_in: int):
    """Per tile along one axis: output extent and clipped input extent."""
    sizes = _chunks(n_out, t)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    lo = starts * stride - pad
    hi = (starts + sizes - 1) * stride - pad + k - 1
    ins = np.minimum(hi, n_in - 1) - np.maximum(lo, 0) + 1
    return sizes, ins


def _groups(conv: Conv2d, t: ConvTiling):
    """Per kernel group: output channels, and input channels per reduction chunk unit."""
    G = conv.groups
    cout_pg = conv.cout // G
    if t.groups_t:  # whole conv groups per task
        g = _chunks(G, t.groups_t)
        return g * cout_pg, g           # (cout, conv-groups whose inputs it reads)
    per = _chunks(cout_pg, t.cout_t)
    cout = np.tile(per, G)
    return cout, np.ones_like(cout)


def _kernel_bytes(cout, per_channel, lim: Limits):
    """KernelDMA bytes of a task (the layout of :mod:`fastane.device.kernel_dma`): output
    channels dealt to the cores in blocks of ``m = ceil(cout / 16)``; each of the
    ``ceil(cout / m)`` enabled lanes reads ``round_up(m x per_channel, 64)`` bytes."""
    m = -(-cout // lim.cores)
    lanes = -(-cout // m)
    a = lim.row_align
    return lanes * ((m * per_channel + a - 1) // a * a)


def _conv_arrays(conv: Conv2d, t: ConvTiling, lim: Limits) -> dict:
    """Per-task counters of a tiled convolution, as arrays in execution order."""
    kk = conv.kh * conv.kw
    eb = lim.elem_bytes
    cout_k, ng_k = _groups(conv, t)                       # (n_k,)
    cin_c = _chunks(conv.cin // conv.groups, t.cin_t)     # (ks,)
    th, rows_in = _halo(conv.hout, t.th, conv.stride, conv.kh, conv.pad, conv.h)
    tw, cols_in = _halo(conv.wout, t.tw, conv.stride, conv.kw, conv.pad, conv.w)
    rs_in, rs_out = lim.row_bytes(cols_in), lim.row_bytes(tw)
    # MAC tasks, shape (k, y, x, c)
    K_ = cout_k[:, None, None, None]
    G_ = ng_k[:, None, None, None]
    C_ = cin_c[None, None, None, :]
    Y_th, Y_in = th[None, :, None, None], rows_in[None, :, None, None]
    X_tw, X_in, X_out = tw[None, None, :, None], rs_in[None, None, :, None], rs_out[None, None, :, None]
    shape = (len(cout_k), len(th), len(tw), len(cin_c))
    mac = {
        "macs": np.broadcast_to(K_ * Y_th * X_tw * C_ * kk, shape),
        "kernel": np.broadcast_to(_kernel_bytes(K_, C_ * kk * eb, lim), shape),
        "src": np.broadcast_to(G_ * C_ * Y_in * X_in, shape),
        "dst": np.broadcast_to(K_ * Y_th * X_out, shape),
        "planar": np.zeros(shape, dtype=np.int64),
    }
    if t.ks == 1:
        return {k: v.reshape(-1) for k, v in mac.items()}
    # split-K: after the ks partial tasks of a (group, tile), ks - 1 planar adds, each in
    # add_pieces pieces (channel slices) reading two partials and writing their sum.
    P = t.add_pieces
    base, rem = cout_k // P, cout_k % P
    cshare = base[:, None] + (np.arange(P)[None, :] < rem[:, None])   # (k, P) channels per piece
    piece_bytes = cshare[:, None, None, :] * (th[:, None] * rs_out[None, :])[None, :, :, None]
    piece_elems = cshare[:, None, None, :] * (th[:, None] * tw[None, :])[None, :, :, None]
    out_bytes = piece_bytes[..., 0]
    ashape = out_bytes.shape + (t.ks - 1, P)
    add = {
        "macs": np.zeros(ashape, dtype=np.int64),
        "kernel": np.zeros(ashape, dtype=np.int64),
        "src": np.broadcast_to(2 * piece_bytes[..., None, :], ashape),
        "dst": np.broadcast_to(piece_bytes[..., None, :], ashape),
        "planar": np.broadcast_to(piece_elems[..., None, :], ashape),
    }
    out = {}
    for k in mac:
        a = mac[k].reshape(shape[:3] + (t.ks,))
        b = add[k].reshape(shape[:3] + ((t.ks - 1) * P,))
        out[k] = np.concatenate((a, b), axis=3).reshape(-1)
    # drop empty add pieces (a kernel group with fewer channels than pieces)
    keep = (out["macs"] > 0) | (out["dst"] > 0)
    return {k: v[keep] for k, v in out.items()}


def _fits(conv, lim, cin_task, cout_task, th, tw) -> bool:
    rows = min((th - 1) * conv.stride + conv.kh, conv.h)
    cols = min((tw - 1) * conv.stride + conv.kw, conv.w)
    need = cin_task * rows * int(lim.row_bytes(cols)) + cout_task * th * int(lim.row_bytes(tw))
    return need <= lim.l2_bytes


def _largest(lo: int, hi: int, ok) -> int:
    """Largest n in [lo, hi] with ok(n) (ok monotone: true then false); lo - 1 if none."""
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tile_for(conv, lim, cin_task, cout_task):
    """The largest output tile that fits L2: full rows first, then columns of one row."""
    ho, wo = conv.hout, conv.wout
    wo_max = min(wo, lim.max_hw)
    th = _largest(1, ho, lambda t: _fits(conv, lim, cin_task, cout_task, t, wo_max))
    if th >= 1 and wo_max == wo:
        return th, wo
    tw = _largest(1, wo_max, lambda t: _fits(conv, lim, cin_task, cout_task, 1, t))
    return (1, tw) if tw >= 1 else None


def _candidates(conv: Conv2d, lim: Limits, cin_t: int):
    """(cout_t, groups_t, cin_task) kernel-group sizes to try, largest first."""
    G = conv.groups
    cout_pg = conv.cout // G
    kpc = cin_t * conv.kh * conv.kw * lim.elem_bytes        # one output channel's kernel
    per_core = lim.kmem_core_bytes // kpc
    if per_core < 1:
        return []
    cmax = min(per_core * lim.cores, lim.max_channels)
    out = []
    if cout_pg <= cmax:                                      # whole conv groups per task
        g = min(G, cmax // cout_pg)
        while g >= 1:
            out.append((g * cout_pg, g, g * cin_t))
            if g * cout_pg <= lim.min_group:
                break
            g //= 2
    else:                                                    # part of one conv group
        c = cmax if cmax < lim.min_group else cmax // lim.min_group * lim.min_group
        while c >= 1:
            out.append((c, 0, cin_t))
            if c <= lim.min_group:
                break
            c //= 2
    return out


def tile_conv(conv: Conv2d, limits: Limits = M1_LIMITS) -> ConvTiling:
    """The tiling :func:`plan_conv` uses for ``conv`` (see the module docstring)."""
    return _tile_conv(dataclasses.replace(conv, name="", activation=None), limits)


@functools.lru_cache(maxsize=4096)
def _tile_conv(conv: Conv2d, limits: Limits) -> ConvTiling:
    lim = limits
    cin_pg = conv.cin // conv.groups
    if conv.cout > lim.max_channels * 1024:
        raise ValueError(f"{conv.name}: {conv.cout} output channels is beyond any plan")
    best = None
    ks = 1
    while ks <= cin_pg:
        cin_t = -(-cin_pg // ks)
        ks = -(-cin_pg // cin_t)
        for cout_t, groups_t, cin_task in _candidates(conv, lim, cin_t):
            tile = _tile_for(conv, lim, cin_task, cout_t)
            if tile is None:
                continue
            pieces = 1
            if ks > 1:
                per_ch = tile[0] * int(lim.row_bytes(tile[1]))
                pieces = -(-cout_t // max(1, lim.l2_bytes // (3 * per_ch)))
            t = ConvTiling(cout_t, groups_t, cin_t, ks, tile[0], tile[1], pieces)
            a = _conv_arrays(conv, t, lim)
            n = len(a["macs"])
            cost = (int(a["kernel"].sum() + a["src"].sum() + a["dst"].sum()) + n * lim.td_bytes, n)
            if best is None or cost < best[0]:
                best = (cost, t)
        if best is not None:
            return best[1]
        ks += 1
    raise ValueError(f"{conv.name}: no tiling fits KMem/L2 (cin={conv.cin}, h={conv.h}, w={conv.w})")


def _to_stats(a: dict, lim: Limits) -> list:
    td = lim.td_bytes
    return [Stats(tasks=1, macs=m, planar_ops=p, control_dma_bytes=td, kernel_dma_bytes=k,
                  tile_dma_src_bytes=s, tile_dma_dst_bytes=d)
            for m, p, k, s, d in zip(a["macs"].tolist(), a["planar"].tolist(),
                                     a["kernel"].tolist(), a["src"].tolist(), a["dst"].tolist())]


def plan_conv(conv: Conv2d, limits: Limits = M1_LIMITS) -> list:
    """Per-task Stats of ``conv`` lowered to M1 task descriptors (analytic plan)."""
    return _to_stats(_conv_arrays(conv, tile_conv(conv, limits), limits), limits)


def plan_matmul(mm: Matmul, limits: Limits = M1_LIMITS) -> list:
    """Per-task Stats of ``mm``: its ``B`` products one after the other, each planned as
    the 1x1 convolution :func:`matmul_as_conv`."""
    conv = matmul_as_conv(mm)
    one = _conv_arrays(conv, tile_conv(conv, limits), limits)
    return _to_stats({k: np.tile(v, mm.B) for k, v in one.items()}, limits)


def plan_eltwise(el: Eltwise, limits: Limits = M1_LIMITS) -> list:
    """Per-task Stats of a planar-engine layer: channel groups (or row groups when one
    channel is too big) whose inputs and output fit L2 together."""
    lim = limits
    c, h, w = el.in_shape
    co, ho, wo = el.out_shape
    if co != c:
        raise ValueError(f"{el.name}: planar layers keep the channel count ({c} -> {co})")
    in_ch = el.n_inputs * h * int(lim.row_bytes(w))
    out_ch = ho * int(lim.row_bytes(wo))
    per_task = lim.l2_bytes // (in_ch + out_ch)
    if per_task >= 1:
        ch = _chunks(c, min(per_task, c))
        src, dst = ch * in_ch, ch * out_ch
        ops = ch * ho * wo * el.ops_per_out
    elif (h, w) == (ho, wo):                # elementwise, one channel too big
        n_t = el.n_inputs + 1
        if n_t * int(lim.row_bytes(w)) <= lim.l2_bytes:     # groups of whole rows
            rows = _chunks(h, lim.l2_bytes // (n_t * int(lim.row_bytes(w))))
            cols = np.array([w], dtype=np.int64)
        else:                                                # pieces of one row
            cw = _largest(1, w, lambda n: n_t * int(lim.row_bytes(n)) <= lim.l2_bytes)
            rows, cols = np.ones(h, dtype=np.int64), _chunks(w, cw)
        r_, c_ = np.meshgrid(rows, cols, indexing="ij")
        r_, c_ = np.tile(r_.reshape(-1), c), np.tile(c_.reshape(-1), c)
        src = el.n_inputs * r_ * lim.row_bytes(c_)
        dst = r_ * lim.row_bytes(c_)
        ops = r_ * c_ * el.ops_per_out
    else:                                   # pooling with a channel too big: split rows
        n = -(-(in_ch + out_ch) // lim.l2_bytes)
        hout = _chunks(ho, -(-ho // n))
        hi = np.minimum(-(-hout * h // ho), h)
        src = np.tile(el.n_inputs * hi * int(lim.row_bytes(w)), c)
        dst = np.tile(hout * int(lim.row_bytes(wo)), c)
        ops = np.tile(hout * wo * el.ops_per_out, c)
    z = np.zeros(len(src), dtype=np.int64)
    return _to_stats({"macs": z, "kernel": z, "src": src, "dst": dst, "planar": ops}, lim)


def plan_layer(layer, limits: Limits = M1_LIMITS) -> list:
    """Per-task Stats of any workload layer (:class:`Conv2d`, :class:`Matmul`, :class:`Eltwise`)."""
    if isinstance(layer, Conv2d):
        return plan_conv(layer, limits)
    if isinstance(layer, Matmul):
        return plan_matmul(layer, limits)
    if isinstance(layer, Eltwise):
        return plan_eltwise(layer, limits)
    raise TypeError(f"cannot plan a {type(layer).__name__}")


def sum_stats(tasks: list) -> Stats:
    """One Stats adding up ``tasks`` (per-task Stats) and keeping them in ``tasks_detail``."""
    tot = Stats(tasks_detail=list(tasks))
    for name in ("tasks", "macs", "saturated", "nan_outputs", "lut_underflow", "lut_overflow",
                 "planar_ops", "control_dma_bytes", "kernel_dma_bytes", "tile_dma_src_bytes",
                 "tile_dma_dst_bytes"):
        setattr(tot, name, sum(getattr(t, name) for t in tasks))
    return tot


@dataclass
class LayerPlan:
    """A layer and the Stats of its tasks (``stats.tasks_detail`` holds one per task)."""

    layer: object
    stats: Stats

    @property
    def name(self) -> str:
        return self.layer.name


@dataclass
class WorkloadPlan:
    """The per-layer plans of a workload; ``stats`` adds them all up."""

    workload: Workload
    layers: list = field(default_factory=list)

    @property
    def stats(self) -> Stats:
        return sum_stats([t for lp in self.layers for t in lp.stats.tasks_detail])

    @property
    def tasks(self) -> list:
        return [t for lp in self.layers for t in lp.stats.tasks_detail]


def plan_workload(workload: "Workload | str", limits: Limits = M1_LIMITS,
                  planner=None) -> WorkloadPlan:
    """Plan every layer of ``workload`` (a :class:`Workload` or a name).

    ``planner``: ``None`` or ``"analytic"`` (this module's :func:`plan_layer`),
    ``"lowered"`` (:func:`fastane.compiler.plan_layer`: each Conv2d/Matmul layer lowered to
    TDs and run on a stats-only device; Eltwise layers stay analytic), or any
    ``planner(layer) -> list[Stats]``.  Identical layers are planned once.
    """
    if isinstance(workload, str):
        from .. import workloads
        workload = workloads.get(workload)
    if planner == "lowered":
        from ..compiler import plan_layer as planner
    elif planner in (None, "analytic"):
        planner = (lambda layer: plan_layer(layer, limits))
    elif not callable(planner):
        raise ValueError(f"planner must be 'analytic', 'lowered' or a callable, got {planner!r}")
    memo: dict = {}
    out = WorkloadPlan(workload)
    for layer in workload.layers:
        key = (type(layer).__name__,) + tuple(
            v for k, v in vars(layer).items() if k not in ("name",))
        if key not in memo:
            memo[key] = planner(layer)
        out.layers.append(LayerPlan(layer, sum_stats(memo[key])))
    return out


# ===================================================================== the time model

@dataclass(frozen=True)
class ModelParams:
    """Knobs of the time model (defaults: the seed's fit and fastane's assumptions)."""

    #: T_AB = intercept + kernel_coef T_A + tile_coef T_B (seed m1-ane, measured on an M3)
    kernel_coef: float = 0.939
    tile_coef: float = 0.981
    #: the fit's intercept, read as seconds (see the module docstring): once per program
    program_overhead_s: float = 0.001
    #: TileDMADst and ControlDMA: unmeasured; assumed to run at the TileDMA rate and to
    #: add serially like the measured engines (coefficient 1)
    dst_coef: float = 1.0
    control_coef: float = 1.0
    #: per-task dispatch; None uses the chip's figure (1 us, an assumption)
    dispatch_s: float | None = None
    #: planar-engine elementwise rate as a fraction of the chip's peak FP16 OP/s
    #: (unmeasured assumption: 1/16; planar layers are DMA-bound at any plausible rate)
    planar_fraction: float = 1 / 16


DEFAULT_PARAMS = ModelParams()


def _task_arrays(tasks) -> dict:
    names = ("macs", "planar_ops", "control_dma_bytes", "kernel_dma_bytes",
             "tile_dma_src_bytes", "tile_dma_dst_bytes")
    return {n: np.fromiter((getattr(t, n) for t in tasks), dtype=np.float64, count=len(tasks))
            for n in names}


def _as_tasks(stats) -> list:
    """Per-task Stats of a Stats (its tasks_detail), a list, or a plan."""
    if isinstance(stats, (WorkloadPlan,)):
        return stats.tasks
    if isinstance(stats, LayerPlan):
        return stats.stats.tasks_detail or [stats.stats]
    if isinstance(stats, Stats):
        return stats.tasks_detail or [stats]
    return list(stats)


def task_times(tasks, chip="m1", params: ModelParams = DEFAULT_PARAMS) -> dict:
    """Seconds per task, as arrays: ``compute``, ``kernel_dma``, ``tile_dma`` (src),
    ``dst_dma``, ``control_dma``, ``dma`` (the weighted sum), ``dispatch``, ``total``.

    A Stats without ``tasks_detail`` counts as one task (even when ``tasks`` > 1), so give
    per-task Stats for per-task maxima.
    """
    chip = _chips.get(chip)
    a = _task_arrays(_as_tasks(tasks))
    peak = chip.peak_ops_fp16.value
    kbw, tbw = chip.kernel_dma_bw.value, chip.tile_dma_bw.value
    disp = chip.dispatch_s.value if params.dispatch_s is None else params.dispatch_s
    compute = 2 * a["macs"] / peak + a["planar_ops"] / (peak * params.planar_fraction)
    kern = a["kernel_dma_bytes"] / kbw
    tile = a["tile_dma_src_bytes"] / tbw
    dst = a["tile_dma_dst_bytes"] / tbw
    ctl = a["control_dma_bytes"] / tbw
    dma = (params.kernel_coef * kern + params.tile_coef * tile + params.dst_coef * dst
           + params.control_coef * ctl)
    # the SoC's DRAM bandwidth bounds all engines together (matters where a borrowed DMA
    # bandwidth is capped at DRAM and the fit's coefficients < 1 would beat it)
    total_bytes = (a["kernel_dma_bytes"] + a["tile_dma_src_bytes"] + a["tile_dma_dst_bytes"]
                   + a["control_dma_bytes"])
    dma = np.maximum(dma, total_bytes / chip.dram_bw.value)
    n = len(compute)
    dispatch = np.full(n, disp)
    return {"compute": compute, "kernel_dma": kern, "tile_dma": tile, "dst_dma": dst,
            "control_dma": ctl, "dma": dma, "dispatch": dispatch,
            "total": np.maximum(compute, dma) + dispatch}


@dataclass
class Estimate:
    """The model's verdict on a program (or one layer of it) for one chip."""

    name: str
    chip: str
    tasks: int
    macs: int
    planar_ops: int
    dram_bytes: int
    kernel_dma_bytes: int
    tile_dma_src_bytes: int
    tile_dma_dst_bytes: int
    control_dma_bytes: int
    #: sums over tasks (seconds)
    compute_s: float
    dma_s: float
    dispatch_s: float
    #: program overhead (the fit's intercept), 0 for a layer
    overhead_s: float
    #: predicted time: sum over tasks of max(compute, dma) + dispatch, + overhead
    time_s: float
    #: tasks whose DMA time exceeds their compute time
    dma_bound_tasks: int
    peak_ops: float
    dram_bw: float

    @property
    def ops(self) -> int:
        """Operations: 2 per MAC plus the planar engine's elementwise operations."""
        return 2 * self.macs + self.planar_ops

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, OP per byte of DRAM traffic."""
        return self.ops / self.dram_bytes if self.dram_bytes else math.inf

    @property
    def ridge(self) -> float:
        """Ridge point of the chip (marketing peak / marketing DRAM bandwidth), OP/byte."""
        return self.peak_ops / self.dram_bw

    @property
    def bound(self) -> str:
        """"memory" below the ridge point, "compute" at or above it (classic roofline)."""
        return "memory" if self.intensity < self.ridge else "compute"

    @property
    def limiter(self) -> str:
        """Largest part of the predicted time: "compute", "dma", "dispatch" (per task) or
        "overhead" (the once-per-program constant)."""
        parts = {"compute": self.compute_s, "dma": self.dma_s, "dispatch": self.dispatch_s,
                 "overhead": self.overhead_s}
        return max(parts, key=parts.get)

    @property
    def roof_ops(self) -> float:
        """Attainable OP/s at this intensity: min(peak, intensity x DRAM bandwidth)."""
        return min(self.peak_ops, self.intensity * self.dram_bw)

    @property
    def attained_ops(self) -> float:
        """OP/s the model predicts (ops / time)."""
        return self.ops / self.time_s if self.time_s else 0.0

    @property
    def pct_of_roof(self) -> float:
        return 100.0 * self.attained_ops / self.roof_ops if self.roof_ops else 0.0

    def as_dict(self) -> dict:
        d = dict(vars(self))
        for p in ("ops", "intensity", "ridge", "bound", "limiter", "roof_ops", "attained_ops",
                  "pct_of_roof"):
            d[p] = getattr(self, p)
        if d["intensity"] == math.inf:
            d["intensity"] = None
        return d


def estimate(stats, chip="m1", params: ModelParams = DEFAULT_PARAMS, name: str = "",
             program: bool = True) -> Estimate:
    """Predict the time of ``stats`` (a Stats with per-task ``tasks_detail``, a list of
    per-task Stats, a :class:`LayerPlan` or a :class:`WorkloadPlan`) on ``chip``.

    ``program=True`` adds the once-per-program overhead (``params.program_overhead_s``);
    use ``program=False`` for one layer of a larger program.
    """
    chip = _chips.get(chip)
    tasks = _as_tasks(stats)
    t = task_times(tasks, chip, params)
    tot = sum_stats(tasks) if not isinstance(stats, Stats) or not stats.tasks_detail else stats
    over = params.program_overhead_s if program else 0.0
    return Estimate(
        name=name, chip=chip.key, tasks=int(tot.tasks), macs=int(tot.macs),
        planar_ops=int(tot.planar_ops), dram_bytes=int(tot.dram_bytes),
        kernel_dma_bytes=int(tot.kernel_dma_bytes), tile_dma_src_bytes=int(tot.tile_dma_src_bytes),
        tile_dma_dst_bytes=int(tot.tile_dma_dst_bytes), control_dma_bytes=int(tot.control_dma_bytes),
        compute_s=float(t["compute"].sum()), dma_s=float(t["dma"].sum()),
        dispatch_s=float(t["dispatch"].sum()), overhead_s=over,
        time_s=float(t["total"].sum()) + over,
        dma_bound_tasks=int((t["dma"] > t["compute"]).sum()),
        peak_ops=chip.peak_ops_fp16.value, dram_bw=chip.dram_bw.value)


def tokens_per_s_bound(dram_bytes: float, chip="m1", bandwidth: str = "dram") -> float:
    """Upper bound on decode tokens/s: a bandwidth / the bytes one token moves.

    ``bandwidth``: ``"dram"`` (marketing DRAM), ``"ane_read"`` (measured ANE read,
    anemll-bench; NaN where unmeasured) or ``"kernel_dma"`` (KernelDMA engine).
    With ``dram_bytes`` >= 2 x parameters (fp16 weights), this never exceeds
    bandwidth / 2P.
    """
    chip = _chips.get(chip)
    fig = {"dram": chip.dram_bw, "ane_read": chip.ane_read_bw,
           "kernel_dma": chip.kernel_dma_bw}[bandwidth]
    if fig is None:
        return math.nan
    return fig.value / dram_bytes
