"""Record ``fastane/warm.json``: the kernels the demo's workloads compile, with their types.

    .venv/bin/python scripts/warm_manifest.py            # writes fastane/warm.json
    .venv/bin/python scripts/warm_manifest.py --check    # exit 1 if it would change

Runs, in this process and with an empty Numba cache of its own, what ``scripts/demo.sh``
runs that compiles (``fastane demo`` and ``fastane run`` of the zoo's small ResNet, with
``--report``) and the other models of :data:`MODELS` (the kernels of the exported networks
of docs/models.md) and keeps every compilation of a ``fastane.kernels`` function that no other
compilation started (the kernels it calls compile with it), with its argument types and
CPU seconds (what ``fastane warm`` balances its processes by).  A kernel is named by its
module global, or by a dict global and its key; any other cannot be recorded and is
reported.
"""

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ["NUMBA_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="fastane-warm-")  # before numba loads
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

from numba import types  # noqa: E402
from numba.core import event  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: the models of fastane.model.zoo run (``fastane run --report``): name, arguments, input
#: shape.  The demo's ResNet, and the layer kinds of the exported torchvision and
#: transformers networks (docs/models.md, "Models exported by PyTorch"), whose first runs
#: then compile little: the transformer block 128 wide over 320 positions (its attention's
#: output, 40960 values, read out across the threads as from 32768; its LayerNormalization
#: through the NE's LUT kernel, which 32 wide does not take)
MODELS = (
    ("resnet", {}, "x=1x3x32x32"),
    ("mobile", {}, "x=1x3x128x128"),
    ("transformer", {"d": 128, "heads": 4}, "x=1x320x128"),
)


class _Recorder(event.Listener):
    def __init__(self):
        self.depth = 0
        self.start = {}
        self.entries = {}
        self.unnamed = set()

    def on_start(self, ev):
        if self.depth == 0:
            self.start[id(ev.data["dispatcher"])] = time.thread_time()
        self.depth += 1

    def on_end(self, ev):
        self.depth -= 1
        if self.depth:
            return
        from fastane import warm

        d = ev.data["dispatcher"]
        seconds = time.thread_time() - self.start.pop(id(d))
        module = d.py_func.__module__
        if not module.startswith("fastane.kernels"):
            return
        where = _global_of(sys.modules[module], d)
        if where is None:
            self.unnamed.add(f"{module}.{d.py_func.__qualname__}")
            return
        try:
            args = [warm.encode_type(types.unliteral(t)) for t in ev.data["args"]]
        except ValueError as exc:  # an argument type the manifest cannot hold
            self.unnamed.add(f"{module}.{d.py_func.__qualname__} ({exc})")
            return
        key = (module, json.dumps(where), json.dumps(args))
        e = self.entries.setdefault(key, {"module": module, **where, "args": args, "seconds": 0.0})
        e["seconds"] = round(e["seconds"] + seconds, 2)


def _global_of(mod, d):
    """``{"name": global}`` of the module global that is ``d``, or ``{"name": global,
    "key": key}`` of the dict global holding it (a tuple key as a list), or None."""
    for k, v in vars(mod).items():
        if v is d:
            return {"name": k}
    for k, v in vars(mod).items():
        if isinstance(v, dict):
            for key, item in v.items():
                if item is d and isinstance(key, (bool, int, str, tuple)):
                    return {"name": k, "key": list(key) if isinstance(key, tuple) else key}
    return None


def record() -> dict:
    from fastane.cli import main as cli

    rec = _Recorder()
    event.register("numba:compile", rec)
    with tempfile.TemporaryDirectory() as tmp:
        from fastane.model import zoo

        import onnx

        runs = [["demo"]]
        for name, kwargs, shape in MODELS:
            model = os.path.join(tmp, f"{name}.onnx")
            onnx.save(zoo.MODELS[name](**kwargs), model)
            runs.append(["run", model, "--random", "--shape", shape, "--report", "--quiet"])
        for argv in runs:
            cli(argv)
    for name in sorted(rec.unnamed):
        print(
            f"warm_manifest: not recorded (not a module global, or an argument type it cannot hold): {name}",
            file=sys.stderr,
        )
    kernels = sorted(rec.entries.values(), key=lambda e: (e["module"], e["name"], json.dumps(e)))
    return {
        "about": "the kernels fastane warm compiles: written by scripts/warm_manifest.py, do not edit",
        "kernels": kernels,
    }


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the kernels or their types would change")
    args = p.parse_args(argv)
    from fastane import warm

    new = record()
    if args.check:
        old = json.loads(warm.MANIFEST.read_text())
        strip = [{k: v for k, v in e.items() if k != "seconds"} for e in old["kernels"]]
        fresh = [{k: v for k, v in e.items() if k != "seconds"} for e in new["kernels"]]
        if strip != fresh:
            print("warm_manifest: fastane/warm.json is stale: run scripts/warm_manifest.py", file=sys.stderr)
            return 1
        return 0
    lines = ",\n  ".join(json.dumps(e) for e in new["kernels"])  # one kernel a line
    warm.MANIFEST.write_text(f'{{\n "about": {json.dumps(new["about"])},\n "kernels": [\n  {lines}\n ]\n}}\n')
    total = sum(e["seconds"] for e in new["kernels"])
    print(
        f"wrote {warm.MANIFEST.relative_to(ROOT)}: {len(new['kernels'])} kernels, {total:.1f} s recorded",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
