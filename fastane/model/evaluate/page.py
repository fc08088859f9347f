"""One self-contained HTML page of a dataset evaluation (:meth:`Evaluation.html
<fastane.model.evaluate.Evaluation.html>`, ``fastane eval --html``).

The page shows

* the summary: model, dataset, chip, reference, metric, the agreement with the float32
  reference, the accuracy of float32 and of the ANE on the labelled inputs, the largest output
  error and the inputs with events, and how the run went (workers, seconds, retried inputs);
* the inputs whose answer changed on the ANE (id, the reference's answer, the ANE's, the label);
* the layer table: per layer the op, fastane's placement, the inputs whose result was compared,
  those beyond tolerance, those where the layer was the first beyond, the inputs with
  saturation and with LUT range events, the largest error and the worst inputs;
* a heat map of the layers' error histograms (:func:`heatmap_svg`): a row per layer in model
  order, a column per bin of :data:`~fastane.model.evaluate.metrics.ERROR_BINS`, each cell
  shaded by its share of the layer's compared inputs, its count in its tooltip.

It is rendered by the report page's machinery (:func:`fastane.model.run.page.render_page`: the
same layout and style sheet, inlined) from ``templates/eval.html.j2``; the heat map is inline
SVG.  Nothing is fetched: the page contains no URL.  Needs Jinja2 (the ``report`` extra).
"""

from __future__ import annotations

import os

from ...errors import quote
from ...roofline import chips as _chips
from ..run.page import Drawing, clip, render_page
from ..run.report import format_error

__all__ = ["render", "page_data", "heatmap_svg", "CHANGED_ROWS"]

#: the changed inputs the page lists (all of them are in the JSON and the results file)
CHANGED_ROWS = 1000
#: the heat map's cell size and the room of its bin labels (px)
CELL_W, CELL_H, HEAD_H = 58, 18, 22
#: the bins from which a layer's error is drawn as bad (>= 1, non-finite)
BAD_BIN = 7


def heatmap_svg(layers: list, bins: list) -> Drawing:
    """The heat map of ``layers`` (the summary's, in model order) over ``bins``: ``points`` are
    the cells (row by row), each shaded by its count's share of the layer's compared inputs
    (``inputs``; no share where none was compared), ``labels`` the layer names and the bins."""
    longest = max((len(clip(L["name"], 32)) for L in layers), default=8)
    left = 12 + 6.4 * max(longest, 8)
    d = Drawing(
        left + CELL_W * len(bins) + 8,
        HEAD_H + CELL_H * len(layers) + 4,
        node_w=CELL_W,
        node_h=CELL_H,
        left=left,
    )
    for j, b in enumerate(bins):
        d.labels.append(
            {
                "x": left + (j + 0.5) * CELL_W,
                "y": HEAD_H - 7,
                "text": b,
                "anchor": "middle",
                "title": f"normalised error {b}",
            }
        )
    for i, L in enumerate(layers):
        y = HEAD_H + i * CELL_H
        d.labels.append(
            {
                "x": left - 6,
                "y": y + CELL_H - 5,
                "text": clip(L["name"], 32),
                "anchor": "end",
                "title": L["name"],
            }
        )
        n = L["inputs"]
        for j, (b, count) in enumerate(zip(bins, L["histogram"])):
            share = count / n if n else 0.0
            d.points.append(
                {
                    "x": left + j * CELL_W,
                    "y": y,
                    "count": count,
                    "share": share,
                    # a count however small stays visible
                    "opacity": 0.0 if not count else 0.08 + 0.92 * share,
                    "dark": share > 0.5,
                    "bad": j >= BAD_BIN,
                    "title": f"{L['name']}: {count} of {n} inputs ({100 * share:.1f}%) with error {b}"
                    if n
                    else f"{L['name']}: no input compared",
                }
            )
    return d


def page_data(ev) -> dict:
    """What the template shows (plain values) of ``ev`` (an :class:`~fastane.model.evaluate.Evaluation`)."""
    s, run = ev.summary, ev.run
    chip = _chips.get(s["chip"])
    cards = []
    if "agreement" in s:
        a = s["agreement"]
        cards.append(
            ("top-1 agreement with float32", _pct(a["agree"], a["of"]), f"{a['agree']} of {a['of']} inputs")
        )
    if "positions" in s:
        p = s["positions"]
        cards.append(
            ("arg-max agreement per position", _pct(p["agree"], p["of"]), f"{p['agree']} of {p['of']}")
        )
    acc = s.get("accuracy")
    w = s["inputs_with"]
    secs = run.get("seconds") or 0.0
    who = (
        f"{run.get('workers')} worker{'s' if run.get('workers') != 1 else ''}"
        if run.get("scheduler") is None
        else f"the cluster at {run['scheduler']}"
    )
    return {
        "title": f"fastane eval: {os.path.basename(str(s['model']))}",
        "model": s["model"],
        "data": s["data"],
        "chip": chip.name,
        "reference": s["reference"],
        "metric": s["metric"],
        "inputs": s["inputs"],
        "cards": cards,
        "accuracy": None
        if acc is None
        else {
            "labelled": acc["labelled"],
            "reference": f"{100 * acc['reference']:.2f}%",
            "ane": f"{100 * acc['ane']:.2f}%",
            "reference_correct": acc["reference_correct"],
            "ane_correct": acc["ane_correct"],
            "lost": acc["reference_correct"] - acc["ane_correct"],
        },
        "max_error": format_error(s["max_error"]),
        "inputs_with": [
            ("saturation", w["saturation"]),
            ("LUT range events", w["lut_range_events"]),
            ("non-finite outputs", w["nonfinite_outputs"]),
            ("a layer beyond tolerance", w["a_layer_beyond_tolerance"]),
        ],
        "run": {
            "who": who,
            "seconds": f"{secs:.1f} s",
            "rate": f"{s['inputs'] / secs:.1f} inputs/s" if secs else "",
            "retried": run.get("retried_inputs") or 0,
            "resumed": run.get("resumed_inputs") or 0,
        },
        "answers": "agreement" in s,
        "changed": [
            {k: "-" if c[k] is None else c[k] for k in ("index", "id", "ref", "ane", "label")}
            for c in s["changed"][:CHANGED_ROWS]
        ],
        "changed_total": len(s["changed"]),
        "layers": [
            {
                "name": L["name"],
                "op": L["op"],
                "placement": L["placement"],
                "inputs": L["inputs"],
                "beyond": L["beyond"],
                "first": L["first"],
                "saturated_inputs": L["saturated_inputs"],
                "lut_inputs": L["lut_inputs"],
                "max_error": format_error(L["max_error"]),
                "worst": ", ".join(quote(x["id"], 30, marks=False) for x in L["worst"]),
            }
            for L in s["layers"]
        ],
        "bins": s["error_bins"],
        "heatmap": heatmap_svg(s["layers"], s["error_bins"]) if s["layers"] else None,
    }


def render(ev) -> str:
    """The page (a str of HTML) of ``ev`` (:func:`page_data`).  Needs Jinja2 (the ``report`` extra)."""
    return render_page("eval.html.j2", __package__, **page_data(ev))


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.2f}%"
