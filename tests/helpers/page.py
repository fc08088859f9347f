"""A small ONNX model for the HTML report's tests: a 3x3 convolution of 8 channels (all weights
1: an input of 500 makes each output a sum of 72 products of 500, past the Q16.16 accumulator's
2^15, so the layer is the first beyond its tolerance), a Relu, a nearest Resize (Core ML is
predicted to run it on the CPU), a 1x1 convolution and a Sigmoid; and beside them, from a second input ``z``, a 1x1 convolution
that reads nothing of the first branch (never on its divergence's path)."""

from __future__ import annotations

import numpy as np

SHAPE = (1, 8, 8, 8)
Z_SHAPE = (1, 4, 16, 16)


def mixed_model(path) -> str:
    """Write the model to ``path`` (needs onnx); returns ``path`` as a str."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array((rng.standard_normal((4, 4, 1, 1)) * 0.3).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Resize", ["r1", "", "scales"], ["up"], name="up", mode="nearest"),
        helper.make_node("Conv", ["up", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["y"], name="sig"),
        helper.make_node("Conv", ["z", "w3"], ["y2"], name="conv3"),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE)),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, list(Z_SHAPE)),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, None),
        ],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)
