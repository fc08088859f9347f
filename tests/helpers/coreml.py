"""Converting and saving a coremltools MIL program as an ML Program: the one way the Core ML
tests (tests/model/test_coreml*.py, test_budget.py, test_hostile_files.py, placement/) make
one, a flexible input declared by a spec edit.  Needs coremltools (the tests that import this
skip without it).  ``convert`` and ``save`` are fastane's own
(:mod:`fastane.model.frontends.coreml.write`, which ``fastane probes`` builds its programs with)."""

import contextlib

from fastane.model.frontends.coreml.write import convert
from fastane.model.frontends.coreml.write import save_program as save

__all__ = ["convert", "save", "flexible", "symbolic", "conv_relu_pool", "quick_builds", "stateful"]


def flexible(kind, default):
    """A spec edit: input 0 declared range-shaped (``kind`` "range": each axis 1..2x its
    default) or enumerated (its default and a second shape), ``default`` its default shape
    (the description's ``shape``; for a program whose input has symbolic axes, made by
    :func:`symbolic`, the converter's own range, 1..2 with default 1, is replaced)."""

    def edit(spec):
        t = spec.description.input[0].type.multiArrayType
        del t.shape[:]
        t.shape.extend(default)
        if kind == "range":
            t.shapeRange.ClearField("sizeRanges")
            for d in default:
                r = t.shapeRange.sizeRanges.add()
                r.lowerBound, r.upperBound = 1, 2 * d
        else:
            t.ClearField("shapeRange")
            for shape in (default, tuple(2 * d if i >= 2 else d for i, d in enumerate(default))):
                t.enumeratedShapes.shapes.add().shape.extend(shape)

    return edit


def symbolic(shape, axes=(2, 3)):
    """``shape`` with a new MIL symbol on each of ``axes``: a program input that binds at any
    size there, as a converted RangeDim input does (declare its range with :func:`flexible`)."""
    from coremltools.converters.mil.mil import get_new_symbol

    return tuple(get_new_symbol() if i in axes else d for i, d in enumerate(shape))


def conv_relu_pool(path, weight, shape, fp16, edit=None):
    """conv (``weight``, "same") -> relu -> avg_pool 2x2 on an input ``x`` of ``shape``, every op
    one the ANE runs in fp16, saved as an iOS17 ML Program (:func:`save`: fp32 compute
    precision unless ``fp16``; ``edit``: a spec edit)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.relu(x=mb.conv(x=x, weight=weight, pad_type="same"))
        return mb.avg_pool(x=y, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")

    return save(prog, path, ct.target.iOS17, fp16, edit)


@contextlib.contextmanager
def quick_builds():
    """Many programs converted in a row, faster and the same: coremltools' check that an fp32
    constant fits fp16 (the FLOAT16 precision pass) reads each array once instead of gathering
    the indices of every element below 1e38 (the same test: the largest magnitude below 1e38
    above 65504), seconds for each of the report programs' largest weights."""
    import numpy as np
    from coremltools.converters.mil.mil.passes.defs.quantization import FP16ComputePrecision as fp16

    def overflow(op) -> bool:
        for inputs in op.inputs.values():
            for var in inputs if isinstance(inputs, (list, tuple)) else [inputs]:
                if (
                    var.op is not None
                    and var.op.op_type == "const"
                    and var.is_tensor_or_scalar_of(dtype="fp32")
                ):
                    a = np.abs(np.asarray(var.op.val.val))
                    if np.max(a, where=a < 1e38, initial=0.0) > 65504:
                        return True
        return False

    original = fp16.__dict__["fp16_overflow"]
    fp16.fp16_overflow = staticmethod(overflow)
    try:
        yield
    finally:
        fp16.fp16_overflow = original


def stateful(path) -> str:
    """A stateful ML Program (iOS18) saved at ``path``: ``y = read_state(s) + x`` written back to
    the fp16 state ``s`` (1x4), the output ``3 y``."""
    import coremltools as ct
    import numpy as np
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types as mtypes

    @mb.program(
        input_specs=[mb.StateTensorSpec((1, 4), dtype=mtypes.fp16), mb.TensorSpec((1, 4), dtype=mtypes.fp16)],
        opset_version=ct.target.iOS18,
    )
    def prog(s, x):
        y = mb.add(x=mb.read_state(input=s), y=x)
        return mb.mul(x=mb.coreml_update_state(state=s, value=y), y=np.float16(3.0))

    return save(prog, path, ct.target.iOS18, fp16=True)
