"""ControlDMA packets and the :class:`TaskDescriptor` value.

A TD is not an instruction stream but a fixed run of ControlDMA burst-write packets: one
header word ``[31:26] = N - 1, [25:2] = register byte address, [1:0] = 0`` followed by N
register values.  The M1 TD is a 10-word TD header plus seven packets at fixed offsets
(:data:`LAYOUT`), 0x274 bytes in all.  A :class:`TaskDescriptor` keeps all 157 words, so bits
that no field names survive a decode/encode round trip unchanged.
"""

from __future__ import annotations

import difflib
import operator
import struct
from collections.abc import Iterator, Mapping

from ..errors import TDError
from .fields import BY_NAME, TD_FIELDS, TD_SIZE, TD_WORDS, UNNAMED_BY_NAME, Field

# section, byte offset of its packet header (None: the TD header has none), header word, words
LAYOUT: tuple[tuple[str, int, int | None, int], ...] = (
    ("Header", 0x000, None, 10),
    ("KernelDMASrc", 0x028, 0xF401F800, 62),
    ("Common", 0x124, 0x3C000000, 16),
    ("TileDMASrc", 0x168, 0x6C013800, 28),
    ("L2", 0x1DC, 0x44004800, 18),
    ("Planar", 0x228, 0x0C008800, 4),
    ("NE", 0x23C, 0x1000C800, 5),
    ("TileDMADst", 0x254, 0x18017800, 7),
)
SECTIONS: tuple[str, ...] = tuple(s for s, *_ in LAYOUT)
_PACKETS = tuple((s, off, hdr) for s, off, hdr, _ in LAYOUT if hdr is not None)
_STRUCT = struct.Struct(f"<{TD_WORDS}I")


class PacketError(TDError):
    """A ControlDMA packet header is not where, or not what, the M1 layout says.

    ``offset`` is the byte offset of the bad header word (in the buffer that was decoded),
    ``expected`` and ``found`` the header words.
    """

    def __init__(self, msg: str, offset: int, expected: int | None, found: int | None):
        super().__init__(msg)
        self.offset, self.expected, self.found = offset, expected, found


class FieldOverflowError(TDError):
    """A value does not fit the field it is written to (negative or wider than the field)."""

    def __init__(self, field: Field, value):
        super().__init__(
            f"TD field {field.name} is {field.width} bits wide (0..{field.mask:#x}): cannot hold {value!r}"
        )
        self.field, self.value = field, value


# ---------------------------------------------------------------- ControlDMA packets


def packet_header(register: int, count: int) -> int:
    """The header word of a packet writing ``count`` (1..64) words from byte address ``register``."""
    if not 1 <= count <= 64:
        raise TDError(f"a ControlDMA packet carries 1..64 words, not {count}")
    if register & 3 or not 0 <= register < 1 << 26:
        raise TDError(f"register byte address {register:#x} is not a word address below 2**26")
    return (count - 1) << 26 | register


def parse_packet_header(word: int) -> tuple[int, int]:
    """``(count, register byte address)`` of a packet header; bits [1:0] must be zero."""
    if word & 3:
        raise TDError(f"{word:#010x} is not a ControlDMA packet header (bits [1:0] = {word & 3}, must be 0)")
    return (word >> 26) + 1, word & 0x03FFFFFC


def encode_packet(register: int, values) -> list[int]:
    """Header word followed by ``values`` (each a u32)."""
    values = [int(v) for v in values]
    if any(not 0 <= v <= 0xFFFFFFFF for v in values):
        raise TDError("packet values must be 32-bit unsigned words")
    return [packet_header(register, len(values))] + values


def decode_packet(words, pos: int = 0) -> tuple[int, list[int]]:
    """Decode the packet at word index ``pos``: ``(register, values)``; it must fit in ``words``."""
    if pos >= len(words):
        raise TDError(f"no packet header at word {pos}: only {len(words)} words")
    count, register = parse_packet_header(words[pos])
    if pos + 1 + count > len(words):
        raise TDError(f"packet at word {pos} carries {count} words but only {len(words) - pos - 1} follow")
    return register, list(words[pos + 1 : pos + 1 + count])


def _describe(word: int) -> str:
    if word & 3:
        return f"{word:#010x} (not a packet header: bits [1:0] = {word & 3})"
    count, reg = parse_packet_header(word)
    return f"{word:#010x} ({count} words -> register {reg:#x})"


def check_layout(words, where: int = 0) -> None:
    """Raise :class:`PacketError` unless every packet header of the TD ``words`` is the M1 one.

    ``where`` is the TD's byte offset in its buffer, used in messages and ``PacketError.offset``.
    """
    for section, off, expected in _PACKETS:
        found = words[off // 4]
        if found == expected:
            continue
        at = f"TD at {where:#x}: {section} packet header at +{off:#x} (byte {where + off:#x})"
        if not found & 3:
            count, _ = parse_packet_header(found)
            if off + 4 + 4 * count > TD_SIZE:
                raise PacketError(
                    f"{at}: found {_describe(found)}, whose {count} words run past "
                    f"the TD end {TD_SIZE:#x}; expected {_describe(expected)}",
                    where + off,
                    expected,
                    found,
                )
        raise PacketError(
            f"{at}: expected {_describe(expected)}, found {_describe(found)}", where + off, expected, found
        )


# ---------------------------------------------------------------- TaskDescriptor


def _alias(name: str) -> str:
    return name.replace(".", "_").replace("[", "").replace("]", "")


_ALIASES = {_alias(f.name): f.name for f in TD_FIELDS}  # Common_Cin_Cin -> Common.Cin.Cin
_PREFIXES = {f.name.rsplit(".", k)[0] for f in TD_FIELDS for k in (1, 2) if f.name.count(".") >= k}
_ARRAYS = {p.rsplit("[", 1)[0] for p in _PREFIXES | set(BY_NAME) if p.endswith("]")}
_BLANK = [0] * TD_WORDS
for _s, _off, _hdr in _PACKETS:
    _BLANK[_off // 4] = _hdr


def lookup(name: str) -> Field:
    """The :class:`Field` for a canonical name (or its keyword alias); KeyError with a hint otherwise."""
    f = BY_NAME.get(name) or BY_NAME.get(_ALIASES.get(name, "")) or UNNAMED_BY_NAME.get(name)
    if f is None:
        close = difflib.get_close_matches(name, list(BY_NAME) + list(_ALIASES), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown TD field {name!r}{hint}")
    return f


class TaskDescriptor:
    """One M1 task descriptor: 157 u32 words, read and written through named fields.

    ``td["Common.Cin.Cin"]`` reads a field, ``td["Common.Cin.Cin"] = 8`` writes it (checked
    against its width); ``td.Common.InDim.Win``, ``td.KernelDMASrc.CoeffDMAConfig[3].En`` and
    ``td.Header.NID`` are section views of the same words.  Build one from bytes
    (:meth:`from_bytes`, which checks the packet layout) or from field values (:meth:`build`).
    """

    __slots__ = ("words",)

    def __init__(self, words=None):
        """A TD from 157 words (taken as given), or a blank TD with the M1 packet headers."""
        if words is None:
            words = _BLANK
        elif len(words) != TD_WORDS:
            raise TDError(f"a TD has {TD_WORDS} words, not {len(words)}")
        self.words: list[int] = list(words)

    # -- bytes
    @classmethod
    def from_bytes(cls, data, offset: int = 0) -> "TaskDescriptor":
        """Decode the 0x274-byte TD at ``offset`` of ``data``; raises :class:`TDError` if malformed."""
        data = memoryview(data).cast("B")
        if offset < 0 or offset + TD_SIZE > len(data):
            raise TDError(
                f"truncated TD at {offset:#x}: need {TD_SIZE:#x} bytes, "
                f"only {max(len(data) - offset, 0):#x} there"
            )
        words = _STRUCT.unpack_from(data, offset)
        check_layout(words, offset)
        td = cls.__new__(cls)
        td.words = list(words)
        return td

    def to_bytes(self) -> bytes:
        """The raw 0x274 bytes (little-endian words)."""
        return _STRUCT.pack(*self.words)

    def __bytes__(self) -> bytes:
        return self.to_bytes()

    # -- fields
    def __getitem__(self, name: str) -> int:
        f = BY_NAME.get(name) or lookup(name)
        return (self.words[f.word] >> f.shift) & f.mask

    def __setitem__(self, name: str, value: int) -> None:
        f = BY_NAME.get(name) or lookup(name)
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"TD field {f.name} takes an integer, not {type(value).__name__}") from None
        if not 0 <= v <= f.mask:
            raise FieldOverflowError(f, value)
        w = self.words[f.word]
        self.words[f.word] = (w & ~(f.mask << f.shift) & 0xFFFFFFFF) | v << f.shift

    def get(self, name: str, default=None):
        """Field value, or ``default`` when ``name`` is not a TD field."""
        try:
            return self[name]
        except KeyError:
            return default

    def update(self, values: Mapping[str, int] | None = None, **kw) -> "TaskDescriptor":
        """Write many fields (canonical names or keyword aliases); returns ``self``."""
        for name, v in {**(values or {}), **kw}.items():
            self[name] = v
        return self

    def values(self) -> tuple[int, ...]:
        """Every field's value, in :data:`TD_FIELDS` order (no dict building)."""
        w = self.words
        return tuple([(w[i] >> s) & m for i, s, m in _WSM])

    def fields(self, nonzero: bool = False) -> dict[str, int]:
        """``{canonical name: value}`` for every field (only the nonzero ones if asked)."""
        d = dict(zip(_NAMES, self.values()))
        return {k: v for k, v in d.items() if v} if nonzero else d

    def diff(self, other: "TaskDescriptor") -> list[tuple[str, int, int]]:
        """``(name, mine, theirs)`` for every field that differs; raw words outside fields too."""
        out = [(n, a, b) for n, a, b in zip(_NAMES, self.values(), other.values()) if a != b]
        covered = [0] * TD_WORDS
        for f in TD_FIELDS:
            covered[f.word] |= f.mask << f.shift
        out += [
            (f"word[{i}] unnamed bits", a & ~covered[i] & 0xFFFFFFFF, b & ~covered[i] & 0xFFFFFFFF)
            for i, (a, b) in enumerate(zip(self.words, other.words))
            if (a ^ b) & ~covered[i] & 0xFFFFFFFF
        ]
        return out

    @property
    def planar_words(self) -> tuple[int, int, int, int]:
        """The Planar engine's 4 raw words (TD offsets 0x22c..0x238)."""
        return tuple(self.words[0x22C // 4 : 0x22C // 4 + 4])

    # -- assembler
    @classmethod
    def build(cls, values: Mapping[str, int] | None = None, /, **kw) -> "TaskDescriptor":
        """A TD with the M1 packet headers and the given fields set; every other bit is 0.

        ``TaskDescriptor.build({"Common.Cin.Cin": 8})`` or, with keyword aliases (dots become
        underscores, brackets vanish), ``TaskDescriptor.build(Common_Cin_Cin=8,
        KernelDMASrc_CoeffDMAConfig0_En=1)``.
        """
        return cls().update(values, **kw)

    def copy(self) -> "TaskDescriptor":
        """An independent copy."""
        return TaskDescriptor(self.words)

    # -- views and dunders
    def __getattr__(self, name: str):
        if name in SECTIONS:
            return _View(self, name)
        raise AttributeError(f"TaskDescriptor has no attribute {name!r} (sections: {', '.join(SECTIONS)})")

    def __eq__(self, other):
        return isinstance(other, TaskDescriptor) and self.words == other.words

    __hash__ = None

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __repr__(self) -> str:
        f = self.fields(nonzero=True)
        shown = ", ".join(f"{k}={v:#x}" if v > 9 else f"{k}={v}" for k, v in list(f.items())[:6])
        return f"TaskDescriptor({shown}{', ...' if len(f) > 6 else ''})"


_NAMES = tuple(f.name for f in TD_FIELDS)
_WSM = tuple((f.word, f.shift, f.mask) for f in TD_FIELDS)


class _View:
    """A section (or register) of a TD: ``td.Common.InDim.Win``, ``td.KernelDMASrc.CoeffDMAConfig[3]``."""

    __slots__ = ("_td", "_path")

    def __init__(self, td: TaskDescriptor, path: str):
        object.__setattr__(self, "_td", td)
        object.__setattr__(self, "_path", path)

    def _key(self, name) -> str:
        return f"{self._path}[{name}]" if isinstance(name, int) else f"{self._path}.{name}"

    def _get(self, key: str, err):
        if key in BY_NAME:
            return self._td[key]
        if key in _PREFIXES or key in _ARRAYS:
            return _View(self._td, key)
        raise err(f"{self._path} has no field or register {key[len(self._path) :].lstrip('.')!r}")

    def __getattr__(self, name: str):
        return self._get(self._key(name), AttributeError)

    def __getitem__(self, i):
        return self._get(self._key(i), IndexError if isinstance(i, int) else KeyError)

    def __setattr__(self, name: str, value: int) -> None:
        self._td[self._key(name)] = value

    def __setitem__(self, i, value: int) -> None:
        self._td[self._key(i)] = value

    def fields(self) -> dict[str, int]:
        """``{name relative to this view: value}`` for the fields under it."""
        p = self._path
        return {
            n[len(p) :].lstrip("."): self._td[n]
            for n in _NAMES
            if n.startswith(p) and n[len(p) : len(p) + 1] in (".", "[")
        }

    def __repr__(self) -> str:
        return f"<{self._path}: {self.fields()}>"
