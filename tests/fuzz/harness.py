"""fastane's fuzzing harness: seeded mutations of programs, .hwx containers and numpy calls.

Every case is generated in the parent from ``(seed, index)`` alone (a ``random.Random``
seeded with both), so a case is reproduced by its number.  Three kinds:

* ``td``: a base program (the corpus's real programs when ``FASTANE_CORPUS`` is set, plus
  programs built here) with its TD stream, kernel bytes or BAR table mutated -- bit flips,
  random words, every field of the table set to extreme values, chain games
  (``NextPointer``/``NextSize``/``EON``/``TBE``, the pushed TD count), BAR slots dropped,
  swapped or narrowed, a truncated stream, LUT-block words;
* ``hwx``: a corpus ``.hwx`` container with bytes flipped, 32-bit values overwritten with
  extremes, or truncated, loaded and (when it loads) run;
* ``api``: a hostile numpy call (empty, 0-d, broadcast-huge, non-finite, wrong dtype, bad
  keyword values, wrong ``out``).

Each case runs in a child process forked from a warmed-up parent, with ``RLIMIT_AS``
(the parent's address space plus :data:`AS_HEADROOM`) and a timeout; a crash (signal),
a hang (timeout) or a memory blow-up (``MemoryError`` not raised by fastane itself) is
caught and named with the bytes that caused it.  Invariants checked on every case:

1. only precise errors: a :class:`fastane.DeviceFault` from a submitted program;
   fastane's errors or ``ValueError``/``TypeError``/``NotImplementedError`` from user-level
   calls (``Device.run``, loaders, the numpy API);
2. a fault leaves unified memory, KMem and L2 exactly as they were;
3. a stats-only run and a computing run agree on the fault (its class) and on the Stats
   (every counter that does not depend on the data); stats-only changes nothing at all;
4. an accepted run writes only inside the destination windows its TDs name (memory is
   canary-filled before the run);
5. ``Device.run`` and the numpy API return float16 arrays.

Usage: ``python tests/fuzz/harness.py --cases N [--seed S] [--out .fuzz] [--resume]``
(``scripts/fuzz.sh N`` wraps it); failures are saved under ``OUT/failures/``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import random
import sys
import traceback
from pathlib import Path

import numpy as np

import fuzzkit
from fuzzkit import AS_HEADROOM

#: seconds a case may run
TIMEOUT = 60.0
CANARY = 0xA5
#: largest input (elements) a case fills with data; bigger tensors run stats-only only
MAX_FILL = 1 << 21
KINDS = (("td", 70), ("hwx", 12), ("api", 18))
#: largest broadcast view (elements) the API cases compute on
SMALL_BROADCAST = 1 << 22
#: share of the TD cases whose base is a corpus program (the rest: the small built-in ones)
CORPUS_SHARE = 0.3

_BASES = None  # name -> Program, built once in the parent


class Violation(fuzzkit.Failure):
    """An invariant failed."""

    status = "violation"


# ------------------------------------------------------------------ base programs
def _builtin_programs() -> dict:
    """Programs built with fastane's own TD builders and lowering (no corpus needed)."""
    from fastane import lower, lut
    from fastane.device import pack_weights
    from fastane.td import Program, conv_td
    from fastane.td.asm import eltwise_td

    rng = np.random.default_rng(0)
    out = {}
    w = rng.standard_normal((3, 8, 1, 1)).astype(np.float16)
    k, f = pack_weights(w)
    out["conv1x1"] = Program.from_tds(
        [conv_td((1, 8, 4, 4), (1, 3, 4, 4)).update(f)], kernel=k, name="conv1x1"
    )
    w3 = rng.standard_normal((4, 2, 3, 3)).astype(np.float16)
    k3, f3 = pack_weights(w3)
    out["conv3x3s2"] = Program.from_tds(
        [conv_td((1, 2, 9, 9), (1, 4, 4, 4), kernel=(3, 3), stride=(2, 2)).update(f3)],
        kernel=k3,
        name="conv3x3s2",
    )
    blk = lut.get_block("tanh").to_bytes()
    relu = eltwise_td((1, 4, 64), nonlinear="relu", src=5, dst=4, eon=False, nid=1)
    tanh = eltwise_td((1, 4, 64), nonlinear="lut", src=5, dst=6, kernel_slot=1, nid=2)
    out["relu+tanh"] = Program.from_tds([relu, tanh], kernel=blk, name="relu+tanh")
    add = eltwise_td((2, 3, 40), op="add", src=5, src1=6, dst=4)
    out["planar-add"] = Program.from_tds([add], name="planar-add")
    for name, act, n in (("tanh", "tanh", 300), ("silu", "silu", 200), ("sigmoid", "sigmoid", 96)):
        low = lower.build(lower.Eltwise(n, act))
        out[f"lowered-{name}"] = low.with_weights()[0]
    low = lower.build(lower.Conv.matmul(8, 16, 24, 1, True, None))
    out["lowered-matmul"] = _lowered_program(low, rng)
    return out


def _lowered_program(low, rng):
    """The first program of a lowered convolution, with random weights and zero biases."""
    c = low.conv
    w = rng.standard_normal((c.cout, c.cin // c.groups, c.kh, c.kw)).astype(np.float16)
    return low.with_weights(w, np.zeros(c.cout, np.float16))[0]


def _corpus_programs() -> dict:
    root = os.environ.get("FASTANE_CORPUS")
    if not root or not Path(root).is_dir():
        return {}
    from fastane.td import load_program

    out = {}
    for path in sorted(Path(root).glob("m1-kernels/*/*.bin")) + sorted(Path(root).glob("m1-hwx/*.hwx")):
        try:
            out[f"{path.parent.name}/{path.name}"] = load_program(path)
        except Exception:
            continue
    return out


def bases() -> dict:
    global _BASES
    if _BASES is None:
        _BASES = {**_builtin_programs(), **_corpus_programs()}
    return _BASES


def hwx_files() -> dict:
    root = os.environ.get("FASTANE_CORPUS")
    if not root:
        return {}
    return {p.name: p.read_bytes() for p in sorted(Path(root).glob("m1-hwx/*.hwx"))}


# ------------------------------------------------------------------ case generation
def _extremes(width: int, rng: random.Random) -> int:
    top = (1 << width) - 1
    return rng.choice(
        [
            0,
            1,
            2,
            top,
            top - 1,
            top >> 1,
            (top >> 1) + 1,
            rng.randrange(top + 1),
            rng.randrange(min(top, 64) + 1),
        ]
    )


def make_case(seed: int, index: int, corpus_share: float = None) -> dict:
    """The case ``index`` of campaign ``seed`` (JSON-able; bytes as hex); ``corpus_share``:
    of the TD cases, the share whose base is a corpus program (default :data:`CORPUS_SHARE`)."""
    rng = random.Random(f"{seed}:{index}")
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    if kind == "hwx" and not hwx_files():
        kind = "td"
    if kind == "td":
        return _td_case(rng, index, CORPUS_SHARE if corpus_share is None else corpus_share)
    if kind == "hwx":
        return _hwx_case(rng, index)
    return _api_case(rng, index)


def _td_case(rng: random.Random, index: int, corpus_share: float) -> dict:
    from fastane.td.fields import BY_NAME, TD_FIELDS, TD_SIZE

    names = sorted(bases())
    small = [n for n in names if "/" not in n]  # built here: small tensors, fast cases
    big = [n for n in names if "/" in n]  # the corpus's programs (large tensors)
    base = rng.choice(big if big and rng.random() < corpus_share else small)
    prog = bases()[base]
    stream = bytearray(prog.td_stream)
    kernel = bytearray(prog.kernel)
    ntd = len(prog.tds)
    muts, bar_games, count = [], [], None
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5])):
        m = rng.choice(
            [
                "bit",
                "bit",
                "word",
                "field",
                "field",
                "field",
                "field",
                "chain",
                "bar",
                "truncate",
                "kernel",
                "count",
                "stride0",
            ]
        )
        t = rng.randrange(ntd)
        off0 = prog.offsets[t]
        if m == "bit":
            pos = off0 + rng.randrange(TD_SIZE)
            bit = rng.randrange(8)
            stream[pos] ^= 1 << bit
            muts.append(f"flip TD {t} byte {pos - off0:#x} bit {bit}")
        elif m == "word":
            wi = rng.randrange(TD_SIZE // 4)
            v = rng.choice([0, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, rng.getrandbits(32)])
            stream[off0 + 4 * wi : off0 + 4 * wi + 4] = v.to_bytes(4, "little")
            muts.append(f"TD {t} word {wi} = {v:#x}")
        elif m in ("field", "chain", "bar", "stride0"):
            if m == "field":
                f = rng.choice(TD_FIELDS)
            elif m == "chain":
                f = BY_NAME[
                    rng.choice(
                        [
                            "Header.NextPointer",
                            "Header.NextSize",
                            "Header.EON",
                            "Header.TBE",
                            "Header.TBase",
                            "Header.TID",
                            "Header.NID",
                        ]
                    )
                ]
            elif m == "bar":
                f = BY_NAME[
                    rng.choice(
                        [
                            "Header.RBase0",
                            "Header.RBase1",
                            "Header.WBase",
                            "Header.KBase0",
                            "Header.RBE0",
                            "Header.RBE1",
                            "Header.WBE",
                            "Header.KBE0",
                            "Header.KBE1",
                        ]
                    )
                ]
            else:
                f = BY_NAME[
                    rng.choice(
                        [
                            "TileDMASrc.RowStride.Stride",
                            "TileDMASrc.PlaneStride.PlaneStride",
                            "TileDMADst.RowStride.RowStride",
                            "TileDMADst.PlaneStride.PlaneStride",
                            "Common.Cin.Cin",
                            "Common.Cout.Cout",
                            "Common.InDim.Win",
                            "Common.OutDim.Wout",
                            "Common.InDim.Hin",
                            "Common.OutDim.Hout",
                        ]
                    )
                ]
            v = 0 if m == "stride0" and "Stride" in f.name else _extremes(f.width, rng)
            word = int.from_bytes(stream[off0 + 4 * f.word : off0 + 4 * f.word + 4], "little")
            # a value wider than the field (2 in a 1-bit field) spills into the next bits, a
            # neighbour's mutation; beyond the 32-bit word it is cut off
            word = ((word & ~(f.mask << f.shift)) | (v << f.shift)) & 0xFFFFFFFF
            stream[off0 + 4 * f.word : off0 + 4 * f.word + 4] = word.to_bytes(4, "little")
            muts.append(f"TD {t} {f.name} = {v:#x}")
        elif m == "truncate":
            n = rng.randrange(len(stream))
            del stream[n:]
            muts.append(f"truncate stream to {n:#x}")
            break
        elif m == "kernel" and kernel:
            pos = rng.randrange(len(kernel))
            if rng.random() < 0.5 and len(kernel) >= 86:  # a LUT block word
                wi = rng.randrange(43)
                pos = 2 * wi
                v = rng.choice([0, 0xFFFF, 0x7C00, 0xFC00, 0x7E00, rng.getrandbits(16)])
                kernel[pos : pos + 2] = v.to_bytes(2, "little")
                muts.append(f"kernel word {wi} = {v:#x}")
            else:
                kernel[pos] = rng.getrandbits(8)
                muts.append(f"kernel byte {pos:#x} = {kernel[pos]:#x}")
        elif m == "count":
            count = rng.choice([1, ntd + 1, 0xFFFF, max(ntd - 1, 1)])
            muts.append(f"pushed TD count {count}")
    if rng.random() < 0.25:
        slots = sorted(_slots(prog))
        if slots:
            s = rng.choice(slots)
            g = rng.choice(["drop", "narrow", "swap", "offset"])
            bar_games.append([g, s, rng.randrange(1 << 16), rng.choice(slots)])
            muts.append(f"BAR {g} slot {s}")
    return {
        "kind": "td",
        "index": index,
        "base": base,
        "stream": stream.hex(),
        "kernel": kernel.hex(),
        "count": count,
        "bars": bar_games,
        "mutations": muts,
        "run_api": rng.random() < 0.2,
        "seed": rng.getrandbits(32),
    }


def _hwx_case(rng: random.Random, index: int) -> dict:
    files = hwx_files()
    name = rng.choice(sorted(files))
    data = bytearray(files[name])
    muts = []
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        m = rng.choice(["bit", "u32", "u32-head", "truncate"])
        if m == "bit":
            pos = rng.randrange(len(data))
            data[pos] ^= 1 << rng.randrange(8)
            muts.append(f"flip byte {pos:#x}")
        elif m in ("u32", "u32-head"):
            hi = min(len(data), 0x2000) if m == "u32-head" else len(data)
            pos = rng.randrange(max(hi - 4, 1)) & ~3
            v = rng.choice(
                [0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(data), len(data) + 1, rng.getrandbits(32)]
            )
            data[pos : pos + 4] = v.to_bytes(4, "little")
            muts.append(f"u32 at {pos:#x} = {v:#x}")
        else:
            n = rng.randrange(len(data))
            del data[n:]
            muts.append(f"truncate to {n:#x}")
            break
    return {
        "kind": "hwx",
        "index": index,
        "base": name,
        "data": data.hex(),
        "mutations": muts,
        "seed": rng.getrandbits(32),
    }


_API_FUNCS = (
    "matmul",
    "linear",
    "conv1d",
    "conv2d",
    "relu",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "exp",
    "hardtanh",
    "leaky_relu",
    "sqrt",
    "reciprocal",
)


def _api_case(rng: random.Random, index: int) -> dict:
    func = rng.choice(_API_FUNCS)

    def shape(nd):
        return [rng.choice([0, 1, 1, 2, 3, 5, 16, 33, 64, rng.randrange(1, 200)]) for _ in range(nd)]

    spec = {"func": func, "args": [], "kw": {}}
    dtype = rng.choice(
        ["float16", "float16", "float32", "float64", "int64", "bool", "complex64", "object", "uint8", "str"]
    )
    fill = rng.choice(["normal", "normal", "huge", "nan", "inf", "zero", "tiny"])

    def arr(shp, huge_ok=True):
        if huge_ok and rng.random() < 0.08:
            # a broadcast view: small enough to run in a moment, or too large for the ANE
            # to address (2**31 fp16 elements and more); between, a case would be a slow
            # but legitimate computation
            inner = max(math.prod(shp), 1)
            lead = rng.choice([2**14, 2**17, 2**20, 2**28])
            if SMALL_BROADCAST < lead * inner <= 2**31:
                lead = 2**31 // inner + 1
            return {"broadcast": [lead] + shp, "dtype": dtype, "fill": fill}
        return {"shape": shp, "dtype": dtype, "fill": fill}

    if func == "matmul":
        k = rng.choice([0, 1, 7, 64, 32767, 32768, 40000]) if rng.random() < 0.2 else rng.randrange(1, 70)
        a = shape(rng.choice([0, 1, 2, 2, 3, 4]))
        b = shape(rng.choice([0, 1, 2, 2, 3]))
        if len(a) >= 1:
            a[-1] = k
        if len(b) >= 2:
            b[-2] = k
        elif len(b) == 1:
            b[0] = k
        if len(a) >= 2:
            a[-2] = min(a[-2], 64)
        if len(b) >= 2:
            b[-1] = min(b[-1], 64)
        if k > 1000:
            a = [1, k] if rng.random() < 0.7 else a[-2:]
            b = [k, 2]
        spec["args"] = [arr(a), arr(b)]
    elif func == "linear":
        n, k = rng.randrange(0, 40), rng.randrange(0, 40)
        spec["args"] = [arr(shape(rng.choice([1, 2, 3]))[:-1] + [k]), arr([n, k], False)]
        if rng.random() < 0.5:
            spec["kw"]["bias"] = arr([rng.choice([n, n + 1, 0])], False)
    elif func in ("conv1d", "conv2d"):
        sp = 1 if func == "conv1d" else 2
        c, co, g = rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 2, 4, 6]), rng.choice([1, 1, 2, 3])
        x = [rng.choice([0, 1, 2]), c] + [rng.choice([0, 1, 3, 8, 17]) for _ in range(sp)]
        w = [co, max(c // g, 1) if rng.random() < 0.9 else 0] + [rng.choice([1, 2, 3, 5]) for _ in range(sp)]
        spec["args"] = [arr(x, False), arr(w, False)]
        for key, vals in (
            ("stride", [0, 1, 2, 3, -1, 100]),
            ("padding", [0, 1, 2, -1, 40, "same", "valid"]),
            ("dilation", [1, 2, 0, 5]),
            ("groups", [1, g, 0, -2, 7]),
        ):
            if rng.random() < 0.4:
                spec["kw"][key] = rng.choice(vals)
        if rng.random() < 0.3:
            spec["kw"]["activation"] = rng.choice(["relu", "tanh", "silu", "bogus", 3])
    else:
        spec["args"] = [arr(shape(rng.choice([0, 1, 2, 3])))]
        if func == "hardtanh" and rng.random() < 0.5:
            spec["kw"] = {"min_val": rng.choice([1.0, float("nan"), 2.0]), "max_val": rng.choice([-1.0, 1.0])}
        if func == "leaky_relu" and rng.random() < 0.5:
            spec["kw"] = {"negative_slope": rng.choice([float("inf"), float("nan"), 0.1, "x"])}
    if rng.random() < 0.1:
        spec["kw"]["out"] = rng.choice(
            [
                {"shape": [1], "dtype": "float16", "fill": "zero"},
                {"shape": [3, 3], "dtype": "int8", "fill": "zero"},
                "notarray",
            ]
        )
    return {
        "kind": "api",
        "index": index,
        "spec": spec,
        "mutations": [json.dumps(spec)[:300]],
        "seed": rng.getrandbits(32),
    }


# ------------------------------------------------------------------ running one case (in the child)
def _slots(prog) -> dict:
    from fastane.device import tensor_slots

    return tensor_slots(prog)


def _fp16_data(rng, shape):
    return (rng.standard_normal(shape) * 4).astype(np.float16)


def _outcome(exc) -> str:
    return type(exc).__name__


def _check_error(exc, allowed, where: str):
    from fastane.errors import DeviceMemoryError, FastaneError

    if isinstance(exc, MemoryError):
        if isinstance(exc, DeviceMemoryError):
            return  # fastane's own: the emulated DRAM is full (precise, no host blow-up)
        raise Violation(f"{where}: host memory blow-up: MemoryError: {exc}")
    if not isinstance(exc, allowed) and not isinstance(exc, FastaneError):
        raise Violation(
            f"{where}: unexpected exception {type(exc).__name__}: {exc}\n"
            + "".join(traceback.format_exception(exc))[-2000:]
        )
    if isinstance(exc, FastaneError) and not isinstance(exc, allowed):
        raise Violation(f"{where}: {type(exc).__name__} where {allowed} was expected: {exc}")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` and ``b`` (byte arrays, sizes multiples of 8) hold the same bytes."""
    return np.array_equal(a.view(np.uint64), b.view(np.uint64))


def _changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The indices of the bytes in which ``a`` and ``b`` differ (compared 8 at a time)."""
    words = np.flatnonzero(a.view(np.uint64) != b.view(np.uint64))
    if not words.size:
        return words
    idx = (words[:, None] * 8 + np.arange(8)).reshape(-1)
    return idx[a[idx] != b[idx]]


def _l2_snapshot(engine) -> dict:
    return {a: (s, n, None if v is None else v.copy()) for a, (s, n, v) in engine.l2.resident.items()}


def _same_l2(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        (s1, n1, v1), (s2, n2, v2) = a[k], b[k]
        if s1 != s2 or n1 != n2 or (v1 is None) != (v2 is None):
            return False
        if v1 is not None and not np.array_equal(v1, v2, equal_nan=True):
            return False
    return True


def run_td(case: dict) -> str:
    from fastane import DeviceFault
    from fastane.device import Device
    from fastane.device.memory import BARTable
    from fastane.td.fields import TD_SIZE

    rng = np.random.default_rng(case["seed"])
    prog = bases()[case["base"]]
    stream = bytes.fromhex(case["stream"])
    kernel = bytes.fromhex(case["kernel"])
    prog2 = dataclasses.replace(prog, kernel=kernel)
    slots = _slots(prog)
    need = sum(t.nbytes for t in slots.values()) + len(prog.td_stream) + len(kernel)
    size = max(4 << 20, -(-(need + (2 << 20)) // (1 << 20)) << 20)
    dev = Device(memory_size=size)
    mem = dev.memory.data
    mem[:] = CANARY
    loaded = dev.load(prog2)
    td = loaded.td_region
    raw = dev.memory.view(td.iova, td.size)
    raw[:] = CANARY
    raw[: len(stream)] = np.frombuffer(stream, np.uint8)
    bars = {}
    for s, t in slots.items():
        r = dev.memory.alloc(t.nbytes, f"slot{s}")
        view = dev.memory.view(r.iova, r.size)
        view[:] = CANARY
        if t.role == "input" and np.prod(t.shape) <= MAX_FILL:
            try:
                t.view(view)[...] = _fp16_data(rng, t.shape[1:]).astype(t.dtype)
            except (ValueError, TypeError):
                pass
        bars[s] = r
    for game, s, k, other in case["bars"]:
        if s not in bars:
            continue
        if game == "drop":
            bars[s] = None
        elif game == "narrow":
            bars[s] = bars[s].window(0, max(64, bars[s].size - (k % bars[s].size)) // 64 * 64)
        elif game == "swap" and other in bars:
            bars[s], bars[other] = bars[other], bars[s]
        elif game == "offset":
            off = (k * 64) % bars[s].size
            bars[s] = bars[s].window(off, bars[s].size - off)
    bars = {s: r for s, r in bars.items() if r is not None}
    full = {**loaded.bars, **bars}
    dropped = {s for game, s, *_ in case["bars"] if game == "drop"}
    full = {s: r for s, r in full.items() if s not in dropped}
    count = loaded.td_count if case["count"] is None else case["count"]

    def submit(stats_only):
        table = BARTable(dev.memory, full)
        task = dev.tm.submit(
            0,
            table.iovas(),
            td.iova,
            TD_SIZE,
            count,
            nid=1,
            priority=None,
            payload=_payload(table, stats_only),
        )
        try:
            return task.wait(), None
        except BaseException as exc:  # noqa: BLE001 -- classified below
            return None, exc

    snap, kmem, l2 = mem.copy(), dev.engine.kmem.data.copy(), _l2_snapshot(dev.engine)
    s_stats, s_exc = submit(True)
    if s_exc is not None:
        _check_error(s_exc, DeviceFault, "stats-only run")
    if (
        not _same(mem, snap)
        or not _same(dev.engine.kmem.data, kmem)
        or not _same_l2(l2, _l2_snapshot(dev.engine))
    ):
        raise Violation("a stats-only run changed memory, KMem or L2")
    windows = []
    try:
        plans = dev.engine.plan(td.iova, TD_SIZE, count, BARTable(dev.memory, full), False)
        windows = [(p.dst.index, p.dst.index + p.dst.extent) for p in plans if p.dst is not None]
    except DeviceFault:
        pass
    c_stats, c_exc = submit(False)
    if c_exc is not None:
        _check_error(c_exc, DeviceFault, "computing run")
        if not _same(mem, snap):
            bad = _changed(mem, snap)
            raise Violation(
                f"{type(c_exc).__name__} after memory was written ({bad.size} bytes from "
                f"{bad[0]:#x}): {c_exc}"
            )
        if not _same(dev.engine.kmem.data, kmem):
            raise Violation(f"{type(c_exc).__name__} after KMem was written: {c_exc}")
        if not _same_l2(l2, _l2_snapshot(dev.engine)):
            raise Violation(f"{type(c_exc).__name__} after L2 was changed: {c_exc}")
    else:
        changed = _changed(mem, snap)
        if changed.size:
            inside = np.zeros(changed.size, bool)
            for lo, hi in windows:
                inside |= (changed >= lo) & (changed < hi)
            if not inside.all():
                first = int(changed[~inside][0])
                raise Violation(
                    f"an accepted run wrote {int((~inside).sum())} byte(s) outside its "
                    f"destination windows, first at {first:#x} (windows {windows})"
                )
    outcome = _agree(s_stats, s_exc, c_stats, c_exc)
    if case.get("run_api"):
        outcome += "; run:" + _run_api(prog2, stream, rng)
    return outcome


def _payload(table, stats_only):
    from fastane.device.device import _Payload

    return _Payload(table, stats_only)


def _agree(s_stats, s_exc, c_stats, c_exc) -> str:
    from fastane.device import UnsupportedTask
    from fastane.stats import PLAN_COUNTERS  # the counters that do not depend on the data

    if c_exc is None and s_exc is None:
        for name in PLAN_COUNTERS:
            a, b = getattr(s_stats, name), getattr(c_stats, name)
            if a != b:
                raise Violation(f"stats-only and computing runs disagree on Stats.{name}: {a} vs {b}")
        return "accepted"
    planar_only = isinstance(c_exc, UnsupportedTask) and "planar" in getattr(c_exc, "context", {})
    if c_exc is not None and s_exc is not None:
        if type(c_exc) is not type(s_exc) and not planar_only:
            raise Violation(
                f"stats-only faulted {type(s_exc).__name__}, computing {type(c_exc).__name__}:"
                f" {s_exc} / {c_exc}"
            )
        return _outcome(c_exc)
    if c_exc is not None and isinstance(c_exc, UnsupportedTask) and "planar" in getattr(c_exc, "context", {}):
        # documented: a planar task fastane cannot compute is still counted by stats-only
        # (which may then find another fault further on)
        return "UnsupportedTask (planar; stats-only counts it)"
    raise Violation(
        f"stats-only {'faulted' if s_exc else 'passed'}, computing "
        f"{'faulted' if c_exc else 'passed'}: {s_exc or c_exc}"
    )


def _run_api(prog, stream: bytes, rng) -> str:
    """``Device.run`` of the mutated program (its stream parsed again as a .bin)."""
    from fastane.td.program import load_bin

    try:
        p = load_bin(stream + bytes(-len(stream) % 0x80) + prog.kernel if prog.kernel else stream)
    except BaseException as exc:  # noqa: BLE001
        _check_error(exc, (ValueError,), "load_bin")
        return _outcome(exc)
    return _run_loaded(p, rng)


def run_hwx(case: dict) -> str:
    from fastane import DeviceFault
    from fastane.td.program import load_hwx

    data = bytes.fromhex(case["data"])
    try:
        prog = load_hwx(data, name="fuzz")
    except BaseException as exc:  # noqa: BLE001
        _check_error(exc, (ValueError,), "load_hwx")
        return "load:" + _outcome(exc)
    rng = np.random.default_rng(case["seed"])
    try:
        return "run:" + _run_loaded(prog, rng)
    except Violation:
        raise
    except BaseException as exc:  # noqa: BLE001
        _check_error(exc, (DeviceFault, ValueError, NotImplementedError), "hwx run")
        return "run:" + _outcome(exc)


def _run_loaded(prog, rng) -> str:
    from fastane import DeviceFault
    from fastane.device import Device

    dev = Device(memory_size=64 << 20)
    try:
        slots = dev.tensors(prog)
    except BaseException as exc:  # noqa: BLE001
        _check_error(exc, (ValueError, NotImplementedError), "Device.tensors")
        return _outcome(exc)
    big = (
        sum(np.prod(t.shape) for t in slots.values()) > MAX_FILL
        or sum(t.nbytes for t in slots.values()) > 48 << 20
    )
    inputs = {} if big else {s: _fp16_data(rng, t.shape) for s, t in slots.items() if t.role == "input"}
    res = []
    for stats_only in (True,) if big else (True, False):
        try:
            out = dev.run(prog, {} if stats_only else inputs, stats_only=stats_only)
        except BaseException as exc:  # noqa: BLE001
            _check_error(exc, (DeviceFault, ValueError, NotImplementedError), "Device.run")
            res.append(_outcome(exc))
            continue
        for s, y in out.items():
            if y.dtype != np.float16:
                raise Violation(f"Device.run returned {y.dtype} for slot {s}")
            if y.shape != slots[s].shape:
                raise Violation(
                    f"Device.run returned shape {y.shape} for slot {s}, the slot is {slots[s].shape}"
                )
        res.append("ok")
    if len(res) == 2 and (res[0] == "ok") != (res[1] == "ok") and "UnsupportedTask" not in res[1]:
        raise Violation(f"Device.run: stats-only {res[0]}, computing {res[1]}")
    return "/".join(res)


def _make_array(spec, rng):
    if not isinstance(spec, dict):
        return spec
    dtype = spec["dtype"]
    if "broadcast" in spec:
        shp = spec["broadcast"]
        one = _make_array({"shape": [1] * len(shp), "dtype": dtype, "fill": spec["fill"]}, rng)
        return np.broadcast_to(one, shp)
    shp = tuple(spec["shape"])
    fill = spec["fill"]
    x = {
        "normal": lambda: rng.standard_normal(shp) * 3,
        "huge": lambda: np.full(shp, 1e6),
        "nan": lambda: np.full(shp, np.nan),
        "inf": lambda: np.full(shp, -np.inf),
        "zero": lambda: np.zeros(shp),
        "tiny": lambda: np.full(shp, 1e-8),
    }[fill]()
    if dtype == "str":
        return x.astype(str)
    if dtype == "object":
        return x.astype(object)
    with np.errstate(all="ignore"):
        return x.astype(dtype)


def run_api(case: dict) -> str:
    import warnings

    import fastane

    rng = np.random.default_rng(case["seed"])
    spec = case["spec"]
    args = [_make_array(a, rng) for a in spec["args"]]
    kw = {k: _make_array(v, rng) for k, v in spec["kw"].items()}
    fn = getattr(fastane, spec["func"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            y = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001
            _check_error(exc, (ValueError, TypeError, NotImplementedError), f"fastane.{spec['func']}")
            return _outcome(exc)
    if not isinstance(y, (np.ndarray, np.float16)) or y.dtype != np.float16:  # 0-d: a scalar, as numpy
        raise Violation(f"fastane.{spec['func']} returned {type(y).__name__} {getattr(y, 'dtype', '')}")
    return "ok"


def run_selftest(case: dict) -> str:
    """Cases that misbehave on purpose: the harness must name each (its own tests)."""
    fuzzkit.misbehave(case["what"])
    if case["what"] == "error":
        raise KeyError("not a precise error")
    return "ok"


def run_case(case: dict) -> str:
    import warnings

    warnings.simplefilter("ignore")
    return {"td": run_td, "hwx": run_hwx, "api": run_api, "selftest": run_selftest}[case["kind"]](case)


# ------------------------------------------------------------------ the child process
def run_isolated(case: dict, timeout: float = TIMEOUT, headroom: int = AS_HEADROOM) -> tuple:
    """``(status, detail)``: status ``"ok"`` (detail: the outcome class) or a failure
    class (``violation``, ``crash``, ``hang``, ``memory``, ``error``)."""
    return fuzzkit.run_isolated(case, run_case, timeout, headroom)


# ------------------------------------------------------------------ campaigns
def warm_up() -> None:
    """Compile the kernels and build the bases in the parent (children inherit them)."""
    from fastane.device import Device

    for name, prog in sorted(bases().items()):
        try:
            slots = _slots(prog)
            if sum(np.prod(t.shape) for t in slots.values()) > MAX_FILL:
                continue
            dev = Device(memory_size=64 << 20)
            inputs = {s: np.ones(t.shape, np.float16) for s, t in slots.items() if t.role == "input"}
            dev.run(prog, inputs)
        except Exception:
            pass
    import fastane

    for f in (
        lambda: fastane.tanh(np.ones(10, np.float16)),
        lambda: fastane.matmul(np.ones((3, 4)), np.ones((4, 5))),
        lambda: fastane.conv2d(np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))),
        lambda: fastane.conv1d(np.ones((1, 2, 5)), np.ones((3, 2, 3))),
    ):
        try:
            f()
        except Exception:
            pass


def campaign(
    n: int,
    seed: int = 0,
    out: Path | None = None,
    resume: bool = False,
    start: int = 0,
    timeout: float = TIMEOUT,
    log=None,
    budget: float | None = None,
    corpus_share: float = CORPUS_SHARE,
) -> dict:
    """Run cases ``start .. start+n-1`` of campaign ``seed``; tallies, failures saved under ``out``.
    ``budget``: stop after that many seconds (the cases run so far are reported)."""
    return fuzzkit.campaign(
        n,
        seed,
        out,
        resume,
        start,
        timeout,
        make_case=lambda s, i: make_case(s, i, corpus_share),
        run=run_isolated,
        warm_up=warm_up,
        params={"corpus_share": corpus_share},
        log=log,
        budget=budget,
    )


merge = fuzzkit.merge


def summary(state: dict) -> str:
    """The campaign's figures as Markdown: cases by kind, failures by class, outcomes."""
    merged, runs = collections.Counter(), collections.Counter()
    for k, v in state["outcomes"].items():
        merged[k.split("; run:")[0]] += v
        if "; run:" in k:
            runs[k.split("; run:")[1]] += v
    lines = fuzzkit.summary(
        state, "none (no crash, hang, memory blow-up, unexpected exception or broken invariant)", merged
    )
    if runs:
        lines += ["", "`Device.run` of the mutated TDs (stats-only / computing):", "", *fuzzkit.table(runs)]
    return "\n".join(lines)


def _replay(seed: int, index: int, corpus_share: float) -> str:
    case = make_case(seed, index, corpus_share)
    shown = {k: v for k, v in case.items() if k not in ("stream", "kernel", "data")}
    return json.dumps(shown, indent=1) + "\n" + run_case(case)


def main(argv=None) -> int:
    fuzzkit.single_threaded_numba()
    ap = fuzzkit.arguments(__doc__.split("\n")[0], TIMEOUT, ".fuzz")
    ap.add_argument(
        "--corpus-share",
        type=float,
        default=CORPUS_SHARE,
        help="share of the TD cases mutating a corpus program (the rest: small built-in ones)",
    )
    a = ap.parse_args(argv)
    return fuzzkit.main(
        a,
        summary,
        lambda seed, index: _replay(seed, index, a.corpus_share),
        campaign,
        corpus_share=a.corpus_share,
    )


if __name__ == "__main__":
    sys.exit(main())
