"""Layer shapes of reference models (no weights), for the roofline model.

Every layer is a :class:`Conv2d`, :class:`Matmul` or :class:`Eltwise` (the types, and
what each field means, are in :mod:`fastane.layers`; this module re-exports them).
:func:`fastane.networks.graph` writes a workload as a model graph (shapes only), which
``fastane roofline`` plans as it plans a model file.

The convolutional networks are built in :mod:`fastane.convnets`, FastViT in
:mod:`fastane.fastvit`, the Stable Diffusion UNet in :mod:`fastane.unet` (all re-exported
here), the transformers below.  A :class:`Workload` is a named tuple of layers; :func:`get` and
:func:`names` look them up.  The per-task plan of a workload (how it splits into task
descriptors) is :func:`fastane.networks.plan.analyze`'s.

Conventions (stated once here, repeated in ``docs/roofline.md``):

- fp16 everywhere (2 bytes an element, weights included).
- Transformers: activations are laid out (C = hidden, H = 1, W = tokens).  "decode" is
  one new token attending to a KV cache of ``kv_len`` positions (the new one included);
  "prefill" runs ``seq`` tokens at once and attends to all ``seq`` positions (no causal
  skipping: the ANE computes the full score matrix).  The lm_head of a prefill runs on
  the last token only (what generation needs).  Grouped-query attention puts the
  ``n_heads / n_kv`` query heads sharing one KV head into ``M`` of one matmul, so
  ``B = n_kv``.  Embedding look-ups, rotary embeddings, biases and the CPU side are not
  modelled.
- Fused activations (ReLU, GELU, SiLU, tanh ...) run in the NE stage of the MAC task at
  no extra cost; activations that need a second operand (SwiGLU's ``silu(g) * u``) are
  an :class:`Eltwise`.
"""

from __future__ import annotations

from dataclasses import replace

from .convnets import mobilenetv2, mobilenetv3_small, mobileone, resnet50
from .fastvit import fastvit
from .layers import Conv2d, Eltwise, Matmul, Workload
from .unet import sd21_unet

__all__ = [
    "Conv2d",
    "Matmul",
    "Eltwise",
    "Workload",
    "get",
    "names",
    "describe",
    "resnet50",
    "mobilenetv2",
    "mobilenetv3_small",
    "vit_b16",
    "bert_base",
    "gpt2",
    "llama",
    "transformer",
    "matmul",
    "conv_stack",
    "relu_stream",
    "whisper_encoder",
    "mobileone",
    "palettized",
    "fastvit",
    "sd21_unet",
]


# --------------------------------------------------------------------- transformers


def _block(L, p, *, d, n_heads, n_kv, head_dim, ffn, seq, kv_len, gated, act, norm, fused_qkv):
    """One pre-norm (or post-norm: same layers) transformer block."""
    qd, kvd = n_heads * head_dim, n_kv * head_dim
    group = n_heads // n_kv
    L.append(Eltwise(f"{p}.{norm}1", norm, (d, 1, seq), ops_per_out=4))
    if fused_qkv:
        L.append(Matmul(f"{p}.attn.qkv", 1, seq, d, qd + 2 * kvd))
    else:
        L.append(Matmul(f"{p}.attn.q_proj", 1, seq, d, qd))
        L.append(Matmul(f"{p}.attn.k_proj", 1, seq, d, kvd))
        L.append(Matmul(f"{p}.attn.v_proj", 1, seq, d, kvd))
    L.append(Matmul(f"{p}.attn.scores", n_kv, group * seq, head_dim, kv_len, weights=False))
    L.append(Eltwise(f"{p}.attn.softmax", "softmax", (n_heads * seq, 1, kv_len), ops_per_out=4))
    L.append(Matmul(f"{p}.attn.values", n_kv, group * seq, kv_len, head_dim, weights=False))
    L.append(Matmul(f"{p}.attn.o_proj", 1, seq, qd, d, follows=group == 1))
    L.append(Eltwise(f"{p}.residual1", "add", (d, 1, seq), n_inputs=2))
    L.append(Eltwise(f"{p}.{norm}2", norm, (d, 1, seq), ops_per_out=4))
    if gated:
        L.append(Matmul(f"{p}.mlp.gate_proj", 1, seq, d, ffn, activation=act))
        L.append(Matmul(f"{p}.mlp.up_proj", 1, seq, d, ffn))
        L.append(Eltwise(f"{p}.mlp.gate_mul", "mul", (ffn, 1, seq), n_inputs=2))
        L.append(Matmul(f"{p}.mlp.down_proj", 1, seq, ffn, d))
    else:
        L.append(Matmul(f"{p}.mlp.fc1", 1, seq, d, ffn, activation=act))
        L.append(Matmul(f"{p}.mlp.fc2", 1, seq, ffn, d, follows=True))
    L.append(Eltwise(f"{p}.residual2", "add", (d, 1, seq), n_inputs=2))


def _transformer(
    name,
    desc,
    *,
    n_layers,
    d,
    n_heads,
    n_kv=None,
    head_dim=None,
    ffn,
    vocab,
    seq,
    kv_len,
    gated=False,
    act="gelu",
    norm="layernorm",
    fused_qkv=False,
    lm_tokens=None,
    phase,
    tokens,
    source,
    head=None,
    prefix=None,
):
    n_kv = n_kv or n_heads
    head_dim = head_dim or d // n_heads
    L = list(prefix or [])
    for i in range(n_layers):
        _block(
            L,
            f"layers.{i}",
            d=d,
            n_heads=n_heads,
            n_kv=n_kv,
            head_dim=head_dim,
            ffn=ffn,
            seq=seq,
            kv_len=kv_len,
            gated=gated,
            act=act,
            norm=norm,
            fused_qkv=fused_qkv,
        )
    L.append(Eltwise(f"final_{norm}", norm, (d, 1, seq), ops_per_out=4))
    if vocab:
        L.append(Matmul("lm_head", 1, lm_tokens if lm_tokens is not None else seq, d, vocab))
    if head is not None:
        L.append(head)
    return Workload(name, desc, tuple(L), phase=phase, tokens=tokens, source=source)


def transformer(
    *,
    layers: int,
    d: int,
    heads: int,
    ffn: int,
    vocab: int,
    seq: int,
    kv: int | None = None,
    lm_tokens: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    gated: bool = False,
    act: str = "gelu",
    norm: str = "layer",
    name: str | None = None,
    cache: str = "none",
) -> Workload:
    """A decoder or encoder stack described by its sizes (``fastane roofline --transformer``):
    ``seq`` tokens processed by the step, attending to ``kv`` positions (default ``seq``),
    the LM head (``vocab`` outputs; 0: none) on ``lm_tokens`` positions (default ``seq``).
    ``seq == 1`` is a decode step; otherwise a prefill (``vocab > 0``) or an encoder.
    ``cache="concat"``: each layer's keys and values are its ``kv - seq`` cached rows
    concatenated with the step's ``seq`` new ones, the updated cache returned
    (:attr:`Workload.kv_concat`)."""
    kv = seq if kv is None else kv
    if cache not in ("none", "concat"):
        raise ValueError(f"cache={cache!r} is not one of none|concat")
    if cache == "concat" and kv <= seq:
        raise ValueError(f"cache=concat needs cached rows: kv={kv} is not more than seq={seq}")
    lm = seq if lm_tokens is None else lm_tokens
    phase = "decode" if seq == 1 and vocab else ("prefill" if vocab else "inference")
    spec = (
        f"layers={layers},d={d},heads={heads},ffn={ffn},vocab={vocab},seq={seq},kv={kv},lm_tokens={lm}"
        + (f",kv_heads={kv_heads}" if kv_heads else "")
        + (f",head_dim={head_dim}" if head_dim else "")
        + f",gated={int(gated)},act={act},norm={norm}"
        + (f",cache={cache}" if cache != "none" else "")
    )
    wl = _transformer(
        name or "transformer",
        f"transformer {spec}",
        n_layers=layers,
        d=d,
        n_heads=heads,
        n_kv=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        seq=seq,
        kv_len=kv,
        gated=gated,
        act=act,
        norm={"layer": "layernorm", "rms": "rmsnorm"}[norm],
        lm_tokens=lm,
        phase=phase,
        tokens=seq if vocab or seq > 1 else 1,
        source="user spec",
    )
    return replace(wl, kv_concat=kv - seq) if cache == "concat" else wl


_WHISPER = {"tiny": (4, 384, 6), "base": (6, 512, 8), "small": (12, 768, 12), "medium": (24, 1024, 16)}


def whisper_encoder(size: str = "tiny", frames: int = 3000) -> Workload:
    """The Whisper encoder (OpenAI, ``size`` tiny/base/small/medium) on ``frames`` log-mel
    frames of 80 bins: the stem (Conv1d 80 -> d, k 3, then d -> d, k 3, stride 2, GELU; as
    convolutions of height 1), then ``frames / 2`` tokens through the encoder blocks."""
    n_layers, d, heads = _WHISPER[size]
    stem = [
        Conv2d("conv1", 80, d, 1, frames, 1, 3, 1, 0, activation="gelu"),
        Conv2d("conv2", d, d, 1, frames - 2, 1, 3, 2, 0, activation="gelu", follows=True),
    ]
    seq = stem[-1].wout
    return _transformer(
        f"whisper-{size}-encoder",
        f"Whisper {size} encoder, {frames} mel frames ({seq} tokens)",
        n_layers=n_layers,
        d=d,
        n_heads=heads,
        ffn=4 * d,
        vocab=0,
        seq=seq,
        kv_len=seq,
        phase="inference",
        tokens=0,
        prefix=stem,
        source="Radford et al. 2022; openai/whisper model dims",
    )


def matmul(M: int, K: int, N: int, name: str | None = None) -> Workload:
    """One matmul ``(M x K) @ (K x N)``, the K x N weights in KMem (``--matmul MxKxN``)."""
    return Workload(
        name or f"matmul-{M}x{K}x{N}",
        f"one matmul ({M} x {K}) @ ({K} x {N}), fp16 weights",
        (Matmul("matmul", 1, M, K, N),),
        source="user spec",
    )


def conv_stack(n: int, c: int, hw: int, k: int = 3, name: str | None = None) -> Workload:
    """``n`` chained ``k x k`` convolutions, ``c`` channels in and out, on a ``hw x hw``
    map with same padding, fp16 weights (a micro-benchmark's program: ``convs:NxCxHWxK``)."""
    layers = tuple(Conv2d(f"conv{i}", c, c, hw, hw, k, k, 1, k // 2, follows=i > 0) for i in range(n))
    return Workload(
        name or f"convs-{n}x{c}x{hw}x{k}",
        f"{n} chained {k}x{k} convolutions, {c} channels, {hw}x{hw}, same padding, fp16 weights",
        layers,
        source="user spec",
    )


def relu_stream(rows: int, cols: int, name: str | None = None) -> Workload:
    """One relu of a ``rows x cols`` fp16 array, laid out as the transformers' activations
    (``cols`` channels, ``rows`` positions): a streaming micro-benchmark's program
    (``relu:RxD``), all data movement and no MACs."""
    return Workload(
        name or f"relu-{rows}x{cols}",
        f"one relu of a {rows} x {cols} fp16 array",
        (Eltwise("relu", "relu", (cols, 1, rows)),),
        source="user spec",
    )


def vit_b16(image: int = 224) -> Workload:
    """ViT-B/16 (16x16 patches -> 196 + [CLS] = 197 tokens), classification head on [CLS]."""
    g = image // 16
    seq = g * g + 1
    patch = Conv2d("patch_embed", 3, 768, image, image, 16, 16, 16, 0)
    return _transformer(
        "vit-b16",
        f"ViT-B/16, {image}x{image} ({seq} tokens), batch 1",
        n_layers=12,
        d=768,
        n_heads=12,
        ffn=3072,
        vocab=0,
        seq=seq,
        kv_len=seq,
        fused_qkv=True,
        phase="inference",
        tokens=0,
        source="Dosovitskiy et al. 2020; timm vit_base_patch16_224",
        prefix=[patch],
        head=Matmul("head", 1, 1, 768, 1000),
    )


def bert_base(seq: int = 128) -> Workload:
    """BERT-base encoder (12 x 768, 12 heads) over ``seq`` tokens, pooler on [CLS]."""
    return _transformer(
        f"bert-base-{seq}" if seq != 128 else "bert-base",
        f"BERT-base encoder, sequence {seq}, batch 1",
        n_layers=12,
        d=768,
        n_heads=12,
        ffn=3072,
        vocab=0,
        seq=seq,
        kv_len=seq,
        phase="inference",
        tokens=seq,
        source="Devlin et al. 2018; HF bert-base-uncased",
        head=Matmul("pooler", 1, 1, 768, 768, activation="tanh"),
    )


_GPT2 = {  # name: (layers, d_model, heads)
    "gpt2": (12, 768, 12, "GPT-2 124M"),
    "gpt2-xl": (48, 1600, 25, "GPT-2 1.5B (gpt2-xl)"),
}


def gpt2(size: str = "gpt2", phase: str = "decode", seq: int = 512) -> Workload:
    """GPT-2 (``"gpt2"`` 124M or ``"gpt2-xl"`` 1.5B): one decode step with a KV cache of
    ``seq`` positions, or the prefill of ``seq`` tokens.  lm_head is tied to the embedding
    (50257 x d) and is read every step."""
    n_layers, d, heads, label = _GPT2[size]
    dec = phase == "decode"
    name = size if dec else f"{size}-prefill"
    desc = (
        f"{label}, decode of 1 token with a KV cache of {seq}"
        if dec
        else f"{label}, prefill of {seq} tokens (lm_head on the last token)"
    )
    return _transformer(
        name,
        desc,
        n_layers=n_layers,
        d=d,
        n_heads=heads,
        ffn=4 * d,
        vocab=50257,
        seq=1 if dec else seq,
        kv_len=seq,
        fused_qkv=True,
        lm_tokens=1,
        phase=phase,
        tokens=1 if dec else seq,
        source="Radford et al. 2019; HF gpt2 / gpt2-xl config",
    )


def llama(phase: str = "decode", seq: int = 512) -> Workload:
    """Llama-3.2-1B (16 layers, d 2048, 32 query / 8 KV heads of 64, SwiGLU 8192, vocab
    128256, lm_head tied to the embedding): one decode step with a KV cache of ``seq``, or
    the prefill of ``seq`` tokens."""
    dec = phase == "decode"
    name = "llama-3.2-1b" if dec else "llama-3.2-1b-prefill"
    desc = (
        f"Llama-3.2-1B, decode of 1 token with a KV cache of {seq}"
        if dec
        else f"Llama-3.2-1B, prefill of {seq} tokens (lm_head on the last token)"
    )
    return _transformer(
        name,
        desc,
        n_layers=16,
        d=2048,
        n_heads=32,
        n_kv=8,
        head_dim=64,
        ffn=8192,
        vocab=128256,
        seq=1 if dec else seq,
        kv_len=seq,
        gated=True,
        act="silu",
        norm="rmsnorm",
        lm_tokens=1,
        phase=phase,
        tokens=1 if dec else seq,
        source="Meta Llama-3.2-1B config.json (hidden 2048, 16 layers, 32/8 heads, "
        "intermediate 8192, vocab 128256, tied embeddings)",
    )


_BUILDERS = {
    "resnet50": resnet50,
    "mobilenetv2": mobilenetv2,
    "mobilenetv3-small": mobilenetv3_small,
    "mobileone-s0": lambda: mobileone("s0"),
    "mobileone-s1": lambda: mobileone("s1"),
    "mobileone-s2": lambda: mobileone("s2"),
    "mobileone-s3": lambda: mobileone("s3"),
    "mobileone-s4": lambda: mobileone("s4"),
    "fastvit-t8": lambda: fastvit("t8"),
    "fastvit-t12": lambda: fastvit("t12"),
    "fastvit-s12": lambda: fastvit("s12"),
    "fastvit-sa12": lambda: fastvit("sa12"),
    "fastvit-sa24": lambda: fastvit("sa24"),
    "fastvit-sa36": lambda: fastvit("sa36"),
    "fastvit-ma36": lambda: fastvit("ma36"),
    "vit-b16": vit_b16,
    "whisper-tiny-encoder": lambda: whisper_encoder("tiny"),
    "whisper-base-encoder": lambda: whisper_encoder("base"),
    "whisper-small-encoder": lambda: whisper_encoder("small"),
    "whisper-medium-encoder": lambda: whisper_encoder("medium"),
    "distilbert": lambda: transformer(
        layers=6, d=768, heads=12, ffn=3072, vocab=0, seq=128, name="distilbert"
    ),
    "bert-base": lambda: bert_base(128),
    "bert-base-512": lambda: bert_base(512),
    "gpt2": lambda: gpt2("gpt2", "decode"),
    "gpt2-prefill": lambda: gpt2("gpt2", "prefill"),
    "gpt2-xl": lambda: gpt2("gpt2-xl", "decode"),
    "gpt2-xl-prefill": lambda: gpt2("gpt2-xl", "prefill"),
    "llama-3.2-1b": lambda: llama("decode"),
    "llama-3.2-1b-prefill": lambda: llama("prefill"),
    "sd21-unet": sd21_unet,
}
_ALIASES = {
    "resnet-50": "resnet50",
    "mobilenet-v2": "mobilenetv2",
    "mobilenet_v2": "mobilenetv2",
    "vit": "vit-b16",
    "vit-b/16": "vit-b16",
    "vit_b16": "vit-b16",
    "bert": "bert-base",
    "bert-base-128": "bert-base",
    "gpt2-decode": "gpt2",
    "gpt2-124m": "gpt2",
    "gpt2-1.5b": "gpt2-xl",
    "gpt2-xl-decode": "gpt2-xl",
    "gpt2-1.5b-prefill": "gpt2-xl-prefill",
    "llama": "llama-3.2-1b",
    "llama-3.2-1b-decode": "llama-3.2-1b",
    "llama3.2-1b": "llama-3.2-1b",
    "llama-prefill": "llama-3.2-1b-prefill",
    "sd-2.1-unet": "sd21-unet",
}
_CACHE: dict = {}


def names() -> list[str]:
    """Names of the built-in workloads."""
    return list(_BUILDERS)


def get(name: str) -> Workload:
    """The built-in workload called ``name`` (see :func:`names`; a few aliases work)."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _BUILDERS:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(_BUILDERS)}")
    if key not in _CACHE:
        _CACHE[key] = _BUILDERS[key]()
    return _CACHE[key]


def palettized(workload: "Workload | str", bits: int) -> Workload:
    """``workload`` with every weight palettized to ``bits``-bit codes (``weight_bits``),
    named ``<name>-pal<bits>``: as coremltools' ``palettize_weights`` (``nbits``) writes a
    model; the ANE keeps the codes in KMem and KernelDMA moves them compressed."""
    wl = get(workload) if isinstance(workload, str) else workload
    return replace(
        wl,
        name=f"{wl.name}-pal{bits}",
        description=f"{wl.description}, {bits}-bit palettized weights",
        weight_bits=bits,
    )


def describe(name: str) -> str:
    """One line: name, description, layers, MACs and weight parameters."""
    w = get(name)
    return (
        f"{w.name}: {w.description}; {len(w)} layers, {w.macs / 1e9:.3f} GMAC, "
        f"{w.weight_params / 1e6:.1f} M weight parameters"
    )
