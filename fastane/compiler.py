"""The lowering: numpy calls -> programs of real M1 task descriptors -> the device.

``fastane.matmul``/``linear``/``conv1d``/``conv2d`` do not compute anything themselves:
they describe the call as a :class:`Conv` (a matmul is a 1x1 convolution in the
``(B, C, 1, S)`` layout: ``(M, K) @ (K, N)`` has ``Cin = K``, ``Cout = N``, ``S = M`` and
the weights ``B^T``), :func:`lower` turns that into a :class:`Lowered` program -- TDs
chained for the device, a BAR plan, the DRAM layouts and the KMem layout of every task
-- and :func:`execute` runs it on a :class:`~fastane.device.Device`: the input is written
into unified memory in the layout the TDs' TileDMASrc registers describe, the weights
and NE coefficients (bias vector, LUT block) where their KernelDMA registers point, the
chain is submitted through the task manager, and the output is read back from where the
TileDMADst registers put it.  ``docs/compiler.md`` walks through it.

**Tiling** (:func:`tile`): one task = one *kernel group* (output channels; whole conv
groups when they fit) x one *tile* (output rows, or columns of one row).

* KMem: the output channels of a task are dealt to the 16 cores in blocks of
  ``m = ceil(Cout_task / 16)``; core ``l`` holds its channels' kernels, then (with a
  bias) their biases, then (core 0, with a LUT activation) the 0x80-byte LUT block,
  and that must fit its 64 KiB.
* L2: the task's input tile (with its halo) and output tile must fit the 2 MiB L2
  together (every row in whole 64-byte bursts), which implies the device's streaming
  working set fits too.
* TD fields and SPEC 5 limits: C <= 65536, H, W <= 16384 per task, NumGroups <= 8191,
  kernel <= 31, stride and dilation <= 3, padding <= 31 and smaller than the kernel span.
  Padding the TD cannot express is materialized as zeros in the input buffer
  ("padded" mode); a kernel, stride or dilation it cannot express is unfolded on the
  host into a 1x1 convolution ("im2col" mode).  Both are bit-identical: a padded pixel
  is a zero operand either way, and the unfolded channels keep the (input channel,
  kernel row, kernel column) accumulation order.
* Column tiles (one output row cannot fit L2 at full width) start on 64-byte
  boundaries: widths are multiples of 32 fp16 columns, and the left padding is
  materialized.
* Among the kernel-group sizes (the largest that fits KMem, halved down to 16 channels)
  the one with the least DRAM traffic wins; for each, the tile is the largest that fits
  L2, full rows first.  Loop order: image, kernel group, row tile, column tile.  Every
  task loads its kernel again (weights are re-fetched per spatial tile) and reads its
  input tile again (activations are re-read per kernel group).
* The reduction is never split across tasks: partial sums would be read out to fp16 and
  added again, which changes the numerics (SPEC 2 reads the accumulator out once).  When
  one output channel's kernel cannot fit a core's KMem, :func:`tile` raises
  ``NotImplementedError``.

**Running**: :func:`execute` takes a device (default: :func:`default_device`, one per
process, shared by all threads: the task manager serialises execution, and each call
runs on its own buffers), binds the program's slots to buffers it keeps per program
(so a repeated call only rewrites inputs and weights), and returns the output and the
device's Stats.  Lowered programs are cached by :class:`Conv` (an LRU of
:data:`CACHE_SIZE`), so repeated calls do not lower again.

**Activations** (:mod:`fastane.activations`) are :class:`Eltwise` calls: :func:`elementwise`
lowers them to elementwise programs as Apple's compiler builds them (an NE task with
``KernelMode = 1`` and the activation's table, then for sigmoid a planar +0.5 and for silu
a planar multiply by the input) over the flattened tensor, cut into tiles that fit L2 and
the TD limits, cached in the same LRU.  ``activation="sigmoid"``/``"silu"`` after a
convolution append the same chain to each convolution task, intermediates kept in L2
(:func:`_post_chain`).  docs/compiler.md, section 9.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import struct
import threading
from dataclasses import dataclass

import numpy as np

from . import lut as _lut
from .kernels import layout as _klayout
from .stats import Stats
from .td import BarSlot, Program
from .m1 import LUT_BLOCK, KernelLayout, kernel_layout
from .td.asm import conv_td, eltwise_td
from .td.fields import BY_NAME, TD_SIZE

__all__ = ["Conv", "NEStage", "Tiling", "Lowered", "Limits", "LIMITS", "ne_stage", "tile", "lower",
           "execute", "conv2d", "matmul", "fold", "default_device", "set_default_device",
           "cache_info", "cache_clear", "plan_layer", "layer_conv", "KernelGroup", "SLOT_TD",
           "SLOT_KERNEL", "SLOT_OUTPUT", "SLOT_INPUT", "Eltwise", "LoweredEltwise", "elementwise",
           "SLOT_INTERMEDIATE"]

#: BAR slots of a lowered program (SPEC 6's convention: 0 TDs, 1 kernel, 4.. outputs, then inputs)
SLOT_TD, SLOT_KERNEL, SLOT_OUTPUT, SLOT_INPUT = 0, 1, 4, 5
#: lowered programs kept (an LRU keyed by :class:`Conv`)
CACHE_SIZE = 128
#: most TDs in one submitted chain (TM_INFO's 16-bit count)
MAX_CHAIN = 0xFFFF
_ALIGN = 64


def _ru(x: int, m: int = _ALIGN) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class Limits:
    """What one task may hold (SPEC 1 and 5, and the widths of the TD fields)."""

    cores: int = 16
    kmem_core_bytes: int = 64 << 10
    l2_bytes: int = 2 << 20
    max_channels: int = 65536        # SPEC 5: C
    max_hw: int = 16384              # SPEC 5: H, W
    max_groups: int = 8191           # Common.GroupConvCfg.NumGroups: 13 bits
    max_kernel: int = 31             # ConvCfg.Kh/Kw: 5 bits
    max_stride: int = 3              # ConvCfg.Sy/Sx: 2 bits
    max_dilation: int = 3            # ConvCfg.Oy/Ox: 2 bits
    max_padding: int = 31            # ConvCfg.Py/Px: 5 bits
    min_group: int = 16              # smallest kernel group the search tries
    col_align: int = 32              # fp16 columns in a 64-byte DMA burst


LIMITS = Limits()


# ============================================================================ the NE stage
@dataclass(frozen=True)
class NEStage:
    """What the NE does after the readout: ``nonlinear`` is "identity", "relu" or "lut"
    (with ``block``), after an fp16 ``post_scale``."""

    name: str
    nonlinear: str = "identity"
    block: object = None
    post_scale: float = 1.0
    #: the tasks after the NE stage (:data:`MULTI_STAGE`): None, "sigmoid" (a planar task
    #: adding 0.5 to the LUT's output) or "silu" (the NE stage only adds the bias; then an
    #: elementwise LUT task, the planar +0.5 and a planar multiply by the NE stage's output)
    post: str | None = None

    @property
    def lut(self) -> bool:
        return self.nonlinear == "lut"

    @property
    def out_tiles(self) -> int:
        """Output-sized tensors a task's chain holds in L2 at once (the kept intermediates
        and the result on its way out)."""
        return {None: 1, "sigmoid": 2, "silu": 4}[self.post]

    @property
    def post_tasks(self) -> int:
        """TDs after each NE-stage task."""
        return {None: 0, "sigmoid": 1, "silu": 3}[self.post]


_EXP_SCALE = float(np.uint16(0x3DC5).view(np.float16))   # fp16 log2(e), as fastane.exp
#: activations that are one NE stage: name -> (LUT table, PostScale); "relu" is NonlinearMode 1
SINGLE_STAGE = {
    "tanh": ("tanh", 1.0), "gelu": ("gelu", 1.0), "exp": ("exp2", _EXP_SCALE), "exp2": ("exp2", 1.0),
    "relu6": ("relu6", 1.0), "hardtanh": ("hardtanh", 1.0), "leaky_relu": ("leaky_relu", 1.0),
    "selu": ("selu", 1.0), "sign": ("sign", 1.0), "reciprocal": ("reciprocal", 1.0),
    "rsqrt": ("rsqrt", 1.0), "sqrt": ("sqrt", 1.0), "log2": ("log2", 1.0),
}
#: activations Apple's programs finish on the planar engine (corpus unary/sigmoid.bin,
#: activation/silu.bin): name -> the chain the lowering emits after the NE stage
MULTI_STAGE = {
    "sigmoid": "the sigmoid - 0.5 table in the NE stage, then a planar task adding 0.5",
    "silu": "the NE stage's output z kept in L2, the sigmoid - 0.5 table on z (an elementwise NE "
            "task), a planar task adding 0.5, and a planar multiply by z",
}


def ne_stage(activation) -> NEStage:
    """The :class:`NEStage` of ``activation``: None, ``"relu"``, a single-stage LUT
    activation of :mod:`fastane.activations` (:data:`SINGLE_STAGE`), ``"sigmoid"`` or
    ``"silu"`` (an NE stage followed by planar tasks, :data:`MULTI_STAGE`), or a
    :class:`fastane.lut.CoeffBlock` (a table of your own)."""
    if activation is None:
        return NEStage("identity")
    if isinstance(activation, _lut.CoeffBlock):
        return NEStage("lut", "lut", activation, 1.0)
    if not isinstance(activation, str):
        raise TypeError(f"activation must be None, a name or a fastane.lut.CoeffBlock, "
                        f"got {type(activation).__name__}")
    if activation == "relu":
        return NEStage("relu", "relu")
    if activation in SINGLE_STAGE:
        table, scale = SINGLE_STAGE[activation]
        return NEStage(activation, "lut", _lut.get_block(table), scale)
    if activation == "sigmoid":
        return NEStage("sigmoid", "lut", _lut.get_block("sigmoid"), 1.0, post="sigmoid")
    if activation == "silu":
        return NEStage("silu", "identity", None, 1.0, post="silu")
    known = ", ".join(["None", "'relu'"] + [repr(k) for k in (*SINGLE_STAGE, *MULTI_STAGE)])
    raise ValueError(f"unknown activation {activation!r}; fused activations: {known} "
                     f"(or a fastane.lut.CoeffBlock)")


def fold(weight, bias, scale, shift):
    """Fold an affine ``scale * z + shift`` after a convolution into its weights and bias
    (SPEC 3, compile-time): ``W' = scale * W``, ``b' = scale * b + shift``, rounded once to
    fp16 (:func:`fastane.lut.fold_affine`).  Returns ``(W', b')`` as float16."""
    w2, b2 = _lut.fold_affine(weight, bias, scale, shift)
    return np.asarray(w2, np.float16), np.asarray(b2, np.float16).reshape(-1)


# ============================================================================ the problem
@dataclass(frozen=True)
class Conv:
    """One convolution to lower: ``n`` images ``(cin, h, w)`` -> ``(cout, hout, wout)``.

    ``pad = ((top, bottom), (left, right))`` zeros; ``bias``: a per-channel bias is added
    in the NE; ``activation``: see :func:`ne_stage`.  Hashable: the program cache key.
    """

    n: int
    cin: int
    h: int
    w: int
    cout: int
    kh: int = 1
    kw: int = 1
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    pad: tuple = ((0, 0), (0, 0))
    groups: int = 1
    bias: bool = False
    activation: object = None

    @property
    def span(self) -> tuple:
        return ((self.kh - 1) * self.dilation[0] + 1, (self.kw - 1) * self.dilation[1] + 1)

    @property
    def hout(self) -> int:
        return (self.h + sum(self.pad[0]) - self.span[0]) // self.stride[0] + 1

    @property
    def wout(self) -> int:
        return (self.w + sum(self.pad[1]) - self.span[1]) // self.stride[1] + 1

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def macs(self) -> int:
        return self.n * self.cout * self.hout * self.wout * self.cin_g * self.kh * self.kw

    @classmethod
    def matmul(cls, M: int, K: int, N: int, groups: int = 1, bias: bool = False,
               activation=None) -> "Conv":
        """``groups`` products ``(M, K) @ (K, N)`` as one 1x1 convolution in the (B, C, 1, S)
        layout: ``Cin = groups * K``, ``Cout = groups * N``, ``S = M`` along W."""
        return cls(1, groups * K, 1, M, groups * N, groups=groups, bias=bias, activation=activation)


# ============================================================================ tiling
@dataclass(frozen=True)
class Tiling:
    """How a convolution is cut into tasks (see the module docstring)."""

    #: "direct" (the TDs hold kernel, stride, dilation, padding), "padded" (padding
    #: materialized in the input buffer) or "im2col" (unfolded on the host to a 1x1 conv)
    mode: str
    #: output channels of a full kernel group (the last one may be smaller)
    cout_t: int
    #: whole conv groups per task (0 when a task holds part of one group)
    groups_t: int
    #: output rows and columns of a full tile
    th: int
    tw: int

    def describe(self) -> str:
        s = f"{self.mode}: kernel groups of {self.cout_t} ch"
        if self.groups_t > 1:
            s += f" ({self.groups_t} conv groups)"
        return s + f", tiles {self.th}x{self.tw}"


def _effective(conv: Conv, lim: Limits, force_padded: bool = False) -> tuple[str, Conv]:
    """The convolution the TDs run: ``conv`` itself, with its padding materialized, or
    unfolded to a 1x1 convolution."""
    (kh, kw), (sy, sx), (dy, dx) = (conv.kh, conv.kw), conv.stride, conv.dilation
    if max(kh, kw) > lim.max_kernel or max(sy, sx) > lim.max_stride or max(dy, dx) > lim.max_dilation:
        # the unfolded input: (Cin x Kh x Kw) channels of Hout x Wout pixels, laid out as
        # one row (a 1x1 convolution does not care, and long rows waste fewer DMA bursts)
        return "im2col", Conv(conv.n, conv.cin * kh * kw, 1, conv.hout * conv.wout, conv.cout,
                              groups=conv.groups, bias=conv.bias, activation=conv.activation)
    (pt, pb), (pl, pr) = conv.pad
    sh, sw = conv.span
    ok = (max(pt, pl) <= lim.max_padding and pt < sh and pb < sh and pl < sw and pr < sw)
    if force_padded or not ok:
        if (pt, pb, pl, pr) == (0, 0, 0, 0):
            return "direct", conv
        return "padded", dataclasses.replace(conv, h=conv.h + pt + pb, w=conv.w + pl + pr,
                                             pad=((0, 0), (0, 0)))
    return "direct", conv


def _core_capacity(per_channel: int, bias: bool, lut: bool, lim: Limits) -> int:
    """Most output channels one core can hold: kernels (+ biases) (+ the LUT block)."""
    m = lim.kmem_core_bytes // per_channel
    while m > 0 and (_ru(m * per_channel) + (_ru(2 * m) if bias else 0)
                     + (LUT_BLOCK if lut else 0)) > lim.kmem_core_bytes:
        m -= 1
    return m


def _candidates(c: Conv, lim: Limits, cmax: int, below_min: bool = False) -> list:
    """(cout_t, groups_t) kernel-group sizes to try, largest first: halving down to
    ``min_group`` channels, or with ``below_min`` the sizes below that, and parts of one
    conv group where whole groups were tried (a fallback when none of the first fits L2)."""
    G, cout_pg = c.groups, c.cout_g
    out, small = [], []
    if cout_pg <= cmax:                                   # whole conv groups per task
        g = min(G, cmax // cout_pg, lim.max_groups, lim.max_channels // c.cin_g,
                lim.max_channels // cout_pg)
        while g >= 1:
            (small if out and out[-1][0] <= lim.min_group else out).append((g * cout_pg, g))
            g //= 2
        # fallback: parts of one conv group (when even one whole group's output tiles do
        # not fit L2, e.g. with the intermediates a planar chain keeps there)
        k = cout_pg // 2
        while k >= 1:
            small.append((k, 0))
            k //= 2
    else:                                                 # part of one conv group
        k = cmax if cmax < lim.min_group else cmax // lim.min_group * lim.min_group
        while k >= 1:
            (small if out and out[-1][0] <= lim.min_group else out).append((k, 0))
            k //= 2
    return small if below_min else out


def _axis(n_out: int, t: int, stride: int, span: int, pad: int, n_in: int):
    """Tiles along one axis: (start, size, first input, input extent, leading pad) arrays."""
    starts = np.arange(0, n_out, t, dtype=np.int64)
    sizes = np.minimum(t, n_out - starts)
    lo = starts * stride - pad
    hi = (starts + sizes - 1) * stride - pad + span        # one past the last input row
    first = np.maximum(lo, 0)
    extent = np.minimum(hi, n_in) - first
    return starts, sizes, first, extent, first - lo


def _kernel_groups(c: Conv, cout_t: int, groups_t: int):
    """Per kernel group: (output channel 0, channels, input channel 0, input channels, groups)."""
    out = []
    if groups_t:
        for g0 in range(0, c.groups, groups_t):
            ng = min(groups_t, c.groups - g0)
            out.append((g0 * c.cout_g, ng * c.cout_g, g0 * c.cin_g, ng * c.cin_g, ng))
    else:
        for g in range(c.groups):
            for j in range(0, c.cout_g, cout_t):
                out.append((g * c.cout_g + j, min(cout_t, c.cout_g - j), g * c.cin_g, c.cin_g, 1))
    return out


def _cost(c: Conv, cout_t: int, groups_t: int, th: int, tw: int, stage: NEStage, lim: Limits):
    """(DRAM bytes incl. TDs, tasks) of one image under this tiling."""
    sh, sw = c.span
    _, rs, _, rin, _ = _axis(c.hout, th, c.stride[0], sh, c.pad[0][0], c.h)
    _, cs, _, cin_, _ = _axis(c.wout, tw, c.stride[1], sw, c.pad[1][0], c.w)
    src_tile = int((rin[:, None] * ((cin_[None, :] * 2 + 63) // 64 * 64)).sum())
    dst_tile = int(rs.sum()) * int(((cs * 2 + 63) // 64 * 64).sum())
    ntiles = len(rs) * len(cs)
    per = c.cin_g * c.kh * c.kw * 2
    total, tasks = 0, 0
    sizes = collections.Counter((ct, cit) for _, ct, _, cit, _ in _kernel_groups(c, cout_t, groups_t))
    for (ct, cit), count in sizes.items():
        lay = kernel_layout(ct, per, c.bias, stage.lut)
        total += count * (ntiles * sum(lay.sizes) + cit * src_tile + ct * dst_tile)
        tasks += count * ntiles
    # the planar tasks after each NE stage (intermediates stay in L2): their TDs, and
    # silu's LUT block loaded once more per task
    total += tasks * (stage.post_tasks * TD_SIZE + (LUT_BLOCK if stage.post == "silu" else 0))
    return total + tasks * TD_SIZE, tasks


def _fits(c: Conv, lim: Limits, cin_task: int, cout_task: int, th: int, tw: int, out_tiles: int = 1) -> bool:
    """The input tile and ``out_tiles`` output-sized tiles (the result, and the
    intermediates a planar chain keeps in L2) fit L2 together."""
    sh, sw = c.span
    rows = min((th - 1) * c.stride[0] + sh, c.h)
    cols = min((tw - 1) * c.stride[1] + sw, c.w)
    if max(rows, cols, th, tw) > lim.max_hw:
        return False
    return cin_task * rows * _ru(cols * 2) + out_tiles * cout_task * th * _ru(tw * 2) <= lim.l2_bytes


def _largest(lo: int, hi: int, ok) -> int:
    """Largest n in [lo, hi] with ok(n) (ok true then false); lo - 1 if none."""
    if hi < lo or not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tile_for(c: Conv, lim: Limits, cin_task: int, cout_task: int, out_tiles: int = 1):
    """The largest tile that fits L2: full rows first, else columns (multiples of 32) of one row."""
    ho, wo = c.hout, c.wout
    if wo <= lim.max_hw:
        th = _largest(1, ho, lambda t: _fits(c, lim, cin_task, cout_task, t, wo, out_tiles))
        if th >= 1:
            return th, wo
    a = lim.col_align
    j = _largest(1, min(wo, lim.max_hw) // a,
                 lambda j: _fits(c, lim, cin_task, cout_task, 1, j * a, out_tiles))
    return (1, j * a) if j >= 1 else None


def tile(conv: Conv, limits: Limits = LIMITS) -> Tiling:
    """The :class:`Tiling` :func:`lower` uses for ``conv`` (see the module docstring).

    Raises ``NotImplementedError`` when one output channel's kernel does not fit a core's
    KMem (that would need the reduction split across tasks), or nothing fits L2.
    """
    return _tile(conv, limits)


@functools.lru_cache(maxsize=4096)
def _tile(conv: Conv, lim: Limits) -> Tiling:
    stage = ne_stage(conv.activation)
    mode, c = _effective(conv, lim)
    best = _search(c, lim, stage)
    if best is not None and best[1].tw < c.wout and mode == "direct" and c.pad[1][0]:
        # column tiles must start on 64-byte boundaries: materialize the padding
        mode, c = _effective(conv, lim, force_padded=True)
        best = _search(c, lim, stage)
    if best is None:
        per = c.cin_g * c.kh * c.kw * 2
        if _core_capacity(per, c.bias, stage.lut, lim) < 1:
            extra = (" plus its bias" if c.bias else "") + (" and the LUT block" if stage.lut else "")
            raise NotImplementedError(
                f"one output channel's kernel ({c.cin_g} input channels x {c.kh} x {c.kw} x 2 bytes "
                f"= {per} bytes{extra}) does not fit a core's {_size(lim.kmem_core_bytes)} KMem; "
                f"fastane does not split the reduction across tasks, because the partial sums would "
                f"be read out to fp16 and added again, which changes the numerics")
        raise NotImplementedError(
            f"no tile of this convolution fits the {_size(lim.l2_bytes)} L2 with the "
            f"smallest kernel group ({c.cin_g} input channels per group, input {c.h}x{c.w}, "
            f"kernel span {c.span[0]}x{c.span[1]}); splitting the reduction would change the "
            f"numerics")
    return dataclasses.replace(best[1], mode=mode)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else \
        f"{n >> 10} KiB" if n >= 1024 and not n % 1024 else f"{n}-byte"


def _search(c: Conv, lim: Limits, stage: NEStage):
    per = c.cin_g * c.kh * c.kw * 2
    m = _core_capacity(per, c.bias, stage.lut, lim)
    if m < 1:
        return None
    cmax = min(m * lim.cores, lim.max_channels)
    best = None
    for below_min in (False, True):
        for cout_t, groups_t in _candidates(c, lim, cmax, below_min):
            cin_task = groups_t * c.cin_g if groups_t else c.cin_g
            t = _tile_for(c, lim, cin_task, cout_t, stage.out_tiles)
            if t is None:
                continue
            cost = _cost(c, cout_t, groups_t, t[0], t[1], stage, lim)
            if best is None or cost < best[0]:
                best = (cost, Tiling("direct", cout_t, groups_t, t[0], t[1]))
        if best is not None:
            return best
    return best



# ============================================================================ lowered programs
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
class Lowered:
    """A convolution lowered to TDs: the program(s), the buffer plan, and how to fill it.

    ``programs`` are chains of at most :data:`MAX_CHAIN` TDs (usually one), run in order;
    ``tasks`` describes every TD (one row per task: image, kernel group, tile); the
    input, output and kernel BAR slots hold ``in_layout``, ``out_layout`` and
    ``kernel_bytes`` bytes.
    """

    conv: Conv               # the call
    eff: Conv                # what the TDs compute (after padding/unfolding)
    tiling: Tiling
    stage: NEStage
    groups: list             # KernelGroup
    tasks: np.ndarray        # structured: n, k, oy0, th, r0, rows, padt, ox0, tw, c0, cols, padl
    programs: list           # Program
    in_layout: object        # AneLayout of eff's input (N, Cin, H, W)
    out_layout: object       # AneLayout of the output (N, Cout, Hout, Wout)
    kernel_bytes: int
    #: per-device buffers kept for reuse: {id(device): [_Binding, ...]}
    _free: dict = dataclasses.field(default_factory=dict, repr=False)
    #: devices the programs were loaded on, runs in flight, dropped from the cache
    _devices: dict = dataclasses.field(default_factory=dict, repr=False)
    _active: int = dataclasses.field(default=0, repr=False)
    _evicted: bool = dataclasses.field(default=False, repr=False)
    _lock: object = dataclasses.field(default_factory=threading.Lock, repr=False)

    @property
    def program(self) -> Program:
        """The (first) program: ``fastane disasm`` prints ``program.to_bytes()``."""
        return self.programs[0]

    @property
    def n_tasks(self) -> int:
        """TDs of the program(s): one per row of ``tasks``, plus the planar chain after each
        (sigmoid, silu)."""
        return len(self.tasks) * self.tds_per_task

    @property
    def tds_per_task(self) -> int:
        """TDs per row of ``tasks``: the convolution, then its planar chain."""
        return 1 + self.stage.post_tasks

    @property
    def lut_offset(self) -> int:
        """Where silu's separate LUT task finds its block in the kernel slot (after every
        kernel group)."""
        return self.groups[-1].offset + self.groups[-1].layout.nbytes if self.groups else 0

    @property
    def bars(self) -> dict:
        return self.programs[0].bars

    def buffer_sizes(self) -> dict:
        """Bytes of the BAR slots a run binds: ``{slot: bytes}``."""
        return {SLOT_INPUT: self.in_layout.nbytes, SLOT_OUTPUT: self.out_layout.nbytes,
                SLOT_KERNEL: self.kernel_bytes}

    def describe(self) -> str:
        c = self.conv
        post = f", then {self.stage.post_tasks} planar-chain TDs each ({self.stage.post})" if self.stage.post else ""
        return (f"conv {c.cin}x{c.h}x{c.w} -> {c.cout}x{c.hout}x{c.wout} (k {c.kh}x{c.kw}, "
                f"s {c.stride}, g {c.groups}, n {c.n}): {self.n_tasks} tasks, "
                f"{self.tiling.describe()}{post}")

    # -------------------------------------------------------------- data placement
    def input_view(self, raw: np.ndarray) -> np.ndarray:
        """The call's input ``(N, Cin, H, W)`` as a view into the input slot's bytes
        (direct and padded modes; the padded border stays zero)."""
        v = self.in_layout.view(raw)
        if self.tiling.mode == "padded":
            (pt, pb), (pl, pr) = self.conv.pad
            v = v[:, :, pt:pt + self.conv.h, pl:pl + self.conv.w]
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
        v = np.ndarray((c.n, c.cin, c.kh, c.kw, c.hout, c.wout), np.float16, buffer=raw,
                       strides=(lay.batch_stride, c.kh * c.kw * lay.plane_stride, c.kw * lay.plane_stride,
                                lay.plane_stride, 2 * c.wout, 2))
        (pt, pb), (pl, pr) = c.pad
        xp = np.zeros((c.n, c.cin, c.h + pt + pb, c.w + pl + pr), np.float16)
        xp[:, :, pt:pt + c.h, pl:pl + c.w] = x
        sy, sx = c.stride
        dy, dx = c.dilation
        for ky in range(c.kh):
            for kx in range(c.kw):
                y0, x0 = ky * dy, kx * dx
                v[:, :, ky, kx] = xp[:, :, y0:y0 + (c.hout - 1) * sy + 1:sy, x0:x0 + (c.wout - 1) * sx + 1:sx]

    def output_view(self, raw: np.ndarray) -> np.ndarray:
        """The output ``(N, Cout, Hout, Wout)`` as a view into the output slot's bytes."""
        if self.tiling.mode == "im2col":       # Hout x Wout pixels in one row of each plane
            c, lay = self.conv, self.out_layout
            return np.ndarray((c.n, c.cout, c.hout, c.wout), np.float16, buffer=raw,
                              strides=(lay.batch_stride, lay.plane_stride, 2 * c.wout, 2))
        return self.out_layout.view(raw)

    def with_weights(self, weight, bias=None) -> list:
        """The programs with their kernel bytes (weights, biases, LUT) filled in, as
        standalone :class:`~fastane.td.Program` objects (``Program.to_bytes()`` gives the
        corpus ``.bin`` layout).  A one-tile program runs with ``Device.run(program,
        {SLOT_INPUT: x})``; a tiled one through :func:`execute`, which knows every tile."""
        raw = np.zeros(self.kernel_bytes, np.uint8)
        self.pack(raw, weight, bias)
        kernel = raw.tobytes()
        return [dataclasses.replace(p, kernel=kernel) for p in self.programs]

    def pack(self, raw: np.ndarray, weight, bias=None) -> None:
        """Write the weights ``(Cout, Cin/groups, Kh, Kw)`` (fp16; any strides), the bias
        ``(Cout,)`` and the LUT block into the kernel slot bytes, as every task's KernelDMA
        lanes expect them (:class:`~fastane.td.asm.KernelLayout`)."""
        per = self.eff.cin_g * self.eff.kh * self.eff.kw
        w2 = np.asarray(weight).reshape(self.conv.cout, per)
        k16 = raw[:self.kernel_bytes].view(np.float16)
        block = None
        if self.stage.lut:
            block = np.frombuffer(self.stage.block.to_bytes(), np.float16)
        b = None if bias is None else np.asarray(bias, np.float16).reshape(-1)
        for g in self.groups:
            lay = g.layout
            m, L = lay.m, lay.lanes
            base = g.offset // 2
            rest = (lay.wbytes + lay.bbytes) // 2
            first = lay.sizes[0] // 2
            src = w2[g.co0:g.co0 + g.cout]
            full = g.cout // m                      # lanes holding m channels
            lane = np.ndarray((m, per), np.float16, buffer=k16, offset=2 * base, strides=(2 * per, 2))
            lane[:min(m, g.cout)] = src[:m]
            if full > 1:
                lanes = np.ndarray((full - 1, m, per), np.float16, buffer=k16,
                                   offset=2 * (base + first), strides=(2 * rest, 2 * per, 2))
                lanes[...] = src[m:full * m].reshape(full - 1, m, per)
            if L > max(full, 1):                    # a last lane with fewer channels
                off = base + first + (L - 2) * rest
                k16[off:off + (g.cout - (L - 1) * m) * per] = src[(L - 1) * m:].reshape(-1)
            if b is not None:
                bb = b[g.co0:g.co0 + g.cout]
                woff = lay.wbytes // 2
                k16[base + woff:base + woff + min(m, g.cout)] = bb[:m]
                for ln in range(1, L):
                    off = base + first + (ln - 1) * rest + woff
                    part = bb[ln * m:(ln + 1) * m]
                    k16[off:off + part.size] = part
            if block is not None:
                off = base + (lay.wbytes + lay.bbytes) // 2
                k16[off:off + LUT_BLOCK // 2] = block
        if self.stage.post == "silu":       # the table of the elementwise LUT task
            off = self.lut_offset // 2
            k16[off:off + LUT_BLOCK // 2] = np.frombuffer(_lut.get_block("sigmoid").to_bytes(), np.float16)


def _patcher(names):
    """(word, shift, mask) of TD fields, for patching a template's words quickly."""
    return [(BY_NAME[n].word, BY_NAME[n].shift, BY_NAME[n].mask) for n in names]


_SRC_BASE, _DST_BASE, _TID, _LNID = _patcher(["TileDMASrc.BaseAddr.Addr", "TileDMADst.BaseAddr.Addr",
                                              "Header.TID", "Header.LNID"])
_COEFF_BASE = _patcher([f"KernelDMASrc.CoeffBaseAddr[{k}].Addr" for k in range(16)])
_TASK_DTYPE = np.dtype([("n", "i8"), ("k", "i8"), ("oy0", "i8"), ("th", "i8"), ("r0", "i8"),
                        ("rows", "i8"), ("padt", "i8"), ("ox0", "i8"), ("tw", "i8"), ("c0", "i8"),
                        ("cols", "i8"), ("padl", "i8")])


def _set(words, wsm, value):
    w, s, m = wsm
    if not 0 <= value <= m:
        raise ValueError(f"value {value:#x} does not fit a {m.bit_length()}-bit TD field")
    words[w] = (words[w] & ~(m << s) & 0xFFFFFFFF) | (value << s)


def lower(conv, limits: Limits = LIMITS):
    """Lower a :class:`Conv` (to a :class:`Lowered`) or an :class:`Eltwise` (to a
    :class:`LoweredEltwise`) to TDs (cached: the same call gives the same object)."""
    with _CACHE_LOCK:
        hit = _CACHE.get((conv, limits))
        if hit is not None:
            _CACHE.move_to_end((conv, limits))
            _STATS["hits"] += 1
            return hit
    low = _lower_eltwise(conv, limits) if isinstance(conv, Eltwise) else _lower(conv, limits)
    with _CACHE_LOCK:
        hit = _CACHE.get((conv, limits))
        if hit is not None:          # another thread lowered it meanwhile
            _STATS["hits"] += 1
            return hit
        _STATS["misses"] += 1
        _CACHE[(conv, limits)] = low
        while len(_CACHE) > CACHE_SIZE:
            _, old = _CACHE.popitem(last=False)
            _release_all(old)
    return low


def _lower(conv: Conv, lim: Limits) -> Lowered:
    _check_conv(conv)
    stage = ne_stage(conv.activation)
    t = tile(conv, lim)
    c = _effective(conv, lim, force_padded=t.mode == "padded")[1]
    sh, sw = c.span
    in_layout = _layout(c.n, c.cin, c.h, c.w)
    out_layout = _layout(c.n, c.cout, c.hout, c.wout)
    per = c.cin_g * c.kh * c.kw * 2
    groups, offset = [], 0
    for co0, ct, ci0, cit, ng in _kernel_groups(c, t.cout_t, t.groups_t):
        lay = kernel_layout(ct, per, c.bias, stage.lut)
        groups.append(KernelGroup(co0, ct, ci0, cit, ng, offset, lay))
        offset += lay.nbytes
    ry = _axis(c.hout, t.th, c.stride[0], sh, c.pad[0][0], c.h)
    rx = _axis(c.wout, t.tw, c.stride[1], sw, c.pad[1][0], c.w)
    ny, nx, nk = len(ry[0]), len(rx[0]), len(groups)
    tasks = np.zeros(c.n * nk * ny * nx, _TASK_DTYPE)
    idx = np.indices((c.n, nk, ny, nx)).reshape(4, -1)
    tasks["n"], tasks["k"] = idx[0], idx[1]
    for name, arr in zip(("oy0", "th", "r0", "rows", "padt"), ry):
        tasks[name] = arr[idx[2]]
    for name, arr in zip(("ox0", "tw", "c0", "cols", "padl"), rx):
        tasks[name] = arr[idx[3]]

    nonlinear = stage.nonlinear
    bias = "channel" if c.bias else None
    ib, (ip, ir) = in_layout.batch_stride, (in_layout.plane_stride, in_layout.row_stride)
    ob, (op, orow) = out_layout.batch_stride, (out_layout.plane_stride, out_layout.row_stride)
    templates = {}
    words_list = []
    per_task = 1 + stage.post_tasks
    chunk = MAX_CHAIN // per_task * per_task     # a task's planar chain never spans two chains
    lut_off = (groups[-1].offset + groups[-1].layout.nbytes) if groups else 0
    for row in tasks.tolist():
        n, k, oy0, th, r0, rows, padt, ox0, tw, c0, cols, padl = row
        g = groups[k]
        padb = (oy0 + th - 1) * c.stride[0] - c.pad[0][0] + sh - (r0 + rows)
        padr = (ox0 + tw - 1) * c.stride[1] - c.pad[1][0] + sw - (c0 + cols)
        key = (g.cout, g.cin, g.groups, rows, cols, th, tw, padt, padb, padl, padr)
        tpl = templates.get(key)
        if tpl is None:
            td = conv_td((1, g.cin, rows, cols), (1, g.cout, th, tw), kernel=(c.kh, c.kw),
                         stride=c.stride, dilation=c.dilation, padding=((padt, padb), (padl, padr)),
                         groups=g.groups, src=SLOT_INPUT, dst=SLOT_OUTPUT, kernel_slot=SLOT_KERNEL,
                         bias=bias, post_scale=stage.post_scale, nonlinear=nonlinear,
                         src_strides=(ir, ip), dst_strides=(orow, op), nid=1, eon=False)
            post = _post_chain(td, stage, (g.cout, th, tw), (orow, op), lut_off) if stage.post else []
            tpl = ([td.words] + [p.words for p in post], g.layout.offsets)
            templates[key] = tpl
        src = n * ib + g.ci0 * ip + r0 * ir + c0 * 2
        dst = n * ob + g.co0 * op + oy0 * orow + ox0 * 2
        words = list(tpl[0][0])
        _set(words, _SRC_BASE, src >> 6)
        if not stage.post:
            _set(words, _DST_BASE, dst >> 6)
        for lane, off in enumerate(tpl[1]):
            _set(words, _COEFF_BASE[lane], (g.offset + off) >> 6)
        chain = [words] + [list(w) for w in tpl[0][1:]]
        if stage.post:
            _set(chain[-1], _DST_BASE, dst >> 6)   # the last planar task writes the output tile
        for words in chain:
            j = len(words_list) % chunk
            _set(words, _TID, j)
            _set(words, _LNID, int(j > 0))
            words_list.append(words)

    kernel_bytes = max(offset + (LUT_BLOCK if stage.post == "silu" else 0), _ALIGN)
    bars = {SLOT_TD: None, SLOT_KERNEL: BarSlot(SLOT_KERNEL, "kernel", kernel_bytes, "weights"),
            SLOT_OUTPUT: BarSlot(SLOT_OUTPUT, "output", out_layout.nbytes, "y"),
            SLOT_INPUT: BarSlot(SLOT_INPUT, "input", in_layout.nbytes, "x")}
    programs = []
    for s in range(0, len(words_list), chunk):
        programs.append(_program(words_list[s:s + chunk], bars, f"conv{c.cin}x{c.h}x{c.w}-{c.cout}"))
    return Lowered(conv, c, t, stage, groups, tasks, programs, in_layout, out_layout, kernel_bytes)


def _post_chain(td, stage: NEStage, shape, dst_strides, lut_off: int) -> list:
    """The tasks after a convolution task ``td`` whose NE stage is ``stage`` (sigmoid or
    silu; ``td`` is changed to keep its result in L2).  ``shape`` = the output tile (C, H,
    W); intermediates stay in L2 after the convolution's source window, one whole tile
    each; the last task writes the tile to the output slot (its base is patched per task).

    * sigmoid: the convolution (bias, then the sigmoid - 0.5 table) keeps ``L`` in L2; a
      planar task writes ``round16(L + 0.5)``;
    * silu: the convolution (bias only) keeps ``z``; an elementwise NE task keeps
      ``L(z)``; a planar task keeps ``s = round16(L + 0.5)``; a planar multiply writes
      ``round16(z * s)`` (Apple's silu program on ``z``: it multiplies its input by the
      sigmoid)."""
    c, h, w = shape
    tile = c * h * _ru(2 * w, 16)                       # one output tile in L2 (16-byte rows)
    r0 = td["L2.ResultBase.Addr"] << 4                  # right after the convolution's source
    td.update({"L2.ResultCfg.ResultType": 3, "Header.WBase": 0, "Header.WBE": 0,
               "TileDMADst.DMAConfig.En": 0})
    common = dict(dst=SLOT_OUTPUT, dst_strides=dst_strides, src_in_l2=True, eon=False)
    if stage.post == "sigmoid":
        return [eltwise_td(shape, op="scale", offset=0.5, l2_src=r0, l2_dst=r0 + tile, **common)]
    r1, r2, r3 = r0 + tile, r0 + 2 * tile, r0 + 3 * tile
    return [eltwise_td(shape, nonlinear="lut", kernel_slot=SLOT_KERNEL, kernel_base=lut_off,
                       l2_src=r0, l2_dst=r1, keep=True, **common),
            eltwise_td(shape, op="scale", offset=0.5, l2_src=r1, l2_dst=r2, keep=True, **common),
            eltwise_td(shape, op="mul", src1_in_l2=True, l2_src=r0, l2_src1=r2, l2_dst=r3, **common)]


def _program(words_list, bars, name) -> Program:
    """Chain TD words into a Program (0x300 apart, NextPointer/NextSize/TBE, EON last)."""
    from .td.codec import TaskDescriptor
    from .td.fields import TD_STRIDE, TD_WORDS
    nxt_ptr, nxt_size, tbe, eon = _patcher(["Header.NextPointer", "Header.NextSize", "Header.TBE",
                                            "Header.EON"])
    pack = struct.Struct(f"<{TD_WORDS}I").pack_into
    stream = bytearray(TD_STRIDE * (len(words_list) - 1) + TD_SIZE)
    tds, offsets = [], []
    for i, words in enumerate(words_list):
        last = i == len(words_list) - 1
        _set(words, nxt_ptr, 0 if last else TD_STRIDE * (i + 1))
        _set(words, nxt_size, 0 if last else TD_WORDS - 1)
        _set(words, tbe, 0 if last else 1)
        _set(words, eon, int(last))
        pack(stream, TD_STRIDE * i, *words)
        td = TaskDescriptor.__new__(TaskDescriptor)
        td.words = words
        tds.append(td)
        offsets.append(TD_STRIDE * i)
    plan = {s: (b if b is not None else BarSlot(s, "td", len(stream), "tds")) for s, b in bars.items()}
    return Program(tds, offsets, bytes(stream), b"", dict(sorted(plan.items())), name)


def _layout(n, c, h, w):
    from .device.buffers import AneLayout
    return AneLayout.of((n, c, h, w))


#: bytes a 32-bit IOVA can address
IOVA_LIMIT = 1 << 32


def _check_conv(c: Conv) -> None:
    if min(c.n, c.cin, c.h, c.w, c.cout, c.kh, c.kw, c.groups) < 1:
        raise ValueError(f"cannot lower an empty convolution: {c}")
    if c.cin % c.groups or c.cout % c.groups:
        raise ValueError(f"Cin {c.cin} and Cout {c.cout} must be multiples of groups {c.groups}")
    if c.hout < 1 or c.wout < 1:
        raise ValueError(f"the padded input is smaller than the dilated kernel: {c}")
    # The ANE addresses at most 4 GiB (32-bit IOVAs): refuse before planning (and before
    # allocating task tables sized by the geometry).
    padded = c.n * c.cin * (c.h + sum(c.pad[0])) * (c.w + sum(c.pad[1])) * 2
    result = c.n * c.cout * c.hout * c.wout * 2
    if max(padded, result) > IOVA_LIMIT:
        raise ValueError(f"the padded input ({padded} bytes) or the output ({result} bytes) exceeds "
                         f"the {IOVA_LIMIT >> 30} GiB the ANE can address: {c}")


# ============================================================================ elementwise programs
#: BAR slot of an elementwise program's intermediate tensor (silu's sigmoid, as in Apple's
#: activation/silu.bin)
SLOT_INTERMEDIATE = 3
#: narrowest row a long tensor is cut into when looking for a width that divides it
ELT_MIN_WIDTH = 1024
_SRC1_BASE = (0x188 // 4, 6, (1 << 26) - 1)     # TileDMASrc1.BaseAddr (fastane.device.planar.UNNAMED)


@dataclass(frozen=True)
class Eltwise:
    """One activation over ``n`` fp16 elements: the call :func:`lower` turns into an
    elementwise program (``activation`` as for :func:`ne_stage`).  Hashable: the cache key."""

    n: int
    activation: object = None


@dataclass(eq=False)
class LoweredEltwise:
    """An activation lowered to elementwise TDs (see :func:`elementwise`).

    The ``n`` elements sit flat and dense in the input slot (and likewise in the output
    and intermediate slots): the tasks see them as ``(1, 1, rows, width)`` tiles of
    ``width``-element rows (a multiple of 32 when there are several rows, so every row
    is whole 64-byte bursts and every tile starts on one), plus, when ``width`` does not
    divide ``n``, one ``(1, 1, 1, rem)`` tile for the rest.  Each tile runs the chain of
    ``tds_per_tile`` TDs; ``tiles`` lists ``(first element, rows, width)``.
    """

    op: Eltwise
    stage: NEStage
    block: object                # the LUT block the NE task reads (None: relu / identity)
    width: int
    rows: int
    rem: int
    tiles: list
    tds_per_tile: int
    programs: list
    nbytes: int                  # bytes of the input, output (and intermediate) slots
    kernel_bytes: int
    _free: dict = dataclasses.field(default_factory=dict, repr=False)
    _devices: dict = dataclasses.field(default_factory=dict, repr=False)
    _active: int = dataclasses.field(default=0, repr=False)
    _evicted: bool = dataclasses.field(default=False, repr=False)
    _lock: object = dataclasses.field(default_factory=threading.Lock, repr=False)

    @property
    def program(self) -> Program:
        """The (first) program: ``fastane disasm`` prints ``program.to_bytes()``."""
        return self.programs[0]

    @property
    def n_tasks(self) -> int:
        return len(self.tiles) * self.tds_per_tile

    @property
    def bars(self) -> dict:
        return self.programs[0].bars

    def describe(self) -> str:
        shape = f"{self.rows} x {self.width}" + (f" + {self.rem}" if self.rem else "")
        return (f"{self.stage.name} on {self.op.n} elements ({shape}): {self.n_tasks} tasks, "
                f"{len(self.tiles)} tiles of {self.tds_per_tile} TD(s)")

    def buffer_sizes(self) -> dict:
        sizes = {SLOT_INPUT: self.nbytes, SLOT_OUTPUT: self.nbytes, SLOT_KERNEL: self.kernel_bytes}
        if self.stage.post == "silu":
            sizes[SLOT_INTERMEDIATE] = self.nbytes
        return sizes

    def input_view(self, raw: np.ndarray) -> np.ndarray:
        """The ``n`` input elements (flat fp16) as a view of the input slot's bytes."""
        return raw[:2 * self.op.n].view(np.float16)

    def write_input(self, raw: np.ndarray, x) -> None:
        x = np.asarray(x)
        self.input_view(raw).reshape(x.shape)[...] = x

    def output_view(self, raw: np.ndarray) -> np.ndarray:
        return raw[:2 * self.op.n].view(np.float16)

    def pack(self, raw: np.ndarray, weight=None, bias=None) -> None:
        """Write the LUT block where the NE task's KernelDMA lane 0 reads it (slot offset 0)."""
        if self.block is not None:
            raw[:LUT_BLOCK] = np.frombuffer(self.block.to_bytes(), np.uint8)

    def with_weights(self, weight=None, bias=None) -> list:
        """The programs with their kernel bytes (the LUT block) filled in."""
        raw = np.zeros(self.kernel_bytes, np.uint8)
        self.pack(raw)
        return [dataclasses.replace(p, kernel=raw.tobytes()) for p in self.programs]


def _flat_shape(n: int, width_max: int, lim: Limits) -> tuple:
    """``(width, rows, rem)`` with ``n = rows x width + rem``: one row when it fits,
    else the widest multiple of 32 (>= :data:`ELT_MIN_WIDTH`) dividing ``n``, else the
    widest row and a remainder."""
    if n <= width_max:
        return n, 1, 0
    a = lim.col_align
    top = width_max // a * a
    for w in range(top, min(ELT_MIN_WIDTH, top) - 1, -a):
        if n % w == 0:
            return w, n // w, 0
    return top, n // top, n % top


def _lower_eltwise(op: Eltwise, lim: Limits) -> LoweredEltwise:
    """The program of an activation (see :func:`elementwise`)."""
    if op.n < 1:
        raise ValueError(f"cannot lower an activation of {op.n} elements")
    stage = ne_stage(op.activation)
    k = 2 if stage.post is None else 3          # tensors a tile's chain holds in L2 at once
    width_max = min(lim.max_hw, lim.l2_bytes // (k * _ALIGN) * (_ALIGN // 2))
    if width_max < 1:
        raise NotImplementedError(f"no row of an elementwise task fits the {_size(lim.l2_bytes)} L2")
    width, rows, rem = _flat_shape(op.n, width_max, lim)
    th = min(rows, lim.max_hw, lim.l2_bytes // (k * _ru(2 * width)))
    ntiles = -(-rows // th)
    th = -(-rows // ntiles)                     # balanced tiles
    tiles = [(r0 * width, min(th, rows - r0), width) for r0 in range(0, rows, th)]
    if rem:
        tiles.append((rows * width, 1, rem))
    block = stage.block if stage.post != "silu" else _lut.get_block("sigmoid")
    nonlinear = stage.nonlinear if stage.post != "silu" else "lut"
    per = 1 + {None: 0, "sigmoid": 1, "silu": 2}[stage.post]
    chunk = MAX_CHAIN // per * per
    templates, words_list = {}, []
    for e0, h, w in tiles:
        tpl = templates.get((h, w))
        if tpl is None:
            shape = (1, h, w)
            t = h * _ru(2 * w, 16)                 # one tile in L2
            ne = dict(nonlinear=nonlinear, post_scale=stage.post_scale, kernel_slot=SLOT_KERNEL,
                      src=SLOT_INPUT, l2_src=0, eon=False)
            if stage.post is None:
                tds = [eltwise_td(shape, dst=SLOT_OUTPUT, **ne)]
            elif stage.post == "sigmoid":          # unary/sigmoid.bin
                tds = [eltwise_td(shape, keep=True, l2_dst=t, **ne),
                       eltwise_td(shape, op="scale", offset=0.5, src_in_l2=True, l2_src=t, dst=SLOT_OUTPUT,
                                  l2_dst=2 * t, eon=False)]
            else:                                  # activation/silu.bin
                tds = [eltwise_td(shape, keep=True, l2_dst=t, **ne),
                       eltwise_td(shape, op="scale", offset=0.5, src_in_l2=True, l2_src=t,
                                  dst=SLOT_INTERMEDIATE, l2_dst=2 * t, eon=False),
                       eltwise_td(shape, op="mul", src=SLOT_INPUT, src1=SLOT_INTERMEDIATE, dst=SLOT_OUTPUT,
                                  l2_src=0, l2_src1=t, l2_dst=2 * t, eon=False)]
            tpl = templates[(h, w)] = [td.words for td in tds]
        base = (2 * e0) >> 6
        for i, tw in enumerate(tpl):
            words = list(tw)
            if i == 0 or (stage.post == "silu" and i == 2):
                _set(words, _SRC_BASE, base)
            if stage.post == "silu" and i == 2:
                _set(words, _SRC1_BASE, base)
            if i == len(tpl) - 1 or stage.post == "silu" and i == 1:
                _set(words, _DST_BASE, base)
            j = len(words_list) % chunk
            _set(words, _TID, j)
            _set(words, _LNID, int(j > 0))
            words_list.append(words)
    nbytes = max(_ru(2 * op.n), _ALIGN)
    kernel_bytes = LUT_BLOCK if block is not None else _ALIGN
    bars = {SLOT_TD: None, SLOT_KERNEL: BarSlot(SLOT_KERNEL, "kernel", kernel_bytes, "lut"),
            SLOT_OUTPUT: BarSlot(SLOT_OUTPUT, "output", nbytes, "y"),
            SLOT_INPUT: BarSlot(SLOT_INPUT, "input", nbytes, "x")}
    if stage.post == "silu":
        bars[SLOT_INTERMEDIATE] = BarSlot(SLOT_INTERMEDIATE, "intermediate", nbytes, "sigmoid")
    programs = [_program(words_list[s:s + chunk], bars, f"{stage.name}{op.n}")
                for s in range(0, len(words_list), chunk)]
    return LoweredEltwise(op, stage, block, width, rows, rem, tiles, per, programs, nbytes, kernel_bytes)


# ============================================================================ the program cache
_CACHE: "collections.OrderedDict" = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()
_STATS = {"hits": 0, "misses": 0}


def cache_info() -> dict:
    """``{"hits", "misses", "size", "maxsize"}`` of the lowered-program cache."""
    with _CACHE_LOCK:
        return {**_STATS, "size": len(_CACHE), "maxsize": CACHE_SIZE}


def cache_clear() -> None:
    """Forget every lowered program (and free the buffers they hold on devices)."""
    with _CACHE_LOCK:
        old = list(_CACHE.values())
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)
    for low in old:
        _release_all(low)


# ============================================================================ devices and buffers
_DEVICE = None
_DEVICE_LOCK = threading.Lock()
#: bytes of emulated DRAM of the default device (pages are committed only when touched;
#: smaller windows are tried where the OS refuses to reserve this much)
DEFAULT_MEMORY = 2 << 30


def _make_device(size: int, stats_only: bool = False):
    from .device import Device
    while True:
        try:
            return Device(memory_size=size, stats_only=stats_only)
        except MemoryError:
            if size <= 64 << 20:
                raise
            size //= 2


def default_device():
    """The process-wide :class:`~fastane.device.Device` the numpy API runs on (created on
    first use; shared by all threads: the task manager serialises execution and every
    call runs on buffers of its own)."""
    global _DEVICE
    if _DEVICE is None:
        with _DEVICE_LOCK:
            if _DEVICE is None:
                _DEVICE = _make_device(DEFAULT_MEMORY)
    return _DEVICE


def set_default_device(device) -> None:
    """Run the numpy API on ``device`` from now on (None: a fresh default next time)."""
    global _DEVICE
    with _DEVICE_LOCK:
        _DEVICE = device


@dataclass
class _Binding:
    """Buffers of one program on one device: input, output and kernel regions."""

    device: object
    regions: dict          # slot -> Region
    raw: dict              # slot -> uint8 view of the region


def _acquire(low: Lowered, dev, stats_only: bool) -> _Binding:
    with low._lock:
        low._active += 1
        low._devices[id(dev)] = dev
        free = low._free.get(id(dev))
        if free and not stats_only:
            return free.pop()
    sizes = low.buffer_sizes()
    regions = {}
    try:
        for slot, size in sizes.items():
            regions[slot] = _alloc(dev, size, f"{low.program.name}:{slot}", zero=not stats_only)
    except BaseException:
        for r in regions.values():
            dev.free(r)
        _done(low)
        raise
    raw = {s: dev.memory.view(r.iova, r.size) for s, r in regions.items()}
    return _Binding(dev, regions, raw)


def _alloc(dev, size, name, zero):
    try:
        return dev.memory.alloc(size, name, zero=zero)
    except MemoryError:
        # make room: drop the buffers cached programs keep on this device, then retry
        with _CACHE_LOCK:
            lows = list(_CACHE.values())
        for low in lows:
            with low._lock:
                free = low._free.pop(id(dev), [])
            for b in free:
                _free_binding(b)
        try:
            return dev.memory.alloc(size, name, zero=zero)
        except MemoryError as exc:
            raise MemoryError(f"{name}: {size:#x} bytes do not fit the device's unified memory "
                              f"({dev.memory.size >> 20} MiB; {exc})") from None


def _free_binding(b: _Binding) -> None:
    for r in b.regions.values():
        b.device.free(r)


def _release(low: Lowered, b: _Binding, keep: bool) -> None:
    if keep:
        with low._lock:
            if not low._evicted:
                low._free.setdefault(id(b.device), []).append(b)
                b = None
    if b is not None:
        _free_binding(b)
    _done(low)


def _done(low: Lowered) -> None:
    """One run of ``low`` ended: clean up if it was dropped from the cache meanwhile."""
    with low._lock:
        low._active -= 1
        cleanup = low._evicted and low._active == 0
    if cleanup:
        _cleanup(low)


def _release_all(low: Lowered) -> None:
    """``low`` left the cache: free its buffers and programs now, or after its last run."""
    with low._lock:
        low._evicted = True
        cleanup = low._active == 0
    if cleanup:
        _cleanup(low)


def _cleanup(low: Lowered) -> None:
    with low._lock:
        bindings = [b for bs in low._free.values() for b in bs]
        devices = list(low._devices.values())
        low._free.clear()
        low._devices.clear()
    for b in bindings:
        _free_binding(b)
    for dev in devices:
        for p in low.programs:
            dev.unload(p)


def execute(low: Lowered, x=None, weight=None, bias=None, *, device=None, stats_only: bool | None = None,
            read=None, queue: int = 0):
    """Run ``low`` on ``device``: ``(read(output view), Stats)``.

    ``x``: the call's input ``(N, Cin, H, W)`` (an array, any strides, or a callable
    ``fill(view)`` writing into :meth:`Lowered.input_view`); ``weight`` ``(Cout,
    Cin/groups, Kh, Kw)`` and ``bias`` ``(Cout,)`` (fp16).  ``read`` turns the output view
    ``(N, Cout, Hout, Wout)`` into the result (default: a copy).  In stats-only mode
    nothing is written or read and the result is None (``stats_only=None``: the device's
    default).  Saturations and LUT range events are counted in the Stats, not reported
    (the caller reports them in its own words).
    """
    dev = device if device is not None else default_device()
    stats_only = bool(dev.stats_only if stats_only is None else stats_only)
    b = _acquire(low, dev, stats_only)
    ok = False
    try:
        if not stats_only:
            if callable(x):
                x(low.input_view(b.raw[SLOT_INPUT]))
            else:
                low.write_input(b.raw[SLOT_INPUT], x)
            low.pack(b.raw[SLOT_KERNEL], weight, bias)
        total = None
        for p in low.programs:
            st = dev.submit(p, b.regions, queue=queue, stats_only=stats_only).wait()
            total = st if total is None else _concat(total, st)
        result = None
        if not stats_only:
            view = low.output_view(b.raw[SLOT_OUTPUT])
            result = np.array(view) if read is None else read(view)
        ok = True
        return result, total
    finally:
        _release(low, b, keep=ok and not stats_only)


def _concat(a: Stats, b: Stats) -> Stats:
    out = a + dataclasses.replace(b, tasks_detail=[])
    out.tasks_detail = list(a.tasks_detail) + list(b.tasks_detail)
    return out


# ============================================================================ calls
def conv2d(x16, w16, bias16=None, stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1), groups=1,
           activation=None, *, affine=None, device=None, stats_only=None, limits: Limits = LIMITS):
    """``(y, Stats, Lowered)`` of an NCHW convolution on the device (no validation: see
    :func:`fastane.conv2d`).  ``x16`` ``(N, C, H, W)`` and ``w16`` ``(CO, C/groups, KH,
    KW)`` are fp16; ``affine = (scale, shift)`` is folded into the weights and bias first
    (:func:`fold`)."""
    x16 = np.asarray(x16)
    w16 = np.asarray(w16)
    if affine is not None:
        w16, bias16 = fold(w16, bias16, *affine)
    N, C, H, W = x16.shape
    CO, CG, KH, KW = w16.shape
    conv = Conv(N, C, H, W, CO, KH, KW, tuple(stride), tuple(dilation),
                tuple(tuple(p) for p in pad), groups, bias16 is not None, activation)
    low = lower(conv, limits)
    y, st = execute(low, x16, w16, bias16, device=device, stats_only=stats_only)
    return y, st, low


def matmul(a3, b3, ia, ib, *, bias16=None, activation=None, device=None, stats_only=None,
           limits: Limits = LIMITS):
    """``(y, Stats, Lowered)``: ``y[i] = a3[ia[i]] @ b3[ib[i]]`` (fp16 ``(B, M, N)``) on the
    device, as 1x1 convolutions in the (B, C, 1, S) layout.

    * ``b`` shared (one right operand): every left operand's rows go along S, one
      convolution with ``Cin = K``, ``Cout = N``, weights ``b^T`` (``bias16``, per N, fused);
    * ``a`` shared (one left operand, several right ones): the roles swap -- ``a`` is the
      kernel (``Cout = M``) and the right operands' columns go along S;
    * both batched: one grouped convolution with a group per product (``Cin = B K``,
      ``Cout = B N``), so a batch of attention heads is a few tasks, not one per head.
    """
    BA, M, K = a3.shape
    BB, _, N = b3.shape
    B = len(ia)
    if BB == 1:
        conv = Conv.matmul(B * M, K, N, 1, bias16 is not None, activation)
        low = lower(conv, limits)
        rows = a3.reshape(BA * M, K) if BA == B else a3[ia].reshape(B * M, K)

        def fill(v):
            _klayout.transpose(rows, v[0, :, 0, :])

        def read(v):
            out = np.empty((B * M, N), np.float16)
            _klayout.transpose(v[0, :, 0, :], out)
            return out.reshape(B, M, N)
        y, st = execute(low, fill, _transposed(b3[0]).reshape(N, K, 1, 1), bias16, device=device,
                        stats_only=stats_only, read=read)
    elif BA == 1 and bias16 is None:
        conv = Conv.matmul(B * N, K, M, 1, False, activation)
        low = lower(conv, limits)
        cols = b3 if BB == B else b3[ib]

        def fill(v):
            v[0, :, 0, :].reshape(K, B, N)[...] = cols.transpose(1, 0, 2)

        def read(v):
            return np.ascontiguousarray(v[0, :, 0, :].reshape(M, B, N).transpose(1, 0, 2))
        y, st = execute(low, fill, a3[0].reshape(M, K, 1, 1), None, device=device,
                        stats_only=stats_only, read=read)
    else:
        conv = Conv.matmul(M, K, N, B, bias16 is not None, activation)
        low = lower(conv, limits)
        lhs = a3 if (BA == B and np.array_equal(ia, np.arange(B))) else a3[ia]
        rhs = b3 if (BB == B and np.array_equal(ib, np.arange(B))) else b3[ib]

        def fill(v):
            _klayout.transpose(lhs, v[0, :, 0, :].reshape(B, K, M))

        def read(v):
            out = np.empty((B, M, N), np.float16)
            _klayout.transpose(v[0, :, 0, :].reshape(B, N, M), out)
            return out
        bias = None if bias16 is None else np.tile(np.asarray(bias16).reshape(-1), B)
        y, st = execute(low, fill, _transposed(rhs).reshape(B * N, K, 1, 1), bias,
                        device=device, stats_only=stats_only, read=read)
    return y, st, low


def elementwise(x16, activation, *, device=None, stats_only=None, limits: Limits = LIMITS):
    """``(y, Stats, LoweredEltwise)``: ``activation`` (a name of :mod:`fastane.activations`,
    ``"relu"``, or a :class:`fastane.lut.CoeffBlock`) applied to the fp16 array ``x16`` (any
    shape, at least one element) by an elementwise program on the device.

    The lowering follows Apple's elementwise programs (corpus ``unary/tanh.bin``,
    ``unary/sigmoid.bin``, ``activation/silu.bin``), per tile of the flattened tensor:

    * relu and every single-stage LUT activation: **one NE task**, ``KernelMode = 1`` (the
      input passes the MAC array unchanged), ``NonlinearMode`` 1 (relu) or 2 with the
      activation's 43-word block in core 0's KMem, ``PostScale`` (exp: 0x3dc5), DRAM to DRAM;
    * sigmoid: the NE task with the sigmoid - 0.5 table keeps its result in L2, then a
      **planar task** (Word 0 = 0x0, scale 1, offset 0.5) writes ``round16(L + 0.5)``;
    * silu: as sigmoid, but the planar +0.5 writes the sigmoid to an intermediate slot (3),
      and a **planar multiply** (0x80004) of the input (slot 5) by it (slot 3) writes the
      output, as Apple's silu program does.
    """
    x16 = np.asarray(x16)
    low = lower(Eltwise(int(x16.size), activation), limits)
    y, st = execute(low, x16, device=device, stats_only=stats_only,
                    read=lambda v: v.reshape(x16.shape).copy())
    return y, st, low


def _transposed(x: np.ndarray) -> np.ndarray:
    """``swapaxes(x, -1, -2)`` as a C-contiguous fp16 array (the weights ``B^T``)."""
    x = np.asarray(x, np.float16)
    if x.ndim >= 2 and x.strides[-2] == x.itemsize and x.size:   # already a transposed view
        return np.ascontiguousarray(np.swapaxes(x, -1, -2))
    out = np.empty(x.shape[:-2] + (x.shape[-1], x.shape[-2]), np.float16)
    _klayout.transpose(x, out)
    return out


# ============================================================================ roofline planner
_PLAN_DEVICE = None
#: emulated DRAM of the stats-only planning device (virtual: nothing is ever touched)
PLAN_MEMORY = 3 << 30
#: activations a workload names that are not one NE stage -> the NE stage they start with
_PLAN_FIRST_STAGE = {"silu": "sigmoid", "sigmoid": "sigmoid"}


def _plan_device():
    global _PLAN_DEVICE
    if _PLAN_DEVICE is None:
        with _DEVICE_LOCK:
            if _PLAN_DEVICE is None:
                _PLAN_DEVICE = _make_device(PLAN_MEMORY, stats_only=True)
    return _PLAN_DEVICE


def _plan_activation(act):
    if act in _PLAN_FIRST_STAGE:
        return _lut.get_block(_PLAN_FIRST_STAGE[act])
    return act


def layer_conv(layer) -> Conv:
    """The :class:`Conv` a workload layer (:mod:`fastane.workloads` Conv2d or Matmul) lowers to.

    Activations that need the planar engine (silu, sigmoid) are planned as their first,
    NE stage (the sigmoid - 0.5 table); their planar tasks are not counted, as in the
    analytic plan, where a fused activation costs nothing.
    """
    from . import workloads as wl
    act = _plan_activation(layer.activation)
    if isinstance(layer, wl.Conv2d):
        p = layer.pad
        return Conv(1, layer.cin, layer.h, layer.w, layer.cout, layer.kh, layer.kw,
                    (layer.stride, layer.stride), (1, 1), ((p, p), (p, p)), layer.groups, False, act)
    if isinstance(layer, wl.Matmul):
        return Conv.matmul(layer.M, layer.K, layer.N, layer.B, False, act)
    raise TypeError(f"no lowering for a {type(layer).__name__} layer")


def plan_layer(layer) -> list:
    """Per-task Stats of a workload layer: Conv2d and Matmul layers are lowered to TDs and
    run on a stats-only device; Eltwise layers (planar-engine work, not lowered yet) and
    layers the lowering refuses (NotImplementedError) or whose buffers do not fit the
    planning device's address space (MemoryError) fall back to the analytic plan
    (:func:`fastane.roofline.model.plan_layer`).  A drop-in ``planner`` for
    :func:`fastane.roofline.model.plan_workload`."""
    from . import workloads as wl
    from .roofline import model
    if not isinstance(layer, (wl.Conv2d, wl.Matmul)):
        return model.plan_layer(layer)
    try:
        low = lower(layer_conv(layer))
        _, st = execute(low, device=_plan_device(), stats_only=True)
    except (NotImplementedError, MemoryError):
        return model.plan_layer(layer)
    return list(st.tasks_detail)
