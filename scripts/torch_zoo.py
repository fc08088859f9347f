"""The models people hold, exported by PyTorch, through fastane: torchvision and Hugging Face
transformers architectures with random weights (seeded; no download), exported with both of
PyTorch's ONNX exporters (the TorchScript one, ``dynamo=False``, and ``torch.export``,
``dynamo=True``), then loaded, run on the emulated ANE and compared with onnxruntime float32 on
the same input; or traced (``torch.jit.trace``) and converted by coremltools (``ct.convert``
to an ML Program, fp16 and fp32 compute precision, iOS16-18 targets: :data:`COREML_VARIANTS`)
with a few more modules (:data:`EXTRA`: an LSTM, a stateful key/value cache, small BERT and
GPT-2 with a padded attention mask), then run by fastane and compared with torch's float32
output on the same input.

    # in an environment with torch, torchvision, transformers, onnx and onnxscript (not fastane's
    # test extra: torch is several GB), e.g. pip install torch==2.14.1 torchvision==0.29.1 \\
    #     transformers onnx onnxscript onnxruntime coremltools
    python scripts/torch_zoo.py export /tmp/zoo [--only resnet18,bert]
    python scripts/torch_zoo.py export /tmp/ctzoo --coreml [--only lstm,kv_cache]
    # with fastane (its onnx and coreml extras):
    .venv/bin/python scripts/torch_zoo.py measure /tmp/zoo [--json out.json] [--warm]
    .venv/bin/python scripts/torch_zoo.py measure /tmp/ctzoo --shared-cache

``measure`` runs each file in a child process with a fresh Numba cache (``NUMBA_CACHE_DIR``), so
its first run includes compiling the kernels the model needs (with ``--warm``, the fresh cache
is a copy of one ``fastane warm`` filled, as the README's set-up leaves it: the first run then
compiles what the warm manifest misses); the table gives that first run (and in brackets the
CPU seconds it spent compiling, the outermost Numba compilations),
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
import shutil
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
#: small transformers configurations (two layers, 128 wide) for the padded-mask models
SMALL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256}
#: the modules only the Core ML export builds: "mod" a module of this script (:func:`build`)
EXTRA = {
    "lstm": ("mod", "lstm", "sequence", False),
    "lstm_bidirectional": ("mod", "lstm_bidirectional", "sequence", False),
    "kv_cache": ("mod", "kv_cache", "kv_step", False),
    "bert_small_padded": ("hf", ("BertConfig", "BertModel", SMALL), "tokens_padded", False),
    "gpt2_small_padded": (
        "hf",
        ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 128, "n_layer": 2, "n_head": 4}),
        "tokens_padded",
        True,
    ),
}
EXPORTERS = ("torchscript", "dynamo")
#: (compute precision, deployment target) pairs each model is converted with; the
#: transformers models also for iOS18 (where coremltools emits scaled_dot_product_attention),
#: the stateful model only for iOS18 (the first target with state)
COREML_VARIANTS = (("fp16", "iOS16"), ("fp32", "iOS17"))
COREML_IOS18 = (("fp16", "iOS18"),)
SEQ = 32
#: the padded-mask models' real tokens (the rest of the SEQ positions masked)
REAL = 24
#: the key/value cache: its length, width, and the positions a step writes
CACHE, WIDTH, WRITE = 8, 16, (4, 6)


def inputs_for(kind: str, rng) -> dict:
    if kind == "image224":
        return {"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    if kind == "tokens":
        return {
            "input_ids": rng.integers(0, 1000, (1, SEQ)).astype(np.int64),
            "attention_mask": np.ones((1, SEQ), np.int64),
        }
    if kind == "tokens_padded":
        mask = np.zeros((1, SEQ), np.int64)
        mask[:, :REAL] = 1
        return {"input_ids": rng.integers(0, 1000, (1, SEQ)).astype(np.int64), "attention_mask": mask}
    if kind == "audio":
        return {"input_values": (0.1 * rng.standard_normal((1, 16000))).astype(np.float32)}
    if kind == "sequence":
        return {"x": rng.standard_normal((1, 20, 32)).astype(np.float32)}
    if kind == "kv_step":
        mask = np.full((1, WRITE[1] - WRITE[0], CACHE), -1e4, np.float32)
        mask[..., : WRITE[1]] = 0  # the cached positions and the new ones
        return {"x": rng.standard_normal((1, WRITE[1] - WRITE[0], WIDTH)).astype(np.float32), "mask": mask}
    raise ValueError(kind)


def _modules():
    """The modules of :data:`EXTRA` built here (torch imported only when they are built)."""
    import torch

    class Recurrent(torch.nn.Module):
        """Two stacked LSTM layers (or one bidirectional) over 20 steps, then a linear head."""

        def __init__(self, bidirectional):
            super().__init__()
            layers = 1 if bidirectional else 2
            self.lstm = torch.nn.LSTM(32, 64, layers, batch_first=True, bidirectional=bidirectional)
            self.head = torch.nn.Linear(128 if bidirectional else 64, 10)

        def forward(self, x):
            return self.head(self.lstm(x)[0])

    class KVCache(torch.nn.Module):
        """One attention head over a key/value cache kept as Core ML state (fp16 buffers,
        ``ct.StateType``): a step writes its keys and values at :data:`WRITE`, an in-place
        slice update, then attends over the whole cache with an additive mask."""

        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(WIDTH, WIDTH) for _ in range(3))
            self.register_buffer("k_cache", torch.zeros(1, CACHE, WIDTH, dtype=torch.float16))
            self.register_buffer("v_cache", torch.zeros(1, CACHE, WIDTH, dtype=torch.float16))

        def forward(self, x, mask):
            self.k_cache[:, WRITE[0] : WRITE[1]] = self.k(x).half()
            self.v_cache[:, WRITE[0] : WRITE[1]] = self.v(x).half()
            scores = self.q(x) @ self.k_cache.float().transpose(1, 2) / WIDTH**0.5 + mask
            return torch.softmax(scores, -1) @ self.v_cache.float()

    return {
        "lstm": lambda: Recurrent(False),
        "lstm_bidirectional": lambda: Recurrent(True),
        "kv_cache": KVCache,
    }


def _additive_mask(mask, causal: bool):
    """The 4-D additive attention mask ``(1 - mask) * -10000`` (BERT's, and transformers'
    before 4.21) from a 0/1 ``(batch, seq)`` mask, lower-triangular too when ``causal``:
    transformers 5 builds its masks with an op coremltools 9 does not convert (``new_ones``)
    and takes a 4-D mask as given (the position ids are given too: transformers 5 slices them
    at a cache length whose ``int`` coremltools 9 does not convert)."""
    import torch

    m = mask[:, None, None, :].float()
    if causal:
        m = m * torch.tril(torch.ones(mask.shape[-1], mask.shape[-1]))
    return (1.0 - m) * -10000.0


def build(name: str):
    import torch

    source, what, kind, _ = {**ZOO, **EXTRA}[name]
    torch.manual_seed(SEED)
    if source == "mod":
        return _modules()[what]().eval()
    if source == "tv":
        import torchvision

        return getattr(torchvision.models, what)(weights=None).eval()
    import transformers

    config_cls, model_cls = (getattr(transformers, n) for n in what[:2])
    config = config_cls(**(what[2] if len(what) > 2 else {}))
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
            feeds = dict(zip(names, args))
            if kind == "tokens_padded":  # the additive mask of the original BERT, built here
                feeds["attention_mask"] = _additive_mask(feeds["attention_mask"], config.model_type == "gpt2")
                feeds["position_ids"] = torch.arange(SEQ)[None]  # not from a cache length
            out = self.model(**feeds, return_dict=True)
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
    return _manifest(out, manifest)


def _manifest(out: Path, manifest: dict) -> int:
    old = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    (out / "manifest.json").write_text(json.dumps({**old, **manifest}, indent=1))
    return 0


def _failure(exc) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"


def export_coreml(out: Path, only: list) -> int:
    """Each model of :data:`ZOO` and :data:`EXTRA` traced and converted by coremltools for
    each of its :data:`COREML_VARIANTS`, saved as ``NAME.PRECISION.TARGET.mlpackage`` beside
    its inputs (``NAME.coreml.npz``: integer inputs as int32, which coremltools' converter
    declares) and torch's float32 outputs on them (``NAME.torch.npz``: ``out0``, ``out1``...,
    in the converted model's output order; a stateful model from its zero state)."""
    import warnings

    import coremltools as ct
    import torch

    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name, (source, _, kind, classes) in {**ZOO, **EXTRA}.items():
        if only and name not in only:
            continue
        arrays = {
            k: v.astype(np.int32) if v.dtype == np.int64 else v
            for k, v in inputs_for(kind, np.random.default_rng(SEED)).items()
        }
        np.savez(out / f"{name}.coreml.npz", **arrays)
        args = tuple(
            torch.from_numpy(v.astype(np.int64) if v.dtype == np.int32 else v) for v in arrays.values()
        )
        model = build(name)
        states = [
            ct.StateType(wrapped_type=ct.TensorType(shape=tuple(b.shape), dtype=np.float16), name=n)
            for n, b in model.named_buffers()
            if source == "mod" and b.dtype == torch.float16
        ]
        with torch.no_grad():
            traced = torch.jit.trace(build(name) if states else model, args, check_trace=False)
            ref = model(*args)  # after the trace: a stateful model's buffers are zero here
        ref = ref if isinstance(ref, tuple) else (ref,)
        np.savez(out / f"{name}.torch.npz", **{f"out{i}": r.numpy() for i, r in enumerate(ref)})
        variants = COREML_IOS18 if states else COREML_VARIANTS + (COREML_IOS18 if source == "hf" else ())
        for precision, target in variants:
            path = out / f"{name}.{precision}.{target}.mlpackage"
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mlmodel = ct.convert(
                        traced,
                        inputs=[
                            ct.TensorType(name=k, shape=v.shape, dtype=v.dtype) for k, v in arrays.items()
                        ],
                        states=states or None,
                        convert_to="mlprogram",
                        compute_precision=getattr(
                            ct.precision, "FLOAT16" if precision == "fp16" else "FLOAT32"
                        ),
                        minimum_deployment_target=getattr(ct.target, target),
                    )
                mlmodel.save(str(path))
                status = "ok"
            except Exception as exc:  # noqa: BLE001 (the table records the failure)
                status = f"conversion failed: {_failure(exc)}"
            manifest[path.name] = {
                "model": name,
                "exporter": f"{precision} {target}",
                "classes": classes,
                "inputs": f"{name}.coreml.npz",
                "reference": f"{name}.torch.npz",
                "status": status,
                "export_s": round(time.perf_counter() - t0, 1),
            }
            print(f"{path.name}: {status} ({manifest[path.name]['export_s']} s)", flush=True)
    return _manifest(out, manifest)


CHILD = r"""
import json, statistics, sys, time, warnings
import numpy as np
sys.path.insert(0, sys.argv[4])
import wheel_models as w
from numba.core import event
from numba_compiles import Compiles  # the outermost compilations' CPU seconds: .seconds


compiles = Compiles()
event.register("numba:compile", compiles)
import fastane
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
        row["compile_s"] = compiles.seconds
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            m(arrays)
            ts.append(time.perf_counter() - t0)
    row["fastane_s"] = statistics.median(ts)
    row["runs"] = True
    row.update(ane=rep.placement.get("ane", 0), host=rep.placement.get("host", 0), layout=rep.placement.get("layout", 0))
    if len(sys.argv) > 5:  # torch's outputs, in the model's output order
        torch_out = np.load(sys.argv[5])
        ref = {n: torch_out[f"out{i}"] for i, n in enumerate(m.outputs) if f"out{i}" in torch_out}
        row["ref_rel"] = w.compare(m.reference(arrays), ref, False)[1]
    else:
        import onnxruntime as ort
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


def _warmed() -> tuple:
    """``(folder, seconds)``: a Numba cache ``fastane warm`` filled, as the README's set-up
    leaves it, and the wall seconds that took."""
    cache = tempfile.mkdtemp()
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "fastane.cli", "warm", "--quiet"],
        env=dict(os.environ, NUMBA_CACHE_DIR=cache),
        check=True,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    return cache, time.perf_counter() - t0


def measure(folder: Path, json_out, timeout: int, shared_cache: bool = False, warm: bool = False) -> int:
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = []
    # one Numba cache for every file (``shared_cache``): the first runs then say little
    shared = tempfile.mkdtemp() if shared_cache else None
    warmed = None
    if warm:  # each file's fresh cache a copy of one that fastane warm filled
        warmed, seconds = _warmed()
        print(f"fastane warm: {seconds:.1f} s", flush=True)
    for fname, info in manifest.items():
        row = {"file": fname, **info}
        if info["status"] == "ok":
            with tempfile.TemporaryDirectory() as fresh:
                if warmed:
                    shutil.copytree(warmed, fresh, dirs_exist_ok=True)
                env = dict(
                    os.environ, NUMBA_CACHE_DIR=shared or fresh, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1"
                )
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
                            *([str(folder / info["reference"])] if "reference" in info else []),
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
    for folder_ in (shared, warmed):
        if folder_:
            shutil.rmtree(folder_, ignore_errors=True)
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
    return 0


def _line(r) -> str:
    if r["status"] != "ok":
        return f"| {r['model']} | {r['exporter']} | no export | | | | | | {r['status']} |"
    agree = r.get("argmax") or (f"{r['max_rel']:.1e} rel" if "max_rel" in r else "")
    if "ref_rel" in r:  # against torch: fastane's float32 reference too
        agree += f" (fp32 reference {r['ref_rel']:.1e})"
    ratio = f"{r['fastane_s'] / r['ort_s']:.1f}" if "ort_s" in r and "fastane_s" in r else ""
    layers = f"{r['ane']} / {r['host']} / {r['layout']}" if "ane" in r else ""
    why = r.get("error") or r.get("first_host") or ""
    first = f"{r['first_s']:.1f}" if "first_s" in r else ""
    if "compile_s" in r:
        first += f" ({r['compile_s']:.1f})"
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
    e.add_argument("--coreml", action="store_true", help="convert with coremltools instead of ONNX")
    m = sub.add_parser("measure")
    m.add_argument("folder", type=Path)
    m.add_argument("--json")
    m.add_argument("--timeout", type=int, default=900)
    m.add_argument("--shared-cache", action="store_true", help="one Numba cache for every file")
    m.add_argument(
        "--warm",
        action="store_true",
        help="each file's fresh cache filled by fastane warm first (the set-up's)",
    )
    args = ap.parse_args(argv)
    if args.step == "export":
        return (export_coreml if args.coreml else export)(args.folder, [n for n in args.only.split(",") if n])
    print(
        "| model | exporter | loads | runs | agreement | ANE / host / layout | fastane / ort | first run (s) (compiling) | first host layer, or what stopped it |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    return measure(args.folder, args.json, args.timeout, args.shared_cache, args.warm)


if __name__ == "__main__":
    sys.exit(main())
