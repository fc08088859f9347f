"""Build the README's Core ML example on Linux: a small ML Program (conv, relu, a variance
computed as mean(x * x) -- the fp16 trap -- and a linear head), saved as an .mlpackage.

    python scripts/coreml_example.py net.mlpackage
    fastane run net.mlpackage --random --scale 1 --report
"""

import sys

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb

rng = np.random.default_rng(0)
W = (rng.standard_normal((16, 3, 3, 3)) * 0.5).astype(np.float32)
L = (rng.standard_normal((10, 16)) * 0.1).astype(np.float32)


@mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 32, 32))], opset_version=ct.target.iOS17)
def prog(x):
    y = mb.conv(x=x, weight=W, bias=np.zeros(16, np.float32), pad_type="same")
    y = mb.relu(x=y)
    sq = mb.mul(x=y, y=y)  # fp16: beyond 256 it overflows
    var = mb.reduce_mean(x=sq, axes=[2, 3], keep_dims=False)
    y = mb.linear(x=mb.sqrt(x=var), weight=L, bias=np.zeros(10, np.float32))
    return mb.softmax(x=y, axis=-1)


if __name__ == "__main__":
    m = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17)
    m.save(sys.argv[1] if len(sys.argv) > 1 else "net.mlpackage")
