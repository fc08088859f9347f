"""The layer types of the reference models (shapes, no weights), for the roofline model.

Every layer is one of three kinds, each with a ``name``:

:class:`Conv2d`
    NCHW convolution, batch 1 (``cin, cout, h, w`` of the *input*, kernel, stride,
    symmetric zero padding, groups) with an optional fused activation.
:class:`Matmul`
    ``B`` independent products ``(M x K) @ (K x N)``.  The right operand is the one the
    ANE loads into KMem (KernelDMA): a weight matrix when ``weights=True``, an
    activation (the KV cache in attention) when ``weights=False``.  ``B`` counts products
    with *different* right operands (attention heads); tokens that share a weight go in
    ``M``.  On the ANE a matmul runs as a 1x1 convolution with ``K`` input channels,
    ``N`` output channels and ``M`` positions along the row (W).
:class:`Eltwise`
    planar-engine work with no MACs (residual adds, norms, softmax, pooling): ``n_inputs``
    tensors of ``in_shape`` (C, H, W) in, one of ``out_shape`` out, ``ops_per_out``
    elementwise operations per output element.

A :class:`Workload` is a named tuple of layers; the built-in ones are in
:mod:`fastane.workloads`, which re-exports these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

__all__ = ["Conv2d", "Matmul", "Eltwise", "Workload"]


@dataclass(frozen=True)
class Conv2d:
    """A 2-D convolution, batch 1: input (cin, h, w) -> output (cout, hout, wout)."""

    name: str
    cin: int
    cout: int
    h: int
    w: int
    kh: int = 1
    kw: int = 1
    stride: int = 1
    pad: int = 0
    groups: int = 1
    activation: str | None = None
    #: the input is the previous layer's output (a chain the lowering may keep in L2)
    follows: bool = False
    kind = "conv2d"

    def __post_init__(self):
        for f in ("cin", "cout", "h", "w", "kh", "kw", "stride", "groups"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"{self.name}: {f} must be >= 1, got {getattr(self, f)}")
        if self.pad < 0:
            raise ValueError(f"{self.name}: pad must be >= 0")
        if self.cin % self.groups or self.cout % self.groups:
            raise ValueError(
                f"{self.name}: cin={self.cin} and cout={self.cout} must be multiples of groups={self.groups}"
            )
        if self.hout < 1 or self.wout < 1:
            raise ValueError(f"{self.name}: kernel {self.kh}x{self.kw} larger than the padded input")

    @property
    def hout(self) -> int:
        return (self.h + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def wout(self) -> int:
        return (self.w + 2 * self.pad - self.kw) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.cout * self.hout * self.wout * (self.cin // self.groups) * self.kh * self.kw

    @property
    def weight_params(self) -> int:
        return self.cout * (self.cin // self.groups) * self.kh * self.kw

    def shape_str(self) -> str:
        g = f" g{self.groups}" if self.groups > 1 else ""
        return (
            f"conv {self.kh}x{self.kw}/{self.stride}{g} {self.cin}x{self.h}x{self.w}"
            f"->{self.cout}x{self.hout}x{self.wout}"
        )


@dataclass(frozen=True)
class Matmul:
    """``B`` products (M x K) @ (K x N); the right operand goes to KMem."""

    name: str
    B: int
    M: int
    K: int
    N: int
    activation: str | None = None
    weights: bool = True
    #: the input (left operand) is the previous layer's output
    follows: bool = False
    kind = "matmul"

    def __post_init__(self):
        for f in ("B", "M", "K", "N"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"{self.name}: {f} must be >= 1, got {getattr(self, f)}")

    @property
    def macs(self) -> int:
        return self.B * self.M * self.K * self.N

    @property
    def weight_params(self) -> int:
        return self.B * self.K * self.N if self.weights else 0

    def shape_str(self) -> str:
        b = f"{self.B}x" if self.B > 1 else ""
        return f"matmul {b}({self.M}x{self.K})@({self.K}x{self.N})"


@dataclass(frozen=True)
class Eltwise:
    """Planar-engine work: ``n_inputs`` tensors of ``in_shape`` -> one of ``out_shape``."""

    name: str
    op: str
    in_shape: tuple
    out_shape: tuple | None = None
    n_inputs: int = 1
    ops_per_out: int = 1
    kind = "eltwise"

    def __post_init__(self):
        if self.out_shape is None:
            object.__setattr__(self, "out_shape", tuple(self.in_shape))
        for shape in (self.in_shape, self.out_shape):
            if len(shape) != 3 or min(shape) < 1:
                raise ValueError(f"{self.name}: shapes are (C, H, W) of positive sizes, got {shape}")

    macs = 0
    weight_params = 0

    @property
    def planar_ops(self) -> int:
        return prod(self.out_shape) * self.ops_per_out

    def shape_str(self) -> str:
        c, h, w = self.in_shape
        s = f"{self.op} {self.n_inputs}x{c}x{h}x{w}"
        if tuple(self.out_shape) != tuple(self.in_shape):
            s += "->" + "x".join(map(str, self.out_shape))
        return s


@dataclass(frozen=True)
class Workload:
    """A named sequence of layers."""

    name: str
    description: str
    layers: tuple
    #: "inference" (vision, encoder), "prefill" or "decode"
    phase: str = "inference"
    #: tokens produced (decode) or processed (prefill) per run; 0 for non-token models
    tokens: int = 0
    source: str = ""
    #: 0: fp16 weights; 1-8: every weight palettized to codes of that many bits (a
    #: ``2**bits``-entry fp16 palette a weight, as coremltools' ``palettize_weights``
    #: writes them; the ANE keeps them compressed in KMem: ``fastane.lower.compressed``)
    weight_bits: int = 0
    #: 0: attention reads its keys and values as they are; else the rows of a KV cache each
    #: attention layer extends by concatenation, as smpanaro's gpt2 KV-cache program does
    #: (:func:`fastane.networks.graph` writes the cache's moves: docs/roofline.md, "Your own
    #: workloads", ``cache=concat``)
    kv_concat: int = 0

    def __post_init__(self):
        if not 0 <= int(self.weight_bits) <= 8:
            raise ValueError(f"{self.name}: weight_bits must be 0 (fp16) or 1-8, got {self.weight_bits}")
        if int(self.kv_concat) < 0:
            raise ValueError(f"{self.name}: kv_concat must be >= 0 rows, got {self.kv_concat}")

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def weight_params(self) -> int:
        """Parameters the run reads as KMem weights (fp16: 2 bytes each)."""
        return sum(layer.weight_params for layer in self.layers)

    def __len__(self):
        return len(self.layers)
