"""The NE block: post-MAC bias, scale and nonlinearity (SPEC 3).

Order (SPEC decision): accumulator readout -> + bias (when ``MACCfg.BiasMode`` is 1;
fp16, round to nearest even) -> x ``PostScale`` (fp16, RNE; 0x3c00 = 1.0 is the
identity) -> ``MACCfg.NonlinearMode`` (0 identity, 1 ReLU, 2 LUT).  **Decisions**:
``PostScale`` always applies (``PostScaleMode`` is 0 in every corpus TD); the integer-path
fields ``AccBiasShift``/``PostRightShift`` must be 0 on the FP16 path; the bias is

* ``MACCfg.MatrixBiasEn = 0``: ``AccBias``, one fp16 value for every output channel;
* ``MACCfg.MatrixBiasEn = 1`` (**hypothesis**; no corpus program has it): one fp16 value
  per output channel, read from KMem.

**Decision: the NE coefficients in KMem.**  Each core's KMem holds, in this order, its
output channels' kernels (``w = round_up(m x Cin/groups x Kh x Kw x bytes, 64)`` bytes,
``m = ceil(Cout / 16)``, the KernelDMA layout; 0 bytes when ``KernelMode = 1``), then with
``MatrixBiasEn`` its ``m`` channels' biases (fp16, ``b = round_up(2m, 64)`` bytes), then,
on core 0 only, the 0x80-byte LUT coefficient block when ``NonlinearMode = 2`` (at ``w +
b``).  A kernel-less LUT task (every corpus LUT program) thus finds its table at the start
of core 0's KMem; a convolution with a fused LUT finds it after core 0's kernel.  The
table (43 little-endian u16 words) is unpacked by ``fastane.lut``.

The arithmetic is ``fastane.kernels.ne.ne_post``; this block decodes the registers and
finds the bias vector and the table in KMem.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

import numpy as np

from fastane.kernels import ne as _kne
from fastane.kernels import fp16 as _fp16
from fastane.kernels import ne_table as _ktable

from ..errors import TDError
from . import int8, palette
from .faults import KMemOverflow, UnsupportedTask
from ..m1 import CORES, LUT_BLOCK, kernel_layout

IDENTITY, RELU, LUT = 0, 1, 2


@dataclass(frozen=True)
class NEConfig:
    bias_mode: int
    acc_bias: int  # fp16 bits
    post_scale: int  # fp16 bits
    nonlinear: int
    #: per-channel bias from KMem (MatrixBiasEn with BiasMode)
    bias_vector: bool = False
    cout: int = 0
    #: output channels per core, and the KMem byte offsets of the bias vector and the LUT
    per_core: int = 1
    bias_offset: int = 0
    lut_offset: int = 0

    @staticmethod
    def f16(bits: int) -> float:
        return float(np.uint16(bits).view(np.float16))


def config(regs: dict, what: str) -> NEConfig:
    """Decode and check the NE registers."""
    integer = int8.is_int(regs["Common.ChCfg.InFmt"])  # the INT8 path reads the shifts
    names = (
        ("NE.KernelCfg.PalettizedEn", "NE.KernelCfg.SparseFmt") if integer else ("NE.KernelCfg.SparseFmt",)
    )
    if not integer:  # palettized kernels: fastane.device.palette (the FP16 path)
        names = ("NE.AccBias.AccBiasShift", "NE.PostScale.PostRightShift") + names
    for name in names:
        if regs[name]:
            raise UnsupportedTask(
                f"{what}: {name} = {regs[name]} is not emulated on the {'INT8' if integer else 'FP16'} path"
            )
    cout = regs["Common.Cout.Cout"]
    vector = bool(regs["NE.MACCfg.BiasMode"] and regs["NE.MACCfg.MatrixBiasEn"])
    per = prefix = 0  # an elementwise task (KernelMode 1) holds no kernels
    if regs["NE.MACCfg.KernelMode"] == 0 and cout > 0:
        groups = max(regs["Common.GroupConvCfg.NumGroups"], 1)
        n = regs["Common.Cin.Cin"] // groups * regs["Common.ConvCfg.Kh"] * regs["Common.ConvCfg.Kw"]
        fmt = palette.kernel_format(regs, what)
        fmt = fmt % 3 if isinstance(fmt, int) else fmt  # 3 is refused by the MAC block first
        per, prefix = palette.channel_bytes(fmt, n), palette.prefix_bytes(fmt)
    lay = kernel_layout(max(cout, 1), per, vector, prefix=prefix)
    cfg = NEConfig(
        regs["NE.MACCfg.BiasMode"],
        regs["NE.AccBias.AccBias"],
        regs["NE.PostScale.PostScale"],
        regs["NE.MACCfg.NonlinearMode"],
        vector,
        cout,
        lay.m,
        lay.bias_offset,
        lay.lut_offset,
    )
    if cfg.nonlinear not in (IDENTITY, RELU, LUT):
        raise UnsupportedTask(f"{what}: NE.MACCfg.NonlinearMode = {cfg.nonlinear} is not defined")
    if cfg.nonlinear == LUT and _lut_unpacker() is None:
        raise UnsupportedTask(
            f"{what}: NonlinearMode 2 (LUT) needs fastane.lut to read the "
            f"coefficient block, which is not available yet"
        )
    return cfg


def _lut_unpacker():
    """``fastane.lut``'s coefficient-block parser (words -> (lutf, luti)), if present."""
    try:
        mod = importlib.import_module("fastane.lut")
    except ImportError:
        return None
    return getattr(mod, "from_words", None)


_NO_LUT = (np.zeros(41), np.zeros(3, dtype=np.int64))
_NO_BIAS = np.zeros(0)


@functools.lru_cache(maxsize=64)
def _lut_args(raw: bytes):
    """``fastane.lut.from_words`` of a coefficient block's bytes (cached by content)."""
    return _lut_unpacker()(np.frombuffer(raw, "<u2"))


def needs(cfg: NEConfig) -> dict:
    """KMem the NE reads: ``{core: (bytes from the start of its KMem, what)}``."""
    need = {}
    if cfg.bias_vector:
        for lane in range(min(CORES, -(-cfg.cout // cfg.per_core))):
            n = min(cfg.per_core, cfg.cout - lane * cfg.per_core)
            need[lane] = (cfg.bias_offset + 2 * n, "bias vector")
    if cfg.nonlinear == LUT:
        need[0] = (cfg.lut_offset + LUT_BLOCK, "LUT block")
    return need


def check_loaded(cfg: NEConfig, kdma, what: str = "NE") -> None:
    """Fault unless KernelDMA loaded the bias vector and LUT block the NE reads."""
    loaded = {lane.lane: lane.nbytes for lane in kdma.lanes}
    for lane, (need, part) in needs(cfg).items():
        if loaded.get(lane, 0) < need:
            raise KMemOverflow(
                f"{what}: core {lane} reads its {part} up to byte {need:#x} of its "
                f"KMem, but KernelDMA loaded only {loaded.get(lane, 0):#x}",
                lane=lane,
                nbytes=need,
            )


def check_lut(cfg: NEConfig, kdma, memory: np.ndarray, written=(), what: str = "NE") -> None:
    """Fault unless the LUT block KernelDMA lane 0 will load (from ``memory``, the
    unified-memory bytes) is one the NE can evaluate: checked while planning, so a bad
    block faults before any task of the chain moves data.  ``written``: ``(start, end,
    task)`` byte ranges earlier tasks of the chain write; a block inside one of them is
    only known when the chain runs, and is refused."""
    lane = next(i for i, ln in enumerate(kdma.lanes) if ln.lane == 0)  # check_loaded: present
    start = kdma.sources[lane] + cfg.lut_offset
    end = start + LUT_BLOCK
    for lo, hi, task in written:
        if lo < end and start < hi:
            raise UnsupportedTask(
                f"{what}: the LUT block KernelDMA loads from [{start:#x}, {end:#x}) "
                f"is written by TD {task} of the same chain; fastane checks "
                f"coefficient blocks before a chain runs",
                addr=start,
            )
    try:
        _lut_args(memory[start:end].tobytes())
    except TDError as exc:
        raise UnsupportedTask(
            f"{what}: the LUT block in core 0's KMem (loaded from {start:#x}) cannot be evaluated: {exc}",
            addr=start,
        ) from exc


def _coefficients(cfg: NEConfig, c: int, kmem):
    """``(bias float64[C] or [0], scale, lutf, luti)``: what the NE reads from its
    registers and KMem for ``c`` output channels."""
    if cfg.bias_vector:
        m, off = cfg.per_core, cfg.bias_offset
        lanes = -(-c // m)
        bias = kmem.read(lanes, off, 2 * m).view("<f2").reshape(-1)[:c].astype(np.float64)
    elif cfg.bias_mode:
        bias = np.full(c, cfg.f16(cfg.acc_bias))
    else:
        bias = _NO_BIAS
    if cfg.nonlinear == LUT:
        lutf, luti = _lut_args(kmem.read(1, cfg.lut_offset, LUT_BLOCK).tobytes())
    else:
        lutf, luti = _NO_LUT
    return bias, _f16(cfg.post_scale), lutf, luti


@functools.lru_cache(maxsize=256)
def _f16(bits: int) -> float:
    return NEConfig.f16(bits)


def run(cfg: NEConfig, values: np.ndarray, kmem=None, as_fp16: bool = False):
    """``(values, lut_underflow, lut_overflow)`` after bias, scale and nonlinearity.

    ``values``: float64 ``[1, C, H, W]`` holding exact fp16 values; the result likewise,
    or float16 with ``as_fp16`` (what TileDMADst writes: no conversion round trip).
    """
    n, c, h, w = values.shape
    y = np.ascontiguousarray(values).reshape(n, c, h * w)
    bias, scale, lutf, luti = _coefficients(cfg, c, kmem)
    out = np.empty(y.shape, dtype=np.uint16)
    counts = np.zeros(2, dtype=np.int64)
    looked_up = False
    # a stage called on fewer than COUNTED_MIN values is neither counted nor looked up: its
    # key (two array round trips) is not worth building on every small task
    small = cfg.bias_vector or y.size < COUNTED_MIN
    key = None if small else _key(bias[0] if bias.size else None, scale, cfg.nonlinear, lutf, luti)
    if key is not None and _tabled(key, y.size):
        table, events = _table_cached(*key)
        # False at a NaN input (its payload is the kernel's business): then the kernel
        looked_up = _ktable.ne_lookup(y.reshape(-1), table, events, out.reshape(-1), counts)
    if looked_up:
        pass
    elif cfg.nonlinear == LUT:
        _kne.ne_post(y, bias, scale, cfg.nonlinear, lutf, luti, out, counts)
    else:  # the same bits without compiling the table
        _kne.ne_post_plain(y, bias, scale, cfg.nonlinear == RELU, out)
    result = out.view(np.float16).reshape(values.shape)
    if not as_fp16:
        result = result.astype(np.float64)
    return result, int(counts[0]), int(counts[1])


#: elements from which an NE stage with one bias for all channels (identity, ReLU or LUT)
#: is computed through its table of the 63488 non-NaN fp16 patterns (:mod:`fastane.kernels.ne_table`); tables kept.
#: The elements count over the calls of one stage (the same bias, scale and LUT): the
#: layers of a model that share an activation (MobileNetV3's HardSwish after 47040-value
#: convolutions, say) build its table once, then look it up, run after run
TABLE_MIN = 1 << 16
TABLES = 16
#: the stages counted (:func:`_tabled`); the counts start again beyond this many
STAGES_COUNTED = 1024
#: calls of fewer elements are not counted (nor looked up): a stage called only on small
#: arrays, thousands of times, builds no table and holds no more state than a few calls
COUNTED_MIN = TABLE_MIN // 16
_computed: dict = {}


def _tabled(key: tuple, elements: int) -> bool:
    """Whether the NE stage ``key`` (:func:`_key`) computes ``elements`` values through its
    table: when they and the values it computed before, over its calls of at least
    :data:`COUNTED_MIN` values, reach :data:`TABLE_MIN` (the table costs about as much as
    that many values computed)."""
    if elements < COUNTED_MIN:
        return False
    seen = _computed.get(key, 0)
    if seen >= TABLE_MIN:
        return True
    if len(_computed) >= STAGES_COUNTED:
        _computed.clear()
    _computed[key] = seen + elements
    return seen + elements >= TABLE_MIN


#: outputs below this many are read out on the calling thread (:func:`finish`), above across
#: the threads (the branch-free kernels either way, but for a LUT)
READOUT_SERIAL = 1 << 15


@functools.lru_cache(maxsize=1)
def pattern_values() -> np.ndarray:
    """Every pattern's value as the fp16 decoder gives it to the kernels (NaN payloads
    included): the table's NaN entries are what the kernel gives a NaN TileDMASrc read."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = np.empty(1 << 16)
    _fp16.f16_bits_to_f64_array(patterns, values)
    return values


@functools.lru_cache(maxsize=TABLES)
def _table_cached(bias_bits, scale_bits, nonlinear, lutf_bytes, luti_bytes):
    """``(fp16 result, LUT event)`` of the NE stage for every input pattern, cached by
    :func:`_key` (the bit patterns of the bias and the scale -- -0.0 is not 0.0 --, the
    nonlinearity and the table's parameters)."""
    lutf = np.frombuffer(lutf_bytes, np.float64)
    luti = np.frombuffer(luti_bytes, np.int64)
    b = _NO_BIAS if bias_bits is None else np.array([bias_bits], np.uint64).view(np.float64)
    scale = float(np.array([scale_bits], np.uint64).view(np.float64)[0])
    table = np.empty(1 << 16, np.uint16)
    events = np.empty(1 << 16, np.uint8)
    _ktable.ne_table(pattern_values(), b, scale, nonlinear, lutf, luti, table, events)
    table.flags.writeable = False
    events.flags.writeable = False
    return table, events


def _bits64(v: float) -> int:
    return int(np.array([v], np.float64).view(np.uint64)[0])


def _key(bias, scale, nonlinear, lutf, luti) -> tuple:
    return (
        None if bias is None else _bits64(bias),
        _bits64(scale),
        int(nonlinear),
        np.ascontiguousarray(lutf, np.float64).tobytes(),
        np.ascontiguousarray(luti, np.int64).tobytes(),
    )


def plain(cfg: NEConfig) -> bool:
    """Whether the stage is identity or ReLU alone: no bias (an added +0 would turn -0
    into +0), PostScale 1.0, no LUT -- a function of the fp16 pattern needing no table
    (:func:`fastane.kernels.ne_table.plain_window`)."""
    return not (cfg.bias_mode or cfg.bias_vector) and cfg.post_scale == 0x3C00 and cfg.nonlinear != LUT


def pattern_table(cfg: NEConfig, kmem, elements: int):
    """The uint64 table of a kernel-less task's NE stage for every one of the 65536 input
    patterns (:func:`fastane.kernels.ne_table.lookup_window`'s; NaN ones included: what
    :func:`run` gives each value TileDMASrc decodes), or None where that does not pay or does not apply: fewer than
    :data:`TABLE_MIN` elements, or a bias per channel (not a function of the pattern)."""
    if elements < TABLE_MIN or cfg.bias_vector:
        return None
    bias, scale, lutf, luti = _coefficients(cfg, 1, kmem)
    return _lane_table(*_key(bias[0] if bias.size else None, scale, cfg.nonlinear, lutf, luti))


@functools.lru_cache(maxsize=TABLES)
def _lane_table(*key):
    out = np.empty(1 << 16, np.uint64)
    _ktable.lane_table(*_table_cached(*key), out)
    out.flags.writeable = False
    return out


def finish(cfg: NEConfig, acc: np.ndarray, flag: np.ndarray, kmem, window) -> tuple:
    """The accumulator readout, this stage and TileDMADst in one pass: the fp16 results
    of ``acc``/``flag`` (``[1, C, H, W]``, the MAC kernels' output) go straight into the
    destination ``window`` (:func:`fastane.device.tile_dma.fp16_window`), bit for bit
    what ``mac.run`` -> :func:`run` -> ``tile_dma.write`` produce.

    ``flag`` None: ``acc`` holds exact, unclamped int32 sums (the skinny kernel's,
    :func:`fastane.device.mac.skinny`), read out by :func:`fastane.kernels.ne.
    readout_sums` (nothing NaN or saturated to count) -- or, before a LUT, as float64
    accumulators with no flag set, by the general kernel.

    Returns ``(nan_outputs, saturated, lut_underflow, lut_overflow)``."""
    _, c, h, w = acc.shape
    bias, scale, lutf, luti = _coefficients(cfg, c, kmem)
    relu = cfg.nonlinear == RELU
    if flag is None:
        if cfg.nonlinear != LUT:
            _kne.readout_sums(
                acc.reshape(c, h * w), bias, scale, relu, *window, w, threads=c * h * w >= READOUT_SERIAL
            )
            return 0, 0, 0, 0
        acc, flag = acc.astype(np.float64), np.zeros(acc.shape, np.int8)
    counts = np.zeros(4, dtype=np.int64)
    acc, flag = acc.reshape(c, h, w), flag.reshape(c, h, w)
    if cfg.nonlinear == LUT:  # the general kernel (readout_fast gives the same bits and counts)
        _kne.readout_post(acc, flag, bias, scale, cfg.nonlinear, lutf, luti, *window, counts)
    else:  # identity or ReLU: the branch-free kernel, on the calling thread for outputs too
        # few for threads (entering its parallel region costs ~10 us), else across the channels
        kernel = _kne.readout_serial if c * h * w < READOUT_SERIAL else _kne.readout_fast
        kernel(acc, flag, bias, scale, relu, *window, counts)
    return int(counts[0]), int(counts[1]), int(counts[2]), int(counts[3])
