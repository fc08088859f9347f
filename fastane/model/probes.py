"""The probes: small Core ML programs whose compute plan and time on a Mac would decide what
fastane's placement rules and performance model leave open (docs/probes.md).

Only a Mac can say where Core ML runs an op and how long a prediction takes; fastane's
rules (:mod:`fastane.model.placement.predict`) and its fitted performance model
(:mod:`fastane.roofline.model`) stop where the public reports stop.  Each :class:`Probe`
names one such open question and the reports or figures it would settle:

* ``fastane probes build DIR`` (here, with coremltools) writes each probe as
  ``DIR/<id>.mlpackage`` and the manifest ``DIR/probes.json``;
* ``python docs/compute_plan_dump.py --probes DIR`` (on a Mac, macOS 14.4 or later) dumps
  each probe's compute plan and times its predictions into ``DIR/results.json``;
* ``fastane probes compare DIR DIR/results.json`` (here) puts fastane's prediction beside
  each observation: the preferred device of each op of the probe's kind, and the predicted
  time against the median measured one.

The programs are built with coremltools' MIL builder as a converted PyTorch model would
be: float32 inputs, float16 compute precision (fp32 for the fp32 probe), an iOS 17 ML
Program, seeded random weights (equal weights would let the converter merge two layers).
Building needs coremltools (the ``coreml`` extra); listing and comparing do not.
"""

from __future__ import annotations

import json
import math
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModelError, quote
from .files import read_file
from .frontends.coreml.write import save_program
from .placement.predict import COMPUTE_UNITS

__all__ = [
    "MANIFEST",
    "RESULTS_FORMAT",
    "Probe",
    "PROBES",
    "select",
    "build",
    "load_results",
    "chip_of",
    "compare",
]

#: the manifest ``fastane probes build`` writes beside the programs
MANIFEST = "probes.json"
MANIFEST_FORMAT = "fastane-probes-1"
#: what ``docs/compute_plan_dump.py --probes`` writes (``results.json``)
RESULTS_FORMAT = "fastane-probes-results-1"
#: the largest results file read (a compute plan per probe: a few KiB each)
_MAX_RESULTS = 64 << 20


@dataclass(frozen=True)
class Probe:
    """One program and the question it answers: ``id`` (its file's name), ``kind``
    (``"placement"``: read its compute plan, ``"latency"``: read its time), ``question``
    (the rule, figure or reports it decides), ``op`` (the MIL op type whose preferred device
    is compared), ``shape`` (of its one float32 input, ``x``), ``program`` (``shape`` -> the
    coremltools MIL program), ``units`` (the compute units it is planned and timed with) and
    ``fp16`` (the compute precision)."""

    id: str
    kind: str
    question: str
    op: str
    shape: tuple
    program: object = field(repr=False)
    units: str = "ALL"
    fp16: bool = True

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "question": self.question,
            "op": self.op,
            "inputs": {"x": list(self.shape)},
            "computeUnits": self.units,
            "computePrecision": "fp16" if self.fp16 else "fp32",
        }


# --------------------------------------------------------------------- the programs
# each takes the shape of the program's one input ``x`` first


def _weights(seed: int, *shape) -> np.ndarray:
    """Seeded random weights, scaled by 1/sqrt(fan-in) so a chain keeps its values bounded."""
    fan_in = int(np.prod(shape[1:])) or 1
    return (np.random.default_rng(seed).standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


def _program(shape, body):
    """The MIL program ``x -> body(x)`` of one float32 input of ``shape``."""
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)])
    def prog(x):
        return body(x)

    return prog


def _linear(shape, width: int):
    """A ``linear`` of a ``(rows, depth)`` input to ``width`` outputs."""
    from coremltools.converters.mil import Builder as mb

    w, b = _weights(1, width, shape[-1]), np.zeros(width, np.float32)
    return _program(shape, lambda x: mb.linear(x=x, weight=w, bias=b))


def _conv_chain(shape, n: int, k: int = 1, cout: int | None = None):
    """``n`` convolutions of ``k x k`` ("same") chained on a ``(1, c, h, w)`` input, each to
    ``c`` channels (one to ``cout``, given ``n`` 1)."""
    from coremltools.converters.mil import Builder as mb

    c = shape[1]
    ws = [_weights(j, cout or c, c, k, k) for j in range(n)]

    def body(x):
        for wj in ws:
            x = mb.conv(x=x, weight=wj, pad_type="same")
        return x

    return _program(shape, body)


def _depthwise(shape, n: int, explicit_pad: bool):
    """``n`` depthwise 3x3 convolutions with a relu each (MobileNetV2's middle), padded by the
    conv ("same") or by a ``pad`` op before a "valid" conv (a port that pads explicitly)."""
    from coremltools.converters.mil import Builder as mb

    c = shape[1]
    ws = [_weights(10 + j, c, 1, 3, 3) for j in range(n)]

    def body(x):
        for wj in ws:
            if explicit_pad:
                x = mb.pad(x=x, pad=[0, 0, 0, 0, 1, 1, 1, 1], mode="constant", constant_val=0.0)
                x = mb.conv(x=x, weight=wj, groups=c, pad_type="valid")
            else:
                x = mb.conv(x=x, weight=wj, groups=c, pad_type="same")
            x = mb.relu(x=x)
        return x

    return _program(shape, body)


def _alone(shape, op: str, axis: int = -1):
    """One op with no matrix product: ``softmax`` over the last axis, ``add`` of the input to
    itself, or ``layer_norm`` over ``axis``."""
    from coremltools.converters.mil import Builder as mb

    n = shape[axis]
    ops = {
        "softmax": lambda x: mb.softmax(x=x, axis=-1),
        "add": lambda x: mb.add(x=x, y=x),
        "layer_norm": lambda x: mb.layer_norm(
            x=x, axes=[axis], gamma=np.ones(n, np.float32), beta=np.zeros(n, np.float32)
        ),
    }
    return _program(shape, ops[op])


def _probes() -> tuple:
    out = []

    def add(pid, kind, question, op, shape, program, fp16=True, units=None):
        # a latency probe is timed where fastane's time is the ANE's: not under ALL, which
        # lets Core ML take the GPU; a placement probe is planned under Core ML's default
        units = units or ("CPU_AND_NE" if kind == "latency" else "ALL")
        out.append(Probe(pid, kind, question, op, shape, program, units, fp16))

    depth_q = (
        "the one-row linear depth floor on this chip: larql saw the CPU below depth 4864 on an M3 Max "
        "(the rule, H15 only); torchnative's M1 the CPU at depths 576-4096 (tn-linear-b1-576-cpu, "
        "tn-linear-b1-square-cpu)"
    )
    for k in (512, 1024, 2048, 4096, 8192):
        add(f"linear1-depth{k}", "placement", depth_q, "linear", (1, k), lambda s: _linear(s, 1024))
    chain_q = (
        "the 1x1-conv weight floor's gap on this chip: torchnative's M1 ran 8 convs of 576 x 576 "
        "(2.65M weights) on the CPU and 16 (5.3M) on the ANE; tn-decode-layer-1-cpu (3.32M) lies between"
    )
    for n in (8, 10, 12, 14, 16):
        add(
            f"conv1x1-chain{n}",
            "placement",
            chain_q,
            "conv",
            (1, 576, 1, 1),
            lambda s, n=n: _conv_chain(s, n),
        )
    conv_q = (
        "what orders 3x3 convolutions between the CPU and the ANE: torchnative's M1 ran 64 -> 128 at "
        "32x32 on the CPU and 128 -> 256 on the ANE (tn-conv3x3-64to128-cpu), 3 -> 8 at 16x16 on the "
        "CPU (tn-npu2-small-cnn-f16-cpu); no rule covers them"
    )
    for cin, cout, hw in ((3, 8, 16), (32, 32, 32), (64, 128, 32), (128, 256, 32), (256, 256, 32)):
        add(
            f"conv3x3-{cin}to{cout}-{hw}",
            "placement",
            conv_q,
            "conv",
            (1, cin, hw, hw),
            lambda s, o=cout: _conv_chain(s, 1, 3, o),
        )
    alone_q = (
        "the floor for programs without a matrix product on this chip and OS: torchnative's M1 "
        "(macOS 26) the CPU up to 8.4M elements and the GPU from 33.5M; Vx's M4 the CPU at 262144 and "
        "the ANE at 2M (vxdc-softmax-f16-512-alone)"
    )
    for op in ("softmax", "add"):
        for e in (14, 16, 18, 20, 22, 24, 25):  # 2^25: the M1's GPU edge, and fastane's largest
            add(f"{op}-2e{e}", "placement", alone_q, op, (1, 1 << (e - 9), 512), lambda s, o=op: _alone(s, o))
    norm_q = (
        "smpanaro's layer_norm over axis 1 (sm-layernorm-axis1-size): an M1 Pro on macOS 13/14 ran "
        "(1, 1800, 1, 16) on the ANE and (1, 4, 1, 2) on the CPU under CPU_AND_NE, where the floor for "
        "programs without a matrix product (torchnative's M1, macOS 26) says the CPU for both: the "
        "same programs on a later macOS tell whether the OS is what differs"
    )
    for c, w in ((4, 2), (1800, 16)):
        add(
            f"layer_norm-axis1-{c}x{w}",
            "placement",
            norm_q,
            "layer_norm",
            (1, c, 1, w),
            lambda s: _alone(s, "layer_norm", axis=1),
            units="CPU_AND_NE",
        )
    width_q = (
        "is a linear's output width a W axis (at most 16384 before the M4's generation): larql's M3 Max "
        "ran 17408 on the ANE, torchnative's M1 49152 at 256 rows (tn-npu2-lmhead-b256-ane-b512-gpu); "
        "fastane admits it beyond 16384 on the M3's generation only"
    )
    for wd in (16384, 16400, 32768):
        add(
            f"linear256-width{wd}",
            "placement",
            width_q,
            "linear",
            (256, 576),
            lambda s, wd=wd: _linear(s, wd),
        )
    add(
        "conv3x3-f32-128to256-32",
        "placement",
        "the CPU or the GPU for fp32 3x3 convolutions under ALL: fastane's edge is in multiply-adds, "
        "measured on linears; torchnative's M1 ran this conv (302M) on the CPU "
        "(tn-npu2-conv3x3-128to256-f32-cpu)",
        "conv",
        (1, 128, 32, 32),
        lambda s: _conv_chain(s, 1, 3, 256),
        fp16=False,
    )
    chain_t = (
        "the rate of 1x1 convolutions over many positions per task: fastane predicts maderix's 128 "
        "chained convs of 512 channels over 64x64 at 1.9x their measured time on an M4 (S21); the "
        "hypothesis of a short-task rate needs such a point with a known copy"
    )
    for n in (16, 32):  # 4.2M and 8.4M weights: fewer may leave the ANE by the 1x1-conv weight floor
        add(
            f"time-chain1x1-512-64x64-{n}",
            "latency",
            chain_t,
            "conv",
            (1, 512, 64, 64),
            lambda s, n=n: _conv_chain(s, n),
        )
    rate_t = (
        "the chip's FP16 rate through Core ML, from the difference of 16 and 64 chained 3x3 "
        "convolutions (ANEForge's K14, K24 and S25-5 program, 1 MB in and out): no source gives the "
        "base M5's (the chip table borrows the M5 Max's 19.27 TFLOP/s, below the 24.3 its ANEForge "
        "stack ran at, S25); the 16-conv one also gives the runtime path's cost against the private API"
    )
    for n in (16, 64):
        add(
            f"time-conv3x3-256-32x32-x{n}",
            "latency",
            rate_t,
            "conv",
            (1, 256, 32, 32),
            lambda s, n=n: _conv_chain(s, n, 3),
        )
    add(
        "time-conv3x3-64-32x32",
        "latency",
        "a prediction's fixed cost on this Mac through Core ML (ANEForge's K19 program): an M3 Max's "
        "FastViT-T8 (A7) took 1.9x the time fastane predicts, whose fixed cost is fitted on the A16",
        "conv",
        (1, 64, 32, 32),
        lambda s: _conv_chain(s, 1, 3),
    )
    dw_q = (
        "depthwise convolutions' rate against explicit pads' copies: MobileNetV2 is predicted 0.7-0.8 of "
        "its time on the A14, A16 and A17 Pro (V1, Q4-Q7, Q10, Q11) and 0.46-0.49 for a port that pads "
        "explicitly (V6, V7); the points cannot tell the two apart"
    )
    for pad in (False, True):
        add(
            f"time-dw3x3-144-56x56-x8{'-pad' if pad else ''}",
            "latency",
            dw_q,
            "conv",
            (1, 144, 56, 56),
            lambda s, pad=pad: _depthwise(s, 8, pad),
        )
    return tuple(out)


#: every probe, in the order they are built and reported
PROBES: tuple = _probes()


def select(only=None) -> list:
    """The probes whose id starts with one of ``only`` (all without it); ValueError naming
    the first prefix that matches none."""
    if not only:
        return list(PROBES)
    picked = [p for p in PROBES if any(p.id.startswith(o) for o in only)]
    missing = [o for o in only if not any(p.id.startswith(o) for p in PROBES)]
    if missing:
        raise ValueError(
            f"no probe id starts with {quote(missing[0], 40)} (`fastane probes list` shows them)"
        )
    return picked


# --------------------------------------------------------------------- building
def build(directory, only=None, progress=None) -> list:
    """Write the probes (:func:`select` ``only``) as ``directory/<id>.mlpackage`` and the
    manifest ``directory/probes.json``; the paths written.  ``progress(i, n, probe)`` is
    called before each.  Needs coremltools."""
    try:
        import coremltools  # noqa: F401
    except ImportError:
        raise ModelError("building the probes needs coremltools: pip install 'fastane[coreml]'") from None
    probes = select(only)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, p in enumerate(probes):
        if progress:
            progress(i, len(probes), p)
        paths.append(save_program(p.program(p.shape), d / f"{p.id}.mlpackage", fp16=p.fp16))
    manifest = {
        "format": MANIFEST_FORMAT,
        "builtOn": platform.platform(),
        "probes": [p.as_dict() for p in probes],
    }
    (d / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return paths


# --------------------------------------------------------------------- comparing
def load_results(path) -> dict:
    """The results a Mac wrote (``docs/compute_plan_dump.py --probes``): ``{"chip": brand,
    "os": ..., "probes": {id: {"plan": compute plan or None, "time_ms": {"median": ms, ...}
    or None, "error": message or None}}}``; ValueError naming what is malformed."""
    raw = read_file(path, "probe results", _MAX_RESULTS, "64 MiB, for a compute plan per probe")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not a readable JSON results file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"{path}: not probe results: format {quote(str(got), 40)}, expected {RESULTS_FORMAT!r}"
        )
    probes = data.get("probes")
    if not isinstance(probes, dict) or not all(isinstance(v, dict) for v in probes.values()):
        raise ValueError(f"{path}: not probe results: 'probes' is not an object of objects")
    for pid, r in probes.items():
        t = r.get("time_ms")
        if t is not None and not (isinstance(t, dict) and _milliseconds(t.get("median"))):
            raise ValueError(
                f"{path}: probe {quote(pid, 40)}: time_ms needs a median of milliseconds, finite and at least 1e-6"
            )
    return data


def _milliseconds(x) -> bool:
    """A time a Mac measured, in milliseconds: a number (not a bool), finite, at least 1 ns."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x)) and float(x) >= 1e-6
    except OverflowError:  # an integer of hundreds of digits
        return False


def chip_of(brand) -> str:
    """fastane's chip for a Mac's brand string (``sysctl machdep.cpu.brand_string``: "Apple M1
    Pro" -> "m1-pro"); ValueError when it names no chip fastane knows (give ``--chip``)."""
    from ..roofline import chips

    name = str(brand or "").strip()
    if name.lower().startswith("apple "):
        name = name[6:]
    try:
        return chips.get(name).key
    except ValueError:
        raise ValueError(
            f"the results name the chip {quote(str(brand), 60)}, which fastane does not know: give --chip"
        ) from None


#: a probe's id: the name of its file in the probes' directory, never a path out of it
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
#: the most axes and elements of a probe's input the manifest may declare
_MAX_RANK, _MAX_ELEMENTS = 8, 1 << 28


def _entry(p) -> bool:
    """A manifest entry as :meth:`Probe.as_dict` writes it: an id that is a file name, a
    known kind, an op, Core ML's compute units, and inputs of at most :data:`_MAX_RANK` positive axes and
    :data:`_MAX_ELEMENTS` elements."""
    if not (isinstance(p, dict) and isinstance(p.get("id"), str) and _ID.fullmatch(p["id"])):
        return False
    inputs = p.get("inputs")
    return (
        p.get("kind") in ("placement", "latency")
        and isinstance(p.get("op"), str)
        and p.get("computeUnits") in COMPUTE_UNITS
        and isinstance(inputs, dict)
        and all(
            isinstance(v, list)
            and 0 < len(v) <= _MAX_RANK
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= _MAX_ELEMENTS for d in v)
            and math.prod(v) <= _MAX_ELEMENTS
            for v in inputs.values()
        )
    )


def _manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    raw = read_file(path, "probe manifest", 1 << 20, "1 MiB")
    try:
        data = json.loads(raw)
        if data.get("format") != MANIFEST_FORMAT or not isinstance(data["probes"], list):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise ValueError(f"{path}: not a probe manifest (written by `fastane probes build`)") from None
    bad = [p for p in data["probes"] if not _entry(p)]
    if bad:
        what = bad[0].get("id") if isinstance(bad[0], dict) else bad[0]
        raise ValueError(
            f"{path}: the probe {quote(str(what), 40)} is malformed (an id that is a file name of the "
            f"directory, its kind, op, compute units and inputs of at most {_MAX_ELEMENTS} elements)"
        )
    return {p["id"]: p for p in data["probes"]}


def compare(directory, results: dict, chip=None, progress=None) -> list:
    """Each probe of ``results`` (:func:`load_results`) against fastane's prediction for the
    program in ``directory`` on ``chip`` (default: the results' own, :func:`chip_of`): a row
    per probe, ``{"id", "kind", "question", "error" (the Mac's), "refused" (fastane's
    one-line refusal of the program), "ops": [(output, fastane, mac)],
    "agree": (ops that agree, ops compared) or None}``: each op of the probe's kind in the
    Mac's plan, by its output name, beside fastane's op of that output (None where fastane
    has none).  A timed latency probe adds ``"predicted_ms"`` (the roofline's, Core ML's
    runtime path), ``"measured_ms"`` (the median), ``"ratio"`` (predicted over measured) and
    ``"comparable"``: whether the Mac ran every op of the program on the ANE but the casts of
    its float32 input and output (fastane's time is the ANE's; None without a plan).
    ``progress(i, n, id)`` is called before each probe."""
    from ..networks.plan import analyze
    from ..roofline import chips as _chips
    from ..roofline.model import calibrated
    from . import load_model
    from .placement.compute_plan import plan_operations

    chip = _chips.get(chip).key if chip else chip_of(results.get("chip"))
    manifest = _manifest(directory)
    params = calibrated(runtime="coreml")
    rows = []
    items = list(results["probes"].items())
    for i, (pid, seen) in enumerate(items):
        if progress:
            progress(i, len(items), pid)
        probe = manifest.get(pid)
        if probe is None:
            raise ValueError(f"probe {quote(pid, 40)} is in the results but not in {MANIFEST}")
        row = {
            "id": pid,
            "kind": probe["kind"],
            "question": probe.get("question", ""),
            "error": None if seen.get("error") is None else str(seen["error"]),
            "refused": None,
            "ops": [],
            "agree": None,
        }
        shapes = {k: tuple(v) for k, v in probe["inputs"].items()}
        timed = seen.get("time_ms") is not None and probe["kind"] == "latency"
        try:
            model = load_model(str(Path(directory) / f"{pid}.mlpackage"), weights=False)
            plan = model.compute_plan(shapes, chip, probe["computeUnits"], warn=False)
            pred = analyze(model, chip, params, shapes=shapes).total.time_s * 1e3 if timed else None
        except ModelError as exc:  # a program fastane refuses: the others are still compared
            row["refused"] = str(exc)
            rows.append(row)
            continue
        ops = None
        if seen.get("plan") is not None:
            ops = plan_operations(f"{pid} in the results", seen["plan"])
            fastane = {name: o.preferred for o in plan.ops for name in o.outputs}
            row["ops"] = [
                (names[0], next((fastane[n] for n in names if n in fastane), None), unit)
                for kind, names, unit in ops
                if kind == probe["op"]
            ]
            compared = [r for r in row["ops"] if r[1] is not None]
            row["agree"] = (sum(f == m for _, f, m in compared), len(compared))
        if timed:
            t = seen["time_ms"]
            row.update(predicted_ms=pred, measured_ms=float(t["median"]), ratio=pred / float(t["median"]))
            row["comparable"] = None if ops is None else all(u == "ane" for k, _, u in ops if k != "cast")
        rows.append(row)
    return rows
