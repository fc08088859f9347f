"""Dataset-scale evaluation: does a model's accuracy survive the ANE?

    >>> ev = fastane.evaluate("digits.onnx", "digits.npz", labels="digits.npz:labels")
    >>> ev.summary["accuracy"], ev.summary["changed"]
    >>> print(ev.table())

Every input of the dataset (:mod:`.data`) runs on the emulated ANE with a per-layer
comparison (:meth:`fastane.Model.report`) and through the float32 reference (onnxruntime for
an ONNX model, fastane's host path otherwise: :mod:`.runner`); each gives a row
(:func:`.metrics.score`) and the rows add up to the summary (:class:`.metrics.Aggregate`:
agreement, accuracy with labels, the inputs that changed their answer, per layer the error
histogram, the inputs beyond tolerance, saturations, LUT range events and the worst inputs).

The inputs go out in tasks of ``batch`` inputs.  ``workers=1`` runs them in this process;
``None`` (the default) too, unless the first task shows that the rest would take more than
:data:`AUTO_CLUSTER_SECONDS` and Dask is installed; more workers, or ``scheduler`` (a Dask scheduler's address, ``tcp://host:8786``), run them
on Dask (the ``eval`` extra): with no scheduler an embedded ``LocalCluster`` of ``workers``
processes of one thread each.  Each worker loads the model once; a dataset named by path is
read on the workers (the same path must reach the data there).  Rows stream back as tasks
finish; a worker that dies loses only its running tasks, which Dask runs again elsewhere
(``run["retried_inputs"]`` counts their inputs).  The summary does not depend on how the
work was spread: it is the same bit for bit on one process and on a cluster.

``output`` (``.csv``, ``.parquet`` or ``.jsonl``) receives the rows sorted by index; while the
run goes on they are appended to ``OUTPUT.partial.jsonl`` (flushed after each task), from
which ``resume=True`` continues a run that stopped, running only the inputs it lacks.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field


from ...errors import ModelError, quote
from ...roofline import chips as _chips
from ...warm import cores
from .data import Dataset, Preprocess, digest, file_stamps, open_dataset, read_labels
from .metrics import ROW_COLUMNS, Aggregate, Task
from .runner import REFERENCES, Job, data_inputs, labels_of, run_batch

__all__ = ["evaluate", "Evaluation", "Preprocess", "Dataset", "Task", "OUTPUT_SUFFIXES", "partial_path"]

#: the results files :func:`evaluate` writes
OUTPUT_SUFFIXES = (".csv", ".parquet", ".jsonl")
#: the format of a partial results file (its first line names it)
_FORMAT = "fastane-eval-partial/1"


def partial_path(output: str) -> str:
    """Where the rows of a run writing ``output`` wait until it finishes."""
    return os.fspath(output) + ".partial.jsonl"


@dataclass
class Evaluation:
    """The result of :func:`evaluate`: ``summary`` (JSON-ready, independent of how the run
    was spread), ``rows`` (one per input, sorted by index: :data:`.metrics.ROW_COLUMNS`) and
    ``run`` (how it ran: workers, seconds, retried inputs)."""

    summary: dict
    rows: list
    run: dict = field(default_factory=dict)

    @property
    def changed(self) -> list:
        """The ids of the inputs whose answer changed on the ANE."""
        return [c["id"] for c in self.summary["changed"]]

    def as_dict(self) -> dict:
        return {"summary": self.summary, "run": self.run}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, allow_nan=False)

    def table(self, layers: int = 15) -> str:
        """The summary as text, and the ``layers`` layers with the most inputs beyond tolerance."""
        from .text import summary_text

        return summary_text(self, layers)

    def html(self) -> str:
        """The evaluation as one self-contained HTML page (:mod:`.page`): the summary, the inputs
        that changed, the layer table and the heat map of the layers' error histograms.  Needs
        Jinja2 (the ``report`` extra)."""
        from .page import render

        return render(self)


def _model_and_job(model, chip, task, reference):
    """``(model object or None, model path or None, Job)``."""
    from .. import load_model
    from ..run.model import Model

    if reference not in REFERENCES:
        raise ModelError(f"reference {reference!r}: expected one of {', '.join(REFERENCES)}")
    path = None
    if isinstance(model, Model):
        obj = model
    elif isinstance(model, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(model))
        obj = load_model(path, chip=chip or "m1")
    else:
        raise TypeError(f"model: expected a path or a fastane.Model, got {type(model).__name__}")
    chip = (obj.chip if chip is None else _chips.get(chip)).key
    onnx = path is not None and obj.graph.origin.startswith("onnx")
    if reference == "auto":
        reference = "onnxruntime" if onnx and _has("onnxruntime") else "fastane"
    if reference == "onnxruntime" and not onnx:
        raise ModelError("reference 'onnxruntime' needs an ONNX model file (a path)")
    return obj, path, Job(path, chip, task, reference)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def evaluate(
    model,
    data,
    labels=None,
    *,
    chip=None,
    task: str = "auto",
    target: str | None = None,
    class_axis: int = -1,
    reference: str = "auto",
    batch: int = 16,
    workers: int | None = None,
    scheduler: str | None = None,
    output=None,
    resume: bool = False,
    preprocess: Preprocess | None = None,
    worst: int = 5,
    progress=None,
) -> Evaluation:
    """Evaluate ``model`` (a path or a :class:`fastane.Model`) over ``data`` (module docs).

    ``labels``: class indices, one per input (an array, a ``.npy``, ``FILE.npz:KEY``, a
    ``.txt`` or an ``id,label`` ``.csv``).  ``task``/``target``/``class_axis``: the metric
    (:class:`.metrics.Task`).  ``reference``: ``auto``, ``onnxruntime`` or ``fastane``.
    ``workers``: processes (1: this one; N: a local Dask cluster of N; None: this one, or one
    per core when the first task shows the rest would take more than
    :data:`AUTO_CLUSTER_SECONDS`); ``scheduler``: a Dask scheduler to run on.  ``output``:
    the results file; ``resume``: continue from its partial file.  ``preprocess``: how images become inputs.  ``worst``: the worst inputs kept per layer.
    ``progress``: None (a bar on a terminal), False, True or a callable ``(done, total)``."""
    t0 = time.perf_counter()
    task = Task(task, target, class_axis)
    batch = _positive(batch, "batch")
    worst = _positive(worst, "worst")
    auto = workers is None and scheduler is None
    workers = _positive(cores() if workers is None else workers, "workers")
    obj, path, job = _model_and_job(model, chip, task, reference)
    shipped = None if path else obj  # the model object the tasks carry (no file to load)
    if output is not None:
        output = os.fspath(output)
        _check_output(output, data, labels)
    if resume and output is None:
        raise ModelError("resume needs the output file whose partial results it continues")
    label_key = _npz_key(labels, data)
    preprocess = _channels(preprocess or Preprocess(), obj)
    dataset = open_dataset(
        data, preprocess, exclude=(label_key,) if label_key else (), inputs=list(data_inputs(obj))
    )
    n = len(dataset)
    if n == 0:
        raise ModelError(f"the dataset {quote(dataset.source)} holds no input")
    labels = None if labels is None else read_labels(labels, n, dataset.ids)
    header = {
        "format": _FORMAT,
        "model": path or obj.name,
        "model_files": None if path is None else file_stamps(path),
        "data": dataset.source,
        "data_files": dataset.fingerprint() if output is not None else None,
        "inputs": n,
        "chip": job.chip,
        "task": [task.kind, task.target, task.class_axis],
        "reference": job.reference,
        "labels": None if labels is None else _labels_digest(labels),
    }
    agg = Aggregate(worst)
    rows: dict = {}
    journal = None
    if output is not None:
        journal = _Journal(partial_path(output), header, resume)
        for row in journal.rows:
            if row["index"] >= n or row["id"] != dataset.ids[row["index"]]:
                raise ModelError(
                    f"{quote(journal.path)}: a row of input {row['index']} ({quote(str(row['id']))}) "
                    "that this dataset does not have: remove the file to start again"
                )
            if row["index"] not in rows:
                agg.add(row)
                row.pop("layers")
                rows[row["index"]] = row
    todo = [i for i in range(n) if i not in rows]
    batches = [todo[i : i + batch] for i in range(0, len(todo), batch)]
    show = _progress(progress, n)
    resumed = len(rows)

    def sink(new_rows):
        if journal is not None:
            journal.write(new_rows)
        for row in new_rows:
            agg.add(row)
            row.pop("layers")
            rows[row["index"]] = row
        if show:
            show(len(rows), n)

    if show:
        show(len(rows), n)
    retried = 0
    try:
        if auto:
            batches = _first_here(job, dataset, batches, labels, shipped, sink) if batches else []
            workers = workers if batches else 1
        if scheduler is None and workers == 1:
            for b in batches:
                sink(run_batch(job, dataset, b, labels_of(labels, b), shipped))
        elif batches:
            from .cluster import run_on_dask

            retried = run_on_dask(job, dataset, batches, labels, shipped, workers, scheduler, sink)
    finally:
        if journal is not None:
            journal.close()
            if not journal.rows and not journal.written:  # nothing to resume: no file in the way
                os.unlink(journal.path)
    ordered = [rows[i] for i in range(n)]
    if output is not None:
        write_rows(output, ordered)
        if os.path.exists(journal.path):
            os.unlink(journal.path)
    summary = {
        "model": os.fspath(model) if path else obj.name,
        "data": header["data"],
        "chip": job.chip,
        "task": task.kind,
        "target": task.target,
        "reference": job.reference,
        **agg.as_dict(),
    }
    run = {
        "workers": workers if scheduler is None else None,
        "scheduler": scheduler,
        "batch": batch,
        "seconds": time.perf_counter() - t0,
        "resumed_inputs": resumed,
        "retried_inputs": retried,
        "output": output,
    }
    return Evaluation(summary, ordered, run)


#: ``workers=None``: the estimated time of the inputs left after the first task, in seconds,
#: above which the rest goes to a cluster of one worker per core (its start, and each
#: worker's first model load and kernel load, cost a few seconds: 3-4 s here)
AUTO_CLUSTER_SECONDS = 20.0


def _first_here(job, dataset, batches, labels, model, sink) -> list:
    """``workers=None``: run the first task in this process (its first input alone: the
    kernels compile there) and time it; the batches left for a cluster of one worker per
    core, or ``[]`` after running them all here when they would take less than
    :data:`AUTO_CLUSTER_SECONDS`, or when there is one core or no Dask."""
    import time as _time

    first = batches[0]
    sink(run_batch(job, dataset, first[:1], labels_of(labels, first[:1]), model))
    rest = [first[1:]] if len(first) > 1 else []
    rest += batches[1:]
    left = sum(len(b) for b in rest)
    if rest and len(rest[0]):
        t0 = _time.perf_counter()
        sink(run_batch(job, dataset, rest[0], labels_of(labels, rest[0]), model))
        per_input = (_time.perf_counter() - t0) / len(rest[0])
        left -= len(rest[0])
        rest = rest[1:]
    else:
        per_input = 0.0
    if rest and cores() > 1 and per_input * left > AUTO_CLUSTER_SECONDS and _has("distributed"):
        return rest
    for b in rest:
        sink(run_batch(job, dataset, b, labels_of(labels, b), model))
    return []


def _positive(v, what: str) -> int:
    try:
        v = int(v)
    except (TypeError, ValueError):
        raise ModelError(f"{what}: expected a positive integer, got {v!r}") from None
    if v < 1:
        raise ModelError(f"{what}: expected a positive integer, got {v}")
    return v


def _npz_key(labels, data):
    """The array of the dataset's own .npz that ``labels`` names (``DATA.npz:KEY``), if any."""
    if not isinstance(labels, (str, os.PathLike)) or not isinstance(data, (str, os.PathLike)):
        return None
    path, sep, key = os.fspath(labels).rpartition(":")
    if sep and os.path.abspath(path) == os.path.abspath(os.fspath(data)):
        return key
    return None


def _progress(progress, n):
    if progress is False:
        return None
    if callable(progress):
        return progress
    stream = sys.stderr
    if progress is None and not stream.isatty():
        return None
    t0 = time.perf_counter()

    def show(i, total):
        w = 30
        k = w * i // max(total, 1)
        dt = time.perf_counter() - t0
        rate = f" {i / dt:.1f}/s" if dt > 0 and i else ""
        stream.write(f"\r[{'#' * k}{'.' * (w - k)}] {i}/{total} inputs{rate}   ")
        if i >= total:
            stream.write("\n")
        stream.flush()

    return show


class _Journal:
    """The partial results file: a header line, then one JSON row per line (appended and
    flushed after each task; a torn last line, from a run killed while writing, is dropped)."""

    def __init__(self, path: str, header: dict, resume: bool):
        self.path = path
        self.rows: list = []
        self.written = 0
        exists = os.path.exists(path)
        if exists and not resume:
            raise ModelError(
                f"{quote(path)} holds the partial results of an earlier run: resume it (--resume) or remove it"
            )
        if exists:
            self.rows = self._read(header)
            self.f = open(path, "a", encoding="utf-8")
        else:
            self.f = open(path, "x", encoding="utf-8")
            self.f.write(json.dumps(header) + "\n")
            self.f.flush()

    def _read(self, header: dict) -> list:
        with open(self.path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" unless the run stopped while it wrote the last line
        try:
            old = json.loads(lines[0]) if lines else None
        except ValueError:
            old = None
        if not isinstance(old, dict) or old.get("format") != _FORMAT:
            raise ModelError(f"{quote(self.path)} is not a partial results file of fastane eval")
        differ = [k for k in header if old.get(k) != header[k]]
        if differ:
            raise ModelError(
                f"{quote(self.path)} was written by another evaluation ({', '.join(differ)} differ): "
                "remove it to start again"
            )
        rows = []
        for k, line in enumerate(lines[1:], 2):
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not _is_row(row):
                raise ModelError(f"{quote(self.path)}: line {k} is not a row")
            rows.append(row)
        if torn:  # cut off, so that the rows appended next start on a line of their own
            with open(self.path, "r+b") as f:
                f.truncate(len(data) - len(torn))
        return rows

    def write(self, rows: list) -> None:
        self.written += len(rows)
        self.f.write("".join(json.dumps(r) + "\n" for r in rows))
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def _is_row(row) -> bool:
    """Whether ``row`` (read back from a partial results file) has a row's keys and types."""
    if not isinstance(row, dict) or set(row) != set(ROW_COLUMNS) | {"layers"}:
        return False
    ints = ("index", "nonfinite", "saturated", "lut_underflow", "lut_overflow", "cropped")
    if not all(type(row[k]) is int and row[k] >= 0 for k in ints):
        return False
    if not all(
        isinstance(row[k], (int, float)) and not isinstance(row[k], bool) for k in ("max_abs_err", "error")
    ):
        return False
    if not isinstance(row["id"], str) or not isinstance(row["first_beyond"], str):
        return False
    layers = row["layers"]
    return isinstance(layers, list) and all(
        isinstance(L, list)
        and len(L) == 9
        and type(L[0]) is int
        and isinstance(L[1], str)
        and (L[4] is None or isinstance(L[4], (int, float)))
        and all(type(v) is int for v in L[6:])
        for L in layers
    )


def _labels_digest(labels) -> str:
    import hashlib

    h = hashlib.sha256()
    digest(h, labels)
    return h.hexdigest()


def _channels(pre: Preprocess, model) -> Preprocess:
    """``pre`` with the channels of the model's image input (1 or 3; else RGB)."""
    import dataclasses

    inputs = data_inputs(model)
    if pre.channels is not None or len(inputs) != 1:
        return pre
    shape = next(iter(inputs.values())).shape
    if len(shape) != 4:
        return pre
    c = shape[1] if pre.layout.upper() == "NCHW" else shape[3]
    return dataclasses.replace(pre, channels=c if c in (1, 3) else 3)


def _check_output(output: str, data, labels) -> None:
    """A results file of a known kind that can be written, and is not the dataset or the
    labels (before any work)."""
    if not output.lower().endswith(OUTPUT_SUFFIXES):
        raise ModelError(f"output {quote(output)}: expected {', '.join(OUTPUT_SUFFIXES)}")
    if output.lower().endswith(".parquet") and not _has("pyarrow"):
        raise ModelError("a .parquet output needs pyarrow (pip install 'fastane[eval]')")
    if os.path.isdir(output):
        raise ModelError(f"output {quote(output)} is a folder")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ModelError(f"output {quote(output)}: no folder {quote(folder)}")
    if not os.access(folder, os.W_OK):
        raise ModelError(f"output {quote(output)}: the folder {quote(folder)} is not writable")
    for what, p in (("the dataset", data), ("the labels", labels)):
        if isinstance(p, (str, os.PathLike)):
            p = os.fspath(p).rpartition(":")[0] if ".npz:" in os.fspath(p) else os.fspath(p)
            if os.path.exists(p) and os.path.exists(output) and os.path.samefile(p, output):
                raise ModelError(f"output {quote(output)} is {what}")


def write_rows(path: str, rows: list) -> None:
    """Write ``rows`` (:data:`.metrics.ROW_COLUMNS`) to ``path`` (.csv, .parquet, .jsonl), whole
    or not at all (a temporary file beside it, renamed)."""
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        if path.lower().endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows), tmp)
        elif path.lower().endswith(".csv"):
            import csv

            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(ROW_COLUMNS)
                for r in rows:
                    w.writerow(["" if r[c] is None else r[c] for c in ROW_COLUMNS])
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps({c: r[c] for c in ROW_COLUMNS}) + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
