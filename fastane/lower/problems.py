"""The problems the lowering takes: a convolution (:class:`Conv`; a matmul is a 1x1
convolution), an activation over a tensor (:class:`Eltwise`), and what the NE does after
the readout (:class:`NEStage`, :func:`ne_stage`; :func:`fold` folds an affine after a
convolution into its weights).  docs/lower.md, sections 1 and 9.

The problem of each call of the numpy API from its operands' shapes and options alone
(:func:`conv_problem`, :func:`linear_problem`, :func:`matmul_problem`, :func:`matmul_conv`):
what :mod:`fastane.lower.calls` runs with data and what the stats-only planning
(:mod:`fastane.model.placement.plan`) counts without.
"""

from __future__ import annotations

import functools
import math

from dataclasses import dataclass

import numpy as np

from .. import lut as _lut
from ..activation_table import ACTIVATIONS
from ..m1 import round_up

__all__ = [
    "Conv",
    "Eltwise",
    "NEStage",
    "ne_stage",
    "fold",
    "SINGLE_STAGE",
    "MULTI_STAGE",
    "conv_problem",
    "linear_problem",
    "matmul_dims",
    "matmul_problem",
    "matmul_conv",
    "CONV1D_H",
    "check_conv",
    "check_matmul",
    "check_addressable",
    "IOVA_LIMIT",
]


@dataclass(frozen=True)
class NEStage:
    """What the NE does after the readout: ``nonlinear`` is "identity", "relu" or "lut"
    (with ``block``), after an fp16 ``post_scale``."""

    name: str
    nonlinear: str = "identity"
    block: object = None
    post_scale: float = 1.0
    #: the activation whose tasks follow the NE stage (:data:`MULTI_STAGE`), else None:
    #: "sigmoid" (a planar task adding ``offset`` to the LUT's output), "silu" and
    #: "hard_swish" (the NE stage only adds the bias; then an elementwise LUT task with the
    #: ``gate`` block, silu's planar +0.5, and a planar multiply by the NE stage's output)
    post: str | None = None
    #: the block of the elementwise LUT task on the NE stage's output ``z`` that a planar
    #: multiply by ``z`` follows (silu: sigmoid's; hard_swish: its hard-sigmoid block)
    gate: object = None
    #: the offset a planar task adds to the table's output (sigmoid, silu: 0.5); 0: none
    offset: float = 0.0

    @property
    def lut(self) -> bool:
        return self.nonlinear == "lut"

    @property
    def out_tiles(self) -> int:
        """Output-sized tensors a task's chain holds in L2 at once (the kept intermediates
        and the result on its way out): one a task of the chain, and the NE stage's."""
        return 1 + self.post_tasks

    @property
    def post_tasks(self) -> int:
        """TDs after each NE-stage task: the planar +offset, and a gate's LUT task and
        multiply (sigmoid 1, silu 3, hard_swish 2)."""
        return (self.offset != 0.0) + 2 * (self.gate is not None)


#: activations that are one NE stage with a table: name -> (LUT table, PostScale); "relu"
#: is NonlinearMode 1 (:data:`fastane.activation_table.ACTIVATIONS`)
SINGLE_STAGE = {
    a.name: (a.table, a.scale) for a in ACTIVATIONS.values() if a.single_stage and a.nonlinear == "lut"
}
#: activations Apple's programs finish on the planar engine (corpus unary/sigmoid.bin,
#: activation/silu.bin; hard_swish as silu's chain): name -> the chain the lowering emits
#: after the NE stage
MULTI_STAGE = {a.name: a.chain for a in ACTIVATIONS.values() if not a.single_stage}


#: the stage of no activation (NEStage is frozen: one instance serves every call)
_IDENTITY = NEStage("identity")


def ne_stage(activation) -> NEStage:
    """The :class:`NEStage` of ``activation``: None, ``"relu"``, a single-stage LUT
    activation of :mod:`fastane.activations` (:data:`SINGLE_STAGE`), ``"sigmoid"``,
    ``"silu"`` or ``"hard_swish"`` (an NE stage followed by tasks, :data:`MULTI_STAGE`), or a
    :class:`fastane.lut.CoeffBlock` (a table of your own)."""
    if activation is None:
        return _IDENTITY
    if isinstance(activation, _lut.CoeffBlock):
        return NEStage("lut", "lut", activation, 1.0)
    if not isinstance(activation, str):
        raise TypeError(
            f"activation must be None, a name or a fastane.lut.CoeffBlock, got {type(activation).__name__}"
        )
    rec = ACTIVATIONS.get(activation)
    if rec is not None:
        block = _lut.get_block(rec.table) if rec.nonlinear == "lut" else None
        if rec.single_stage:
            return NEStage(rec.name, rec.nonlinear, block, rec.scale)
        gate = _lut.get_block(rec.table) if rec.nonlinear == "identity" else None
        return NEStage(rec.name, rec.nonlinear, block, rec.scale, rec.name, gate, rec.offset)
    known = ", ".join(["None", "'relu'"] + [repr(k) for k in (*SINGLE_STAGE, *MULTI_STAGE)])
    raise ValueError(
        f"unknown activation {activation!r}; fused activations: {known} (or a fastane.lut.CoeffBlock)"
    )


def fold(weight, bias, scale, shift):
    """Fold an affine ``scale * z + shift`` after a convolution into its weights and bias
    (SPEC 3, compile-time): ``W' = scale * W``, ``b' = scale * b + shift``, rounded once to
    fp16 (:func:`fastane.lut.fold_affine`).  Returns ``(W', b')`` as float16."""
    w2, b2 = _lut.fold_affine(weight, bias, scale, shift)
    return np.asarray(w2, np.float16), np.asarray(b2, np.float16).reshape(-1)


@dataclass(frozen=True)
class Conv:
    """One convolution to lower: ``n`` images ``(cin, h, w)`` -> ``(cout, hout, wout)``.

    ``pad = ((top, bottom), (left, right))`` zeros; ``bias``: a per-channel bias is added
    in the NE; ``activation``: see :func:`ne_stage`.  Hashable: the program cache key.
    """

    n: int
    cin: int
    h: int
    w: int
    cout: int
    kh: int = 1
    kw: int = 1
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    pad: tuple = ((0, 0), (0, 0))
    groups: int = 1
    bias: bool = False
    activation: object = None
    #: 0: fp16 weights; 1-8: a palettized weight of that many bits a code, kept
    #: compressed in KMem (:mod:`fastane.lower.compressed`)
    kernel_bits: int = 0
    #: an int8/uint8 kernel (the INT8 path, :mod:`fastane.quantized`): one byte a weight
    kernel_int8: bool = False

    @property
    def span(self) -> tuple:
        return ((self.kh - 1) * self.dilation[0] + 1, (self.kw - 1) * self.dilation[1] + 1)

    @property
    def hout(self) -> int:
        return (self.h + sum(self.pad[0]) - self.span[0]) // self.stride[0] + 1

    @property
    def wout(self) -> int:
        return (self.w + sum(self.pad[1]) - self.span[1]) // self.stride[1] + 1

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def empty(self) -> bool:
        """Nothing to compute: no output, or a reduction over nothing (no task: a TD needs
        Cin >= 1)."""
        return self.n * self.cout * self.hout * self.wout == 0 or self.cin_g * self.kh * self.kw == 0

    @property
    def macs(self) -> int:
        return self.n * self.cout * self.hout * self.wout * self.cin_g * self.kh * self.kw

    @classmethod
    def matmul(cls, M: int, K: int, N: int, groups: int = 1, bias: bool = False, activation=None) -> "Conv":
        """``groups`` products ``(M, K) @ (K, N)`` as one 1x1 convolution in the (B, C, 1, S)
        layout: ``Cin = groups * K``, ``Cout = groups * N``, ``S = M`` along W.  The same
        arguments give the same (immutable) object: a tiny product's call then finds its
        program by identity, without building and comparing a new Conv (about 2.5 us)."""
        try:
            return _matmul_conv(cls, M, K, N, groups, bias, activation)
        except TypeError:  # an unhashable activation: Conv's own checks name it
            return cls(1, groups * K, 1, M, groups * N, groups=groups, bias=bias, activation=activation)


@functools.lru_cache(maxsize=256, typed=True)
def _matmul_conv(cls, M, K, N, groups, bias, activation) -> Conv:
    return cls(1, groups * K, 1, M, groups * N, groups=groups, bias=bias, activation=activation)


#: a conv1d runs as the conv2d of height 1 (``x (N, C, L)`` as ``(N, C, 1, L)``, the kernel
#: ``(CO, CG, K)`` as ``(CO, CG, 1, K)``): along H, stride 1, dilation 1, no padding
CONV1D_H = {"stride": 1, "dilation": 1, "pad": 0}


def conv_problem(
    x_shape,
    w_shape,
    stride=(1, 1),
    pad=((0, 0), (0, 0)),
    dilation=(1, 1),
    groups: int = 1,
    bias: bool = False,
    activation=None,
    kernel_bits: int = 0,
) -> Conv:
    """The :class:`Conv` of a convolution of ``x`` ``(N, C, H, W)`` by a weight ``(CO,
    C/groups, KH, KW)`` with ``pad`` ``((top, bottom), (left, right))``; ``kernel_bits``: a
    weight kept compressed in KMem with codes of that many bits.  A conv1d's shapes (``(N,
    C, L)``, ``(CO, C/groups, K)``, one value or pair per argument) give the conv2d of height
    1 it runs as (:data:`CONV1D_H`).  No validation (:func:`check_conv`); may be
    :attr:`Conv.empty`.  The same arguments give the same (immutable) object."""
    if len(x_shape) == 3:
        x_shape = (*x_shape[:2], 1, x_shape[2])
        w_shape = (*w_shape[:2], 1, w_shape[2])
        stride = (CONV1D_H["stride"], *stride)
        dilation = (CONV1D_H["dilation"], *dilation)
        pad = ((CONV1D_H["pad"],) * 2, *pad)
    key = (
        tuple(x_shape),
        tuple(w_shape),
        tuple(stride),
        tuple(tuple(p) for p in pad),
        tuple(dilation),
        groups,
        bool(bias),
        activation,
        kernel_bits,
    )
    try:
        return _conv_problem(*key)
    except TypeError:  # an unhashable activation: the lowering's own checks name it
        return _conv_problem.__wrapped__(*key)


@functools.lru_cache(maxsize=256, typed=True)
def _conv_problem(x_shape, w_shape, stride, pad, dilation, groups, bias, activation, kernel_bits) -> Conv:
    N, C, H, W = x_shape
    CO, _, KH, KW = w_shape
    return Conv(N, C, H, W, CO, KH, KW, stride, dilation, pad, groups, bias, activation, kernel_bits)


def linear_problem(x_shape, n_out: int, bias: bool = False, activation=None, kernel_bits: int = 0):
    """The :class:`Conv` of ``fastane.linear`` of ``x`` ``(..., K)`` with ``n_out`` outputs
    (``kernel_bits``: see :func:`conv_problem`), None when there is nothing to compute.  An
    fp16 weight: the product with ``b`` shared (:func:`matmul_conv`); a compressed one: the
    1x1 convolution of ``x^T`` as ``(1, K, 1, M)`` by the weight as ``(n_out, K, 1, 1)``
    (the same :class:`Conv` with ``kernel_bits``)."""
    M, K = math.prod(x_shape[:-1]), x_shape[-1]
    if M * n_out == 0 or K == 0:
        return None
    if kernel_bits:
        return conv_problem(
            (1, K, 1, M), (n_out, K, 1, 1), bias=bias, activation=activation, kernel_bits=kernel_bits
        )
    return matmul_conv(1, 1, 1, M, K, n_out, bias, activation)[1]


def matmul_conv(BA: int, BB: int, B: int, M: int, K: int, N: int, bias: bool = False, activation=None):
    """``(shared, Conv)``: the convolution of ``B`` products ``(M, K) @ (K, N)`` of ``BA``
    left and ``BB`` right operands, and which operand it shares (how
    :func:`fastane.lower.run_matmul` lays the operands out):

    * ``"b"`` (one right operand): every left operand's rows along S, ``Cin = K``, ``Cout = N``;
    * ``"a"`` (one left operand, several right ones, no bias): the roles swapped, ``a`` the
      kernel (``Cout = M``), the right operands' columns along S;
    * ``""`` (both batched): a grouped convolution, a group per product.
    """
    if BB == 1:
        return "b", Conv.matmul(B * M, K, N, 1, bias, activation)
    if BA == 1 and not bias:
        return "a", Conv.matmul(B * N, K, M, 1, False, activation)
    return "", Conv.matmul(M, K, N, B, bias, activation)


def matmul_dims(a_shape, b_shape):
    """``np.matmul``'s view of operands of these shapes (at least 1-D): ``(a's batch shape,
    b's batch shape, the broadcast batch shape, M, K, b's K, N)``, a 1-D ``a`` read as ``(1,
    K)`` and a 1-D ``b`` as ``(K, 1)``; the broadcast batch is None when the batch shapes
    do not broadcast."""
    A = (1, *a_shape) if len(a_shape) == 1 else tuple(a_shape)
    B = (*b_shape, 1) if len(b_shape) == 1 else tuple(b_shape)
    (M, K), (K2, N) = A[-2:], B[-2:]
    try:
        batch = np.broadcast_shapes(A[:-2], B[:-2]) if len(A) > 2 or len(B) > 2 else ()
    except ValueError:
        batch = None
    return A[:-2], B[:-2], batch, M, K, K2, N


def matmul_problem(a_shape, b_shape, activation=None):
    """``(shared, Conv)`` of ``fastane.matmul`` of operands of these shapes (valid for
    ``np.matmul``; :func:`matmul_dims`, :func:`matmul_conv`), None when there is nothing to
    compute."""
    a_batch, b_batch, batch, M, K, _, N = matmul_dims(a_shape, b_shape)
    nb = math.prod(batch)
    if nb * M * N == 0 or K == 0:
        return None
    return matmul_conv(math.prod(a_batch), math.prod(b_batch), nb, M, K, N, False, activation)


@dataclass(frozen=True)
class Eltwise:
    """One activation over ``n`` fp16 elements: the call :func:`~fastane.lower.build` turns into an
    elementwise program (``activation`` as for :func:`ne_stage`).  Hashable: the cache key."""

    n: int
    activation: object = None


#: bytes a 32-bit IOVA can address
IOVA_LIMIT = 1 << 32


def check_conv(c: Conv) -> None:
    if min(c.n, c.cin, c.h, c.w, c.cout, c.kh, c.kw, c.groups) < 1:
        raise ValueError(f"cannot lower an empty convolution: {c}")
    if c.cin % c.groups or c.cout % c.groups:
        raise ValueError(f"Cin {c.cin} and Cout {c.cout} must be multiples of groups {c.groups}")
    if c.hout < 1 or c.wout < 1:
        raise ValueError(f"the padded input is smaller than the dilated kernel: {c}")
    # The ANE addresses at most 4 GiB (32-bit IOVAs): refuse before planning (and before
    # allocating task tables sized by the geometry).
    # (rows in whole 64-byte bursts, as the tensors sit in DRAM)
    padded = c.n * c.cin * (c.h + sum(c.pad[0])) * round_up((c.w + sum(c.pad[1])) * 2)
    result = c.n * c.cout * c.hout * round_up(c.wout * 2)
    if max(padded, result) > IOVA_LIMIT:
        raise ValueError(
            f"the padded input ({padded} bytes) or the output ({result} bytes) exceeds "
            f"the {IOVA_LIMIT >> 30} GiB the ANE can address: {c}"
        )


@functools.lru_cache(maxsize=1024)
def check_matmul(BA: int, BB: int, B: int, M: int, K: int, N: int, bias: bool = False) -> None:
    """Refuse (``ValueError``), before anything is allocated, ``B`` products ``(M, K) @ (K, N)``
    of ``BA`` left and ``BB`` right operands whose convolution (as
    :func:`fastane.lower.run_matmul` lowers them) exceeds what the ANE can address.
    (A function of the sizes alone: shapes that passed are remembered, a refusal is not.)"""
    check_conv(matmul_conv(BA, BB, B, M, K, N, bias)[1])


def check_addressable(x, func: str, name: str) -> None:
    """Refuse (``ValueError``) an operand whose fp16 copy would exceed what the ANE can
    address, before that copy is made (of a zero-stride broadcast view, say)."""
    try:
        n = int(np.size(x))
    except ValueError:  # a ragged sequence: the operand check names it
        return
    if 2 * n > IOVA_LIMIT:
        raise ValueError(
            f"{func}: {name} has {n} elements ({2 * n} bytes in fp16), more than the "
            f"{IOVA_LIMIT >> 30} GiB the ANE can address"
        )
