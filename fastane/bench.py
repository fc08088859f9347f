"""``fastane bench``: run the benchmark suite and track it against a stored run.

The machines fastane is benchmarked on are shared and noisy, and a stored run may come
from another machine, so runs are never compared by absolute time.  Each benchmark is
reduced to *ratios measured in the same run*:

* where the benchmark times numpy baselines beside fastane (``speedup_vs_<baseline>`` in
  its ``extra_info``, see ``bench/conftest.py``), those speedups: fastane's time relative
  to numpy float32 / float16 on the same machine, at the same moment;
* otherwise its median divided by a *machine reference* that ``fastane bench`` measures
  before and after the suite (numpy float32 BLAS matmul and a float32 elementwise pass,
  geometric mean), reported as ``per_reference`` (lower is faster).

A comparison reports every ratio's change, and a benchmark *regresses* when fastane got
slower relative to its in-run baseline by more than ``--fail-above`` percent; then the
command exits with status 1.

    fastane bench --save before                  # run, store .benchmarks/fastane/before.json
    fastane bench --compare before --fail-above 15
    fastane bench -k matmul --compare run.json   # a subset, against a file

The suite is the repository's ``bench/`` folder (found beside an editable install or a
checkout; ``--suite DIR`` otherwise).  Stored runs carry the machine's description.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = [
    "FORMAT",
    "add_arguments",
    "run",
    "record_from_pytest_json",
    "compare",
    "format_comparison",
    "machine_reference",
]

#: the stored record's format tag
FORMAT = "fastane-bench/1"
#: where ``--save NAME`` writes and ``--compare NAME`` reads (relative to the working directory)
STORE = Path(".benchmarks") / "fastane"
#: default regression threshold, percent
DEFAULT_FAIL_ABOVE = 10.0


def machine_reference(rounds: int = 7) -> float:
    """Seconds of a fixed numpy float32 workload (median BLAS matmul 384^3 and median
    elementwise tanh of 2**20 values, geometric mean): the yardstick for benchmarks that
    time no baseline of their own."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((384, 384), dtype=np.float32)
    v = rng.standard_normal(1 << 20, dtype=np.float32)

    def med(fn):
        fn()
        ts = []
        for _ in range(rounds):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    return math.sqrt(med(lambda: a @ a) * med(lambda: np.tanh(v)))


def _machine() -> dict:
    import numpy

    info = {
        "node": platform.node(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
    }
    try:
        import numba

        info["numba"] = numba.__version__
    except ImportError:  # pragma: no cover - numba is a dependency
        pass
    return info


def _commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def record_from_pytest_json(data: dict, reference_s: float | None, name: str = "") -> dict:
    """Reduce a pytest-benchmark JSON document to fastane's record: per benchmark its median,
    its in-run ratios (``speedup_vs_*``) and, with a machine reference, ``per_reference``."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ValueError("not a pytest-benchmark JSON document (no 'benchmarks' list)")
    benches = {}
    for b in data["benchmarks"]:
        try:
            key, median = b["fullname"], float(b["stats"]["median"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed benchmark entry in pytest-benchmark JSON: {e}") from None
        extra = b.get("extra_info") or {}
        ratios = {
            k[len("speedup_vs_") :]: float(v)
            for k, v in extra.items()
            if k.startswith("speedup_vs_") and isinstance(v, (int, float)) and v > 0
        }
        entry = {"median_s": median, "ratios": ratios}
        if reference_s and median > 0:
            entry["per_reference"] = median / reference_s
        benches[key] = entry
    return {
        "format": FORMAT,
        "name": name,
        "machine_reference_s": reference_s,
        "machine": data.get("machine_info") or {},
        "benchmarks": benches,
    }


def _load(spec: str) -> dict:
    path = Path(spec)
    if not path.suffix and not path.exists():
        path = STORE / f"{spec}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no stored benchmark run {spec!r} ({path} does not exist)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read benchmark run {path}: {e}") from None
    if isinstance(data, dict) and data.get("format") == FORMAT:
        if not isinstance(data.get("benchmarks"), dict):
            raise ValueError(f"{path}: malformed fastane benchmark record (no 'benchmarks')")
        return data
    return record_from_pytest_json(data, None, name=path.stem)  # a raw pytest-benchmark file


def compare(old: dict, new: dict, fail_above: float = DEFAULT_FAIL_ABOVE) -> list[dict]:
    """Rows of ``(benchmark, metric, old, new, change_pct, regressed)`` for every ratio that
    both runs have.  ``change_pct`` is how much faster (+) or slower (-) fastane became
    relative to the metric's yardstick; ``regressed`` when it is slower by more than
    ``fail_above`` percent."""
    rows = []
    for key, nb in new["benchmarks"].items():
        ob = old["benchmarks"].get(key)
        if ob is None:
            rows.append(
                {
                    "benchmark": key,
                    "metric": "(new)",
                    "old": None,
                    "new": None,
                    "change_pct": None,
                    "regressed": False,
                }
            )
            continue
        pairs = [
            (f"vs {m}", ob["ratios"][m], r, True)
            for m, r in nb.get("ratios", {}).items()
            if m in ob.get("ratios", {})
        ]
        if not pairs and ob.get("per_reference") and nb.get("per_reference"):
            # time per reference: lower is faster, so the speed ratio is old / new
            pairs = [("per reference", ob["per_reference"], nb["per_reference"], False)]
        for metric, o, n, higher_is_faster in pairs:
            speed = (n / o) if higher_is_faster else (o / n)
            change = (speed - 1.0) * 100.0
            rows.append(
                {
                    "benchmark": key,
                    "metric": metric,
                    "old": o,
                    "new": n,
                    "change_pct": change,
                    "regressed": change < -fail_above,
                }
            )
        if not pairs:
            rows.append(
                {
                    "benchmark": key,
                    "metric": "(no ratio in both runs)",
                    "old": None,
                    "new": None,
                    "change_pct": None,
                    "regressed": False,
                }
            )
    for key in old["benchmarks"]:
        if key not in new["benchmarks"]:
            rows.append(
                {
                    "benchmark": key,
                    "metric": "(not run)",
                    "old": None,
                    "new": None,
                    "change_pct": None,
                    "regressed": False,
                }
            )
    return rows


def format_comparison(rows: list[dict], fail_above: float) -> str:
    out = [f"{'benchmark':<58} {'metric':<24} {'old':>10} {'new':>10} {'change':>8}"]
    for r in rows:
        name = r["benchmark"].split("::")[-1] if "::" in r["benchmark"] else r["benchmark"]
        if r["change_pct"] is None:
            out.append(f"{name:<58} {r['metric']:<24}")
            continue
        flag = "  REGRESSED" if r["regressed"] else ""
        out.append(
            f"{name:<58} {r['metric']:<24} {r['old']:10.4g} {r['new']:10.4g} {r['change_pct']:+7.1f}%{flag}"
        )
    bad = sum(r["regressed"] for r in rows)
    out.append(
        f"{bad} regression(s) beyond {fail_above:g}% (change: + faster, - slower, relative to the "
        "in-run numpy baselines or the machine reference)"
    )
    return "\n".join(out)


def _find_suite(arg: str | None) -> Path:
    if arg:
        suite = Path(arg)
    else:
        suite = Path(__file__).resolve().parent.parent / "bench"
    if not suite.is_dir():
        raise ValueError(
            f"benchmark suite not found at {suite}: it is the bench/ folder of a fastane "
            "checkout; pass --suite DIR"
        )
    return suite


def add_arguments(parser) -> None:
    parser.add_argument("--save", metavar="NAME", help=f"store the run as {STORE}/NAME.json")
    parser.add_argument(
        "--compare",
        metavar="NAME|FILE",
        help="compare with a stored run (a name under .benchmarks/fastane, or a file: a fastane "
        "record or a pytest-benchmark JSON)",
    )
    parser.add_argument(
        "--fail-above",
        type=float,
        default=DEFAULT_FAIL_ABOVE,
        metavar="PCT",
        help=f"exit 1 when a ratio regresses by more than PCT percent (default {DEFAULT_FAIL_ABOVE:g})",
    )
    parser.add_argument("-k", metavar="EXPR", help="only benchmarks matching the pytest -k expression")
    parser.add_argument(
        "--suite", metavar="DIR", help="the benchmark folder (default: the checkout's bench/)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the record (with the comparison) to FILE")


def run(args) -> int:
    try:
        if args.save is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.save):
            raise ValueError(f"--save NAME must be letters, digits, '.', '_' or '-', got {args.save!r}")
        if args.fail_above < 0 or not math.isfinite(args.fail_above):
            raise ValueError(f"--fail-above must be a finite percentage >= 0, got {args.fail_above}")
        old = _load(args.compare) if args.compare else None  # fail before a long run
        suite = _find_suite(args.suite)
    except ValueError as e:
        print(f"fastane bench: {e}", file=sys.stderr)
        return 2
    ref_before = machine_reference()
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "bench.json"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            str(suite),
            "--benchmark-only",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={out_json}",
        ]
        if args.k:
            cmd += ["-k", args.k]
        proc = subprocess.run(cmd)
        if proc.returncode not in (0, 5) or not out_json.exists():
            print(f"fastane bench: the benchmark run failed (pytest exit {proc.returncode})", file=sys.stderr)
            return 1
        data = json.loads(out_json.read_text())
    ref = math.sqrt(ref_before * machine_reference())
    record = record_from_pytest_json(data, ref, name=args.save or "")
    record["machine"] = {**record["machine"], **_machine()}
    record["commit"] = _commit(suite)
    record["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    status = 0
    if old is not None:
        rows = compare(old, record, args.fail_above)
        print(format_comparison(rows, args.fail_above))
        record["comparison"] = {
            "against": old.get("name") or args.compare,
            "fail_above": args.fail_above,
            "rows": rows,
        }
        status = 1 if any(r["regressed"] for r in rows) else 0
    if args.save:
        STORE.mkdir(parents=True, exist_ok=True)
        (STORE / f"{args.save}.json").write_text(json.dumps(record, indent=1))
        print(f"saved {STORE / (args.save + '.json')}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return status
