"""Placement: which ops of a bound graph run on the emulated ANE and which on the host, and why.

- :mod:`.place`: :func:`place` walks the graph and groups nodes into :class:`Layer` s: each
  node's op record names its placement family (``OpDef.ane``), whose rule in
  :data:`~.place.RULES` places it (or the node runs on the host with the rule's reason);
- :mod:`.eltwise`: the rules for activations (and silu, hard_swish), the planar binary and unary
  operations and division;
- :mod:`.rules`: the rules for convolutions, transposed convolutions, Gemm and MatMul;
- :mod:`.context`: :class:`~.context.Context`, what the placer hands each rule (the bound
  graph, the one consumer of a tensor, the activation a MAC layer fuses, ``add``);
- :mod:`.rows`: the row operations on the planar engine (softmax, norms, pooling, ...);
- :mod:`.qlinear`: quantized convolutions and matmuls on the INT8 path;
- :mod:`.plan`: stats-only planning of the ANE layers (the same programs a run submits);
- :mod:`.predict`: the estimated Core ML placement per compute-unit setting.
- :mod:`.compute_plan`: the estimate per op shaped as Core ML's MLComputePlan (devices, cost
  weight), its JSON, the ops that leave the ANE (the warning), and the comparison with a plan
  dumped on a Mac.
"""

from __future__ import annotations

from .place import Layer, place
from .predict import predict

__all__ = ["Layer", "place", "predict"]
