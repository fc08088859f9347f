"""Data movement as ANE tasks (fastane/lower/moves.py): concat, slice, split, constant pad and
transposes run on the device against a slow element-by-element reference, on every fp16
pattern and on shapes hypothesis picks, tiled and untiled; the moves the registers cannot
express; the Stats; and the lowered concat against Apple's concat.hwx, field by field and
on the device."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastane.device import Device, eltwise
from fastane.lower import moves as M
from fastane.lower.moves import Move
from fastane.m1 import LIMITS, Limits
from fastane.stats import last_stats
from fastane.td import load_program

F16 = np.float16
#: the NE's NaN (docs/device.md, NE): every NaN payload reads out as it
QNAN = 0x7E00
SPECIAL = np.array(
    [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00]
    + [0x7C01, 0x7DFF, 0x7E00, 0x7E01, 0x7FFF, 0xFC01, 0xFE00, 0xFFFF],
    np.uint16,
)


def patterns(shape, seed=0) -> np.ndarray:
    """fp16 values of ``shape``: every special first, then random bit patterns."""
    n = math.prod(shape)
    bits = np.random.default_rng(seed).integers(0, 1 << 16, n).astype(np.uint16)
    bits[: min(n, SPECIAL.size)] = SPECIAL[: min(n, SPECIAL.size)]
    return bits.view(F16).reshape(shape)


# ------------------------------------------------------------------ the slow reference
def _ne(v) -> int:
    """What the NE's identity stage reads out for the fp16 value ``v`` (its bits)."""
    b = int(np.asarray(v, F16).view(np.uint16))
    return QNAN if (b & 0x7C00) == 0x7C00 and (b & 0x3FF) else b


def ref_concat(xs, axis):
    out_shape = list(xs[0].shape)
    out_shape[axis] = sum(x.shape[axis] for x in xs)
    out = np.zeros(out_shape, np.uint16)
    for idx in itertools.product(*map(range, out_shape)):
        k, i = 0, idx[axis]
        while i >= xs[k].shape[axis]:
            i -= xs[k].shape[axis]
            k += 1
        out[idx] = _ne(xs[k][idx[:axis] + (i,) + idx[axis + 1 :]])
    return out


def ref_slice(x, window):
    out_shape = [len(range(*w)) for w in window]
    out = np.zeros(out_shape, np.uint16)
    for idx in itertools.product(*map(range, out_shape)):
        out[idx] = _ne(x[tuple(w[0] + i * w[2] for i, w in zip(idx, window))])
    return out


def ref_pad(x, widths, value):
    out_shape = [d + a + b for d, (a, b) in zip(x.shape, widths)]
    out = np.zeros(out_shape, np.uint16)
    for idx in itertools.product(*map(range, out_shape)):
        src = tuple(i - a for i, (a, _) in zip(idx, widths))
        inside = all(0 <= s < d for s, d in zip(src, x.shape))
        out[idx] = _ne(x[src] if inside else F16(value))
    return out


def ref_transpose(x, perm):
    out_shape = [x.shape[p] for p in perm]
    out = np.zeros(out_shape, np.uint16)
    for idx in itertools.product(*map(range, out_shape)):
        src = [0] * x.ndim
        for i, p in zip(idx, perm):
            src[p] = i
        out[idx] = _ne(x[tuple(src)])
    return out


def bits(y) -> np.ndarray:
    assert y.dtype == F16
    return y.view(np.uint16)


# ------------------------------------------------------------------ the ops, on the device
def test_every_fp16_pattern_moves_unchanged_but_nan_payloads():
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16).reshape(1, 64, 1024)
    a, b = x[:, :40], x[:, 40:]
    (y,) = M.run(M.concat([a.shape, b.shape], 1), [a, b])
    want = x.view(np.uint16).copy()
    nan = ((want & 0x7C00) == 0x7C00) & ((want & 0x3FF) != 0)
    want[nan] = QNAN
    assert np.array_equal(bits(y), want)
    # 2046 NaN patterns (1023 payloads, two signs): all but 0x7e00 itself read out changed
    assert np.count_nonzero(bits(y) != x.view(np.uint16)) == 2045


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(1, 16384, 1, 1), (1, 16, 1, 1)], 1),  # concat.hwx
        ([(2, 3, 5, 7), (2, 4, 5, 7), (2, 1, 5, 7)], 1),
        ([(2, 3, 5, 7), (1, 3, 5, 7)], 0),
        ([(2, 3, 5, 7), (2, 3, 2, 7)], 2),
        ([(2, 3, 32), (2, 3, 40)], 2),  # last axis: offsets 0 and 32
        ([(64,), (0,), (3,)], 0),  # 1-D: along the row; an empty operand
        ([(3, 0, 4), (3, 2, 4)], 1),
    ],
)
def test_concat(shapes, axis):
    xs = [patterns(s, i) for i, s in enumerate(shapes)]
    (y,) = M.run(M.concat(shapes, axis), xs)
    assert np.array_equal(bits(y), ref_concat(xs, axis))


@pytest.mark.parametrize(
    "shape, window",
    [
        ((3, 6, 40, 70), ((1, 3, 1), (0, 6, 2), (5, 30, 3), (32, 70, 1))),
        ((1, 512, 7, 7), ((0, 1, 1), (100, 300, 1), (0, 7, 1), (0, 7, 1))),
        ((4, 9), ((3, 4, 1), (0, 9, 1))),
        ((2, 3, 4), ((0, 2, 1), (3, 3, 1), (0, 4, 1))),  # empty
        ((10, 1), ((1, 10, 4), (0, 1, 1))),  # a step on a last axis of one element
    ],
)
def test_slice(shape, window):
    x = patterns(shape, 3)
    (y,) = M.run(M.slice_(shape, window), [x])
    assert np.array_equal(bits(y), ref_slice(x, window))


def test_split_gives_every_part():
    x = patterns((2, 10, 3, 33), 4)
    parts = [(0, 3), (3, 3), (3, 10)]
    windows = [((0, 2, 1), (a, b, 1), (0, 3, 1), (0, 33, 1)) for a, b in parts]
    ys = M.run(M.split(x.shape, windows), [x])
    assert len(ys) == 3
    for y, w in zip(ys, windows):
        assert np.array_equal(bits(y), ref_slice(x, w))


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -np.inf, np.nan, 70000.0, 1e-8])
def test_pad(value):
    x = patterns((3, 6, 5, 7), 5)
    widths = [(0, 1), (2, 0), (1, 3), (0, 5)]
    (y,) = M.run(M.pad(x.shape, widths, value), [x])
    with np.errstate(over="ignore"):
        assert np.array_equal(bits(y), ref_pad(x, widths, value))


@pytest.mark.parametrize(
    "shape, perm", [((3, 6, 5, 7), (2, 0, 1, 3)), ((4, 5, 40), (1, 0, 2)), ((2, 3), (0, 1))]
)
def test_transpose(shape, perm):
    x = patterns(shape, 6)
    (y,) = M.run(M.transpose(shape, perm), [x])
    assert np.array_equal(bits(y), ref_transpose(x, perm))


def test_what_the_registers_cannot_express():
    with pytest.raises(NotImplementedError, match="BaseAddr counts 64-byte"):
        M.slice_((4, 70), ((0, 4, 1), (1, 70, 1)))
    with pytest.raises(NotImplementedError, match="element stride is fixed"):
        M.slice_((4, 70), ((0, 4, 1), (0, 70, 2)))
    with pytest.raises(NotImplementedError, match="unsigned"):
        M.slice_((4, 70), ((3, -1, -1), (0, 70, 1)))
    with pytest.raises(NotImplementedError, match="moves the last axis"):
        M.transpose((4, 70), (1, 0))
    with pytest.raises(NotImplementedError, match="BaseAddr"):
        M.pad((4, 70), [(0, 0), (1, 0)])
    with pytest.raises(NotImplementedError, match="BaseAddr"):
        M.concat([(4, 7), (4, 9)], 1)
    with pytest.raises(NotImplementedError, match="BaseAddr"):
        M.concat([(5,), (3,)], 0)
    # an L2 that holds one row of 64 elements: one task a row, past fastane's bound
    with pytest.raises(NotImplementedError, match=f"more than {M.MAX_TASKS} tasks"):
        M.lower(M.concat([(5000, 64)], 0), Limits(l2_bytes=256))


# ------------------------------------------------------------------ more tensors than BAR slots
def _bound(low) -> list:
    """Per program: the tensors it binds (``("y", k)``, ``("x", k)``) and their slots."""
    return [dict((key, slot) for slot, key in bind) for bind in low.binds]


@pytest.mark.parametrize("tiled", [False, True])
def test_a_concat_of_more_inputs_than_bar_slots_is_several_programs_each_input_read_once(tiled):
    """40 inputs and the output need 41 BAR slots, past the task's 32 (outputs from slot 4):
    runs of programs each bind the one output and the inputs their boxes read, and write
    those inputs' slab of it at its offset (docs/lower.md section 13)."""
    limits = SMALL if tiled else LIMITS
    shapes = [(2, 1 + i % 3, 40) for i in range(40)]
    move = M.concat(shapes, 1)
    low = M.lower(move, limits)
    bound = _bound(low)
    assert len(low.programs) > 1 and all(len(b) <= M.SLOTS for b in bound)
    assert all(b[("y", 0)] == 4 and max(b.values()) < 32 for b in bound)
    read = [k for b in bound for key, k in b if key == "x"]
    assert sorted(read) == list(range(40))  # every input bound once
    if not tiled:
        assert [len(b) - 1 for b in bound] == [M.SLOTS - 1, 40 - (M.SLOTS - 1)]
    xs = [patterns(s, 20 + i) for i, s in enumerate(shapes)]
    (y,) = M.run(move, xs, limits=limits)
    assert np.array_equal(bits(y), ref_concat(xs, 1))
    st = last_stats()
    rows = sum(math.prod(s[:-1]) for s in shapes)  # rows of 40 elements: one burst each
    assert st.tasks == low.n_tasks == len(st.tasks_detail)
    assert st.tile_dma_src_bytes == st.tile_dma_dst_bytes == 128 * rows  # read once, written once
    if not tiled:
        plan = M.plan(move)
        assert (plan.tasks, plan.tile_dma_src_bytes, plan.tile_dma_dst_bytes) == (
            st.tasks,
            st.tile_dma_src_bytes,
            st.tile_dma_dst_bytes,
        )


def test_a_split_into_more_outputs_than_bar_slots_is_several_programs():
    x = patterns((40, 3, 64), 9)
    windows = [((i, i + 1, 1), (0, 3, 1), (0, 64, 1)) for i in range(40)]
    low = M.lower(M.split(x.shape, windows))
    bound = _bound(low)
    assert len(low.programs) == 2 and all(b[("x", 0)] == 4 + len(b) - 1 for b in bound)
    assert sorted(k for b in bound for key, k in b if key == "y") == list(range(40))
    ys = M.run(M.split(x.shape, windows), [x])
    st = last_stats()
    for y, w in zip(ys, windows):
        assert np.array_equal(bits(y), ref_slice(x, w))
    assert st.tile_dma_src_bytes == st.tile_dma_dst_bytes == 40 * 3 * 128


def test_a_move_within_the_slots_binds_every_tensor_in_order_in_one_run():
    """As before multi-program moves: outputs from slot 4, inputs after them, every tensor
    in every program (an empty operand too), up to the task's last slot, 31."""
    for n in (2, M.SLOTS - 1):
        shapes = [(2, 3)] * (n - 1) + [(0, 3)]
        low = M.lower(M.concat(shapes, 0))
        assert len(low.programs) == 1
        assert low.binds[0] == ((4, ("y", 0)),) + tuple((5 + k, ("x", k)) for k in range(n))
        assert [td["Header.RBase0"] for td in low.programs[0].tds] == list(range(5, 4 + n))
        assert {td["Header.WBase"] for td in low.programs[0].tds} == {4}
    assert max(low.binds[0])[0] == 31
    assert len(M.lower(M.concat([(2, 3)] * M.SLOTS, 0)).programs) == 2


# ------------------------------------------------------------------ hypothesis, tiled
SMALL = Limits(l2_bytes=4096, max_hw=32, max_channels=8)


@st.composite
def a_move(draw):
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(rank - 1)] + [
        draw(st.sampled_from([1, 3, 32, 40, 64, 70]))
    ]
    kind = draw(st.sampled_from(["concat", "slice", "pad", "transpose"]))
    if kind == "concat":
        axis = draw(st.integers(0, rank - 2)) if rank > 1 else 0
        n = draw(st.integers(1, 3))
        shapes = []
        for _ in range(n):
            s = list(shape)
            s[axis] = draw(st.integers(0 if n > 1 else 1, 4)) if rank > 1 else 32 * draw(st.integers(1, 2))
            shapes.append(tuple(s))
        return "concat", shapes, axis
    if kind == "slice":
        window = []
        for k, d in enumerate(shape):
            last = k == rank - 1
            a = 32 * draw(st.integers(0, (d - 1) // 32)) if last else draw(st.integers(0, d - 1))
            b = draw(st.integers(a, d))
            step = 1 if last else draw(st.integers(1, 3))
            window.append((a, b, step))
        return "slice", tuple(shape), tuple(window)
    if kind == "pad":
        widths = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape[:-1]]
        widths.append((32 * draw(st.integers(0, 1)), draw(st.integers(0, 33))))
        return "pad", tuple(shape), (widths, draw(st.sampled_from([0.0, -0.0, 2.5, np.inf])))
    perm = draw(st.permutations(range(rank - 1))) + [rank - 1]
    return "transpose", tuple(shape), tuple(perm)


@settings(max_examples=60, deadline=None)
@given(a_move(), st.booleans(), st.integers(0, 1000))
def test_moves_match_the_reference(m, tiled, seed):
    kind, shape, arg = m
    if kind == "concat":
        xs = [patterns(s, seed + i) for i, s in enumerate(shape)]
        move, want = M.concat(shape, arg), ref_concat(xs, arg)
    else:
        xs = [patterns(shape, seed)]
        if kind == "slice":
            move, want = M.slice_(shape, arg), ref_slice(xs[0], arg)
        elif kind == "pad":
            move, want = M.pad(shape, *arg), ref_pad(xs[0], *arg)
        else:
            move, want = M.transpose(shape, arg), ref_transpose(xs[0], arg)
    (y,) = M.run(move, xs, limits=SMALL if tiled else None)
    assert np.array_equal(bits(y), want)


# ------------------------------------------------------------------ the copy lane
#: moves whose every task is a copy: concat (one cut by L2 below), a stepped slice, a pad
#: (fill task with zero strides, then the input with ZeroPadLast 0), attention's transpose
LANE_MOVES = [
    M.concat([(1, 5, 9, 40), (1, 3, 9, 40)], 1),
    M.slice_((3, 6, 40, 70), ((1, 3, 1), (0, 6, 2), (5, 30, 3), (32, 70, 1))),
    M.pad((3, 6, 5, 7), [(0, 1), (2, 0), (1, 3), (0, 5)], -np.inf),
    M.transpose((1, 19, 4, 64), (0, 2, 1, 3)),
]


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("move", LANE_MOVES, ids=lambda m: m.name)
def test_every_task_is_a_copy_on_the_lane_with_the_block_paths_bits_and_stats(
    device, monkeypatch, move, tiled
):
    """Every pass-through task runs on the device's fp16 lane as a copy of the patterns
    (fastane/device/eltwise.py, kernels/ne_table.py ``plain_window``; no float64 tensor),
    and forcing the block-by-block path (TileDMASrc decode, MAC bypass, NE, TileDMADst
    encode) gives the same bytes and the same Stats, task by task: on every special and
    on random patterns, whole and cut by a 4 KiB L2 into many tasks."""
    limits = SMALL if tiled else None
    xs = [patterns(s, 7 + i) for i, s in enumerate(move.ins)]
    taken = []
    real = eltwise.run

    def spy(*a):
        out = real(*a)
        taken.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(eltwise, "run", spy)
        fast = M.run(move, xs, limits=limits)
        st_fast = last_stats()
    assert len(taken) == st_fast.tasks == M.lower(move, limits or LIMITS).n_tasks and all(taken)
    if tiled:  # cut into more tasks than the machine's L2 needs
        assert st_fast.tasks > M.lower(move).n_tasks
    with monkeypatch.context() as m:
        m.setattr(eltwise, "run", lambda *a, **k: None)  # the block-by-block path
        slow = M.run(move, xs, limits=limits)
        st_slow = last_stats()
    for a, b in zip(fast, slow):
        assert np.array_equal(bits(a), bits(b))
    assert st_fast == st_slow and st_fast.tasks_detail == st_slow.tasks_detail
    assert st_fast.nan_outputs > 0  # the NaN payloads of SPECIAL reach the output


# ------------------------------------------------------------------ Stats
def test_stats_count_the_bursts_and_the_stats_only_plan_agrees():
    shapes = [(1, 3, 5, 7), (1, 4, 5, 7)]
    move = M.concat(shapes, 1)
    M.run(move, [patterns(s) for s in shapes])
    st_run = last_stats()
    # every row of 7 fp16 elements costs one 64-byte burst, read once and written once
    rows = sum(math.prod(s[:-1]) for s in shapes)
    assert st_run.tasks == 2 and st_run.macs == 0
    assert st_run.tile_dma_src_bytes == st_run.tile_dma_dst_bytes == 64 * rows
    assert st_run.kernel_dma_bytes == 0
    st_plan = M.plan(move)
    assert (st_plan.tasks, st_plan.tile_dma_src_bytes, st_plan.tile_dma_dst_bytes) == (
        2,
        64 * rows,
        64 * rows,
    )


def test_large_moves_are_cut_to_fit_l2():
    shape = (1, 512, 56, 56)
    low = M.lower(M.slice_(shape, ((0, 1, 1), (0, 400, 1), (0, 56, 1), (0, 56, 1))))
    assert low.n_tasks > 1
    for td in low.programs[0].tds:
        c, h, w = td["Common.Cin.Cin"], td["Common.InDim.Hin"], td["Common.InDim.Win"]
        assert 2 * c * h * -(-2 * w // 16) * 16 <= 2 << 20


# ------------------------------------------------------------------ concat.hwx
#: fields that decide what a data-movement task moves and where (compared with concat.hwx)
GEOMETRY = [
    "Common.InDim.Win",
    "Common.InDim.Hin",
    "Common.OutDim.Wout",
    "Common.OutDim.Hout",
    "Common.Cin.Cin",
    "Common.Cout.Cout",
    "Common.ChCfg.InFmt",
    "Common.ChCfg.OutFmt",
    "Common.ConvCfg.Kw",
    "Common.ConvCfg.Kh",
    "Common.ConvCfg.Sx",
    "Common.ConvCfg.Sy",
    "Common.GroupConvCfg.NumGroups",
    "Common.TileCfg.TileHeight",
    "Common.Cfg.ActiveNE",
    "Header.ENE",
    "Header.RBE0",
    "Header.RBE1",
    "Header.WBase",
    "Header.WBE",
    "Header.KBE0",
    "Header.EON",
    "TileDMASrc.DMAConfig.En",
    "TileDMASrc.BaseAddr.Addr",
    "TileDMASrc.RowStride.Stride",
    "TileDMASrc.PlaneStride.PlaneStride",
    "TileDMASrc.DepthStride.Stride",
    "TileDMASrc.GroupStride.Stride",
    "TileDMASrc.Fmt.MemFmt",
    "TileDMADst.DMAConfig.En",
    "TileDMADst.BaseAddr.Addr",
    "TileDMADst.RowStride.RowStride",
    "TileDMADst.PlaneStride.PlaneStride",
    "TileDMADst.DepthStride.DepthStride",
    "TileDMADst.GroupStride.GroupStride",
    "TileDMADst.Fmt.MemFmt",
    "TileDMADst.Fmt.ZeroPadLast",
    "L2.SourceCfg.SourceType",
    "L2.SourceBase.Addr",
    "L2.SourceChannelStride.Stride",
    "L2.SourceRowStride.Stride",
    "L2.ResultCfg.ResultType",
    "L2.ResultBase.Addr",
    "NE.MACCfg.OpMode",
    "NE.MACCfg.KernelMode",
    "NE.MACCfg.NonlinearMode",
    "NE.MACCfg.BiasMode",
    "NE.MACCfg.MatrixBiasEn",
    "NE.PostScale.PostScale",
    "NE.AccBias.AccBias",
] + [f"KernelDMASrc.CoeffDMAConfig[{k}].En" for k in range(16)]
# Left out, with the reason: Header.RBase0 (Apple binds the plist's "Inputs" order,
# input_1 = the 16 channels to slot 5; fastane binds the operands in order from slot 5);
# cache, shape and debug hints (CacheHint*, ShPref/ShMin/ShMax, LogEvents, DebugLogEvents);
# L2 aliasing hints; CoeffBfrSize (1 on every lane with no lane enabled: nothing is loaded);
# NE.KernelCfg.KernelFmt/BinaryPoint (no kernel, no accumulation); the L2 result strides and
# the unnamed L2 words (the device checks the dense layout eltwise_td writes).


def test_the_lowered_concat_is_concat_hwx(corpus):
    apple = load_program(corpus / "m1-hwx" / "concat.hwx")
    shapes = {s: t.shape for s, t in Device(memory_size=64 << 20).tensors(apple).items()}
    # the concat of input_0 (16384 channels) and input_1 (16), plist "Bottom" order
    low = M.lower(M.concat([(1, 16384, 1, 1), (1, 16, 1, 1)], 1))
    ours = low.programs[0].tds
    assert len(ours) == len(apple.tds) == 2
    for a, b in zip(apple.tds, ours):
        assert {f: a[f] for f in GEOMETRY} == {f: b[f] for f in GEOMETRY}
    assert [td["Header.RBase0"] for td in apple.tds] == [6, 5] and shapes[6] == (1, 16384, 1, 1)
    assert [td["Header.RBase0"] for td in ours] == [5, 6]


def test_the_lowered_concat_moves_as_concat_hwx_on_the_device(corpus):
    apple = load_program(corpus / "m1-hwx" / "concat.hwx")
    dev = Device(memory_size=64 << 20)
    x0, x1 = patterns((1, 16384, 1, 1), 1), patterns((1, 16, 1, 1), 2)
    want = dev.run(apple, {6: x0, 5: x1})[4]
    (y,) = M.run(M.concat([x0.shape, x1.shape], 1), [x0, x1], device=dev)
    assert np.array_equal(bits(y), bits(want))
    st = last_stats()
    assert (st.tasks, st.tile_dma_src_bytes, st.tile_dma_dst_bytes) == (2, 16400 * 64, 16400 * 64)


def test_run_checks_its_inputs():
    move = M.concat([(2, 3), (1, 3)], 0)
    with pytest.raises(ValueError, match="2 inputs"):
        M.run(move, [np.zeros((2, 3))])
    with pytest.raises(ValueError, match="shape"):
        M.run(move, [np.zeros((2, 3)), np.zeros((2, 3))])
    assert isinstance(move, Move) and move.describe() == "concat 2x3, 1x3 -> 3x3"


def test_a_move_that_gives_back_its_input_is_an_identity():
    s = (2, 3, 4, 64)
    assert M.is_identity(M.pad(s, [(0, 0)] * 4, 1.5))
    assert M.is_identity(M.slice_(s, [(0, d, 1) for d in s]))
    assert M.is_identity(M.split(s, [[(0, d, 1) for d in s]]))
    assert M.is_identity(M.transpose(s, (0, 1, 2, 3)))
    assert M.is_identity(M.concat([s], 1))
    # anything that moves an element is not
    assert not M.is_identity(M.pad(s, [(0, 0), (1, 0), (0, 0), (0, 0)]))
    assert not M.is_identity(M.slice_(s, [(0, 2, 1), (1, 3, 1), (0, 4, 1), (0, 64, 1)]))
    assert not M.is_identity(M.slice_(s, [(0, 2, 1), (0, 3, 2), (0, 4, 1), (0, 64, 1)]))
    assert not M.is_identity(M.transpose(s, (0, 2, 1, 3)))
    assert not M.is_identity(M.transpose((3, 3, 64), (1, 0, 2)))  # same shape, moved rows
    assert not M.is_identity(M.concat([s, s], 1))
    assert not M.is_identity(M.split(s, [[(0, 1, 1), (0, 3, 1), (0, 4, 1), (0, 64, 1)]] * 2))
