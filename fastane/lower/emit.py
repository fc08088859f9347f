"""TD emission: a tiled convolution or an activation -> chains of TDs (through
:mod:`fastane.td`: :func:`~fastane.td.asm.conv_td`/:func:`~fastane.td.asm.eltwise_td` build
one template per distinct task shape, every task is a copy with its addresses written by
field name, and :meth:`fastane.td.Program.from_tds` chains them).  docs/lower.md,
sections 3 and 9.
"""

from __future__ import annotations

import numpy as np

from ..m1 import ALIGN, CORES, L2_UNIT, LUT_BLOCK, Limits, kernel_layout, round_up
from ..td import BarSlot, Program
from ..td.asm import conv_td, eltwise_td
from . import compressed as _compressed
from .lowered import (
    SLOT_INPUT,
    SLOT_INTERMEDIATE,
    SLOT_KERNEL,
    SLOT_OUTPUT,
    SLOT_TD,
    KernelGroup,
    Lowered,
    LoweredEltwise,
)
from .problems import IOVA_LIMIT, Conv, Eltwise, NEStage, check_conv, ne_stage
from .tiler import axis, effective, flat_tiles, kernel_groups, plan_tiling

__all__ = ["emit_conv", "emit_eltwise"]

_SRC_BASE, _SRC1_BASE, _DST_BASE = (
    "TileDMASrc.BaseAddr.Addr",
    "TileDMASrc1.BaseAddr.Addr",
    "TileDMADst.BaseAddr.Addr",
)
COEFF_BASE = tuple(f"KernelDMASrc.CoeffBaseAddr[{k}].Addr" for k in range(CORES))
_TASK_DTYPE = np.dtype(
    [
        ("n", "i8"),
        ("k", "i8"),
        ("oy0", "i8"),
        ("th", "i8"),
        ("r0", "i8"),
        ("rows", "i8"),
        ("padt", "i8"),
        ("ox0", "i8"),
        ("tw", "i8"),
        ("c0", "i8"),
        ("cols", "i8"),
        ("padl", "i8"),
    ]
)


def task_chains(tds: list, per: int, bars: dict, name: str, lim: Limits) -> list:
    """The TDs as programs of at most ``lim.max_chain`` TDs (a task's ``per`` TDs never
    span two chains), each TD numbered (``TID``, ``LNID``) within its chain."""
    chunk = lim.max_chain // per * per
    programs = []
    for s in range(0, len(tds), chunk):
        part = tds[s : s + chunk]
        for j, td in enumerate(part):
            td["Header.TID"] = j
            td["Header.LNID"] = int(j > 0)
        programs.append(Program.from_tds(part, bars=bars, name=name, copy=False))
    return programs


def _bars(kernel_bytes: int, kernel: str, out_bytes: int, in_bytes: int, extra=()) -> dict:
    bars = {
        SLOT_TD: None,
        SLOT_KERNEL: BarSlot(SLOT_KERNEL, "kernel", kernel_bytes, kernel),
        SLOT_OUTPUT: BarSlot(SLOT_OUTPUT, "output", out_bytes, "y"),
        SLOT_INPUT: BarSlot(SLOT_INPUT, "input", in_bytes, "x"),
    }
    bars.update({b.slot: b for b in extra})
    return dict(sorted(bars.items()))


def emit_conv(conv: Conv, lim: Limits) -> Lowered:
    """The :class:`Lowered` program of ``conv`` (tiled by :func:`plan_tiling`)."""
    from ..device.buffers import AneLayout

    check_conv(conv)
    stage = ne_stage(conv.activation)
    t = plan_tiling(conv, lim)
    c = effective(conv, lim, force_padded=t.mode == "padded")[1]
    sh, sw = c.span
    in_layout = AneLayout.of((c.n, c.cin, c.h, c.w))
    out_layout = AneLayout.of((c.n, c.cout, c.hout, c.wout))
    bits = c.kernel_bits  # a palettized weight: fastane.lower.compressed
    per, prefix = _compressed.kernel_bytes(c)
    groups, offset = [], 0
    for co0, ct, ci0, cit, ng in kernel_groups(c, t.cout_t, t.groups_t):
        lay = kernel_layout(ct, per, c.bias, stage.lut, prefix)
        groups.append(KernelGroup(co0, ct, ci0, cit, ng, offset, lay))
        offset += lay.nbytes
    ry = axis(c.hout, t.th, c.stride[0], sh, c.pad[0][0], c.h)
    rx = axis(c.wout, t.tw, c.stride[1], sw, c.pad[1][0], c.w)
    ny, nx, nk = len(ry[0]), len(rx[0]), len(groups)
    tasks = np.zeros(c.n * nk * ny * nx, _TASK_DTYPE)
    idx = np.indices((c.n, nk, ny, nx)).reshape(4, -1)
    tasks["n"], tasks["k"] = idx[0], idx[1]
    for name, arr in zip(("oy0", "th", "r0", "rows", "padt"), ry):
        tasks[name] = arr[idx[2]]
    for name, arr in zip(("ox0", "tw", "c0", "cols", "padl"), rx):
        tasks[name] = arr[idx[3]]

    bias = "channel" if c.bias else None
    ib, (ip, ir) = in_layout.batch_stride, (in_layout.plane_stride, in_layout.row_stride)
    ob, (op, orow) = out_layout.batch_stride, (out_layout.plane_stride, out_layout.row_stride)
    templates, tds = {}, []
    lut_off = (groups[-1].offset + groups[-1].layout.nbytes) if groups else 0
    for row in tasks.tolist():
        n, k, oy0, th, r0, rows, padt, ox0, tw, c0, cols, padl = row
        g = groups[k]
        padb = (oy0 + th - 1) * c.stride[0] - c.pad[0][0] + sh - (r0 + rows)
        padr = (ox0 + tw - 1) * c.stride[1] - c.pad[1][0] + sw - (c0 + cols)
        key = (g.cout, g.cin, g.groups, rows, cols, th, tw, padt, padb, padl, padr)
        tpl = templates.get(key)
        if tpl is None:
            td = conv_td(
                (1, g.cin, rows, cols),
                (1, g.cout, th, tw),
                kernel=(c.kh, c.kw),
                stride=c.stride,
                dilation=c.dilation,
                padding=((padt, padb), (padl, padr)),
                groups=g.groups,
                src=SLOT_INPUT,
                dst=SLOT_OUTPUT,
                kernel_slot=SLOT_KERNEL,
                bias=bias,
                post_scale=stage.post_scale,
                nonlinear=stage.nonlinear,
                src_strides=(ir, ip),
                dst_strides=(orow, op),
                nid=1,
                eon=False,
            )
            if bits:
                td.update(_compressed.td_fields(g.layout, bits))
            post = _post_chain(td, stage, (g.cout, th, tw), (orow, op), lut_off) if stage.post else []
            tpl = templates[key] = [td] + post
        chain = [td.copy() for td in tpl]
        chain[0][_SRC_BASE] = (n * ib + g.ci0 * ip + r0 * ir + c0 * 2) // ALIGN
        for lane, off in enumerate(g.layout.offsets):
            chain[0][COEFF_BASE[lane]] = (g.offset + off) // ALIGN
        # the last TD of the task's chain writes the output tile
        chain[-1][_DST_BASE] = (n * ob + g.co0 * op + oy0 * orow + ox0 * 2) // ALIGN
        tds += chain

    kernel_bytes = max(offset + (LUT_BLOCK if stage.gate is not None else 0), ALIGN)
    bars = _bars(kernel_bytes, "weights", out_layout.nbytes, in_layout.nbytes)
    programs = task_chains(tds, 1 + stage.post_tasks, bars, f"conv{c.cin}x{c.h}x{c.w}-{c.cout}", lim)
    return Lowered(conv, c, t, stage, groups, tasks, programs, in_layout, out_layout, kernel_bytes)


def _post_chain(td, stage: NEStage, shape, dst_strides, lut_off: int) -> list:
    """The tasks after a convolution task ``td`` whose NE stage is ``stage`` (sigmoid, silu
    or hard_swish; ``td`` is changed to keep its result in L2).  ``shape`` = the output
    tile (C, H, W); intermediates stay in L2 after the convolution's source window, one
    whole tile each; the last task writes the tile to the output slot (its base is written
    per task).

    * sigmoid: the convolution (bias, then the sigmoid - 0.5 table) keeps ``L`` in L2; a
      planar task writes ``round16(L + 0.5)``;
    * silu: the convolution (bias only) keeps ``z``; an elementwise NE task keeps
      ``L(z)``; a planar task keeps ``s = round16(L + 0.5)``; a planar multiply writes
      ``round16(z * s)`` (Apple's silu program on ``z``: it multiplies its input by the
      sigmoid);
    * hard_swish: the same without the +0.5: the elementwise NE task keeps ``s = H(z)``
      (the hard-sigmoid block, ``stage.gate``), the planar multiply writes ``round16(z * s)``."""
    c, h, w = shape
    tile = c * h * round_up(2 * w, L2_UNIT)  # one output tile in L2 (16-byte rows)
    r0 = td["L2.ResultBase.Addr"] * L2_UNIT  # right after the convolution's source
    td.update(
        {"L2.ResultCfg.ResultType": 3, "Header.WBase": 0, "Header.WBE": 0, "TileDMADst.DMAConfig.En": 0}
    )
    common = dict(dst=SLOT_OUTPUT, dst_strides=dst_strides, src_in_l2=True, eon=False)
    if stage.gate is None:  # sigmoid
        return [eltwise_td(shape, op="scale", offset=stage.offset, l2_src=r0, l2_dst=r0 + tile, **common)]
    r1 = r0 + tile
    tds = [
        eltwise_td(
            shape,
            nonlinear="lut",
            kernel_slot=SLOT_KERNEL,
            kernel_base=lut_off,
            l2_src=r0,
            l2_dst=r1,
            keep=True,
            **common,
        )
    ]
    if stage.offset:
        tds.append(
            eltwise_td(
                shape, op="scale", offset=stage.offset, l2_src=r1, l2_dst=r1 + tile, keep=True, **common
            )
        )
        r1 += tile
    tds.append(
        eltwise_td(shape, op="mul", src1_in_l2=True, l2_src=r0, l2_src1=r1, l2_dst=r1 + tile, **common)
    )
    return tds


def emit_eltwise(op: Eltwise, lim: Limits) -> LoweredEltwise:
    """The program of an activation (see :func:`fastane.lower.run_eltwise`)."""
    if op.n < 1:
        raise ValueError(f"cannot lower an activation of {op.n} elements")
    if 2 * op.n > IOVA_LIMIT:
        raise ValueError(
            f"an activation of {op.n} fp16 elements ({2 * op.n} bytes) exceeds the "
            f"{IOVA_LIMIT >> 30} GiB the ANE can address"
        )
    stage = ne_stage(op.activation)
    width, rows, rem, tiles = flat_tiles(op.n, stage, lim)
    # a gate (silu, hard_swish): its table is the first task's, on the input itself
    gated = stage.gate is not None
    block = stage.gate if gated else stage.block
    nonlinear = "lut" if gated else stage.nonlinear
    per = 1 + (stage.offset != 0.0) + gated
    templates, tds = {}, []
    for e0, h, w in tiles:
        tpl = templates.get((h, w))
        if tpl is None:
            shape = (1, h, w)
            t = h * round_up(2 * w, L2_UNIT)  # one tile in L2
            ne = dict(
                nonlinear=nonlinear,
                post_scale=stage.post_scale,
                kernel_slot=SLOT_KERNEL,
                src=SLOT_INPUT,
                l2_src=0,
                eon=False,
            )
            if stage.post is None:
                tpl = [eltwise_td(shape, dst=SLOT_OUTPUT, **ne)]
            elif not stage.offset:  # hard_swish: the gate goes to the intermediate slot
                tpl = [eltwise_td(shape, dst=SLOT_INTERMEDIATE, l2_dst=t, **ne)]
            else:  # unary/sigmoid.bin; activation/silu.bin multiplies the input by it
                tpl = [
                    eltwise_td(shape, keep=True, l2_dst=t, **ne),
                    eltwise_td(
                        shape,
                        op="scale",
                        offset=stage.offset,
                        src_in_l2=True,
                        l2_src=t,
                        dst=SLOT_INTERMEDIATE if gated else SLOT_OUTPUT,
                        l2_dst=2 * t,
                        eon=False,
                    ),
                ]
            if gated:
                tpl.append(
                    eltwise_td(
                        shape,
                        op="mul",
                        src=SLOT_INPUT,
                        src1=SLOT_INTERMEDIATE,
                        dst=SLOT_OUTPUT,
                        l2_src=0,
                        l2_src1=t,
                        l2_dst=2 * t,
                        eon=False,
                    )
                )
            templates[(h, w)] = tpl
        base = 2 * e0 // ALIGN
        chain = [td.copy() for td in tpl]
        chain[0][_SRC_BASE] = base
        chain[-1][_DST_BASE] = base
        if gated:  # the gate goes to the intermediate slot; the multiply reads x and it
            chain[-2][_DST_BASE] = base
            chain[-1][_SRC_BASE] = chain[-1][_SRC1_BASE] = base
        tds += chain
    nbytes = max(round_up(2 * op.n), ALIGN)
    kernel_bytes = LUT_BLOCK if block is not None else ALIGN
    extra = (
        [BarSlot(SLOT_INTERMEDIATE, "intermediate", nbytes, "sigmoid" if stage.offset else "gate")]
        if gated
        else []
    )
    bars = _bars(kernel_bytes, "lut", nbytes, nbytes, extra)
    programs = task_chains(tds, per, bars, f"{stage.name}{op.n}", lim)
    return LoweredEltwise(op, stage, block, width, rows, rem, tiles, per, programs, nbytes, kernel_bytes)
