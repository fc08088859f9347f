"""Compare two roofline reports: ``fastane roofline ... --compare old.json``.

A user keeps a model's predicted ANE latency in their own CI: store the JSON of
``fastane roofline ... --json`` once, and later runs compare against it.  Workloads are
matched by name and layers by name (in order), built-in networks and model files alike; every change of predicted time and of
traffic is listed, and a workload *regresses* when its predicted time or its DRAM
traffic grew by more than ``fail_above`` percent.  The model is deterministic, so any
change is real: a new lowering, a new time model, or a changed workload.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["METRICS", "SCHEMAS", "load", "compare", "format_comparison"]

#: the report versions :func:`load` reads: 1 (no ``schema`` key), 2 (``"fastane.roofline/2"``:
#: model files too, in the same shape as the built-in networks)
SCHEMAS = ("fastane.roofline/1", "fastane.roofline/2")

#: the compared fields of a workload's ``total`` and of each layer, with a short label;
#: the first two judge a regression
METRICS = (
    ("time_s", "time"),
    ("dram_bytes", "DRAM B"),
    ("kernel_dma_bytes", "KernelDMA B"),
    ("tile_dma_src_bytes", "TileDMA src B"),
    ("tile_dma_dst_bytes", "TileDMA dst B"),
    ("tasks", "tasks"),
)
_JUDGED = {"time_s", "dram_bytes"}


def load(path) -> dict:
    """Read a ``fastane roofline --json`` report; precise errors for anything else."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a JSON file ({e})") from None
    if isinstance(data, dict) and "models" in data and "workloads" not in data:
        raise ValueError(
            f"{p}: a model report of an older fastane (a 'models' list): write it again with "
            f"`fastane roofline MODEL --json` (schema {SCHEMAS[-1]})"
        )
    if isinstance(data, dict) and data.get("schema", SCHEMAS[0]) not in SCHEMAS:
        raise ValueError(
            f"{p}: schema {data['schema']!r} is not one this fastane reads ({', '.join(SCHEMAS)})"
        )
    workloads = data.get("workloads") if isinstance(data, dict) else None
    if not isinstance(workloads, list) or not all(
        isinstance(w, dict) and isinstance(w.get("name"), str) and isinstance(w.get("total"), dict)
        for w in workloads
    ):
        raise ValueError(
            f"{p}: not a fastane roofline report (expected the output of "
            "`fastane roofline --json`: a 'workloads' list with 'name' and 'total')"
        )
    return data


def _num(d: dict, key: str):
    v = d.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _changes(old: dict, new: dict, fail_above: float) -> list[dict]:
    rows = []
    for key, label in METRICS:
        o, n = _num(old, key), _num(new, key)
        if o is None or n is None:
            continue
        pct = ((n - o) / o * 100.0) if o else (0.0 if n == 0 else float("inf"))
        rows.append(
            {
                "metric": key,
                "label": label,
                "old": o,
                "new": n,
                "change_pct": pct,
                "regressed": key in _JUDGED and pct > fail_above,
            }
        )
    return rows


def compare(old: dict, new: dict, fail_above: float = 0.0) -> dict:
    """Per workload: the total's changes and each layer's, and whether it regressed."""
    olds = {w["name"]: w for w in old["workloads"]}
    result = {
        "fail_above": fail_above,
        "workloads": [],
        "missing": [n for n in olds if n not in {w["name"] for w in new["workloads"]}],
    }
    for w in new["workloads"]:
        ow = olds.get(w["name"])
        if ow is None:
            result["workloads"].append(
                {"name": w["name"], "new": True, "total": [], "layers": [], "regressed": False}
            )
            continue
        total = _changes(ow["total"], w["total"], fail_above)
        olayers = {}
        for layer in ow.get("layers") or []:
            if isinstance(layer, dict):
                olayers.setdefault(layer.get("layer"), layer)
        layers = []
        for layer in w.get("layers") or []:
            ol = olayers.get(layer.get("layer"))
            if ol is None:
                layers.append({"layer": layer.get("layer"), "new": True, "changes": []})
                continue
            ch = [c for c in _changes(ol, layer, fail_above) if abs(c["change_pct"]) >= 0.005]
            if ch:
                layers.append({"layer": layer.get("layer"), "changes": ch})
        result["workloads"].append(
            {
                "name": w["name"],
                "total": total,
                "layers": layers,
                "regressed": any(c["regressed"] for c in total),
            }
        )
    result["regressed"] = any(w["regressed"] for w in result["workloads"])
    return result


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def format_comparison(result: dict) -> str:
    out = []
    for w in result["workloads"]:
        if w.get("new"):
            out.append(f"{w['name']}: new workload (not in the old report)")
            continue
        verdict = "REGRESSED" if w["regressed"] else "ok"
        out.append(f"{w['name']}: {verdict}")
        for c in w["total"]:
            flag = "  REGRESSED" if c["regressed"] else ""
            out.append(
                f"  total {c['label']:<14} {_fmt(c['old']):>12} -> {_fmt(c['new']):>12} "
                f"{c['change_pct']:+8.2f}%{flag}"
            )
        for layer in w["layers"]:
            if layer.get("new"):
                out.append(f"  layer {layer['layer']}: new")
                continue
            parts = ", ".join(f"{c['label']} {c['change_pct']:+.1f}%" for c in layer["changes"])
            out.append(f"  layer {layer['layer']}: {parts}")
    for name in result["missing"]:
        out.append(f"{name}: in the old report only")
    n_bad = sum(w["regressed"] for w in result["workloads"])
    out.append(
        f"{n_bad} workload(s) regressed: predicted time or DRAM traffic up by more than "
        f"{result['fail_above']:g}%"
    )
    return "\n".join(out)
