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
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModelError, quote
from .files import read_file

__all__ = [
    "MANIFEST",
    "RESULTS_FORMAT",
    "Probe",
    "PROBES",
    "convert",
    "save_program",
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
    is compared), ``inputs`` (name -> shape, float32), ``units`` (the compute units it is
    planned and timed with) and ``fp16`` (the compute precision)."""

    id: str
    kind: str
    question: str
    op: str
    program: object = field(repr=False)  # () -> a coremltools MIL program
    inputs: dict = field(default_factory=dict)
    units: str = "ALL"
    fp16: bool = True

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "question": self.question,
            "op": self.op,
            "inputs": {k: list(v) for k, v in self.inputs.items()},
            "computeUnits": self.units,
            "computePrecision": "fp16" if self.fp16 else "fp32",
        }


# --------------------------------------------------------------------- the programs
def _weights(seed: int, *shape) -> np.ndarray:
    """Seeded random weights, scaled by 1/sqrt(fan-in) so a chain keeps its values bounded."""
    fan_in = int(np.prod(shape[1:])) or 1
    return (np.random.default_rng(seed).standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


def _spec(shape):
    from coremltools.converters.mil import Builder as mb

    return mb.TensorSpec(shape=shape)


def _linear(rows: int, depth: int, width: int):
    from coremltools.converters.mil import Builder as mb

    w, b = _weights(1, width, depth), np.zeros(width, np.float32)

    @mb.program(input_specs=[_spec((rows, depth))])
    def prog(x):
        return mb.linear(x=x, weight=w, bias=b)

    return prog


def _conv_chain(n: int, c: int, h: int, w: int, k: int = 1):
    """``n`` convolutions ``c -> c`` of ``k x k`` ("same") chained on a ``(1, c, h, w)`` input."""
    from coremltools.converters.mil import Builder as mb

    ws = [_weights(j, c, c, k, k) for j in range(n)]

    @mb.program(input_specs=[_spec((1, c, h, w))])
    def prog(x):
        for wj in ws:
            x = mb.conv(x=x, weight=wj, pad_type="same")
        return x

    return prog


def _conv3x3(cin: int, cout: int, hw: int):
    from coremltools.converters.mil import Builder as mb

    wt = _weights(2, cout, cin, 3, 3)

    @mb.program(input_specs=[_spec((1, cin, hw, hw))])
    def prog(x):
        return mb.conv(x=x, weight=wt, pad_type="same")

    return prog


def _depthwise(n: int, c: int, hw: int, explicit_pad: bool):
    """``n`` depthwise 3x3 convolutions with a relu each (MobileNetV2's middle), padded by the
    conv ("same") or by a ``pad`` op before a "valid" conv (a port that pads explicitly)."""
    from coremltools.converters.mil import Builder as mb

    ws = [_weights(10 + j, c, 1, 3, 3) for j in range(n)]

    @mb.program(input_specs=[_spec((1, c, hw, hw))])
    def prog(x):
        for wj in ws:
            if explicit_pad:
                x = mb.pad(x=x, pad=[0, 0, 0, 0, 1, 1, 1, 1], mode="constant", constant_val=0.0)
                x = mb.conv(x=x, weight=wj, groups=c, pad_type="valid")
            else:
                x = mb.conv(x=x, weight=wj, groups=c, pad_type="same")
            x = mb.relu(x=x)
        return x

    return prog


def _alone(op: str, shape):
    """One op with no matrix product: ``softmax`` over the last axis, ``add`` of the input to
    itself, or ``layer_norm`` over the last axis."""
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[_spec(shape)])
    def prog(x):
        if op == "softmax":
            return mb.softmax(x=x, axis=-1)
        if op == "add":
            return mb.add(x=x, y=x)
        n = shape[-1]
        return mb.layer_norm(x=x, axes=[-1], gamma=np.ones(n, np.float32), beta=np.zeros(n, np.float32))

    return prog


def _probes() -> tuple:
    out = []

    def add(pid, kind, question, op, program, inputs, fp16=True):
        # a latency probe is timed where fastane's time is the ANE's: not under ALL, which
        # lets Core ML take the GPU
        units = "CPU_AND_NE" if kind == "latency" else "ALL"
        out.append(Probe(pid, kind, question, op, program, inputs, units, fp16))

    depth_q = (
        "the one-row linear depth floor on this chip: larql saw the CPU below depth 4864 on an M3 Max "
        "(the rule, H15 only); torchnative's M1 the CPU at depths 576-4096 (tn-linear-b1-576-cpu, "
        "tn-linear-b1-square-cpu)"
    )
    for k in (512, 1024, 2048, 4096, 8192):
        add(
            f"linear1-depth{k}",
            "placement",
            depth_q,
            "linear",
            lambda k=k: _linear(1, k, 1024),
            {"x": (1, k)},
        )
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
            lambda n=n: _conv_chain(n, 576, 1, 1),
            {"x": (1, 576, 1, 1)},
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
            lambda a=(cin, cout, hw): _conv3x3(*a),
            {"x": (1, cin, hw, hw)},
        )
    alone_q = (
        "the floor for programs without a matrix product on this chip and OS: torchnative's M1 "
        "(macOS 26) the CPU up to 8.4M elements; Vx's M4 the CPU at 262144 and the ANE at 2M "
        "(vxdc-softmax-f16-512-alone); an M1 Pro (macOS 13/14) the ANE at 28,800 (sm-layernorm-axis1-size)"
    )
    for op in ("softmax", "add"):
        for e in (14, 16, 18, 20, 22):
            shape = (1, 1 << (e - 9), 512)
            add(f"{op}-2e{e}", "placement", alone_q, op, lambda o=op, s=shape: _alone(o, s), {"x": shape})
    for shape in ((1, 1800, 16), (1, 64, 4096)):
        add(
            f"layer_norm-{shape[1]}x{shape[2]}",
            "placement",
            alone_q,
            "layer_norm",
            lambda s=shape: _alone("layer_norm", s),
            {"x": shape},
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
            lambda wd=wd: _linear(256, 576, wd),
            {"x": (256, 576)},
        )
    add(
        "conv3x3-f32-128to256-32",
        "placement",
        "the CPU or the GPU for fp32 3x3 convolutions under ALL: fastane's edge is in multiply-adds, "
        "measured on linears; torchnative's M1 ran this conv (302M) on the CPU "
        "(tn-npu2-conv3x3-128to256-f32-cpu)",
        "conv",
        lambda: _conv3x3(128, 256, 32),
        {"x": (1, 128, 32, 32)},
        fp16=False,
    )
    chain_t = (
        "the rate of 1x1 convolutions over many positions per task: maderix's 128 chained convs of 512 "
        "channels over 64x64 ran at 1.9x fastane's prediction on an M4 (S21); the hypothesis of a "
        "short-task rate needs such a point with a known copy"
    )
    for n in (16, 32):  # 4.2M and 8.4M weights: fewer may leave the ANE by the 1x1-conv weight floor
        add(
            f"time-chain1x1-512-64x64-{n}",
            "latency",
            chain_t,
            "conv",
            lambda n=n: _conv_chain(n, 512, 64, 64),
            {"x": (1, 512, 64, 64)},
        )
    add(
        "time-gemm1024",
        "latency",
        "the chip's FP16 rate through Core ML: no source gives the base M5's (the chip table borrows the "
        "M5 Max's 19.27 TFLOP/s, below the 24.3 its ANEForge conv stack ran at, S25)",
        "linear",
        lambda: _linear(1024, 1024, 1024),
        {"x": (1024, 1024)},
    )
    add(
        "time-conv3x3-256-32x32-x16",
        "latency",
        "ANEForge's 16-conv stack (K14, K24, S25-5) through Core ML instead of the private API: the "
        "runtime path's cost on this Mac",
        "conv",
        lambda: _conv_chain(16, 256, 32, 32, k=3),
        {"x": (1, 256, 32, 32)},
    )
    add(
        "time-conv3x3-64-32x32",
        "latency",
        "a prediction's fixed cost on this Mac through Core ML (ANEForge's K19 program): an M3 Max's "
        "FastViT-T8 (A7) ran at 1.9x fastane's prediction, whose fixed cost is fitted on the A16",
        "conv",
        lambda: _conv_chain(1, 64, 32, 32, k=3),
        {"x": (1, 64, 32, 32)},
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
            lambda pad=pad: _depthwise(8, 144, 56, pad),
            {"x": (1, 144, 56, 56)},
        )
    return tuple(out)


#: every probe, in the order they are built and reported
PROBES: tuple = _probes()


def select(only=None) -> list:
    """The probes whose id starts with one of ``only`` (all without it); ValueError naming the
    known ids when a prefix matches none."""
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
def convert(prog, target=None, fp16: bool = False):
    """``ct.convert`` of the MIL program ``prog`` to an ML Program for deployment ``target``
    (default iOS 17), float32 compute precision unless ``fp16``, its warnings silenced."""
    import coremltools as ct

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=target or ct.target.iOS17,
            compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        )


def save_program(prog, path, target=None, fp16: bool = False, edit=None) -> str:
    """:func:`convert`, saved as the ``.mlpackage`` ``path``; ``edit`` changes its spec (a
    flexible input, say) before it is saved; the path as a string."""
    import coremltools as ct

    m = convert(prog, target, fp16)
    if edit:
        spec = m.get_spec()
        edit(spec)
        m = ct.models.MLModel(spec, weights_dir=m.weights_dir, skip_model_load=True)
    m.save(str(path))
    return str(path)


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
        paths.append(save_program(p.program(), d / f"{p.id}.mlpackage", fp16=p.fp16))
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
    "os": ..., "probes": {id: {"plan": compute plan or None, "time_ms": {...} or None}}}``;
    ValueError naming what is malformed."""
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
        if t is not None and not (
            isinstance(t, dict) and isinstance(t.get("median"), (int, float)) and t["median"] > 0
        ):
            raise ValueError(f"{path}: probe {quote(pid, 40)}: time_ms needs a positive median")
    return data


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


def _manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    raw = read_file(path, "probe manifest", 1 << 20, "1 MiB")
    try:
        data = json.loads(raw)
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError
        probes = {p["id"]: p for p in data["probes"]}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise ValueError(f"{path}: not a probe manifest (written by `fastane probes build`)") from None
    bad = [pid for pid in probes if not (isinstance(pid, str) and _ID.fullmatch(pid))]
    if bad:
        raise ValueError(f"{path}: the probe id {quote(str(bad[0]), 40)} is not a file name of the directory")
    return probes


def compare(directory, results: dict, chip=None, progress=None) -> list:
    """Each probe of ``results`` (:func:`load_results`) against fastane's prediction for the
    program in ``directory`` on ``chip`` (default: the results' own, :func:`chip_of`): a row
    per probe, ``{"id", "kind", "question", "ops": [(output, fastane, mac)], "agree": (ops
    that agree, ops compared) or None}``, and for a timed latency probe ``"predicted_ms"``
    (the roofline's, Core ML's runtime path), ``"measured_ms"`` (the median), ``"ratio"``
    (predicted over measured) and ``"comparable"`` (every op of the probe's kind ran on the
    ANE; None without a plan).  ``progress(i, n, id)`` is called before each."""
    from ..networks.plan import analyze
    from ..roofline import chips as _chips
    from ..roofline.model import calibrated
    from . import load_model
    from .placement.compute_plan import compare as compare_ops
    from .placement.compute_plan import plan_devices

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
        model = load_model(str(Path(directory) / f"{pid}.mlpackage"), weights=False)
        shapes = {k: tuple(v) for k, v in probe["inputs"].items()}
        plan = model.compute_plan(shapes, chip, probe["computeUnits"], warn=False, precision=None)
        row = {"id": pid, "kind": probe["kind"], "question": probe["question"], "ops": [], "agree": None}
        if seen.get("plan") is not None:
            observed = plan_devices(f"{pid} in the results", seen["plan"])
            ops = [o for o in plan.ops if o.operator == probe["op"]]
            cmp = compare_ops([(o.label, o.outputs, o.preferred) for o in ops], observed)
            row["ops"] = cmp["rows"]
            matched = [r for r in cmp["rows"] if r[2] is not None]
            row["agree"] = (cmp["agree"], len(matched))
        t = seen.get("time_ms")
        if t is not None and probe["kind"] == "latency":
            pred = analyze(model, chip, params, shapes=shapes).total.time_s * 1e3
            row.update(predicted_ms=pred, measured_ms=float(t["median"]), ratio=pred / float(t["median"]))
            # fastane's time is the ANE's: a probe the Mac ran elsewhere measures another unit
            row["comparable"] = all(m == "ane" for _, _, m in row["ops"]) if row["ops"] else None
        rows.append(row)
    return rows
