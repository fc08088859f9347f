"""The log-log roofline plot of results (needs matplotlib) and the measured points it marks.
:mod:`fastane.roofline.report` re-exports :func:`plot` and :func:`measured_points`.
"""

from __future__ import annotations

from . import chips as _chips
from .result import Result, format_si, format_time

__all__ = ["plot", "measured_points"]


def measured_points(result: Result) -> list:
    """The public measurements of this workload on this chip the docs list (calibration and
    validation points): ``[(id, seconds)]``."""
    from . import calibrate, validate

    out = []
    for p in calibrate.POINTS + validate.VALIDATION:
        if _chips.get(p.chip).key != result.chip.key or getattr(p, "repeat", 1) != 1:
            continue
        w = calibrate.point_workload(p.spec)
        if w.name == result.workload.name and w.description == result.workload.description:
            out.append((p.id, p.measured_s))
    return out


def _plot_measured(ax, result: Result, color) -> None:
    """Hollow diamonds: the measured time of the workload, at the model's intensity."""
    t = result.total
    for pid, sec in measured_points(result):
        ax.scatter(
            [t.intensity],
            [t.ops / sec],
            marker="D",
            s=90,
            facecolors="none",
            edgecolors=color,
            linewidths=1.8,
            zorder=6,
            label=f"{result.workload.name}: measured {pid} ({format_time(sec)})",
        )


def plot(results, path, title: str | None = None):
    """Log-log roofline of ``results`` (one chip) to ``path`` (PNG): the roofs, the ridge
    point, one dot per layer and a star per workload total.  Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the roofline plot needs matplotlib: pip install 'fastane[plot]' (or pip install matplotlib)"
        ) from e
    import numpy as np

    if isinstance(results, Result):
        results = [results]
    chip = results[0].chip
    peak, bw = chip.peak_ops_fp16.value, chip.dram_bw.value
    xs = [e.intensity for r in results for e in r.layers + [r.total] if e.dram_bytes]
    lo = min([0.1] + [x for x in xs if x > 0]) / 2
    hi = max([chip.ridge_point * 20] + xs) * 2
    x = np.logspace(np.log10(lo), np.log10(hi), 400)
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)

    def roof(b, **style):  # the attainable OP/s under a bandwidth b: min(peak, intensity x b)
        ax.loglog(x, np.minimum(peak, x * b), **style)

    roof(
        bw,
        color="black",
        lw=2,
        label=f"roof: {peak / 1e12:g} TOP/s FP16, DRAM {bw / 1e9:g} GB/s ({chip.dram_bw.kind})",
    )
    if chip.ane_read_bw is not None:
        b = chip.ane_read_bw.value
        roof(b, color="gray", ls="--", lw=1.2, label=f"ANE read {b / 1e9:g} GB/s (measured, anemll-bench)")
    kb = chip.kernel_dma_bw.value
    roof(kb, color="gray", ls=":", lw=1.2, label=f"KernelDMA {kb / 1e9:.1f} GB/s ({chip.kernel_dma_bw.kind})")
    ridge = chip.ridge_point
    ax.axvline(ridge, color="tab:red", ls="-.", lw=1)
    ax.plot([ridge], [peak], "o", color="tab:red", ms=8)
    ax.annotate(
        f"ridge {ridge:.1f} OP/B", (ridge, peak), textcoords="offset points", xytext=(8, -16), color="tab:red"
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(results):
        col = colors[i % len(colors)]
        pts = [(e.intensity, e.attained_ops) for e in r.layers if e.dram_bytes and e.time_s]
        if pts:
            ax.scatter(*zip(*pts), s=14, alpha=0.6, color=col, label=f"{r.workload.name}: layers")
        t = r.total
        ax.scatter(
            [t.intensity],
            [t.attained_ops],
            marker="*",
            s=220,
            color=col,
            edgecolors="black",
            zorder=5,
            label=f"{r.workload.name}: total ({format_si(t.attained_ops, 'OP/s')}, {format_time(t.time_s)})",
        )
        _plot_measured(ax, r, col)
    ax.set_xlabel("arithmetic intensity (OP per byte of DRAM traffic)")
    ax.set_ylabel("attained OP/s (model; diamonds: measured)")
    ax.set_title(title or f"fastane roofline, {chip.name} ANE")
    ax.set_xlim(lo, hi)
    ax.set_ylim(
        min([peak / 1e5] + [e.attained_ops for r in results for e in r.layers if e.attained_ops > 0]) / 2,
        peak * 3,
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
