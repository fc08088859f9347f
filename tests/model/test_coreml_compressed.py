"""A palettized Core ML model: its weight stays compressed on the ANE (the model's own
4-bit palette, losslessly), bit for bit the dense model, with fewer KernelDMA bytes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402

import fastane  # noqa: E402

RNG = np.random.default_rng(11)
SHAPE = (64, 64, 3, 3)


def _save(prog, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=ct.target.iOS16,
            compute_precision=ct.precision.FLOAT32,
        )
    m.save(str(path))
    return str(path)


def _pal_and_plain(nbits):
    """A conv by a random ``nbits`` palettized weight of SHAPE, as a palettized program and as
    a dense one of the same values: ``(pal, plain)``."""
    n = int(np.prod(SHAPE))
    idx = RNG.integers(0, 1 << nbits, n)
    bits = ((idx[:, None] >> np.arange(nbits)) & 1).astype(np.uint8).reshape(-1)
    packed = np.packbits(bits, bitorder="little")
    lut = (RNG.standard_normal(1 << nbits) * 0.1).astype(np.float32)
    dense = lut[idx].reshape(SHAPE)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 8, 8))], opset_version=ct.target.iOS16)
    def pal(x):
        w = mb.constexpr_lut_to_dense(indices=packed, lut=lut, shape=np.uint32(SHAPE))
        return mb.relu(x=mb.conv(x=x, weight=w, pad_type="same"))

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 8, 8))], opset_version=ct.target.iOS16)
    def plain(x):
        return mb.relu(x=mb.conv(x=x, weight=dense, pad_type="same"))

    return pal, plain


def test_palettized_coreml_conv_stays_compressed(tmp_path):
    pal, plain = _pal_and_plain(4)

    mp = fastane.load_model(_save(pal, tmp_path / "pal.mlpackage"))
    md = fastane.load_model(_save(plain, tmp_path / "plain.mlpackage"))
    x = RNG.standard_normal((1, 64, 8, 8)).astype(np.float32)
    name = next(iter(mp.graph.inputs))
    rp, rd = mp.report({name: x}), md.report({next(iter(md.graph.inputs)): x})
    (yp,), (yd,) = rp.values.values(), rd.values.values()
    assert np.array_equal(
        np.asarray(yp, np.float16).view(np.uint16), np.asarray(yd, np.float16).view(np.uint16)
    )
    (cp,) = [r for r in rp.layers if r.placement == "ane"]
    (cd,) = [r for r in rd.layers if r.placement == "ane"]
    assert cp.stats.macs == cd.stats.macs
    # 4-bit codes and a 64-byte palette a core, against two bytes a weight
    assert cp.stats.kernel_dma_bytes < 0.3 * cd.stats.kernel_dma_bytes
    # the stats-only report counts the same compressed bytes from the table's shape alone
    so = mp.report({name: x.shape}, stats_only=True)
    (cs,) = [r for r in so.layers if r.placement == "ane"]
    assert cs.stats.kernel_dma_bytes == cp.stats.kernel_dma_bytes
    shapes = fastane.load_model(str(tmp_path / "pal.mlpackage"), weights=False)
    (cw,) = [r for r in shapes.report({name: x.shape}, stats_only=True).layers if r.placement == "ane"]
    assert cw.stats.kernel_dma_bytes == cp.stats.kernel_dma_bytes


def test_the_model_size_is_the_files_and_compressed_weights_stay_so_without_values(tmp_path):
    """``Graph.file_bytes`` is what the package holds on disk (the placement's model-size rule
    reads it: ``predict.stored_bytes``), the palettized model's a quarter of the dense one's
    weights and more; loaded with ``weights=False`` (as ``fastane plan`` loads), the palettized
    weight is still known as stored compressed (``Graph.compressed``, ``code_bits``)."""
    import os

    from fastane.model.placement.predict import stored_bytes

    nbits, n = 4, int(np.prod(SHAPE))
    pal, plain = _pal_and_plain(nbits)

    sizes = {}
    for name, prog in (("pal", pal), ("plain", plain)):
        path = _save(prog, tmp_path / f"{name}.mlpackage")
        on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        g = fastane.load_model(path, weights=False).graph
        assert g.file_bytes == on_disk == stored_bytes(g)
        sizes[name] = g
    # fp32 weights in the dense package (its compute precision): 4 bytes each, the palette's 4 bits
    assert n * 4 < sizes["plain"].file_bytes < n * 4 + 65536
    assert n // 2 < sizes["pal"].file_bytes < n // 2 + 65536
    (w,) = sizes["pal"].compressed
    assert sizes["pal"].code_bits == {w: nbits} and sizes["plain"].compressed == set()
