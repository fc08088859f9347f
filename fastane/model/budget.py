"""What a model may ask of the host: one budget, checked at bind time, before anything is
allocated or computed.

A model file is a program: a 300-byte ONNX model can ``Expand`` two scalars into a 2^28-
element tensor and a 512 x 512 x 3 x 3 kernel and ask for a convolution of 10^12
multiply-adds, or pad a 64 x 64 image by 2^20 columns.  :func:`fastane.model.graph.bind`
costs every node from the inferred shapes alone (:func:`fastane.model.cost.node_cost`) and
refuses the model with a :class:`~fastane.errors.ModelError` naming the node, the limit
and its value when one of these is exceeded:

* :data:`MAX_TENSOR_ELEMENTS` = 2^28 elements per tensor (1 GiB in float32): any tensor
  a model declares, stores or produces (:func:`fastane.model.tensor.check_size`), and
  :data:`MAX_RANK` = 32 dimensions per tensor (numpy 1.x's own limit; models use 8 at most).
* :data:`MAX_LAYER_BYTES` = 2^30 bytes (1 GiB) per node: its inputs and outputs (a float
  element counted at 4 bytes: the host widens float16 to float32), the temporaries its
  host implementation makes (a convolution's padded input and one window's patch, a
  pooling's padded input, a transposed convolution's full-size result, the float64 passes
  of Resize, Einsum and the erf-based ops) and what the per-layer report adds beside them
  (the ANE's float16 copies, the float32 reference): :func:`fastane.model.cost.node_cost`.
* :data:`MAX_RUN_BYTES` = 2^30 bytes held at once, node by node in graph order: the
  node's bytes and every other tensor alive across it (an intermediate from its node to
  its last reader; the model's inputs and outputs, and the constants folded at bind
  time, to the end).  The weights read from the file are not counted (the file holds them
  already).  The address space a run takes is the libraries' (about 0.36 GiB), the
  emulated DRAM the default device reserves (2 GiB: :data:`fastane.lower.runtime.DEFAULT_MEMORY`)
  and this: within 4 GiB, with room for the estimate's error.
* :data:`MAX_LAYER_WORK` = 2^36 multiply-adds per node (matmul, gemm, conv,
  conv_transpose): seconds, not minutes (a 2^34 multiply-add matmul's report, the ANE run
  and the float32 reference, took 3.7 s on this machine).  GPT-2's language-model head
  at 1024 tokens is 2^35.2, ResNet-50's largest layer at 224 x 224 2^26.8.
* :data:`MAX_EINSUM_WORK` = 2^34 multiply-adds per Einsum (the product of every label's
  size, counted 64 times for more than two operands): numpy's einsum loops run well below
  BLAS speed, its one nested loop over more than two operands 60 times slower still
  (``a,b,c,d->`` of 300 values each, 2^32.9, took 28 s).
* :data:`MAX_KERNEL_TAPS` = 2^14 kernel taps per Conv, ConvTranspose or pooling (the
  product of the kernel's spatial sizes): the host makes one numpy pass per tap (about
  20-75 us for a convolution's, whatever the tensors' sizes), so a 1024 x 1024 kernel over
  a 1 x 1 output took 26 s; 2^14 taps (128 x 128) is about a second.
* :data:`MAX_NODES` = 2^17 nodes per graph: an ONNX file's nodes before conversion, any
  graph's (Core ML operations or layers) when it is made: the host spends about 130 us a
  node per run whatever its size (200k Relu nodes, a 5 MB file, ran in 27 s).
* :data:`MAX_LAYER_ELEMENT_OPS` = 2^32 element operations per node (pooling: output
  elements x window; the others: every input and output element once): numpy runs them
  one strided pass at a time (a 32 x 32 MaxPool of 2^31.6 took 3.3 s).
* :data:`MAX_RUN_WORK` = 2^38 per run: the multiply-adds and element operations of all
  nodes, folded ones included.  GPT-2 (124M parameters) at 1024 tokens is about 2^37,
  ResNet-50 at 224 x 224 2^32.
* :data:`MAX_CONST_BYTES` = 2^30 bytes of constants decoded at load from a Core ML
  package's weight files and ``constexpr_*`` ops (a float counted at 4 bytes: the graph
  holds float32), each blob decoded once however many ops refer to it: a sub-byte blob
  expands 8x or more, and a small package could otherwise ask for gigabytes.  The float32
  weights of a 268M-parameter model.
* :data:`MAX_LOOP_STEPS` = 2^17 node evaluations per control-flow node (ONNX Loop, Scan,
  If): its trip count times its body's nodes (a nested loop's counted so, multiplied),
  as many as a graph of :data:`MAX_NODES` nodes takes (about 130 us a node whatever its
  size).  A Loop whose trip count is not constant at bind may run
  ``MAX_LOOP_STEPS // body nodes`` iterations, and is counted so; one that would run
  more stops with this error.  Each body node is checked against the per-layer limits
  when the body is bound; the loop's work, its body's times its trip count, counts
  towards :data:`MAX_RUN_WORK`.
* :data:`MAX_SUBGRAPH_DEPTH` = 2^4 levels of subgraphs nested in one another (the
  branches of If, the bodies of Loop and Scan): an exporter nests two or three; the
  importer, binding and the host each recurse once a level.
* :data:`MAX_FOLD_ELEMENTS` = 2^22: a node whose inputs are all constant is evaluated at
  bind time only when its outputs are at most this many elements (it runs as a layer
  otherwise).

``fastane roofline M`` and a stats-only report bind the same way and refuse a model
beyond a per-node limit with the same line as a run.  The two run limits
(:data:`MAX_RUN_BYTES`, :data:`MAX_RUN_WORK`) bound what a run holds and computes: a graph
loaded without its weights (``weights=False``; the built-in roofline networks of
:mod:`fastane.networks` too) is only planned, one layer at a time, and holds no tensor; its
work is bounded by :data:`MAX_PLAN_WORK` = 2^41 instead, which keeps a plan to seconds
(GPT-2-XL's prefill of 512 tokens, 2^39.6, plans in 1.1 s; Llama-3.2-1B's, 2^38.9, in
0.7 s).
"""

from __future__ import annotations


from ..errors import ModelError

__all__ = [
    "MAX_TENSOR_ELEMENTS",
    "MAX_RANK",
    "MAX_FOLD_ELEMENTS",
    "MAX_LAYER_BYTES",
    "MAX_LAYER_WORK",
    "MAX_EINSUM_WORK",
    "MAX_LAYER_ELEMENT_OPS",
    "MAX_KERNEL_TAPS",
    "MAX_NODES",
    "MAX_RUN_WORK",
    "MAX_RUN_BYTES",
    "MAX_PLAN_WORK",
    "MAX_CONST_BYTES",
    "MAX_LOOP_STEPS",
    "MAX_SUBGRAPH_DEPTH",
    "LIMITS",
    "beyond",
    "check_nodes",
]

MAX_TENSOR_ELEMENTS = 1 << 28
#: the most dimensions a tensor may have: numpy 1.x's own limit (NPY_MAXDIMS); models use
#: at most 8 (the ANE 5)
MAX_RANK = 32
MAX_FOLD_ELEMENTS = 1 << 22
MAX_LAYER_BYTES = 1 << 30
MAX_LAYER_WORK = 1 << 36
MAX_EINSUM_WORK = 1 << 34
MAX_LAYER_ELEMENT_OPS = 1 << 32
MAX_KERNEL_TAPS = 1 << 14
MAX_NODES = 1 << 17
MAX_RUN_WORK = 1 << 38
MAX_RUN_BYTES = 1 << 30
MAX_PLAN_WORK = 1 << 41
MAX_CONST_BYTES = 1 << 30
MAX_LOOP_STEPS = 1 << 17
MAX_SUBGRAPH_DEPTH = 1 << 4

#: name -> (value, what it limits), for messages and docs/models.md
LIMITS = {
    "MAX_TENSOR_ELEMENTS": (MAX_TENSOR_ELEMENTS, "elements per tensor"),
    "MAX_RANK": (MAX_RANK, "dimensions per tensor"),
    "MAX_LAYER_BYTES": (MAX_LAYER_BYTES, "bytes per layer"),
    "MAX_LAYER_WORK": (MAX_LAYER_WORK, "work per layer"),
    "MAX_EINSUM_WORK": (MAX_EINSUM_WORK, "work per Einsum"),
    "MAX_LAYER_ELEMENT_OPS": (MAX_LAYER_ELEMENT_OPS, "element operations per layer"),
    "MAX_KERNEL_TAPS": (MAX_KERNEL_TAPS, "kernel taps per layer"),
    "MAX_NODES": (MAX_NODES, "nodes per model"),
    "MAX_RUN_WORK": (MAX_RUN_WORK, "work per run"),
    "MAX_RUN_BYTES": (MAX_RUN_BYTES, "bytes per run"),
    "MAX_PLAN_WORK": (MAX_PLAN_WORK, "work per plan"),
    "MAX_CONST_BYTES": (MAX_CONST_BYTES, "bytes of constants decoded at load"),
    "MAX_LOOP_STEPS": (MAX_LOOP_STEPS, "node evaluations per control-flow node"),
    "MAX_SUBGRAPH_DEPTH": (MAX_SUBGRAPH_DEPTH, "nested subgraphs"),
}


def beyond(what: str, amount: int, unit: str, name: str) -> ModelError:
    """The error for ``amount`` ``unit`` beyond the limit ``name``: ``"node 'c' (Conv):
    3.1e12 multiply-adds, beyond fastane's limit for work per layer (MAX_LAYER_WORK =
    2^36)"``."""
    value, desc = LIMITS[name]
    digits = str(int(amount))
    if len(digits) <= 6:
        n = digits
    elif len(digits) < 300:
        n = f"{int(amount):.1e}".replace("e+", "e")
    else:  # a hostile shape's product, beyond any float
        n = f"{digits[0]}.{digits[1]}e{len(digits) - 1}"
    return ModelError(
        f"{what}: {n} {unit}, beyond fastane's limit for {desc} ({name} = 2^{value.bit_length() - 1})"
    )


def check_nodes(count: int, what: str) -> None:
    """A ModelError when a graph of ``count`` nodes (``what``: "model 'm'") is beyond
    :data:`MAX_NODES`: checked on the file's node list before anything is converted."""
    if count > MAX_NODES:
        raise beyond(what, count, "nodes", "MAX_NODES")
