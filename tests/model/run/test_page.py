"""The HTML report (:mod:`fastane.model.run.page`, ``fastane report``, ``fastane run --html``): a
valid, self-contained page whose table, graph, bars and roofline say what the report and the
compute plan say (each checked against them, computed apart)."""

import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("jinja2")
html5lib = pytest.importorskip("html5lib")

import fastane  # noqa: E402
from fastane.cli import main  # noqa: E402
from fastane.model import zoo  # noqa: E402
from fastane.model.run.page import NODE_H, NODE_W, chip_times, layout, render  # noqa: E402
from fastane.roofline import chips  # noqa: E402
from fastane.roofline.result import format_time  # noqa: E402
from tests.helpers.page import SHAPE, Z_SHAPE, mixed_model  # noqa: E402

NS = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return fastane.load_model(mixed_model(tmp_path_factory.mktemp("page") / "mixed.onnx"))


@pytest.fixture(scope="module")
def saturating(mixed):
    """The mixed model's page on an input that saturates conv1: (report, plan, page)."""
    inputs = {"x": np.full(SHAPE, 500, np.float32), "z": np.ones(Z_SHAPE, np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = mixed.report(inputs)
    plan = mixed.compute_plan(inputs, warn=False, report=rep)
    return rep, plan, mixed.html_report(inputs, report=rep, plan=plan)


def parse(page: str):
    """The page parsed by html5lib in strict mode: any parse error (invalid HTML) raises."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=True).parse(page)


def rows(doc) -> list:
    table = next(t for t in doc.iter(f"{NS}table") if t.get("id") == "layer-table")
    return [tr for tr in table.iter(f"{NS}tr") if tr.get("data-name") is not None]


def test_the_page_is_valid_html_and_names_no_url(saturating):
    _, _, page = saturating
    parse(page)
    assert not re.search(r"(?i)(https?|ftp|file|data):", page)
    assert not re.search(r"(?i)\b(src|srcset|action)\s*=", page)
    assert re.findall(r'(?i)\bhref="([^"]*)"', page) and all(
        h.startswith("#") for h in re.findall(r'(?i)\bhref="([^"]*)"', page)
    )
    assert "@import" not in page and "url(" not in page


def test_every_layer_is_a_row_with_its_predicted_device_and_placement(saturating):
    rep, plan, page = saturating
    got = [(tr.get("data-name"), tr.get("data-device"), tr.get("data-placement")) for tr in rows(parse(page))]
    by_layer = plan.by_layer()
    assert got == [(r.layer.name, by_layer[r.layer.name][0].preferred, r.placement) for r in rep.layers]
    assert ("up", "cpu", "host") in got and ("conv1", "ane", "ane") in got


def test_the_first_divergence_and_the_layers_it_reaches_are_marked(saturating):
    rep, _, page = saturating
    assert rep.first_bad == "conv1"
    doc = parse(page)
    marked = {
        g.get("data-name")
        for g in doc.iter(f"{SVG}g")
        if "node" in (g.get("class") or "").split() and "bad" in g.get("class").split()
    }
    assert marked == {"conv1", "up", "conv2"}  # not conv3, which reads only z
    beyond = {tr.get("data-name") for tr in rows(doc) if "beyond" in (tr.get("class") or "")}
    assert beyond == {r.layer.name for r in rep.layers if not r.ok} and "conv1" in beyond
    first = next(e for e in doc.iter(f"{NS}div") if e.get("id") == "first-bad")
    assert "conv1" in "".join(first.itertext())


def test_the_bars_are_each_chips_stats_only_prediction(mixed):
    shapes = {"x": SHAPE, "z": Z_SHAPE}
    times = chip_times(mixed.report(shapes, "m4", stats_only=True))
    assert [c.key for c, _ in times] == chips.names()
    for c, t in times:  # the chip's own stats-only report, planned apart
        assert t == mixed.report(shapes, c.key, stats_only=True).total.time_s
    page = mixed.html_report(shapes, chip="m4", stats_only=True)
    doc = parse(page)
    bars = next(s for s in doc.iter(f"{SVG}svg") if s.get("id") == "bars")
    groups = [g for g in bars.iter(f"{SVG}g")]
    assert len(groups) == len(chips.names())
    shown = [[t.text for t in g.iter(f"{SVG}text")] for g in groups]
    assert shown == [[c.name, format_time(t)] for c, t in times]
    assert [g.get("class") for g in groups].count("current") == 1
    assert groups[chips.names().index("m4")].get("class") == "current"


def test_stats_only_pages_say_so_and_have_no_errors(mixed):
    page = mixed.html_report({"x": SHAPE, "z": Z_SHAPE}, stats_only=True)
    doc = parse(page)
    assert "Counted from the shapes alone" in page
    first = next(e for e in doc.iter(f"{NS}div") if e.get("id") == "first-bad")
    assert "".join(first.itertext()).strip() == "not computed"


def _edges(drawing) -> list:
    """Each edge's first and last point."""
    out = []
    for e in drawing.edges:
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", e["d"])]
        out.append(((nums[0], nums[1]), (nums[-2], nums[-1])))
    return out


def test_the_layout_joins_each_producer_to_its_readers_and_nothing_overlaps(tmp_path):
    path = tmp_path / "resnet.onnx"
    onnx.save(zoo.resnet(seed=0, width=8, size=16), str(path))
    m = fastane.load_model(str(path))
    rep = m.report({"x": (1, 3, 16, 16)}, stats_only=True)
    d = layout(rep)
    nodes = {n["name"]: n for n in d.nodes}
    assert [n["name"] for n in d.nodes if n["layer"]] == [r.layer.name for r in rep.layers]
    made = {t: r.layer.name for r in rep.layers for t in r.layer.outputs}
    want = set()
    for r in rep.layers:
        for t in set(r.layer.inputs):
            if t:
                want.add((made.get(t, t), r.layer.name))
    ends = set()
    for (x0, y0), (x1, y1) in _edges(d):
        src = [
            n for n in d.nodes if abs(n["x"] + NODE_W / 2 - x0) < 0.11 and abs(n["y"] + NODE_H - y0) < 0.11
        ]
        dst = [n for n in d.nodes if abs(n["x"] + NODE_W / 2 - x1) < 0.11 and abs(n["y"] - y1) < 0.11]
        assert len(src) == 1 and len(dst) == 1
        assert src[0]["y"] < dst[0]["y"]  # downwards: a reader is ranked below what it reads
        ends.add((src[0]["name"], dst[0]["name"]))
    assert ends == want and len(d.edges) == len(want)
    assert any(abs(nodes[a]["y"] - nodes[b]["y"]) > NODE_H + 40 for a, b in want)  # a skip edge exists
    for a in d.nodes:
        assert 0 <= a["x"] and a["x"] + NODE_W <= d.width and a["y"] + NODE_H <= d.height
        for b in d.nodes:
            if a is not b and a["y"] == b["y"]:
                assert abs(a["x"] - b["x"]) >= NODE_W


def test_the_roofline_has_one_point_per_ane_layer_in_order_of_intensity(saturating):
    rep, _, page = saturating
    doc = parse(page)
    pts = [c for c in doc.iter(f"{SVG}circle")]
    est = [r.estimate for r in rep.layers if r.estimate is not None and r.estimate.ops > 0]
    assert len(pts) == len(est) == 3
    xs = [float(c.get("cx")) for c in pts]
    for i in range(3):
        for j in range(3):
            if abs(est[i].intensity / est[j].intensity - 1) > 1e-3:
                assert (xs[i] < xs[j]) == (est[i].intensity < est[j].intensity)
    assert [c.get("class").split()[1] for c in pts] == [e.limiter for e in est]


def test_render_escapes_names(mixed, saturating):
    rep, plan, _ = saturating
    rep.layers[0].layer.name = "<script>alert(1)</script>"
    try:
        page = render(rep, plan)
    finally:
        rep.layers[0].layer.name = "conv1"
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    parse(page)


def _cli(capsys, *argv):
    rc = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_fastane_report_writes_the_page(tmp_path, capsys):
    model = mixed_model(tmp_path / "m.onnx")
    out = tmp_path / "r.html"
    rc, _, err = _cli(capsys, "report", model, "-o", out)
    assert rc == 0 and f"wrote {out}" in err and "Counted from the shapes alone" in out.read_text()
    rc, _, err = _cli(capsys, "report", model, "-o", out, "--random")
    assert rc == 0 and "fastane report: input 'x': random float32[1x8x8x8] (seed 0)" in err
    rc, _, err = _cli(capsys, "report", model, "-o", out, "--random", "--chip", "a14", "-q")
    page = out.read_text()
    assert rc == 0 and err == "" and "Counted from the shapes" not in page and "on the A14 Bionic" in page
    assert oct(out.stat().st_mode & 0o777) != "0o600"  # an ordinary file, not the temporary's mode


def test_run_html_with_the_report(tmp_path, capsys):
    model = mixed_model(tmp_path / "m.onnx")
    out = tmp_path / "r.html"
    rc, stdout, err = _cli(
        capsys, "run", model, "--random", "--html", out, "--report", "--compute-units", "CPU_AND_NE"
    )
    assert rc == 0 and "first layer beyond its tolerance" in stdout and "CPU_AND_NE" in out.read_text()
    rc, stdout, _ = _cli(capsys, "run", model, "--random", "--html", out)
    assert rc == 0 and stdout.splitlines() == ["y: float16[1x4x16x16]", "y2: float16[1x4x16x16]"]


@pytest.mark.parametrize(
    "where, message",
    [
        ("missing/r.html", "no such folder"),
        (".", "a folder, not a file"),
    ],
)
def test_a_bad_output_path_is_one_line_before_any_work(tmp_path, capsys, where, message):
    model = mixed_model(tmp_path / "m.onnx")
    for argv in (
        ["report", model, "-o", tmp_path / where],
        ["run", model, "--random", "--html", tmp_path / where],
    ):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_bad_model_leaves_no_page(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    rc, _, err = _cli(capsys, "report", bad, "-o", tmp_path / "r.html")
    assert rc == 2 and "fastane report: error:" in err and not (tmp_path / "r.html").exists()


def test_import_fastane_does_not_import_jinja2():
    code = "import sys, fastane, fastane.model.run.page; sys.exit('jinja2' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_without_jinja2_the_page_says_what_to_install(tmp_path, capsys, monkeypatch, saturating):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    rep, plan, _ = saturating
    with pytest.raises(RuntimeError, match=r"pip install 'fastane\[report\]'"):
        render(rep, plan)
    rc, _, err = _cli(capsys, "report", mixed_model(tmp_path / "m.onnx"), "-o", tmp_path / "r.html")
    assert rc == 2 and "pip install 'fastane[report]'" in err and not (tmp_path / "r.html").exists()


def test_the_crop_column_counts_what_the_slice_crop_path_cut(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("s", 1), ("e", 8), ("a", 3))]
    node = helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="crop1")
    g = helper.make_graph(
        [node],
        "crop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        consts,
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "c.onnx"))
    m = fastane.load_model(str(tmp_path / "c.onnx"))
    x = np.array([[[[1, 5000, -5000, 4094, 4096, 2, 3, 7000]]]], np.float32)
    for chip, want in (("m1", 4), ("m4", 0)):  # 5000, -5000, 4096, 7000 past 4094 after the offset
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            doc = parse(m.html_report({"x": x}, chip=chip))
        (row,) = rows(doc)
        head = next(t for t in doc.iter(f"{NS}table") if t.get("id") == "layer-table").iter(f"{NS}th")
        col = ["".join(th.itertext()) for th in head].index("crop")
        assert [td for td in row.iter(f"{NS}td")][col].get("data-v") == str(want)
