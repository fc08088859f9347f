"""Write docs/models.md's table of the ONNX op types the importer maps, from the op records
(:func:`fastane.model.frontends.onnx.importer.docs_table`), between its two markers.

    .venv/bin/python scripts/onnx_ops_table.py            # rewrites the table
    .venv/bin/python scripts/onnx_ops_table.py --check    # exit 1 if it would change
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastane.model.frontends.onnx.importer import docs_table  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "models.md"
BEGIN = "<!-- the ONNX op table: written by scripts/onnx_ops_table.py from the op records -->"
END = "<!-- end of the ONNX op table -->"


def rewritten(text: str) -> str:
    """``text`` with the lines between the markers replaced by the table."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC}: the markers {BEGIN!r} and {END!r} are missing")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + BEGIN + "\n" + "\n".join(docs_table()) + "\n" + END + tail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the table would change")
    args = ap.parse_args(argv)
    text = DOC.read_text()
    new = rewritten(text)
    if args.check:
        if new != text:
            print(f"{DOC}: the ONNX op table differs from the op records; run {__file__}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
