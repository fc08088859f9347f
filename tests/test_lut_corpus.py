"""The real coefficient blocks of the corpus (eiln's M1 kernels) against fastane's tables.

A small reader of its own: the TD stream (TDs 0x300 apart, 0x274 bytes each) then the
kernel region at round_up(tsk_size, 0x80).  A LUT task has NonlinearMode (TD byte 582,
bits 0..1) = 2; its block sits at the kernel region + CoeffBaseAddr[0] (TD byte 116,
bits 6..31, in bytes).
"""

import json
import struct

import numpy as np
import pytest

from fastane import lut

TD_STRIDE, TD_SIZE = 0x300, 0x274

# kernel -> registry names of its LUT tasks, in TD order
EXPECTED = {
    "tanh": ["tanh"],
    "sigmoid": ["sigmoid"],
    "silu": ["sigmoid"],
    "gelu": ["gelu"],
    "exp": ["exp2"],
    "exp2": ["exp2"],
    "inv": ["reciprocal"],
    "rsqrt": ["rsqrt"],
    "sqrt": ["sqrt"],
    "log2": ["log2"],
    "relu6": ["relu6"],
    "hardtanh": ["hardtanh"],
    "leakyrelu": ["leaky_relu"],
    "rrelu": ["rrelu"],
    "selu": ["selu"],
    "sign": ["sign"],
    "atan": ["atan_low", "atan_high"],
    "ceil": ["fraction", "step", "integer"],
    "frac": ["sign"],
    "log": ["log2"],
    "log10": ["log2"],
    "div": ["reciprocal"],
    "softmax": ["exp2"],
    "logsoftmax": ["exp2", "log2"],
    "norm": ["sqrt", "relu", "reciprocal"],
}


def _u32(td, off):
    return struct.unpack_from("<I", td, off)[0]


def lut_tasks(corpus, name):
    """[(td_index, NonlinearMode, PostScale, CoeffBlock words)] of one corpus kernel."""
    meta = json.loads((corpus / "m1-kernels" / "kernels.json").read_text())[name]
    data = (corpus / "m1-kernels" / meta["file"]).read_bytes()
    kof = (meta["tsk_size"] + 0x7F) // 0x80 * 0x80
    assert len(data) == kof + meta["krn_size"] == meta["size"]
    out = []
    for t in range(meta["td_count"]):
        td = data[t * TD_STRIDE : t * TD_STRIDE + TD_SIZE]
        nl = td[582] & 3
        post_scale = struct.unpack_from("<H", td, 592)[0]
        base = (_u32(td, 116) >> 6) << 6
        words = None
        if nl == 2:
            words = np.frombuffer(data, dtype="<u2", count=lut.WORDS, offset=kof + base)
        out.append((t, nl, post_scale, words))
    return out


@pytest.fixture(scope="module")
def kernels(corpus):
    return json.loads((corpus / "m1-kernels" / "kernels.json").read_text())


def test_every_lut_kernel_is_identified(corpus, kernels):
    """Every kernel with a LUT task is in EXPECTED (softmin's block is all zeros)."""
    with_lut = {n for n in kernels if any(nl == 2 for _, nl, _, _ in lut_tasks(corpus, n))}
    assert with_lut - {"softmin"} == set(EXPECTED)
    ((_, _, _, zero),) = [t for t in lut_tasks(corpus, "softmin") if t[1] == 2]
    assert not zero.any()  # a corpus defect: the coefficient region was lost


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_blocks_equal_fastane_tables(corpus, name):
    tasks = [t for t in lut_tasks(corpus, name) if t[1] == 2]
    assert [lut.CoeffBlock.from_words(w) for _, _, _, w in tasks] == [
        lut.get_block(n) for n in EXPECTED[name]
    ]
    for _, _, ps, _ in tasks:
        assert ps == (0x3DC5 if name == "exp" else 0x3C00)  # exp: PostScale = log2(e)


def test_twenty_distinct_blocks(corpus):
    seen = set()
    for name in EXPECTED:
        for _, _, _, w in (t for t in lut_tasks(corpus, name) if t[1] == 2):
            seen.add(bytes(w))
    assert len(seen) == 20
    decoded = [lut.CoeffBlock.from_words(np.frombuffer(b, "<u2")) for b in seen]
    assert {b.mode_word for b in decoded} == {0x60, 0x01, 0x02, 0x0A, 0x67, 0xC6, 0xC5, 0xC9, 0x63, 0x64}
    assert {b.R for b in decoded} == {3, 2, 5, 6, 4, 64, 0, -1}


def test_relu_kernel_uses_nonlinear_mode_1(corpus):
    assert [nl for _, nl, _, _ in lut_tasks(corpus, "relu")] == [1]


def test_hwx_sigmoid_block(corpus):
    """tinygrad's sigmoid.hwx (another compiler build): a full sigmoid table, R = 1."""
    raw = (corpus / "m1-hwx" / "sigmoid.hwx").read_bytes()
    blk = lut.CoeffBlock.from_bytes(raw, 0x4280)
    assert (blk.mode, blk.symmetry, blk.R) == (1, "none", 1)
    xs = -8 + np.arange(33) / 2
    assert list(blk.knots) == (1 / (1 + np.exp(-xs))).astype(np.float16).view(np.uint16).tolist()
    y = blk(np.array([-20.0, -9.0, 0.0, 8.2, 20.0])).astype(np.float64)
    assert y[0] == 0 and 0 < y[1] < 3.4e-4 and y[2] == 0.5 and 0.9995 <= y[3] <= 1.0 and y[4] == 1
