"""The parallel primitives every kernel shares: a work queue on Numba's threads.

A parallel kernel hands its tasks out through a shared counter (an int64 array of one
element, zero to start): each of the :func:`workers` ``prange`` iterations (one per
thread) loops on ``t = claim(counter)`` and does task ``t`` until ``t`` reaches the task
count; every task writes its own outputs only.

A work-queue kernel makes its counter with :func:`new_queue` (a ``np.zeros`` in a
parallel function is a parallel region of its own) and keeps its ``prange`` body to one
call of a plain function, the thread's loop over its tasks.  Numba links a callee's
code into its caller, where LLVM optimizes and compiles it again: a parallel region's
body was compiled three times over (the region, its gufunc wrapper, the kernel), one to
two seconds of a cold compile for each kernel.  :func:`call_native` calls the thread's
function through its address instead (:func:`native_entry`): its code is compiled once,
and the parallel kernel around it costs what a trivial one does (``dma.unfold_f16``:
4.1 -> 2.4 s of a cold compile; ``mac_f32._fast32_rne``: 3.5 -> 1.7 s; the same speed).
A thread function whose vectorized loops read and write several arrays (the MAC's
tiles) compiles with :class:`NoAliasCompiler`, as a parallel region's body does: without
it, the tiles ran 3-4% slower than inlined into the region.  (``ne.readout_fast``'s
kernels still call theirs as plain functions.)

Numba's own ``prange`` split is static; on a shared machine where one thread loses its
core for a while, the other threads then do the remaining tasks instead of waiting for
it.  Small work runs on the calling thread alone (:func:`threads_for`): a parallel region
costs a thread hand-off, and a worker thread waiting for a core can hold the whole call
up for a scheduler slice.

Numba's threading layer is TBB when it is installed (:data:`TBB`, the library this
module loads for Numba; docs/architecture.md says why TBB).

* ``new_queue() -> int64[1]`` (nopython): a work queue's counter, zero; ``QUEUE``: a
  value of its type, for :func:`native_entry`;
* ``call_native(fn, entry, args)`` (nopython): ``fn(*args)`` through ``entry``, the
  address :func:`native_entry` gives for ``fn`` and the types of ``args`` (a tuple);
* ``native_entry(fn, *args) -> int`` (Python): that address, for values of the types
  the kernel passes (compiles ``fn`` for them, or loads it from the cache, once);
* ``NoAliasCompiler``: ``njit(pipeline_class=NoAliasCompiler, error_model="numpy")``
  compiles a thread body as Numba compiles a parallel region's (its arrays ``noalias``);
* ``claim(counter: int64[1]) -> int64`` (nopython): ``counter[0] += 1`` atomically,
  returns the value before;
* ``workers() -> int`` (Python): the worker count to pass to a work-queue kernel;
* ``threads_for(work: int, serial_below: int)`` (Python context manager): one thread
  inside when ``work < serial_below``;
* ``nan_max(m: float, v: float) -> float`` (nopython): ``max(m, v)`` where a NaN, once
  seen, stays;
* ``TBB: str | None``: the path of the TBB library loaded for Numba, None when none was.
"""

import contextlib
import ctypes
import os
import sys
import sysconfig

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils, typing
from numba.core.compiler import Compiler
from numba.extending import intrinsic

__all__ = [
    "NoAliasCompiler",
    "new_queue",
    "QUEUE",
    "claim",
    "call_native",
    "native_entry",
    "workers",
    "threads_for",
    "nan_max",
    "TBB",
]


def _load_tbb() -> str | None:
    """Load the TBB runtime that ``pip install tbb`` put in the environment's ``lib``
    directory, where the dynamic linker does not look (numba/numba#6108), so that Numba's
    default search finds its first choice of threading layer: the path loaded, or None.

    Why TBB and not OpenMP: a TBB worker that runs out of work spins a while, yielding its
    core to any thread that wants it, then sleeps; a passive OpenMP worker sleeps at once
    and every parallel region then waits for it to wake (docs/architecture.md, "Numba's
    threads").  A user's ``NUMBA_THREADING_LAYER`` is kept; without the library, Numba
    falls back to OpenMP (passive, fastane/__init__.py)."""
    if os.environ.get("NUMBA_THREADING_LAYER", "default") not in ("default", "tbb"):
        return None
    name = {"linux": "libtbb.so.12", "darwin": "libtbb.12.dylib"}.get(sys.platform)
    if name is None:
        return None
    for scheme in (sysconfig.get_default_scheme(), f"{os.name}_user"):  # a venv or prefix; --user
        path = os.path.join(sysconfig.get_path("data", scheme), "lib", name)
        if os.path.exists(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            return path
    return None


#: the TBB runtime loaded for Numba's threading layer (None: not found, or not wanted)
TBB = _load_tbb()


@njit(cache=True)
def new_queue():
    """A work queue's counter: int64[1], zero (no task claimed yet)."""
    return np.zeros(1, np.int64)


#: a value of the type :func:`new_queue` makes, for :func:`native_entry` (the counter a
#: thread function gets from its parallel kernel)
QUEUE = np.zeros(1, np.int64)


@intrinsic
def claim(typingctx, counter):
    """``claim(counter)``: ``counter[0] += 1`` atomically (``counter`` an int64 array);
    returns the value before, an int64 (the task index this thread takes)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", ptr, context.get_constant(types.int64, 1), "monotonic")

    return types.int64(counter), codegen


@intrinsic
def call_native(typingctx, fn, entry, args):
    """``call_native(fn, entry, args)``: ``fn(*args)`` (``fn`` a Numba dispatcher, a global
    of the caller; ``args`` a tuple) through ``entry`` (an int64), the native entry of
    ``fn``'s specialization for exactly the types of ``args`` (:func:`native_entry`; any
    other address is undefined behaviour).  Typing compiles that specialization (it is
    ``fn``'s own, shared with every other caller); unlike a plain call, nothing of it is
    linked into the caller.  Returns what ``fn`` returns.  An exception ``fn`` raises
    propagates to a serial caller; inside a ``prange`` loop Numba reports it as a
    ``SystemError``, as it does for a plain call there."""
    if not (
        isinstance(fn, types.Dispatcher)
        and isinstance(entry, types.Integer)
        and isinstance(args, types.BaseTuple)
    ):
        return None
    if any(isinstance(t, (types.Omitted, types.StarArgTuple)) for t in args.types):
        return None
    # the specialization for the plain types (a literal constant in ``args`` types as its
    # non-literal type, as numba.typeof gives it to native_entry)
    callee = typingctx.resolve_function_type(fn, tuple(types.unliteral(t) for t in args.types), {})
    if callee is None or len(callee.args) != len(args.types):  # defaults or *args: not supported
        return None

    def codegen(context, builder, signature, llargs):
        tup = llargs[2]
        values = [
            context.cast(builder, builder.extract_value(tup, i), have, want)
            for i, (have, want) in enumerate(zip(args.types, callee.args))
        ]
        fnty = context.call_conv.get_function_type(callee.return_type, callee.args)
        address = context.cast(builder, llargs[1], entry, types.intp)
        fnptr = builder.inttoptr(address, fnty.as_pointer())
        status, result = context.call_conv.call_function(
            builder, fnptr, callee.return_type, callee.args, values
        )
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return typing.signature(callee.return_type, fn, entry, args), codegen


class NoAliasCompiler(Compiler):
    """Numba's compiler for a work-queue kernel's thread body (``njit(pipeline_class=...)``,
    with ``error_model="numpy"``), called through :func:`call_native`: its array arguments
    are declared ``noalias`` (no two of them overlap where one is written), as Numba
    declares a parallel region's when it finds no aliases -- the vectorized loops then need
    no overlap checks.  Only for functions whose callers never pass overlapping arrays."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state.flags.noalias = True


#: the bits of ``ndarray.flags.num`` that decide an array's Numba type (besides its
#: dtype and ndim): C_CONTIGUOUS, F_CONTIGUOUS (the layout) and WRITEABLE (readonly)
_TYPE_FLAGS = 0x1 | 0x2 | 0x400
_ENTRIES: dict = {}


def _type_key(v):
    """What of ``v`` decides ``numba.typeof(v)``, cheaply for the kinds the kernels pass
    (0.15 us for an array, against 5.6 for ``typeof`` itself): plain arrays, tuples and
    scalars of the builtin and numpy number types; any other value (a subclass, a record,
    a datetime, a list, a named tuple) is keyed by its Numba type."""
    t = type(v)
    if t is np.ndarray:
        return (v.dtype, v.ndim, v.flags.num & _TYPE_FLAGS)
    if t is tuple:
        if all(type(x) is int for x in v):  # a tuple of sizes (one test instead of one each)
            return (tuple, len(v), not v or (-(2**63) <= min(v) and max(v) < 2**63))
        return (tuple, *map(_type_key, v))
    if t is int:
        return (int, -(2**63) <= v < 2**63)  # int64, else typed by value
    if t is float or t is bool or t in _NUMPY_SCALARS:
        return t
    return numba.typeof(v)


#: numpy scalar types whose Numba type is the type's alone
_NUMPY_SCALARS = frozenset(
    np.dtype(c).type for c in ("?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d")
)


def native_entry(fn, *args) -> int:
    """The address of the native entry of dispatcher ``fn``'s specialization for the types
    of the values ``args`` (what :func:`call_native` calls): compiled, or loaded from the
    cache, on first use, then kept per ``fn`` and argument types, with the compiled result
    (Numba never unmaps compiled code, so the address stays valid; after a ``recompile()``
    of ``fn`` it still runs the code compiled first: fastane's kernels do not recompile).
    A kept address costs about 3 us to find (looking in ``fn.overloads`` would cost 5
    more: Numba's types hash themselves anew each time)."""
    key = (fn, *map(_type_key, args))
    hit = _ENTRIES.get(key)
    if hit is not None:
        return hit[1]
    sig = tuple(numba.typeof(a) for a in args)
    fn.compile(sig)
    cres = fn.overloads[sig]
    entry = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    _ENTRIES[key] = (cres, entry)
    return entry


def workers() -> int:
    """Worker count for the kernels' work queues: Numba's current thread count."""
    return numba.get_num_threads()


@contextlib.contextmanager
def threads_for(work: int, serial_below: int):
    """Within the block, Numba's kernels run on the calling thread alone when
    ``work < serial_below`` (the caller's measure of the work, e.g. multiply-adds);
    otherwise on Numba's current thread count.  The previous count is restored."""
    if work >= serial_below:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(old)


@njit
def nan_max(m, v):
    """``max(m, v)`` where a NaN, once seen, stays (``v > m`` is False for NaN either side).
    A plain call, which LLVM inlines (one select): not Numba's IR-level copy at each of the
    bounds' nine call sites."""
    return v if (v > m or v != v) else m
