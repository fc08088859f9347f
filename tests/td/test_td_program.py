"""Programs: TD chains, BAR plans, the corpus .bin / .hwx / raw TD loaders, malformed containers."""

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastane.errors import TDError
from fastane.td import TD_SIZE, HwxError, Program, TaskDescriptor, conv_td, load_program, parse_hwx
from fastane.td.hwx import is_hwx
from fastane.td.program import load_hwx
from fastane.td.program import load_bin, parse_chain

# ---------------------------------------------------------------- a synthetic .hwx (no corpus needed)


def make_hwx(tds, kernel=b"\x11" * 0x80, magic=0xBEEFFACE):
    """A minimal .hwx: __TEXT (__text = TD stream, __const = kernel), two __FVMLIB tensors,
    their LC_LOADFVMLIB names and a flavor-1 LC_THREAD BAR table (0 TD, 1 kernel, 4 out, 5 in)."""
    prog = Program.from_tds(tds, kernel)
    text, base = prog.td_stream, 0x30000000
    const_addr = base + ((len(text) + 0x7F) & ~0x7F)

    def sect(name, seg, addr, size, off):
        return struct.pack("<16s16s2Q8I", name, seg, addr, size, off, 6, 0, 0, 0, 0, 0, 0)

    def segment(name, vm, vs, fo, fs, prot, sects):
        body = struct.pack("<16s4Q4I", name, vm, vs, fo, fs, prot, prot, len(sects), 0) + b"".join(sects)
        return struct.pack("<2I", 0x19, 8 + len(body)) + body

    def fvmlib(name, addr):
        s = name.encode() + b"\0" * (8 - len(name) % 8)
        return struct.pack("<5I", 0x6, 20 + len(s), 20, 0, addr) + s

    out_addr, in_addr = base + 0x8000, base + 0xC000
    bars = [0] * 64
    for slot, addr in ((0, base), (1, const_addr), (4, out_addr), (5, in_addr)):
        bars[2 * slot] = addr
    state = bars + [0] * (532 - 64)
    state[512], state[514], state[515] = base, TD_SIZE // 4 - 1, len(tds)  # TD address, size, count
    thread = struct.pack(f"<4I{len(state)}I", 0x4, 16 + 4 * len(state), 1, len(state), *state)
    file_data_off = 0x1000
    cmds = [
        segment(
            b"__TEXT",
            base,
            0x8000,
            file_data_off,
            0x8000,
            5,
            [
                sect(b"__text", b"__TEXT", base, len(text), file_data_off),
                sect(b"__const", b"__TEXT", const_addr, len(kernel), file_data_off + const_addr - base),
            ],
        ),
        segment(b"__FVMLIB", out_addr, 0x4000, 0, 0, 2, [sect(b"__data", b"__FVMLIB", out_addr, 0x4000, 0)]),
        segment(b"__FVMLIB", in_addr, 0x4000, 0, 0, 1, [sect(b"__const", b"__FVMLIB", in_addr, 0x4000, 0)]),
        fvmlib("y@output", out_addr),
        fvmlib("x", in_addr),
        thread,
    ]
    lc = b"".join(cmds)
    head = struct.pack("<8I", magic, 128, 4, 2, len(cmds), len(lc), 0x200000, 0)
    data = bytearray(file_data_off + 0x8000)
    data[: len(head) + len(lc)] = head + lc
    data[file_data_off : file_data_off + len(text)] = text
    c = file_data_off + const_addr - base
    data[c : c + len(kernel)] = kernel
    return bytes(data)


def two_convs():
    return [
        conv_td((1, 8, 4, 1), (1, 3, 4, 1), src=5, dst=3),
        conv_td((1, 3, 4, 1), (1, 3, 4, 1), src=3, dst=4),
    ]


def test_from_tds_chains_0x300_apart():
    p = Program.from_tds(two_convs(), kernel=b"k" * 0x40)
    assert p.offsets == [0, 0x300] and len(p.td_stream) == 0x300 + TD_SIZE
    a, b = p.tds
    assert (a["Header.NextPointer"], a["Header.NextSize"], a["Header.EON"], a["Header.TBE"]) == (
        0x300,
        0x9C,
        0,
        1,
    )
    assert (b["Header.NextPointer"], b["Header.NextSize"], b["Header.EON"]) == (0, 0, 1)
    tds, offs = parse_chain(p.td_stream)
    assert tds == p.tds and offs == p.offsets
    assert {s: b.role for s, b in p.bars.items()} == {
        0: "td",
        1: "kernel",
        3: "intermediate",
        4: "output",
        5: "input",
    }
    assert p.inputs[0].slot == 5 and p.outputs[0].slot == 4 and p.intermediates[0].slot == 3
    q = load_bin(p.to_bytes())
    assert q.tds == p.tds and q.kernel == p.kernel


def test_synthetic_hwx_loads_through_its_sections(tmp_path):
    data = make_hwx(two_convs())
    f = tmp_path / "two.hwx"
    f.write_bytes(data)
    p = load_program(f)
    hwx = parse_hwx(data)
    text = hwx.section("__TEXT", "__text")
    assert p.td_base == text.offset == 0x1000 and len(p.tds) == 2
    assert p.kernel == b"\x11" * 0x80
    assert {s: (b.role, b.name) for s, b in p.bars.items()} == {
        0: ("td", None),
        1: ("kernel", None),
        4: ("output", "y@output"),
        5: ("input", "x"),
    }


def test_raw_td_and_chain_errors(tmp_path):
    one = conv_td((1, 8, 4, 1), (1, 3, 4, 1))
    f = tmp_path / "one.td"
    f.write_bytes(one.to_bytes())
    p = load_program(f)
    assert p.tds == [one] and p.kernel == b"" and p.offsets == [0]

    stream = bytearray(Program.from_tds(two_convs()).td_stream)
    bad = TaskDescriptor.from_bytes(stream)
    bad["Header.NextPointer"] = 0x10000  # out of the program
    stream[:TD_SIZE] = bad.to_bytes()
    with pytest.raises(TDError, match="NextPointer 0x10000 points outside"):
        parse_chain(stream)
    bad["Header.NextPointer"] = 0  # back to itself
    stream[:TD_SIZE] = bad.to_bytes()
    with pytest.raises(TDError, match="loops back to TD 0"):
        parse_chain(stream)
    bad["Header.NextPointer"], bad["Header.NextSize"] = 0x300, 0x20
    stream[:TD_SIZE] = bad.to_bytes()
    with pytest.raises(TDError, match="NextSize 0x20"):
        parse_chain(stream)
    with pytest.raises(TDError, match="NextPointer 0x300 points outside"):
        parse_chain(Program.from_tds(two_convs()).td_stream[: 0x300 + 0x100])
    with pytest.raises(TDError, match="truncated"):
        parse_chain(Program.from_tds(two_convs()).td_stream[:0x100])


# ---------------------------------------------------------------- malformed .hwx


def _patch(data, off, fmt, *vals):
    b = bytearray(data)
    struct.pack_into(fmt, b, off, *vals)
    return bytes(b)


def test_malformed_hwx_raises_precise_errors():
    good = make_hwx(two_convs())
    cases = [
        (good[:20], "truncated Mach-O header"),
        (_patch(good, 0, "<I", 0xFEEDFACE), "bad magic 0xfeedface"),
        (_patch(good, 20, "<I", 0x100000), "past the end of the file"),  # sizeofcmds
        (_patch(good, 16, "<I", 99), "runs past the load commands"),  # ncmds
        (_patch(good, 36, "<I", 0), "bad cmdsize 0x0"),  # first cmdsize
        (_patch(good, 36, "<I", 0xFFF0), "bad cmdsize"),
        (_patch(good, 32 + 64, "<I", 50), "50 sections do not fit"),  # nsects
        (_patch(good, 32 + 72 + 48, "<I", 0x7FFF0), "out of the file"),  # __text offset
        (_patch(good, 32 + 72 + 40, "<Q", 0x100000), "out of the file"),  # __text size
        (_patch(good, 32 + 72, "<16s", b"__nottext"), "no __TEXT,__text"),
    ]
    for data, msg in cases:
        with pytest.raises(HwxError, match=msg):
            load_hwx(data)


def load_program_bytes(data):
    return load_hwx(data) if is_hwx(data) else load_bin(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_containers_never_crash(data):
    good = make_hwx(two_convs()) if data.draw(st.booleans()) else Program.from_tds(two_convs()).to_bytes()
    b = bytearray(good)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, min(len(b), 0x1300) - 1))
        b[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(b))))
    try:
        p = load_program_bytes(bytes(b[:cut]))
    except TDError:
        return
    for td in p.tds:  # what loads is a consistent program
        assert TaskDescriptor.from_bytes(td.to_bytes()) == td


# ---------------------------------------------------------------- the corpus


def _kernels(corpus):
    meta = json.loads((corpus / "m1-kernels" / "kernels.json").read_text())
    assert len(meta) == 36
    return meta


def test_every_corpus_kernel_loads_and_round_trips(corpus):
    for name, m in _kernels(corpus).items():
        path = corpus / "m1-kernels" / m["file"]
        data = path.read_bytes()
        p = load_program(path)
        assert p.name == name and len(p.tds) == m["td_count"]
        assert p.offsets == [0x300 * i for i in range(m["td_count"])]
        for td, off in zip(p.tds, p.offsets):
            assert td.to_bytes() == data[off : off + TD_SIZE]
            assert TaskDescriptor.from_bytes(td.to_bytes()).to_bytes() == data[off : off + TD_SIZE]
        assert len(p.kernel) == m["krn_size"]
        if name != "softmin":  # softmin's kernels.json tsk_size is norm's; the chain wins
            assert p.to_bytes() == data and not p.meta["notes"]
            assert p.kernel == data[(m["tsk_size"] + 0x7F) & ~0x7F :][: m["krn_size"]]
        else:
            assert p.meta["notes"] and p.to_bytes() == data[: len(p.to_bytes())]


def test_derived_bar_plans_agree_with_kernels_json(corpus):
    roles = {"TILE_CMD": "td", "TILE_SRC": "input", "TILE_DST": "output", "TILE_ITM": "intermediate"}
    for name, m in _kernels(corpus).items():
        p = load_program(corpus / "m1-kernels" / m["file"], meta=False)  # from the TDs alone
        derived = {s: b.role for s, b in p.bars.items() if b.role != "kernel"}
        assert derived == {int(s): roles[t] for s, t in m["types"].items()}, name
        for s in m["types"]:
            if m["types"][s] in ("TILE_DST", "TILE_ITM"):
                assert p.bars[int(s)].size == m["tiles"][s] * 0x4000, (name, s)
        with_meta = load_program(corpus / "m1-kernels" / m["file"])
        assert {s: b.role for s, b in with_meta.bars.items() if s != 1} == derived


def test_every_hwx_loads_by_its_sections(corpus):
    files = sorted((corpus / "m1-hwx").glob("*.hwx"))
    assert [f.stem for f in files] == ["concat", "conv", "gemm", "model", "relu", "sigmoid", "sum"]
    for f in files:
        data = f.read_bytes()
        hwx = parse_hwx(data)
        assert hwx.magic == 0xBEEFFACE and hwx.cputype == 128
        text, const = hwx.section("__TEXT", "__text"), hwx.section("__TEXT", "__const")
        p = load_program(f)
        assert p.td_base == text.offset == 0x4000  # README: the first TD at 0x4000
        assert p.kernel == const.data
        assert len(p.tds) == (2 if f.stem == "concat" else 1) == hwx.td_info()[2]
        for td, off in zip(p.tds, p.offsets):
            raw = data[text.offset + off : text.offset + off + TD_SIZE]
            assert TaskDescriptor.from_bytes(raw).to_bytes() == raw == td.to_bytes()
        assert p.bars[0].role == "td" and p.bars[1].role == "kernel"
        names = {b.name for b in p.bars.values() if b.name}
        assert names == {t["name"] for t in hwx.tensors()}
        for b in p.bars.values():
            if b.name:
                assert b.role == ("output" if "@output" in b.name else "input")
    relu = load_program(corpus / "m1-hwx" / "relu.hwx")
    assert (relu.bars[5].name, relu.bars[4].name) == ("image", "probs@output")
    assert len(load_program(corpus / "m1-hwx" / "gemm.hwx").kernel) == 0x80000


def test_seed_loads_as_a_raw_td(corpus):
    p = load_program(corpus / "seed-conv1x1.td")
    assert len(p.tds) == 1 and p.kernel == b"" and p.td_stream == (corpus / "seed-conv1x1.td").read_bytes()
    assert {s: b.role for s, b in p.bars.items()} == {0: "td", 1: "kernel", 4: "input", 5: "output"}


def test_corpus_hwx_with_broken_pieces(corpus, tmp_path):
    good = (corpus / "m1-hwx" / "relu.hwx").read_bytes()
    with pytest.raises(HwxError, match="bad magic"):
        load_hwx(b"\xfe\xed\xfa\xce" + good[4:])
    broken = tmp_path / "broken.hwx"  # an .hwx suffix means: parse as Mach-O
    broken.write_bytes(b"\0\0\0\0" + good[4:])
    with pytest.raises(HwxError, match="bad magic 0x00000000"):
        load_program(broken)
    seg = next(
        off
        for cmd, off, _ in parse_hwx(good).commands
        if cmd == 0x19 and good[off + 8 : off + 14] == b"__TEXT"
    )
    text_off = seg + 72 + 48  # __TEXT's first section: its file offset
    assert struct.unpack_from("<I", good, text_off)[0] == 0x4000
    with pytest.raises(HwxError, match="out of the file"):
        load_program_bytes(_patch(good, text_off, "<I", len(good)))
    with pytest.raises(TDError, match="points outside"):
        td = TaskDescriptor.from_bytes(good, 0x4000)
        td.update({"Header.EON": 0, "Header.NextSize": 0x9C, "Header.NextPointer": 0x300})
        load_program_bytes(good[:0x4000] + td.to_bytes() + good[0x4000 + TD_SIZE :])
