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


def test_every_report_the_rules_cite_is_in_the_file():
    """A report id predict.py cites (in a comment or a reason) names a record of the file."""
    import re

    from fastane.roofline import chips

    ids = {r["id"] for r in json.loads(REPORTS.read_text())["reports"]}
    names = set(chips.CHIPS)  # a14, m4 ...: chips, not reports
    prefixes = {re.match(r"[a-z]+", i).group() for i in ids}
    source = Path(placement.__file__).with_name("predict.py").read_text()
    cited = {
        m.group()
        for m in re.finditer(r"\b[a-z]+\d+(?:-[A-Za-z0-9]+)*", source)
        if re.match(r"[a-z]+", m.group()).group() in prefixes and m.group() not in names
    }
    assert cited, "predict.py cites no report"
    assert sorted(cited - ids) == []
