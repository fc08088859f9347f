"""The planar builders (fastane.td.asm_planar): reduce_td and eltwise_td's broadcast
operands reproduce Apple's softmax and log-softmax TDs (corpus activation/softmax.bin,
logsoftmax.bin) field by field, given the corpus's shape, slots and L2 addresses."""

import re

import pytest

from fastane.td import Program, load_program
from fastane.td import planar as tdplanar
from fastane.td.asm import eltwise_td, reduce_td

R, W = 2560, 1600  # the corpus programs' geometry: 2560 rows of 1600
LOG2E, LN2 = 1.4423828125, 0.693359375
TENSOR = R * 3200  # bytes of one dense 2560 x 1600 tensor

#: fields the comparison leaves out, each class for a reason: performance and debug hints
#: (cache hints, ExeCycles, event masks), task ids, the L2 aliasing/interleave hints and
#: header enables whose meaning fastane does not know (no block of the device reads
#: them), the dependency/padding mode bits, and the buffer sizes of KernelDMA lanes that
#: are disabled; every field the device reads is compared.
IGNORED = re.compile(
    r"CacheHint|ExeCycles|LogEvents|Header\.(TID|LNID|NID|SPL|TSR|TSE|SrcLoc|DstLoc|ENE)$|TaskInfo\.NID"
    r"|Alias|Interleave|L2BfrMode|DependencyMode|PaddingMode|UnicastEn|CoeffBfrSize\[([1-9]|1[0-5])\]"
    r"|TileDMASrc\.(DMAConfig\.En|Fmt\.FmtMode)"  # on tasks whose source is an L2 vector (not read)
)

# Apple's L2 strip layouts (16-byte units), passed as overrides; the lowering uses dense rows
VEC = {
    "L2.ConvResultRowStride.Stride": 0xA02,
    "L2.SourceChannelStride.Stride": 0x40,
    "L2.SourceRowStride.Stride": 0x42,
}
STRIP_IN = {
    "L2.SourceChannelStride.Stride": 4,
    "L2.SourceRowStride.Stride": 4,
    "L2.ConvResultChannelStride.Stride": 2,
    "L2.ConvResultRowStride.Stride": 2,
    "L2.ResultGroupStride.Stride": 2,
}
STRIP_OUT = {
    "L2.SourceChannelStride.Stride": 2,
    "L2.SourceRowStride.Stride": 2,
    "L2.ConvResultChannelStride.Stride": 4,
    "L2.ConvResultRowStride.Stride": 4,
    "L2.ResultGroupStride.Stride": 4,
}
MUL = {
    "L2.SourceChannelStride.Stride": 0xA02,
    "L2.Source1ChannelStride.Stride": 0x40,
    "L2.Source1RowStride.Stride": 0x40,
    "L2.ConvResultChannelStride.Stride": 0,
    "L2.ConvResultRowStride.Stride": 0,
}


def softmax_tds(out_slot=4, out_base=0):
    t = (1, R, W)
    return [
        reduce_td(R, W, op="max-reduce", src=5, l2_src=0xA020, l2=VEC),
        eltwise_td(
            t,
            op="sub",
            out_scale=LOG2E,
            src=5,
            src1_in_l2=True,
            src1_broadcast=True,
            l2_src=0xA220,
            l2_src1=0,
            keep=True,
            l2_dst=0xA020,
            tile_height=16,
            l2={**STRIP_IN, "L2.Source1ChannelStride.Stride": 0xA02},
        ),
        eltwise_td(
            t,
            nonlinear="lut",
            src_in_l2=True,
            l2_src=0xA020,
            dst=3,
            l2_dst=0xA620,
            tile_height=16,
            l2=STRIP_OUT,
        ),
        reduce_td(R, W, op="recip-sum", src=3, l2_src=0xA020, l2=VEC),
        eltwise_td(
            t,
            op="mul",
            src_vector=True,
            src_broadcast=True,
            l2_src=0,
            src1=3,
            l2_src1=0xA020,
            dst=out_slot,
            dst_base=out_base,
            l2_dst=0x12020,
            tile_height=32,
            l2=MUL,
        ),
    ]


def differences(apple, mine):
    a, m = tdplanar.registers(apple), tdplanar.registers(mine)
    return {
        k: (a.get(k, 0), m.get(k, 0))
        for k in a.keys() | m.keys()
        if a.get(k, 0) != m.get(k, 0) and not IGNORED.search(k)
    }


def test_softmax_tds_field_by_field(corpus):
    apple = load_program(corpus / "m1-kernels" / "activation" / "softmax.bin")
    mine = Program.from_tds(softmax_tds())
    assert len(mine.tds) == len(apple.tds) == 5
    for i, (a, m) in enumerate(zip(apple.tds, mine.tds)):
        assert differences(a, m) == {}, i
    compared = [k for k in tdplanar.registers(apple.tds[0]) if not IGNORED.search(k)]
    assert len(compared) > 200  # the comparison is not vacuous


def test_logsoftmax_tds_field_by_field(corpus):
    apple = load_program(corpus / "m1-kernels" / "activation" / "logsoftmax.bin")
    t = (1, R, W)
    tds = softmax_tds(out_slot=3, out_base=TENSOR) + [
        eltwise_td(
            t,
            nonlinear="lut",
            kernel_base=0x80,
            src=3,
            src_base=TENSOR,
            l2_src=0x200,
            keep=True,
            l2_dst=0,
            tile_height=16,
            l2={**STRIP_IN, "L2.ConvResultRowStride.Stride": 2},
        ),
        eltwise_td(
            t, op="scale", out_scale=LN2, src_in_l2=True, l2_src=0, l2_dst=0x600, tile_height=16, l2=STRIP_OUT
        ),
    ]
    mine = Program.from_tds(tds)
    assert len(mine.tds) == len(apple.tds) == 7
    for i, (a, m) in enumerate(zip(apple.tds, mine.tds)):
        assert differences(a, m) == {}, i


def test_builder_errors():
    with pytest.raises(ValueError, match="unknown row reduction"):
        reduce_td(4, 8, op="mean")
    with pytest.raises(ValueError, match="row_stride"):
        reduce_td(4, 64, row_stride=64)
    with pytest.raises(ValueError, match="broadcast source 1 is a vector"):
        eltwise_td((1, 4, 8), op="sub", src1=6, src1_broadcast=True)
    with pytest.raises(ValueError, match="needs a planar task"):
        eltwise_td((1, 4, 8), src_in_l2=True, src_broadcast=True)
    with pytest.raises(ValueError, match="l2 overrides only"):
        eltwise_td((1, 4, 8), l2={"L2.SourceBase.Addr": 3})
