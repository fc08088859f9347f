"""The M1 TD field table (fastane.td.fields) against the layout and the recovered bit map."""

import json
import re

from fastane.td import BY_NAME, FIELDS, LAYOUT, PLANAR_WORDS, TD_FIELDS, TD_SIZE


def test_258_unique_fields_with_canonical_names():
    assert len(FIELDS) == 258
    assert len({f.name for f in FIELDS}) == 258
    for name in (
        "Header.NID",
        "Header.RBase0",
        "Common.InDim.Win",
        "Common.Cin.Cin",
        "KernelDMASrc.CoeffDMAConfig[3].En",
        "NE.MACCfg.NonlinearMode",
        "Header.NextPointer",
        "TileDMADst.Fmt.CmpVec",
    ):
        assert name in BY_NAME
    assert not any(f.name.startswith(("aneTD", "aneRegs")) or "Header[" in f.name for f in FIELDS)


def test_each_field_is_one_word_slice_and_none_overlap():
    owner = {}
    for f in TD_FIELDS:
        assert f.word == f.offset // 4 and f.shift == (f.offset % 4) * 8 + f.bit
        assert f.shift + f.width <= 32 and f.mask == (1 << f.width) - 1
        assert 0 <= f.offset < TD_SIZE
        for b in range(f.width):
            bit = f.word * 32 + f.shift + b
            assert bit not in owner, (f.name, owner.get(bit))
            owner[bit] = f.name


def test_fields_sit_inside_their_sections_packets():
    spans = {
        s: (off + (4 if hdr is not None else 0), off + (4 if hdr is not None else 0) + 4 * n)
        for s, off, hdr, n in LAYOUT
    }
    for f in TD_FIELDS:
        lo, hi = spans[f.section]
        assert lo <= f.offset < hi, f.name


def test_planar_words_are_the_planar_packet():
    assert [f.offset for f in PLANAR_WORDS] == [0x22C, 0x230, 0x234, 0x238]
    assert [f.name for f in PLANAR_WORDS] == [f"Planar.Word[{i}]" for i in range(4)]


def test_table_matches_aneregs_json(corpus):
    entries = json.loads((corpus / "aneregs.json").read_text())
    assert len(entries) == len(FIELDS)
    for (raw, (offset, bit, width)), f in zip(entries, FIELDS):
        name = re.sub(r"^Header\[\d+\]\.", "Header.", re.sub(r"^ane(TD|Regs)\.", "", raw))
        assert (f.name, f.offset, f.bit, f.width) == (name, offset, bit, width), raw
