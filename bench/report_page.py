"""The HTML report's cost on large graphs: page size, time to build it in Python, and time for
headless Chromium to load and lay it out (medians of ``--repeat`` loads).

    .venv/bin/python bench/report_page.py [--blocks 100 300 600] [--repeat 5]

Each model is a chain of residual blocks (Conv 3x3 + Relu, Conv 3x3, Add with the block's
input, Relu: four ONNX nodes, two or three layers after fusion) on a 1x16x16x16 tensor, built
with ``onnx.helper``; the page is stats-only (``fastane report MODEL -o PAGE``).  The browser's
time is the navigation's ``loadEventEnd`` (parsing, style, layout, the page's script) plus a
forced layout of the whole document.  Needs the test extra and Debian's chromium and
chromium-driver.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastane  # noqa: E402
from fastane.model.run.page import HEADLESS_CHROMIUM  # noqa: E402


def residual_chain(path: Path, blocks: int, c: int = 16, size: int = 16) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for b in range(blocks):
        w1, w2 = f"w{b}a", f"w{b}b"
        for w in (w1, w2):
            inits.append(
                numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32), w)
            )
        nodes += [
            helper.make_node("Conv", [x, w1], [f"b{b}c1"], name=f"b{b}.conv1", pads=[1] * 4),
            helper.make_node("Relu", [f"b{b}c1"], [f"b{b}r1"], name=f"b{b}.relu1"),
            helper.make_node("Conv", [f"b{b}r1", w2], [f"b{b}c2"], name=f"b{b}.conv2", pads=[1] * 4),
            helper.make_node("Add", [f"b{b}c2", x], [f"b{b}s"], name=f"b{b}.add"),
            helper.make_node("Relu", [f"b{b}s"], [f"b{b}y"], name=f"b{b}.relu2"),
        ]
        x = f"b{b}y"
    graph = helper.make_graph(
        nodes,
        f"residual{blocks}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def browser():
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in (*HEADLESS_CHROMIUM, "--window-size=1400,1000", f"--user-data-dir={tempfile.mkdtemp()}"):
        opts.add_argument(flag)
    return webdriver.Chrome(
        options=opts, service=webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    )


def load_ms(driver, page: Path) -> float:
    driver.get("about:blank")
    driver.get(page.as_uri())
    return driver.execute_script(
        "document.body.getBoundingClientRect(); void document.body.offsetHeight;"
        "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[100, 300, 600])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    driver = browser()
    print("| blocks | ONNX nodes | layers | page | build (s) | browser load (ms, median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for blocks in args.blocks:
                model_path, page = Path(tmp) / f"r{blocks}.onnx", Path(tmp) / f"r{blocks}.html"
                residual_chain(model_path, blocks)
                m = fastane.load_model(str(model_path), weights=False)
                t0 = time.perf_counter()
                html = m.html_report({"x": (1, 16, 16, 16)}, stats_only=True)
                build = time.perf_counter() - t0
                page.write_text(html, encoding="utf-8")
                ms = statistics.median(load_ms(driver, page) for _ in range(args.repeat))
                layers = html.count('<tr id="row-')
                print(
                    f"| {blocks} | {5 * blocks} | {layers} | {len(html.encode()) / 2**20:.2f} MiB | "
                    f"{build:.2f} | {ms:.0f} |"
                )
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
