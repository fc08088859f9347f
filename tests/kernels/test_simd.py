"""fastane.kernels.simd.wide_vectors: the function where the call stands carries LLVM's
``prefer-vector-width`` attribute (a plain function, and the body of a ``prange`` loop),
its code still computes what it did, the hot kernels ask for it, and on a CPU with
AVX-512 the MAC's thread function runs 512-bit vectors."""

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from numba import njit, prange

from fastane.kernels import mac_f32, simd


@njit(boundscheck=False)
def _scaled_sum(x, y):
    simd.wide_vectors()
    s = np.int32(0)
    for i in range(x.size):
        y[i] = x[i] * np.float32(3.0)
        s += np.int32(x[i])
    return s


@njit(parallel=True)
def _rows(x, y):
    for r in prange(x.shape[0]):
        simd.wide_vectors()
        for i in range(x.shape[1]):
            y[r, i] = x[r, i] + np.float32(1.0)


def _attributed(ir: str) -> list[str]:
    """The names of the functions defined in ``ir`` that carry the attribute, inline or
    through an attribute group (``#N``, as LLVM's optimized IR prints them)."""
    groups = set(re.findall(r"^attributes (#\d+) = \{[^}]*" + re.escape(simd.VECTOR_ATTRIBUTE), ir, re.M))
    names = []
    for line in ir.splitlines():
        if not line.startswith("define "):
            continue
        name = re.search(r"@(\"[^\"]+\"|[\w.$]+)\(", line).group(1)
        tail = line[line.rindex(")") :]
        if simd.VECTOR_ATTRIBUTE in tail or set(re.findall(r"#\d+", tail)) & groups:
            names.append(name)
    return names


def test_the_calling_function_carries_the_attribute_and_computes_the_same():
    x = np.arange(1000, dtype=np.float32)
    y = np.empty_like(x)
    assert _scaled_sum(x, y) == int(x.sum())
    np.testing.assert_array_equal(y, x * np.float32(3.0))
    (ir,) = _scaled_sum.inspect_llvm().values()
    assert any("_scaled_sum" in name for name in _attributed(ir))


def _library_names(library) -> list[str]:
    """:func:`_attributed` over a compiled function's code library and those linked into
    it (a parallel region's body is a library of its own; ``_linking_libraries`` is
    Numba's)."""
    names = _attributed(library.get_llvm_str())
    for linked in getattr(library, "_linking_libraries", ()):
        names += _library_names(linked)
    return names


def test_a_parallel_loop_body_carries_the_attribute():
    x = np.arange(64 * 33, dtype=np.float32).reshape(64, 33)
    y = np.empty_like(x)
    _rows(x, y)
    np.testing.assert_array_equal(y, x + np.float32(1.0))
    (cres,) = _rows.overloads.values()
    assert any("__numba_parfor_gufunc" in name for name in _library_names(cres.library))


#: the kernels' modules and how many functions in each ask for wide vectors
_CALLERS = {"mac_f32": 1, "mac_skinny": 2, "mac_fast": 1, "ne": 2, "dma": 1, "ne_table": 2, "planar_f32": 1}


def test_the_hot_kernels_ask_for_wide_vectors():
    kernels = Path(simd.__file__).parent
    for module, n in _CALLERS.items():
        tree = ast.parse((kernels / f"{module}.py").read_text())
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "wide_vectors"
        ]
        assert len(calls) == n, module


def _avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not _avx512(), reason="512-bit vectors need a CPU with AVX-512 (avx512f)")
def test_the_mac_thread_function_runs_512_bit_vectors():
    """The MAC's thread function compiled afresh (not from the cache, whose code cannot be
    inspected) with its own options: its machine code uses the 512-bit registers."""
    rows32 = mac_f32._rows32_rne
    options = {k: v for k, v in rows32.targetoptions.items() if k != "nopython"}  # njit's own
    fresh = njit(**{**options, "cache": False})(rows32.py_func)
    a = np.ones((1, 8, 8))
    bq = np.ones((1, 8, 32), np.uint16)
    ia = np.zeros(1, np.int64)
    ia.flags.writeable = False
    rb, ri = np.zeros(8, np.int64), np.arange(8, dtype=np.int64)
    fresh(a, bq, ia, ia, rb, ri, np.empty((1, 8, 32), np.int32), 8, 32, 8, np.zeros(1, np.int64))
    (asm,) = fresh.inspect_asm().values()
    assert "zmm" in asm
