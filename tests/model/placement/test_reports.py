"""The public placement reports (fastane/model/placement/reports.json): the file parses, every
record names its source, and the fields docs/models.md counts by are filled."""

import json
from pathlib import Path

import fastane.model.placement as placement

REPORTS = Path(placement.__file__).with_name("reports.json")
FIELDS = {
    "id",
    "op",
    "op_set",
    "shapes",
    "dtype",
    "params",
    "chip",
    "os",
    "compute_units",
    "observed",
    "evidence",
    "quote",
    "source",
    "date",
    "buildable",
    "buildable_why",
    "uncertain",
    "set",
    "set_why",
}
SETS = {"derive", "check", ""}
EVIDENCE = {"compute_plan", "xcode_report", "compiler_log", "statement", "documentation"}


def _reports():
    return json.loads(REPORTS.read_text(encoding="utf-8"))["reports"]


def test_every_record_has_its_fields_and_a_source():
    reports = _reports()
    assert reports
    for r in reports:
        assert set(r) == FIELDS, r.get("id")
        assert r["source"].startswith("https://"), r["id"]
        assert r["op"] and r["observed"] and r["quote"], r["id"]
        assert r["evidence"] in EVIDENCE, r["id"]
        assert isinstance(r["buildable"], bool) and r["buildable_why"], r["id"]
        assert len(r["quote"].split()) <= 25, r["id"]
        # a rebuildable report is in the derivation or the check set, with the reason
        assert r["set"] in SETS and (r["set"] != "") == r["buildable"] and r["set_why"], r["id"]


def test_ids_are_unique():
    ids = [r["id"] for r in _reports()]
    assert len(ids) == len(set(ids))


def _cited(text: str) -> set:
    """The report ids (of the file's prefixes: ``a1111-...``, ``vx435-...``) ``text`` names;
    chip keys (``a14``, ``m4``) are not reports."""
    import re

    from fastane.roofline import chips

    prefixes = {re.match(r"[a-z]+", i).group() for i in _ids()}
    return {
        m.group()
        for m in re.finditer(r"\b[a-z]+\d+(?:-[A-Za-z0-9]+)*", text)
        if re.match(r"[a-z]+", m.group()).group() in prefixes and m.group() not in chips.CHIPS
    }


def _ids() -> set:
    return {r["id"] for r in json.loads(REPORTS.read_text())["reports"]}


def test_every_report_the_rules_cite_is_in_the_file():
    """A report id predict.py cites (in a comment or a reason) names a record of the file."""
    cited = _cited(Path(placement.__file__).with_name("predict.py").read_text())
    assert cited, "predict.py cites no report"
    assert sorted(cited - _ids()) == []


def test_every_report_the_ane_generations_cite_is_in_the_file():
    """A report id a family record of the chip table cites (its limits' sources and notes,
    its size floor) names a record of the file."""
    from fastane.roofline import chips

    figures = [
        *(
            getattr(f, n)
            for f in chips.FAMILIES.values()
            for n in ("max_extent", "max_channels", "max_rank", "kmem_core_bytes")
        ),
        *(
            x
            for f in chips.FAMILIES.values()
            if f.size_floor
            for x in (*f.size_floor.matmul, *f.size_floor.attention)
        ),
    ]
    text = " ".join(f"{x.source} {x.note}" for x in figures)
    cited = _cited(text)
    assert cited >= {"a1111-13527-matmul-w23040", "rustane13-width-16384", "et7907-transpose-w32000"}
    assert sorted(cited - _ids()) == []


def test_the_floors_cite_derivation_reports():
    """Every figure of a size floor of the chip table (``Family.size_floor`` and the program
    floors) and of the linear width cites reports of the file's derivation set: a rule's
    figures are taken from those, never from a check report."""
    from fastane.roofline import chips

    figures = []
    for f in chips.FAMILIES.values():
        if f.size_floor:
            figures += [*f.size_floor.matmul, *f.size_floor.attention]
        for floor in (f.linear_depth, f.linear_depth_int8, f.conv1x1_weights, f.fp32_gpu, f.no_matrix):
            figures += [floor.cpu, floor.other] if floor else []
        figures += [f.linear_width] if f.linear_width else []
    sets = {r["id"]: r["set"] for r in json.loads(REPORTS.read_text())["reports"]}
    sources = {x.source for x in figures}
    assert len(sources) == 17 and {sets[s] for s in sources} == {"derive"}, sources
