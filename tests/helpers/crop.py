"""The slow reference of the fixed-point crop path of slices
(:mod:`fastane.model.run.movement`): one element at a time, in Python floats."""

import math

import numpy as np


def slow_crop(x, limit):
    """``(y, n)``: ``x`` with each element whose fp16 value is finite and beyond ``limit`` in
    magnitude made an infinity of its sign (``y`` of ``x``'s dtype), and how many were."""
    y = np.array(x, copy=True)
    flat = y.reshape(-1)
    n = 0
    for i in range(flat.size):
        v = float(flat[i])
        with np.errstate(over="ignore"):
            h = float(np.float16(v))
        if math.isfinite(h) and abs(h) > limit:
            flat[i] = math.copysign(math.inf, v)
            n += 1
    return y, n
