"""fastane.td: M1 task descriptors.

The field table (:data:`FIELDS`), the ControlDMA codec (:class:`TaskDescriptor`), programs
(:class:`Program`, :func:`load_program` for .hwx, corpus .bin and raw TD files), the
disassembler (``fastane disasm``) and the assembler helpers (:func:`conv_td`).
"""

from .asm import conv_td
from .codec import (
    LAYOUT,
    SECTIONS,
    FieldOverflowError,
    PacketError,
    TaskDescriptor,
    decode_packet,
    encode_packet,
    packet_header,
    parse_packet_header,
)
from .fields import BY_NAME, FIELDS, PLANAR_WORDS, TD_FIELDS, TD_SIZE, TD_STRIDE, Field
from .hwx import HwxError, parse_hwx
from .program import BarSlot, Program, load_program

__all__ = [
    "BY_NAME",
    "FIELDS",
    "LAYOUT",
    "PLANAR_WORDS",
    "SECTIONS",
    "TD_FIELDS",
    "TD_SIZE",
    "TD_STRIDE",
    "BarSlot",
    "Field",
    "FieldOverflowError",
    "HwxError",
    "PacketError",
    "Program",
    "TaskDescriptor",
    "conv_td",
    "decode_packet",
    "encode_packet",
    "load_program",
    "packet_header",
    "parse_hwx",
    "parse_packet_header",
]
