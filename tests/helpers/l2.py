"""The L2 footprint of a chain of TDs, read from the registers as the device reads them
(:func:`fastane.device.l2.plan`, :func:`fastane.device.planar.plan_second`): each task's
windows, and the tensors kept in L2 that a later task still reads."""

from fastane.device import control_dma, l2, mac, planar
from fastane.m1 import FORMATS, L2_BYTES, L2_UNIT


def _geometry(regs, what):
    if planar.is_planar(regs):
        return planar.geometry(regs, planar.config(regs, what, strict=False), what, strict=False)
    return mac.geometry(regs, what)


def _reads(regs) -> list:
    """The L2 addresses a task reads a kept tensor from (source 0, source 1)."""
    out = []
    if regs["L2.SourceCfg.SourceType"] in l2.IN_L2:
        out.append(regs["L2.SourceBase.Addr"] * L2_UNIT)
    if planar.is_planar(regs) and planar.config(regs, "", strict=False).binary and not regs["Header.RBE1"]:
        out.append(regs.get("L2.Source1Base.Addr", 0) * L2_UNIT)
    return out


def windows(tds) -> list:
    """Per TD of ``tds`` (in order), ``{name: (L2 byte address, bytes)}``: its source
    (the whole kept tensor when it is in L2, else its ``TileHeight`` band), its second
    operand's band (a planar binary task streaming it), its result (whole when kept, else
    its band of staging), and every tensor kept in L2 by an earlier task that a later
    task reads before another result is kept over it (``kept@ADDRESS``)."""
    regs = [control_dma.decode(td.to_bytes()) for td in tds]
    reads = [_reads(r) for r in regs]
    resident: dict = {}
    plans, held = [], []  # per TD: its L2 plan, the tensors kept before it
    for i, r in enumerate(regs):
        what = f"TD {i}"
        g = _geometry(r, what)
        held.append({a: n for a, (_, n, _v) in resident.items()})
        p = l2.plan(r, g, FORMATS[g.in_fmt], FORMATS[g.out_fmt], resident, what)
        plans.append((p, g))
        if p.result_type in l2.IN_L2:
            l2.keep(resident, p.result[0], p.shape_out, p.result[1], True)
    keeps = {i: p.result for i, (p, _) in enumerate(plans) if p.result_type in l2.IN_L2}
    out = []
    for i, (r, (p, g)) in enumerate(zip(regs, plans)):
        source = (p.source[0], held[i][p.source[0]]) if p.source_type in l2.IN_L2 else p.source
        mine = {"source": source, "result": p.result}
        if planar.is_planar(r) and planar.config(r, "", strict=False).binary and r["Header.RBE1"]:
            rows = min(g.hin, r["Common.TileCfg.TileHeight"] or g.hin)
            mine["source1"] = (
                r.get("L2.Source1Base.Addr", 0) * L2_UNIT,
                rows * r["L2.Source1RowStride.Stride"] * L2_UNIT,
            )
        for addr, nbytes in held[i].items():
            if addr not in reads[i] and _read_later(addr, nbytes, i, reads, keeps):
                mine[f"kept@{addr:#x}"] = (addr, nbytes)
        out.append(mine)
    return out


def _read_later(addr: int, nbytes: int, i: int, reads: list, keeps: dict) -> bool:
    """Whether a task from ``i`` on reads the tensor kept at ``addr`` before a task
    keeps another result over it."""
    for j in range(i, len(reads)):
        if addr in reads[j]:
            return True
        k = keeps.get(j)
        if k is not None and k[0] < addr + nbytes and addr < k[0] + k[1]:
            return False
    return False


def overlaps(tds) -> list:
    """``[(TD index, name, name)]``: the windows of a task (:func:`windows`) that overlap
    one another or end past the 2 MiB L2 (``name`` twice); empty when the footprint fits."""
    bad = []
    for i, ws in enumerate(windows(tds)):
        items = sorted(ws.items(), key=lambda kv: kv[1])
        for name, (addr, nbytes) in items:
            if addr + nbytes > L2_BYTES:
                bad.append((i, name, name))
        for (n0, (a0, b0)), (n1, (a1, _)) in zip(items, items[1:]):
            if a0 + b0 > a1:
                bad.append((i, n0, n1))
    return bad


def footprint(ws: dict) -> int:
    """Bytes of L2 a task's windows (one entry of :func:`windows`) occupy together."""
    return sum(nbytes for _, nbytes in ws.values())
