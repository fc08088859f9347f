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
