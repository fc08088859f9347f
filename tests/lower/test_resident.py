"""Resident weights (docs/lower.md, section 5): a repeated call with bit-identical fp16
weights does not pack them again, and any change of a weight's bits -- in place, through
a view, a NaN payload, a signed zero -- is packed and computed (checked against the slow
reference)."""

import numpy as np
import pytest

import fastane
from fastane import lower
from fastane.lower import lowered as _lowered
from tests.helpers.reference import ref_conv2d, ref_matmul

F16 = np.float16


@pytest.fixture
def packs(monkeypatch):
    calls = []
    orig = _lowered.Lowered.pack

    def counting(self, raw, weight, bias=None):
        calls.append(self.conv)
        return orig(self, raw, weight, bias)

    monkeypatch.setattr(_lowered.Lowered, "pack", counting)
    return calls


def _bits(x):
    return np.asarray(x, F16).view(np.uint16)


def test_same_weights_are_packed_once(packs):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 40)).astype(F16)
    for i in range(4):
        a = rng.standard_normal((3, 24)).astype(F16)
        assert np.array_equal(_bits(fastane.matmul(a, w)), _bits(ref_matmul(a, w)))
    assert len(packs) <= 1  # at most once (an earlier test may have packed them)


def test_changed_weights_are_packed_again(packs):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 33)).astype(F16)
    a = rng.standard_normal((5, 16)).astype(F16)
    fastane.matmul(a, w)

    def in_place():
        w[3, 7] = F16(2.5)
        return w

    def through_a_view():
        v = w[:, :]
        v[0, 0] = -v[0, 0]
        return w

    def signed_zero():
        w[1, 1] = F16(0.0)
        fastane.matmul(a, w)
        w[1, 1] = F16(-0.0)  # the same value, other bits
        return w

    def nan_payload():
        w.view(np.uint16)[2, 2] = 0x7E01
        fastane.matmul(a, w)
        w.view(np.uint16)[2, 2] = 0x7E02
        return w

    def a_copy():
        w2 = w.copy()
        w2[0, 1] += F16(1)
        return w2

    for change in (in_place, through_a_view, signed_zero, nan_payload, a_copy):
        case = change()
        before = len(packs)
        got = fastane.matmul(a, case)
        assert len(packs) == before + 1, change.__name__
        assert np.array_equal(_bits(got), _bits(ref_matmul(a, case))), change.__name__


def test_bias_change_is_packed_again(packs):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((6, 8)).astype(F16)
    x = rng.standard_normal((3, 8)).astype(F16)
    b = rng.standard_normal(6).astype(F16)
    y0 = fastane.linear(x, w, b)
    before = len(packs)
    b[0] += F16(1)
    y1 = fastane.linear(x, w, b)
    assert len(packs) == before + 1
    ref = (ref_matmul(x, w.T).astype(np.float64) + b).astype(F16)  # bias in fp16 after readout
    assert np.array_equal(_bits(y1), _bits(ref))
    assert not np.array_equal(_bits(y0), _bits(y1))


def test_conv_weights_resident_and_mutated(packs):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 6)).astype(F16)
    w = rng.standard_normal((5, 4, 3, 3)).astype(F16)
    fastane.conv2d(x, w, padding=1)
    before = len(packs)
    y = fastane.conv2d(x, w, padding=1)
    assert len(packs) == before
    assert np.array_equal(_bits(y), _bits(ref_conv2d(x, w, padding=1)))
    w[4, 3, 2, 2] = F16(-7)
    y = fastane.conv2d(x, w, padding=1)
    assert len(packs) == before + 1
    assert np.array_equal(_bits(y), _bits(ref_conv2d(x, w, padding=1)))


def test_non_fp16_weights_compare_their_rounding(packs):
    """The API rounds float64 weights to fp16 on every call; what is compared is that
    rounding: a change below fp16's resolution keeps the packed slot, one above does not."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 8))
    a = rng.standard_normal((2, 8)).astype(F16)
    fastane.matmul(a, w)
    before = len(packs)
    w[0, 0] = float(F16(w[0, 0]))  # the same fp16 value
    y = fastane.matmul(a, w)
    assert len(packs) == before
    w[0, 0] += 0.5
    y = fastane.matmul(a, w)
    assert len(packs) == before + 1
    assert np.array_equal(_bits(y), _bits(ref_matmul(a, w.astype(F16))))


def test_execute_packs_other_dtypes_every_time(packs):
    low = lower.build(lower.Conv.matmul(2, 8, 8, 1, False, None))
    x = np.ones((1, 8, 1, 2), F16)
    w = np.ones((8, 8, 1, 1), np.float32)
    lower.execute(low, x, w)
    before = len(packs)
    lower.execute(low, x, w)
    assert len(packs) == before + 1


def test_resident_copy_is_private():
    w = np.ones((4, 4), F16)
    res = lower.bind.Resident(w, None)
    assert res.holds(w, None)
    w[0, 0] = 2
    assert not res.holds(w, None)
    assert not res.holds(w.astype(np.float32), None)
    assert not res.holds(np.ones((2, 8), F16), None)  # same bits, other shape


def test_transposed_weights_of_linear(packs):
    """``linear`` passes ``w.T``: compared as the array it views, a change still repacks."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((12, 20)).astype(F16)
    x = rng.standard_normal((3, 20)).astype(F16)
    fastane.linear(x, w)
    before = len(packs)
    fastane.linear(x, w)
    assert len(packs) == before
    w[11, 19] = F16(3)
    y = fastane.linear(x, w)
    assert len(packs) == before + 1
    assert np.array_equal(_bits(y), _bits(ref_matmul(x, w.T)))
    res = lower.bind.Resident(w.T, None)
    assert res.holds(w.T, None) and not res.holds(np.ascontiguousarray(w.T), None)


def test_engine_weight_cache_stays_bounded(monkeypatch):
    """The transposed weights kept by the engine respect WEIGHT_CACHE and
    WEIGHT_CACHE_BYTES, and the results stay the reference's."""
    from fastane.device import engine

    monkeypatch.setattr(engine, "WEIGHT_CACHE_BYTES", 300_000)
    monkeypatch.setattr(engine, "WEIGHT_CACHE", 3)
    monkeypatch.setattr(engine.mac, "SKINNY_ROWS", 0)
    dev = fastane.Device(memory_size=64 << 20)
    rng = np.random.default_rng(6)
    for i in range(6):
        w = rng.standard_normal((96, 160)).astype(F16)
        x = rng.standard_normal((2, 96)).astype(F16)  # narrow: the transposed path (SKINNY_ROWS 0)
        y, _, _ = lower.run_matmul(x[None], w[None], np.zeros(1, np.int64), np.zeros(1, np.int64), device=dev)
        assert np.array_equal(_bits(y[0]), _bits(ref_matmul(x, w)))
        cache = dev.engine._wcache
        total = sum(len(e[1]) + e[2][0].nbytes for e in cache)
        assert cache and len(cache) <= 3 and total <= 300_000


def test_fastane_own_frozen_weights_are_kept_by_reference_not_copied(packs):
    """A weight fastane froze (a model's compile-time constant: read-only, owned) is held by
    the Resident itself (by weak reference) and recognised by identity; a user's array is
    still copied, and a frozen array cannot be written."""
    from fastane.lower import bind

    rng = np.random.default_rng(5)
    w = bind.freeze(rng.standard_normal((16, 24)))
    with pytest.raises(ValueError):
        w[0, 0] = 1
    res = bind.Resident(w, None)
    assert res.weight[0]() is w and res.holds(w, None) and res.constant() and res.of(w, None)
    user = np.array(w)  # the same bits, a mutable array of the caller's: copied and compared
    res_user = bind.Resident(user, None)
    assert res_user.weight[0] is not user and res_user.holds(user, None)
    assert not res_user.constant() and not res_user.of(user, None)
    user[0, 0] = -user[0, 0] if user[0, 0] != 0 else 1
    assert not res_user.holds(user, None)
    # a frozen linear weight's transposed view is the same constant
    wt = bind.freeze(rng.standard_normal((24, 16))).T
    assert bind.Resident(wt, None).holds(wt, None)
    del packs[:]
    a = rng.standard_normal((3, 16)).astype(F16)
    for _ in range(3):
        assert np.array_equal(_bits(fastane.matmul(a, w)), _bits(ref_matmul(a, w)))
    assert len(packs) <= 1


def test_a_constant_is_rounded_once_read_only_and_packed_once(packs, monkeypatch):
    """``fastane.constant``: the fp16 rounding of the weight, a view nobody can make
    writeable, packed once however often it is used, with the reference's bits, and kept
    by reference (no private copy)."""
    from fastane.lower import bind

    kept = []
    snapshot = bind._snapshot
    monkeypatch.setattr(bind, "_snapshot", lambda v: kept.append(snapshot(v)) or kept[-1])
    rng = np.random.default_rng(8)
    w64 = rng.standard_normal((32, 20))
    c = fastane.constant(w64)
    assert c.dtype == F16 and np.array_equal(_bits(c), _bits(w64.astype(F16)))
    with pytest.raises(ValueError):
        c.setflags(write=True)
    del packs[:]
    for i in range(3):
        a = rng.standard_normal((2, 32)).astype(F16)
        assert np.array_equal(_bits(fastane.matmul(a, c)), _bits(ref_matmul(a, c)))
        x = rng.standard_normal((2, 20)).astype(F16)
        assert np.array_equal(_bits(fastane.linear(x, c)), _bits(ref_matmul(x, c.T)))
    assert len(packs) == 2  # one program each, packed once
    weights = [k[0]() for k in kept if k is not None]
    assert len(weights) == 2 and all(bind._frozen(w) for w in weights)


def test_constants_of_one_shape_each_keep_their_kernel_slot(packs):
    """Layers of one shape with different constant weights (a model's repeated blocks)
    share one program; each constant keeps a kernel slot of its own, packed once, with the
    reference's bits; a user's array between them does not evict them (it gets a slot of
    its own, compared and repacked as before); a constant nobody holds any more frees its
    slot for the next one."""
    import gc

    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 6, 5, 5)).astype(F16)
    ws = [fastane.constant(rng.standard_normal((7, 6, 3, 3))) for _ in range(3)]
    user = rng.standard_normal((7, 6, 3, 3)).astype(F16)
    low = lower.build(lower.Conv(1, 6, 5, 5, 7, 3, 3, pad=((1, 1), (1, 1))))
    dev = lower.default_device()
    del packs[:]
    for _ in range(3):
        for w in ws + [user]:
            assert np.array_equal(_bits(fastane.conv2d(x, w, padding=1)), _bits(ref_conv2d(x, w, padding=1)))
    assert len(packs) <= 4  # each constant once, the user's array once (an earlier test may share a slot)
    n = len(low._free[id(dev)])
    assert 4 <= n <= 5
    user[0, 0, 0, 0] = -user[0, 0, 0, 0] if user[0, 0, 0, 0] != 0 else F16(1)  # a change is still packed
    before = len(packs)
    assert np.array_equal(_bits(fastane.conv2d(x, user, padding=1)), _bits(ref_conv2d(x, user, padding=1)))
    assert len(packs) == before + 1
    del ws, w
    gc.collect()
    for _ in range(3):  # new constants take the freed slots: no new buffers
        w = fastane.constant(rng.standard_normal((7, 6, 3, 3)))
        assert np.array_equal(_bits(fastane.conv2d(x, w, padding=1)), _bits(ref_conv2d(x, w, padding=1)))
    assert len(low._free[id(dev)]) == n
