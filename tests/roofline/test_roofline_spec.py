"""``fastane roofline --transformer SPEC`` and ``--matmul MxKxN``: the forms and their errors."""

import json

import pytest

from fastane import workloads
from fastane.roofline import report, spec
from fastane.roofline.fitted import FITTED
from fastane.networks.plan import analyze
from tests.helpers.roofline import run_roofline as _run

GPT2_MEDIUM = "layers=24,d=1024,heads=16,ffn=4096,vocab=50257,seq=512,kv=512,lm_tokens=1"


def test_transformer_spec_builds_the_stack():
    w = spec.parse_transformer(GPT2_MEDIUM)
    assert w.phase == "prefill" and w.tokens == 512
    names = [layer.name for layer in w.layers]
    assert names.count("lm_head") == 1 and sum(n.endswith("mlp.fc1") for n in names) == 24
    lm = next(layer for layer in w.layers if layer.name == "lm_head")
    assert (lm.M, lm.K, lm.N) == (1, 1024, 50257)
    # 24 x (4 d^2 + 2 d ffn) + d vocab weights
    assert w.weight_params == 24 * (4 * 1024**2 + 2 * 1024 * 4096) + 1024 * 50257


def test_transformer_options():
    w = spec.parse_transformer(
        "layers=2,d=2048,heads=32,kv_heads=8,head_dim=64,ffn=8192,vocab=0,seq=1,"
        "kv=512,gated=1,act=silu,norm=rms"
    )
    names = [layer.name for layer in w.layers]
    assert "layers.0.mlp.gate_proj" in names and "lm_head" not in names
    scores = next(layer for layer in w.layers if layer.name == "layers.0.attn.scores")
    assert (scores.B, scores.M, scores.K, scores.N) == (8, 4, 64, 512)
    assert any(layer.name == "final_rmsnorm" for layer in w.layers)


def test_matmul_spec():
    w = spec.parse_matmul("1x4096x128256")
    (m,) = w.layers
    assert (m.B, m.M, m.K, m.N) == (1, 1, 4096, 128256) and w.weight_params == 4096 * 128256


@pytest.mark.parametrize(
    "bad, msg",
    [
        ("layers=24,d=1024", "missing heads, ffn, vocab, seq"),
        ("layers=24,d=1024,heads=16,ffn=4096,vocab=50257,seq=512,foo=1", "unknown key 'foo'"),
        ("layers=x,d=1024,heads=16,ffn=4096,vocab=1,seq=1", "layers='x' is not a non-negative integer"),
        ("layers=0,d=1024,heads=16,ffn=4096,vocab=1,seq=1", "layers=0 is out of range"),
        ("layers=1,d=1000,heads=16,ffn=4096,vocab=1,seq=1", "not a multiple of heads=16"),
        (
            "layers=1,d=1024,heads=16,ffn=4096,vocab=1,seq=1,act=tanh",
            "act='tanh' is not one of gelu|silu|relu",
        ),
        ("layers=1,d=1024,heads=16,ffn=4096,vocab=1,seq=8,lm_tokens=9", "lm_tokens=9 exceeds seq=8"),
        ("layers=1,d=1024,heads=16,ffn=4096,vocab=1,seq=8,kv=4", "exceeds the attention context"),
        ("layers=1,d=1024,heads=16,ffn=4096,vocab=1,seq=8,cache=concat", "cache=concat needs kv= past seq=8"),
        (
            "layers=1,d=1024,heads=16,ffn=4096,vocab=1,seq=8,cache=ring",
            "cache='ring' is not one of none|concat",
        ),
        ("layers=1,layers=2", "layers given twice"),
        ("layers", "is not key=value"),
    ],
)
def test_malformed_transformer_is_one_precise_line(bad, msg, capsys):
    with pytest.raises(ValueError, match=msg.replace("|", r"\|").replace("(", r"\(")):
        spec.parse_transformer(bad)
    assert _run(["--transformer", bad, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err and err.startswith("fastane roofline: ")


@pytest.mark.parametrize("bad", ["1x4096", "ax2x3", "0x4x4", "1x2x3x4", ""])
def test_malformed_matmul_is_one_precise_line(bad, capsys):
    assert _run(["--matmul", bad, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--matmul" in err


def test_cli_forms_combine_with_json_summary_and_chip(capsys, tmp_path):
    assert (
        _run(
            [
                "--matmul",
                "1x4096x4096",
                "--transformer",
                "layers=1,d=256,heads=4,ffn=1024,vocab=0,seq=16",
                "--chip",
                "m2",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["chip"]["key"] == "m2"
    assert [w["name"] for w in d["workloads"]] == ["transformer", "matmul-1x4096x4096"]
    assert all(w["total"]["time_s"] > 0 for w in d["workloads"])
    assert all(w["verdict"] for w in d["workloads"])
    assert _run(["gpt2", "--matmul", "8x512x512", "--summary", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "gpt2:" in out and "matmul-8x512x512:" in out and "verdict:" in out
    old = tmp_path / "old.json"
    assert _run(["--matmul", "8x512x512", "--json", "--quiet"]) == 0
    old.write_text(capsys.readouterr().out)
    assert _run(["--matmul", "8x512x512", "--compare", str(old), "--quiet"]) == 0


def test_builtin_names_stay():
    for n in (
        "resnet50",
        "mobilenetv2",
        "vit-b16",
        "bert-base",
        "bert-base-512",
        "gpt2",
        "gpt2-prefill",
        "gpt2-xl",
        "gpt2-xl-prefill",
        "llama-3.2-1b",
        "llama-3.2-1b-prefill",
    ):
        assert n in workloads.names()


def test_sizes_are_bounded(capsys):
    assert _run(["--transformer", "layers=100000,d=64,heads=1,ffn=64,vocab=0,seq=1", "--quiet"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert _run(["--matmul", "1000000x4x4", "--quiet"]) == 2
    assert "M=1000000 is out of range" in capsys.readouterr().err


def test_plot_of_a_spec_shows_the_measured_point(tmp_path):
    pytest.importorskip("matplotlib")
    w = spec.parse_matmul("1x4096x128256")
    r = analyze(w, "m1")
    assert report.measured_points(r) == [("K5", 17.26e-3)]
    path = tmp_path / "lm.png"
    report.plot([r], str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_relu_spec_plans_one_streaming_program():
    w = spec.parse_relu("256x4096")
    assert [layer.op for layer in w.layers] == ["relu"] and w.macs == 0
    r = analyze(w, "m1")
    moved = r.total.tile_dma_src_bytes + r.total.tile_dma_dst_bytes
    assert r.total.macs == 0 and moved >= 2 * 2 * 256 * 4096  # read and written once at least
    for bad, msg in (("256", "expected RxD"), ("0x4096", "R=0"), ("8x70000", "D=70000")):
        with pytest.raises(ValueError, match=msg):
            spec.parse_relu(bad)


def test_conv_stack_spec_and_its_errors():
    w = spec.parse_convs("16x256x32x3")
    assert len(w) == 16 and w.macs == 16 * 256 * 256 * 9 * 32 * 32
    assert all(layer.follows for layer in w.layers[1:]) and not w.layers[0].follows
    for bad, msg in (("16x256x32", "expected NxCxHWxK"), ("1x8x2x3", "larger than"), ("0x8x8x3", "N=0")):
        with pytest.raises(ValueError, match=msg):
            spec.parse_convs(bad)


def test_runtime_and_palettize_options(capsys):
    times = {}
    for extra in ([], ["--runtime", "direct"], ["--palettize", "4"]):
        assert _run(["--matmul", "64x2048x2048", "--chip", "m1", "--json", "--quiet", *extra]) == 0
        w = json.loads(capsys.readouterr().out)["workloads"][0]
        times[tuple(extra)] = (w["name"], w["total"]["overhead_s"], w["total"]["kernel_dma_bytes"])
    base, direct, pal = times[()], times[("--runtime", "direct")], times[("--palettize", "4")]
    assert base[1] == FITTED["program_overhead_s"] and direct[1] == FITTED["direct_overhead_s"]
    assert pal[0] == "matmul-64x2048x2048-pal4" and pal[2] < base[2] / 3
    assert _run(["--matmul", "8x64x64", "--palettize", "9", "--quiet"]) == 2
    assert "--palettize must be 1-8 bits" in capsys.readouterr().err
