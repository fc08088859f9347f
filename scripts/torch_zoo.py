"""The models people hold, exported by PyTorch, through fastane: torchvision and Hugging Face
transformers architectures with random weights (seeded; no download), exported with both of
PyTorch's ONNX exporters (the TorchScript one, ``dynamo=False``, and ``torch.export``,
``dynamo=True``), then loaded, run on the emulated ANE and compared with onnxruntime float32 on
the same input.

    # in an environment with torch, torchvision, transformers, onnx and onnxscript (not fastane's
    # test extra: torch is several GB), e.g. pip install torch==2.14.1 torchvision==0.29.1 \\
    #     transformers onnx onnxscript onnxruntime
    python scripts/torch_zoo.py export /tmp/zoo [--only resnet18,bert]
    # with fastane (its onnx extra):
    .venv/bin/python scripts/torch_zoo.py measure /tmp/zoo [--json out.json]

``measure`` runs each file in a child process with a fresh Numba cache (``NUMBA_CACHE_DIR``), so
its first run includes compiling the kernels the model needs; the table gives that first run,
the median of the next runs, and onnxruntime's median on the same input (one thread each:
``NUMBA_NUM_THREADS=1``, ``intra_op_num_threads=1``).  Columns: model, exporter, loads, runs,
agreement (top-1 for the classifiers; else the largest error relative to each output's
largest magnitude), ANE / host / layout layers, fastane / onnxruntime time, first-run
seconds, and the first host layer or what stopped the model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SEED = 0
#: name -> (source, builder argument, input kind, classes): "tv" a torchvision builder, "hf" a
#: transformers (config class, model class) pair built from its default config
ZOO = {
    "resnet18": ("tv", "resnet18", "image224", True),
    "mobilenet_v3_small": ("tv", "mobilenet_v3_small", "image224", True),
    "efficientnet_b0": ("tv", "efficientnet_b0", "image224", True),
    "densenet121": ("tv", "densenet121", "image224", True),
    "convnext_tiny": ("tv", "convnext_tiny", "image224", True),
    "squeezenet1_1": ("tv", "squeezenet1_1", "image224", True),
    "vit_b_16": ("tv", "vit_b_16", "image224", True),
    "swin_t": ("tv", "swin_t", "image224", True),
    "bert": ("hf", ("BertConfig", "BertModel"), "tokens", False),
    "distilbert": ("hf", ("DistilBertConfig", "DistilBertModel"), "tokens", False),
    "gpt2": ("hf", ("GPT2Config", "GPT2LMHeadModel"), "tokens", True),
    "clip_text": ("hf", ("CLIPTextConfig", "CLIPTextModel"), "tokens", False),
    "t5_encoder": ("hf", ("T5Config", "T5EncoderModel"), "tokens", False),
    "wav2vec2": ("hf", ("Wav2Vec2Config", "Wav2Vec2Model"), "audio", False),
}
EXPORTERS = ("torchscript", "dynamo")
SEQ = 32


def inputs_for(kind: str, rng) -> dict:
    if kind == "image224":
        return {"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    if kind == "tokens":
        return {
            "input_ids": rng.integers(0, 1000, (1, SEQ)).astype(np.int64),
            "attention_mask": np.ones((1, SEQ), np.int64),
        }
    if kind == "audio":
        return {"input_values": (0.1 * rng.standard_normal((1, 16000))).astype(np.float32)}
    raise ValueError(kind)


def build(name: str):
    import torch

    source, what, kind, _ = ZOO[name]
    torch.manual_seed(SEED)
    if source == "tv":
        import torchvision

        return getattr(torchvision.models, what)(weights=None).eval()
    import transformers

    config_cls, model_cls = (getattr(transformers, n) for n in what)
    config = config_cls()
    config.use_cache = False  # one forward pass: no key/value cache among the outputs
    model = model_cls(config).eval()
    names = list(inputs_for(kind, np.random.default_rng(SEED)))

    class Named(torch.nn.Module):
        """The model called with its inputs by name (transformers' positional order differs
        between models), returning its first output: the logits, else the last hidden state."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)), return_dict=True)
            return out.logits if "logits" in out else out.last_hidden_state

    return Named().eval()


def export(out: Path, only: list) -> int:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name, (_, _, kind, classes) in ZOO.items():
        if only and name not in only:
            continue
        rng = np.random.default_rng(SEED)
        arrays = inputs_for(kind, rng)
        np.savez(out / f"{name}.npz", **arrays)
        model = build(name)
        args = tuple(torch.from_numpy(v) for v in arrays.values())
        for exporter in EXPORTERS:
            path = out / f"{name}.{exporter}.onnx"
            t0 = time.perf_counter()
            try:
                # with gradients enabled: torch's fused attention fast path (which the
                # TorchScript exporter cannot export) is taken only without them
                torch.onnx.export(
                    model,
                    args,
                    str(path),
                    input_names=list(arrays),
                    opset_version=18,
                    dynamo=exporter == "dynamo",
                    external_data=False,
                )
                status = "ok"
            except Exception as exc:  # noqa: BLE001 (the table records the failure)
                status = f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            manifest[path.name] = {
                "model": name,
                "exporter": exporter,
                "classes": classes,
                "inputs": f"{name}.npz",
                "status": status,
                "export_s": round(time.perf_counter() - t0, 1),
            }
            print(f"{path.name}: {status} ({manifest[path.name]['export_s']} s)", flush=True)
    old = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    (out / "manifest.json").write_text(json.dumps({**old, **manifest}, indent=1))
    return 0


CHILD = r"""
import json, statistics, sys, time, warnings
import numpy as np
sys.path.insert(0, sys.argv[4])
import wheel_models as w
import fastane
import onnxruntime as ort
path, inputs, classes = sys.argv[1], np.load(sys.argv[2]), sys.argv[3] == "1"
row = {"loads": False, "runs": False}
try:
    t0 = time.perf_counter()
    m = fastane.load_model(path)
    row["loads"] = True
    arrays = {k: inputs[k] for k in m.inputs if k in inputs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        rep = m.report(arrays)
        row["first_s"] = time.perf_counter() - t0
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            m(arrays)
            ts.append(time.perf_counter() - t0)
    row["fastane_s"] = statistics.median(ts)
    row["runs"] = True
    row.update(ane=rep.placement.get("ane", 0), host=rep.placement.get("host", 0), layout=rep.placement.get("layout", 0))
    opts = ort.SessionOptions(); opts.intra_op_num_threads = 1; opts.inter_op_num_threads = 1
    s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    feed = {i.name: inputs[i.name] for i in s.get_inputs()}
    ref = dict(zip(names, s.run(names, feed)))
    ts = []
    for _ in range(5):
        t0 = time.perf_counter(); s.run(names, feed); ts.append(time.perf_counter() - t0)
    row["ort_s"] = statistics.median(ts)
    mabs, mrel, agree = w.compare(rep.values, ref, classes)
    row.update(max_abs=mabs, max_rel=mrel, argmax=agree, first_host=w.first_host(rep), beyond=w.beyond(rep))
except Exception as exc:
    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
print("ROW " + json.dumps(row))
"""


def measure(folder: Path, json_out, timeout: int) -> int:
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = []
    for fname, info in manifest.items():
        row = {"file": fname, **info}
        if info["status"] == "ok":
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
                try:
                    p = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            CHILD,
                            str(folder / fname),
                            str(folder / info["inputs"]),
                            "1" if info["classes"] else "0",
                            str(Path(__file__).resolve().parent),
                        ],
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        cwd=str(Path(__file__).resolve().parent.parent),
                    )
                    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("ROW ")), None)
                    row.update(json.loads(line[4:]) if line else {"error": f"child died: {p.stderr[-300:]}"})
                except subprocess.TimeoutExpired:
                    row["error"] = f"over {timeout} s"
        rows.append(row)
        print(_line(row), flush=True)
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
    return 0


def _line(r) -> str:
    if r["status"] != "ok":
        return f"| {r['model']} | {r['exporter']} | no export | | | | | | {r['status']} |"
    agree = r.get("argmax") or (f"{r['max_rel']:.1e} rel" if "max_rel" in r else "")
    ratio = f"{r['fastane_s'] / r['ort_s']:.1f}" if "ort_s" in r and "fastane_s" in r else ""
    layers = f"{r['ane']} / {r['host']} / {r['layout']}" if "ane" in r else ""
    why = r.get("error") or r.get("first_host") or ""
    first = f"{r['first_s']:.1f}" if "first_s" in r else ""
    return (
        f"| {r['model']} | {r['exporter']} | {'yes' if r.get('loads') else 'no'} | "
        f"{'yes' if r.get('runs') else 'no'} | {agree} | {layers} | {ratio} | {first} | {why[:160]} |"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    e = sub.add_parser("export")
    e.add_argument("folder", type=Path)
    e.add_argument("--only", default="")
    m = sub.add_parser("measure")
    m.add_argument("folder", type=Path)
    m.add_argument("--json")
    m.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args(argv)
    if args.step == "export":
        return export(args.folder, [n for n in args.only.split(",") if n])
    print(
        "| model | exporter | loads | runs | agreement | ANE / host / layout | fastane / ort | first run (s) | first host layer, or what stopped it |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    return measure(args.folder, args.json, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
