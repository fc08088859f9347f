"""Tensor types of a model graph and the size limit every tensor is checked against
(shared by :mod:`~fastane.model.graph` and :mod:`~fastane.model.ops`; the limits are
:mod:`~fastane.model.budget`'s)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError, quote
from .budget import MAX_FOLD_ELEMENTS, MAX_RANK, MAX_TENSOR_ELEMENTS, beyond
from .files import read_file

__all__ = [
    "TensorType",
    "check_size",
    "shape_text",
    "read_protobuf",
    "MAX_TENSOR_ELEMENTS",
    "MAX_FOLD_ELEMENTS",
    "MAX_PROTOBUF_BYTES",
    "DTYPES",
]


#: the largest serialized protobuf message (an ONNX model, a Core ML spec): 2 GiB, the
#: format's own limit; a larger file is refused before it is read
MAX_PROTOBUF_BYTES = 2 << 30

#: dtypes a graph may carry
DTYPES = (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_)


@dataclass(frozen=True)
class TensorType:
    """dtype (a numpy dtype) and shape (ints; a ``str`` is a symbolic dimension)."""

    dtype: np.dtype
    shape: tuple

    @property
    def concrete(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"{np.dtype(self.dtype).name}[{quote('x'.join(str(d) for d in self.shape), marks=False)}]"


def shape_text(shape, limit: int = 80) -> str:
    """``shape`` as a tuple for a message, cut after ``limit`` characters (a hostile model's
    rank can be in the thousands)."""
    return quote(str(tuple(shape)), limit, marks=False)


def check_size(shape, what: str) -> int:
    """The element count of ``shape``, or a ModelError if a dimension is negative or the
    tensor (or any one dimension, even of an empty tensor) would exceed
    :data:`MAX_TENSOR_ELEMENTS`."""
    if len(shape) > MAX_RANK:
        raise beyond(f"{what}: shape {shape_text(shape)}", len(shape), "dimensions", "MAX_RANK")
    n = 1
    for d in shape:
        if not isinstance(d, (int, np.integer)) or d < 0:
            raise ModelError(f"{what}: invalid dimension {quote(repr(d))} in shape {shape_text(shape)}")
        n *= int(d)
    if n > MAX_TENSOR_ELEMENTS:
        raise beyond(f"{what}: shape {shape_text(shape)}", n, "elements", "MAX_TENSOR_ELEMENTS")
    if n == 0 and shape and max(shape) > MAX_TENSOR_ELEMENTS:  # the hosts allocate per axis
        d = int(max(shape))
        raise beyond(
            f"{what}: shape {shape_text(shape)}", d, "elements along one axis", "MAX_TENSOR_ELEMENTS"
        )
    return n


def read_protobuf(path: str, what: str, root=None) -> bytes:
    """The bytes of the protobuf file at ``path`` (``what``: "model", "Core ML spec"), read
    under :mod:`~fastane.model.files`' rule (a regular file, never a FIFO or device; inside
    the folder ``root`` if given) and within :data:`MAX_PROTOBUF_BYTES`; ModelError otherwise."""
    return read_file(
        path,
        what,
        MAX_PROTOBUF_BYTES,
        "the 2 GiB a protobuf message can hold",
        missing=f"cannot read {what} {os.fspath(path)!r}: no such file",
        root=root,
    )
