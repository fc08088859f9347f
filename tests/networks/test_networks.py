"""One path for networks: a built-in network and the same network as a model file are
planned the same way (fastane.model, stats-only), count every layer, share one JSON schema
and one ``--compare``."""

import copy
import json

import numpy as np
import pytest

from fastane import networks, workloads
from fastane.cli import main
from fastane.networks import onnx_export
from fastane.networks.plan import analyze
from fastane.roofline import report

#: a small decoder (GPT-2's structure) and a small gated one (Llama's: RMSNorm, SiLU)
GPT = "layers=2,d=128,heads=4,ffn=512,vocab=1000,seq=1,kv=64,lm_tokens=1"
LLAMA = (
    "layers=2,d=128,heads=4,kv_heads=2,ffn=384,vocab=1000,seq=8,kv=8,lm_tokens=1,gated=1,act=silu,norm=rms"
)
#: a small window-over-a-cache decoder (smpanaro's gpt2 KV-cache program's structure)
WINDOW = "layers=2,d=128,heads=4,ffn=512,vocab=1000,seq=16,kv=64,lm_tokens=1,cache=concat"
#: the per-layer figures the two forms must agree on
FIGURES = ("layer", "op", "placement", "tasks", "macs", "dram_bytes", "kernel_dma_bytes", "time_s")


def _json(capsys, *argv):
    assert main(["roofline", *argv, "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def _file(tmp_path, w) -> str:
    path = str(tmp_path / f"{w.name}.onnx")
    onnx_export.save(w, path)
    return path


@pytest.mark.parametrize("spec", [GPT, LLAMA, WINDOW])
def test_a_builtin_and_its_file_plan_the_same_layers_the_same_way(spec, tmp_path, capsys):
    pytest.importorskip("onnx")
    from fastane.roofline.spec import parse_transformer

    path = _file(tmp_path, parse_transformer(spec))
    built = _json(capsys, "--transformer", spec)
    filed = _json(capsys, path)
    assert built["schema"] == filed["schema"] == report.SCHEMA == "fastane.roofline/2"
    assert set(built) == set(filed) == {"schema", "chip", "params", "workloads"}
    (b,), (f,) = built["workloads"], filed["workloads"]
    assert b["name"] == f["name"] == "transformer"
    assert set(f) <= set(b)  # the file does not say it is a decode step: no tokens/s
    rows = lambda w: [{k: layer[k] for k in FIGURES} for layer in w["layers"]]  # noqa: E731
    assert rows(b) == rows(f) and len(rows(b)) > 10
    assert b["total"] == f["total"]


@pytest.mark.parametrize("name", ["mobileone-s0", "fastvit-sa12"])  # FastViT: convs and attention
def test_a_convnet_and_its_file_agree(name, tmp_path, capsys):
    pytest.importorskip("onnx")
    path = _file(tmp_path, workloads.get(name))
    (b,), (f,) = _json(capsys, name)["workloads"], _json(capsys, path)["workloads"]
    assert [{k: x[k] for k in FIGURES} for x in b["layers"]] == [
        {k: x[k] for k in FIGURES} for x in f["layers"]
    ]
    assert b["total"]["time_s"] == f["total"]["time_s"]


def test_every_layer_of_gpt2_is_counted():
    r = analyze("gpt2", "m1")
    assert not r.plan.not_lowered and len(r.plan.layers) == len(workloads.get("gpt2").layers) == 134
    ops = {lp.layer.op for lp in r.plan.layers}
    # the residual adds, the layer norms, the softmax, the fused GELU: all on the ANE
    assert {"Add", "LayerNormalization", "Softmax", "MatMul+Gelu"} <= ops
    assert r.total.tasks == sum(e.tasks for e in r.layers)
    assert r.workload.weight_params == workloads.get("gpt2").weight_params


def test_a_concatenated_kv_cache_is_planned_as_ane_moves():
    from fastane.model.placement.moves import MOVED
    from fastane.roofline.spec import parse_transformer

    wl = parse_transformer(WINDOW)
    assert wl.kv_concat == 48
    g = networks.graph(wl)
    ops = [
        n.op for n in g.nodes if n.name.startswith("layers.0.attn.") and n.op in ("split", "concat", "slice")
    ]
    assert ops == ["split", "concat", "concat", "concat"]
    # the stack of the layers' 64-row caches (batch 1) and its two 48-row slices, as
    # models/gpt2.py @797cdd6 returns them: the LM head's logits, then the two slices
    (stack,) = [n for n in g.nodes if n.name == "kv_cache"]
    assert stack.op == "concat" and stack.attrs["axis"] == 0
    assert stack.inputs == ["layers.0.attn.kv", "layers.1.attn.kv"]
    assert g.outputs[1:] == ["kv_cache.prompt", "kv_cache.generation"]
    assert g.inputs["layers.1.attn.cache"].shape == (1, 48, 256)
    r = analyze(wl, "m1")
    moved = [lp for lp in r.plan.layers if lp.layer.op in ("Split", "Concat", "Slice")]
    assert len(moved) == 2 * 4 + 3 and all(lp.lowered and lp.stats.dram_bytes for lp in moved)
    assert all(rec.reason == MOVED for rec in r.report.layers if rec.layer.op in ("Split", "Concat", "Slice"))
    # the stack reads every layer's 64 rows of 256 elements once and writes them once
    (st,) = [lp.stats for lp in r.plan.layers if lp.name == "kv_cache"]
    assert st.tile_dma_src_bytes == st.tile_dma_dst_bytes == 2 * 64 * 512
    plain = analyze(parse_transformer(WINDOW.replace(",cache=concat", "")), "m1")
    assert r.total.dram_bytes > plain.total.dram_bytes and r.total.time_s > plain.total.time_s


def test_a_stack_of_more_caches_than_bar_slots_is_planned_as_ane_moves():
    """The stack of 30 layers' caches binds 31 tensors, past the 28 BAR slots a program of
    moves has (outputs from slot 4): it runs as several programs (fastane.lower.moves.lower)."""
    from fastane.lower import moves
    from fastane.roofline.spec import parse_transformer

    wl = parse_transformer("layers=30,d=64,heads=2,ffn=128,vocab=100,seq=2,kv=8,lm_tokens=1,cache=concat")
    r = analyze(wl, "m1")
    (rec,) = [rec for rec in r.report.layers if rec.layer.name == "kv_cache"]
    assert rec.placement == "ane" and rec.layer.detail["move"].endswith("-> 30x8x128")
    assert rec.stats.tile_dma_src_bytes == rec.stats.tile_dma_dst_bytes == 30 * 8 * 256
    assert len(moves.lower(moves.concat([(1, 8, 128)] * 30, 0)).programs) == 2


def test_a_graph_is_shapes_only():
    g = networks.graph("resnet50")
    assert not g.weights and g.name == "resnet50"
    big = [v for v in g.consts.values() if v.size > 4096]
    assert big and all(not any(v.strides) for v in big)  # zero-stride placeholders
    assert [n.name for n in g.nodes if n.op == "conv"][:2] == ["conv1", "layer1.0.conv1"]


def test_a_vocabulary_projection_beyond_the_layer_budget_is_sliced():
    assert networks.slices(1, 768, 50257) == 1
    assert networks.slices(1, 2048, 128256) > 1
    names = [n.name for n in networks.graph("llama-3.2-1b").nodes if n.name.startswith("lm_head")]
    assert len(names) == networks.slices(1, 2048, 128256) and names[0] == "lm_head.0"


@pytest.mark.parametrize("form", ["builtin", "file"])
def test_compare_exits_non_zero_beyond_fail_above(form, tmp_path, capsys):
    if form == "file":
        pytest.importorskip("onnx")
        from fastane.roofline.spec import parse_transformer

        argv = [_file(tmp_path, parse_transformer(GPT))]
    else:
        argv = ["--transformer", GPT]
    old = _json(capsys, *argv)
    same = tmp_path / "same.json"
    same.write_text(json.dumps(old))
    assert main(["roofline", *argv, "--quiet", "--compare", str(same)]) == 0
    assert "0 workload(s) regressed" in capsys.readouterr().out
    faster = copy.deepcopy(old)
    faster["workloads"][0]["total"]["time_s"] /= 1.1  # the stored run was 10% faster
    f = tmp_path / "faster.json"
    f.write_text(json.dumps(faster))
    assert main(["roofline", *argv, "--quiet", "--compare", str(f), "--fail-above", "5"]) == 1
    assert "REGRESSED" in capsys.readouterr().out
    assert main(["roofline", *argv, "--quiet", "--compare", str(f), "--fail-above", "20"]) == 0
    capsys.readouterr()


def test_a_model_file_and_a_builtin_are_not_mixed(tmp_path, capsys):
    assert main(["roofline", str(tmp_path / "m.onnx"), "--matmul", "1x64x64"]) == 2
    assert "not both" in capsys.readouterr().err


def test_graph_inputs_are_float16():
    g = networks.graph("gpt2")
    assert {np.dtype(t.dtype) for t in g.inputs.values()} == {np.dtype(np.float16)}


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"models": [{"model": "m"}]}', "a model report of an older fastane"),
        ('{"schema": "fastane.roofline/9", "workloads": []}', "is not one this fastane reads"),
    ],
)
def test_compare_names_an_old_or_unknown_schema(tmp_path, capsys, content, message):
    p = tmp_path / "old.json"
    p.write_text(content)
    assert main(["roofline", "--matmul", "1x64x64", "--quiet", "--compare", str(p)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_model_with_no_ane_layer_has_no_program(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "xy")
    g = helper.make_graph([helper.make_node("Floor", ["x"], ["y"], name="f")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "floor.onnx"))
    (w,) = _json(capsys, str(tmp_path / "floor.onnx"))["workloads"]
    assert w["layers"] == [] and w["total"]["tasks"] == 0 and w["total"]["time_s"] == 0
    assert [(x["layer"], x["placement"]) for x in w["not_lowered"]] == [("f", "host")]


def test_caches_of_different_sizes_are_not_stacked():
    from dataclasses import replace

    from fastane.roofline.spec import parse_transformer

    wl = parse_transformer(WINDOW)
    layers = list(wl.layers)
    i = next(k for k, lay in enumerate(layers) if lay.name == "layers.1.attn.scores")
    layers[i] = replace(layers[i], N=layers[i].N + 1)
    with pytest.raises(ValueError, match="layers.1.attn.scores: a cache of 65 x 128, where the layers"):
        networks.graph(replace(wl, layers=tuple(layers)))
