"""The Stable Diffusion 2.1 base UNet as Apple's ml-stable-diffusion converts it for the ANE
(attention ``SPLIT_EINSUM_V2``), for the roofline model: layer shapes only, fp16.

:func:`sd21_unet` builds it; :mod:`fastane.workloads` re-exports it and registers
``sd21-unet`` (one denoising step, batch 2 for classifier-free guidance, 64 x 64 latents,
77 text tokens: the step apple/ml-stable-diffusion's README benchmarks).

The architecture, from apple/ml-stable-diffusion@e12202c1f6405b83918b58a5d097cd61e3e1f702
``python_coreml_stable_diffusion/unet.py``:

- ``UNet2DConditionModel``: ``conv_in`` (3x3, 4 -> 320), the time embedding
  (``Timesteps`` sinusoid of 320, then ``TimestepEmbedding``: ``linear_1`` 320 -> 1280,
  SiLU, ``linear_2`` 1280 -> 1280, both ``nn.Conv2d(..., kernel_size=1)``), four down
  blocks, ``UNetMidBlock2DCrossAttn``, four up blocks of ``layers_per_block + 1``
  ResNets, ``conv_norm_out`` (GroupNorm 32), SiLU, ``conv_out`` (3x3, 320 -> 4).  The
  down/up blocks pass ``attn_num_head_channels=attention_head_dim[i]`` to
  ``SpatialTransformer(out_channels, n_heads, out_channels // n_heads)``: SD 2.x's
  ``attention_head_dim`` is a head *count* per level, heads of 64 channels.  An up
  ResNet's input is ``torch.cat([hidden_states, res_hidden_states], dim=1)``, with
  ``res_skip_channels = in_channels if i == num_layers - 1 else out_channels``.
- ``ResnetBlock2D.forward``: ``norm1`` (GroupNorm 32), SiLU, ``conv1`` (3x3);
  ``time_emb_proj(nonlinearity(temb))`` (a 1x1 conv, temb -> out) added; ``norm2``,
  SiLU, ``conv2`` (3x3); ``conv_shortcut`` (1x1) when in != out; ``x + hidden_states``.
- ``SpatialTransformer``: GroupNorm 32, ``proj_in`` (1x1 conv, on (B, C, H, W)), a view
  to (B, C, 1, H*W), the ``BasicTransformerBlock``, the view back, ``proj_out`` (1x1
  conv), ``+ residual``.  ``use_linear_projection=True`` is ignored ("`use_linear_projection=True`
  is ignored!"): the projections are 1x1 convs, the same weights.
- ``BasicTransformerBlock``: ``attn1(norm1(x)) + x``, ``attn2(norm2(x), context) + x``,
  ``ff(norm3(x)) + x``, each norm ``LayerNormANE`` (mean over the channels of (B, C, 1,
  S)).  ``CrossAttention``: ``to_q``/``to_k``/``to_v`` ``nn.Conv2d(..., kernel_size=1,
  bias=False)``, ``to_out`` a 1x1 conv with bias.  ``FeedForward(dim, mult=4, glu=True)``:
  ``GEGLU.proj`` (1x1 conv, dim -> 2 x 4 dim), ``hidden_states, gate = ...chunk(2,
  dim=1)``, ``hidden_states * F.gelu(gate)``, then a 1x1 conv 4 dim -> dim.
- ``Upsample2D``: ``F.interpolate(x, scale_factor=2.0, mode="nearest")`` then a 3x3 conv;
  ``Downsample2D``: a 3x3 conv, stride 2, padding 1.

The attention, ``python_coreml_stable_diffusion/attention.py`` (same commit):
``split_einsum_v2`` slices ``q`` per head (``q[:, head_idx * dim_head:(head_idx + 1) *
dim_head, :, :]``) and each head's queries into ``num_chunks = query_seq_length //
CHUNK_SIZE`` chunks of ``CHUNK_SIZE = 512``; per head and chunk one einsum
``"bchq,bkhc->bkhq"`` (the scores, keys x chunk), a softmax over the keys, one einsum
``"bkhq,bchk->bchq"`` (the values).  Under 512 queries it falls back to ``split_einsum``:
the same per head, without chunks.

The SD 2.1 base configuration (huggingface.co/stabilityai/stable-diffusion-2-1-base
``unet/config.json``, as copied with ``"_name_or_path": "stabilityai/stable-diffusion-2-1-base"``
at huggingface.co/MirageML/ScoobyDoo/blame/main/unet/config.json): ``"block_out_channels":
[320, 640, 1280, 1280]``, ``"layers_per_block": 2``, ``"attention_head_dim": [5, 10, 20,
20]``, ``"cross_attention_dim": 1024``, ``"use_linear_projection": true``,
``"norm_num_groups": 32``, ``"sample_size": 64``, three ``CrossAttnDownBlock2D`` then a
``DownBlock2D``, an ``UpBlock2D`` then three ``CrossAttnUpBlock2D``.

How each part is written with the layer types of :mod:`fastane.layers` (those that
:func:`fastane.networks.graph` turns into model ops):

- every 1x1 conv of Apple's model (``to_q``/``k``/``v``/``out``, the FF, ``proj_in``/
  ``proj_out``, the shortcut, the time embedding) is a :class:`~fastane.layers.Conv2d`
  on its (C, H, W) or (C, 1, S) input, as Core ML receives it;
- GroupNorm and LayerNorm are an ``Eltwise("layernorm")`` over the tensor (the graph has
  no group-norm op: the same mean, variance and scale passes over the same elements,
  normalized over the channels rather than over 32 groups of channels x positions);
- a SiLU after a norm is an ``Eltwise("mul")`` of two operands (``x * sigmoid(x)``: the
  planar multiply; the graph has no standalone SiLU, so the sigmoid table pass is not
  counted and the second read of ``x`` is); the time embedding's SiLUs are fused into
  ``linear_1`` and ``linear_2`` (every reader of ``linear_2``'s output applies SiLU to it
  first);
- the time-embedding add is a two-operand ``Eltwise("add")`` of the ResNet's shape (the
  per-channel operand counted as a full tensor);
- GEGLU's projection is two :class:`~fastane.layers.Conv2d` of 4 x dim outputs (the
  ``hidden_states`` half, the ``gate`` half with the GELU fused), then an
  ``Eltwise("mul")``, as the workloads' gated feed-forward is written; same MACs and
  weights as one projection to 8 x dim, the input read twice;
- attention: per head and per 512-query chunk (per head only, under 512 queries) a
  :class:`~fastane.layers.Matmul` ``(chunk x 64) @ (64 x keys)`` with the keys as its
  right operand, an ``Eltwise("softmax")``, a ``Matmul`` ``(chunk x keys) @ (keys x 64)``
  with the values as its right operand, in ``split_einsum_v2``'s order (every score
  einsum, every softmax, every value einsum); self-attention's keys are the tokens,
  cross-attention's the 77 text tokens (``to_k``/``to_v``: 1024 -> C on 77 positions,
  per cross-attention, as the model computes them).  The graph wires a layer to the
  latest output of its input's shape; at 64 tokens (the middle block) queries, scores
  and values are all 64 x 64, so it chains each head's einsum to the previous head's
  (38 intermediates of 8 KiB kept in L2 an image: 0.01 ms of the m1 estimate);
- not layers: the sinusoidal ``Timesteps`` (320 values from sin/cos of the timestep),
  the views, the per-head slices and the concatenation of the heads (layout), the skip
  concatenations (their readers, the up ResNet's norm and shortcut, read the
  concatenated tensor; no copy is counted) and the nearest 2x upsampling (the graph has
  no resize op; the 3x3 conv after it reads the upsampled tensor; its write, 1280 x 16 x
  16, 1280 x 32 x 32 and 640 x 64 x 64 elements an image, is not counted).

Batch: ``batch`` images in one program, each image's layers in turn (named
``image<i>.<layer>``), as the DistilBERT batch-2 validation point repeats its tasks
(:data:`fastane.roofline.validate.VALIDATION` C2): every weight is read once per image.
Biases are not modelled (the workloads' convention).
"""

from __future__ import annotations

from dataclasses import replace

from .layers import Conv2d, Eltwise, Matmul, Workload

__all__ = ["sd21_unet", "CHUNK", "TEXT_TOKENS", "TEXT_DIM"]

#: SPLIT_EINSUM_V2's query chunk (attention.py ``CHUNK_SIZE = 512``)
CHUNK = 512
#: the text tokens the model is converted for (``tokenizer.model_max_length``) and their width
TEXT_TOKENS, TEXT_DIM = 77, 1024
_CHANNELS = (320, 640, 1280, 1280)  # block_out_channels
_HEADS = (5, 10, 20, 20)  # attention_head_dim: heads per level (64 channels each)
_LAYERS = 2  # layers_per_block
_TEMB = 4 * _CHANNELS[0]  # time_embed_dim = block_out_channels[0] * 4


def _norm_silu(L, p, c, s):
    """GroupNorm 32 then SiLU on a (c, s, s) tensor."""
    L.append(Eltwise(p, "layernorm", (c, s, s), ops_per_out=4))
    L.append(Eltwise(f"{p}.silu", "mul", (c, s, s), n_inputs=2))


def _resnet(L, p, cin, cout, s):
    """``ResnetBlock2D`` of a (cin, s, s) input."""
    _norm_silu(L, f"{p}.norm1", cin, s)
    L.append(Conv2d(f"{p}.conv1", cin, cout, s, s, 3, 3, 1, 1))
    L.append(Conv2d(f"{p}.time_emb_proj", _TEMB, cout, 1, 1))
    L.append(Eltwise(f"{p}.temb_add", "add", (cout, s, s), n_inputs=2))
    _norm_silu(L, f"{p}.norm2", cout, s)
    L.append(Conv2d(f"{p}.conv2", cout, cout, s, s, 3, 3, 1, 1))
    if cin != cout:
        L.append(Conv2d(f"{p}.conv_shortcut", cin, cout, s, s))
    L.append(Eltwise(f"{p}.residual", "add", (cout, s, s), n_inputs=2))


def _attention(L, p, c, heads, seq, keys, kv_dim):
    """``CrossAttention`` on (c, 1, seq) with ``keys`` keys of ``kv_dim`` channels (the
    tokens themselves when ``kv_dim`` is None), its einsums split as SPLIT_EINSUM_V2."""
    hd = c // heads
    L.append(Conv2d(f"{p}.to_q", c, c, 1, seq))
    L.append(Conv2d(f"{p}.to_k", kv_dim or c, c, 1, keys))
    L.append(Conv2d(f"{p}.to_v", kv_dim or c, c, 1, keys))
    chunks = seq // CHUNK
    if chunks and seq % CHUNK:
        raise ValueError(
            f"{p}: {seq} queries are not a multiple of the {CHUNK}-query chunk "
            "(split_einsum_v2 would drop the rest)"
        )
    m = CHUNK if chunks else seq
    parts = [f"{p}.h{h}" + (f".c{k}" if chunks else "") for h in range(heads) for k in range(max(chunks, 1))]
    # in split_einsum_v2's order: every score einsum, every softmax, every value einsum
    L.extend(Matmul(f"{q}.scores", 1, m, hd, keys, weights=False) for q in parts)
    L.extend(Eltwise(f"{q}.softmax", "softmax", (m, 1, keys), ops_per_out=4) for q in parts)
    L.extend(Matmul(f"{q}.values", 1, m, keys, hd, weights=False) for q in parts)
    L.append(Conv2d(f"{p}.to_out", c, c, 1, seq))


def _transformer(L, p, c, heads, s):
    """``SpatialTransformer`` (one ``BasicTransformerBlock``) on a (c, s, s) input."""
    seq = s * s
    L.append(Eltwise(f"{p}.norm", "layernorm", (c, s, s), ops_per_out=4))
    L.append(Conv2d(f"{p}.proj_in", c, c, s, s))
    b = f"{p}.transformer_blocks.0"
    for i, (name, kv) in enumerate((("attn1", None), ("attn2", TEXT_DIM)), start=1):
        L.append(Eltwise(f"{b}.norm{i}", "layernorm", (c, 1, seq), ops_per_out=4))
        _attention(L, f"{b}.{name}", c, heads, seq, TEXT_TOKENS if kv else seq, kv)
        L.append(Eltwise(f"{b}.{name}.residual", "add", (c, 1, seq), n_inputs=2))
    L.append(Eltwise(f"{b}.norm3", "layernorm", (c, 1, seq), ops_per_out=4))
    inner = 4 * c
    L.append(Conv2d(f"{b}.ff.geglu.proj.hidden", c, inner, 1, seq))
    L.append(Conv2d(f"{b}.ff.geglu.proj.gate", c, inner, 1, seq, activation="gelu"))
    L.append(Eltwise(f"{b}.ff.geglu.mul", "mul", (inner, 1, seq), n_inputs=2))
    L.append(Conv2d(f"{b}.ff.out", inner, c, 1, seq))
    L.append(Eltwise(f"{b}.ff.residual", "add", (c, 1, seq), n_inputs=2))
    L.append(Conv2d(f"{p}.proj_out", c, c, s, s))
    L.append(Eltwise(f"{p}.residual", "add", (c, s, s), n_inputs=2))


def _image(latent: int) -> list:
    """The layers of one image's step on a ``latent`` x ``latent`` latent."""
    L = [
        Conv2d("time_embedding.linear_1", _CHANNELS[0], _TEMB, 1, 1, activation="silu"),
        Conv2d("time_embedding.linear_2", _TEMB, _TEMB, 1, 1, activation="silu", follows=True),
        Conv2d("conv_in", 4, _CHANNELS[0], latent, latent, 3, 3, 1, 1),
    ]
    s, c = latent, _CHANNELS[0]
    skips = [(c, s)]  # (channels, side) of down_block_res_samples
    for i, (cout, heads) in enumerate(zip(_CHANNELS, _HEADS)):
        attn = i < 3  # three CrossAttnDownBlock2D, then a DownBlock2D
        for j in range(_LAYERS):
            _resnet(L, f"down_blocks.{i}.resnets.{j}", c, cout, s)
            c = cout
            if attn:
                _transformer(L, f"down_blocks.{i}.attentions.{j}", c, heads, s)
            skips.append((c, s))
        if i < 3:
            L.append(Conv2d(f"down_blocks.{i}.downsamplers.0.conv", c, c, s, s, 3, 3, 2, 1))
            s = L[-1].hout
            skips.append((c, s))
    _resnet(L, "mid_block.resnets.0", c, c, s)
    _transformer(L, "mid_block.attentions.0", c, _HEADS[-1], s)
    _resnet(L, "mid_block.resnets.1", c, c, s)
    for i, (cout, heads) in enumerate(zip(reversed(_CHANNELS), reversed(_HEADS))):
        for j in range(_LAYERS + 1):
            skip, _ = skips.pop()
            _resnet(L, f"up_blocks.{i}.resnets.{j}", c + skip, cout, s)
            c = cout
            if i > 0:  # an UpBlock2D, then three CrossAttnUpBlock2D
                _transformer(L, f"up_blocks.{i}.attentions.{j}", c, heads, s)
        if i < 3:  # nearest 2x (not a layer), then the conv at twice the side
            s *= 2
            L.append(Conv2d(f"up_blocks.{i}.upsamplers.0.conv", c, c, s, s, 3, 3, 1, 1))
    _norm_silu(L, "conv_norm_out", c, s)
    L.append(Conv2d("conv_out", c, 4, s, s, 3, 3, 1, 1))
    return L


def sd21_unet(batch: int = 2, latent: int = 64) -> Workload:
    """One denoising step of the SD 2.1 base UNet (ANE layout, SPLIT_EINSUM_V2) on
    ``batch`` latents of 4 x ``latent`` x ``latent`` (64: 512 x 512 images), attending to
    77 text tokens of 1024 channels; the layers of each image in turn, one program."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if latent < 8 or latent % 8:
        raise ValueError(f"latent must be a positive multiple of 8 (three 2x downsamplings), got {latent}")
    one = _image(latent)
    layers = one if batch == 1 else [replace(x, name=f"image{i}.{x.name}") for i in range(batch) for x in one]
    return Workload(
        "sd21-unet" if (batch, latent) == (2, 64) else f"sd21-unet-b{batch}-{latent}",
        f"Stable Diffusion 2.1 base UNet, one step, batch {batch}, latent 4x{latent}x{latent}, "
        f"{TEXT_TOKENS} text tokens (ANE layout, SPLIT_EINSUM_V2)",
        tuple(layers),
        source="apple/ml-stable-diffusion@e12202c unet.py, attention.py; "
        "stabilityai/stable-diffusion-2-1-base unet/config.json",
    )
