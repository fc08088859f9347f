"""One self-contained HTML page of a model's report (``fastane run --html``, ``fastane report``,
:meth:`fastane.Model.html_report`): what fastane knows about the model, in one file that opens
without a network (a CI artifact, an e-mail attachment).

The page shows

* a summary: model, chip, compute units and precision, the predicted time of the ANE layers on
  every chip of :mod:`fastane.roofline.chips` (bars), the share of the modelled work Core ML would
  run on the ANE, the first layer beyond its tolerance, the layers fastane runs off the ANE
  grouped by reason, and the warning of a plan that leaves the ANE;
* the layer table (sortable; filterable by predicted device, fastane's placement, op type, bound
  and text; the filter is kept in the address's ``#fragment``, so ``report.html#device=cpu``
  opens filtered): per layer the op, output shape, predicted device, confidence and reason,
  fastane's placement and reason, tasks, MACs, DRAM bytes, OP/byte, predicted time and what
  bounds it, error against fp32, saturated outputs, LUT range events, non-finite values born;
* the graph of the layers (:func:`layout`: ranks by longest path, ordered by the mean position
  of their predecessors, as in the layered drawings of Sugiyama et al. 1981), coloured by
  predicted device; the first layer beyond its tolerance and every layer it reaches on the way
  to the outputs are drawn in red (the path the divergence travels);
* the roofline of the chip with each ANE layer as a point (:func:`roofline_svg`).

The page is rendered by Jinja2 (the ``report`` extra: ``pip install 'fastane[report]'``) from
``templates/report.html.j2``, with its style sheet and script inlined; the plots are inline SVG
drawn by the template from coordinates computed here.  Nothing is fetched: the page contains no
URL.  :func:`render_page` is the machinery every page of fastane shares (the layout
``templates/page.html.j2`` that the templates extend, the style sheet and the devices' colours
inlined): a dataset evaluation's page (its summary, changed inputs, layer table and heat map of
the layers' error histograms) is :mod:`fastane.model.evaluate.page` (``fastane eval --html``,
:meth:`fastane.model.evaluate.Evaluation.html`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources

from ...errors import quote
from ...roofline import chips as _chips
from ...roofline.result import format_si, format_time
from ..placement.compute_plan import DEVICES
from .report import ane_tasks, format_error, json_number

__all__ = [
    "render",
    "render_page",
    "NEEDS_JINJA2",
    "clip",
    "page_data",
    "layout",
    "roofline_svg",
    "chip_times",
    "Drawing",
    "HEADLESS_CHROMIUM",
]

#: the devices' colours (shared by the graph, the table's badges and the legend)
COLORS = {"ane": "#2e8b57", "gpu": "#7b4fc4", "cpu": "#d9822b", "host": "#d9822b", "layout": "#8a8f98"}

#: the flags that open a page in headless Chromium on a machine without a network (no
#: background connections, which a closed network refuses, many at a time): what the browser
#: test, ``bench/report_page.py`` and ``scripts/report_screenshot.py`` start it with, beside
#: a new ``--user-data-dir`` and a window size
HEADLESS_CHROMIUM = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

#: the graph's node box and gaps (px)
NODE_W, NODE_H, GAP_X, GAP_Y = 168, 30, 24, 34
#: the width of the virtual node an edge passes through on a rank it skips (px)
VIRTUAL_W = 8


@dataclass
class Drawing:
    """An SVG drawing's size and items (the template draws them): ``nodes`` and ``edges`` of
    the graph, or ``lines``, ``points``, ``ticks`` and ``labels`` of a plot."""

    width: float
    height: float
    nodes: list = field(default_factory=list)
    edges: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    points: list = field(default_factory=list)
    ticks: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    #: the graph's node box; the bars' label column
    node_w: float = NODE_W
    node_h: float = NODE_H
    left: float = 0.0


def chip_times(report) -> list:
    """``[(chip, seconds or None)]``: the predicted time of ``report``'s ANE layers on every chip
    of :data:`fastane.roofline.chips.CHIPS` (their tasks, :func:`~fastane.model.run.report.ane_tasks`,
    estimated on each chip with the program overhead, as ``report.total`` is on its own chip;
    None where no layer runs on the ANE).  The tasks are the M1's lowering on every chip."""
    from ...roofline.model import estimate

    tasks = ane_tasks(report.layers)
    return [
        (chip, estimate(tasks, chip, program=True, name=report.model).time_s if tasks else None)
        for chip in map(_chips.get, _chips.names())
    ]


def layout(report, plan=None, bad: set = frozenset()) -> Drawing:
    """The layered drawing of ``report``'s layers (and the model inputs they read), top to
    bottom, in the manner of Sugiyama et al. (1981): an edge from a layer to each layer reading
    one of its outputs; a layer's rank is one more than its deepest predecessor's; an edge that
    spans several ranks passes through a narrow virtual node on each rank between (so it runs
    beside the layers it skips, not under them); within a rank, nodes are ordered by the mean
    centre of their predecessors and placed as near it as the gaps allow (one downward pass).
    ``bad``: the names of the layers drawn as on the divergence's path."""
    layers = report.layers
    producer: dict = {}
    names: list = []  # per real node: (name, label, record or None)
    preds: list = []  # per node (real, then virtual): predecessor indices
    rank: list = []
    for r in layers:
        for t in r.layer.inputs:
            if t and t not in producer:  # a model input (or a tensor no layer makes)
                producer[t] = len(names)
                names.append((t, "input", None))
                preds.append([])
                rank.append(0)
        i = len(names)
        ps = sorted({producer[t] for t in r.layer.inputs if t in producer})
        names.append((r.layer.name, r.layer.op, r))
        preds.append(ps)
        rank.append(1 + max((rank[p] for p in ps), default=0))
        for t in r.layer.outputs:
            producer[t] = i
    real = len(names)
    edges = []  # (source, target, [nodes from source to target, virtual ones between])
    for i in range(real):
        for p in list(preds[i]):
            chain = [p]
            for k in range(rank[p] + 1, rank[i]):
                preds.append([chain[-1]])
                rank.append(k)
                chain.append(len(rank) - 1)
            chain.append(i)
            preds[i][preds[i].index(p)] = chain[-2]
            edges.append((p, i, chain))
    width = [NODE_W if i < real else VIRTUAL_W for i in range(len(rank))]
    by_rank: dict = {}
    for i, k in enumerate(rank):
        by_rank.setdefault(k, []).append(i)
    x = [0.0] * len(rank)  # centres
    for k in sorted(by_rank):
        row = by_rank[k]
        want = {i: sum(x[p] for p in preds[i]) / len(preds[i]) if preds[i] else None for i in row}
        free = 0.0
        for i in row:  # nodes without predecessors: left to right
            if want[i] is None:
                want[i] = free + width[i] / 2
                free += width[i] + GAP_X
        row.sort(key=lambda i: want[i])
        edge = -math.inf
        for i in row:
            x[i] = max(want[i], edge + GAP_X + width[i] / 2)
            edge = x[i] + width[i] / 2
        shift = sum(want[i] - x[i] for i in row) / len(row)  # the row as a whole nearer its wishes
        for i in row:
            x[i] += shift
    left = min(x[i] - width[i] / 2 for i in range(len(x))) - GAP_X
    devices = _devices(report, plan)
    d = Drawing(
        max(x[i] + width[i] / 2 for i in range(len(x))) - left + GAP_X,
        (max(rank) + 1) * (NODE_H + GAP_Y),
    )

    def top(i):
        return GAP_Y / 2 + rank[i] * (NODE_H + GAP_Y)

    for i in range(real):
        name, label, r = names[i]
        device = devices.get(name, "input") if r is not None else "input"
        d.nodes.append(
            {
                "x": x[i] - NODE_W / 2 - left,
                "y": top(i),
                "name": name,
                "text": clip(name, 22),
                "op": clip(label, 24),
                "device": device,
                "bad": name in bad,
                "title": _node_title(r, device) if r is not None else f"model input {name}",
                "layer": r is not None,
            }
        )
    for p, i, chain in edges:
        path = f"M{x[p] - left:.1f},{top(p) + NODE_H:.1f}"
        for a, b in zip(chain, chain[1:]):
            y0, y1 = top(a) + NODE_H, top(b)
            mid = (y0 + y1) / 2
            path += f" C{x[a] - left:.1f},{mid:.1f} {x[b] - left:.1f},{mid:.1f} {x[b] - left:.1f},{y1:.1f}"
            if b >= real:  # through the virtual node
                path += f" L{x[b] - left:.1f},{y1 + NODE_H:.1f}"
        d.edges.append({"d": path, "bad": names[p][0] in bad and names[i][0] in bad})
    return d


def divergence_path(report) -> set:
    """The first layer beyond its tolerance and every layer that reads, directly or not, one of
    its outputs (the path its error travels to the outputs); empty when every layer is within."""
    if report.first_bad is None:
        return set()
    reached: set = set()
    names: set = set()
    for r in report.layers:
        if r.layer.name == report.first_bad or any(t in reached for t in r.layer.inputs):
            names.add(r.layer.name)
            reached.update(r.layer.outputs)
    return names


def roofline_svg(report, chip, width: float = 640, height: float = 380) -> Drawing:
    """The log-log roofline of ``chip`` (the FP16 peak and the DRAM roof, the ridge point) with
    each ANE layer of ``report`` at its intensity and attained OP/s (colour: what bounds its
    predicted time)."""
    peak, bw = chip.peak_ops_fp16.value, chip.dram_bw.value
    pts = [
        (r, r.estimate)
        for r in report.layers
        if r.estimate is not None and r.estimate.ops > 0 and r.estimate.dram_bytes and r.estimate.time_s > 0
    ]
    xs = [e.intensity for _, e in pts] + [chip.ridge_point]
    ys = [e.attained_ops for _, e in pts if e.attained_ops > 0] + [peak]
    x0, x1 = math.floor(math.log10(min(xs + [0.1]))), math.ceil(math.log10(max(xs) * 4))
    y0, y1 = math.floor(math.log10(min(ys + [peak / 1e4]))), math.ceil(math.log10(peak * 2))
    ml, mr, mt, mb = 64, 16, 14, 42
    pw, ph = width - ml - mr, height - mt - mb

    def sx(v):
        return ml + (math.log10(v) - x0) / (x1 - x0) * pw

    def sy(v):
        return mt + (y1 - math.log10(v)) / (y1 - y0) * ph

    d = Drawing(width, height)
    for k in range(x0, x1 + 1):
        d.ticks.append({"x1": sx(10.0**k), "y1": mt, "x2": sx(10.0**k), "y2": mt + ph})
        d.labels.append({"x": sx(10.0**k), "y": mt + ph + 16, "text": _decade(k), "anchor": "middle"})
    for k in range(y0, y1 + 1):
        d.ticks.append({"x1": ml, "y1": sy(10.0**k), "x2": ml + pw, "y2": sy(10.0**k)})
        d.labels.append(
            {"x": ml - 6, "y": sy(10.0**k) + 4, "text": format_si(10.0**k, "OP/s"), "anchor": "end"}
        )
    ridge = chip.ridge_point
    lo = max(10.0**x0, 10.0**y0 / bw)  # where the DRAM roof enters the plot
    d.lines.append(
        {
            "points": f"{sx(lo):.1f},{sy(lo * bw):.1f} {sx(ridge):.1f},{sy(peak):.1f} "
            f"{sx(10.0**x1):.1f},{sy(peak):.1f}",
            "class": "roof",
            "title": f"roof: {format_si(peak, 'OP/s')} FP16, DRAM {format_si(bw, 'B/s')}",
        }
    )
    d.lines.append(
        {
            "points": f"{sx(ridge):.1f},{mt} {sx(ridge):.1f},{mt + ph}",
            "class": "ridge",
            "title": f"ridge point {ridge:.1f} OP/byte",
        }
    )
    d.labels.append({"x": sx(ridge) + 4, "y": mt + 12, "text": f"ridge {ridge:.0f} OP/B", "anchor": "start"})
    for r, e in pts:
        d.points.append(
            {
                "x": sx(e.intensity),
                "y": sy(max(e.attained_ops, 10.0**y0)),
                "bound": e.limiter,
                "title": f"{r.layer.name} ({r.layer.op}): {e.intensity:.1f} OP/B, "
                f"{format_si(e.attained_ops, 'OP/s')}, {format_time(e.time_s)}, bound by {e.limiter}",
            }
        )
    d.labels.append(
        {"x": ml + pw / 2, "y": height - 6, "text": "OP per byte of DRAM traffic", "anchor": "middle"}
    )
    return d


def page_data(report, plan, times=None, source: str = "") -> dict:
    """What the template shows (plain values): ``report`` (a :class:`~fastane.model.run.Report`),
    ``plan`` (its :class:`~fastane.model.placement.compute_plan.ComputePlan`), ``times``
    (:func:`chip_times`, or None) and ``source`` (the model file's name, or "")."""
    chip = _chips.get(report.chip)
    devices = _devices(report, plan)
    ops = {} if plan is None else plan.by_layer()
    rows = []
    for i, r in enumerate(report.layers):
        d, e = r.as_dict(), r.estimate
        p = ops.get(r.layer.name, [None])[0]
        on_ane = r.placement == "ane"
        rows.append(
            {
                "i": i,
                "name": d["name"],
                "op": d["op"],
                "output": d["output"],
                "device": devices.get(r.layer.name, r.placement),
                "confidence": "" if p is None else p.confidence,
                "rule": "" if p is None else p.rule,
                "coreml_reason": "" if p is None else p.reason,
                "weight": None if p is None else sum(o.weight for o in ops[r.layer.name]),
                "placement": r.placement,
                "reason": r.reason,
                "call": d["call"],
                "tasks": d["tasks"] if on_ane else None,
                "macs": d["macs"] if on_ane else None,
                "dram": d["dram_bytes"] if on_ane else None,
                "opb": d["op_per_byte"],
                "time": d["time_s"],
                "bound": d["bound"] or "",
                "error": json_number(r.error),
                "max_abs": json_number(r.max_abs_err),
                "tolerance": r.tolerance,
                "ok": r.ok,
                "saturated": d["saturated"] if on_ane else None,
                "cropped": d["cropped"],
                "lut": d["lut_underflow"] + d["lut_overflow"] if on_ane else None,
                "born": r.inf_born + r.nan_born,
                "text": {
                    "macs": format_si(d["macs"]) if on_ane else "-",
                    "dram": format_si(d["dram_bytes"], "B") if on_ane else "-",
                    "opb": "-" if d["op_per_byte"] is None else f"{d['op_per_byte']:.1f}",
                    "time": "-" if e is None else format_time(e.time_s),
                    "error": format_error(r.error),
                    "max_abs": format_error(r.max_abs_err),
                },
            }
        )
    off: dict = {}
    for r in report.layers:
        if r.placement != "ane":
            off.setdefault((r.placement, r.reason or "-"), []).append(r.layer.name)
    leave = None if plan is None else plan.leaves_ane()
    bars = _bars(times or [], chip.key)
    bad = divergence_path(report)
    return {
        "title": f"fastane report: {report.model}",
        "model": report.model,
        "source": source,
        "chip": chip.name,
        "chip_key": chip.key,
        "stats_only": report.stats_only,
        "compute_units": None if plan is None else plan.compute_units,
        "precision": None if plan is None else plan.precision_text,
        "ane_share": None if plan is None else sum(o.weight for o in plan.ops if o.preferred == "ane"),
        "device_counts": _counts(rows, "device"),
        "placement_counts": sorted(report.placement.items(), key=lambda kv: -kv[1]),
        "total": None if report.total is None else format_time(report.total.time_s),
        "total_detail": None
        if report.total is None
        else f"{report.total.tasks} tasks, {format_si(report.total.macs)} MACs, "
        f"{format_si(report.total.dram_bytes, 'B')} DRAM",
        "first_bad": report.first_bad,
        "first_bad_row": next(
            (i for i, r in enumerate(report.layers) if r.layer.name == report.first_bad), None
        ),
        "outputs": [
            {"name": n, "max_abs": format_error(o["max_abs_err"]), "error": format_error(o["error"])}
            for n, o in report.outputs.items()
        ],
        "off": [
            {
                "placement": k[0],
                "reason": k[1],
                "count": len(v),
                "names": ", ".join(quote(n, 40) for n in v[:6])
                + (f" and {len(v) - 6} more" if len(v) > 6 else ""),
            }
            for k, v in sorted(off.items(), key=lambda kv: -len(kv[1]))
        ],
        "leave": None if leave is None else leave.message,
        "rows": rows,
        "ops": sorted({r["op"] for r in rows}),
        "bounds": sorted({r["bound"] for r in rows if r["bound"]}),
        "devices": [u for u in DEVICES if any(r["device"] == u for r in rows)]
        + sorted({r["device"] for r in rows} - set(DEVICES)),
        "placements": sorted({r["placement"] for r in rows}),
        "bars": bars,
        "graph": layout(report, plan, bad),
        "roofline": roofline_svg(report, chip)
        if any(r.estimate is not None for r in report.layers)
        else None,
    }


def render(report, plan=None, times=None, source: str = "") -> str:
    """The page (a str of HTML) of ``report`` with ``plan``, ``times`` and ``source``
    (:func:`page_data`).  Needs Jinja2 (the ``report`` extra)."""
    return render_page("report.html.j2", script="report.js", **page_data(report, plan, times, source))


#: what a page says when Jinja2 is missing (:func:`render_page`, ``--html``'s check)
NEEDS_JINJA2 = "an HTML page needs Jinja2: pip install 'fastane[report]' (or pip install jinja2)"


def render_page(template: str, package: str | None = None, script: str | None = None, **data) -> str:
    """``template``, from the ``templates`` folder of ``package`` (default: this one), rendered
    by Jinja2 with ``data``: it extends this folder's ``page.html.j2`` (the head, the style sheet
    ``report.css`` and the devices' colours inlined, the header, main and footer blocks, the
    script ``script`` of the same folders inlined when given), so that every page of fastane
    looks alike and fetches nothing.  A RuntimeError (:data:`NEEDS_JINJA2`) without Jinja2."""
    try:
        import jinja2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(NEEDS_JINJA2) from exc
    folders = [resources.files(p) / "templates" for p in dict.fromkeys((package or __package__, __package__))]

    def read(name: str) -> str:
        for folder in folders:
            if (folder / name).is_file():
                return (folder / name).read_text(encoding="utf-8")
        raise jinja2.TemplateNotFound(name)

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(read),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(template).render(
        css=read("report.css"), js=read(script) if script else "", colors=COLORS, **data
    )


def _devices(report, plan) -> dict:
    """Layer name -> the device the page colours it by: Core ML's predicted device where there
    is a plan, else fastane's placement."""
    if plan is None:
        return {r.layer.name: r.placement for r in report.layers}
    return {name: ops[0].preferred for name, ops in plan.by_layer().items()}


def _bars(times, current: str) -> Drawing | None:
    shown = [(c, t) for c, t in times if t is not None]
    if not shown:
        return None
    top = max(t for _, t in shown)
    row, label_w, width = 15, 110, 560
    d = Drawing(width, row * len(shown) + 8, left=label_w)
    for k, (c, t) in enumerate(shown):
        w = (width - label_w - 90) * t / top
        d.points.append(
            {
                "y": 4 + k * row,
                "w": w,
                "label": c.name,
                "value": format_time(t),
                "current": c.key == current,
                "title": f"{c.name}: {format_time(t)} predicted for the ANE layers (program overhead included)",
            }
        )
    return d


def _counts(rows, key) -> list:
    """``[(value, rows with it)]`` of ``rows``' ``key``, the commonest first."""
    out: dict = {}
    for r in rows:
        out[r[key]] = out.get(r[key], 0) + 1
    return sorted(out.items(), key=lambda kv: -kv[1])


def _node_title(r, device) -> str:
    text = f"{r.layer.name} ({r.layer.op}): Core ML {device}; fastane {r.placement}"
    if r.reason:
        text += f" ({r.reason})"
    if r.estimate is not None:
        text += f"; {format_time(r.estimate.time_s)}"
    if r.error:
        text += f"; error {format_error(r.error)}"
    return text


def clip(text: str, n: int) -> str:
    """``text``, cut to ``n`` characters with an ellipsis (a drawing's label)."""
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _decade(k: int) -> str:
    return f"{10.0**k:g}" if -3 <= k <= 4 else f"1e{k}"
