"""The Stable Diffusion 2.1 base UNet workload: parameters against the published count,
MACs of a ResNet and a transformer block by hand, SPLIT_EINSUM_V2's split, batch, and
its plan on the one path."""

import re

import numpy as np
import pytest

from fastane import workloads
from fastane.networks.plan import analyze
from fastane.roofline.model import task_arrays
from fastane.unet import CHUNK, TEXT_DIM, TEXT_TOKENS, sd21_unet
from fastane.workloads import Conv2d, Eltwise, Matmul

from tests.helpers.plans import planned

T = TEXT_TOKENS


@pytest.fixture(scope="module")
def one():
    return sd21_unet(batch=1)


def _macs(w, prefix):
    return sum(layer.macs for layer in w.layers if layer.name.startswith(prefix + "."))


def test_parameters_are_the_published_865_910_724(one):
    # buddy-compiler/buddy-mlir@046f70877f1aad07afddd09ddde7f39de72954ec
    # examples/BuddyStableDiffusion/buddy-stable-diffusion-main.cpp: the flat parameter
    # buffer of stabilityai/stable-diffusion-2-1-base's UNet (import-stable-diffusion.py
    # concatenates every parameter) is `MemRef<float, 1> arg0_unet({865910724})`; the
    # BK-SDM MODEL_CARD.md (Nota-NetsPresso/BK-SDM) rounds it to 0.87B.  The workload
    # counts the weights; add the biases (every conv but to_q/to_k/to_v, bias=False in
    # unet.py) and each GroupNorm/LayerNorm's scale and shift: exact, tolerance 0.
    biases = sum(
        layer.cout
        for layer in one.layers
        if isinstance(layer, Conv2d) and not re.search(r"\.to_[qkv]$", layer.name)
    )
    norms = sum(
        2 * layer.in_shape[0]
        for layer in one.layers
        if isinstance(layer, Eltwise) and layer.op == "layernorm"
    )
    assert one.weight_params + biases + norms == 865_910_724
    assert one.weight_params == pytest.approx(0.87e9, rel=0.01)


def test_resnet_blocks_by_hand(one):
    # down_blocks.0.resnets.0, 320 -> 320 at 64 x 64: two 3x3 convs of 320 x 320 x 9 MACs
    # at each of 4096 positions, and time_emb_proj 1280 -> 320 on one position
    assert _macs(one, "down_blocks.0.resnets.0") == 2 * 320 * 320 * 9 * 4096 + 1280 * 320 == 7_550_156_800
    # down_blocks.1.resnets.0, 320 -> 640 at 32 x 32: conv1 320 -> 640, conv2 640 -> 640,
    # the 1x1 shortcut 320 -> 640, time_emb_proj 1280 -> 640
    s = 32 * 32
    by_hand = 640 * 320 * 9 * s + 640 * 640 * 9 * s + 640 * 320 * s + 1280 * 640
    assert _macs(one, "down_blocks.1.resnets.0") == by_hand == 5_872_844_800


def test_transformer_block_by_hand(one):
    # down_blocks.0.attentions.0: C = 320, S = 4096 tokens, 5 heads of 64.
    #   proj_in, proj_out:                         2 S C^2
    #   attn1 to_q, to_k, to_v, to_out:            4 S C^2
    #   attn2 to_q, to_out:                        2 S C^2;  to_k, to_v: 2 x 77 x 1024 x C
    #   GEGLU: C -> 2 x 4C, then 4C -> C:          12 S C^2
    #   attn1 scores and values (all heads):       2 S^2 C
    #   attn2 scores and values, 77 keys:          2 S 77 C
    c, s = 320, 4096
    by_hand = 20 * s * c * c + 2 * T * TEXT_DIM * c + 2 * s * s * c + 2 * s * T * c
    assert by_hand == 19_378_339_840
    assert _macs(one, "down_blocks.0.attentions.0") == by_hand


def test_attention_macs_of_all_16_blocks_by_hand(one):
    # (tokens, channels, transformer blocks): two down and three up blocks per level with
    # attention, one in the middle; each block 2 S^2 C (self) + 2 S 77 C (cross)
    levels = [(4096, 320, 5), (1024, 640, 5), (256, 1280, 5), (64, 1280, 1)]
    by_hand = sum(n * (2 * s * s * c + 2 * s * T * c) for s, c, n in levels)
    assert sum(layer.macs for layer in one.layers if isinstance(layer, Matmul)) == by_hand


def test_split_einsum_v2_per_head_and_chunk(one):
    # split_einsum_v2: per head a (chunk x 64) @ (64 x keys) einsum for each 512-query
    # chunk; under 512 queries (256, 64 tokens) per head over all queries
    for prefix, heads, chunks, m, keys in (
        ("down_blocks.0.attentions.0.transformer_blocks.0.attn1", 5, 8, CHUNK, 4096),
        ("down_blocks.0.attentions.0.transformer_blocks.0.attn2", 5, 8, CHUNK, T),
        ("down_blocks.1.attentions.1.transformer_blocks.0.attn1", 10, 2, CHUNK, 1024),
        ("up_blocks.1.attentions.2.transformer_blocks.0.attn1", 20, 1, 256, 256),
        ("mid_block.attentions.0.transformer_blocks.0.attn2", 20, 1, 64, T),
    ):
        ein = [x for x in one.layers if x.name.startswith(prefix + ".h")]
        scores = [x for x in ein if x.name.endswith(".scores")]
        values = [x for x in ein if x.name.endswith(".values")]
        assert len(scores) == len(values) == heads * chunks, prefix
        assert {(x.B, x.M, x.K, x.N, x.weights) for x in scores} == {(1, m, 64, keys, False)}
        assert {(x.B, x.M, x.K, x.N, x.weights) for x in values} == {(1, m, keys, 64, False)}


def test_skip_concatenations_and_upsampling(one):
    # the up ResNets read hidden + skip channels (unet.py CrossAttnUpBlock2D/UpBlock2D)
    conv1 = {x.name: (x.cin, x.h) for x in one.layers if x.name.endswith(".conv1")}
    assert conv1["up_blocks.0.resnets.0.conv1"] == (2560, 8)
    assert conv1["up_blocks.1.resnets.2.conv1"] == (1280 + 640, 16)
    assert conv1["up_blocks.2.resnets.0.conv1"] == (1280 + 640, 32)
    assert conv1["up_blocks.3.resnets.0.conv1"] == (640 + 320, 64)
    assert conv1["up_blocks.3.resnets.2.conv1"] == (320 + 320, 64)
    ups = [x for x in one.layers if ".upsamplers." in x.name]
    assert [(x.cin, x.h, x.stride) for x in ups] == [(1280, 16, 1), (1280, 32, 1), (640, 64, 1)]
    downs = [x for x in one.layers if ".downsamplers." in x.name]
    assert [(x.cin, x.h, x.hout, x.stride) for x in downs] == [
        (320, 64, 32, 2),
        (640, 32, 16, 2),
        (1280, 16, 8, 2),
    ]
    assert one.layers[-1].name == "conv_out" and (one.layers[-1].cout, one.layers[-1].hout) == (4, 64)


def test_registered_at_batch_2_and_the_builder_arguments(one):
    w = workloads.get("sd21-unet")
    assert w.name == "sd21-unet" and workloads.get("sd-2.1-unet") is w
    assert len(w.layers) == 2 * len(one.layers) and w.macs == 2 * one.macs
    assert [x.name for x in w.layers[: len(one.layers)]] == ["image0." + x.name for x in one.layers]
    assert sd21_unet(1, 32).macs < one.macs  # a 256 x 256 image's latent
    with pytest.raises(ValueError, match="multiple of the 512-query chunk"):
        sd21_unet(1, 48)  # 2304 tokens: split_einsum_v2 would drop 256 queries
    with pytest.raises(ValueError, match="multiple of 8"):
        sd21_unet(1, 60)
    with pytest.raises(ValueError, match="batch"):
        sd21_unet(0)


def test_plans_on_the_one_path_batch_2_as_repeated_tasks(one):
    # every layer lowered; batch 2 is the batch-1 tasks twice in one program, as the
    # DistilBERT batch-2 validation point (C2) tiles its task arrays
    r1, r2 = analyze(one), planned("sd21-unet")
    assert not r2.plan.not_lowered
    assert r2.plan.stats.macs == 2 * one.macs
    a1, a2 = task_arrays(r1.plan.tasks), task_arrays(r2.plan.tasks)
    for k in a1:
        np.testing.assert_array_equal(a2[k], np.tile(a1[k], 2), err_msg=k)
