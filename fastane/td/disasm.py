"""``fastane disasm FILE``: an annotated listing of every TD of a program.

One line per nonzero word: offset in the TD, raw word, section, and ``field=value`` for each
nonzero field in it, decoded where the meaning is known (formats, fp16 scales, byte sizes of
strides and DMA addresses).  ``--json`` prints ``{"tds": [{"offset", "fields"}]}`` with every
field of every TD, zeros included.
"""

from __future__ import annotations

import json
import os
import struct
import sys

from ..errors import TDError
from .codec import LAYOUT, TaskDescriptor
from .fields import TD_FIELDS, TD_WORDS, Field

FORMATS = {0: "UInt8", 1: "Int8", 2: "Float16"}
NONLINEAR = {0: "identity", 1: "ReLU", 2: "LUT"}
_FMT = {"InFmt", "OutFmt", "KernelFmt", "MemFmt"}
_FP16 = {"PostScale", "AccBias", "MatrixVectorBias"}
_SIZES = {"Addr", "Stride", "RowStride", "PlaneStride", "DepthStride", "GroupStride", "MemBfrSize"}
_HEX = {"LogEvents", "Exceptions", "DebugLogEvents", "DebugExceptions", "NextPointer", "Word"}

# per word: its section, its fields, and the bits no field names
_SECTION_OF = [next(s for s, off, _, n in reversed(LAYOUT) if off <= 4 * w) for w in range(TD_WORDS)]
_FIELDS_OF: list[list[Field]] = [[] for _ in range(TD_WORDS)]
_COVERED = [0] * TD_WORDS
for _f in TD_FIELDS:
    _FIELDS_OF[_f.word].append(_f)
    _COVERED[_f.word] |= _f.mask << _f.shift
_HEADERS = {off // 4: n for _, off, hdr, n in LAYOUT if hdr is not None}


def fp16(bits: int) -> float:
    """The float value of fp16 ``bits``."""
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def describe(f: Field, v: int) -> str:
    """``value`` of field ``f`` as text, decoded where its meaning is known."""
    if f.field in _FMT:
        return f"{v} ({FORMATS.get(v, '?')})"
    if f.field in _FP16:
        return f"{v:#06x} ({fp16(v):g})"
    if f.field == "NonlinearMode":
        return f"{v} ({NONLINEAR.get(v, '?')})"
    if f.field in _SIZES and f.bit:  # stored from bit 6 (x64) or bit 4 (x16, L2) upward
        return f"{v} (x{1 << f.bit} = {v << f.bit:#x} B)"
    if f.section == "Planar":
        if f.register in ("Word[1]", "Word[2]"):
            return f"{v:#010x} (fp16 {fp16(v >> 16):g}, {fp16(v):g})"
        if f.register == "Word[3]":
            return f"{v:#010x} (fp32 {struct.unpack('<f', struct.pack('<I', v))[0]:g})"
    if f.field in _HEX or v > 0xFFFF:
        return f"{v:#x}"
    return str(v)


def _rel(f: Field) -> str:
    return f.name[len(f.section) + 1 :]


def listing_td(td: TaskDescriptor, index: int = 0, offset: int = 0) -> list[str]:
    """The annotated lines of one TD (``offset``: where it sits in its file)."""
    flags = [k for k in ("EON", "TBE") if td[f"Header.{k}"]]
    nxt = td["Header.NextPointer"]
    head = f"TD {index} at {offset:#06x}" + (f", next at stream +{nxt:#x}" if not td["Header.EON"] else "")
    lines = [head + (f"  [{' '.join(flags)}]" if flags else "")]
    for w, word in enumerate(td.words):
        if w in _HEADERS:
            lines.append(
                f"  +{4 * w:03x} {word:08x}  {_SECTION_OF[w]:<12s}  "
                f".packet {_HEADERS[w]} words -> register {word & 0x03FFFFFC:#x}"
            )
            continue
        if not word:
            continue
        parts = [
            f"{_rel(f)}={describe(f, (word >> f.shift) & f.mask)}"
            for f in _FIELDS_OF[w]
            if (word >> f.shift) & f.mask
        ]
        extra = word & ~_COVERED[w] & 0xFFFFFFFF
        if extra:
            parts.append(f"?bits={extra:#x}")
        lines.append(f"  +{4 * w:03x} {word:08x}  {_SECTION_OF[w]:<12s}  {' '.join(parts)}")
    return lines


def listing(program) -> str:
    """The whole program's listing: a summary, the BAR plan, then every TD."""
    out = [
        f"; {program.source or program.name}: {len(program.tds)} TD(s), "
        f"TD stream at file offset {program.td_base:#x}, kernel {len(program.kernel):#x} bytes"
    ]
    if program.bars:
        out.append(
            "; BAR slots: "
            + ", ".join(
                f"{b.slot}={b.role}"
                + (f" {b.name!r}" if b.name else "")
                + (f" ({b.size:#x} B)" if b.size is not None else "")
                for b in program.bars.values()
            )
        )
    for note in program.meta.get("notes", ()):
        out.append(f"; note: {note}")
    for i, (td, off) in enumerate(zip(program.tds, program.offsets)):
        out.append("")
        out += listing_td(td, i, program.td_base + off)
    return "\n".join(out)


def to_json(program) -> dict:
    """``{"tds": [{"offset": file offset, "fields": {name: value}}]}``, every field of every TD."""
    return {
        "tds": [
            {"offset": program.td_base + off, "fields": td.fields()}
            for td, off in zip(program.tds, program.offsets)
        ]
    }


def add_arguments(parser) -> None:
    """Arguments of ``fastane disasm``."""
    parser.add_argument("file", help="an .hwx file, a corpus .bin kernel or a raw TD file")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"tds": [{"offset", "fields"}]} with every field of every TD',
    )
    parser.add_argument(
        "--no-meta", action="store_true", help="ignore a kernels.json found beside a .bin file"
    )


def run(args) -> int:
    """Disassemble ``args.file``; returns the exit status (1 on a malformed or unreadable file)."""
    from .program import load_program

    try:
        program = load_program(args.file, meta=False if getattr(args, "no_meta", False) else None)
    except (TDError, OSError) as e:
        print(f"fastane disasm: error: {e}", file=sys.stderr)
        return 1
    try:
        print(json.dumps(to_json(program), indent=1) if args.json else listing(program))
    except BrokenPipeError:  # `fastane disasm x.hwx | head`: stop quietly
        sys.stdout = open(os.devnull, "w")
    return 0
