"""Roofline reports of a planned-and-estimated :class:`Result`: a text table, the JSON
report (:data:`SCHEMA`) and a log-log plot (:mod:`fastane.roofline.plot`, re-exported
here).

    >>> from fastane.networks.plan import analyze
    >>> r = analyze("gpt2", chip="m1")              # as ``fastane roofline gpt2`` plans it
    >>> print(report.table(r))                       # per layer and total
    >>> report.to_json([r])                          # JSON-ready dict
    >>> report.plot([r], "roofline.png")             # needs matplotlib

The plan is :func:`fastane.networks.plan.analyze`'s (built-in networks and model files
alike); the ``fastane roofline`` command is :mod:`fastane.networks.cli`.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from . import chips as _chips
from ..m1 import TD_SIZE
from . import compare as _compare
from .model import Estimate, dram_traffic, estimate, tokens_per_s_bound
from .plot import measured_points, plot
from .result import Result, format_si, format_time

__all__ = [
    "Result",
    "table",
    "tokens_table",
    "tokens_per_s",
    "to_json",
    "plot",
    "measured_points",
    "limiter",
    "on_chip",
    "verdict",
    "SCHEMA",
]

#: the version of the JSON report (:func:`to_json`; docs/roofline.md, "The JSON report")
SCHEMA = _compare.SCHEMAS[-1]


def tokens_per_s(result: Result, chips=None) -> dict:
    """Decode tokens/s of ``result``'s plan on each chip: the model's prediction and three
    upper bounds (marketing DRAM, measured ANE read, and bandwidth / 2P for P fp16
    weight parameters)."""
    chips = [_chips.get(c) for c in (chips or _chips.names())]
    tok = max(1, result.workload.tokens)
    two_p = 2 * result.workload.weight_params
    out = {}
    for c in chips:
        est = estimate(result.plan.tasks, c, result.params) if c.key != result.chip.key else result.total
        dram = dram_traffic(est, c, result.params)  # what goes through DRAM (not the system cache)
        out[c.key] = {
            "model": tok / est.time_s,
            "bound_dram": tok * tokens_per_s_bound(dram, c, "dram"),
            "bound_ane_read": tok * tokens_per_s_bound(dram, c, "ane_read"),
            "bound_2p": tok * c.dram_bw.value / two_p if two_p else math.nan,
        }
    return out


def tokens_table(result: Result, chips=None) -> str:
    """Text table of :func:`tokens_per_s` over chips."""
    rows = tokens_per_s(result, chips)
    lines = [
        f"tokens/s of {result.workload.name} ({result.workload.weight_params / 1e6:.0f} M "
        f"fp16 weight parameters, {result.total.dram_bytes / 1e6:.1f} MB DRAM traffic a step)",
        f"  {'chip':10s} {'model':>9s} {'<= ANE read':>12s} {'<= DRAM':>9s} {'<= DRAM/2P':>11s}",
    ]
    for key, r in rows.items():
        fmt = lambda v: "-" if math.isnan(v) else f"{v:.1f}"  # noqa: E731
        lines.append(
            f"  {_chips.get(key).name:10s} {fmt(r['model']):>9s} "
            f"{fmt(r['bound_ane_read']):>12s} {fmt(r['bound_dram']):>9s} "
            f"{fmt(r['bound_2p']):>11s}"
        )
    over = {k: result.params.overhead_s(k) for k in rows}  # the runtime path's, a chip's own
    common = max(over.values(), key=list(over.values()).count)
    own = "".join(f", {format_time(v)} on the {_chips.get(k).name}" for k, v in over.items() if v != common)
    lines.append(
        f"  model: the time model (DMA engines, dispatch, {format_time(common)} "
        f"program overhead{own}); "
        "bounds: bandwidth / bytes (measured ANE read, marketing DRAM) and "
        "marketing DRAM / 2P"
    )
    return "\n".join(lines)


# ------------------------------------------------------------- what bounds a layer


def limiter(est: Estimate) -> str:
    """What the largest part of ``est``'s time is: "compute", "KernelDMA" (weights),
    "TileDMA" (activations and TDs), "dispatch" (per task) or "overhead" (per program)."""
    dma = est.kernel_s + est.tile_s
    share = est.dma_s / dma if dma else 0.0  # the DRAM cap can stretch the DMA time
    parts = {
        "compute": est.compute_s,
        "KernelDMA": est.kernel_s * share,
        "TileDMA": est.tile_s * share,
        "dispatch": est.dispatch_s,
        "overhead": est.overhead_s,
    }
    return max(parts, key=parts.get)


def on_chip(lp) -> str:
    """What of a layer stayed in L2: "in" (its source), "out" (its result), "in+out", "-"."""
    parts = [n for n, flag in (("in", lp.source_in_l2), ("out", lp.result_in_l2)) if flag]
    return "+".join(parts) or "-"


def residency_line(result: Result) -> str:
    """One line: how many intermediates stayed in L2 and the DRAM bytes that saved (each
    kept tensor, in 64-byte rows, once written and once read back)."""
    kept = [lp for lp in result.plan.lowered if lp.result_in_l2]
    saved = 2 * sum(
        2 * lp.layer.cout * lp.layer.hout * _ru64(lp.layer.wout)
        if hasattr(lp.layer, "cout")
        else 2 * lp.layer.B * lp.layer.N * _ru64(lp.layer.M)
        for lp in kept
    )
    return (
        f"on chip: {len(kept)} intermediates kept in L2 for the next layer (~{saved / 1e6:.1f} MB of "
        f"DRAM writes and reads saved); the rest went through DRAM"
    )


def model_line(result: Result) -> str:
    """One line: the rates and fixed costs the time model uses for this chip."""
    from .model import rates

    q, p = rates(result.chip, result.params), result.params
    return (
        f"model ({'calibrated' if p.bandwidth == 'read' else 'seed'}): MAC {format_si(q['peak'], 'OP/s')} "
        f"({100 * p.compute_efficiency:.0f}% of {format_si(result.chip.peak_ops_program if p.one_ane else result.chip.peak_ops_fp16.value, 'OP/s')}"
        + (
            f"; one-tap {format_si(q['peak'] * p.pointwise_efficiency, 'OP/s')}"
            if p.pointwise_efficiency != 1
            else ""
        )
        + (f"; {100 * p.kernel_overlap:.0f}% of KernelDMA under TileDMA" if p.kernel_overlap else "")
        + "), "
        f"KernelDMA {format_si(q['kernel'], 'B/s')}, TileDMA {format_si(q['tile'], 'B/s')}, dispatch {format_time(q['dispatch'])} "
        f"a task, {format_time(p.overhead_s(result.chip))} a program"
    )


def _ru64(w: int) -> int:
    return -(-2 * w // 64) * 32


def _what_if(result: Result, **figures) -> float:
    """The predicted time with some chip figures replaced (a what-if)."""
    chip = _chips.with_figures(result.chip, **figures)
    return estimate(result.plan.tasks, chip, result.params).time_s


def verdict(result: Result) -> str:
    """One line: what bounds the workload and what 2x more of it would give."""
    tot, c = result.total, result.chip
    if not tot.tasks:
        return "no layer runs on the ANE: nothing to bound"
    lim = limiter(tot)
    unit = "tokens/s" if result.workload.tokens and result.workload.phase == "decode" else "runs/s"
    if lim in ("KernelDMA", "TileDMA"):
        fig = {
            "read_bw_model": 2 * c.read_bw_model.value,
            "dram_bw": 2 * c.dram_bw.value,
            "kernel_dma_bw": 2 * c.kernel_dma_bw.value,
            "tile_dma_bw": 2 * c.tile_dma_bw.value,
        }
        gain = tot.time_s / _what_if(result, **fig)
        what = "weights" if lim == "KernelDMA" else "activations (TileDMA)"
        return (
            f"memory-bound on {what} ({100 * (tot.kernel_s if lim == 'KernelDMA' else tot.tile_s) / tot.time_s:.0f}% "
            f"of the time): 2x more bandwidth would give {gain:.2f}x {unit}"
        )
    if lim == "compute":
        gain = tot.time_s / _what_if(result, peak_ops_fp16=2 * c.peak_ops_fp16.value)
        return (
            f"compute-bound ({100 * tot.compute_s / tot.time_s:.0f}% of the time at "
            f"{100 * result.params.compute_efficiency:.0f}% of peak): 2x the MAC rate would give "
            f"{gain:.2f}x {unit}"
        )
    return (
        f"bound by fixed costs ({format_time(tot.dispatch_s)} dispatch over {tot.tasks} tasks, {format_time(tot.overhead_s)} "
        f"per program): fewer, larger tasks would help more than bandwidth or compute"
    )


def table(result: Result, layers: bool = True) -> str:
    """The report as text: per layer (unless ``layers=False``) and total."""
    r, c, tot = result, result.chip, result.total
    head = [
        f"{r.workload.name}: {r.workload.description}",
        f"chip {c.name}: peak {format_si(c.peak_ops_fp16.value, 'OP/s')} FP16 ({c.peak_ops_fp16.kind}), "
        f"DRAM {format_si(c.dram_bw.value, 'B/s')} ({c.dram_bw.kind}), ridge {c.ridge_point:.1f} OP/B; "
        f"KernelDMA {format_si(c.kernel_dma_bw.value, 'B/s')}, TileDMA {format_si(c.tile_dma_bw.value, 'B/s')} "
        f"({c.kernel_dma_bw.kind})",
        model_line(r),
    ]
    w = max([len(lp.name) for lp in r.plan.layers] + [5])
    cols = (
        f"{'layer':{w}s}  {'shape':44s} {'tasks':>6s} {'MMAC':>10s} {'DRAM MB':>9s} "
        f"{'OP/B':>8s} {'bound':>7s} {'time':>11s} {'%roof':>6s}  {'limited by':10s} {'on chip':8s}"
    )
    body = [cols]
    if layers:
        est = dict(zip(map(id, r.plan.lowered), r.layers))
        for lp in r.plan.layers:
            e = est.get(id(lp))
            if e is None:
                body.append(f"{lp.name:{w}s}  {lp.layer.shape_str()[:44]:44s} not lowered: {lp.not_lowered}")
                continue
            body.append(
                f"{lp.name:{w}s}  {lp.layer.shape_str()[:44]:44s} {e.tasks:6d} "
                f"{e.macs / 1e6:10.2f} {e.dram_bytes / 1e6:9.3f} {e.intensity:8.2f} "
                f"{e.bound:>7s} {format_time(e.time_s):>11s} {e.pct_of_roof:6.1f}  {limiter(e):10s} "
                f"{on_chip(lp):8s}"
            )
    n_low, n_not = len(r.plan.lowered), len(r.plan.not_lowered)
    counted = f"{n_low} layers" + (f" ({n_not} not lowered, not counted)" if n_not else "")
    body.append(
        f"{'TOTAL':{w}s}  {counted:44s} {tot.tasks:6d} "
        f"{tot.macs / 1e6:10.2f} {tot.dram_bytes / 1e6:9.3f} {tot.intensity:8.2f} "
        f"{tot.bound:>7s} {format_time(tot.time_s):>11s} {tot.pct_of_roof:6.1f}  {limiter(tot):10s}"
    )
    foot = [
        f"traffic: KernelDMA {tot.kernel_dma_bytes / 1e6:.1f} MB, TileDMA src "
        f"{tot.tile_dma_src_bytes / 1e6:.1f} MB, dst {tot.tile_dma_dst_bytes / 1e6:.1f} MB, "
        f"ControlDMA {tot.control_dma_bytes / 1e6:.3f} MB ({tot.tasks} TDs x {TD_SIZE:#x} B)",
        f"time {format_time(tot.time_s)} = tasks {format_time(tot.time_s - tot.overhead_s)} (compute {format_time(tot.compute_s)}, "
        f"DMA {format_time(tot.dma_s)}, dispatch {format_time(tot.dispatch_s)}; {tot.dma_bound_tasks} of {tot.tasks} "
        f"tasks DMA-bound) + program overhead {format_time(tot.overhead_s)}",
        f"{format_si(tot.attained_ops, 'OP/s')} attained, {tot.pct_of_roof:.1f}% of the roof "
        f"({format_si(tot.roof_ops, 'OP/s')} at {tot.intensity:.2f} OP/B, {tot.bound}-bound); "
        f"limited by {limiter(tot)}; planned in {r.plan_s * 1e3:.1f} ms",
    ]
    if n_not:
        kinds = sorted({lp.layer.kind for lp in r.plan.not_lowered})
        foot.append(
            f"not lowered: {n_not} of {len(r.plan.layers)} layers ({', '.join(kinds)}; the reason "
            f"is on each row): their work is not in the totals above"
        )
    foot.append(residency_line(r))
    foot.append("verdict: " + verdict(r))
    if r.workload.tokens:
        foot.append(
            f"{r.workload.tokens / tot.time_s:.1f} tokens/s on {c.name} "
            f"({r.workload.phase}, {r.workload.tokens} token{'s' if r.workload.tokens > 1 else ''} a run)"
        )
    return "\n".join(head + body + foot)


def to_json(results, chips_for_tokens=None) -> dict:
    """A JSON-ready dict of one or more results (same chip assumed for the header)."""
    if isinstance(results, Result):
        results = [results]
    out = {"schema": SCHEMA, "chip": None, "params": None, "workloads": []}
    for r in results:
        out["chip"] = {"key": r.chip.key, "name": r.chip.name, **r.chip.figures()}
        out["params"] = asdict(r.params)
        wl = {
            "name": r.workload.name,
            "description": r.workload.description,
            "phase": r.workload.phase,
            "tokens": r.workload.tokens,
            "weight_params": r.workload.weight_params,
            "stats_only": True,
            "plan_seconds": r.plan_s,
            "total": r.total.as_dict(),
            "layers": [
                {
                    "layer": lp.name,
                    "kind": lp.layer.kind,
                    "op": getattr(lp.layer, "op", lp.layer.kind),
                    "placement": "ane",
                    "shape": lp.layer.shape_str(),
                    "activation": getattr(lp.layer, "activation", None),
                    **e.as_dict(),
                    "limited_by": limiter(e),
                    "source_in_l2": lp.source_in_l2,
                    "result_in_l2": lp.result_in_l2,
                }
                for lp, e in zip(r.plan.lowered, r.layers)
            ],
            "verdict": verdict(r),
            # layers not on the ANE (not lowered, or placed on the host): not in "total"
            "not_lowered": [
                {
                    "layer": lp.name,
                    "kind": lp.layer.kind,
                    "op": getattr(lp.layer, "op", lp.layer.kind),
                    "placement": getattr(lp.layer, "placement", "not lowered"),
                    "shape": lp.layer.shape_str(),
                    "reason": lp.not_lowered,
                }
                for lp in r.plan.not_lowered
            ],
        }
        if r.workload.tokens:
            wl["tokens_per_s"] = r.workload.tokens / r.total.time_s
        if r.is_decode:
            wl["tokens_per_s_by_chip"] = tokens_per_s(r, chips_for_tokens)
        out["workloads"].append(wl)
    return out
