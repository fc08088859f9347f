"""What the placer (:func:`fastane.model.placement.place.place`) hands each placement rule:
the bound graph, the weights kept compressed, and the placer's own functions (the one
consumer of a tensor, the activation that fuses into a layer's NE stage, and ``add``,
which records a layer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..graph import Bound


@dataclass(frozen=True)
class Context:
    bound: Bound
    #: ``only(t)``: the one node consuming tensor ``t`` (None if several, or a model output)
    only: Callable
    #: ``add(nodes, placement, reason, kind, run=None, call="", plan=None, **detail)``:
    #: records ``nodes`` as one layer and returns it
    add: Callable
    #: ``fuse_activation(node)``: ``(nodes, fused)``, the activation after ``node`` that runs
    #: in its NE stage (or the silu pattern); ``([], None)`` if none
    fuse_activation: Callable
    #: weights the model stores compressed (kept compressed on the ANE where lossless)
    compressed: set = field(default_factory=set)
    #: of those, the code width by type alone (:func:`~.rules.typed_bits`)
    typed_codes: dict = field(default_factory=dict)
