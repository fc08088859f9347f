"""The per-layer report of a model run (:class:`Report`, one :class:`LayerRecord` a
layer): a text table and a JSON-ready dict.  :mod:`fastane.model.run.model` builds it and
re-exports both names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ...errors import quote
from ...stats import Stats
from ..placement.compute_plan import DEVICES
from ..placement.place import Layer
from ..placement.predict import RULES

__all__ = ["Report", "LayerRecord", "ane_tasks"]


@dataclass
class LayerRecord:
    layer: Layer
    placement: str
    reason: str
    stats: Stats
    estimate: object = None  # fastane.roofline.Estimate (ANE layers)
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    error: float = 0.0
    tolerance: float = 0.0
    shapes: str = ""
    #: non-finite outputs (inf, nan) the layer made from finite inputs ("born" there),
    #: and those it passed on from non-finite inputs (inherited); see fastane.model.run.hunt
    inf_born: int = 0
    nan_born: int = 0
    nonfinite_inherited: int = 0
    #: a stats-only plan's residency: the source is the previous layer's result kept in L2 /
    #: the result is kept in L2 for the next layer (fastane.model.placement.plan.chains)
    source_in_l2: bool = False
    result_in_l2: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None or not self.error > self.tolerance

    def as_dict(self) -> dict:
        st, est = self.stats, self.estimate
        d = {
            "name": self.layer.name,
            "op": self.layer.op,
            "placement": self.placement,
            "reason": self.reason,
            "call": self.layer.call if self.placement == "ane" else "",
            "output": self.shapes,
            "tasks": st.tasks,
            "macs": st.macs,
            "dram_bytes": st.dram_bytes,
            "saturated": st.saturated,
            "lut_underflow": st.lut_underflow,
            "lut_overflow": st.lut_overflow,
            "cropped": st.cropped,
            "op_per_byte": None,
            "time_s": None,
            "bound": None,
            "max_abs_err": json_number(self.max_abs_err),
            "max_rel_err": json_number(self.max_rel_err),
            "error": json_number(self.error),
            "tolerance": self.tolerance,
            "within_tolerance": self.ok,
            "inf_born": self.inf_born,
            "nan_born": self.nan_born,
            "nonfinite_inherited": self.nonfinite_inherited,
        }
        if est is not None:
            d.update(
                op_per_byte=None if math.isinf(est.intensity) else est.intensity,
                time_s=est.time_s,
                bound=est.limiter,
            )
        return d


def ane_tasks(records) -> list:
    """The Stats of every task of the ANE layers among ``records`` (:class:`LayerRecord`), in
    order: what a report's ``total`` estimates on a chip (the program with its overhead)."""
    out: list = []
    for r in records:
        if r.placement == "ane":
            out += r.stats.tasks_detail or [r.stats]
    return out


def json_number(x):
    """``x`` as JSON holds it: NaN -> None, an infinity -> ``"inf"``."""
    return (
        None
        if x is None or (isinstance(x, float) and math.isnan(x))
        else ("inf" if isinstance(x, float) and math.isinf(x) else x)
    )


@dataclass
class Report:
    model: str
    chip: str
    layers: list
    outputs: dict  # name -> {"max_abs_err", "error"} vs the fp32 model
    first_bad: str | None
    total: object = None  # Estimate of all ANE layers (with the program overhead)
    placement: dict = field(default_factory=dict)
    #: counted from the shapes alone: no outputs, no errors
    stats_only: bool = False
    #: the run's outputs (name -> array; empty for a stats-only report)
    values: dict = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "chip": self.chip,
            "stats_only": self.stats_only,
            "layers": [r.as_dict() for r in self.layers],
            "placement": self.placement,
            "outputs": self.outputs,
            "first_layer_beyond_tolerance": self.first_bad,
            "total": None
            if self.total is None
            else {
                k: v
                for k, v in self.total.as_dict().items()
                if k in ("tasks", "macs", "dram_bytes", "time_s", "intensity", "limiter")
            },
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)

    def table(self, plan=None) -> str:
        """The report as text; with ``plan`` (a
        :class:`~fastane.model.placement.compute_plan.ComputePlan` of the same layers) a
        column of the device Core ML would likely pick per layer and the short name of the
        rule behind it (``?``: "uncertain")."""
        from ...roofline.result import format_si, format_time

        coreml = {} if plan is None else {name: ops[0] for name, ops in plan.by_layer().items()}
        col = f"{'Core ML':{_COREML_WIDTH}s} " if plan is not None else ""
        head = (
            f"{'layer':24s} {'op':28s} {'place':6s} {col}{'tasks':>5s} {'MACs':>9s} {'DRAM':>9s} "
            f"{'OP/B':>6s} {'time':>10s} {'sat':>4s} {'lut':>4s} {'max abs':>9s} {'error':>9s}"
        )
        what = (
            "counted from the shapes (stats only)"
            if self.stats_only
            else "error = max|ane - fp32| / max|fp32| of the layer on the same inputs"
        )
        lines = [
            f"model {quote(self.model, marks=False)} on {self.chip}: per layer ({what})",
            head,
            "-" * len(head),
        ]
        notes = []
        reasons: dict = {}
        for r in self.layers:
            d = r.as_dict()
            est = r.estimate
            mark = "" if r.ok else " !"
            if plan is not None:
                col = f"{_coreml_cell(coreml.get(r.layer.name)):{_COREML_WIDTH}s} "
            lines.append(
                f"{quote(d['name'], 24, marks=False)[:24]:24s} {quote(d['op'], 28, marks=False)[:28]:28s} {r.placement[:6]:6s} {col}"
                f"{d['tasks'] if r.placement == 'ane' else '-':>5} "
                f"{format_si(d['macs']) if r.placement == 'ane' else '-':>9s} "
                f"{format_si(d['dram_bytes'], 'B') if r.placement == 'ane' else '-':>9s} "
                f"{'-' if est is None or math.isinf(est.intensity) else f'{est.intensity:.1f}':>6s} "
                f"{'-' if est is None else format_time(est.time_s):>10s} "
                f"{d['saturated'] if r.placement == 'ane' else '-':>4} "
                f"{d['lut_underflow'] + d['lut_overflow'] if r.placement == 'ane' else '-':>4} "
                f"{format_error(r.max_abs_err):>9s} {format_error(r.error):>9s}{mark}"
            )
            if r.reason:
                reasons.setdefault((r.placement, r.reason), []).append(quote(d["name"], marks=False))
        lines.append("-" * len(head))
        if self.total is not None:
            lines.append(
                f"ANE total: {self.total.tasks} tasks, {format_si(self.total.macs)} MACs, "
                f"{format_si(self.total.dram_bytes, 'B')} DRAM, predicted {format_time(self.total.time_s)} "
                f"on {self.chip} (with the program overhead)"
            )
        p = self.placement
        lines.append(
            f"placement: {p.get('ane', 0)} ANE, {p.get('host', 0)} host, {p.get('layout', 0)} layout layers"
        )
        for name, o in self.outputs.items():
            lines.append(
                f"output {quote(name, marks=False)}: max abs error {format_error(o['max_abs_err'])}, error "
                f"{format_error(o['error'])} against the whole model in fp32"
            )
        born = [
            f"{quote(r.layer.name, marks=False)} ({r.inf_born} inf, {r.nan_born} nan)"
            for r in self.layers
            if r.inf_born or r.nan_born
        ]
        if born:
            lines.append("non-finite values born in (finite inputs): " + ", ".join(born))
        cropped = [
            f"{quote(r.layer.name, marks=False)} ({r.stats.cropped})" for r in self.layers if r.stats.cropped
        ]
        if cropped:
            lines.append(
                f"values read out as +-inf by the crop path of a slice with a last-axis offset on {self.chip}: "
                + ", ".join(cropped)
            )
        if self.stats_only:
            lines.append("stats only: counted from the shapes, nothing computed (no errors)")
        else:
            lines.append("first layer beyond its tolerance: " + (self.first_bad or "none"))
        for (place_, why), names in reasons.items():
            notes.append(f"  {place_}: {why}: {', '.join(names)}")
        if notes:
            lines.append("placement reasons:")
            lines += notes
        return "\n".join(lines)


#: the width of the report's Core ML column: a device, "?", a space and the longest rule name
#: ("ane? fp32 compute precision")
_COREML_WIDTH = max(map(len, DEVICES)) + len("? ") + max(map(len, RULES))


def _coreml_cell(op) -> str:
    """A planned op's device (``?`` when "uncertain") and rule, for the Core ML column."""
    if op is None:
        return "-"
    return f"{op.preferred}{'?' if op.confidence == 'uncertain' else ''} {op.rule}".strip()[:_COREML_WIDTH]


def format_error(x) -> str:
    """An error for a table: ``-`` for None or NaN, ``inf``, ``0``, else 3 significant digits."""
    if isinstance(x, str):  # "inf" from json_number (an output that overflowed)
        return x
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.2e}" if x else "0"
