"""The fp16 hunt: where a model's fp16 arithmetic on the ANE breaks, layer by layer.

* :func:`count_nonfinite` (called by :meth:`Model.report` for every layer): infs and NaNs
  a layer *made* -- its dynamic inputs were all finite -- are "born" there; those of a
  layer fed a non-finite input are inherited (counted, not blamed);
* :func:`first_divergence`: run until the first layer whose error against the fp32
  evaluation of the same layer on the same inputs leaves its tolerance (or that gives
  birth to an inf/NaN), and describe that layer's inputs (ranges, non-finite counts);
* :func:`sweep`: one model input swept over a range of values (every element set to the
  value), an output read at one element, on the ANE and in fp32: a cliff is seen, not
  guessed.

Front-end neutral: ONNX and Core ML models alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...errors import ModelError, quote, quote_names

__all__ = [
    "count_nonfinite",
    "first_divergence",
    "Divergence",
    "sweep",
    "Sweep",
    "parse_range",
    "tensor_range",
]

#: the most points a sweep may take
MAX_SWEEP_POINTS = 100_000


def _float_arrays(xs):
    return [np.asarray(x) for x in xs if x is not None and np.asarray(x).dtype.kind == "f"]


def count_nonfinite(rec, xs, outs) -> None:
    """Set ``rec.inf_born``/``nan_born``/``nonfinite_inherited`` from the layer's dynamic
    inputs ``xs`` and outputs ``outs``."""
    bad_in = sum(int(np.size(x) - np.count_nonzero(np.isfinite(x))) for x in _float_arrays(xs))
    infs = nans = 0
    for y in _float_arrays(outs):
        infs += int(np.count_nonzero(np.isinf(y)))
        nans += int(np.count_nonzero(np.isnan(y)))
    if bad_in:
        rec.nonfinite_inherited = infs + nans
    else:
        rec.inf_born, rec.nan_born = infs, nans


def tensor_range(x) -> dict:
    """min, max, max |x|, and the inf/NaN counts of a tensor (finite values only for the
    extremes); fp16's limits for reference."""
    a = np.asarray(x)
    d = {"shape": list(a.shape), "dtype": a.dtype.name}
    if a.dtype.kind != "f" or a.size == 0:
        if a.size:
            d.update(min=float(a.min()), max=float(a.max()))
        return d
    fin = a[np.isfinite(a)].astype(np.float64)
    d.update(
        min=float(fin.min()) if fin.size else None,
        max=float(fin.max()) if fin.size else None,
        max_abs=float(np.abs(fin).max()) if fin.size else None,
        inf=int(np.count_nonzero(np.isinf(a))),
        nan=int(np.count_nonzero(np.isnan(a))),
        beyond_fp16=int(np.count_nonzero(np.abs(fin) > 65504.0)),
    )
    return d


@dataclass
class Divergence:
    """The first layer whose error left its tolerance (``None`` fields: none did)."""

    layer: str | None
    op: str | None = None
    placement: str | None = None
    reason: str = ""
    error: float | None = None
    tolerance: float | None = None
    inf_born: int = 0
    nan_born: int = 0
    inputs: dict = field(default_factory=dict)  # tensor name -> tensor_range
    outputs: dict = field(default_factory=dict)
    layers_run: int = 0

    def as_dict(self) -> dict:
        """JSON-ready (an infinite error as the string "inf")."""
        d = dict(self.__dict__)
        if d["error"] is not None:
            d["error"] = _j(d["error"])
        return d

    def text(self) -> str:
        if self.layer is None:
            return (
                f"no layer left its tolerance ({self.layers_run} layers run): the fp16 run "
                f"follows the fp32 evaluation layer by layer"
            )
        why = (
            f"error {self.error:.3g} > tolerance {self.tolerance:.3g}"
            if self.error is not None and not self.error <= self.tolerance
            else f"{self.inf_born} inf and {self.nan_born} NaN born here"
        )
        lines = [
            f"first divergence: layer {quote(self.layer)} ({quote(self.op, marks=False)}, {self.placement}) after "
            f"{self.layers_run} layers: {why}"
        ]
        if self.reason:
            lines.append(f"  placement: {self.reason}")
        for kind, tensors in (("input", self.inputs), ("output", self.outputs)):
            for name, r in tensors.items():
                lines.append(f"  {kind} {quote(name, marks=False)}: {_fmt_range(r)}")
        return "\n".join(lines)


def _fmt_range(r: dict) -> str:
    shape = "x".join(map(str, r["shape"]))
    if r.get("max_abs") is None and "min" not in r:
        return (
            f"{r['dtype']}[{shape}] (empty or no finite values; inf {r.get('inf', 0)}, nan {r.get('nan', 0)})"
        )
    s = f"{r['dtype']}[{shape}] range [{_g(r.get('min'))}, {_g(r.get('max'))}]"
    if "max_abs" in r:
        s += f", max |x| {_g(r['max_abs'])}, inf {r['inf']}, nan {r['nan']}"
        if r["beyond_fp16"]:
            s += f", {r['beyond_fp16']} beyond fp16's 65504"
    return s


def _g(x):
    return "-" if x is None else f"{x:.6g}"


class _Stop(Exception):
    pass


def first_divergence(model, inputs, tolerance: float | None = None, chip=None) -> Divergence:
    """Run ``model`` layer by layer as on ``chip`` (None: the model's) and stop at the first
    layer whose error (the layer on the ANE against its fp32 evaluation on the same inputs)
    exceeds ``tolerance`` (default: each layer's class tolerance,
    :data:`fastane.model.run.model.TOLERANCE`), or that gives birth to infs/NaNs."""
    found: dict = {}
    count = [0]

    def observe(layer, xs, outs, rec):
        count[0] += 1
        tol = rec.tolerance if tolerance is None else float(tolerance)
        bad = rec.error is not None and rec.error > tol
        if bad or rec.inf_born or rec.nan_born:
            found.update(
                rec=rec, xs=dict(zip(layer.inputs, xs)), outs=dict(zip(layer.outputs, outs)), tol=tol
            )
            raise _Stop

    try:
        model.report(inputs, chip, observe=observe)
    except _Stop:
        rec = found["rec"]
        err = rec.error
        return Divergence(
            rec.layer.name,
            rec.layer.op,
            rec.placement,
            rec.reason,
            None if err is None or (isinstance(err, float) and math.isnan(err)) else float(err),
            found["tol"],
            rec.inf_born,
            rec.nan_born,
            {k: tensor_range(v) for k, v in found["xs"].items()},
            {k: tensor_range(v) for k, v in found["outs"].items()},
            count[0],
        )
    return Divergence(None, layers_run=count[0])


# ------------------------------------------------------------------ sweep
def parse_range(text: str):
    """``"lo:hi:n"`` -> ``np.linspace(lo, hi, n)`` (float32); ValueError if malformed."""
    parts = str(text).split(":")
    if len(parts) != 3:
        raise ValueError(f"--range {text!r}: expected LO:HI:N, e.g. -20:20:2001")
    try:
        lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"--range {text!r}: LO and HI must be numbers, N an integer") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"--range {text!r}: LO and HI must be finite")
    if not 1 <= n <= MAX_SWEEP_POINTS:
        raise ValueError(f"--range {text!r}: N must be in [1, {MAX_SWEEP_POINTS}]")
    return np.linspace(lo, hi, n).astype(np.float32)


@dataclass
class Sweep:
    input: str
    output: str
    index: int
    x: np.ndarray
    ane: np.ndarray
    fp32: np.ndarray

    def as_dict(self) -> dict:
        return {
            "input": self.input,
            "output": self.output,
            "index": self.index,
            "points": [
                {"x": float(a), "ane": _j(b), "fp32": _j(c)} for a, b, c in zip(self.x, self.ane, self.fp32)
            ],
        }

    def table(self, every: int = 1) -> str:
        lines = [
            f"sweep of input {self.input!r} (every element set to x); output {self.output!r}"
            f"[flat index {self.index}]",
            f"{'x':>12s} {'ane (fp16)':>14s} {'fp32':>14s} {'abs diff':>11s}",
        ]
        for a, b, c in list(zip(self.x, self.ane, self.fp32))[:: max(every, 1)]:
            d = abs(float(b) - float(c)) if np.isfinite(b) and np.isfinite(c) else float("nan")
            lines.append(f"{a:12.6g} {float(b):14.6g} {float(c):14.6g} {d:11.3g}")
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise RuntimeError(
                "--plot needs matplotlib (pip install 'fastane[plot]'); without it use the table or --json"
            ) from None
        fig, (a0, a1) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
        a0.plot(self.x, self.fp32, label="fp32", lw=1)
        a0.plot(self.x, self.ane.astype(np.float64), label="ANE (fp16, fastane)", lw=1, ls="--")
        a0.set_ylabel(f"{self.output}[{self.index}]")
        a0.legend()
        with np.errstate(invalid="ignore"):
            a1.semilogy(self.x, np.abs(self.ane.astype(np.float64) - self.fp32) + 1e-12, lw=1)
        a1.set_ylabel("|ANE - fp32|")
        a1.set_xlabel(f"{self.input} (every element)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def _j(v):
    v = float(v)
    return v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))


def sweep(
    model,
    name: str,
    values,
    base: dict,
    output: str | None = None,
    index: int = 0,
    element: int | None = None,
) -> Sweep:
    """Set every element of input ``name`` (or only its flat ``element``, the rest from
    ``base``) to each of ``values`` in turn (the other inputs from ``base``), run the model
    on the ANE and in fp32, and read ``output`` (default the first) at flat ``index``."""
    if name not in model.inputs:
        raise ModelError(f"sweep: the model has no input {quote(name)} (inputs: {quote_names(model.inputs)})")
    output = output or model.outputs[0]
    if output not in model.outputs:
        raise ModelError(
            f"sweep: the model has no output {quote(output)} (outputs: {quote_names(model.outputs)})"
        )
    shape = np.shape(base[name])
    if element is not None and not 0 <= element < max(math.prod(shape), 1):
        raise ModelError(f"sweep: --element {element} is outside input {quote(name)} of shape {shape}")
    ane, ref = [], []
    for v in np.asarray(values):
        feed = dict(base)
        if element is None:
            feed[name] = np.full(shape, v, np.asarray(base[name]).dtype)
        else:
            arr = np.array(base[name], copy=True)
            arr.reshape(-1)[element] = v
            feed[name] = arr
        y = np.asarray(model(feed)[output]).reshape(-1)
        r = np.asarray(model.reference(feed)[output]).reshape(-1)
        if not 0 <= index < y.size:
            raise ModelError(f"sweep: --at {index} is outside output {output!r} ({y.size} elements)")
        ane.append(y[index])
        ref.append(r[index])
    return Sweep(
        name, output, index, np.asarray(values), np.asarray(ane, np.float16), np.asarray(ref, np.float64)
    )
