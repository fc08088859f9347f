"""Buffers in the FluidAudio style, done right: alignment, padding, pool, views, copies,
ANE layouts."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastane.device.buffers import (
    AneLayout,
    Buffer,
    BufferPool,
    aligned_array,
    copy_into,
    padded_shape,
    padded_strides,
    storage_nbytes,
    tile,
    untile,
    zero_copy_view,
)


# -- allocation rules ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape,dtype,padded,nbytes",
    [
        ((1, 16000), np.float32, (1, 16000), 64000),
        ((1, 512), np.float32, (1, 512), 2048),
        ((3, 10), np.float16, (3, 16), 128),  # 48 elements * 2 B = 96 -> 128
        ((5,), np.float32, (16,), 64),  # at least 64 bytes
        ((2, 3, 17), np.int8, (2, 3, 32), 192),  # the rule counts elements, not bytes
        ((4, 0), np.float16, (4, 0), 64),
    ],
)
def test_padding_and_storage(shape, dtype, padded, nbytes):
    assert padded_shape(shape) == padded
    assert storage_nbytes(shape, dtype) == nbytes
    buf = aligned_array(shape, dtype)
    assert buf.shape == shape and buf.padded_shape == padded and buf.nbytes == nbytes
    assert buf.address % 64 == 0
    assert buf.strides == padded_strides(shape, dtype)
    assert not np.asarray(buf).any()


def test_buffer_behaves_like_an_array():
    buf = aligned_array((3, 10), np.float16)
    buf[1] = 2.0
    assert np.asarray(buf).sum() == 20 and len(buf) == 3
    assert np.array_equal(buf.to_numpy(), np.asarray(buf)) and buf.to_numpy().flags.c_contiguous
    assert np.asarray(buf, dtype=np.float32).dtype == np.float32


# -- pool ------------------------------------------------------------------------------------
def test_pool_same_key_shape_dtype_is_the_same_buffer():
    pool = BufferPool()
    a = pool.get("vad-frame", (1, 512), np.float32)
    assert pool.get("vad-frame", (1, 512), np.float32) is a
    assert (pool.stats.hits, pool.stats.misses, pool.stats.bytes) == (1, 1, 2048)
    b = pool.get("vad-frame", (1, 256), np.float32)  # other shape: replaced
    assert b is not a and pool.stats.replacements == 1
    c = pool.get("vad-frame", (1, 256), np.float16)  # other dtype: replaced
    assert c is not b and pool.get("vad-frame", (1, 256), np.float16) is c
    assert pool.stats.bytes == c.nbytes and len(pool) == 1 and "vad-frame" in pool
    pool.get("mask", (4, 4), np.float16)
    pool.clear()
    assert len(pool) == 0 and pool.stats.bytes == 0 and "mask" not in pool
    assert pool.get("vad-frame", (1, 256), np.float16) is not c


def test_pool_is_thread_safe():
    pool = BufferPool()
    got = [[] for _ in range(8)]

    def worker(i):
        for k in range(200):
            got[i].append(pool.get(f"k{k % 5}", (8, 8), np.float16))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.stats.hits + pool.stats.misses == 1600
    assert pool.stats.misses == 5 and len(pool) == 5
    for key in range(5):  # every thread saw the one buffer of each key
        assert len({id(b) for g in got for b in g[key::5]}) == 1


# -- zero-copy views -------------------------------------------------------------------------
def test_view_shares_memory_with_padded_strides():
    src = aligned_array((4, 32), np.float16)
    v = zero_copy_view(src, (2, 32), offset=64)  # rows 1..2 of the source
    assert v.shares_memory(src)
    v[...] = 7
    assert np.array_equal(np.asarray(src)[1:3], np.full((2, 32), 7, np.float16))
    assert not np.asarray(src)[[0, 3]].any()


def test_view_is_checked_against_strides_not_element_counts():
    # a (1, 64) fp16 source: 128 bytes of storage, 64 logical elements.  A (5, 10) view
    # holds 50 logical elements (FluidAudio's check: 50 <= 64, accepted), but its padded
    # rows are 16 elements apart, so its last element sits at byte 4*32 + 18 = 146.
    src = aligned_array((1, 64), np.float16)
    zero_copy_view(src, (4, 10))  # reaches byte 116: fine
    with pytest.raises(ValueError, match="past"):
        zero_copy_view(src, (5, 10))
    # offsets count too: a (2, 10) view spans 52 bytes, so 76 is the last offset that fits
    zero_copy_view(src, (2, 10), offset=76)
    with pytest.raises(ValueError):
        zero_copy_view(src, (2, 10), offset=78)


def test_view_of_a_view_is_bounded_by_the_view():
    src = aligned_array((8, 16), np.float16)
    v = zero_copy_view(src, (2, 16))
    zero_copy_view(v, (1, 16), offset=32)
    with pytest.raises(ValueError):
        zero_copy_view(v, (1, 16), offset=64)  # inside src, outside v


def test_view_argument_checks():
    src = aligned_array((4, 16), np.float16)
    with pytest.raises(ValueError):
        zero_copy_view(src, (1, 16), offset=-2)
    with pytest.raises(ValueError):
        zero_copy_view(src, (1, 16), offset=3)  # not a multiple of the element size
    with pytest.raises(TypeError):
        zero_copy_view([1, 2, 3], (1,))
    with pytest.raises(ValueError):
        zero_copy_view(np.zeros((4, 4))[:, ::2], (2,))
    plain = np.zeros((4, 16), np.float16)
    v = zero_copy_view(plain, (2, 16), offset=64)
    v[...] = 1
    assert plain[2:].all() and not plain[:2].any()


# -- stride-aware copies ---------------------------------------------------------------------
def test_copy_into_padded_buffer_keeps_rows_apart():
    dst = aligned_array((3, 10), np.float32)
    src = np.arange(30, dtype=np.float32)  # a flat Swift-style [Float]
    copy_into(dst, src)
    assert np.array_equal(np.asarray(dst), src.reshape(3, 10))
    storage = dst.storage.view(np.float32)[:48].reshape(3, 16)
    assert not storage[:, 10:].any()  # padding untouched
    # the bug: a linear copy through the padded storage scrambles rows
    scrambled = np.zeros(48, np.float32)
    scrambled[:30] = src
    assert not np.array_equal(scrambled.reshape(3, 16)[:, :10], src.reshape(3, 10))


def test_copy_into_checks_shapes_and_casts():
    dst = aligned_array((2, 4), np.float16)
    dst.copy_from(np.ones((2, 4)))
    assert np.asarray(dst).sum() == 8
    with pytest.raises(ValueError):
        copy_into(dst, np.ones(7))
    with pytest.raises(ValueError):
        copy_into(dst, np.ones((4, 2)))
    with pytest.raises(TypeError):
        copy_into("x", np.ones(8))


# -- ANE layouts -----------------------------------------------------------------------------
def test_ane_layout_strides_match_the_seed():
    x = AneLayout.of((1, 8, 4, 1), np.float16)  # the seed's input: row 64, plane 256
    assert (x.row_stride, x.plane_stride, x.batch_stride, x.nbytes) == (64, 256, 2048, 2048)
    y = AneLayout.of((3, 4, 1))
    assert (y.row_stride, y.plane_stride, y.nbytes) == (64, 256, 768)
    z = AneLayout.of((1, 2, 3, 40), np.float16)  # 80-byte rows -> 128; 384-byte planes
    assert (z.row_stride, z.plane_stride) == (128, 384)


def test_ane_layout_rejects_bad_strides():
    with pytest.raises(ValueError):
        AneLayout(1, 2, 40, np.float16, 80, 160)  # not multiples of 64
    with pytest.raises(ValueError):
        AneLayout(1, 4, 40, np.float16, 128, 256)  # planes overlap
    with pytest.raises(ValueError):
        AneLayout.of((2, 2))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 5),
    h=st.integers(1, 6),
    w=st.integers(1, 70),
    dtype=st.sampled_from([np.float16, np.int8, np.uint8]),
)
def test_tile_untile_round_trip(n, c, h, w, dtype):
    rng = np.random.default_rng(n * 1000 + c * 100 + h * 10 + w)
    x = rng.integers(-100, 100, (n, c, h, w)).astype(dtype)
    layout = AneLayout.of(x.shape, dtype)
    raw = layout.tile(x)
    assert raw.ctypes.data % 64 == 0 and raw.size == layout.nbytes
    assert np.array_equal(layout.untile(raw), x)
    # element (n, c, h, w) sits where the strides say; padding bytes are zero
    flat = raw.view(np.uint8)
    item = np.dtype(dtype).itemsize
    for idx in [(0, 0, 0, 0), (n - 1, c - 1, h - 1, w - 1)]:
        off = sum(i * s for i, s in zip(idx, layout.strides))
        assert flat[off : off + item].view(dtype)[0] == x[idx]
    offsets = sum(i * st_ for i, st_ in zip(np.indices(x.shape), layout.strides)).ravel()
    data = np.zeros(raw.size, bool)
    for k in range(item):
        data[offsets + k] = True
    assert not raw[~data].any()


def test_tile_helpers_round_to_fp16():
    x = np.array([[[[1 / 3, 65519.0, 1e-8]]]])
    raw = tile(x)
    assert np.array_equal(untile(raw, x.shape), x.astype(np.float16))
    with pytest.raises(ValueError):
        AneLayout.of((1, 1, 1, 3)).tile(np.zeros((1, 1, 1, 4)))
    out = np.full(64, 0xFF, np.uint8)
    AneLayout.of((1, 1, 1, 3)).tile(np.ones((1, 3)).reshape(1, 1, 3), out=out)
    assert out[6:].sum() == 0


def test_buffer_repr_and_isinstance():
    buf = aligned_array((2, 2))
    assert isinstance(buf, Buffer) and "padded=(2, 16)" in repr(buf)
