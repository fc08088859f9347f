"""The disassembler, Apple's own printout through assemble -> disassemble, and conv_td."""

import json
import re

import pytest

from fastane.cli import main
from fastane.td import TD_FIELDS, FieldOverflowError, Program, TaskDescriptor, conv_td, load_program
from fastane.td.disasm import listing, to_json

GEOMETRY = (
    "Common.InDim.",
    "Common.OutDim.",
    "Common.Cin.",
    "Common.Cout.",
    "Common.ChCfg.",
    "Common.ConvCfg.K",
    "Common.ConvCfg.S",
    "Common.GroupConvCfg.NumGroups",
    "TileDMASrc.RowStride",
    "TileDMASrc.PlaneStride",
    "TileDMASrc.DepthStride",
    "TileDMASrc.GroupStride",
    "TileDMASrc.Fmt.MemFmt",
    "TileDMADst.RowStride",
    "TileDMADst.PlaneStride",
    "TileDMADst.DepthStride",
    "TileDMADst.GroupStride",
    "TileDMADst.Fmt.MemFmt",
    "L2.SourceChannelStride",
    "L2.SourceRowStride",
    "L2.ConvResultChannelStride",
    "L2.ConvResultRowStride",
    "L2.ResultBase",
    "NE.KernelCfg.KernelFmt",
)


def parse_apple_printout(text):
    """``{canonical name: value}`` from a ZinIrRegBitPrintOutDebug listing."""
    out = {}
    for m in re.finditer(r"^ane(?:TD|Regs)\.(\S+)\s*=\s*(\d+)", text, re.M):
        out[re.sub(r"^Header\[\d+\]\.", "Header.", m.group(1))] = int(m.group(2))
    return out


def cli(capsys, *argv):
    rc = main(["disasm", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------- listing and JSON


def test_listing_decodes_known_meanings():
    p = Program.from_tds([conv_td((1, 8, 4, 1), (1, 3, 4, 1), nonlinear="relu", post_scale=0.5)])
    text = listing(p)
    for piece in (
        "+124 3c000000  Common        .packet 16 words -> register 0x0",
        "ChCfg.InFmt=2 (Float16)",
        "PostScale.PostScale=0x3800 (0.5)",
        "MACCfg.NonlinearMode=1 (ReLU)",
        "RowStride.Stride=1 (x64 = 0x40 B)",
        "PlaneStride.PlaneStride=4 (x64 = 0x100 B)",
        "ResultBase.Addr=32 (x16 = 0x200 B)",
        "LogEvents=0x42a",
        "?bits=0x2041",
        "TD 0 at 0x0000  [EON]",
    ):
        assert piece in text, piece


def test_json_has_every_field_of_every_td():
    p = Program.from_tds([conv_td((1, 8, 4, 1), (1, 3, 4, 1)), conv_td((1, 3, 4, 1), (1, 3, 4, 1))])
    doc = json.loads(json.dumps(to_json(p)))
    assert [t["offset"] for t in doc["tds"]] == [0, 0x300]
    for t, td in zip(doc["tds"], p.tds):
        assert list(t["fields"]) == [f.name for f in TD_FIELDS]
        assert t["fields"] == td.fields()


def test_cli_disasm_text_json_and_errors(tmp_path, capsys):
    f = tmp_path / "conv.td"
    f.write_bytes(conv_td((1, 8, 4, 1), (1, 3, 4, 1)).to_bytes())
    rc, out, _ = cli(capsys, f)
    assert rc == 0 and "Common.Cin" not in out and "Cin.Cin=8" in out
    rc, out, _ = cli(capsys, "--json", f)
    doc = json.loads(out)
    assert rc == 0 and doc["tds"][0]["fields"]["Common.Cin.Cin"] == 8
    assert doc["tds"][0]["fields"]["Header.NID"] == 0  # zeros included
    bad = tmp_path / "bad.td"
    bad.write_bytes(f.read_bytes()[:0x100])
    rc, out, err = cli(capsys, bad)
    assert rc == 1 and "truncated" in err and out == ""
    rc, _, err = cli(capsys, tmp_path / "missing.hwx")
    assert rc == 1 and "No such file" in err


# ---------------------------------------------------------------- Apple's printout


def test_apple_printout_survives_assemble_disassemble(corpus, tmp_path, capsys):
    values = parse_apple_printout((corpus / "m1-hwx" / "relu-td.decoded.txt").read_text())
    spare = {k: v for k, v in values.items() if ".Spare" in k}
    known = {k: v for k, v in values.items() if k not in spare}
    assert len(known) == 180 and set(spare.values()) == {0}
    assert known["Header.LogEvents"] == 1058 and known["Common.InDim.Win"] == 77
    td = TaskDescriptor.build(known)  # assemble
    f = tmp_path / "apple.td"
    f.write_bytes(td.to_bytes())
    rc, out, _ = cli(capsys, "--json", f)  # disassemble
    fields = json.loads(out)["tds"][0]["fields"]
    assert rc == 0 and {k: fields[k] for k in known} == known
    assert all(v == 0 for k, v in fields.items() if k not in known)


def test_relu_hwx_agrees_with_the_printout_on_geometry(corpus):
    values = parse_apple_printout((corpus / "m1-hwx" / "relu-td.decoded.txt").read_text())
    td = load_program(corpus / "m1-hwx" / "relu.hwx").tds[0]
    geometry = {k: v for k, v in values.items() if k.startswith(GEOMETRY)}
    assert len(geometry) >= 25
    assert {k: td[k] for k in geometry} == geometry


def test_every_corpus_program_disassembles(corpus, capsys):
    files = sorted((corpus / "m1-kernels").glob("*/*.bin")) + sorted((corpus / "m1-hwx").glob("*.hwx"))
    files.append(corpus / "seed-conv1x1.td")
    assert len(files) == 36 + 7 + 1
    for f in files:
        rc, out, _ = cli(capsys, f)
        assert rc == 0 and out.count("\nTD ") == len(load_program(f).tds)
        rc, out, _ = cli(capsys, "--json", f)
        assert rc == 0 and len(json.loads(out)["tds"]) == len(load_program(f).tds)


# ---------------------------------------------------------------- assembler: conv_td


def test_conv_td_reproduces_the_seed_byte_for_byte(corpus):
    seed = (corpus / "seed-conv1x1.td").read_bytes()
    td = conv_td(
        (1, 8, 4, 1),
        (1, 3, 4, 1),
        kernel=(1, 1),
        stride=(1, 1),
        src=4,
        dst=5,
        kernel_slot=1,
        in_fmt="fp16",
        out_fmt="fp16",
        kernel_fmt="fp16",
    )
    assert td.to_bytes() == seed


def test_conv_td_agrees_with_apples_conv_and_gemm(corpus):
    """Where the description decides, conv_td matches Apple's compiled conv (3->3) and gemm
    (512x512 as a 1x1 conv): dims, DMA strides, the per-core kernel DMA layout."""
    same = (
        "Common.InDim.",
        "Common.OutDim.",
        "Common.Cin.",
        "Common.Cout.",
        "Common.ChCfg.",
        "Common.ConvCfg.K",
        "Common.ConvCfg.S",
        "Common.GroupConvCfg.NumGroups",
        "Common.Cfg.ActiveNE",
        "Header.ENE",
        "Header.RBase",
        "Header.WBase",
        "Header.KBase",
        "TileDMASrc.RowStride",
        "TileDMASrc.PlaneStride",
        "TileDMASrc.DepthStride",
        "TileDMASrc.Fmt.",
        "TileDMADst.RowStride",
        "TileDMADst.PlaneStride",
        "TileDMADst.DepthStride",
        "TileDMADst.Fmt.",
        "KernelDMASrc.",
        "NE.",
    )
    for name, c in (("conv", 3), ("gemm", 512)):
        apple = load_program(corpus / "m1-hwx" / f"{name}.hwx").tds[0]
        mine = conv_td((1, c, 1, 1), (1, c, 1, 1), src=5, dst=4)
        diff = [d for d in mine.diff(apple) if d[0].startswith(same)]
        assert diff == [], name


def test_conv_td_strides_follow_spec5():
    td = conv_td((1, 3, 5, 33), (1, 4, 2, 16), kernel=(3, 3), stride=(2, 2))
    row, plane = 128, 640  # round_up(33*2, 64), round_up(128*5, 64)
    assert td["TileDMASrc.RowStride.Stride"] << 6 == row
    assert td["TileDMASrc.PlaneStride.PlaneStride"] << 6 == plane
    assert td["TileDMASrc.DepthStride.Stride"] << 6 == 3 * plane
    assert td["TileDMADst.RowStride.RowStride"] << 6 == 64  # 16*2 -> 64
    assert td["TileDMADst.PlaneStride.PlaneStride"] << 6 == 128
    assert (td["Common.ConvCfg.Kh"], td["Common.ConvCfg.Sy"], td["Common.OutDim.Hout"]) == (3, 2, 2)
    i8 = conv_td((1, 3, 5, 33), (1, 4, 5, 33), in_fmt="int8", out_fmt="uint8")
    assert (i8["Common.ChCfg.InFmt"], i8["Common.ChCfg.OutFmt"]) == (1, 0)
    assert i8["TileDMASrc.RowStride.Stride"] == 1 and i8["TileDMADst.RowStride.RowStride"] == 1


@pytest.mark.parametrize(
    "kw",
    [
        dict(x_shape=(2, 8, 4, 1), y_shape=(2, 3, 4, 1)),
        dict(x_shape=(1, 8, 4, 1), y_shape=(1, 3, 3, 1)),
        dict(x_shape=(1, 8, 4, 1), y_shape=(1, 3, 4, 1), in_fmt="fp32"),
        dict(x_shape=(1, 8, 4, 1), y_shape=(1, 3, 4, 1), groups=3),
        dict(x_shape=(1, 8, 4, 1), y_shape=(1, 3, 4, 1), nonlinear="tanh"),
        dict(x_shape=(1, 8, 4, 1), y_shape=(1, 3, 4, 1), post_scale=1e6),
    ],
)
def test_conv_td_rejects_bad_descriptions(kw):
    with pytest.raises(ValueError):
        conv_td(**kw)


def test_conv_td_field_overflow():
    with pytest.raises(FieldOverflowError, match="Common.Cin.Cin"):
        conv_td((1, 1 << 17, 1, 1), (1, 1, 1, 1))
