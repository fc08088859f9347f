"""Programs: a chain of TDs, its kernel/coefficient bytes and a BAR-slot plan.

A TD stream holds TDs 0x300 bytes apart; each TD names its successor with
``Header.NextPointer`` (byte offset from the start of the stream, i.e. from the BAR slot
``Header.TBase``) and ``Header.NextSize`` (its size in words - 1, 0x9c on the M1); the last TD
sets ``Header.EON``.  Tasks never hold absolute addresses: they name BAR slots (``RBase0/1``
sources, ``WBase`` destination, ``KBase0..3`` kernels) and the :class:`Program` says which slot
is what (:class:`BarSlot`).

Loaders: :func:`load_program` reads a corpus ``.bin`` kernel (TD stream, then the kernel region
at ``round_up(tsk_size, 0x80)``; ``kernels.json`` metadata beside it is used when found), a
``.hwx`` Mach-O (:mod:`fastane.td.hwx`) or a raw TD file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping, Sequence

from ..errors import TDError
from ..m1 import FORMATS, TILE, round_up
from .codec import TaskDescriptor
from .hwx import HwxError, is_hwx, parse_hwx
from .fields import TD_SIZE, TD_STRIDE, TD_WORDS

KERNEL_ALIGN = 0x80  # the kernel region of a corpus .bin starts at round_up(tsk_size, 0x80)
ROLES = ("td", "kernel", "input", "output", "intermediate")
_TILE_TYPES = {"TILE_CMD": "td", "TILE_SRC": "input", "TILE_DST": "output", "TILE_ITM": "intermediate"}


@dataclass(frozen=True)
class BarSlot:
    """One BAR slot of a program: ``role`` is one of :data:`ROLES`; ``size`` the bytes it must
    provide (None when unknown); ``name`` the tensor's name where the container gives one."""

    slot: int
    role: str
    size: int | None = None
    name: str | None = None


@dataclass
class Program:
    """A chain of TDs plus its kernel bytes and BAR plan.

    ``tds[i]`` sits at byte ``offsets[i]`` of ``td_stream`` (the bytes BAR slot 0 serves);
    ``td_base`` is where that stream starts in the source file; ``kernel`` is the
    kernel/coefficient region (BAR slot 1 by convention); ``bars`` maps slot -> :class:`BarSlot`;
    ``meta`` keeps what the container said (kernels.json entry, .hwx symbols, ...).
    """

    tds: list[TaskDescriptor]
    offsets: list[int]
    td_stream: bytes
    kernel: bytes = b""
    bars: dict[int, BarSlot] = field(default_factory=dict)
    name: str = ""
    source: str | None = None
    td_base: int = 0
    meta: dict = field(default_factory=dict)

    def slots(self, role: str) -> list[BarSlot]:
        """The BAR slots with ``role`` (see :data:`ROLES`), by slot number."""
        return [b for _, b in sorted(self.bars.items()) if b.role == role]

    @property
    def inputs(self) -> list[BarSlot]:
        """Input slots."""
        return self.slots("input")

    @property
    def outputs(self) -> list[BarSlot]:
        """Output slots."""
        return self.slots("output")

    @property
    def intermediates(self) -> list[BarSlot]:
        """Intermediate slots (written by one task, read by a later one)."""
        return self.slots("intermediate")

    def __len__(self) -> int:
        return len(self.tds)

    def __iter__(self):
        return iter(self.tds)

    def to_bytes(self) -> bytes:
        """The corpus ``.bin`` layout: TD stream, zero padding to 0x80, kernel region."""
        stream = self.td_stream
        if not self.kernel:
            return bytes(stream)
        return bytes(stream) + bytes(round_up(len(stream), KERNEL_ALIGN) - len(stream)) + self.kernel

    @classmethod
    def from_tds(
        cls,
        tds: Sequence[TaskDescriptor],
        kernel: bytes = b"",
        bars: Mapping[int, BarSlot | None] | None = None,
        name: str = "",
        copy: bool = True,
    ) -> "Program":
        """Chain ``tds`` into a program: 0x300 apart, NextPointer/NextSize/TBE set, EON on the last.

        The TDs are copied (unless ``copy=False``: then they are chained in place); the BAR
        plan is derived from them when not given, and a slot ``bars`` maps to None is the
        TD stream's own slot (its size filled in).
        """
        if not tds:
            raise TDError("a program needs at least one TD")
        tds = [td.copy() for td in tds] if copy else list(tds)
        for i, td in enumerate(tds):
            last = i == len(tds) - 1
            td.update(
                {
                    "Header.NextPointer": 0 if last else TD_STRIDE * (i + 1),
                    "Header.NextSize": 0 if last else TD_WORDS - 1,
                    "Header.TBE": 0 if last else 1,
                    "Header.EON": int(last),
                }
            )
        offsets = [TD_STRIDE * i for i in range(len(tds))]
        stream = bytearray(offsets[-1] + TD_SIZE)
        for off, td in zip(offsets, tds):
            stream[off : off + TD_SIZE] = td.to_bytes()
        if bars is None:
            bars = plan_bars(tds, len(stream), len(kernel))
        else:
            bars = {s: b if b is not None else BarSlot(s, "td", len(stream), "tds") for s, b in bars.items()}
        return cls(tds, offsets, bytes(stream), bytes(kernel), bars, name)


# ---------------------------------------------------------------- chains and BAR plans


def parse_chain(stream, base: int = 0) -> tuple[list[TaskDescriptor], list[int]]:
    """Follow the TD chain of ``stream`` from its first TD: ``(tds, offsets)``.

    The chain ends at a TD with ``EON`` set (or with ``NextSize`` 0: no successor to load).
    Raises :class:`TDError` when a TD is malformed or truncated, or a NextPointer leaves the
    stream, is not word aligned, or loops.  ``base`` (the stream's offset in its file) only
    shifts the offsets quoted in messages.
    """
    stream = memoryview(stream).cast("B")
    tds, offsets, off = [], [], 0
    while True:
        if off + TD_SIZE > len(stream):
            raise TDError(
                f"truncated TD stream: TD {len(tds)} at {base + off:#x} needs {TD_SIZE:#x} "
                f"bytes, the stream has {max(len(stream) - off, 0):#x} there"
            )
        td = TaskDescriptor.from_bytes(stream, off)
        tds.append(td)
        offsets.append(off)
        if td["Header.EON"] or td["Header.NextSize"] == 0:
            return tds, offsets
        nxt, size = td["Header.NextPointer"], td["Header.NextSize"]
        where = f"TD {len(tds) - 1} at {base + off:#x}"
        if size != TD_WORDS - 1:
            raise TDError(f"{where}: NextSize {size:#x} is not an M1 TD ({TD_WORDS - 1:#x} = words - 1)")
        if nxt % 4 or nxt + TD_SIZE > len(stream):
            raise TDError(
                f"{where}: NextPointer {nxt:#x} points outside the program's TD stream "
                f"({len(stream):#x} bytes; a TD needs {TD_SIZE:#x})"
            )
        if nxt in offsets:
            raise TDError(f"{where}: NextPointer {nxt:#x} loops back to TD {offsets.index(nxt)}")
        off = nxt


_DMA_STRIDES = {
    "TileDMASrc": ("RowStride.Stride", "PlaneStride.PlaneStride", "DepthStride.Stride"),
    "TileDMADst": ("RowStride.RowStride", "PlaneStride.PlaneStride", "DepthStride.DepthStride"),
}


def _extent(td: TaskDescriptor, dma: str, c: int, h: int, w: int, fmt: int) -> int:
    """Bytes a TileDMA engine spans in its slot: base + the largest of its strides x counts."""
    row, plane, depth = (td[f"{dma}.{k}"] << 6 for k in _DMA_STRIDES[dma])
    return (td[f"{dma}.BaseAddr.Addr"] << 6) + max(depth, plane * c, row * h, w * FORMATS.get(fmt, 2))


def plan_bars(tds: Sequence[TaskDescriptor], td_size: int, kernel_size: int) -> dict[int, BarSlot]:
    """Derive a BAR plan from what the TDs do with their slots.

    Slot ``TBase`` (0) serves the TD stream, ``KBase0..3`` kernels; a slot some task writes
    (``WBase``) and a later task reads (``RBase0/1``) is an intermediate; written only: an output;
    read only: an input.  Sizes are the TileDMA extents rounded up to whole 0x4000-byte tiles.
    """
    td_slot = next((td["Header.TBase"] for td in tds if td["Header.TBE"]), 0)
    bars = {td_slot: BarSlot(td_slot, "td", td_size)}
    reads: dict[int, int] = {}
    writes: dict[int, int] = {}  # slot -> bytes
    kernels: set[int] = set()
    written_before: set[int] = set()
    intermediate: set[int] = set()
    for td in tds:
        for k in range(4):
            if td[f"Header.KBE{k}"]:
                kernels.add(td[f"Header.KBase{k}"])
        src = _extent(
            td,
            "TileDMASrc",
            td["Common.Cin.Cin"],
            td["Common.InDim.Hin"],
            td["Common.InDim.Win"],
            td["TileDMASrc.Fmt.MemFmt"],
        )
        for r in ("0", "1"):
            if td[f"Header.RBE{r}"]:
                slot = td[f"Header.RBase{r}"]
                reads[slot] = max(reads.get(slot, 0), src)
                if slot in written_before:
                    intermediate.add(slot)
        if td["Header.WBE"]:
            slot = td["Header.WBase"]
            dst = _extent(
                td,
                "TileDMADst",
                td["Common.Cout.Cout"],
                td["Common.OutDim.Hout"],
                td["Common.OutDim.Wout"],
                td["TileDMADst.Fmt.MemFmt"],
            )
            writes[slot] = max(writes.get(slot, 0), dst)
            written_before.add(slot)
    for slot in sorted(kernels):
        bars.setdefault(slot, BarSlot(slot, "kernel", kernel_size))
    for slot in sorted(set(reads) | set(writes)):
        if slot in bars:
            continue
        role = "intermediate" if slot in intermediate else "output" if slot in writes else "input"
        size = max(reads.get(slot, 0), writes.get(slot, 0))
        bars[slot] = BarSlot(slot, role, round_up(size, TILE) if size else None)
    return dict(sorted(bars.items()))


# ---------------------------------------------------------------- loaders


def _find_metadata(path: Path):
    """The kernels.json entry describing ``path``, searched beside it and one folder up."""
    for d in (path.parent, path.parent.parent):
        j = d / "kernels.json"
        if not j.is_file():
            continue
        try:
            table = json.loads(j.read_text())
        except (OSError, ValueError) as e:
            raise TDError(f"{j}: unreadable kernels.json ({e})") from None
        for name, entry in table.items() if isinstance(table, dict) else ():
            if (
                isinstance(entry, dict)
                and "file" in entry
                and os.path.normpath(d / entry["file"]) == os.path.normpath(path)
            ):
                return dict(entry, name=name)
    return None


def _meta_int(meta: Mapping, key: str) -> int:
    v = meta.get(key)
    if not isinstance(v, int) or v < 0:
        raise TDError(f"kernels.json entry: {key!r} must be a non-negative integer, not {v!r}")
    return v


def load_bin(data: bytes, meta: Mapping | None = None, name: str = "", source: str | None = None) -> Program:
    """A program from a TD stream followed by its kernel region (a corpus ``.bin`` or a raw TD).

    With ``meta`` (a kernels.json entry) the sizes are checked against it and the BAR plan comes
    from its ``types``/``tiles``; without, the chain decides where the TD stream ends (the kernel
    region is whatever follows at ``round_up(tsk_size, 0x80)``) and the plan is derived.
    """
    data = bytes(data)
    tds, offsets = parse_chain(data)
    tsk = offsets[-1] + TD_SIZE
    if meta is None:
        kernel = data[round_up(tsk, KERNEL_ALIGN) :] if len(data) > tsk else b""
        return Program(tds, offsets, data[:tsk], kernel, plan_bars(tds, tsk, len(kernel)), name, source)
    what = f"{name or 'program'}: kernels.json says"
    tsk_size, krn_size, size = (_meta_int(meta, k) for k in ("tsk_size", "krn_size", "size"))
    count = _meta_int(meta, "td_count")
    if meta.get("td_size", TD_SIZE) != TD_SIZE:
        raise TDError(f"{what} td_size {meta['td_size']:#x}; the M1 TD is {TD_SIZE:#x} bytes")
    if size != len(data):
        raise TDError(f"{what} size {size:#x}, the file has {len(data):#x} bytes")
    if count != len(tds):
        raise TDError(f"{what} {count} TDs; the chain in the file has {len(tds)} (ending at {tsk:#x})")
    notes = []
    if tsk_size != tsk:  # corpus softmin: its entry carries norm's tsk_size; the chain is the truth
        notes.append(
            f"kernels.json tsk_size {tsk_size:#x} disagrees with the chain, which ends at "
            f"{tsk:#x}; the kernel region is taken at round_up({tsk:#x}, 0x80)"
        )
    k0 = round_up(tsk, KERNEL_ALIGN)
    if k0 + krn_size > size:
        raise TDError(f"{what} krn_size {krn_size:#x} at {k0:#x}, past the file end {size:#x}")
    kernel = data[k0 : k0 + krn_size]
    bars = {}
    for slot, typ in sorted(((int(s), t) for s, t in meta.get("types", {}).items())):
        if typ not in _TILE_TYPES or not 0 <= slot < 32:
            raise TDError(f"{what} slot {slot} has type {typ!r}")
        tiles = meta.get("tiles", {}).get(str(slot))
        bars[slot] = BarSlot(slot, _TILE_TYPES[typ], tiles * TILE if isinstance(tiles, int) else None)
    if krn_size:  # by convention slot 1 serves the kernel region (eiln maps it in slot 0's buffer)
        bars.setdefault(1, BarSlot(1, "kernel", krn_size))
    return Program(
        tds,
        offsets,
        data[:tsk],
        kernel,
        dict(sorted(bars.items())),
        name,
        source,
        meta=dict(meta, notes=notes),
    )


def load_hwx(data, name: str = "", source: str | None = None):
    """A :class:`~fastane.td.program.Program` from .hwx bytes.

    The TD stream is ``__TEXT,__text``, the kernel/coefficient bytes ``__TEXT,__const``; the BAR
    plan comes from the flavor-1 thread state (each slot's address falls in a section: the TD
    stream, the kernel, or a named ``__FVMLIB`` tensor), roles of tensors from what the TDs do.
    """
    hwx = parse_hwx(data)
    text = hwx.section("__TEXT", "__text")
    if text is None or text.data is None:
        raise HwxError("no __TEXT,__text section with file bytes: the .hwx holds no TD stream")
    const = hwx.section("__TEXT", "__const")
    kernel = const.data if const is not None and const.data is not None else b""
    tds, offsets = parse_chain(text.data, base=text.offset)
    info = hwx.td_info()
    if info is not None and info[2] != len(tds):
        raise HwxError(f"the thread state announces {info[2]} TDs, the chain in __text has {len(tds)}")
    derived = plan_bars(tds, len(text.data), len(kernel))
    bars = {}
    for slot, addr in sorted(hwx.bar_table().items()):
        s = hwx.section_at(addr)
        if s is None:
            raise HwxError(f"BAR slot {slot} address {addr:#x} lies in no section")
        if s is text:
            bars[slot] = BarSlot(slot, "td", len(text.data))
        elif s is const:
            bars[slot] = BarSlot(slot, "kernel", len(kernel))
        else:
            tensor = hwx.name_of(addr)
            role = (
                derived[slot].role
                if slot in derived and derived[slot].role != "td"
                else "output"
                if tensor and "@output" in tensor
                else "input"
            )
            bars[slot] = BarSlot(slot, role, s.size, tensor)
    if not bars:
        bars = derived
    meta = {
        "ident": hwx.ident,
        "symbols": hwx.symbols,
        "tensors": hwx.tensors(),
        "cputype": hwx.cputype,
        "cpusubtype": hwx.cpusubtype,
        "text": (text.addr, text.offset, text.size),
        "const": (const.addr, const.offset, const.size) if const else None,
    }
    return Program(
        tds,
        offsets,
        text.data[: offsets[-1] + TD_SIZE],
        kernel,
        bars,
        name,
        source,
        td_base=text.offset,
        meta=meta,
    )


def load_program(path, meta: Mapping | bool | None = None) -> Program:
    """Load a program from ``path``: an ``.hwx`` Mach-O, a corpus ``.bin`` or a raw TD file.

    The container is recognised by content (the .hwx magic) or an ``.hwx`` suffix; anything else
    is a TD stream.  ``meta``: a
    kernels.json entry for a ``.bin``; None looks for ``kernels.json`` beside the file (or one
    folder up) and uses the entry naming it; False ignores metadata.
    Raises :class:`~fastane.errors.TDError` for a malformed file, OSError if it cannot be read.
    """
    path = Path(path)
    data = path.read_bytes()
    if is_hwx(data) or path.suffix.lower() == ".hwx":
        return load_hwx(data, name=path.stem, source=str(path))
    if meta is None:
        meta = _find_metadata(path.resolve())
    return load_bin(data, meta or None, name=(meta or {}).get("name", path.stem), source=str(path))
