"""The op vocabulary of model graphs: one registry (:mod:`.opdef`: :class:`OpDef`, :data:`OPS`,
:func:`host_eval`) and the op families that register in it.

- :mod:`.opdef`: the registry, the checks every op's inference shares, :func:`host_eval`;
- :mod:`.core`: unary, binary, normalisation, softmax, reduction and pooling ops;
- :mod:`.mac`: matmul, gemm, conv, batchnorm, conv_transpose (and their geometry);
- :mod:`.layout`: flatten, reshape, transpose, squeeze, concat, slice, pad, ...;
- :mod:`.index`: gather, scatter, tile, split, depth/space moves (host);
- :mod:`.resize`: resize and upsample (host);
- :mod:`.quant`: quantize and dequantize (ONNX QDQ), dynamic quantization and the integer
  products;
- :mod:`.recurrent`: LSTM, GRU, RNN (host);
- :mod:`.host`: the other ops fastane runs only on the host.

Importing this package registers every op.
"""

from __future__ import annotations

# registered in this order (the order of OPS): host, mac, index, layout, quant, resize, recurrent, core
from . import host, mac, index, layout, quant, resize, recurrent  # noqa: F401
from .core import pool_geometry
from .mac import bn_affine, conv_geometry, deconv_geometry
from .opdef import OPS, OpDef, host_eval

__all__ = ["OpDef", "OPS", "host_eval", "conv_geometry", "deconv_geometry", "bn_affine", "pool_geometry"]
