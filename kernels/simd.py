"""How wide the kernels' vector loops are: :func:`wide_vectors`.

On a CPU with AVX-512, LLVM vectorizes a loop 256 bits wide unless its function asks for
more: its tuning for Intel's cores since Skylake-SP (``prefer-256-bit``) keeps 512-bit
vectors out of code that did not ask, to spare the clock of a core that runs them
briefly.  fastane's hot loops are long and vector-bound (the MAC's FMA, int32 add and
fp16 decode per multiply-add; the NE's and planar engine's rows), so the kernels that
run them ask, with one call of :func:`wide_vectors` where the loops are compiled.

Measured on an Intel Xeon with AVX-512 (LLVM: ``rocketlake``), 2 cores, the same output
bits; processes of the two codes alternated, 2-3 rounds, medians: a 1024^3
``fastane.matmul`` 27.4-29.0 -> 24.1-26.5 ms; 64 x 2048 x 2048 with the weights resident
9.2-9.9 -> 7.9-8.4 ms (64 x 4096 x 4096 42.6-42.7 -> 36.3-37.7); a ResNet-50 224 x 224
forward 176-180 -> 154-162 ms; ``fastane.relu`` of 2^20 elements 0.76-0.81 -> 0.60-0.73
ms.  A CPU without AVX-512
has no wider vectors to give: its machine code does not change.  Not measured on AMD's
cores with AVX-512.
"""

from numba import types
from numba.extending import intrinsic

__all__ = ["wide_vectors", "VECTOR_ATTRIBUTE"]

#: the LLVM function attribute :func:`wide_vectors` sets (clang's ``-mprefer-vector-width=512``)
VECTOR_ATTRIBUTE = '"prefer-vector-width"="512"'


@intrinsic
def wide_vectors(typingctx):
    """``wide_vectors()`` (nopython, no result): the function being compiled where the call
    stands -- a kernel, a thread function called through its address
    (:func:`fastane.kernels.parallel.call_native`), or inside a ``prange`` loop the
    parallel region's body -- vectorizes its loops up to 512 bits wide: its own loops and
    those of its ``inline="always"`` helpers (Numba's IR-level copies).  A plain ``njit``
    callee is optimized in its own library before LLVM inlines it: it needs its own call.
    A cached kernel does not see this module change (docs/architecture.md, "A cached
    kernel does not see its callees change").

    llvmlite's attribute set admits only LLVM's keyword attributes; a string attribute is
    added past that check and printed as it is (the same from llvmlite 0.42 on).  Where
    the set is not a ``set`` (a future llvmlite), the hint is left out: the code stays
    the same, only narrower."""

    def codegen(context, builder, signature, args):
        attributes = builder.function.attributes
        if isinstance(attributes, set):
            set.add(attributes, VECTOR_ATTRIBUTE)
        return context.get_dummy_value()

    return types.none(), codegen
