"""How ``fastane eval`` scales with workers: a zoo CNN over a few hundred inputs in this process,
on an embedded Dask cluster of 1 worker and of 2 workers (medians of ``--repeat`` runs).

    .venv/bin/python bench/eval_scaling.py [--inputs 300] [--size 64] [--repeat 3] [--batch 8]

The model is :func:`fastane.model.zoo.resnet` (a ResNet-style classifier, random weights) at
``size`` x ``size``; the inputs are seeded standard-normal arrays in one ``.npz``.  Each run is
:func:`fastane.evaluate` with the onnxruntime reference.  Two figures per configuration: the
wall time of the whole call (the cluster's start and the workers' model loading included)
and the steady rate (inputs per second between the first and the last task's rows, which
leaves out the start).  The speed-up is the 2-worker rate over the 1-worker rate, each
measured in this run.  Every configuration's summary must be the same as the first's (the
results do not depend on the workers), or the benchmark fails.  Needs the onnx and eval extras.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastane  # noqa: E402
from fastane.model import zoo  # noqa: E402


def one_run(model, data, batch, workers=1, scheduler=None, t0=None):
    """``(wall seconds since t0, steady inputs/s, summary)`` of one evaluation."""
    stamps = []

    def progress(done, total):
        stamps.append((time.perf_counter(), done))

    t0 = time.perf_counter() if t0 is None else t0
    ev = fastane.evaluate(model, data, batch=batch, workers=workers, scheduler=scheduler, progress=progress)
    wall = time.perf_counter() - t0
    moved = [(t, d) for t, d in stamps if d > 0]
    (t1, d1), (t2, d2) = moved[0], moved[-1]
    rate = (d2 - d1) / (t2 - t1) if t2 > t1 else float("nan")
    return wall, rate, ev.summary


def one_worker_cluster(model, data, batch):
    """:func:`one_run` on a LocalCluster of one worker (``workers=1`` alone runs in this
    process), the cluster's start included in the wall time."""
    import dask
    import distributed

    from fastane.model.evaluate.cluster import NO_TRIM, WORKER_ENV

    t0 = time.perf_counter()
    with (
        dask.config.set(NO_TRIM),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, dashboard_address=":0", env=WORKER_ENV
        ) as lc,
    ):
        return one_run(model, data, batch, scheduler=lc.scheduler_address, t0=t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=300)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        import onnx

        model = str(Path(d) / "resnet.onnx")
        onnx.save(zoo.resnet(size=args.size), model)
        data = str(Path(d) / "inputs.npz")
        rng = np.random.default_rng(0)
        np.savez(data, x=rng.standard_normal((args.inputs, 1, 3, args.size, args.size)).astype(np.float32))
        fastane.evaluate(model, data, workers=1, progress=False)  # the kernels compiled, once
        configs = [("this process", 1), ("Dask, 1 worker", "dask1"), ("Dask, 2 workers", 2)]
        results, first = {}, None
        for name, workers in configs:
            runs = []
            for _ in range(args.repeat):
                if workers == "dask1":
                    wall, rate, summary = one_worker_cluster(model, data, args.batch)
                else:
                    wall, rate, summary = one_run(model, data, args.batch, workers)
                key = json.dumps(summary)
                first = first or key
                if key != first:
                    print(f"{name}: the summary differs from the first run's", file=sys.stderr)
                    return 1
                runs.append((wall, rate))
            results[name] = (statistics.median(w for w, _ in runs), statistics.median(r for _, r in runs))
        print(
            f"{args.inputs} inputs of {args.size}x{args.size}, batch {args.batch}, medians of {args.repeat} runs"
        )
        print(f"{'configuration':<18} {'wall s':>8} {'inputs/s':>9}")
        for name, (wall, rate) in results.items():
            print(f"{name:<18} {wall:8.2f} {rate:9.1f}")
        one, two = results["Dask, 1 worker"], results["Dask, 2 workers"]
        print(f"2 workers / 1 worker: {two[1] / one[1]:.2f}x steady rate, {one[0] / two[0]:.2f}x wall time")
        print(
            f"2 workers / this process: {two[1] / results['this process'][1]:.2f}x steady rate, "
            f"{results['this process'][0] / two[0]:.2f}x wall time"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
