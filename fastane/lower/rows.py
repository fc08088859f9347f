"""Row operations on the planar engine: softmax, log-softmax, layer and RMS normalization,
and the reductions (sum, mean, max, min) over the last axis.  docs/lower.md, section 11.

The input is seen as ``rows x width`` (the last axis is the row), dense in the input slot
with 64-byte rows.  The rows are cut into **row tiles** of ``t`` rows; every tile runs the
same short chain of tasks, its per-row vectors and intermediates kept in L2 where the
corpus keeps them.  The chains (each planar stage rounds once to fp16, RNE:
:mod:`fastane.kernels.planar`; each table is the NE's LUT, docs/lut.md):

* ``softmax`` -- Apple's ``activation/softmax.bin``, task for task: a max-reduce keeps
  ``m`` per row in L2 (a vector); a subtract reads it broadcast along the row and scales
  by fp16 log2(e) (``t = round16(1.4423828125 * round16(x - m))``, kept in L2); the exp2
  table writes ``e`` to the intermediate slot; a recip-sum keeps ``r = round16(1 /
  round16(sum e))``; a multiply by the broadcast ``r`` writes ``round16(r * e)``.
* ``log_softmax`` -- ``activation/logsoftmax.bin``: the softmax into the intermediate
  slot, the log2 table (kept in L2), then a scale by fp16 ln 2 (0.693359375).
* ``reduce_sum`` / ``reduce_max`` -- one reduction task (vector in L2), then a planar
  scale task that writes the vector out; ``reduce_mean`` scales the sum by fp16(1 /
  width) in the reduction's output scale (``round16(s * round16(sum))``);
  ``reduce_min`` is ``-max(-x)`` (operand scale -1 in the reduction and in the task that
  writes it out: negation is exact).
* ``layer_norm`` -- no corpus program: the composition a compiler emits, following
  ``unary/norm.bin`` (a sum reduction, the sqrt table on the per-row vector, the
  reciprocal table, a broadcast multiply): ``mean`` (sum x 1/width), ``d = x - mean``,
  ``d * d``, ``var`` (sum x 1/width), ``var + eps`` (a planar offset), ``sqrt``, ``1/.``
  (tables, on the vector), ``d * r`` (broadcast); then ``* scale`` and ``+ bias``
  (planar, the per-column vectors replicated over the tile's rows by the host: layout).
* ``rms_norm`` -- likewise: ``x * x``, ``ms`` (sum x 1/width), ``+ eps``, sqrt,
  reciprocal, ``x * r``, ``* scale`` (``+ bias``).

No numerical safeguard is added that the corpus programs do not show: a row sum that
overflows fp16 is inf; ``exp2`` of ``round16((x - m) * log2 e)`` flushes what the table
flushes.  A row longer than a task's 16384 elements is refused: splitting its reduction
over tasks would round partial results to fp16 (the convolution's decision, section 2).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import lut as _lut
from ..m1 import ALIGN, L2_UNIT, LIMITS, LUT_BLOCK, Limits, round_up
from ..stats import Stats
from ..td import BarSlot
from ..td.asm import eltwise_td, reduce_td
from .bind import alloc_buffer
from .cache import CACHE_SIZE, reclaim
from .emit import task_chains
from .lowered import SLOT_INPUT, SLOT_INTERMEDIATE, SLOT_KERNEL, SLOT_OUTPUT, SLOT_TD
from .runtime import concat_stats, default_device, stats_device

__all__ = ["ROW_OPS", "REDUCTIONS", "RowOp", "LoweredRows", "lower", "plan", "run"]

#: the row operations (the reductions give one value per row)
REDUCTIONS = ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")
ROW_OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm") + REDUCTIONS
SLOT_SCALE, SLOT_BIAS = 6, 7
LOG2E = float(np.float16(1.4426950408889634))  # 0x3dc5, softmax.bin TD 1's output scale
LN2 = float(np.float16(0.6931471805599453))  # 0x398c, logsoftmax.bin TD 6's output scale
#: the tables each chain's NE tasks read, in the order they sit in the kernel slot
TABLES = {
    "softmax": ("exp2",),
    "log_softmax": ("exp2", "log2"),
    "layer_norm": ("sqrt", "reciprocal"),
    "rms_norm": ("sqrt", "reciprocal"),
}
_SRC, _SRC1, _DST = "TileDMASrc.BaseAddr.Addr", "TileDMASrc1.BaseAddr.Addr", "TileDMADst.BaseAddr.Addr"


@dataclasses.dataclass(frozen=True)
class RowOp:
    """A row operation over ``rows`` rows of ``width`` elements (the problem a program is
    cached by).  ``eps``: the normalizations' epsilon (fp16); ``scale``/``bias``: whether
    the normalization has the affine per-column scale and bias."""

    op: str
    rows: int
    width: int
    eps: float = 0.0
    scale: bool = False
    bias: bool = False

    @property
    def reduces(self) -> bool:
        return self.op in REDUCTIONS


@dataclasses.dataclass(frozen=True)
class LoweredRows:
    problem: RowOp
    tile_rows: int
    tiles: tuple  # (first row, rows)
    per: int  # TDs per full tile
    programs: tuple
    kernel: bytes  # the LUT blocks, TABLES order
    slots: dict  # slot -> bytes
    in_row: int  # bytes per input row (64-byte multiple)
    out_row: int  # bytes per output row

    @property
    def n_tasks(self) -> int:
        return sum(len(p.tds) for p in self.programs)

    def describe(self) -> str:
        p = self.problem
        return (
            f"{p.op} over {p.rows} rows of {p.width}: {self.n_tasks} tasks, "
            f"{len(self.tiles)} row tiles of up to {self.tile_rows} rows ({self.per} TDs each)"
        )


def _check(p: RowOp, lim: Limits) -> None:
    if p.op not in ROW_OPS:
        raise ValueError(f"unknown row operation {p.op!r}; one of {', '.join(ROW_OPS)}")
    if p.rows < 1 or p.width < 1:
        raise ValueError(f"cannot lower {p.op} over {p.rows} rows of {p.width} elements")
    if p.width > lim.max_hw:
        raise NotImplementedError(
            f"{p.op}: a row of {p.width} elements exceeds the {lim.max_hw} a planar task reads "
            f"(Common.InDim.Win); fastane does not split a row's reduction across tasks, "
            f"because the partial results would be rounded to fp16 and combined again, "
            f"which changes the numerics"
        )
    with np.errstate(over="ignore"):
        finite = np.isfinite(np.float16(p.eps))
    if not finite:
        raise ValueError(f"{p.op}: eps = {p.eps!r} does not fit in fp16")


def _layout(t: int, width: int) -> tuple:
    """L2 addresses of one tile: two per-row vectors, three tensor windows, the end."""
    vec = round_up(t * L2_UNIT, ALIGN)
    win = round_up(t * round_up(2 * width, L2_UNIT), ALIGN)
    v0, v1, a = 0, vec, 2 * vec
    return v0, v1, a, a + win, a + 2 * win, a + 3 * win


def _tile_rows(p: RowOp, lim: Limits) -> int:
    t = min(p.rows, lim.max_groups, lim.max_hw)
    per_row = 2 * L2_UNIT + 3 * round_up(2 * p.width, L2_UNIT)
    t = min(t, max(1, (lim.l2_bytes - 6 * ALIGN) // per_row))
    while t > 1 and _layout(t, p.width)[-1] > lim.l2_bytes:
        t -= 1
    if _layout(t, p.width)[-1] > lim.l2_bytes:
        raise NotImplementedError(f"{p.op}: no row of {p.width} elements fits the L2 with its chain")
    return -(-p.rows // -(-p.rows // t))  # balanced tiles


def _vec(t: int, **kw):
    """A task on the per-row vector of a tile of ``t`` rows kept in L2 (one value per row)."""
    return eltwise_td((1, t, 1), tile_height=t, eon=False, src_vector=True, **kw)


def _rstd(t: int, vec_in: int, vec_out: int, p: RowOp, lut: dict) -> list:
    """``1 / sqrt(v + eps)`` of the per-row vector at ``vec_in`` (three vector tasks: a
    planar offset, the sqrt and reciprocal tables); the result at ``vec_out``."""
    ve = functools.partial(_vec, t, vector_out=True)
    return [
        ve(op="scale", offset=p.eps, l2_src=vec_in, l2_dst=vec_out),
        _table(ve, lut, "sqrt", l2_src=vec_out, l2_dst=vec_in),
        _table(ve, lut, "reciprocal", l2_src=vec_in, l2_dst=vec_out),
    ]


def _sub_row(e, vec: int, src: int, a: int, **out):
    """``x - v``: the tensor of slot ``src`` (L2 window ``a``) less the per-row vector kept
    in L2 at ``vec``, broadcast along the row (source 1)."""
    return e(op="sub", src=src, src1_in_l2=True, src1_broadcast=True, l2_src=a, l2_src1=vec, **out)


def _mul_row(e, vec: int, src1: int, a: int, **out):
    """``v * x``: the per-row vector kept in L2 at ``vec``, broadcast along the row
    (source 0), times the tensor of slot ``src1`` (L2 window ``a``)."""
    return e(op="mul", src_vector=True, src_broadcast=True, l2_src=vec, src1=src1, l2_src1=a, **out)


def _square(e, slot: int, a: int, b: int, c: int, **out):
    """``x * x`` of the tensor of slot ``slot`` (read twice, L2 windows ``a`` and ``b``),
    to the intermediate slot (L2 staging ``c``)."""
    return e(op="mul", src=slot, src1=slot, l2_src=a, l2_src1=b, dst=SLOT_INTERMEDIATE, l2_dst=c, **out)


def _table(e, lut: dict, name: str, **io):
    """The NE task that applies table ``name`` (its block at ``lut[name]`` in the kernel slot)."""
    return e(nonlinear="lut", kernel_base=lut[name], **io)


def _affine(p: RowOp, e, a: int, b: int, c: int) -> list:
    """``* scale`` then ``+ bias`` of the tile kept in L2 at ``b`` (windows ``a``, ``c``
    free; the last task writes the output)."""
    steps = [("mul", SLOT_SCALE)] * p.scale + [("add", SLOT_BIAS)] * p.bias
    tds, at, other = [], b, c
    for i, (op, slot) in enumerate(steps):
        out = dict(dst=SLOT_OUTPUT) if i == len(steps) - 1 else dict(keep=True)
        tds.append(e(op=op, src_in_l2=True, l2_src=at, src1=slot, l2_src1=a, l2_dst=other, **out))
        at, other = other, at
    return tds


def _tile_tds(p: RowOp, t: int, lut: dict) -> list:
    """The chain of one tile of ``t`` rows at row 0 (the input/output bases are patched
    per tile; the intermediate, scale and bias slots hold one tile and are reused)."""
    w = p.width
    rb = round_up(2 * w, ALIGN)
    v0, v1, a, b, c, _ = _layout(t, w)
    e = functools.partial(eltwise_td, (1, t, w), tile_height=t, eon=False)
    red = functools.partial(reduce_td, t, w, row_stride=rb, eon=False)
    inv_w = 1.0 / w
    if p.op in REDUCTIONS:
        neg = -1.0 if p.op == "reduce_min" else 1.0
        kind = "max-reduce" if p.op in ("reduce_max", "reduce_min") else "sum"
        scale = inv_w if p.op == "reduce_mean" else 1.0
        return [
            red(op=kind, in_scale=neg, out_scale=scale, src=SLOT_INPUT, l2_src=a, l2_dst=v0),
            _vec(t, op="scale", in_scale=neg, l2_src=v0, dst=SLOT_OUTPUT, l2_dst=a),
        ]
    if p.op in ("softmax", "log_softmax"):
        tds = [
            red(op="max-reduce", src=SLOT_INPUT, l2_src=a, l2_dst=v0),
            _sub_row(e, v0, SLOT_INPUT, a, out_scale=LOG2E, keep=True, l2_dst=b),
            _table(e, lut, "exp2", src_in_l2=True, l2_src=b, dst=SLOT_INTERMEDIATE, l2_dst=a),
            red(op="recip-sum", src=SLOT_INTERMEDIATE, l2_src=a, l2_dst=v1),
        ]
        if p.op == "softmax":
            out = dict(dst=SLOT_OUTPUT)
        else:  # the softmax goes to the intermediate slot's second tile
            out = dict(dst=SLOT_INTERMEDIATE, dst_base=t * rb)
        tds.append(_mul_row(e, v1, SLOT_INTERMEDIATE, a, l2_dst=b, **out))
        if p.op == "log_softmax":
            tds += [
                _table(e, lut, "log2", src=SLOT_INTERMEDIATE, src_base=t * rb, l2_src=a, keep=True, l2_dst=b),
                e(op="scale", out_scale=LN2, src_in_l2=True, l2_src=b, dst=SLOT_OUTPUT, l2_dst=a),
            ]
        return tds
    affine = p.scale or p.bias
    last = dict(keep=True, l2_dst=b) if affine else dict(dst=SLOT_OUTPUT, l2_dst=b)
    if p.op == "layer_norm":
        tds = [
            red(op="sum", out_scale=inv_w, src=SLOT_INPUT, l2_src=a, l2_dst=v0),
            _sub_row(e, v0, SLOT_INPUT, a, dst=SLOT_INTERMEDIATE, l2_dst=b),
            _square(e, SLOT_INTERMEDIATE, a, b, c, dst_base=t * rb),
            red(op="sum", out_scale=inv_w, src=SLOT_INTERMEDIATE, src_base=t * rb, l2_src=a, l2_dst=v1),
            *_rstd(t, v1, v0, p, lut),
        ]
        tds.append(_mul_row(e, v0, SLOT_INTERMEDIATE, a, **last))
    else:  # rms_norm
        tds = [
            _square(e, SLOT_INPUT, a, b, c),
            red(op="sum", out_scale=inv_w, src=SLOT_INTERMEDIATE, l2_src=a, l2_dst=v0),
            *_rstd(t, v0, v1, p, lut),
        ]
        tds.append(_mul_row(e, v1, SLOT_INPUT, a, **last))
    return tds + _affine(p, e, a, b, c)


def _patch(td, r0: int, in_row: int, out_row: int) -> None:
    """Move a template TD to row ``r0``: the input's and output's DMA bases."""
    if td["Header.RBE0"] and td["Header.RBase0"] == SLOT_INPUT:
        td[_SRC] = td[_SRC] + r0 * in_row // ALIGN
    if td["Header.RBE1"] and td["Header.RBase1"] == SLOT_INPUT:
        td[_SRC1] = td[_SRC1] + r0 * in_row // ALIGN
    if td["Header.WBE"] and td["Header.WBase"] == SLOT_OUTPUT:
        td[_DST] = td[_DST] + r0 * out_row // ALIGN


@functools.lru_cache(maxsize=CACHE_SIZE)
def lower(problem: RowOp, limits: Limits = LIMITS) -> LoweredRows:
    """The program(s) of ``problem`` (cached)."""
    _check(problem, limits)
    p = problem
    t = _tile_rows(p, limits)
    names = TABLES.get(p.op, ())
    lut = {n: i * LUT_BLOCK for i, n in enumerate(names)}
    in_row = round_up(2 * p.width, ALIGN)
    out_row = ALIGN if p.reduces else in_row
    tiles = tuple((r0, min(t, p.rows - r0)) for r0 in range(0, p.rows, t))
    templates, tds = {}, []
    for r0, rows in tiles:
        tpl = templates.get(rows)
        if tpl is None:
            tpl = templates[rows] = _tile_tds(p, rows, lut)
        for td in tpl:
            td = td.copy()
            _patch(td, r0, in_row, out_row)
            tds.append(td)
    per = len(templates[tiles[0][1]])
    kernel = b"".join(_lut.get_block(n).to_bytes() for n in names)
    slots = {SLOT_INPUT: p.rows * in_row, SLOT_OUTPUT: p.rows * out_row, SLOT_KERNEL: max(len(kernel), ALIGN)}
    scratch = {"softmax": 1, "log_softmax": 2, "layer_norm": 2, "rms_norm": 1}.get(p.op, 0)
    if scratch:
        slots[SLOT_INTERMEDIATE] = scratch * t * in_row
    if p.scale:
        slots[SLOT_SCALE] = t * in_row
    if p.bias:
        slots[SLOT_BIAS] = t * in_row
    roles = {
        SLOT_INPUT: ("input", "x"),
        SLOT_OUTPUT: ("output", "y"),
        SLOT_KERNEL: ("kernel", "lut"),
        SLOT_INTERMEDIATE: ("intermediate", "scratch"),
        SLOT_SCALE: ("input", "scale"),
        SLOT_BIAS: ("input", "bias"),
    }
    bars = {SLOT_TD: None} | {s: BarSlot(s, *roles[s][:1], n, roles[s][1]) for s, n in slots.items()}
    programs = tuple(task_chains(tds, per, dict(sorted(bars.items())), f"{p.op}{p.rows}x{p.width}", limits))
    return LoweredRows(p, t, tiles, per, programs, kernel, slots, in_row, out_row)


def _execute(low: LoweredRows, x16=None, scale16=None, bias16=None, device=None, stats_only: bool = False):
    """Run ``low``: ``(result (rows, width) or (rows,), Stats)`` (None in stats-only mode)."""
    dev = device if device is not None else default_device()
    p = low.problem
    regions = {}
    try:
        for slot, n in low.slots.items():
            regions[slot] = alloc_buffer(dev, max(n, ALIGN), f"{p.op}:{slot}", not stats_only, reclaim)
        raw = {s: dev.memory.view(r.iova, r.size) for s, r in regions.items()}
        raw[SLOT_KERNEL][: len(low.kernel)] = np.frombuffer(low.kernel, np.uint8)  # checked while planning
        if not stats_only:
            _rows_view(raw[SLOT_INPUT], p.rows, low.in_row, p.width)[...] = x16
            for slot, v in ((SLOT_SCALE, scale16), (SLOT_BIAS, bias16)):
                if slot in raw:
                    _rows_view(raw[slot], low.tile_rows, low.in_row, p.width)[...] = v  # one row per tile row
        total = None
        for prog in low.programs:
            st = dev.submit(prog, regions, stats_only=stats_only).wait()
            total = st if total is None else concat_stats(total, st)
        if stats_only:
            return None, total
        y = np.array(_rows_view(raw[SLOT_OUTPUT], p.rows, low.out_row, 1 if p.reduces else p.width))
        return (y[:, 0] if p.reduces else y), total
    finally:
        for r in regions.values():
            dev.free(r)
        for prog in low.programs:
            dev.unload(prog)


def _rows_view(raw: np.ndarray, rows: int, row_bytes: int, width: int) -> np.ndarray:
    return raw[: rows * row_bytes].reshape(rows, row_bytes)[:, : 2 * width].view(np.float16)


def run(problem: RowOp, x16: np.ndarray, scale16=None, bias16=None, device=None):
    """``problem`` on the fp16 rows ``x16`` (rows, width): ``(result, Stats)``."""
    return _execute(lower(problem), x16, scale16, bias16, device=device)


def plan(problem: RowOp) -> Stats:
    """The Stats of ``problem``, counted on the lowering's stats-only device."""
    return _execute(lower(problem), device=stats_device(), stats_only=True)[1]
