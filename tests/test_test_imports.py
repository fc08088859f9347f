"""The tests' own import rule: no module under tests/ imports a test module (a
``test_*.py``), by any name -- ``test_mac``, ``tests.kernels.test_mac``, ``from
tests.kernels import test_mac``, a relative import or ``importlib.import_module``.  What
tests share lives in tests/helpers/ (imported as ``tests.helpers.X``), fixtures in
tests/conftest.py.  And every folder of tests/ is a package, so two test files of one
basename in different folders do not clash (tests/fuzz/ excepted: harness.py is run as a
script and its test imports it as ``harness``)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: folders of tests/ that are not packages, and why (see the module docstring)
NOT_PACKAGES = {"fuzz", "__pycache__"}


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _test_modules() -> set[str]:
    """Every name a test module can be imported by: dotted (tests.kernels.test_mac) and
    bare (test_mac, its folder on sys.path)."""
    names = set()
    for p in TESTS.rglob("test_*.py"):
        names |= {_dotted(p), p.stem}
    return names


def imported(source: str, path: Path) -> set[str]:
    """The modules ``source`` (the text of the file at ``path``) imports, as dotted names;
    ``from a import b`` names both ``a`` and ``a.b`` (b may be a module)."""
    package = path.relative_to(ROOT).parent.parts
    out = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = list(package[: len(package) - node.level + 1]) if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            if base:
                out.add(base)
            out |= {f"{base}.{a.name}" if base else a.name for a in node.names}
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.add(node.args[0].value)
    return out


def test_the_rule_sees_every_form_of_import():
    here = TESTS / "kernels" / "test_x.py"
    forms = {
        "import test_mac": "test_mac",
        "from test_mac import ref": "test_mac",
        "import tests.kernels.test_mac as m": "tests.kernels.test_mac",
        "from tests.kernels import test_mac": "tests.kernels.test_mac",
        "from . import test_mac": "tests.kernels.test_mac",
        "from .test_mac import ref": "tests.kernels.test_mac",
        "from ..device.test_planar import ref": "tests.device.test_planar",
        "importlib.import_module('test_mac')": "test_mac",
    }
    for source, name in forms.items():
        assert name in imported(source, here), source
    assert imported("from tests.helpers.reference import ref_matmul", here) == {
        "tests.helpers.reference",
        "tests.helpers.reference.ref_matmul",
    }


def test_no_module_under_tests_imports_a_test_module():
    tests = _test_modules()
    assert {"test_test_imports", "tests.test_test_imports"} <= tests
    found = {}
    for p in sorted(TESTS.rglob("*.py")):
        hits = sorted(imported(p.read_text(), p) & tests)
        if hits:
            found[str(p.relative_to(ROOT))] = hits
    assert found == {}, "move what they share to tests/helpers/"


def test_every_folder_of_tests_is_a_package():
    folders = {p.parent for p in TESTS.rglob("*.py")} - {TESTS}
    missing = sorted(
        str(d.relative_to(ROOT))
        for d in folders
        if not (d / "__init__.py").is_file() and not NOT_PACKAGES & set(d.relative_to(TESTS).parts)
    )
    assert (TESTS / "__init__.py").is_file()
    assert missing == []
