"""ControlDMA packets and TaskDescriptor: golden seed decode, fields, views, malformed TDs."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastane.errors import FastaneError, TDError
from fastane.td import (
    FIELDS,
    LAYOUT,
    TD_FIELDS,
    TD_SIZE,
    FieldOverflowError,
    PacketError,
    TaskDescriptor,
    decode_packet,
    encode_packet,
    packet_header,
    parse_packet_header,
)

HEADERS = [(s, off, hdr, n) for s, off, hdr, n in LAYOUT if hdr is not None]


# ---------------------------------------------------------------- packets


def test_packet_headers_of_the_m1_layout():
    # SPEC 5: header [31:26] = N - 1, [25:2] = register byte address, [1:0] = 0
    assert packet_header(0x1F800, 62) == 0xF401F800
    for _, _, hdr, n in HEADERS:
        count, reg = parse_packet_header(hdr)
        assert count == n and packet_header(reg, count) == hdr
    assert [off for _, off, _, _ in LAYOUT] == [0x000, 0x028, 0x124, 0x168, 0x1DC, 0x228, 0x23C, 0x254]


def test_packet_encode_decode_round_trip():
    words = encode_packet(0xC800, [1, 2, 3, 0xFFFFFFFF, 5])
    assert words[0] == 0x1000C800
    assert decode_packet(words) == (0xC800, [1, 2, 3, 0xFFFFFFFF, 5])


@pytest.mark.parametrize(
    "call",
    [
        lambda: parse_packet_header(0xF401F801),
        lambda: packet_header(0x1F802, 4),
        lambda: packet_header(0, 65),
        lambda: packet_header(0, 0),
        lambda: decode_packet([0xF401F800, 1]),
        lambda: encode_packet(0, [1 << 32]),
    ],
)
def test_bad_packets_raise_tderror(call):
    with pytest.raises(TDError):
        call()


# ---------------------------------------------------------------- the seed, golden values from SPEC 5


def test_seed_decodes_to_the_spec_values(corpus):
    raw = (corpus / "seed-conv1x1.td").read_bytes()
    assert len(raw) == 0x274
    td = TaskDescriptor.from_bytes(raw)
    golden = {  # typed from SPEC section 5, not computed
        "Header.EON": 1,
        "Header.LogEvents": 0x42A,
        "Header.RBase0": 4,
        "Header.WBase": 5,
        "Header.KBase0": 1,
        "Header.ENE": 3,
        "Common.InDim.Win": 1,
        "Common.InDim.Hin": 4,
        "Common.ChCfg.InFmt": 2,
        "Common.ChCfg.OutFmt": 2,
        "Common.Cin.Cin": 8,
        "Common.Cout.Cout": 3,
        "Common.OutDim.Wout": 1,
        "Common.OutDim.Hout": 4,
        "Common.ConvCfg.Kw": 1,
        "Common.ConvCfg.Kh": 1,
        "Common.ConvCfg.Sx": 1,
        "Common.ConvCfg.Sy": 1,
        "Common.GroupConvCfg.NumGroups": 1,
        "Common.TileCfg.TileHeight": 4,
        "Common.Cfg.ActiveNE": 2,
        "Common.Cfg.AccDoubleBufEn": 1,
        "Common.TaskInfo.NID": 1,  # SPEC's "NID=1" (the TD header's own NID is 0)
        "TileDMASrc.RowStride.Stride": 1,
        "TileDMASrc.PlaneStride.PlaneStride": 4,
        "TileDMASrc.DepthStride.Stride": 32,
        "TileDMASrc.GroupStride.Stride": 32,
        "L2.ResultBase.Addr": 32,
        "NE.KernelCfg.KernelFmt": 2,
        "NE.MACCfg.BinaryPoint": 28,
        "NE.PostScale.PostScale": 0x3C00,
        "TileDMADst.RowStride.RowStride": 1,
        "TileDMADst.PlaneStride.PlaneStride": 4,
        "TileDMADst.DepthStride.DepthStride": 12,
        "TileDMADst.GroupStride.GroupStride": 12,
    }
    assert {k: td[k] for k in golden} == golden
    assert td["Header.NID"] == 0 and td["Header.RBE0"] == 1 and td["Header.WBE"] == 1
    assert td.to_bytes() == raw


# ---------------------------------------------------------------- fields, views, build


def seed_like():
    return TaskDescriptor.build({"Common.Cin.Cin": 8, "Common.Cout.Cout": 3, "Header.EON": 1})


def test_blank_td_has_the_m1_packet_headers():
    td = TaskDescriptor()
    for _, off, hdr, _ in HEADERS:
        assert td.words[off // 4] == hdr
    assert TaskDescriptor.from_bytes(td.to_bytes()) == td
    assert not any(td.values())


def test_build_by_dict_and_by_keyword_alias():
    a = TaskDescriptor.build(
        {"Common.Cin.Cin": 8, "KernelDMASrc.CoeffDMAConfig[3].En": 1, "NE.PostScale.PostScale": 0x3C00}
    )
    b = TaskDescriptor.build(
        Common_Cin_Cin=8, KernelDMASrc_CoeffDMAConfig3_En=1, NE_PostScale_PostScale=0x3C00
    )
    assert a == b and a["Common.Cin.Cin"] == 8
    assert a.fields(nonzero=True) == {
        "KernelDMASrc.CoeffDMAConfig[3].En": 1,
        "Common.Cin.Cin": 8,
        "NE.PostScale.PostScale": 0x3C00,
    }


def test_section_views_read_and_write_the_same_words():
    td = seed_like()
    assert td.Common.Cin.Cin == 8 and td.Header.EON == 1
    td.Common.InDim.Win = 77
    td.KernelDMASrc.CoeffDMAConfig[3].En = 1
    td.Planar.Word[2] = 0x3C003800
    assert td["Common.InDim.Win"] == 77
    assert td["KernelDMASrc.CoeffDMAConfig[3].En"] == 1
    assert td.planar_words == (0, 0, 0x3C003800, 0)
    assert td.NE.MACCfg.fields()["BinaryPoint"] == 0
    assert td.KernelDMASrc.CoeffDMAConfig[3].fields() == {
        "En": 1,
        "CrH": 0,
        "CacheHint": 0,
        "PrefetchParticipateEn": 0,
    }
    with pytest.raises(AttributeError):
        td.Common.NoSuchRegister
    with pytest.raises(AttributeError):
        td.NoSuchSection


def test_field_overflow_and_bad_values():
    td = TaskDescriptor()
    with pytest.raises(FieldOverflowError) as e:
        td["Common.ChCfg.InFmt"] = 4  # 2 bits
    assert isinstance(e.value, TDError) and isinstance(e.value, ValueError)
    assert isinstance(e.value, FastaneError) and "2 bits" in str(e.value)
    for bad in (-1, 1 << 17):
        with pytest.raises(FieldOverflowError):
            td["Common.Cin.Cin"] = bad
    with pytest.raises(FieldOverflowError):
        TaskDescriptor.build({"Header.NID": 256})
    with pytest.raises(TypeError):
        td["Common.Cin.Cin"] = "8"
    with pytest.raises(TypeError):
        td["Common.Cin.Cin"] = 2.5
    with pytest.raises(KeyError, match="Common.Cin.Cin"):
        td["Common.Cin"]  # suggests the close match
    assert td.get("nope", -1) == -1


def test_unnamed_bits_survive_field_writes(corpus):
    raw = (corpus / "seed-conv1x1.td").read_bytes()
    td = TaskDescriptor.from_bytes(raw)
    td["Common.Cfg.ActiveNE"] = 5  # its word 0x15c also holds unnamed bit 0
    td["Common.Cfg.ActiveNE"] = 2
    td.Common.Cfg.ShMax = 4
    assert td.to_bytes() == raw


# ---------------------------------------------------------------- malformed TDs


def test_truncated_td():
    raw = TaskDescriptor().to_bytes()
    for n in (0, 4, TD_SIZE - 1):
        with pytest.raises(TDError, match="truncated TD"):
            TaskDescriptor.from_bytes(raw[:n])
    with pytest.raises(TDError, match="truncated TD at 0x10"):
        TaskDescriptor.from_bytes(raw, offset=0x10)


@pytest.mark.parametrize("section,off,hdr,n", HEADERS)
def test_bad_packet_header_names_offset_expected_found(section, off, hdr, n):
    raw = bytearray(TaskDescriptor().to_bytes())
    struct.pack_into("<I", raw, off, hdr + 4)  # wrong register
    with pytest.raises(PacketError) as e:
        TaskDescriptor.from_bytes(raw)
    err = e.value
    assert (err.offset, err.expected, err.found) == (off, hdr, hdr + 4)
    assert section in str(err) and f"{off:#x}" in str(err) and f"{hdr:#010x}" in str(err)


def test_packet_header_errors_are_precise():
    raw = bytearray(TaskDescriptor().to_bytes())
    struct.pack_into("<I", raw, 0x23C, 0x1000C801)  # bits [1:0] set
    with pytest.raises(PacketError, match=r"not a packet header"):
        TaskDescriptor.from_bytes(raw)
    struct.pack_into("<I", raw, 0x23C, packet_header(0xC800, 40))  # 40 words overrun the TD
    with pytest.raises(PacketError, match="past the TD end 0x274"):
        TaskDescriptor.from_bytes(raw)
    big = bytes(0x300) + bytes(raw)  # offsets quoted in the buffer
    with pytest.raises(PacketError) as e:
        TaskDescriptor.from_bytes(big, 0x300)
    assert e.value.offset == 0x300 + 0x23C and "TD at 0x300" in str(e.value)


# ---------------------------------------------------------------- properties


def _with_headers(raw: bytes) -> list:
    words = list(struct.unpack("<157I", raw))
    for _, off, hdr, _ in HEADERS:
        words[off // 4] = hdr
    return words


_raw_td = st.binary(min_size=TD_SIZE, max_size=TD_SIZE)


@settings(max_examples=200, deadline=None)
@given(_raw_td)
def test_any_words_with_the_right_headers_round_trip(raw):
    raw = struct.pack("<157I", *_with_headers(raw))
    td = TaskDescriptor.from_bytes(raw)
    assert td.to_bytes() == raw
    assert TaskDescriptor.build(td.fields()).fields() == td.fields()


@settings(max_examples=200, deadline=None)
@given(_raw_td, st.sampled_from(TD_FIELDS), st.integers(0, 0xFFFFFFFF))
def test_writing_a_field_changes_only_that_field(raw, f, v):
    td = TaskDescriptor(_with_headers(raw))
    v &= f.mask
    before, raw_before = td.fields(), td.words[:]
    td[f.name] = v
    after = td.fields()
    assert after[f.name] == v
    assert {k: x for k, x in after.items() if k != f.name} == {k: x for k, x in before.items() if k != f.name}
    keep = ~(f.mask << f.shift) & 0xFFFFFFFF
    assert [w & keep if i == f.word else w for i, w in enumerate(td.words)] == [
        w & keep if i == f.word else w for i, w in enumerate(raw_before)
    ]


def test_values_follow_the_field_order():
    td = TaskDescriptor.build({"Header.TID": 7, "TileDMADst.Fmt.CmpVec": 9})
    v = td.values()
    assert v[0] == 7 and v[len(FIELDS) - 1] == 9 and len(v) == len(TD_FIELDS)
    assert list(td.fields()) == [f.name for f in TD_FIELDS]
