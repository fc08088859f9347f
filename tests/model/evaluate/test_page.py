"""The evaluation's HTML page (:mod:`fastane.model.evaluate.page`, ``Evaluation.html``,
``fastane eval --html``): a valid, self-contained page whose summary, changed inputs, layer
table and heat map say what the evaluation's summary says."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("onnx", reason="the evaluation tests build their model with onnx (the onnx extra)")
pytest.importorskip("onnxruntime", reason="the ONNX reference is onnxruntime (the onnx extra)")
pytest.importorskip("jinja2", reason="the page is rendered by Jinja2 (the report extra)")
html5lib = pytest.importorskip(
    "html5lib", reason="the page is parsed by html5lib in strict mode (the test extra)"
)

import fastane  # noqa: E402
from fastane.cli import main  # noqa: E402
from fastane.model.evaluate.metrics import ERROR_BINS  # noqa: E402
from tests.helpers.evaluate import labelled_job  # noqa: E402

NS = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
N = 37


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalpage")
    model, data, _, _ = labelled_job(d, N, big=2)
    return model, str(data)


@pytest.fixture(scope="module")
def evaluation(files):
    model, data = files
    return fastane.evaluate(model, data, f"{data}:labels", batch=5, workers=1, progress=False)


@pytest.fixture(scope="module")
def page(evaluation):
    return evaluation.html()


def parse(page: str):
    """The page parsed by html5lib in strict mode: any parse error (invalid HTML) raises."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=True).parse(page)


def by_id(doc, tag: str, ident: str):
    return next(e for e in doc.iter(tag) if e.get("id") == ident)


def text(e) -> str:
    return " ".join("".join(e.itertext()).split())


def test_the_page_is_valid_html_and_names_no_url(page):
    parse(page)
    assert "http" not in page
    assert not re.search(r"(?i)(ftp|file|data):", page) and "url(" not in page and "@import" not in page
    assert not re.search(r"(?i)\b(src|srcset|action)\s*=", page)
    assert all(h.startswith("#") for h in re.findall(r'(?i)\bhref="([^"]*)"', page))


def test_the_summary_shows_the_agreement_accuracy_and_run(evaluation, page):
    s, doc = evaluation.summary, parse(page)
    a, acc = s["agreement"], s["accuracy"]
    assert a["of"] == N and 0 < a["agree"] < N  # the two saturating inputs change their answer
    assert f"{a['agree']} of {a['of']} inputs" in page and f"{100 * a['fraction']:.2f}%" in text(
        by_id(doc, f"{NS}div", "agreement")
    )
    shown = text(by_id(doc, f"{NS}div", "accuracy"))
    assert shown == f"float32 {100 * acc['reference']:.2f}%, ANE {100 * acc['ane']:.2f}%"
    assert f"accuracy on {N} labelled inputs" in page
    assert f"{acc['reference_correct']} and {acc['ane_correct']} correct" in page
    assert "on 1 worker" in text(by_id(doc, f"{NS}div", "run")) and "0 retried" in page
    assert "onnxruntime" in page and "M1" in page and s["data"] in page


def test_the_changed_inputs_are_a_table(evaluation, page):
    changed = evaluation.summary["changed"]
    assert changed, "the two saturating inputs change their answer"
    table = by_id(parse(page), f"{NS}table", "changed-table")
    got = [[text(td) for td in tr.iter(f"{NS}td")] for tr in table.find(f"{NS}tbody").iter(f"{NS}tr")]
    assert got == [[str(c[k]) for k in ("index", "id", "ref", "ane", "label")] for c in changed]


def test_the_layer_table_has_every_layer_in_model_order(evaluation, page):
    layers = evaluation.summary["layers"]
    table = by_id(parse(page), f"{NS}table", "layer-table")
    trs = list(table.find(f"{NS}tbody").iter(f"{NS}tr"))
    assert [tr.get("data-name") for tr in trs] == [L["name"] for L in layers]
    (sat,) = [L for L in layers if L["saturated"]]
    cells = [text(td) for td in trs[[L["name"] for L in layers].index(sat["name"])].iter(f"{NS}td")]
    assert cells[:8] == [
        sat["name"],
        sat["op"],
        "ane",
        str(sat["inputs"]),
        str(sat["beyond"]),
        str(sat["first"]),
        "2",
        str(sat["lut_inputs"]),
    ]
    assert cells[8] == "inf" and cells[9].split(", ")[:2] == [str(N - 2), str(N - 1)]


def test_the_heat_map_is_layers_by_bins_with_the_counts_in_titles(evaluation, page):
    layers = evaluation.summary["layers"]
    svg = by_id(parse(page), f"{SVG}svg", "heatmap-svg")
    cells = [g for g in svg.iter(f"{SVG}g") if "cell" in (g.get("class") or "").split()]
    assert len(cells) == len(layers) * len(ERROR_BINS) == len(layers) * 9
    for k, g in enumerate(cells):
        L, b = layers[k // 9], k % 9
        count = L["histogram"][b]
        title = g.find(f"{SVG}title").text
        assert title == (
            f"{L['name']}: {count} of {L['inputs']} inputs ({100 * count / L['inputs']:.1f}%) "
            f"with error {ERROR_BINS[b]}"
        )
        opacity = float(g.find(f"{SVG}rect").get("fill-opacity"))
        assert (
            opacity == 0
            if not count
            else opacity == pytest.approx(0.08 + 0.92 * count / L["inputs"], abs=1e-3)
        )
    (sat,) = [i for i, L in enumerate(layers) if L["saturated"]]
    assert "bad" in cells[sat * 9 + 8].get("class") and layers[sat]["histogram"][8] == 2


def _cli(capsys, *argv):
    rc = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_eval_html_writes_the_page(files, tmp_path, capsys):
    model, data = files
    out = tmp_path / "eval.html"
    rc, stdout, err = _cli(
        capsys, "eval", model, data, "--labels", f"{data}:labels", "--workers", "1", "--html", out
    )
    assert rc == 0 and f"{N} inputs" in stdout and f"wrote {out}" in err
    doc = parse(out.read_text())
    assert text(by_id(doc, f"{NS}div", "accuracy")).startswith("float32 ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.html"]  # no temporary file left


@pytest.mark.parametrize(
    "where, message", [("missing/e.html", "no such folder"), (".", "a folder, not a file")]
)
def test_a_bad_page_path_is_one_line_before_any_work(files, tmp_path, capsys, monkeypatch, where, message):
    import fastane.model.evaluate as ev

    def never(*a, **k):
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(ev, "evaluate", never)
    model, data = files
    rc, out, err = _cli(capsys, "eval", model, data, "--html", tmp_path / where)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err
    assert err.startswith("fastane eval: error:")
    assert list(tmp_path.iterdir()) == []


def test_without_jinja2_the_page_is_one_line(files, tmp_path, capsys, monkeypatch, evaluation):
    import sys

    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(RuntimeError, match=r"pip install 'fastane\[report\]'"):
        evaluation.html()
    model, data = files
    rc, out, err = _cli(capsys, "eval", model, data, "--html", tmp_path / "e.html")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "pip install 'fastane[report]'" in err and list(tmp_path.iterdir()) == []
