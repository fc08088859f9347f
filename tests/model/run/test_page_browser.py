"""The HTML report in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, which scripts/test.sh installs where it can) driven by Selenium.  The page
loads without a console error, its filters hide exactly the rows they should (from the controls
and from the address's fragment), a column sorts, a click on the graph finds the row, and a
screenshot is saved.  Skipped, with the reason, where the browser, its driver or Selenium is
missing."""

import shutil
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("jinja2")
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="Selenium is not installed (the test extra has it)"
)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

import fastane  # noqa: E402
from fastane.model.run.page import HEADLESS_CHROMIUM  # noqa: E402
from tests.helpers.page import SHAPE, Z_SHAPE, mixed_model  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="headless Chromium is not installed (Debian: apt-get install chromium chromium-driver; "
    "scripts/test.sh installs them where it runs as root with apt-get)",
)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The mixed model's page (a computed run) and its report and plan."""
    d = tmp_path_factory.mktemp("browser")
    m = fastane.load_model(mixed_model(d / "m.onnx"))
    inputs = {"x": np.full(SHAPE, 500, np.float32), "z": np.ones(Z_SHAPE, np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = m.report(inputs)
    plan = m.compute_plan(inputs, warn=False, report=rep)
    path = d / "report.html"
    path.write_text(m.html_report(inputs, report=rep, plan=plan), encoding="utf-8")
    return path, rep, plan


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        *HEADLESS_CHROMIUM,
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=DRIVER))
    yield driver
    driver.quit()


def _open(browser, path, fragment=""):
    browser.get(path.as_uri() + fragment)
    browser.get_log("browser")  # what an earlier page logged
    browser.refresh()
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    return browser.find_elements(By.CSS_SELECTOR, "#layer-table tbody tr")


def _shown(rows) -> list:
    return [r.get_attribute("data-name") for r in rows if r.is_displayed()]


def test_the_page_loads_without_console_errors(browser, page):
    path, rep, _ = page
    rows = _open(browser, path)
    assert _shown(rows) == [r.layer.name for r in rep.layers]
    n = len(rep.layers)
    assert browser.find_element(By.ID, "shown").text == f"{n} of {n} layers"


def test_filtering_by_device_hides_the_right_rows(browser, page, tmp_path):
    path, rep, plan = page
    rows = _open(browser, path)
    by_layer = plan.by_layer()
    for device in ("cpu", "ane"):
        Select(browser.find_element(By.ID, "f-device")).select_by_value(device)
        want = [r.layer.name for r in rep.layers if by_layer[r.layer.name][0].preferred == device]
        assert want and _shown(rows) == want
        assert browser.execute_script("return location.hash") == f"#device={device}"
    assert _shown(rows) != [r.layer.name for r in rep.layers]
    browser.save_screenshot(str(tmp_path / "filtered.png"))
    assert (tmp_path / "filtered.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fragment_opens_the_page_filtered(browser, page):
    path, rep, _ = page
    rows = _open(browser, path, "#placement=host")
    assert _shown(rows) == [r.layer.name for r in rep.layers if r.placement == "host"] == ["up"]
    assert browser.find_element(By.ID, "f-placement").get_attribute("value") == "host"
    rows = _open(browser, path, "#op=nothing-of-the-kind")  # an unknown value: no filter
    assert len(_shown(rows)) == len(rep.layers)


def test_a_column_sorts_and_the_graph_finds_a_row(browser, page):
    path, rep, _ = page
    rows = _open(browser, path)
    head = browser.find_elements(By.CSS_SELECTOR, "#layer-table thead th")
    col = [h.text for h in head].index("MACs")
    head[col].click()
    macs = [r.stats.macs if r.placement == "ane" else -1 for r in rep.layers]
    got = browser.execute_script(
        "return Array.from(document.querySelectorAll('#layer-table tbody tr'))"
        f".map(r => parseFloat(r.cells[{col}].dataset.v))"
    )
    assert got == sorted(macs)
    head[col].click()
    got = browser.execute_script(
        "return Array.from(document.querySelectorAll('#layer-table tbody tr')).map(r => r.dataset.name)"
    )
    assert [r.layer.name for r in sorted(rep.layers, key=lambda r: -macs[rep.layers.index(r)])] == got
    node = browser.find_element(By.CSS_SELECTOR, '#graph-svg .node[data-name="conv2"]')
    browser.execute_script("arguments[0].scrollIntoView()", node)
    node.click()
    hit = [r.get_attribute("data-name") for r in rows if "hit" in r.get_attribute("class").split()]
    assert hit == ["conv2"]


def test_the_console_check_sees_a_script_error(browser, page, tmp_path):
    path, _, _ = page
    broken = tmp_path / "broken.html"
    broken.write_text(path.read_text().replace("fromHash();\n  apply();", "fromHash();\n  null.x;"))
    with pytest.raises(AssertionError):
        _open(browser, broken)
