"""An :class:`~fastane.model.evaluate.Evaluation` as text (``fastane eval``'s output)."""

from __future__ import annotations

from ...errors import quote
from ..run.report import format_error

__all__ = ["summary_text", "CHANGED_SHOWN"]

#: the changed inputs the text names (all of them are in the JSON and the results file)
CHANGED_SHOWN = 10


def _pct(k: int, n: int) -> str:
    return f"{k} of {n} ({100 * k / n:.2f}%)"


def summary_text(ev, layers: int = 15) -> str:
    s, run = ev.summary, ev.run
    out = [
        f"{s['inputs']} inputs of {quote(s['data'])} through {quote(s['model'])} as on {s['chip']} "
        f"(reference: {s['reference']} float32; metric: {s['metric']})"
    ]
    if "agreement" in s:
        a = s["agreement"]
        out.append(f"top-1 agreement with the reference: {_pct(a['agree'], a['of'])}")
    if "positions" in s:
        p = s["positions"]
        out.append(f"arg-max agreement per position: {_pct(p['agree'], p['of'])}")
    if "accuracy" in s:
        acc = s["accuracy"]
        out.append(
            f"accuracy on {acc['labelled']} labelled inputs: float32 {100 * acc['reference']:.2f}% "
            f"({acc['reference_correct']}), ANE {100 * acc['ane']:.2f}% ({acc['ane_correct']})"
        )
    changed = s["changed"]
    if "agreement" in s or "positions" in s:
        if changed:
            shown = ", ".join(
                f"{quote(c['id'])}" + (f" ({c['ref']} -> {c['ane']})" if c["ane"] is not None else "")
                for c in changed[:CHANGED_SHOWN]
            )
            more = f" and {len(changed) - CHANGED_SHOWN} more" if len(changed) > CHANGED_SHOWN else ""
            out.append(f"changed on the ANE: {len(changed)} inputs: {shown}{more}")
        else:
            out.append("changed on the ANE: none")
    w = s["inputs_with"]
    out.append(
        f"largest output error: {format_error(s['max_error'])}; inputs with saturation {w['saturation']}, "
        f"LUT range events {w['lut_range_events']}, non-finite outputs {w['nonfinite_outputs']}, "
        f"a layer beyond tolerance {w['a_layer_beyond_tolerance']}"
    )
    rows = sorted(
        (L for L in s["layers"] if L["beyond"] or L["saturated"] or L["lut"] or L["nonfinite_born_inputs"]),
        key=lambda L: (-L["beyond"], -L["saturated_inputs"], -L["lut_inputs"]),
    )[:layers]
    if rows:
        out.append("")
        out.append(f"layers with inputs beyond tolerance or events (the {len(rows)} most):")
        head = ("layer", "op", "beyond", "first", "saturated", "LUT", "max error", "worst input")
        table = [head] + [
            (
                quote(L["name"], 40, marks=False),
                L["op"],
                str(L["beyond"]),
                str(L["first"]),
                str(L["saturated_inputs"]),
                str(L["lut_inputs"]),
                format_error(L["max_error"]),
                quote(L["worst"][0]["id"], 30, marks=False) if L["worst"] else "",
            )
            for L in rows
        ]
        widths = [max(len(r[i]) for r in table) for i in range(len(head))]
        out += ["  " + "  ".join(c.ljust(wd) for c, wd in zip(r, widths)).rstrip() for r in table]
    who = (
        f"{run['workers']} worker(s)"
        if run.get("scheduler") is None
        else f"the cluster at {run['scheduler']}"
    )
    extra = []
    if run.get("resumed_inputs"):
        extra.append(f"{run['resumed_inputs']} resumed")
    if run.get("retried_inputs"):
        extra.append(f"{run['retried_inputs']} retried after a worker died")
    secs = run.get("seconds") or 0.0
    rate = s["inputs"] / secs if secs else 0.0
    out.append("")
    out.append(f"{secs:.1f} s on {who} ({rate:.1f} inputs/s)" + (f"; {', '.join(extra)}" if extra else ""))
    return "\n".join(out)
