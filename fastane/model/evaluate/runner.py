"""The work of one task of an evaluation, the same in the calling process and on a Dask
worker: :func:`run_batch` reads its inputs from the dataset, runs each on the emulated ANE
with a per-layer comparison (:meth:`fastane.Model.report`) and against the float32
reference, and returns one row each (:func:`.metrics.score`).

A process loads the model and makes the reference once (:func:`state`, cached per
:class:`Job`), not once per input or task.  The reference is onnxruntime's for an ONNX model
(one thread: its sums then do not depend on the machine's cores) or fastane's own float32
host path (:meth:`fastane.Model.reference`).  The host's float32 work runs with one BLAS
thread too, so that a row is the same bit for bit in any process of any cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ModelError, quote
from ...errstate import errstate
from .data import DTYPE_KINDS, file_stamps, fit
from .metrics import Task, score

__all__ = ["Job", "REFERENCES", "run_batch", "state", "onnx_reference", "labels_of", "data_inputs"]

#: the float32 references an evaluation compares with
REFERENCES = ("auto", "onnxruntime", "fastane")

#: process-wide cache: job -> (model, reference function)
_STATE: dict = {}


@dataclass(frozen=True)
class Job:
    """What every task of an evaluation shares: the model file (None: the model object
    travels with the tasks), the chip, the task metric and the reference."""

    model: str | None
    chip: str
    task: Task
    reference: str  # "onnxruntime" or "fastane" (resolved)


def onnx_reference(path: str):
    """``inputs -> outputs`` of onnxruntime (CPU, one thread) for the ONNX model ``path``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own error types: one message
        raise ModelError(f"onnxruntime cannot load {quote(path)}: {str(exc).splitlines()[0]}") from None
    names = [o.name for o in sess.get_outputs()]

    def run(arrays: dict) -> dict:
        try:
            return dict(zip(names, sess.run(names, arrays)))
        except Exception as exc:
            raise ModelError(f"onnxruntime: {str(exc).splitlines()[0]}") from None

    return run


def state(job: Job, model=None):
    """``(model, reference)`` of ``job`` in this process, loaded on first use and again when
    the model file changed; only the last job's are kept."""
    key = (job, id(model) if model is not None else repr(file_stamps(job.model)))
    got = _STATE.get(key)
    if got is None:
        _STATE.clear()
        if model is None:
            from .. import load_model

            model = load_model(job.model, chip=job.chip)
        ref = onnx_reference(job.model) if job.reference == "onnxruntime" else None
        got = _STATE[key] = (model, ref)
    return got


def _announce(topic: str, n: int) -> None:
    """On a Dask worker: record at the scheduler, on ``topic``, that this task starts, and
    wait until it has (how the driver counts the inputs run again after a worker died: a
    worker killed just after it would otherwise take the record with it)."""
    try:
        from distributed import get_client, get_worker
    except ImportError:
        return
    try:
        key = str(get_worker().get_current_task())
    except ValueError:  # not on a worker
        return
    get_client().log_event(topic, {"key": key, "inputs": n})


def data_inputs(model) -> dict:
    """The inputs a dataset gives (name -> type): the model's, but its states (a Core ML
    program's, which start at zeros as Core ML's ``makeState`` makes them)."""
    return {k: t for k, t in model.inputs.items() if k not in model.graph.states}


def labels_of(labels, indices):
    """The labels of the inputs ``indices`` (None without labels)."""
    import numpy as np

    return None if labels is None else labels[np.asarray(indices, dtype=np.int64)]


def run_batch(job: Job, dataset, indices, labels, model=None, topic: str | None = None) -> list:
    """The rows of the inputs ``indices`` of ``dataset`` (``labels``: one each, or None);
    ``model``: the model object when ``job`` names no file; ``topic``: the Dask event topic
    of the run (:func:`_announce`)."""
    from threadpoolctl import threadpool_limits

    if topic is not None:
        _announce(topic, len(indices))
    model, ref = state(job, model)
    rows = []
    with threadpool_limits(1, user_api="blas"), errstate(saturation="ignore", lut_range="ignore"):
        for k, i in enumerate(indices):
            i = int(i)
            ident = dataset.ids[i]
            try:
                item = dataset.item(i)
                inputs = data_inputs(model)
                if isinstance(item, dict) and len(item) == 1 and len(inputs) == 1:
                    item = next(iter(item.values()))  # one array for one input, whatever its name
                if not isinstance(item, dict):
                    if len(inputs) != 1:
                        raise ModelError(
                            f"the model has {len(inputs)} inputs: an item must be a dict name -> array"
                        )
                    item = {next(iter(inputs)): item}
                arrays = {}
                for name, t in inputs.items():
                    if name not in item:
                        raise ModelError(f"no array for the model's input {quote(name)}")
                    x = fit(item[name], t, name)
                    if x.dtype.kind not in DTYPE_KINDS:
                        raise ModelError(f"input {quote(name)}: an array of {x.dtype} (expected numbers)")
                    arrays[name] = x.astype(t.dtype, copy=False)
                model.bind({k: v.shape for k, v in arrays.items()})  # fastane's checks first
                reference = ref(arrays) if ref is not None else model.reference(arrays)
                rep = model.report(arrays, chip=job.chip, reference=reference)
            except ModelError as exc:
                raise ModelError(f"input {quote(ident)} of the dataset: {exc}") from None
            label = None if labels is None else labels[k]
            rows.append(score(i, ident, label, rep.values, reference, rep.layers, job.task))
    return rows
