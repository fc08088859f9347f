"""What an evaluation records of each input (:func:`score`: one row) and adds up over a
dataset (:class:`Aggregate`).

The aggregate is the same whatever order the rows arrive in, so that a run spread over many
processes gives the single-process result bit for bit: it holds integer counts, maxima, and
the worst inputs kept as the first :attr:`Aggregate.worst` of a total order (error
descending, then input index); no float is summed.

A row's task metric (:class:`Task`) reads one output (``target``; default the model's first
float output):

* ``classify`` -- top-1: the arg-max over ``class_axis`` of the ANE output and of the
  reference; they agree or not, and each is correct or not when a label is given;
* ``sequence`` -- the arg-max per position (an output ``[1, T, C]``): how many of the T
  positions agree; the input agrees when all do;
* ``regress`` -- no class: the largest absolute and normalised error only.

``auto`` picks ``classify`` for an output with one axis of more than one value after a
leading batch axis of 1, ``sequence`` for two, ``regress`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, quote
from ..run.model import array_errors
from ..run.report import json_number

__all__ = ["Task", "TASKS", "score", "Aggregate", "ERROR_BINS", "error_bin", "ROW_COLUMNS"]

TASKS = ("auto", "classify", "sequence", "regress")

#: upper edges of the per-layer error histogram (the normalised error of
#: :mod:`fastane.model.run.model`); bin 0 holds exact results, the last one non-finite errors
ERROR_EDGES = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
ERROR_BINS = ("0", "<1e-5", "<1e-4", "<1e-3", "<1e-2", "<0.1", "<1", ">=1", "inf/nan")

#: the columns of a row in a results file (the per-layer detail stays in the partial file)
ROW_COLUMNS = (
    "index",
    "id",
    "label",
    "ane",
    "ref",
    "agree",
    "ane_correct",
    "ref_correct",
    "positions",
    "positions_agree",
    "max_abs_err",
    "error",
    "nonfinite",
    "saturated",
    "lut_underflow",
    "lut_overflow",
    "cropped",
    "first_beyond",
)


def error_bin(e: float) -> int:
    """The histogram bin (:data:`ERROR_BINS`) of a normalised error."""
    if not math.isfinite(e):
        return len(ERROR_BINS) - 1
    if e == 0:
        return 0
    for i, edge in enumerate(ERROR_EDGES):
        if e < edge:
            return i + 1
    return len(ERROR_EDGES) + 1


@dataclass(frozen=True)
class Task:
    """The task metric of an evaluation (module docs)."""

    kind: str = "auto"
    target: str | None = None
    class_axis: int = -1

    def __post_init__(self):
        if self.kind not in TASKS:
            raise ModelError(f"task {self.kind!r}: expected one of {', '.join(TASKS)}")

    def output(self, outputs: dict) -> str:
        """The output the metric reads."""
        if self.target is not None:
            if self.target not in outputs:
                raise ModelError(
                    f"target output {quote(self.target)}: the model's outputs are {', '.join(map(quote, outputs))}"
                )
            return self.target
        for name, v in outputs.items():
            if np.asarray(v).dtype.kind == "f":
                return name
        raise ModelError("the model has no float output: name the one to evaluate (target)")

    def resolve(self, y: np.ndarray) -> str:
        if self.kind != "auto":
            return self.kind
        shape = y.shape[1:] if y.ndim and y.shape[0] == 1 else y.shape
        if len(shape) == 1 and shape[0] > 1:
            return "classify"
        if len(shape) == 2 and shape[-1] > 1:
            return "sequence"
        return "regress"


def score(index: int, ident: str, label, outs: dict, ref: dict, records: list, task: Task) -> dict:
    """One input's row: the task metric of ``outs`` (the ANE run's outputs) against ``ref``
    (the float32 reference), the run's event counts, and ``layers``: per layer whose result
    was compared or that counted an event, ``[position, name, op, placement, error, beyond,
    saturated, lut events, inf/nan born]``."""
    name = task.output(outs)
    y = np.asarray(outs[name], np.float32)
    r = np.asarray(ref[name], np.float32)
    kind = task.resolve(y)
    row = dict.fromkeys(ROW_COLUMNS)
    row.update(index=index, id=ident, label=None if label is None else int(label))
    if kind in ("classify", "sequence"):
        try:
            ya = np.argmax(np.nan_to_num(y, nan=-np.inf), axis=task.class_axis)
            ra = np.argmax(r, axis=task.class_axis)
        except (ValueError, IndexError):  # numpy's AxisError: the class axis is not one of the output's
            raise ModelError(f"class axis {task.class_axis} of output {quote(name)} {y.shape}") from None
        if kind == "classify":
            if ya.size != 1:
                raise ModelError(
                    f"output {quote(name)} {y.shape} holds {ya.size} predictions: task 'sequence'"
                )
            row.update(ane=int(ya.reshape(-1)[0]), ref=int(ra.reshape(-1)[0]))
            classes = y.shape[task.class_axis]
            if label is not None and not 0 <= int(label) < classes:
                raise ModelError(f"label {int(label)}: output {quote(name)} has {classes} classes")
            row["agree"] = row["ane"] == row["ref"]
            if label is not None:
                row.update(ane_correct=row["ane"] == int(label), ref_correct=row["ref"] == int(label))
        else:
            same = int((ya == ra).sum())
            row.update(positions=int(ya.size), positions_agree=same, agree=same == ya.size)
    mabs, err = 0.0, 0.0
    for n, v in outs.items():
        if np.asarray(v).dtype.kind == "f":
            m, _, e = array_errors(v, ref[n])
            mabs, err = max(mabs, m), max(err, e)
    row.update(
        max_abs_err=mabs,
        error=err,
        nonfinite=int(
            sum(
                int((~np.isfinite(np.asarray(v))).sum())
                for v in outs.values()
                if np.asarray(v).dtype.kind == "f"
            )
        ),
    )
    layers, totals = [], [0, 0, 0, 0]
    first = ""
    for pos, rec in enumerate(records):
        st = rec.stats
        events = (st.saturated, st.lut_underflow + st.lut_overflow, rec.inf_born + rec.nan_born)
        totals = [
            a + b for a, b in zip(totals, (st.saturated, st.lut_underflow, st.lut_overflow, st.cropped))
        ]
        # compared: the ANE's layers, and the data movement the chip changed (a slice's crop
        # path); a host layer's record holds no comparison
        compared = rec.placement == "ane" or st.cropped > 0
        e = float(rec.error) if compared and rec.error is not None else None
        if e is None and not any(events):
            continue
        beyond = not rec.ok
        if beyond and not first:
            first = rec.layer.name
        layers.append([pos, rec.layer.name, rec.layer.op, rec.placement, e, beyond, *events])
    row.update(
        saturated=totals[0],
        lut_underflow=totals[1],
        lut_overflow=totals[2],
        cropped=totals[3],
        first_beyond=first,
    )
    row["layers"] = layers
    return row


class Aggregate:
    """Counts over the rows :meth:`add` is given, independent of their order (module docs)."""

    def __init__(self, worst: int = 5):
        self.worst = worst
        self.n = 0
        self.kinds: set = set()
        self.counts = dict.fromkeys(
            (
                "agree",
                "compared",
                "labelled",
                "ane_correct",
                "ref_correct",
                "nonfinite",
                "saturated",
                "lut",
                "beyond",
                "positions",
                "positions_agree",
            ),
            0,
        )
        self.changed: list = []  # (index, id, ane, ref, label)
        self.worst_inputs: list = []  # (-error, index, id)
        self.max_error = 0.0
        self.layers: dict = {}  # name -> dict

    @staticmethod
    def _keep(items: list, item, k: int) -> list:
        items.append(item)
        items.sort()
        del items[k:]
        return items

    def add(self, row: dict) -> None:
        c = self.counts
        self.n += 1
        if row["agree"] is not None:
            c["compared"] += 1
            c["agree"] += bool(row["agree"])
            if not row["agree"]:
                self.changed.append((row["index"], row["id"], row["ane"], row["ref"], row["label"]))
        if row["positions"] is not None:
            c["positions"] += row["positions"]
            c["positions_agree"] += row["positions_agree"]
        if row["ane_correct"] is not None:
            c["labelled"] += 1
            c["ane_correct"] += bool(row["ane_correct"])
            c["ref_correct"] += bool(row["ref_correct"])
        c["nonfinite"] += row["nonfinite"] > 0
        c["saturated"] += row["saturated"] > 0
        c["lut"] += row["lut_underflow"] + row["lut_overflow"] > 0
        c["beyond"] += bool(row["first_beyond"])
        err = row["error"]
        self.max_error = _max(self.max_error, err)
        self._keep(self.worst_inputs, (_neg(err), row["index"], row["id"], err), self.worst)
        for pos, name, op, placement, e, beyond, sat, lut, born in row["layers"]:
            L = self.layers.get(name)
            if L is None:
                L = self.layers[name] = {
                    "position": pos,
                    "name": name,
                    "op": op,
                    "placement": placement,
                    "inputs": 0,
                    "beyond": 0,
                    "first": 0,
                    "saturated_inputs": 0,
                    "saturated": 0,
                    "lut_inputs": 0,
                    "lut": 0,
                    "nonfinite_born_inputs": 0,
                    "max_error": 0.0,
                    "histogram": [0] * len(ERROR_BINS),
                    "worst": [],
                }
            L["position"] = min(L["position"], pos)
            if e is not None:
                L["inputs"] += 1
                L["histogram"][error_bin(e)] += 1
                L["max_error"] = _max(L["max_error"], e)
                self._keep(L["worst"], (_neg(e), row["index"], row["id"], e), self.worst)
            L["beyond"] += bool(beyond)
            L["first"] += name == row["first_beyond"]
            L["saturated_inputs"] += sat > 0
            L["saturated"] += sat
            L["lut_inputs"] += lut > 0
            L["lut"] += lut
            L["nonfinite_born_inputs"] += born > 0

    def as_dict(self) -> dict:
        """The aggregate, JSON-ready (non-finite errors as :func:`json_number` writes them)."""
        c = self.counts
        out = {"inputs": self.n}
        out["metric"] = "sequence" if c["positions"] else "classify" if c["compared"] else "regress"
        if c["compared"]:
            out["agreement"] = {
                "agree": c["agree"],
                "of": c["compared"],
                "fraction": c["agree"] / c["compared"],
            }
        if c["positions"]:
            out["positions"] = {
                "agree": c["positions_agree"],
                "of": c["positions"],
                "fraction": c["positions_agree"] / c["positions"],
            }
        if c["labelled"]:
            out["accuracy"] = {
                "labelled": c["labelled"],
                "reference": c["ref_correct"] / c["labelled"],
                "ane": c["ane_correct"] / c["labelled"],
                "reference_correct": c["ref_correct"],
                "ane_correct": c["ane_correct"],
            }
        out["changed"] = [
            {"index": i, "id": ident, "ane": a, "ref": r, "label": lab}
            for i, ident, a, r, lab in sorted(self.changed)
        ]
        out["inputs_with"] = {
            "nonfinite_outputs": c["nonfinite"],
            "saturation": c["saturated"],
            "lut_range_events": c["lut"],
            "a_layer_beyond_tolerance": c["beyond"],
        }
        out["max_error"] = json_number(self.max_error)
        out["worst_inputs"] = _worst(self.worst_inputs)
        out["error_bins"] = list(ERROR_BINS)
        layers = []
        for L in sorted(self.layers.values(), key=lambda d: (d["position"], d["name"])):
            d = {k: v for k, v in L.items() if k != "position"}
            d["max_error"] = json_number(L["max_error"])
            d["worst"] = _worst(L["worst"])
            layers.append(d)
        out["layers"] = layers
        return out


def _worst(items: list) -> list:
    return [{"index": i, "id": ident, "error": json_number(e)} for _, i, ident, e in items]


def _neg(e: float) -> float:
    """The sort key of an error, largest first (NaN first of all: a NaN result is the worst)."""
    return -math.inf if math.isnan(e) else -e


def _max(a: float, b: float) -> float:
    return b if (math.isnan(b) or b > a) and not math.isnan(a) else a
