"""``fastane warm``: compile the kernels a first run needs into Numba's cache, on every core.

A first run with an empty cache compiles about fifty Numba kernels, one after the other,
in the calling process (11-12 s of CPU on the 2-core reference machine for the README's
demo, docs/architecture.md).  ``fastane warm`` compiles the same specializations ahead of
time, split over worker processes (``--jobs``, default one per core), so that the run
then loads them from the cache.  It is the README's setup step (``scripts/demo.sh`` runs
it after installing); in a container image, run it once at build time.

Which kernels, with which argument types: the manifest ``fastane/warm.json``, recorded
by ``scripts/warm_manifest.py`` from the demo's workloads and three networks of
``fastane.model.zoo`` that hold the layer kinds of the exported models of docs/models.md
(a test checks that the demo compiles nothing after a warm).  Each entry is a kernel (module and global name, or a
dict global and its key), its argument types, and its compile time when recorded (what
the parts are balanced by).
An entry that no longer compiles (a kernel renamed since) is reported and skipped.

Numba's cache is per source file and machine (``NUMBA_CACHE_DIR``, else beside the
kernels); an edited kernel file is compiled again on its first use.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MANIFEST = Path(__file__).with_name("warm.json")

__all__ = [
    "MANIFEST",
    "load_manifest",
    "encode_type",
    "decode_type",
    "partition",
    "kernel_of",
    "compile_entries",
    "run",
]


# ---------------------------------------------------------------------------- the types
def encode_type(t):
    """A Numba argument type as JSON: ``"int64"``, ``["array", "uint16", 3, "C", true]``
    (dtype, ndim, layout, readonly) or ``["tuple", ...]``; ValueError for other types."""
    from numba import types

    if isinstance(t, types.Array):
        return ["array", str(t.dtype), t.ndim, t.layout, not t.mutable]
    if isinstance(t, types.BaseTuple):
        return ["tuple", *(encode_type(x) for x in t.types)]
    if isinstance(t, (types.Integer, types.Float, types.Boolean)):
        return str(t)
    raise ValueError(f"cannot record an argument of type {t}")


def decode_type(v):
    """The Numba type :func:`encode_type` wrote as ``v``."""
    import numpy as np
    from numba import types
    from numba.np.numpy_support import from_dtype

    if isinstance(v, str):
        return from_dtype(np.dtype(v))
    if isinstance(v, list) and v and v[0] == "array" and len(v) == 5:
        _, dtype, ndim, layout, readonly = v
        return types.Array(from_dtype(np.dtype(dtype)), int(ndim), str(layout), readonly=bool(readonly))
    if isinstance(v, list) and v and v[0] == "tuple":
        return types.Tuple([decode_type(x) for x in v[1:]])  # UniTuple when the items agree
    raise ValueError(f"not a recorded argument type: {v!r}")


def load_manifest(path=MANIFEST) -> list[dict]:
    """The manifest's entries: ``{"module", "name", "args", "seconds"}`` each, and ``"key"``
    for a kernel held in a dict global ``name`` (a list key stands for a tuple)."""
    data = json.loads(Path(path).read_text())
    entries = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: not a warm manifest (no list of kernels)")
    for e in entries:
        if not (
            isinstance(e, dict)
            and isinstance(e.get("module"), str)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("args"), list)
            and isinstance(e.get("seconds"), (int, float))
            and not isinstance(e.get("seconds"), bool)
        ):
            raise ValueError(f"{path}: an entry needs module and name (text), args (a list), seconds: {e}")
    return entries


def partition(entries: list[dict], parts: int) -> list[list[dict]]:
    """``entries`` in at most ``parts`` groups of about equal recorded seconds, the kernels
    of one module in one group (they share callees, which two processes would each
    compile: a parallel kernel and its thread function, say); modules longest first, each
    to the lightest group."""
    modules: dict = {}
    for e in entries:
        modules.setdefault(e["module"], []).append(e)
    weighed = sorted(
        ((sum(float(e["seconds"]) for e in m), m) for m in modules.values()), key=lambda w: -w[0]
    )
    groups = [[] for _ in range(max(1, parts))]
    load = [0.0] * len(groups)
    for seconds, mod in weighed:
        i = load.index(min(load))
        groups[i].extend(mod)
        load[i] += seconds
    return [g for g in groups if g]


def kernel_of(entry: dict):
    """The Numba dispatcher a manifest entry names (its module global, or the item
    ``key`` of that dict global; AttributeError, KeyError or ImportError when gone)."""
    fn = getattr(importlib.import_module(entry["module"]), entry["name"])
    if "key" in entry:  # a kernel held in a dict global (one per case)
        fn = fn[tuple(entry["key"]) if isinstance(entry["key"], list) else entry["key"]]
    return fn


def compile_entries(entries: list[dict]) -> dict:
    """Compile (or load from the cache) every entry in this process: ``{"compiled", "failed",
    "cpu"}`` (``failed``: ``[(kernel, reason), ...]``)."""
    t0 = time.process_time()
    failed = []
    for e in entries:
        kernel = f"{e['module']}.{e['name']}"
        try:
            kernel_of(e).compile(tuple(decode_type(a) for a in e["args"]))
        except Exception as exc:  # noqa: BLE001  a stale entry: report it, warm the rest
            failed.append((kernel, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
    return {"compiled": len(entries) - len(failed), "failed": failed, "cpu": time.process_time() - t0}


# ---------------------------------------------------------------------------- the command
def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def cores() -> int:
    """The cores this process may run on (its affinity, which a container's limit sets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: seconds a worker process may take before it is stopped (its kernels then compile on
#: first use)
WORKER_TIMEOUT = 900


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=_positive, default=None, help="worker processes (default: one per core)")
    p.add_argument("--manifest", default=str(MANIFEST), help="the kernels to compile (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="print nothing unless an entry fails")
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)  # "i/n": one worker's share


def run(args) -> int:
    try:
        entries = load_manifest(args.manifest)
    except (OSError, ValueError) as exc:
        print(f"fastane warm: cannot read the manifest {args.manifest}: {exc}", file=sys.stderr)
        return 2
    if args.part is not None:  # a worker: compile its share, report it as one JSON line
        i, n = (int(v) for v in args.part.split("/"))
        parts = partition(entries, n)
        print(json.dumps(compile_entries(parts[i] if i < len(parts) else [])))
        return 0
    jobs = args.jobs if args.jobs is not None else cores()
    if jobs < 1:
        print("fastane warm: --jobs must be at least 1", file=sys.stderr)
        return 2
    parts = partition(entries, jobs)
    t0 = time.perf_counter()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fastane.cli",
                "warm",
                "--manifest",
                args.manifest,
                "--part",
                f"{i}/{len(parts)}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(1, len(parts))
    ]
    results = [compile_entries(parts[0])] if parts else []
    for i, w in enumerate(workers, start=1):
        try:
            out, _ = w.communicate(timeout=WORKER_TIMEOUT)
            results.append(json.loads(out.strip().splitlines()[-1]))
        except (ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            w.kill()
            w.wait()
            why = (
                f"stopped after {WORKER_TIMEOUT} s"
                if isinstance(exc, subprocess.TimeoutExpired)
                else (f"its process ended with code {w.returncode}")
            )
            kernels = ", ".join(f"{e['module']}.{e['name']}" for e in parts[i])
            results.append(
                {"compiled": 0, "failed": [(f"part {i + 1} of {len(parts)} ({kernels})", why)], "cpu": 0.0}
            )
    wall = time.perf_counter() - t0
    failed = [f for r in results for f in r["failed"]]
    compiled = sum(r["compiled"] for r in results)
    cpu = sum(r["cpu"] for r in results)
    for kernel, reason in failed:
        print(f"fastane warm: skipped {kernel}: {reason}", file=sys.stderr)
    if not args.quiet:
        print(
            f"fastane warm: {compiled} kernels compiled or loaded from Numba's cache in {wall:.1f} s "
            f"({cpu:.1f} s of CPU in {len(parts)} processes)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m fastane.warm")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
