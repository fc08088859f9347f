"""The NE lookup table's coefficient block: its codec and its packing for the kernels.

A LUT program's KMem payload starts with a 43-word coefficient block (little-endian
u16; the block occupies 0x80 bytes, words 43..63 are zero); the word layout is in the
docstring of :mod:`fastane.lut`, which re-exports every public name of this module.
:class:`CoeffBlock` decodes and encodes that block and packs it for the kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .errors import TDError
from .m1 import LUT_BLOCK, LUT_WORDS
from .kernels import lut as _klut
from .operands import fp16_operand

__all__ = [
    "BLOCK_BYTES",
    "WORDS",
    "CoeffBlock",
    "MODE_NAMES",
    "SYMMETRY_NONE",
    "SYMMETRY_ODD",
    "SYMMETRY_POSITIVE",
]

#: words of the coefficient block that carry meaning, and the block's size in KMem
WORDS = LUT_WORDS
BLOCK_BYTES = LUT_BLOCK

SYMMETRY_NONE, SYMMETRY_ODD, SYMMETRY_POSITIVE = "none", "odd", "positive"
_SYM_BITS = {0x00: SYMMETRY_NONE, 0x60: SYMMETRY_ODD, 0xC0: SYMMETRY_POSITIVE}
_SYM_CODE = {v: k for k, v in _SYM_BITS.items()}
MODE_NAMES = {
    0: "table",
    1: "offset16",
    2: "offset32",
    3: "fraction",
    4: "integer",
    5: "sqrt",
    6: "rsqrt",
    7: "reciprocal",
    9: "log2",
    10: "exp2",
}
_R_MIN = -24


def fp16_pattern(x: float) -> int:
    """fp16 pattern of ``x`` (round half to even)."""
    return int(np.array(x, dtype=np.float64).astype(np.float16).view(np.uint16))


def fp16_value(bits: int) -> float:
    """float value of the fp16 pattern ``bits``."""
    return float(np.array(bits, dtype=np.uint16).view(np.float16))


def _knots16(values) -> tuple:
    a = np.asarray(values, dtype=np.float64)
    if a.shape != (33,):
        raise ValueError(f"a table has 33 knots, got shape {a.shape}")
    return tuple(int(b) for b in a.astype(np.float16).view(np.uint16))


@dataclass(frozen=True)
class CoeffBlock:
    """One LUT coefficient block; every value field is an fp16 bit pattern (int).

    Build one with the keyword constructor (patterns), :meth:`from_values` (floats,
    rounded to fp16), or decode one with :meth:`from_words` / :meth:`from_bytes`.
    """

    lo: int
    hi: int
    lo_value: int
    hi_value: int
    knots: tuple
    slope_left: int = 0
    icpt_left: int = 0
    slope_right: int = 0
    icpt_right: int = 0
    R: int = 0
    mode_word: int = 0

    def __post_init__(self):
        if len(self.knots) != 33:
            raise ValueError(f"a coefficient block has 33 knots, got {len(self.knots)}")
        for name in (
            "lo",
            "hi",
            "lo_value",
            "hi_value",
            "slope_left",
            "icpt_left",
            "slope_right",
            "icpt_right",
        ):
            v = getattr(self, name)
            if not 0 <= int(v) <= 0xFFFF:
                raise ValueError(f"{name} must be an fp16 bit pattern (0..0xffff), got {v!r}")
        if any(not 0 <= int(k) <= 0xFFFF for k in self.knots):
            raise ValueError("knots must be fp16 bit patterns (0..0xffff)")
        if not -0x8000 <= int(self.R) <= 0x7FFF:
            raise ValueError(f"R must fit a signed 16-bit word, got {self.R}")
        if not 0 <= int(self.mode_word) <= 0xFFFF:
            raise ValueError(f"mode_word must be a 16-bit word, got {self.mode_word!r}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_values(
        cls,
        lo,
        hi,
        lo_value,
        hi_value,
        knots,
        slope_left=0.0,
        icpt_left=0.0,
        slope_right=0.0,
        icpt_right=0.0,
        R=0,
        mode=0,
        symmetry=SYMMETRY_NONE,
    ):
        """Block from float values (each rounded to fp16), a mode number and a symmetry."""
        if symmetry not in _SYM_CODE:
            raise ValueError(f"symmetry must be one of {tuple(_SYM_CODE)}, got {symmetry!r}")
        if mode not in MODE_NAMES:
            raise ValueError(f"unknown LUT mode {mode!r}; known: {sorted(MODE_NAMES)}")
        return cls(
            fp16_pattern(lo),
            fp16_pattern(hi),
            fp16_pattern(lo_value),
            fp16_pattern(hi_value),
            _knots16(knots),
            fp16_pattern(slope_left),
            fp16_pattern(icpt_left),
            fp16_pattern(slope_right),
            fp16_pattern(icpt_right),
            int(R),
            _SYM_CODE[symmetry] | mode,
        )

    @classmethod
    def from_words(cls, words) -> "CoeffBlock":
        """Decode 43 (or more) little-endian u16 words; raises TDError if unsupported."""
        w = np.asarray(words)
        if w.ndim != 1 or w.size < WORDS:
            raise TDError(f"a LUT coefficient block has {WORDS} words, got {w.size}")
        w = [int(x) & 0xFFFF for x in w[:WORDS]]
        r = w[41] - 0x10000 if w[41] & 0x8000 else w[41]
        blk = cls(w[0], w[1], w[2], w[3], tuple(w[4:37]), w[37], w[38], w[39], w[40], r, w[42])
        blk.validate()
        return blk

    @classmethod
    def from_bytes(cls, buf, offset: int = 0) -> "CoeffBlock":
        """Decode the block at ``offset`` of a bytes-like KMem image."""
        mv = memoryview(buf).cast("B")
        if offset < 0 or offset + 2 * WORDS > len(mv):
            raise TDError(f"coefficient block at {offset:#x} runs past the end of a {len(mv):#x}-byte buffer")
        return cls.from_words(np.frombuffer(mv[offset : offset + 2 * WORDS], dtype="<u2"))

    # ----------------------------------------------------------------------- encoding
    def to_words(self) -> np.ndarray:
        """The 43 words as a uint16 array."""
        w = [
            self.lo,
            self.hi,
            self.lo_value,
            self.hi_value,
            *self.knots,
            self.slope_left,
            self.icpt_left,
            self.slope_right,
            self.icpt_right,
            int(self.R) & 0xFFFF,
            self.mode_word,
        ]
        return np.array(w, dtype=np.uint16)

    def to_bytes(self) -> bytes:
        """The 0x80-byte KMem block (little-endian, zero padded)."""
        return self.to_words().astype("<u2").tobytes().ljust(BLOCK_BYTES, b"\0")

    # --------------------------------------------------------------------- properties
    @property
    def mode(self) -> int:
        """Low nibble of the mode word (see :data:`MODE_NAMES`)."""
        return self.mode_word & 0xF

    @property
    def symmetry(self) -> str:
        """``"odd"`` (bits 0x60), ``"positive"`` (0xc0) or ``"none"``."""
        return _SYM_BITS.get(self.mode_word & 0xF0, "unknown")

    @property
    def knot_values(self) -> np.ndarray:
        """The 33 knots as float64 values."""
        return np.array(self.knots, dtype=np.uint16).view(np.float16).astype(np.float64)

    def validate(self) -> None:
        """Raise :class:`~fastane.TDError` if fastane cannot evaluate this block."""
        if self.mode_word >> 8 or (self.mode_word & 0xF0) not in _SYM_BITS:
            raise TDError(
                f"unsupported LUT mode word {self.mode_word:#06x} (known symmetry bits: 0x00, 0x60, 0xc0)"
            )
        if self.mode not in MODE_NAMES:
            raise TDError(
                f"unsupported LUT mode {self.mode} in mode word "
                f"{self.mode_word:#06x}; known: {sorted(MODE_NAMES)}"
            )
        coeffs = {
            **{f"knot {i}": k for i, k in enumerate(self.knots)},
            "slope_left": self.slope_left,
            "icpt_left": self.icpt_left,
            "slope_right": self.slope_right,
            "icpt_right": self.icpt_right,
        }
        bad = [f"{name} = {int(v):#06x}" for name, v in coeffs.items() if int(v) & 0x7C00 == 0x7C00]
        if bad:  # (lo, hi and the out-of-range values may be infinite)
            raise TDError(
                f"LUT coefficient(s) {', '.join(bad[:3])} not finite (never observed: "
                f"how the interpolation treats them is unknown)"
            )
        if self.R < _R_MIN:
            raise TDError(
                f"LUT R = {self.R} is below {_R_MIN} (never observed; the table "
                "would be narrower than one fp16 ulp)"
            )

    def kernel_args(self):
        """``(lutf float64[41], luti int64[3])`` for :mod:`fastane.kernels.lut`/``ne``."""
        return _pack(self)

    def describe(self) -> str:
        """One line: mode, R, symmetry, range."""
        return (
            f"mode {self.mode_word:#06x} ({MODE_NAMES.get(self.mode, '?')}, "
            f"{self.symmetry}), R={self.R}, x in [{fp16_value(self.lo)}, {fp16_value(self.hi)}] "
            f"else {fp16_value(self.lo_value)} / {fp16_value(self.hi_value)}"
        )

    def __call__(self, x, out=None) -> np.ndarray:
        """Evaluate the table on fp16-rounded ``x``; returns float16 (range events ignored)."""
        x16 = fp16_operand(x, "CoeffBlock", "x")
        res = np.empty(x16.shape, dtype=np.uint16)
        lutf, luti = self.kernel_args()
        _klut.lut_apply(x16.astype(np.float64).ravel(), res.reshape(-1), lutf, luti, np.zeros(2, np.int64))
        res = res.view(np.float16)
        if out is not None:
            out[...] = res
            return out
        return res


@functools.lru_cache(maxsize=256)
def _pack(blk: CoeffBlock):
    blk.validate()
    f = np.empty(_klut.NPARAMS)
    f[:33] = blk.knot_values
    f[33:41] = [
        fp16_value(b)
        for b in (
            blk.lo,
            blk.hi,
            blk.lo_value,
            blk.hi_value,
            blk.slope_left,
            blk.icpt_left,
            blk.slope_right,
            blk.icpt_right,
        )
    ]
    i = np.array([min(blk.R, 0x7FFF), blk.mode, 1 if blk.symmetry == SYMMETRY_ODD else 0], dtype=np.int64)
    f.setflags(write=False)
    i.setflags(write=False)
    return f, i
