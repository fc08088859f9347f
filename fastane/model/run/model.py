"""A loaded model: run it on the emulated ANE, compare it with fp32, report per layer.

    >>> m = fastane.load_model("net.onnx")
    >>> outs = m({"x": x})                    # name -> np.float16 (float outputs)
    >>> rep = m.report({"x": x}, chip="m1")   # per layer: placement, tasks, time, error
    >>> print(rep.table()); rep.as_dict()

A model runs *as on a chip* (``chip=``: of :func:`fastane.load_model`, the model's default;
of a call or a report, that run's; default the M1): the chip's time model, and the numerics
that differ between ANE generations, which its generation's record in
:mod:`fastane.roofline.chips` holds (:mod:`.movement`: the fixed-point crop path of a slice).

Each call binds the graph to the inputs' shapes (:func:`fastane.model.graph.bind`, cached
per shape), places it (:func:`fastane.model.placement.place.place`) and runs the layers in order.
ANE layers run through fastane's public entry points; their device Stats
(:func:`fastane.last_stats`) give tasks, MACs and DMA bytes, and the roofline time model
(:func:`fastane.roofline.estimate`, one layer of a program: no program overhead) the
predicted time.  Saturations and LUT range events are counted per layer and surfaced once
per run through :func:`fastane.errstate` (saturation warns by default).

The per-layer error compares the layer's ANE result with the fp32 reference *of the same
layer on the same inputs* (the fp16 tensors the ANE run produced, widened to float32, and
the model's original fp32 weights): it isolates what each layer adds, where a whole-model
comparison only shows the sum.  ``error`` is ``max |y - ref| / max(max |ref|, 2^-14)``;
the first layer whose error exceeds the tolerance of its class (:data:`TOLERANCE`) is named.
"""

from __future__ import annotations

import dataclasses
import operator
import sys

import numpy as np

from ...errors import LeavesANEWarning, ModelError, quote, quote_names
from ...operands import fp16_operand
from ...errstate import errstate, report_events
from ...roofline import chips as _chips
from ...stats import Stats, last_stats
from ..graph import Bound, Graph, TensorType, bind, evaluate
from ..ops import host_eval
from ..placement.place import Layer, place
from .movement import crop, crop_limit, takes_crop_path
from .report import LayerRecord, Report, ane_tasks, json_number

__all__ = ["Model", "Report", "LayerRecord", "TOLERANCE", "array_errors"]

#: default per-layer error tolerance (``error`` above) by op class: one fp16 rounding of the
#: exact result for exact ops (2^-10 leaves room for 1 ulp), the fp16 operand rounding and
#: the Q16.16 + readout rounding for MAC ops, the tables' measured errors (docs/lut.md:
#: gelu 6.2e-3, log 1.3e-2, selu 1.2e-2 abs) for table ops
TOLERANCE = {"exact": 2.0**-10, "layout": 0.0, "mac": 1e-2, "table": 2e-2, "host": 0.0}


def array_errors(y, ref, chunk: int = 1 << 20):
    """(max abs, max rel over |ref| >= 2^-14, normalised error) of ``y`` against ``ref``,
    in float64 ``chunk`` elements at a time (the temporaries stay small beside the
    tensors: :data:`fastane.model.budget.MAX_LAYER_BYTES`)."""
    y = np.asarray(y)
    ref = np.asarray(ref)
    if y.shape != ref.shape or y.size == 0:
        return 0.0, 0.0, 0.0
    y, ref = y.reshape(-1), ref.reshape(-1)
    mabs, rel, top = 0.0, 0.0, 0.0
    for i in range(0, y.size, chunk):
        yc = y[i : i + chunk].astype(np.float64)
        rc = ref[i : i + chunk].astype(np.float64)
        same = (yc == rc) | (np.isnan(yc) & np.isnan(rc))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(same, 0.0, np.abs(yc - rc))
        diff = np.where(np.isnan(diff), np.inf, diff)
        mabs = max(mabs, float(diff.max()))
        big = np.abs(rc) >= 2.0**-14
        if big.any():
            rel = max(rel, float((diff[big] / np.abs(rc[big])).max()))
        finite = np.isfinite(rc)
        if finite.any():
            top = max(top, float(np.abs(rc[finite]).max()))
    return mabs, rel, mabs / max(top, 2.0**-14)


class Model:
    """A model graph ready to run as on ``chip`` (see the module docs)."""

    def __init__(self, graph: Graph, chip="m1"):
        self.graph = graph
        #: the chip a run is as on where the call names none (a
        #: :class:`~fastane.roofline.chips.Chip`)
        self.chip = _chips.get(chip)
        self._cache: dict = {}

    @property
    def name(self) -> str:
        return self.graph.name

    @property
    def inputs(self) -> dict:
        """name -> :class:`~fastane.model.graph.TensorType` (symbolic dimensions as str)."""
        return dict(self.graph.inputs)

    @property
    def outputs(self) -> list:
        return list(self.graph.outputs)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {t}" for n, t in self.graph.inputs.items())
        return f"<fastane Model {quote(self.name)} ({self.graph.origin}): {len(self.graph.nodes)} nodes; inputs {ins}>"

    def freeze(self, values: dict) -> "Model":
        """A copy of the model with the inputs in ``values`` (name -> array) made constants:
        weights, bounds or shapes a graph takes as inputs become compile-time constants, as
        converting the model for the ANE with those values would make them."""
        arrays = self._arrays_partial(values)
        g = self.graph
        inputs = {k: t for k, t in g.inputs.items() if k not in arrays}
        consts = dict(g.consts)
        consts.update(arrays)
        frozen = dataclasses.replace(
            g,
            inputs=inputs,
            outputs=list(g.outputs),
            nodes=list(g.nodes),
            consts=consts,
            default_shapes={k: v for k, v in g.default_shapes.items() if k in inputs},
            allowed_shapes={k: v for k, v in g.allowed_shapes.items() if k in inputs},
        )
        return Model(frozen, self.chip)

    def _arrays_partial(self, values: dict) -> dict:
        out = {}
        for name, v in values.items():
            if name not in self.graph.inputs:
                raise ModelError(
                    f"unknown input {quote(name)}; the model's inputs are {quote_names(self.graph.inputs)}"
                )
            want = self.graph.inputs[name]
            arr = _array(name, v)
            if arr.dtype != np.dtype(want.dtype):
                raise ModelError(
                    f"input {quote(name)}: expected dtype {np.dtype(want.dtype).name}, got {arr.dtype.name}"
                )
            if len(arr.shape) != len(want.shape) or any(
                isinstance(d, int) and d != g for d, g in zip(want.shape, arr.shape)
            ):
                raise ModelError(f"input {quote(name)}: expected shape {want}, got {arr.shape}")
            out[name] = np.asarray(arr, order="C")
        return out

    # -------------------------------------------------------------- binding
    def _need_weights(self, what: str) -> None:
        if not self.graph.weights:
            raise ModelError(
                f"{what}: model {quote(self.name)} was loaded without its weights "
                f"(weights=False); only report(shapes, stats_only=True) works"
            )

    def _arrays(self, inputs) -> dict:
        if not isinstance(inputs, dict):
            if len(self.graph.inputs) != 1:
                raise ModelError(
                    f"the model has {len(self.graph.inputs)} inputs "
                    f"({', '.join(self.graph.inputs)}): pass a dict name -> array"
                )
            inputs = {next(iter(self.graph.inputs)): inputs}
        out = {}
        for name, v in inputs.items():
            if name not in self.graph.inputs:
                raise ModelError(
                    f"unknown input {quote(name)}; the model's inputs are {quote_names(self.graph.inputs)}"
                )
            arr = _array(name, v)
            want = np.dtype(self.graph.inputs[name].dtype)
            if arr.dtype != want:
                if want.kind == "f" and arr.dtype.kind == "f":
                    arr = arr.astype(want)  # a float array for a float input
                else:
                    raise ModelError(f"input {quote(name)}: expected dtype {want.name}, got {arr.dtype.name}")
            out[name] = arr
        for name in self.graph.states:  # a state not given starts at zeros, as Core ML's makeState
            if name not in out:
                t = self.graph.inputs[name]
                out[name] = np.zeros(t.shape, t.dtype)
        for name in self.graph.inputs:
            if name not in out:
                raise ModelError(f"missing input {quote(name)} (expected {self.graph.inputs[name]})")
        return out

    def bind(self, shapes: dict) -> tuple:
        """``(Bound, layers)`` for ``shapes`` (name -> shape tuple; a state input not named
        has its declared shape), cached."""
        shapes = {**{k: self.graph.inputs[k].shape for k in self.graph.states}, **shapes}
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        if key not in self._cache:
            types = {
                k: TensorType(self.graph.inputs[k].dtype, tuple(int(d) for d in v)) for k, v in shapes.items()
            }
            bound = bind(self.graph, types)
            self._cache[key] = (bound, place(bound))
        return self._cache[key]

    def placement(self, shapes: dict) -> list:
        """The layers (:class:`~fastane.model.placement.place.Layer`) for input ``shapes``."""
        return self.bind(shapes)[1]

    def predict_placement(self, shapes: dict, compute_units: str = "ALL") -> list:
        """``[(layer name, Prediction(unit, confidence, reason, rule)), ...]``: the compute unit
        Core ML would likely pick per layer (an estimate: :mod:`fastane.model.placement.predict`)."""
        from ..placement.predict import predict

        bound, layers = self.bind(_shapes_of(self, shapes))
        return [(l.name, p) for l, p in zip(layers, predict(layers, bound, compute_units))]

    def compute_plan(
        self,
        inputs,
        chip=None,
        compute_units: str = "ALL",
        warn: bool = True,
        report=None,
        precision=None,
        reshape_frequency: str | None = None,
    ):
        """Where Core ML would run each op for ``inputs`` (arrays or shapes) under
        ``compute_units`` on ``chip``: a
        :class:`~fastane.model.placement.compute_plan.ComputePlan` (an estimate shaped as
        Core ML's MLComputePlan); the cost weights from the layer times of ``report`` (a
        :meth:`report` of the same inputs on ``chip``), else of the stats-only report.
        ``chip`` None: the model's (:attr:`chip`).
        ``precision`` ("fp16", "fp32"): the compute precision assumed for a model that declares
        none (ONNX, NeuralNetwork; default "fp16", coremltools' default); a ValueError for an ML
        Program, whose precision is its own
        (:func:`~fastane.model.placement.compute_plan.precision_of`).
        ``reshape_frequency`` ("frequent", Core ML's default, for None, or "infrequent"): the
        ``MLOptimizationHints.reshapeFrequency`` the model is loaded with, which decides a
        range-shaped input away from its default shape.  A plan
        that leaves the ANE (:meth:`~fastane.model.placement.compute_plan.ComputePlan.leaves_ane`)
        warns with :class:`~fastane.LeavesANEWarning` unless ``warn`` is false."""
        from ...errstate import warn_user
        from ..placement.compute_plan import build, check_precision
        from ..placement.predict import DEFAULT_RESHAPE_FREQUENCY, check_reshape_frequency, check_units

        check_units(compute_units)
        check_precision(precision, self.graph)
        reshape_frequency = check_reshape_frequency(reshape_frequency or DEFAULT_RESHAPE_FREQUENCY)
        chip = self.chip if chip is None else _chips.get(chip)
        shapes = _shapes_of(self, inputs)
        bound, layers = self.bind(shapes)
        rep = report or self.report(shapes, chip, stats_only=True)
        if rep.chip != chip.key or [r.layer for r in rep.layers] != layers:
            raise ValueError("report: not a report of the same inputs on the same chip")
        secs = [None if r.estimate is None else r.estimate.time_s for r in rep.layers]
        plan = build(self.name, bound, layers, compute_units, chip, secs, precision, reshape_frequency)
        leave = plan.leaves_ane() if warn else None
        if leave is not None:
            warn_user(LeavesANEWarning, leave.message)
        return plan

    def html_report(
        self,
        inputs,
        chip=None,
        compute_units: str = "ALL",
        precision=None,
        stats_only: bool = False,
        progress=None,
        report=None,
        plan=None,
        source: str = "",
    ) -> str:
        """The report of ``inputs`` (arrays; shapes with ``stats_only``) on ``chip`` as one
        self-contained HTML page (:mod:`fastane.model.run.page`): the summary, the predicted
        time on every chip, the sortable and filterable layer table with the predicted compute
        plan for ``compute_units`` in ``precision``, the graph and the roofline.  ``report``
        and ``plan``: a :meth:`report` and a :meth:`compute_plan` of the same inputs, when the
        caller has them; ``source``: the model file's name, for the title.  Needs Jinja2 (the
        ``report`` extra)."""
        from .page import chip_times, render

        chip = self.chip if chip is None else _chips.get(chip)
        rep = report or self.report(inputs, chip, progress=progress, stats_only=stats_only)
        if plan is None:
            plan = self.compute_plan(
                _shapes_of(self, inputs), chip, compute_units, warn=False, report=rep, precision=precision
            )
        return render(rep, plan, chip_times(rep), source)

    # -------------------------------------------------------------- running
    def __call__(self, inputs, chip=None) -> dict:
        """Run the model on the emulated ANE (and the host) as on ``chip`` (None: the model's,
        :attr:`chip`); name -> output array (float outputs as ``np.float16``, as the ANE
        returns them)."""
        return self._run(inputs, compare=False, chip=chip)[0]

    def reference(self, inputs) -> dict:
        """The whole model in float32 on the host (the fp32 reference)."""
        self._need_weights("reference")
        arrays = self._arrays(inputs)
        bound, _ = self.bind({k: v.shape for k, v in arrays.items()})
        return {n: np.asarray(v) for n, v in evaluate(bound, arrays).items()}

    def _plan_report(self, inputs, chip, residency: bool = False) -> Report:
        from ...roofline.model import estimate

        from ..placement.plan import chains

        bound, layers = self.bind(_shapes_of(self, inputs))
        records = []
        # residency: the runs of MAC layers lowered as one chain (intermediates in L2)
        chained = chains(layers, set(bound.graph.outputs), bound.types) if residency else {}
        for i, layer in enumerate(layers):
            placement, reason, stats = layer.placement, layer.reason, Stats()
            in_l2 = (False, False)
            if i in chained:
                stats, *in_l2 = chained[i]
            elif placement == "ane":
                try:
                    stats = layer.plan()
                except NotImplementedError as exc:
                    placement, reason = "host", f"beyond the ANE lowering's limits: {exc}"
            rec = LayerRecord(
                layer,
                placement,
                reason,
                stats,
                max_abs_err=None,
                max_rel_err=None,
                error=None,
                tolerance=_tolerance(layer),
                shapes=" ".join(str(bound.types[o]) for o in layer.outputs),
                source_in_l2=in_l2[0],
                result_in_l2=in_l2[1],
            )
            if placement == "ane":
                rec.estimate = estimate(stats, chip, program=False, name=layer.name)
            records.append(rec)
        tasks = ane_tasks(records)
        total = estimate(tasks, chip, program=True, name=self.name) if tasks else None
        counts: dict = {}
        for r in records:
            counts[r.placement] = counts.get(r.placement, 0) + 1
        return Report(self.name, chip.key, records, {}, None, total, counts, stats_only=True)

    def _run(self, inputs, compare: bool, progress=None, observe=None, chip=None):
        self._need_weights("running the model")
        arrays = self._arrays(inputs)
        bound, layers = self.bind({k: v.shape for k, v in arrays.items()})
        chip = self.chip if chip is None else _chips.get(chip)
        limit = crop_limit(chip)
        values = dict(bound.consts)
        values.update(arrays)
        records = []
        last_use = {}  # tensor -> the last layer reading it (freed after)
        for i, layer in enumerate(layers):
            for t in layer.inputs:
                last_use[t] = i
        keep = set(bound.graph.outputs) | set(bound.consts)
        for i, layer in enumerate(layers):
            if progress:
                progress(i, len(layers))
            xs = [values[t] for t in layer.inputs]
            placement, reason, stats = layer.placement, layer.reason, Stats()
            outs = None
            if placement == "ane":
                try:
                    outs, stats = _on_ane(layer, xs)
                except NotImplementedError as exc:
                    placement, reason = "host", f"beyond the ANE lowering's limits: {exc}"
            exact = None  # a layout layer's result before the chip's data movement numerics
            if outs is None:
                outs = _on_host(layer, bound, values)
            if limit is not None and layer.kind == "layout" and layer.placement in ("layout", "ane"):
                exact, outs, crop_stats = _moved(layer, bound, outs, limit)
                stats = stats + crop_stats
            values.update(zip(layer.outputs, outs))
            # the record's output shapes are for a report (a plain call drops the records)
            shapes = " ".join(str(bound.types[o]) for o in layer.outputs) if compare or observe else ""
            rec = LayerRecord(layer, placement, reason, stats, shapes=shapes)
            if compare and (placement == "ane" or exact is not None):
                ref = exact or _on_host(
                    layer, bound, {**values, **{t: _wide(values[t]) for t in layer.inputs}}
                )
                errs = [array_errors(y, r) for y, r in zip(outs, ref)]
                rec.max_abs_err = max(e[0] for e in errs)
                rec.max_rel_err = max(e[1] for e in errs)
                rec.error = max(e[2] for e in errs)
            rec.tolerance = _tolerance(layer)
            if compare:
                from .hunt import count_nonfinite

                count_nonfinite(rec, xs, outs)
            records.append(rec)
            if observe is not None:
                observe(layer, xs, outs, rec)
            for t in layer.inputs:
                if last_use.get(t) == i and t not in keep:
                    del values[t]
        if progress:
            progress(len(layers), len(layers))
        events = Stats(
            saturated=sum(r.stats.saturated for r in records),
            # the saturations of INT8 layers: named as the integer path's (errstate.report_events)
            int8_macs=sum(r.stats.int8_macs for r in records if r.stats.saturated),
            lut_underflow=sum(r.stats.lut_underflow for r in records),
            lut_overflow=sum(r.stats.lut_overflow for r in records),
            cropped=sum(r.stats.cropped for r in records),
        )
        report_events(events, f"model {self.name} as on {chip.name} (model.report() names the layers)")
        outs = {}
        for n in bound.graph.outputs:
            v = np.asarray(values[n])
            # host outputs cross to the caller as fp16 too (the one operand rounding)
            outs[n] = fp16_operand(v, f"model {self.name}", n) if v.dtype.kind == "f" else v
        return outs, records, bound

    def report(
        self,
        inputs,
        chip=None,
        progress=None,
        stats_only: bool = False,
        observe=None,
        residency: bool = False,
        reference=None,
    ) -> Report:
        """Run the model as on ``chip`` (None: the model's, :attr:`chip`) and report per layer
        (see the module docs).  ``stats_only``:
        ``inputs`` may be shapes (name -> tuple); nothing is computed, the ANE layers'
        programs are counted from the shapes on a stats-only device (no errors then).
        ``residency`` (stats-only): runs of convolution/matmul layers that each read the
        previous one's only output are planned as one chain, each intermediate kept in L2
        where it fits (:func:`fastane.model.placement.plan.chains`, the roofline's plan);
        without it the counts are those of a computed run, which lowers layer by layer.
        ``observe(layer, inputs, outputs, record)`` is called after each layer (it may
        raise to stop the run: :func:`fastane.model.run.hunt.first_divergence`).
        ``reference``: the whole model's float32 outputs (name -> array) the outputs' errors
        are measured against, computed elsewhere (onnxruntime's); None: :meth:`reference`."""
        from ...roofline.model import estimate

        chip = self.chip if chip is None else _chips.get(chip)
        if stats_only:
            return self._plan_report(inputs, chip, residency)
        outs, records, bound = self._run(inputs, compare=True, progress=progress, observe=observe, chip=chip)
        for r in records:
            if r.placement == "ane":
                r.estimate = estimate(r.stats, chip, program=False, name=r.layer.name)
        tasks = ane_tasks(records)
        ref = self.reference(inputs) if reference is None else reference
        out_err = {}
        for n, y in outs.items():
            if y.dtype.kind == "f":
                mabs, _, err = array_errors(y, ref[n])
                out_err[n] = {"max_abs_err": json_number(mabs), "error": json_number(err)}
        first = next((r.layer.name for r in records if not r.ok), None)
        total = estimate(tasks, chip, program=True, name=self.name) if tasks else None
        counts: dict = {}
        for r in records:
            counts[r.placement] = counts.get(r.placement, 0) + 1
        return Report(self.name, chip.key, records, out_err, first, total, counts, values=outs)


def _shapes_of(model, inputs) -> dict:
    if not isinstance(inputs, dict):
        inputs = {next(iter(model.graph.inputs)): inputs} if len(model.graph.inputs) == 1 else inputs
    if not isinstance(inputs, dict):
        raise ModelError(f"the model has {len(model.graph.inputs)} inputs: pass a dict name -> shape")
    out = {}
    for k, v in inputs.items():
        if k not in model.graph.inputs:
            raise ModelError(
                f"unknown input {quote(k)}; the model's inputs are {quote_names(model.graph.inputs)}"
            )
        try:
            out[k] = tuple(operator.index(d) for d in (v.shape if hasattr(v, "shape") else v))
        except TypeError:
            raise ModelError(
                f"input {quote(k)}: expected an array or a shape (a tuple of ints), got {quote(repr(v), 40, marks=False)}"
            ) from None
    for k in model.graph.inputs:
        if k not in out:
            raise ModelError(f"missing input {quote(k)} (expected {model.graph.inputs[k]})")
    return out


def _array(name, v) -> np.ndarray:
    """The value given for input ``name`` as an array (a ModelError if numpy cannot make one)."""
    try:
        return np.asarray(v)
    except (ValueError, TypeError) as exc:
        raise ModelError(f"input {quote(name)}: not an array ({quote(str(exc), marks=False)})") from None


def _wide(x):
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.kind == "f" else x


def _tolerance(layer: Layer) -> float:
    return TOLERANCE.get(layer.kind, 0.0)


def _on_ane(layer: Layer, xs: list):
    """Run an ANE layer through its fastane calls; ``(outputs, summed Stats)``.  A layer of
    one call returns its outputs (the call's Stats are :func:`last_stats`); a layer of
    several returns ``(outputs, Stats)`` with their sum."""
    total = Stats()
    detail = []
    with errstate(saturation="ignore", lut_range="ignore"):
        outs = layer.run(xs)
        st = last_stats()
    if isinstance(outs, tuple):
        outs, st = outs
    total = total + st
    detail += st.tasks_detail or ([st] if st.tasks else [])
    total.tasks_detail = detail
    return outs, total


def _moved(layer: Layer, bound: Bound, outs: list, limit: float):
    """``(exact, moved, Stats)`` of a layout layer whose result ``outs`` the chip's data
    movement changes (:mod:`.movement`: a slice on the crop path, ``limit`` its largest
    magnitude); ``(None, outs, Stats())`` for any other."""
    node = layer.nodes[0]
    if not takes_crop_path(node, bound.types[node.inputs[0]].shape, bound.consts):
        return None, outs, Stats()
    y, n = crop(outs[0], limit)
    return outs, [y], Stats(cropped=n)


def _on_host(layer: Layer, bound: Bound, values: dict) -> list:
    """Run a layer's nodes on the host in float32; the layer's outputs."""
    local = dict(values)
    for node in layer.nodes:
        outs = host_eval(
            node, [local[t] if t else None for t in node.inputs], [bound.types[t].dtype for t in node.outputs]
        )
        local.update(zip(node.outputs, outs))
    return [local[o] for o in layer.outputs]


def progress_bar(stream=None):
    """A tiny progress bar on ``stream`` (stderr) when it is a terminal, else None."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None

    def show(i, n):
        w = 30
        k = w * i // max(n, 1)
        stream.write(f"\r[{'#' * k}{'.' * (w - k)}] {i}/{n} layers")
        if i >= n:
            stream.write("\n")
        stream.flush()

    return show
