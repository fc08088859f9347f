"""The ``.hwx`` container: Apple's ANE compiler output, a Mach-O file.

Layout (read from the corpus files; see docs/td.md): a 32-byte ``mach_header_64`` with magic
0xbeefface (cputype 128 = ANE, cpusubtype 4 = H13), then load commands: ``LC_SEGMENT_64``
(``__TEXT,__text`` = the TD stream, ``__TEXT,__const`` = kernels/coefficients, one
``__FVMLIB`` segment per input/output tensor, not backed by file bytes), ``LC_LOADFVMLIB``
(tensor names), ``LC_THREAD`` (flavor 1: the 32-slot BAR table and the TD address/size/count;
flavor 3: one tensor descriptor each), ``LC_IDENT`` (compiler version and options) and
``LC_SYMTAB``.  Everything is located through those commands; no offset is assumed.  This
module parses the container only; :func:`fastane.td.program.load_hwx` makes it a Program.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import TDError

MAGICS = {0xBEEFFACE: "ANE hwx", 0xFEEDFACF: "Mach-O 64"}
LC_SYMTAB, LC_THREAD, LC_LOADFVMLIB, LC_IDENT, LC_SEGMENT_64 = 0x2, 0x4, 0x6, 0x8, 0x19
_HEADER = struct.Struct("<8I")  # magic cputype cpusubtype filetype ncmds sizeofcmds flags reserved
_SEGMENT = struct.Struct("<16s4Q4I")  # segname vmaddr vmsize fileoff filesize maxprot initprot nsects flags
_SECTION = struct.Struct(
    "<16s16s2Q8I"
)  # sectname segname addr size offset align reloff nreloc flags r1 r2 r3
_NLIST = struct.Struct("<IBBhQ")  # strx type sect desc value


class HwxError(TDError):
    """The .hwx container is malformed (bad magic, load commands, sections out of the file...)."""


@dataclass
class Section:
    """A Mach-O section; ``data`` is None when it has no bytes in the file (``__FVMLIB``)."""

    segname: str
    sectname: str
    addr: int
    size: int
    offset: int
    flags: int
    data: bytes | None = None

    def __contains__(self, addr: int) -> bool:
        return self.addr <= addr < self.addr + max(self.size, 1)


@dataclass
class Segment:
    """A Mach-O segment (``LC_SEGMENT_64``) and its sections."""

    name: str
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    initprot: int
    sections: list[Section] = field(default_factory=list)


@dataclass
class Hwx:
    """A parsed .hwx file."""

    magic: int
    cputype: int
    cpusubtype: int
    filetype: int
    commands: list[tuple[int, int, int]]  # (cmd, file offset, cmdsize)
    segments: list[Segment]
    symbols: dict[str, int]  # defined symbol -> address
    fvmlibs: dict[int, str]  # segment address -> tensor name
    threads: list[tuple[int, tuple[int, ...], bytes]]  # (flavor, state words, whole command)
    ident: str = ""

    def sections(self) -> list[Section]:
        """Every section, in load-command order."""
        return [s for seg in self.segments for s in seg.sections]

    def section(self, segname: str, sectname: str) -> Section | None:
        """The section ``segname,sectname`` (the first one when repeated), or None."""
        return next((s for s in self.sections() if (s.segname, s.sectname) == (segname, sectname)), None)

    def section_at(self, addr: int) -> Section | None:
        """The section containing address ``addr``."""
        return next((s for s in self.sections() if addr in s), None)

    def bar_table(self) -> dict[int, int]:
        """Slot -> address from the flavor-1 thread state (32 u64 BAR addresses); {} if absent."""
        for flavor, w, _ in self.threads:
            if flavor == 1 and len(w) >= 64:
                return {i: w[2 * i] | w[2 * i + 1] << 32 for i in range(32) if w[2 * i] | w[2 * i + 1]}
        return {}

    def td_info(self) -> tuple[int, int, int] | None:
        """``(TD stream address, words per TD - 1, TD count)`` from the flavor-1 thread state."""
        for flavor, w, _ in self.threads:
            if flavor == 1 and len(w) >= 516:
                return w[512] | w[513] << 32, w[514], w[515]
        return None

    def tensors(self) -> list[dict]:
        """The flavor-3 thread states: one descriptor per input/output tensor (observed layout).

        ``kind`` 1 = input, 2 = output; ``dtype`` the compiler's type code (5 = float16);
        ``shape`` (N, C, H, W); ``size``, ``row_stride``, ``plane_stride`` in bytes.
        """
        out = []
        for flavor, w, body in self.threads:
            if flavor != 3 or len(w) < 23:
                continue
            name = _cstr(body[w[4] :]) if 16 <= w[4] < len(body) else None
            out.append(
                {
                    "name": name,
                    "kind": w[1],
                    "dtype": w[5],
                    "shape": tuple(w[6:10]),
                    "size": w[16],
                    "row_stride": w[18],
                    "plane_stride": w[20],
                    "elem_bytes": w[22],
                }
            )
        return out

    def name_of(self, addr: int) -> str | None:
        """The tensor name at ``addr`` (from ``LC_LOADFVMLIB`` or the symbol table)."""
        if addr in self.fvmlibs:
            return self.fvmlibs[addr]
        return next((n for n, v in self.symbols.items() if v == addr), None)


def is_hwx(data) -> bool:
    """True when ``data`` starts with an .hwx / 64-bit Mach-O magic."""
    return len(data) >= 4 and struct.unpack_from("<I", data)[0] in MAGICS


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_hwx(data) -> Hwx:
    """Parse the Mach-O structure of an .hwx file; :class:`HwxError` says what is wrong."""
    data = bytes(data)
    n = len(data)
    if n < _HEADER.size:
        raise HwxError(f"truncated Mach-O header: {n} bytes, need {_HEADER.size}")
    magic, cpu, sub, ftype, ncmds, sizeofcmds, _flags, _ = _HEADER.unpack_from(data)
    if magic not in MAGICS:
        raise HwxError(f"bad magic {magic:#010x} at offset 0 (expected 0xbeefface, ANE hwx)")
    end = _HEADER.size + sizeofcmds
    if end > n:
        raise HwxError(f"load commands claim {sizeofcmds:#x} bytes, past the end of the file ({n:#x} bytes)")
    hwx = Hwx(magic, cpu, sub, ftype, [], [], {}, {}, [])
    off = _HEADER.size
    for i in range(ncmds):
        if off + 8 > end:
            raise HwxError(
                f"load command #{i} at {off:#x}: header runs past the load commands "
                f"(end {end:#x}; ncmds {ncmds})"
            )
        cmd, size = struct.unpack_from("<2I", data, off)
        if size < 8 or size % 4 or off + size > end:
            raise HwxError(
                f"load command #{i} ({cmd:#x}) at {off:#x}: bad cmdsize {size:#x} "
                f"(load commands end at {end:#x})"
            )
        hwx.commands.append((cmd, off, size))
        body = data[off : off + size]
        try:
            _command(hwx, cmd, body, off, data)
        except struct.error:
            raise HwxError(
                f"load command #{i} ({cmd:#x}) at {off:#x}: cmdsize {size:#x} is too small for its contents"
            ) from None
        off += size
    return hwx


def _command(hwx: Hwx, cmd: int, body: bytes, off: int, data: bytes) -> None:
    n = len(data)
    if cmd == LC_SEGMENT_64:
        name, vmaddr, vmsize, fileoff, filesize, _maxp, initp, nsects, _fl = _SEGMENT.unpack_from(body, 8)
        if 8 + _SEGMENT.size + nsects * _SECTION.size > len(body):
            raise HwxError(
                f"segment {_cstr(name)} at {off:#x}: {nsects} sections do not fit its cmdsize {len(body):#x}"
            )
        if filesize and fileoff + filesize > n:
            raise HwxError(
                f"segment {_cstr(name)}: file range {fileoff:#x}+{filesize:#x} is out of "
                f"the file ({n:#x} bytes)"
            )
        seg = Segment(_cstr(name), vmaddr, vmsize, fileoff, filesize, initp)
        for k in range(nsects):
            sect, segn, addr, size, offset, *_r, flags, _r1, _r2, _r3 = _SECTION.unpack_from(
                body, 8 + _SEGMENT.size + k * _SECTION.size
            )
            s = Section(_cstr(segn), _cstr(sect), addr, size, offset, flags)
            if filesize:  # file-backed: the section's bytes must be inside the file
                if offset + size > n or offset < fileoff or offset + size > fileoff + filesize:
                    raise HwxError(
                        f"section {s.segname},{s.sectname}: file range {offset:#x}+{size:#x} "
                        f"is out of the file ({n:#x} bytes) or of its segment"
                    )
                s.data = data[offset : offset + size]
            seg.sections.append(s)
        hwx.segments.append(seg)
    elif cmd == LC_LOADFVMLIB:
        name_off, _minor, header_addr = struct.unpack_from("<3I", body, 8)
        if not 12 <= name_off < len(body):
            raise HwxError(f"LC_LOADFVMLIB at {off:#x}: name offset {name_off:#x} is out of the command")
        hwx.fvmlibs[header_addr] = _cstr(body[name_off:])
    elif cmd == LC_THREAD:  # one flavor/count/state, then a pool of strings the state points into
        flavor, count = struct.unpack_from("<2I", body, 8)
        if 16 + 4 * count > len(body):
            raise HwxError(
                f"LC_THREAD at {off:#x}: flavor {flavor} state of {count} words runs past "
                f"its cmdsize {len(body):#x}"
            )
        hwx.threads.append((flavor, struct.unpack_from(f"<{count}I", body, 16), body))
    elif cmd == LC_IDENT:
        hwx.ident = _cstr(body[8:]).strip()
    elif cmd == LC_SYMTAB:
        symoff, nsyms, stroff, strsize = struct.unpack_from("<4I", body, 8)
        if symoff + nsyms * _NLIST.size > n or stroff + strsize > n:
            raise HwxError(
                f"LC_SYMTAB at {off:#x}: symbols ({symoff:#x}, {nsyms}) or strings "
                f"({stroff:#x}+{strsize:#x}) are out of the file ({n:#x} bytes)"
            )
        for k in range(nsyms):
            strx, typ, _sect, _desc, value = _NLIST.unpack_from(data, symoff + k * _NLIST.size)
            if strx >= strsize:
                raise HwxError(f"symbol #{k}: string index {strx:#x} past the string table ({strsize:#x})")
            if typ & 0x0E == 0x0E and not typ & 0xE0:  # N_SECT, not a debugging (stab) entry
                hwx.symbols[_cstr(data[stroff + strx : stroff + strsize])] = value
