"""The numpy-facing surface: ``matmul``, ``linear``, ``conv1d``, ``conv2d``.

Every call rounds its operands to fp16 (round half to even, as Core ML does for an fp16
model), runs the MAC array's arithmetic (exact products rounded to the Q16.16 grid, a
saturating 32-bit accumulator in a fixed time order, fp16 readout; SPEC section 2 and
docs/numerics.md) and returns ``np.float16`` arrays, as the ANE would.  Saturated
outputs are surfaced through :func:`fastane.errstate`; the counters of the last call on
this thread are returned by :func:`last_stats`.

This module only validates and reshapes: every call is lowered to a program of task
descriptors (:mod:`fastane.lower`, cached by shapes and options) and run on the
emulated device (:func:`fastane.lower.default_device`), the same engine that runs
Apple's compiled programs; its Stats are the device's.  A matmul is a 1x1 convolution
in the (B, C, 1, S) layout; bias and activation run fused in the NE stage.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from . import compress as _compress
from . import lower as _lower
from . import lut as _lut
from . import quantized as _quantized
from .errstate import report_events
from .lower.compressed import PalettizedWeight
from .lower.problems import (
    CONV1D_H,
    check_addressable,
    check_matmul,
    conv_problem,
    linear_problem,
    matmul_dims,
)
from .operands import fp16_operand
from .stats import Stats, last_stats, record

__all__ = ["matmul", "linear", "conv1d", "conv2d", "constant", "last_stats"]

_MATMUL_SIG = "(n?,k),(k,m?)->(n?,m?)"
_ONE_PRODUCT = np.zeros(1, np.int64)
_ONE_PRODUCT.flags.writeable = False


# ---------------------------------------------------------------------------- operands
def _fp16_operand(x, func: str, name: str) -> np.ndarray:
    """:func:`fastane.operands.fp16_operand`, refusing first an operand too large for the ANE
    to address (before its fp16 copy)."""
    check_addressable(x, func, name)
    return fp16_operand(x, func, name)


def _finish(func: str, stats: Stats, size: int) -> None:
    """Record the device's Stats of the call and surface saturations and LUT range events."""
    record(stats)
    report_events(stats, func, size)


def _no_reduction(shape, bias16, channel_axis: int, stage) -> np.ndarray:
    """The result of an empty reduction (K = 0): readout 0, then the NE stage (bias,
    PostScale, nonlinearity) on the host -- there is no task to run: a TD needs Cin >= 1."""
    shape = tuple(shape)
    if math.prod(shape) == 0:
        return np.zeros(shape, np.float16)
    ax = channel_axis % len(shape)
    y = np.zeros((math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1 :])))
    nl = {"identity": 0, "relu": 1, "lut": 2}[stage.nonlinear]
    if stage.post:  # sigmoid/silu/hard_swish: the biased zeros through the activation's own program
        nl = 0
    bits = _lut.ne_post(
        y, None if bias16 is None else bias16.astype(np.float64), stage.post_scale, nl, stage.block
    )
    z = bits.view(np.float16).reshape(shape)
    return _lower.run_eltwise(z, stage.name)[0] if stage.post else z


class _named:
    """``with _named(func):`` prefixes what the lowering refuses (limits of the hardware)
    with the user's function.  A class, not a generator: a tiny call enters it once, and
    ``contextlib.contextmanager`` costs about a microsecond more."""

    __slots__ = ("func",)

    def __init__(self, func: str):
        self.func = func

    def __enter__(self):
        return None

    def __exit__(self, kind, exc, tb):
        if kind is not None and issubclass(kind, NotImplementedError):
            raise NotImplementedError(f"{self.func}: {exc}") from None
        return False


def _stage(activation, func: str):
    """The NE stage of ``activation`` (errors name the function)."""
    try:
        return _lower.ne_stage(activation)
    except (ValueError, NotImplementedError, TypeError) as exc:
        raise type(exc)(f"{func}: {exc}") from None


def _bias_operand(bias, channels: int, func: str) -> np.ndarray | None:
    if bias is None:
        return None
    b = _fp16_operand(bias, func, "bias")
    if b.shape != (channels,):
        raise ValueError(f"{func}: bias must have shape ({channels},), got {b.shape}")
    return b


def _store(result: np.ndarray, out, func: str) -> np.ndarray:
    res = np.asarray(result, dtype=np.float16)
    if out is None:
        return res[()] if res.ndim == 0 else res  # a scalar for 1-D @ 1-D, as np.matmul
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{func}: out must be a numpy array, got {type(out).__name__}")
    if out.shape != res.shape:
        raise ValueError(f"{func}: out has shape {out.shape}, but the result has shape {res.shape}")
    if not np.can_cast(np.float16, out.dtype, casting="same_kind"):
        raise TypeError(f"{func}: cannot store float16 results into out of dtype {out.dtype}")
    np.copyto(out, res)
    return out


def constant(w) -> np.ndarray:
    """``w`` as a model constant: rounded once to fp16 into a read-only array fastane owns
    (``fastane.lower.bind.freeze``).  Passed as a weight to :func:`matmul`, :func:`linear`,
    :func:`conv1d` or :func:`conv2d`, it is packed into KMem once and then known unchanged
    by identity, with no per-call compare of its bits against a private copy (what a
    plain, mutable numpy array costs: one read of every weight each call; docs/lower.md
    section 5).  This is how a model's weights are held (``fastane.load_model``).  The
    result is a view that cannot be made writeable; do not write through its ``.base``."""
    return _lower.bind.freeze(_fp16_operand(w, "constant", "w")).view()


# ---------------------------------------------------------------------------- matmul
def _precheck_matmul(a, b) -> None:
    """Refuse (``ValueError``) a product the ANE cannot address from the operands' shapes
    alone: before their fp16 copies (of a broadcast view, say: a batch of 2**20 x 149 rows
    took minutes to convert) and the batch index arrays (2 GiB for a batch of 2**28).
    Shapes that do not multiply are left to the checks that name them."""
    try:
        sa, sb = np.shape(a), np.shape(b)
    except ValueError:  # a ragged sequence: the operand check names it
        return
    if not sa or not sb:
        return
    a_batch, b_batch, batch, M, K, K2, N = matmul_dims(sa, sb)
    if batch is None:
        return
    nb = math.prod(batch)
    if K == K2 and nb * M * N and K:
        check_matmul(math.prod(a_batch), math.prod(b_batch), nb, M, K, N)


def matmul(a, b, out=None, *, activation=None, scale=None, out_dtype=None) -> np.ndarray:
    """Matrix product of ``a`` and ``b`` as the ANE computes it; ``np.matmul`` semantics.

    Batch dimensions broadcast, a 1-D operand is promoted to a matrix and the added
    dimension is removed afterwards, scalars are rejected.  Operands are rounded to fp16;
    the sum over ``k`` runs in order ``k = 0..K-1`` in a saturating Q16.16 accumulator.
    ``activation`` (keyword): a fused NE activation (see :func:`conv2d`).
    Returns ``np.float16`` (written into ``out`` when given).

    ``scale`` (and ``out_dtype``): the INT8 path, for int8/uint8 operands (batched: a task a product;
    :mod:`fastane.quantized`): the integer products summed exactly, times ``scale``, rounded
    once to ``out_dtype`` ("float16", "int8" or "uint8").

    Runs on the device as a 1x1 convolution in the (B, C, 1, S) layout (``Cin = K``,
    ``Cout = N``, ``S = M``, weights ``b^T``; see :func:`fastane.lower.run_matmul`).
    ``K`` is at most 32,767 (32,704 with a LUT activation): the L2 must hold a task's whole
    K-deep input column (K rows of one 64-byte burst) and its output row, and fastane does
    not split a reduction across tasks (``NotImplementedError``).
    """
    opts = _quantized.options("matmul", scale, out_dtype)
    if opts is not None:
        if out is not None:
            raise TypeError("matmul: out= is not supported on the INT8 path (scale=)")
        return _quantized.matmul(a, b, opts, activation)
    _precheck_matmul(a, b)
    a16 = _fp16_operand(a, "matmul", "a")
    b16 = _fp16_operand(b, "matmul", "b")
    for i, x in enumerate((a16, b16)):
        if x.ndim == 0:
            raise ValueError(
                f"matmul: Input operand {i} does not have enough dimensions (has 0, "
                f"gufunc core with signature {_MATMUL_SIG} requires 1)"
            )
    a_batch, b_batch, batch, M, K, K2, N = matmul_dims(a16.shape, b16.shape)
    if K != K2:
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
            f"signature {_MATMUL_SIG} (size {K2} is different from {K})"
        )
    if batch is None:
        raise ValueError(
            f"matmul: operands could not be broadcast together: batch dimensions "
            f"{a_batch} of a {a16.shape} and {b_batch} of b {b16.shape}"
        )
    stage = _stage(activation, "matmul")
    nb = math.prod(batch)
    if nb * M * N == 0 or K == 0:
        y = _no_reduction((nb, M, N), None, -1, stage)
        _finish("matmul", Stats(), y.size)
    else:
        if not batch:  # two matrices: one product (the common case, no broadcasting)
            ia = ib = _ONE_PRODUCT
        else:
            ia = np.broadcast_to(np.arange(math.prod(a_batch)).reshape(a_batch), batch).reshape(-1)
            ib = np.broadcast_to(np.arange(math.prod(b_batch)).reshape(b_batch), batch).reshape(-1)
        A3 = a16.reshape((math.prod(a_batch), M, K))
        B3 = b16.reshape((math.prod(b_batch), K, N))
        with _named("matmul"):
            y, stats, _ = _lower.run_matmul(
                A3,
                B3,
                np.asarray(ia, np.int64),
                np.asarray(ib, np.int64),
                activation=activation,
                stats_only=False,
            )
        _finish("matmul", stats, y.size)
    y = y.reshape(batch + (M, N))
    if a16.ndim == 1:
        y = y[..., 0, :]
    if b16.ndim == 1:
        y = y[..., 0]
    return _store(y, out, "matmul")


def linear(x, weight, bias=None, activation=None, *, scale=None, out_dtype=None) -> np.ndarray:
    """``activation(x @ weight.T + bias)`` as the ANE computes it (PyTorch ``nn.functional.linear``).

    ``weight`` has shape ``(out_features, in_features)``; ``x`` has shape
    ``(..., in_features)``.  The bias is added in fp16 after readout (rounded once), then
    the activation (see :func:`conv2d`), both fused in the NE stage of the tasks.
    ``weight`` may be compressed (:func:`fastane.palettize`, :func:`fastane.quantize`): it
    stays compressed in KMem, with the result of its ``decompress()``.  ``scale``/``out_dtype``:
    the INT8 path for int8/uint8 ``x`` and ``weight`` (:mod:`fastane.quantized`).
    """
    opts = _quantized.options("linear", scale, out_dtype)
    if opts is not None:
        return _quantized.linear(x, weight, bias, activation, opts)
    compressed = isinstance(weight, PalettizedWeight)  # fastane.palettize / quantize
    w = weight if compressed else np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got shape {w.shape}")
    x_arr = np.asarray(x)
    if x_arr.ndim == 0 or x_arr.shape[-1] != w.shape[1]:
        raise ValueError(
            f"linear: x has shape {x_arr.shape}, expected (..., {w.shape[1]}) to match "
            f"weight of shape {w.shape}"
        )
    if x_arr.size and w.size:  # the product's size, before the operands' fp16 copies
        check_matmul(1, 1, 1, math.prod(x_arr.shape[:-1]), w.shape[1], w.shape[0], bias is not None)
    w16 = w if compressed else _fp16_operand(w, "linear", "weight")
    x16 = _fp16_operand(x_arr, "linear", "x")
    N, K = w16.shape
    b16 = _bias_operand(bias, N, "linear")
    stage = _stage(activation, "linear")
    batch = x16.shape[:-1]
    M = math.prod(batch)
    if linear_problem(x16.shape, N, b16 is not None, activation, w16.bits if compressed else 0) is None:
        y = _no_reduction((M, N), b16, -1, stage)
        _finish("linear", Stats(), y.size)
    elif compressed:
        with _named("linear"):
            y, stats = _compress.linear(x16, w16, b16, activation, _lower.run_conv)
        _finish("linear", stats, y.size)
        return y
    else:
        with _named("linear"):
            y, stats, _ = _lower.run_matmul(
                x16.reshape(1, M, K),
                w16.T[None],
                np.zeros(1, np.int64),
                np.zeros(1, np.int64),
                bias16=b16,
                activation=activation,
                stats_only=False,
            )
        _finish("linear", stats, y.size)
    return y.reshape(batch + (N,))


# ---------------------------------------------------------------------------- convolution
def _pair(v, func: str, name: str, minimum: int) -> tuple[int, int]:
    vals = (v, v) if np.ndim(v) == 0 else tuple(v)
    if len(vals) != 2:
        raise ValueError(f"{func}: {name} must be an int or a pair of ints, got {v!r}")
    try:
        vals = tuple(operator.index(x) for x in vals)
    except TypeError:
        raise TypeError(f"{func}: {name} must be an int or a pair of ints, got {v!r}") from None
    if min(vals) < minimum:
        raise ValueError(f"{func}: {name} must be >= {minimum}, got {v!r}")
    return vals


def _padding(padding, k, dil, stride, func: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """((top, bottom), (left, right)) zero padding."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"{func}: padding='same' is not supported for strided convolutions")
            tot = [d * (kk - 1) for d, kk in zip(dil, k)]
            return (tot[0] // 2, tot[0] - tot[0] // 2), (tot[1] // 2, tot[1] - tot[1] // 2)
        raise ValueError(f"{func}: invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    ph, pw = _pair(padding, func, "padding", 0)
    return (ph, ph), (pw, pw)


def conv2d(
    x,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    activation=None,
    *,
    scale=None,
    out_dtype=None,
) -> np.ndarray:
    """2-D convolution in NCHW as the ANE computes it (PyTorch ``conv2d`` conventions).

    ``x``: ``(N, C, H, W)`` or unbatched ``(C, H, W)``; ``weight``: ``(CO, C/groups, KH, KW)``;
    ``bias``: ``(CO,)``; ``stride``, ``dilation``: int or pair; ``padding``: int, pair,
    ``"valid"`` or ``"same"`` (zeros).  Each output sums over input channel (within its
    group), then kernel row, then kernel column, in a saturating Q16.16 accumulator; the
    bias is added in fp16 after readout.  ``activation``: ``None``, ``"relu"`` or an
    activation of :mod:`fastane.activations` that is one NE stage (``"tanh"``, ``"gelu"``,
    ``"exp"``, ``"exp2"``, ``"relu6"``, ``"hardtanh"``, ``"leaky_relu"``, ``"selu"``,
    ``"elu"``, ``"erf"``, ``"hard_sigmoid"``, ``"sign"``, ``"reciprocal"``, ``"rsqrt"``,
    ``"sqrt"``, ``"log2"``; or a :class:`fastane.lut.CoeffBlock`), applied to the biased
    fp16 value exactly as the function of that name would.  Bias and activation run fused
    in the NE stage of the tasks; ``"sigmoid"``, ``"silu"`` and ``"hard_swish"`` (also as
    the function of that name would) add tasks after each convolution task (an elementwise
    NE task, planar tasks), their intermediates kept in L2
    (docs/lower.md).  Returns ``np.float16``.  A compressed ``weight`` (:func:`fastane.palettize`,
    :func:`fastane.quantize`) stays compressed in KMem.  ``scale``/``out_dtype``: the INT8
    path for int8/uint8 ``x`` and ``weight`` (:mod:`fastane.quantized`).
    """
    opts = _quantized.options("conv2d", scale, out_dtype)
    return _conv2d("conv2d", x, weight, bias, stride, padding, dilation, groups, activation, opts)


def _conv2d(func, x, weight, bias, stride, padding, dilation, groups, activation, opts=None) -> np.ndarray:
    if opts is not None:  # the INT8 path: integers as they are
        x16, w16 = _quantized.int8_operand(x, func, "input"), _quantized.int8_operand(weight, func, "weight")
    else:
        x16 = _fp16_operand(x, func, "input")
        # a compressed weight (fastane.palettize / quantize) stays compressed down to KMem
        w16 = weight if isinstance(weight, PalettizedWeight) else _fp16_operand(weight, func, "weight")
    if w16.ndim != 4:
        raise ValueError(
            f"{func}: expected a 4-D weight (out_channels, in_channels/groups, kH, kW), got shape {w16.shape}"
        )
    unbatched = x16.ndim == 3
    if unbatched:
        x16 = x16[None]
    if x16.ndim != 4:
        raise ValueError(f"{func}: expected 3-D (unbatched) or 4-D (batched) input, got shape {np.shape(x)}")
    try:
        groups = operator.index(groups)
    except TypeError:
        raise TypeError(f"{func}: groups must be an int, got {groups!r}") from None
    if groups < 1:
        raise ValueError(f"{func}: groups must be a positive integer, got {groups}")
    N, C, H, W = x16.shape
    CO, CG, KH, KW = w16.shape
    if KH == 0 or KW == 0:
        raise ValueError(f"{func}: the kernel must be at least 1x1, got weight of shape {w16.shape}")
    if CO % groups:
        raise ValueError(f"{func}: out_channels ({CO}) must be divisible by groups ({groups})")
    if C != CG * groups:
        raise ValueError(
            f"{func}: Given groups={groups}, weight of size {list(w16.shape)}, expected "
            f"input{list(x16.shape)} to have {CG * groups} channels, but got {C} channels instead"
        )
    s = _pair(stride, func, "stride", 1)
    d = _pair(dilation, func, "dilation", 1)
    pads = _padding(padding, (KH, KW), d, s, func)
    bits = w16.bits if isinstance(w16, PalettizedWeight) else 0
    conv = conv_problem(x16.shape, w16.shape, s, pads, d, groups, bias is not None, activation, bits)
    if conv.hout <= 0 or conv.wout <= 0:
        raise ValueError(
            f"{func}: the padded input ({H + sum(pads[0])}x{W + sum(pads[1])}) is smaller than the "
            f"dilated kernel ({conv.span[0]}x{conv.span[1]})"
        )
    if opts is not None:
        y = _quantized.conv2d(func, x16, w16, bias, s, pads, d, groups, activation, opts)
        return y[0] if unbatched else y
    stage = _stage(activation, func)
    b16 = _bias_operand(bias, CO, func)
    if conv.empty:
        y = _no_reduction((N, CO, conv.hout, conv.wout), b16, 1, stage)
        _finish(func, Stats(), y.size)
    else:
        with _named(func):
            y, stats, _ = _lower.run_conv(x16, w16, b16, s, pads, d, groups, activation, stats_only=False)
        _finish(func, stats, y.size)
    return y[0] if unbatched else y


def conv1d(
    x,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    activation=None,
    *,
    scale=None,
    out_dtype=None,
) -> np.ndarray:
    """1-D convolution in NCL as the ANE computes it (a conv2d of height 1).

    ``x``: ``(N, C, L)`` or ``(C, L)``; ``weight``: ``(CO, C/groups, K)`` (or compressed, as
    for :func:`conv2d`); other arguments as :func:`conv2d` (ints or ``"valid"``/``"same"``
    for ``padding``; ``scale``/``out_dtype``: the INT8 path).
    """
    func = "conv1d"
    opts = _quantized.options(func, scale, out_dtype)
    xa = np.asarray(x)
    wa = weight if isinstance(weight, PalettizedWeight) else np.asarray(weight)
    if xa.ndim not in (2, 3):
        raise ValueError(f"{func}: expected 2-D (unbatched) or 3-D (batched) input, got shape {xa.shape}")
    if wa.ndim != 3:
        raise ValueError(
            f"{func}: expected a 3-D weight (out_channels, in_channels/groups, k), got shape {wa.shape}"
        )

    def widen(v, name, height_value, minimum):  # an int or 1-tuple along L -> (H, L)
        vals = (v,) if np.ndim(v) == 0 else tuple(v)
        if len(vals) != 1:
            raise ValueError(f"{func}: {name} must be an int or a 1-tuple, got {v!r}")
        try:
            val = operator.index(vals[0])
        except TypeError:
            raise TypeError(f"{func}: {name} must be an int or a 1-tuple, got {v!r}") from None
        if val < minimum:
            raise ValueError(f"{func}: {name} must be >= {minimum}, got {v!r}")
        return (height_value, val)

    pad = padding if isinstance(padding, str) else widen(padding, "padding", CONV1D_H["pad"], 0)
    w2 = (
        wa.reshaped(wa.shape[:2] + (1,) + wa.shape[2:])
        if isinstance(wa, PalettizedWeight)
        else wa[..., None, :]
    )
    y = _conv2d(
        func,
        xa[..., None, :],
        w2,
        bias,
        widen(stride, "stride", CONV1D_H["stride"], 1),
        pad,
        widen(dilation, "dilation", CONV1D_H["dilation"], 1),
        groups,
        activation,
        opts,
    )
    return y[..., 0, :]
