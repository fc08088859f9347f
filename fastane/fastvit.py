"""Layer shapes of FastViT (Vasu et al. 2023, arXiv 2303.14189) in its inference form, for
the roofline model; :mod:`fastane.workloads` re-exports :func:`fastvit`.

The architecture is apple/ml-fastvit@8af5928 ``models/fastvit.py`` (the variants'
``layers``, ``embed_dims``, ``mlp_ratios``, ``pos_embs``, ``token_mixers``) after
``reparameterize_model``: every MobileOne block, RepMixer and RepCPE is one convolution.

- stem (``convolutional_stem``): 3x3/2 conv, 3x3/2 depthwise, 1x1, each with GELU (the
  activation of ``models/modules/mobileone.py``'s ``MobileOneBlock``);
- RepMixer block: the token mixer, one 3x3 depthwise conv (``RepMixer.reparameterize``
  folds ``x + layer_scale * (mixer(x) - norm(x))`` into it, identity and layer scale
  included); the ConvFFN: 7x7 depthwise conv (its BatchNorm folded), 1x1 expansion with
  GELU, 1x1 projection; the residual add;
- attention block (the last stage of SA/MA): the BatchNorm before the attention folds into
  the QKV projection (an affine map before a linear one); multi-head attention over the
  ``H x W`` tokens in heads of 32 (``MHSA``), written as the transformers of
  :mod:`fastane.workloads` write it (fused QKV, scores, softmax, values, projection; the
  flatten/transpose between the NCHW convolutions and the tokens is not a layer); the
  residual add in the tokens' layout; then the ConvFFN and its residual add in NCHW;
- RepCPE (before the attention stage): one 7x7 depthwise conv with its residual folded in;
- PatchEmbed between stages: a 7x7/2 grouped conv, a group per input channel
  (``models/modules/replknet.py`` ``ReparamLargeKernelConv``: its ``forward`` calls its
  activation and drops the result, so none), then a 1x1 conv with GELU;
- head: ``conv_exp`` (a MobileOne block: 3x3 depthwise conv doubling the channels,
  squeeze-excite, then GELU), global average pool, the 1000-way classifier.

Layer scales: the residual branches' ``layer_scale`` multiplies (``RepMixerBlock``,
``AttentionBlock``) stay per-channel multiplies in the PyTorch inference model; a constant
per-channel scale after a convolution folds into its weights and bias on conversion
(coremltools@c9855b4 ``converters/mil/mil/passes/defs/optimize_conv.py``,
``fuse_conv_scale``), so the ConvFFN's is in its 1x1 projection here.  The attention's
reaches the projection through a transpose and a reshape, where that pass does not look: a
(C, H, W) multiply left out here, as the biases are.

The residual add of a RepMixer block reads, by shape (:func:`fastane.networks.graph`), the
ConvFFN's depthwise output instead of the token mixer's: the two have one shape, so the
same bytes go through DRAM.
"""

from __future__ import annotations

from .convnets import squeeze_excite
from .layers import Conv2d, Eltwise, Matmul, Workload

__all__ = ["fastvit", "FASTVIT"]

#: variant -> (blocks per stage, widths, MLP ratio, attention in the last stage);
#: apple/ml-fastvit@8af5928 models/fastvit.py, ``fastvit_t8`` ... ``fastvit_ma36``
FASTVIT = {
    "t8": ((2, 2, 4, 2), (48, 96, 192, 384), 3, False),
    "t12": ((2, 2, 6, 2), (64, 128, 256, 512), 3, False),
    "s12": ((2, 2, 6, 2), (64, 128, 256, 512), 4, False),
    "sa12": ((2, 2, 6, 2), (64, 128, 256, 512), 4, True),
    "sa24": ((4, 4, 12, 4), (64, 128, 256, 512), 4, True),
    "sa36": ((6, 6, 18, 6), (64, 128, 256, 512), 4, True),
    "ma36": ((6, 6, 18, 6), (76, 152, 304, 608), 4, True),
}
#: ``MHSA(dim, head_dim=32)``
HEAD_DIM = 32


def _dw(name, c, s, k, cout=None, stride=1):
    """A depthwise (a group per input channel) k x k conv on (c, s, s), reading the
    previous layer's output."""
    return Conv2d(name, c, cout or c, s, s, k, k, stride, k // 2, groups=c, follows=True)


def _convffn(L, p, d, s, ratio):
    """ConvFFN on (d, s, s): 7x7 depthwise (BatchNorm folded), 1x1 with GELU, 1x1."""
    L.append(_dw(f"{p}.convffn.conv", d, s, 7))
    L.append(Conv2d(f"{p}.convffn.fc1", d, d * ratio, s, s, activation="gelu", follows=True))
    L.append(Conv2d(f"{p}.convffn.fc2", d * ratio, d, s, s, follows=True))
    L.append(Eltwise(f"{p}.add", "add", (d, s, s), n_inputs=2))


def _attention(L, p, d, s):
    """The token mixer of an attention block on (d, s, s): ``s * s`` tokens, heads of 32."""
    n, heads = s * s, d // HEAD_DIM
    L.append(Matmul(f"{p}.token_mixer.qkv", 1, n, d, 3 * d))
    L.append(Matmul(f"{p}.token_mixer.scores", heads, n, HEAD_DIM, n, weights=False))
    L.append(Eltwise(f"{p}.token_mixer.softmax", "softmax", (heads * n, 1, n), ops_per_out=4))
    L.append(Matmul(f"{p}.token_mixer.values", heads, n, n, HEAD_DIM, weights=False))
    L.append(Matmul(f"{p}.token_mixer.proj", 1, n, d, d, follows=True))
    L.append(Eltwise(f"{p}.token_mixer.add", "add", (d, 1, n), n_inputs=2))


def fastvit(variant: str = "t8", image: int = 256) -> Workload:
    """FastViT-``variant`` (t8, t12, s12, sa12, sa24, sa36, ma36) after reparameterization,
    ``image`` x ``image``, batch 1 (the module docstring has the layers)."""
    if variant not in FASTVIT:
        raise ValueError(f"unknown FastViT variant {variant!r}; known: {', '.join(FASTVIT)}")
    blocks, dims, ratio, attention = FASTVIT[variant]
    c = dims[0]
    L = [Conv2d("patch_embed.0", 3, c, image, image, 3, 3, 2, 1, activation="gelu")]
    s = L[-1].hout
    L.append(Conv2d("patch_embed.1", c, c, s, s, 3, 3, 2, 1, groups=c, activation="gelu", follows=True))
    s = L[-1].hout
    L.append(Conv2d("patch_embed.2", c, c, s, s, activation="gelu", follows=True))
    k = 0  # the index in ``FastViT.network``: [RepCPE,] stage, PatchEmbed, stage, ...
    for i, (n, d) in enumerate(zip(blocks, dims)):
        mix = attention and i == len(blocks) - 1
        if mix:
            L.append(_dw(f"network.{k}.reparam_conv", d, s, 7))
            k += 1
        for b in range(n):
            p = f"network.{k}.{b}"
            if mix:
                _attention(L, p, d, s)
            else:
                L.append(_dw(f"{p}.token_mixer", d, s, 3))
            _convffn(L, p, d, s, ratio)
        k += 1
        if i + 1 < len(blocks):
            L.append(_dw(f"network.{k}.proj.0", d, s, 7, dims[i + 1], stride=2))
            s = L[-1].hout
            L.append(
                Conv2d(f"network.{k}.proj.1", dims[i + 1], dims[i + 1], s, s, activation="gelu", follows=True)
            )
            k += 1
    d = dims[-1]
    L.append(_dw("conv_exp", d, s, 3, 2 * d))
    squeeze_excite(L, "conv_exp.se", 2 * d, s, 2 * d // 16, "sigmoid", then="gelu")
    L.append(Eltwise("gap", "avgpool", (2 * d, s, s), (2 * d, 1, 1), ops_per_out=s * s))
    L.append(Matmul("head", 1, 1, 2 * d, 1000))
    return Workload(
        f"fastvit-{variant}",
        f"FastViT-{variant.upper()} (reparameterized), {image}x{image}, batch 1",
        tuple(L),
        source="Vasu et al. 2023 (arXiv 2303.14189); apple/ml-fastvit models/fastvit.py",
    )
