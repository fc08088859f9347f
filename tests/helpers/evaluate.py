"""Small models and datasets for the evaluation tests (fastane.model.evaluate)."""

from __future__ import annotations

import os

import numpy as np

from fastane.model.evaluate.data import Items


def linear_classifier(path, features: int = 16, classes: int = 4, seed: int = 0) -> str:
    """``x: float32[1, features] -> logits: float32[1, classes]`` (MatMul + Add) written to ``path``."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((features, classes)).astype(np.float32)
    b = rng.standard_normal(classes).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["logits"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def inputs(n: int, features: int = 16, seed: int = 1, big: int = 0) -> np.ndarray:
    """``n`` inputs ``float32[n, features]``, the last ``big`` of them beyond fp16's range after
    the matmul (saturating on the ANE)."""
    x = np.random.default_rng(seed).standard_normal((n, features)).astype(np.float32)
    if big:
        x[-big:] *= 3e4
    return x


def labelled_job(d, n: int, big: int = 1, name: str = "linear.onnx"):
    """A :func:`linear_classifier` in ``d / name`` and ``d / "data.npz"`` holding ``x``
    (:func:`inputs` ``n``, ``big``) and ``labels`` (``arange(n) % 4``): ``(model path, data
    path, x, labels)``."""
    model = linear_classifier(d / name)
    x, labels = inputs(n, big=big), np.arange(n) % 4
    np.savez(d / "data.npz", x=x, labels=labels)
    return model, d / "data.npz", x, labels


class DyingItems(Items):
    """Items whose input ``die_at`` kills the process reading it, the first time only (a file
    ``marker`` records that it happened): a worker that dies in the middle of a task."""

    def __init__(self, items, die_at: int, marker: str):
        super().__init__(items)
        self.die_at, self.marker = die_at, marker

    def item(self, i: int):
        if i == self.die_at and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os._exit(17)
        return super().item(i)
