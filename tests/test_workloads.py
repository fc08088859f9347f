"""Workload shapes: total MACs and parameters against hand-computed figures."""

import pytest

from fastane import workloads
from fastane.workloads import Conv2d, Eltwise, Matmul


def _sum(w, pred):
    return sum(layer.macs for layer in w.layers if pred(layer))


def test_names_and_get():
    names = workloads.names()
    for n in (
        "resnet50",
        "mobilenetv2",
        "vit-b16",
        "bert-base",
        "gpt2",
        "gpt2-xl",
        "llama-3.2-1b",
        "llama-3.2-1b-prefill",
    ):
        assert n in names
        assert workloads.get(n).name == n
    assert workloads.get("LLAMA-3.2-1B-decode").name == "llama-3.2-1b"
    with pytest.raises(ValueError, match="unknown workload"):
        workloads.get("alexnet")


def test_every_layer_is_named_and_typed():
    for n in workloads.names():
        w = workloads.get(n)
        assert len({layer.name for layer in w.layers}) == len(w.layers), n
        for layer in w.layers:
            assert isinstance(layer, (Conv2d, Matmul, Eltwise))
            assert layer.shape_str()


def test_resnet50_is_4_1_gmac():
    w = workloads.get("resnet50")
    # stem: 64 x 112 x 112 outputs x 3 x 7 x 7 = 118,013,952 MACs
    assert w.layers[0].macs == 64 * 112 * 112 * 3 * 49 == 118_013_952
    # convs 4.087 G + fc 2048 x 1000: the usual "4.1 GMAC" (torchvision: 4.09 G)
    assert _sum(w, lambda l: l.name == "fc") == 2_048_000
    assert w.macs == pytest.approx(4.089e9, rel=1e-3)
    assert w.weight_params == pytest.approx(25.5e6, rel=0.01)  # 25.56 M minus BN/biases


def test_mobilenetv2_is_300_mmac():
    w = workloads.get("mobilenetv2")
    assert w.macs == pytest.approx(300e6, rel=0.01)  # paper: 300 M multiply-adds
    assert w.weight_params == pytest.approx(3.5e6, rel=0.02)


def test_vit_b16_is_17_6_gmac():
    w = workloads.get("vit-b16")
    assert w.layers[0].macs == 768 * 14 * 14 * 3 * 16 * 16  # patch embedding
    assert w.macs == pytest.approx(17.56e9, rel=2e-3)


def test_bert_base_by_hand():
    # per layer at sequence s = 128, d = 768: 4 projections s d^2, MLP 2 x s d 4d, and
    # attention 2 x s^2 d (scores and values over 12 heads of 64), plus the pooler d^2
    s, d = 128, 768
    per_layer = 4 * s * d * d + 2 * s * d * 4 * d + 2 * s * s * d
    assert workloads.get("bert-base").macs == 12 * per_layer + d * d == 11_174_215_680
    s = 512
    per_layer = 4 * s * d * d + 2 * s * d * 4 * d + 2 * s * s * d
    assert workloads.get("bert-base-512").macs == 12 * per_layer + d * d


def test_gpt2_decode_is_85m_macs_per_token_plus_attention_and_lm_head():
    w = workloads.get("gpt2")
    # non-embedding weights: 12 layers x 12 d^2 = 84,934,656 (biases not modelled)
    body = _sum(w, lambda l: isinstance(l, Matmul) and l.weights and l.name != "lm_head")
    assert body == 12 * 12 * 768 * 768 == 84_934_656
    attn = _sum(w, lambda l: isinstance(l, Matmul) and not l.weights)
    assert attn == 12 * 2 * 512 * 768  # q.K and p.V over 512 cached positions
    assert _sum(w, lambda l: l.name == "lm_head") == 768 * 50257
    assert w.weight_params == 84_934_656 + 768 * 50257  # 123.5 M: tied lm_head read each step
    assert w.tokens == 1 and w.phase == "decode"


def test_gpt2_xl_is_1_5b():
    w = workloads.get("gpt2-xl")
    body = sum(l.weight_params for l in w.layers if l.name != "lm_head")
    assert body == 48 * 12 * 1600 * 1600 == 1_474_560_000
    assert w.weight_params == pytest.approx(1.555e9, rel=1e-3)


def test_llama_3_2_1b_decode_by_hand():
    w = workloads.get("llama-3.2-1b")
    d, kv, ffn = 2048, 8 * 64, 8192
    per_layer = d * (d + kv + kv + d) + 3 * d * ffn  # q, k, v, o + gate, up, down
    assert per_layer == 60_817_408
    assert w.weight_params == 16 * per_layer + d * 128256 == 1_235_746_816
    # GQA: 8 KV heads x (4 query heads x 1 token) x 64 x 512 positions, scores and values
    scores = [l for l in w.layers if l.name.endswith("attn.scores")]
    assert len(scores) == 16 and (scores[0].B, scores[0].M, scores[0].K, scores[0].N) == (8, 4, 64, 512)
    assert w.macs == 16 * per_layer + d * 128256 + 16 * 2 * 8 * 4 * 64 * 512


def test_llama_prefill_runs_512_tokens():
    w = workloads.get("llama-3.2-1b-prefill")
    assert w.tokens == 512 and w.phase == "prefill"
    q = next(l for l in w.layers if l.name == "layers.0.attn.q_proj")
    assert (q.M, q.K, q.N) == (512, 2048, 2048)
    assert next(l for l in w.layers if l.name == "lm_head").M == 1  # last token only
    sc = next(l for l in w.layers if l.name == "layers.0.attn.scores")
    assert (sc.B, sc.M, sc.K, sc.N) == (8, 4 * 512, 64, 512)


def test_layer_validation():
    with pytest.raises(ValueError):
        Conv2d("bad", 3, 64, 4, 4, 7, 7)  # kernel larger than the input
    with pytest.raises(ValueError):
        Conv2d("bad", 6, 64, 8, 8, groups=4)  # channels not a multiple of groups
    with pytest.raises(ValueError):
        Matmul("bad", 1, 0, 4, 4)


#: MobileOne in inference form, 224x224: (M parameters, GMACs) of open-mmlab/mmpretrain@09c4815
#: configs/mobileone/README.md (apple/ml-mobileone's README gives latencies only); the paper's
#: (arXiv 2206.04040, as Papers with Code lists it) S2 7.8 M / 1.3, S3 10.1 M / 1.8, S4
#: 14.8 M / 2.9 GFLOPs agree
MOBILEONE = {
    "s0": (2.08, 0.27),
    "s1": (4.76, 0.82),
    "s2": (7.81, 1.30),
    "s3": (10.08, 1.89),
    "s4": (14.84, 2.98),
}


@pytest.mark.parametrize("variant", list(MOBILEONE))
def test_mobileone_params_and_macs_are_the_published(variant):
    w = workloads.get(f"mobileone-{variant}")
    params, gmacs = MOBILEONE[variant]
    # the published count has the biases (one per output channel): ours is up to 1% below
    assert 0.99 * params * 1e6 < w.weight_params < params * 1e6
    assert w.macs / 1e9 == pytest.approx(gmacs, abs=0.01)  # the figures' last digit


#: FastViT, 256x256: GMACs of the model cards (apple/coreml-FastViT-T8 and -MA36 on Hugging
#: Face, "Model Stats"; timm/fastvit_t12.apple_in1k, timm/fastvit_sa24.apple_in1k)
FASTVIT_GMACS = {"t8": 0.7, "t12": 1.4, "sa24": 3.8, "ma36": 7.8}
#: M parameters of the training form (with the branches reparameterization folds):
#: leondgarse/keras_cv_attention_models@26c32a1 keras_cv_attention_models/fastvit/README.md
#: (the cards' timm counts: T8 4.0, T12 7.6, SA24 21.6, MA36 44.1)
FASTVIT_PARAMS = {
    "t8": 4.03,
    "t12": 7.55,
    "s12": 9.47,
    "sa12": 11.58,
    "sa24": 21.55,
    "sa36": 31.53,
    "ma36": 44.07,
}


@pytest.mark.parametrize("variant", list(FASTVIT_PARAMS))
def test_fastvit_params_and_macs_are_the_published(variant):
    w = workloads.get(f"fastvit-{variant}")
    # reparameterization drops the BatchNorms and the 1x1/3x3 train-time branches; the
    # inference weights (no biases) are within 2% below the training form's count
    assert 0.98 * FASTVIT_PARAMS[variant] * 1e6 < w.weight_params < FASTVIT_PARAMS[variant] * 1e6
    if variant in FASTVIT_GMACS:
        assert w.macs / 1e9 == pytest.approx(FASTVIT_GMACS[variant], abs=0.05)  # one decimal


def test_fastvit_sa12_is_the_deployed_count_of_a_port():
    # keras_cv_attention_models@26c32a1 fastvit/README.md: FastViT_SA12 after
    # switch_to_deploy, 11,540,456 parameters = the weights, a bias per output channel of
    # every conv, the attention projection and the classifier (the QKV has none), and the
    # two attention blocks' BatchNorms it keeps (4 x 512 each)
    w = workloads.get("fastvit-sa12")
    biases = sum(l.cout for l in w.layers if isinstance(l, Conv2d))
    biases += sum(l.N for l in w.layers if isinstance(l, Matmul) and l.weights and not l.name.endswith("qkv"))
    assert w.weight_params + biases + 2 * 4 * 512 == 11_540_456


def test_fastvit_layers_by_hand():
    w = workloads.get("fastvit-t8")
    by = {l.name: l for l in w.layers}
    # stem 3x3/2, 3x3/2 depthwise, 1x1: 256 -> 64; the first RepMixer block on 48 x 64 x 64
    assert by["patch_embed.2"].shape_str() == "conv 1x1/1 48x64x64->48x64x64"
    assert by["network.0.0.token_mixer"].shape_str() == "conv 3x3/1 g48 48x64x64->48x64x64"
    assert by["network.0.0.convffn.conv"].shape_str() == "conv 7x7/1 g48 48x64x64->48x64x64"
    assert by["network.0.0.convffn.fc1"].cout == 3 * 48 and by["network.0.0.convffn.fc1"].activation == "gelu"
    # PatchEmbed: 7x7/2, a group per input channel, 48 -> 96
    assert by["network.1.proj.0"].shape_str() == "conv 7x7/2 g48 48x64x64->96x32x32"
    assert by["conv_exp"].shape_str() == "conv 3x3/1 g384 384x8x8->768x8x8"
    assert by["conv_exp.se.reduce"].cout == 768 // 16 and by["head"].K == 768
    assert not any(isinstance(l, Matmul) and not l.weights for l in w.layers)  # no attention
    # SA12: RepCPE, then 2 attention blocks on 8 x 8 = 64 tokens, 16 heads of 32
    w = workloads.get("fastvit-sa12")
    by = {l.name: l for l in w.layers}
    assert by["network.6.reparam_conv"].shape_str() == "conv 7x7/1 g512 512x8x8->512x8x8"
    qkv, scores = by["network.7.1.token_mixer.qkv"], by["network.7.1.token_mixer.scores"]
    assert (qkv.M, qkv.K, qkv.N) == (64, 512, 1536)
    assert (scores.B, scores.M, scores.K, scores.N) == (16, 64, 32, 64) and not scores.weights
    assert "network.7.2.token_mixer.qkv" not in by
    with pytest.raises(ValueError, match="unknown FastViT variant"):
        workloads.fastvit("xs")
