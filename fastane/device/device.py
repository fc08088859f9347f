"""The Pythonic device: unified memory + task manager + engine behind two calls.

``Device.submit(program, bars, queue=..., priority=...)`` stages a loaded program in a
task queue through the TM registers and returns a :class:`~fastane.device.Task`;
``Device.run(program, inputs)`` is the common case: plain NCHW arrays in, keyed by BAR
slot, plain NCHW float16 arrays out (an :class:`Outputs` dict whose ``.stats`` is the
program's :class:`~fastane.Stats`).
"""

from __future__ import annotations

import functools

import threading
from dataclasses import dataclass, field

import numpy as np

from ..errstate import report_events
from ..operands import fp16_operand, int_operand
from ..stats import Stats
from ..td import Program
from ..td.fields import TD_SIZE
from . import l2 as l2mod
from .buffers import FORMATS
from .engine import Engine
from .memory import ALIGN, DEFAULT_SIZE, BARTable, Region, UnifiedMemory
from .planar import registers as planar_regs
from .tile_dma import dram_reads
from .taskmanager import EVENT_FIFO_DEPTH, HISTORY_SIZE, Task, TaskManager


#: BAR tables :meth:`Device.submit` keeps (by their regions), for repeated submits
BAR_TABLES = 256


@dataclass
class LoadedProgram:
    """A program placed in unified memory: its TD stream and kernel regions."""

    program: Program
    td_region: Region
    kernel_region: Region | None
    #: the slots the program's own bytes occupy (TD stream, kernel slots)
    bars: dict = field(default_factory=dict)

    @functools.cached_property
    def tensors(self) -> dict:
        """What the TDs read and write through TileDMA, by slot (:func:`tensor_slots`, worked
        out on first use: a submit does not need it)."""
        return tensor_slots(self.program)

    @property
    def td_count(self) -> int:
        return len(self.program.tds)


@dataclass
class _Payload:
    bars: BARTable
    stats_only: bool


@dataclass(frozen=True)
class TensorSlot:
    """How the program's TDs address one BAR slot: the tensor, its layout, its extent."""

    slot: int
    role: str  # "input", "output" or "intermediate"
    shape: tuple  # (1, C, H, W)
    base: int  # byte offset of element 0 in the slot
    strides: tuple  # bytes: (plane, row, element)
    dtype: np.dtype
    nbytes: int  # bytes the slot must provide
    #: why Device.run cannot read or write the slot as one tensor (None: it can)
    problem: str | None = None

    def view(self, raw: np.ndarray) -> np.ndarray:
        """The tensor as a strided (C, H, W) view of the region's bytes."""
        return np.ndarray(self.shape[1:], self.dtype, buffer=raw, offset=self.base, strides=self.strides)


class Outputs(dict):
    """Output arrays keyed by BAR slot, with the run's :class:`~fastane.Stats`."""

    stats: Stats


class Device:
    """An emulated M1 ANE.

    ``memory_size``: bytes of emulated DRAM (pages are committed only when touched);
    ``stats_only``: the default for runs: plan and count, but compute nothing;
    ``history_size``, ``event_depth``: how many completed tasks the task manager keeps in
    its history and how many events each IRQ FIFO holds (bounded, so a long-running
    process holds constant memory; :mod:`fastane.device.taskmanager`).
    """

    def __init__(
        self,
        memory_size: int = DEFAULT_SIZE,
        stats_only: bool = False,
        history_size: int = HISTORY_SIZE,
        event_depth: int = EVENT_FIFO_DEPTH,
    ):
        self.memory = UnifiedMemory(memory_size)
        self.engine = Engine(self.memory)
        self.tm = TaskManager(self._execute, history_size, event_depth)
        self.stats_only = stats_only
        #: Stats of everything the device ran
        self.stats = Stats()
        self._lock = threading.Lock()
        self._loaded: dict[int, LoadedProgram] = {}
        self._tables: dict[tuple, BARTable] = {}  # BAR tables of recent submits

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int, name: str = "") -> Region:
        return self.memory.alloc(nbytes, name)

    def free(self, region: Region) -> None:
        self.memory.free(region)

    def write(self, region: Region, data, offset: int = 0) -> None:
        data = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), np.uint8)
        if offset < 0 or offset + data.size > region.size:
            raise ValueError(f"{data.size} bytes at offset {offset} do not fit {region}")
        self.memory.write(region.iova + offset, data)

    def read(self, region: Region, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        nbytes = region.size - offset if nbytes is None else nbytes
        if offset < 0 or nbytes < 0 or offset + nbytes > region.size:
            raise ValueError(f"{nbytes} bytes at offset {offset} are not inside {region}")
        return self.memory.view(region.iova + offset, nbytes).copy()

    # ------------------------------------------------------------------ programs
    def load(self, program: Program) -> LoadedProgram:
        """Place ``program``'s TD stream and kernel bytes in unified memory (once).

        The loaded copy is cached by program object: after changing a program's bytes,
        :meth:`unload` it (or load a new Program).
        """
        if isinstance(program, LoadedProgram):
            return program
        if not isinstance(program, Program):
            raise TypeError(f"expected a fastane.td.Program, got {type(program).__name__}")
        with self._lock:
            loaded = self._loaded.get(id(program))
            if loaded is not None:
                if loaded.program is program:
                    return loaded
                # a dead program's id was reused: release what it held
                self.memory.free(loaded.td_region)
                if loaded.kernel_region is not None:
                    self.memory.free(loaded.kernel_region)
            name = program.name or "program"
            td_region = self.memory.alloc(len(program.td_stream), f"{name}:td")
            self.memory.write(td_region.iova, program.td_stream)
            kernel_region = None
            bars = {}
            td_slot = next((b.slot for b in program.bars.values() if b.role == "td"), 0)
            bars[td_slot] = td_region
            if program.kernel:
                kernel_region = self.memory.alloc(len(program.kernel), f"{name}:kernel")
                self.memory.write(kernel_region.iova, program.kernel)
                kslots = {
                    td[f"Header.KBase{k}"] for td in program.tds for k in range(4) if td[f"Header.KBE{k}"]
                }
                kslots |= {b.slot for b in program.bars.values() if b.role == "kernel"}
                for slot in kslots or {1}:
                    bars.setdefault(slot, kernel_region)
            loaded = LoadedProgram(program, td_region, kernel_region, bars)
            self._loaded[id(program)] = loaded
            return loaded

    def unload(self, program) -> None:
        """Free the memory a loaded program holds."""
        with self._lock:
            key = id(program.program if isinstance(program, LoadedProgram) else program)
            loaded = self._loaded.pop(key, None)
        if loaded is not None:
            self.memory.free(loaded.td_region)
            if loaded.kernel_region is not None:
                self.memory.free(loaded.kernel_region)

    # ------------------------------------------------------------------ submission
    def submit(
        self,
        program,
        bars=None,
        queue: int = 0,
        priority: int | None = None,
        stats_only: bool | None = None,
        nid: int | None = None,
    ) -> Task:
        """Submit ``program`` with ``bars`` (slot -> :class:`Region`) on task queue ``queue``.

        The program's own TD stream and kernel slots are mapped automatically; ``bars`` adds
        (or overrides) the others.  ``priority`` defaults to the queue's TQ_PRTY register
        (higher runs first).  Returns the :class:`Task` handle; ``task.wait()`` gives its Stats.
        """
        loaded = self.load(program)
        table = self._bar_table({**loaded.bars, **dict(bars or {})})
        payload = _Payload(table, self.stats_only if stats_only is None else bool(stats_only))
        first = loaded.program.tds[0]
        return self.tm.submit(
            queue,
            table.iovas(),
            loaded.td_region.iova,
            TD_SIZE,
            loaded.td_count,
            nid=first["Header.NID"] if nid is None else nid,
            priority=priority,
            payload=payload,
        )

    def _bar_table(self, slots: dict) -> BARTable:
        """The BAR table of ``slots`` (checked by :class:`BARTable`), kept for the next
        submit with the same regions (a table is only read by the engine; regions are
        values, so equal regions map the same bytes)."""
        try:
            key = tuple(sorted(slots.items()))
            table = self._tables.get(key)
        except TypeError:  # not Regions, or slots that are not integers: let BARTable say so
            return BARTable(self.memory, slots)
        if table is None:
            table = BARTable(self.memory, slots)
            if len(self._tables) >= BAR_TABLES:
                self._tables.clear()
            self._tables[key] = table
        return table

    def _execute(self, task: Task) -> Stats:
        """The TM's executor: run one pushed chain on the engine."""
        if isinstance(task.payload, _Payload):
            bars, stats_only = task.payload.bars, task.payload.stats_only
        else:  # pushed through the registers: the BAR registers hold IOVAs only
            bars, stats_only = BARTable.from_iovas(self.memory, task.bars), self.stats_only
        stats = self.engine.execute(task.addr, task.td_size, task.td_count, bars, stats_only)
        with self._lock:
            self.stats = self.stats.plus_counts(stats)
        return stats

    # ------------------------------------------------------------------ the common case
    def tensors(self, program) -> dict[int, TensorSlot]:
        """The tensors ``program`` reads and writes through TileDMA, by BAR slot."""
        if isinstance(program, LoadedProgram):
            return dict(program.tensors)
        return tensor_slots(program)

    def run(
        self,
        program,
        inputs=None,
        stats_only: bool | None = None,
        queue: int = 0,
        priority: int | None = None,
    ) -> Outputs:
        """Run ``program`` on ``inputs`` ({slot: NCHW array}); {slot: NCHW array} out, in
        each slot's format (float16, or uint8/int8 on the INT8 path).

        Inputs of other dtypes are rounded to an fp16 slot's format (nearest even); an
        integer slot takes integers of its range only (ValueError otherwise).
        Saturations are surfaced through :func:`fastane.errstate` in the calling thread.
        In stats-only mode no data moves and the outputs dict is empty.
        """
        if self.tm.held_by_me():
            raise RuntimeError(
                "Device.run waits for its result, which cannot come inside a "
                "hold() of the same thread; use submit() there"
            )
        loaded = self.load(program)
        stats_only = self.stats_only if stats_only is None else bool(stats_only)
        slots = loaded.tensors
        inputs = dict(inputs or {})
        wanted = {s for s, t in slots.items() if t.role == "input"}
        unknown = set(inputs) - wanted
        if unknown:
            raise ValueError(
                f"slot(s) {sorted(unknown)} are not inputs of the program (inputs: {sorted(wanted)})"
            )
        missing = wanted - set(inputs)
        if missing and not stats_only:
            raise ValueError(f"missing input(s) for slot(s) {sorted(missing)}")
        for slot, t in slots.items():
            if t.problem is not None and t.role != "intermediate":
                raise NotImplementedError(f"Device.run: {t.problem}")
        arrays = {}
        bad_input = None  # an integer input out of its range: raised after the program's own faults
        for slot, x in inputs.items():
            t = slots[slot]
            # fp16 slots: the one rounding of every front end; integer slots: exact integers
            if t.dtype == np.float16:
                x = fp16_operand(x, "Device.run", f"input for slot {slot}")
            else:
                try:
                    x = int_operand(x, t.dtype, "Device.run", f"input for slot {slot}")
                except ValueError as exc:
                    bad_input = bad_input or exc
                    continue
            if x.shape != t.shape and x.shape != t.shape[1:]:
                raise ValueError(f"input for slot {slot} has shape {x.shape}; the program reads {t.shape}")
            arrays[slot] = x.reshape(t.shape)
        regions = {}
        try:
            for slot, t in slots.items():
                regions[slot] = self.memory.alloc(t.nbytes, f"slot{slot}:{t.role}", zero=not stats_only)
                if slot in arrays and not stats_only:
                    raw = self.memory.view(regions[slot].iova, regions[slot].size)
                    t.view(raw)[...] = arrays[slot][0].astype(t.dtype)
            if bad_input is not None:  # a program the device refuses is refused first
                self.submit(loaded, regions, queue=queue, priority=priority, stats_only=True).wait()
                raise bad_input
            task = self.submit(loaded, regions, queue=queue, priority=priority, stats_only=stats_only)
            stats = task.wait()
            out = Outputs()
            if not stats_only:
                for slot, t in slots.items():
                    if t.role == "output":
                        raw = self.memory.view(regions[slot].iova, regions[slot].size)
                        # a copy: the region is freed (and reused) when the run ends
                        out[slot] = np.array(t.view(raw), order="C").reshape(t.shape)
        finally:
            for region in regions.values():
                self.memory.free(region)
        out.stats = stats
        report_events(stats, "Device.run")
        return out

    # ------------------------------------------------------------------ registers and events
    def read32(self, offset: int) -> int:
        return self.tm.read32(offset)

    def write32(self, offset: int, value: int) -> None:
        self.tm.write32(offset, value)

    def hold(self):
        """Hold execution: submissions accumulate, then run by priority (a context manager)."""
        return self.tm.hold()

    def on_complete(self, fn) -> None:
        self.tm.on_complete(fn)

    def events(self, line: int | None = None):
        return self.tm.drain_events(line)

    def reset_l2(self) -> None:
        self.engine.l2.clear()

    def __repr__(self) -> str:
        return f"Device({self.memory!r}, {self.tm!r})"


def tensor_slots(program: Program) -> dict[int, TensorSlot]:
    """What each BAR slot holds, from the TDs' TileDMA registers (first access decides
    input vs output; written and later read is an intermediate).  A slot several TDs
    write (or read) in parts -- ``concat.hwx`` writes 16,384 channels from one TD and 16
    more from another -- is the one tensor the parts tile (:func:`_merge`)."""
    found: dict[int, TensorSlot] = {}
    extents: dict[int, int] = {}
    written: set[int] = set()
    parts: dict[tuple, list] = {}
    for td in program.tds:
        r = planar_regs(td)
        rt = r["L2.ResultCfg.ResultType"]
        accesses = []
        src_strides = ("RowStride.Stride", "PlaneStride.PlaneStride")
        for slot, eng, (c, h, w), groups in dram_reads(r):
            if groups > 1:  # a planar row reduction: rows GroupStride apart, one per group
                accesses.append(
                    ("read", slot, eng, (c, groups, w), ("GroupStride.Stride", "PlaneStride.PlaneStride"))
                )
            else:
                accesses.append(("read", slot, eng, (c, h, w), src_strides))
        if rt == l2mod.DRAM and r["Header.WBE"]:
            accesses.append(
                (
                    "write",
                    r["Header.WBase"],
                    "TileDMADst",
                    (r["Common.Cout.Cout"], r["Common.OutDim.Hout"], r["Common.OutDim.Wout"]),
                    ("RowStride.RowStride", "PlaneStride.PlaneStride"),
                )
            )
        for kind, slot, eng, (c, h, w), names in accesses:
            fmt = r[f"{eng}.Fmt.MemFmt"]
            dtype = FORMATS.get(fmt, np.dtype(np.float16))
            row, plane = (r[f"{eng}.{n}"] * ALIGN for n in names)
            base = r[f"{eng}.BaseAddr.Addr"] * ALIGN
            end = base + (c - 1) * plane + (h - 1) * row + -(-w * dtype.itemsize // ALIGN) * ALIGN
            extents[slot] = max(extents.get(slot, 0), end)
            parts.setdefault((slot, kind), []).append((base, (c, h, w), (plane, row, dtype.itemsize), dtype))
            if slot not in found:
                role = "input" if kind == "read" else "output"
                found[slot] = TensorSlot(
                    slot, role, (1, c, h, w), base, (plane, row, dtype.itemsize), dtype, 0
                )
            elif kind == "read" and slot in written and found[slot].role == "output":
                found[slot] = TensorSlot(**{**found[slot].__dict__, "role": "intermediate"})
            if kind == "write":
                written.add(slot)
    out = {}
    for slot, t in sorted(found.items()):
        planned = program.bars.get(slot)
        size = max(extents[slot], (planned.size or 0) if planned is not None else 0, 1)
        fields = {**t.__dict__, "nbytes": size}
        if t.role != "intermediate":
            fields.update(_merge(slot, parts[(slot, "read" if t.role == "input" else "write")]))
        out[slot] = TensorSlot(**fields)
    return out


def _merge(slot: int, accesses: list) -> dict:
    """The one tensor that the parts ``[(base, (C, H, W), strides, dtype)]`` of a slot
    tile: parts in the same layout side by side along channels (or, for one-channel
    parts, rows) with no gap.  Returns TensorSlot fields (``shape``, ``base``), or a
    ``problem`` when the parts do not tile one tensor."""

    def norm(shape, strides, axis=None):  # the stride of a dimension of 1 (or of axis) is moot
        return tuple(0 if n == 1 or i == axis else x for i, (n, x) in enumerate(zip(shape, strides)))

    uniq = sorted(set((b, s, norm(s, st), dt.str) for b, s, st, dt in accesses))
    if len(uniq) == 1:
        return {}
    parts = sorted(set((b, s, st, dt.str) for b, s, st, dt in accesses))
    base0, shape0, strides0, dt0 = parts[0]
    for axis in (0, 1):
        step = strides0[axis]
        if step <= 0 or any(
            dt != dt0
            or st[axis] != step
            or norm(s, st, axis) != norm(shape0, strides0, axis)
            or s[:axis] != shape0[:axis]
            or s[axis + 1 :] != shape0[axis + 1 :]
            or (b - base0) % step
            for b, s, st, dt in parts
        ):
            continue
        lo = min(b for b, *_ in parts)
        # the parts' index ranges along the axis, in order: one tensor when, from 0, each
        # begins where the ones before it reach or earlier (no gap; overlaps allowed)
        spans = sorted(((b - lo) // step, (b - lo) // step + s[axis]) for b, s, *_ in parts if s[axis])
        n, tiled = 0, bool(spans)
        for first, end in spans:
            if first > n:
                tiled = False
                break
            n = max(n, end)
        if tiled:
            shape = list(shape0)
            shape[axis] = n
            return {"shape": (1, *shape), "base": lo}
    return {
        "problem": (
            f"slot {slot} is accessed by several TDs in parts that do not tile one "
            f"tensor ({', '.join(f'{s} at +{b:#x}' for b, s, *_ in uniq)}); submit the "
            f"program and read the region instead"
        )
    }


__all__ = ["Device", "LoadedProgram", "Outputs", "TensorSlot", "tensor_slots"]
