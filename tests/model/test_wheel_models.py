"""The ONNX models PyPI packages ship in their wheels, against onnxruntime (opt-in: set
FASTANE_WHEEL_MODELS to a folder of the wheels; scripts/wheel_models.py's docstring lists
them and downloads nothing).  Each model either runs, its float32 reference matching
onnxruntime and any large fp16 difference explained by a layer the report names beyond its
tolerance, or is refused with fastane's reason (a ModelError or NotImplementedError)."""

from __future__ import annotations

import os
import runpy
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SCRIPT = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "wheel_models.py"))
FOLDER = os.environ.get(SCRIPT["ENV"])
#: fastane's float32 reference against onnxruntime (relative to the output's largest value)
REFERENCE_REL = 1e-4
#: the emulated ANE's outputs against onnxruntime, without a layer beyond its tolerance
ANE_REL = 5e-2


def _members() -> list:
    if not FOLDER:
        return ["(no folder)"]
    out = []
    for whl in sorted(Path(FOLDER).glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            out += [f"{whl.name}:{n}" for n in SCRIPT["onnx_names"](z)]
    return out or ["(no .onnx in the folder's wheels)"]


@pytest.fixture(scope="module")
def rows():
    if not FOLDER:
        pytest.skip(f"set {SCRIPT['ENV']} to a folder of wheels (scripts/wheel_models.py lists them)")
    return {(r.package, r.file): r for r in SCRIPT["rows"](FOLDER)}


@pytest.mark.parametrize("member", _members())
def test_wheel_model(rows, member):
    wheel, _, name = member.partition(":")
    assert name, f"{FOLDER}: no wheel holds an .onnx file"
    row = rows[SCRIPT["wheel_name"](Path(wheel))[0], name]
    if row.same_as:
        pytest.skip(f"the same bytes as {row.same_as}")
    if row.runs != "yes":
        assert row.refused, f"{name}: not refused with a reason but {row.blocker}"
        return
    assert row.ref_rel <= REFERENCE_REL, f"{name}: the float32 reference is {row.ref_rel:.2g} off onnxruntime"
    assert row.max_rel <= ANE_REL or row.beyond, (
        f"{name}: {row.max_rel:.2g} off onnxruntime with no layer beyond its tolerance"
    )
