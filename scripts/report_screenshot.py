"""The README's screenshot of the HTML report: the page of a pretrained model that a PyPI
package ships (rapidocr-onnxruntime 1.4.4's PP-OCRv4 text detector), run on the emulated ANE
on the input the package would feed it (:mod:`wheel_models`: a page of glyphs), captured by
headless Chromium.

    pip download --no-deps -d /tmp/wheels rapidocr-onnxruntime==1.4.4
    .venv/bin/python scripts/report_screenshot.py /tmp/wheels docs/report.png [--html docs/report-example.html]

Needs the ``report`` extra and Debian's chromium.  No model is part of this repository.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import wheel_models  # noqa: E402

import fastane  # noqa: E402
from fastane.model.run.page import HEADLESS_CHROMIUM  # noqa: E402

MEMBER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
#: the browser window the screenshot shows (px)
WINDOW = (1400, 1150)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", type=Path, help="the folder holding rapidocr_onnxruntime-1.4.4-*.whl")
    ap.add_argument("png", type=Path, help="the screenshot to write")
    ap.add_argument("--html", type=Path, help="keep the page here too")
    args = ap.parse_args(argv)
    chromium = shutil.which("chromium")
    if chromium is None:
        print(
            "report_screenshot: chromium is not installed (Debian: apt-get install chromium)", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        found = [
            p for pkg, _, member, p, _ in wheel_models.members(args.wheels, Path(tmp)) if member == MEMBER
        ]
        if not found:
            print(f"report_screenshot: no {MEMBER} in a wheel under {args.wheels}", file=sys.stderr)
            return 2
        model = fastane.load_model(str(found[0]))
        inputs = wheel_models.input_values(model, MEMBER, wheel_models.input_shapes(model, MEMBER))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the saturation the page shows
            page = model.html_report(inputs, source=Path(MEMBER).name)
        html = Path(tmp) / "report.html"
        html.write_text(page, encoding="utf-8")
        if args.html:
            shutil.copyfile(html, args.html)
        subprocess.run(
            [
                chromium,
                *HEADLESS_CHROMIUM,
                "--hide-scrollbars",
                f"--user-data-dir={Path(tmp) / 'profile'}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                f"--screenshot={args.png.resolve()}",
                html.as_uri(),
            ],
            check=True,
            capture_output=True,
        )
    print(f"wrote {args.png} ({args.png.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
