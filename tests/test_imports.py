"""The import contract: imports flow one way, and no module imports itself in a circle.

    cli, demo  ->  fastane (the public names)  ->  front end (api, activations, model)
      ->  roofline  ->  lower  ->  device  ->  td, lut  ->  base (errors, errstate, stats, operands),
      workloads  ->  m1, kernels

Every module of fastane (and of ``kernels/``, installed as ``fastane.kernels``) is parsed
with :mod:`ast`; every import counts, at module level or inside a function (and
``importlib.import_module("fastane...")`` with a literal name).  A module may import a
module of its own group, or of a group of a lower rank (:data:`RANKS`).  ``fastane.kernels``
imports nothing of fastane but ``fastane.m1``: kernels are pure functions over arrays.
The base modules (errors, errstate, stats, operands: the one rounding of user input) may
be imported by anything above the kernels.
A top-level module or package not listed in :data:`RANKS` (a new front end) counts as
the front end: it may import anything below, and nothing below may import it.

``fastane.networks`` (the built-in roofline networks as model graphs, their plan and the
``fastane roofline`` command) is front end: a network is planned the way a model file is,
through ``fastane.model``, so it sits beside the model front end, above ``roofline`` (the
chips, the time model, the per-task estimate, the reports' formats).  ``workloads`` stays
at rank 1: the networks' layer shapes, which ``networks`` turns into graphs.

Inside :mod:`fastane.model` the data path has its own order (:data:`MODEL_RANKS`):

    tools (cli, sweep_cli, plan_cli, report_cli, eval_cli, zoo, probes, probes_cli)  ->  evaluate  ->  fastane.model (load_model)
      ->  run
      ->  frontends, placement  ->  graph (graph, cost, control)  ->  ops  ->  core (tensor, budget, files)

and no module imports a private name (``_x``) of another module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: group -> rank; imports go to the same group or to a lower rank
RANKS = {
    "m1": 0,
    "kernels": 0,
    "base": 1,
    "workloads": 1,
    "td": 2,
    "lut": 2,
    "device": 3,
    "lower": 4,
    "roofline": 5,
    "frontend": 6,
    "package": 7,  # fastane/__init__.py: the public names
    "app": 8,  # the command line and its demo, on the public names
}
#: top-level names of fastane -> group (anything else: "frontend")
GROUPS = {
    "m1": "m1",
    "kernels": "kernels",
    "errors": "base",
    "errstate": "base",
    "stats": "base",
    "operands": "base",
    "workloads": "workloads",
    "layers": "workloads",
    "convnets": "workloads",
    "fastvit": "workloads",
    "unet": "workloads",
    "td": "td",
    "lut": "lut",
    "activation_table": "lut",
    "lut_codec": "lut",
    "lut_tables": "lut",
    "device": "device",
    "lower": "lower",
    "roofline": "roofline",
    "networks": "frontend",
    "model": "frontend",
    "": "package",
    "cli": "app",
    "demo": "app",
}


#: group of fastane.model -> rank; the same rule as :data:`RANKS`
MODEL_RANKS = {
    "core": 0,
    "ops": 1,
    "graph": 2,
    "frontends": 3,
    "placement": 3,
    "run": 4,
    "package": 5,  # fastane/model/__init__.py: load_model and the public names
    "evaluate": 6,  # dataset-scale evaluation: loads models (package) and runs them
    "tools": 7,
}
#: module or sub-package of fastane.model -> group (a sub-package is its own group)
MODEL_GROUPS = {
    "tensor": "core",
    "budget": "core",
    "files": "core",
    "graph": "graph",
    "cost": "graph",
    "control": "graph",
    "": "package",
    "cli": "tools",
    "sweep_cli": "tools",
    "plan_cli": "tools",
    "report_cli": "tools",
    "eval_cli": "tools",
    "zoo": "tools",
    "probes": "tools",
    "probes_cli": "tools",
}


def modules() -> dict:
    """``{dotted name: path}`` of every module of fastane and fastane.kernels."""
    out = {}
    for base, pkg in ((ROOT / "fastane", "fastane"), (ROOT / "kernels", "fastane.kernels")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg] + parts)] = path
    return out


def _resolve(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(mod: str, source: str, is_pkg: bool, known) -> set:
    """The fastane modules ``mod`` imports (``from X import y`` counts as X.y when that is a
    module, else as X)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, is_pkg, node.level, node.module)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for t in targets:
            while t and t not in known:  # import a.b.c: the deepest fastane module named
                t = t.rpartition(".")[0]
            if t.startswith("fastane") and t != mod:
                out.add(t)
    return out


def graph() -> dict:
    mods = modules()
    return {m: imports_of(m, p.read_text(), p.name == "__init__.py", mods) for m, p in mods.items()}


def group(mod: str) -> str:
    if mod.startswith("fastane.kernels"):
        return "kernels"
    top = mod.split(".")[1] if mod.count(".") else ""
    return GROUPS.get(top, "frontend")


def violations(g: dict) -> list:
    """Imports against the layer order, as ``(importer, imported, why)``."""
    bad = []
    for a, targets in g.items():
        ga = group(a)
        for b in sorted(targets):
            gb = group(b)
            if ga == "kernels" and gb not in ("kernels", "m1"):
                bad.append((a, b, "fastane.kernels imports nothing of fastane but fastane.m1"))
            elif ga != gb and RANKS[gb] >= RANKS[ga]:
                bad.append((a, b, f"{ga} (rank {RANKS[ga]}) may not import {gb} (rank {RANKS[gb]})"))
    return bad


def model_group(mod: str) -> str:
    """The group of a module of :mod:`fastane.model` (:data:`MODEL_GROUPS`; a sub-package
    not listed there is its own group)."""
    sub = mod.split(".")[2] if mod.count(".") >= 2 else ""
    return MODEL_GROUPS.get(sub, sub)


def model_violations(g: dict) -> list:
    """Imports inside :mod:`fastane.model` against :data:`MODEL_RANKS`, as ``(importer, imported, why)``."""
    bad = []
    for a, targets in g.items():
        if not (a == "fastane.model" or a.startswith("fastane.model.")):
            continue
        ga = model_group(a)
        for b in sorted(targets):
            if not (b == "fastane.model" or b.startswith("fastane.model.")):
                continue
            gb = model_group(b)
            ra, rb = MODEL_RANKS.get(ga), MODEL_RANKS.get(gb)
            if ra is None or rb is None:
                bad.append((a, b, f"no rank for {ga if ra is None else gb} in MODEL_RANKS"))
            elif ga != gb and rb >= ra:
                bad.append((a, b, f"model.{ga} (rank {ra}) may not import model.{gb} (rank {rb})"))
    return bad


def private_imports(mod: str, source: str, is_pkg: bool, known) -> list:
    """``(line, module, name)`` for each private name (``_x``, not a dunder) that ``mod``
    imports from another fastane module (``from X import _y``; a package importing from its
    own sub-module counts too)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _resolve(mod, is_pkg, node.level, node.module)
        if not base.startswith("fastane") or base == mod:
            continue
        for a in node.names:
            if a.name.startswith("_") and not a.name.startswith("__"):
                out.append((node.lineno, base, a.name))
    return out


def cycles(g: dict) -> list:
    """Every module that lies on an import circle, with one circle through it."""
    found, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                found.append(stack[stack.index(n) :] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    return found


@pytest.fixture(scope="module")
def g():
    return graph()


def test_every_module_is_seen(g):
    for m in (
        "fastane.m1",
        "fastane.kernels.mac",
        "fastane.td.asm",
        "fastane.device.engine",
        "fastane.lower.emit",
        "fastane.roofline.plan",
        "fastane.model.placement.plan",
        "fastane.api",
        "fastane",
    ):
        assert m in g, m
    assert "fastane.m1" in g["fastane.td.asm"] and "fastane.lower" in g["fastane.model.placement.plan"]
    assert "fastane.td.planar" in g["fastane.device.tile_dma"]
    assert "fastane.lut" in g["fastane.device.ne"]  # importlib.import_module("fastane.lut")


def test_m1_is_the_bottom(g):
    assert g["fastane.m1"] == set()


def test_imports_flow_one_way(g):
    bad = violations(g)
    assert not bad, "\n".join(f"{a} imports {b}: {why}" for a, b, why in bad)


def test_no_import_circles(g):
    found = cycles(g)
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_model_imports_follow_the_data_path(g):
    assert {model_group(m) for m in g if m.startswith("fastane.model")} == set(MODEL_RANKS)
    bad = model_violations(g)
    assert not bad, "\n".join(f"{a} imports {b}: {why}" for a, b, why in bad)


def test_no_private_names_across_modules():
    """Every module of ``fastane/`` (``kernels/`` is left to its own conventions: njit helpers
    shared between kernel modules)."""
    mods = modules()
    found = [
        f"{p.relative_to(ROOT)}:{line}: from {src} import {name}"
        for m, p in mods.items()
        if not m.startswith("fastane.kernels")
        for line, src, name in private_imports(m, p.read_text(), p.name == "__init__.py", mods)
    ]
    assert not found, "\n".join(found)


def test_a_planted_bad_import_is_caught(g):
    """The checks are not vacuous: an upward import and a circle are both found."""
    planted = {m: set(t) for m, t in g.items()}
    planted["fastane.td.asm"].add("fastane.device.planar")  # td -> device: upward
    assert ("fastane.td.asm", "fastane.device.planar") in [(a, b) for a, b, _ in violations(planted)]
    planted["fastane.kernels.fp16"] = {"fastane.stats"}  # a kernel importing the front
    assert any(a == "fastane.kernels.fp16" for a, _, _ in violations(planted))
    planted["fastane.td.codec"].add("fastane.td.program")  # td.program -> td.codec -> back
    assert any("fastane.td.codec" in c for c in cycles(planted))
    src = "def f():\n    from ..device import planar\n"  # function-level, relative
    assert imports_of("fastane.td.asm", src, False, g) == {"fastane.device.planar"}
    planted["fastane.model.ops.core"].add("fastane.model.placement.place")  # ops -> placement: upward
    assert ("fastane.model.ops.core", "fastane.model.placement.place") in [
        (a, b) for a, b, _ in model_violations(planted)
    ]
    planted["fastane.model.placement.rules"].add("fastane.model.frontends.onnx.importer")  # same rank
    assert any(a == "fastane.model.placement.rules" for a, _, _ in model_violations(planted))
    src = "from .opdef import OPS, _need\nfrom . import core\n"  # a private name of a sibling
    assert private_imports("fastane.model.ops.mac", src, False, g) == [
        (1, "fastane.model.ops.opdef", "_need")
    ]
    src = "def f():\n    from .importer import _parse\n"  # a package from its own sub-module
    assert private_imports("fastane.model.frontends.coreml", src, True, g) == [
        (2, "fastane.model.frontends.coreml.importer", "_parse")
    ]
    assert private_imports("fastane.model.ops.mac", "from numpy import _x\n", False, g) == []


def test_every_package_is_installed():
    """pyproject.toml names every package of fastane (setuptools installs only those)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"fastane.kernels"} | {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "fastane").rglob("__init__.py")
    }
    assert listed == found


def test_public_surface():
    import types

    import fastane
    import fastane.lower
    import fastane.model
    import fastane.model.frontends.coreml
    import fastane.model.frontends.onnx
    import fastane.model.ops
    import fastane.model.placement
    import fastane.model.run

    subpackages = [fastane.model.ops, fastane.model.placement, fastane.model.run]
    subpackages += [fastane.model.frontends.onnx, fastane.model.frontends.coreml]
    for mod in subpackages:
        assert 0 < len(mod.__all__) <= 8, mod.__name__
    for mod in (fastane, fastane.lower, fastane.model, *subpackages):
        assert len(mod.__all__) == len(set(mod.__all__))
        for name in mod.__all__:
            assert hasattr(mod, name), (mod.__name__, name)
            assert not isinstance(getattr(mod, name), types.ModuleType), (mod.__name__, name)
    ns = {}
    exec("from fastane import *", ns)
    assert set(ns) - {"__builtins__"} == set(fastane.__all__)
    assert len(fastane.lower.__all__) <= 16
    # no name of the lowering shadows a different public function of the same name
    assert not set(fastane.lower.__all__) & set(fastane.__all__)
