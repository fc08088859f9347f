"""Validation of the calibrated model on public measurements it was **not** fitted on
(docs/measurements.md lists them with their sources; docs/roofline.md, "Validation", has
the table this prints): ``python -m fastane.networks.calibrate --validate`` prints it as
markdown, planned on the one path.

Each point says whether it is *comparable* (the model describes what was measured: same
network, its weights' format (fp16, palettized, int8), the ANE doing the work) and whether it is *independent* of the
fit and of the chip table (the anemll-bench lm_head rows are not: the chips' read
bandwidths in ``chips.py`` are those same measurements).  The rms log-error is over the
comparable, independent points.
"""

from __future__ import annotations

from dataclasses import dataclass


from .calibrate import ANEFORGE_PROGRAMS, Point, aneforge_point, errors, rms_log_error

__all__ = ["VPoint", "VALIDATION", "rows", "markdown"]

_LMHEAD = "matmul:1x4096x128256"
_GPT2_MEDIUM = "layers=24,d=1024,heads=16,ffn=4096,vocab=50257,kv=512,lm_tokens=1,act=gelu,norm=layer"
_GPT2_LARGE = "layers=36,d=1280,heads=20,ffn=5120,vocab=50257,kv=512,lm_tokens=1,act=gelu,norm=layer"
_GPT2_XL = "layers=48,d=1600,heads=25,ffn=6400,vocab=50257,kv=512,lm_tokens=1,act=gelu,norm=layer"
#: smpanaro's KV-cache model (models/gpt2.py @797cdd6, the code behind SPEED.md @14ef84f):
#: every step recomputes a window of the last 64 tokens against 448 cached positions
#: (64 queries, 512 keys), the LM head on the last position only; each layer splits its
#: 448 cached rows into keys and values, concatenates each with the window's 64 new rows
#: and keys with values; the layers' caches are stacked and two 448-row slices of the
#: stack returned (``cache=concat``)
_DECODE = ",seq=64,cache=concat"
_SMP = "smpanaro/more-ane-transformers evals/SPEED.md"
_KV_NOTE = (
    "the cache's split and concats per layer, the stack of the layers' caches and its two "
    "448-row slices planned as ANE moves; the cache input's unbind into layers a view (no move)"
)
_ANEMLL = "Anemll/anemll-bench Results.MD @5c434f2"
_PAL = "apple/coremltools docs-guides/source/opt-palettization-perf.md @af15dcd (iPhone 14 Pro, iOS 17, Xcode median)"
_QUANT = "apple/coremltools docs-guides/source/opt-quantization-perf.md @25562dd (Xcode median, iOS 17)"
_FASTVIT = "apple/ml-fastvit README.md, latency column (iPhone 12 Pro, ModelBench)"
_MOBILEONE_CHART = "apple/ml-mobileone docs/accuracy_v_latency.jpg @b7f4e6d (Time (ms) on iPhone 12)"
_FASTVIT_CHART = "apple/ml-fastvit docs/intro/acc_vs_latency.png @8af5928 (iPhone 12 Pro, ModelBench)"
_ZHANG = "erwinzhang7/coreml-compute-placement PAPER.md @69feb36"
_PY = (
    "Python predict calls (the paper: 'Python call overhead is included in every figure'); the "
    "port has no classifier, the built-in its 2048 x 1000 fc"
)
_TF_PAD = (
    "not the built-in network: the Hugging Face port pads every 3x3 convolution's input "
    "explicitly (TensorFlow SAME padding, transformers' apply_tf_padding), which the built-in has not, "
    "and has no classifier (the built-in's 1280 x 1000)"
)
_W8A8 = "W8A8 from the 8-bit-weight plan with int8 tiles and INT8 MACs (roofline.model.w8a8)"
_W8 = (
    "weight-only linear int8 (per-channel scales) modelled as 8-bit codes kept in KMem; "
    "whether Core ML decompresses them at load time or just in time is not stated"
)


def _pal(id, what, spec, bits, measured_s):
    return VPoint(
        id,
        f"{what}, {bits}-bit palettized weights",
        spec,
        "a16",
        measured_s,
        _PAL,
        weight_bits=bits,
        note="the same Core ML program as the fp16 one but its weights",
    )


@dataclass(frozen=True)
class VPoint(Point):
    """A validation point: ``note`` what the model leaves out; ``independent`` False where a chip
    figure is this measurement."""

    note: str = ""
    independent: bool = True
    #: False where the measurement may not be the ANE running this network (the reason in note)
    comparable: bool = True


VALIDATION = (
    VPoint(
        "A1",
        "MobileNetV3-small fp16, 224x224",
        "mobilenetv3-small",
        "a16",
        0.13e-3,
        "apple/coremltools opt-palettization-perf.md",
        note="its fixed costs bound the fit (not its time); squeeze-excite scale and residual "
        "adds as programs of their own (broadcast, a second reader)",
        independent=False,
    ),
    VPoint(
        "A4",
        "MobileOne-S0 (reparameterized), 224x224",
        "mobileone-s0",
        "a14",
        0.79e-3,
        "apple/ml-mobileone README.md, Model Zoo (iPhone 12 Pro, ModelBench)",
        note="precision of the .mlmodel not stated",
    ),
    VPoint(
        "A5",
        "MobileOne-S4 (reparameterized), 224x224",
        "mobileone-s4",
        "a14",
        1.86e-3,
        "same table",
        note="same; squeeze-excite scale as a program of its own (broadcast)",
    ),
    VPoint(
        "C1",
        "DistilBERT (ANE-optimized) seq 128",
        "distilbert",
        "a15",
        3.47e-3,
        "machinelearning.apple.com/research/neural-engine-transformers",
        note="residual adds planned as tails of their matmuls",
    ),
    VPoint(
        "C2",
        "DistilBERT seq 256, batch 2",
        "transformer:layers=6,d=768,heads=12,ffn=3072,vocab=0,seq=256",
        "m1-max",
        8.7e-3,
        "smpanaro/more-ane-transformers src/experiments/NOTES.md, 2023-03-26",
        repeat=2,
        note="batch 2 as two sequences in one program",
    ),
    VPoint(
        "C3",
        "Whisper tiny encoder, 3000 frames",
        "whisper-tiny-encoder",
        "m1-pro",
        30e-3,
        "ggml-org/whisper.cpp PR #566",
        note="H?: compute units of that commit unchecked (today's code picks "
        "CPU_AND_GPU); generic conversion, not the ANE layout",
        comparable=False,
    ),
    VPoint(
        "C4",
        "Whisper base encoder",
        "whisper-base-encoder",
        "m1-pro",
        64e-3,
        "same",
        note="same caveat",
        comparable=False,
    ),
    VPoint(
        "C5",
        "Whisper small encoder",
        "whisper-small-encoder",
        "m1-pro",
        208e-3,
        "same",
        note="same caveat",
        comparable=False,
    ),
    VPoint(
        "C6",
        "Whisper medium encoder",
        "whisper-medium-encoder",
        "m1-pro",
        1033e-3,
        "same",
        note="same caveat",
        comparable=False,
    ),
    VPoint(
        "D1",
        "gpt2-medium, 512-token forward",
        "transformer:" + _GPT2_MEDIUM + ",seq=512",
        "m1-max",
        103e-3,
        _SMP + " @529f1e3",
    ),
    VPoint(
        "D2",
        "gpt2-xl, 512-token forward (pipeline)",
        "gpt2-xl-prefill",
        "m1-max",
        455e-3,
        _SMP + " @529f1e3",
        programs=2,
        note="a 2-chunk Core ML pipeline (src/experiments/chunk_model.py: 1800 MB chunks)",
    ),
    VPoint(
        "D3",
        "gpt2-xl, 512-token forward (pipeline)",
        "gpt2-xl-prefill",
        "m2",
        406e-3,
        _SMP + " @529f1e3",
        programs=2,
        note="same",
    ),
    VPoint(
        "D4",
        "pythia-1B, 512-token forward",
        "transformer:layers=16,d=2048,heads=8,ffn=8192,vocab=50304,seq=512,kv=512,lm_tokens=1",
        "m1-max",
        304e-3,
        _SMP + " @529f1e3",
        note="parallel block as sequential; lm_tokens unknown (1)",
    ),
    VPoint(
        "E1",
        "gpt2-large decode step: 64-token window, KV 512",
        "transformer:" + _GPT2_LARGE + _DECODE,
        "m1-max",
        51e-3,
        _SMP + " @14ef84f",
        note=_KV_NOTE,
    ),
    VPoint(
        "E2",
        "gpt2-large decode step: 64-token window, KV 512",
        "transformer:" + _GPT2_LARGE + _DECODE,
        "m2",
        46e-3,
        _SMP + " @14ef84f",
        note=_KV_NOTE,
    ),
    VPoint(
        "E3",
        "gpt2-xl decode step: 64-token window, KV 512 (2-chunk pipeline)",
        "transformer:" + _GPT2_XL + _DECODE,
        "m1-max",
        138e-3,
        _SMP + " @14ef84f",
        programs=2,
        note=_KV_NOTE,
    ),
    VPoint(
        "E4",
        "gpt2-xl decode step: 64-token window, KV 512 (2-chunk pipeline)",
        "transformer:" + _GPT2_XL + _DECODE,
        "m2",
        95e-3,
        _SMP + " @14ef84f",
        programs=2,
        note=_KV_NOTE,
    ),
    VPoint(
        "F1",
        "lm_head 1x4096x128256",
        _LMHEAD,
        "m1-pro",
        19.14e-3,
        _ANEMLL,
        note="M1 Pro borrows the M1 Max read bandwidth",
        independent=False,
    ),
    VPoint(
        "F2",
        "lm_head",
        _LMHEAD,
        "m1-max",
        19.24e-3,
        _ANEMLL,
        note="chip read bandwidth = this benchmark",
        independent=False,
    ),
    VPoint(
        "F3",
        "lm_head",
        _LMHEAD,
        "m1-ultra",
        19.20e-3,
        _ANEMLL,
        note="one ANE (anes_used); read bandwidth borrowed from the M1 Max",
        independent=False,
    ),
    VPoint(
        "F4",
        "lm_head",
        _LMHEAD,
        "m2",
        17.38e-3,
        _ANEMLL,
        note="chip read bandwidth = this benchmark",
        independent=False,
    ),
    VPoint("F5", "lm_head", _LMHEAD, "m3", 16.65e-3, _ANEMLL, note="same", independent=False),
    VPoint(
        "F6",
        "lm_head",
        _LMHEAD,
        "m4",
        16.37e-3,
        "Anemll/anemll-bench issue #5",
        note="same",
        independent=False,
    ),
    VPoint(
        "F7",
        "lm_head",
        _LMHEAD,
        "m4-max",
        8.74e-3,
        "Anemll/anemll-bench issue #1",
        note="same",
        independent=False,
    ),
    VPoint(
        "A10",
        "MobileOne-S3 (reparameterized), 224x224",
        "mobileone-s3",
        "a14",
        1.53e-3,
        "apple/ml-mobileone README.md, Model Zoo (iPhone 12 Pro, ModelBench)",
        note="precision of the .mlmodel not stated",
    ),
    *(
        VPoint(
            f"A{11 + i}",
            f"FastViT-{v.upper()} (reparameterized), 256x256",
            f"fastvit-{v}",
            "a14",
            t,
            _FASTVIT,
            note="attention stages as per-head matmuls and a softmax" if v.startswith("sa") else "",
        )
        for i, (v, t) in enumerate(
            (("t12", 1.2e-3), ("s12", 1.4e-3), ("sa12", 1.6e-3), ("sa24", 2.6e-3), ("sa36", 3.5e-3))
        )
    ),
    VPoint(
        "A6",
        "FastViT-T8 fp16, 256x256",
        "fastvit-t8",
        "a14",
        0.79e-3,
        "huggingface.co/apple/coreml-FastViT-T8, Evaluation (iPhone 12 Pro Max, iOS 17.5)",
        note="the calibration's K15 is this model on this chip (another source, 0.8 ms)",
        independent=False,
    ),
    VPoint(
        "A7",
        "FastViT-T8 fp16, 256x256",
        "fastvit-t8",
        "m3-max",
        0.62e-3,
        "huggingface.co/apple/coreml-FastViT-T8, Evaluation (MacBook Pro M3 Max, macOS 14.4)",
    ),
    VPoint(
        "A8",
        "FastViT-MA36 fp16, 256x256",
        "fastvit-ma36",
        "a14",
        4.50e-3,
        "huggingface.co/apple/coreml-FastViT-MA36, Evaluation (iPhone 12 Pro Max, iOS 18.0)",
        note="attention stages as per-head matmuls and a softmax",
    ),
    VPoint(
        "A9",
        "FastViT-MA36 fp16, 256x256",
        "fastvit-ma36",
        "m3-max",
        2.99e-3,
        "same card (MacBook Pro M3 Max, macOS 15.0)",
        note="same",
    ),
    # the Stable Diffusion 2.1 UNet step of K16/K17 on the other chips of the same table
    *(
        VPoint(
            gid,
            "Stable Diffusion 2.1 base UNet, one step, 6-bit palettized (SPLIT_EINSUM_V2)",
            "sd21-unet",
            chip,
            t,
            f"apple/ml-stable-diffusion README, performance benchmarks ({device})",
            programs=2,
            weight_bits=6,
            note="the Swift app's own share of an iteration (up to about 10%) is in the measurement",
        )
        for gid, chip, t, device in (
            ("G4", "a15", 0.392, "iPhone 13 Pro Max, 2.55 iter/s"),
            ("G5", "a16", 0.372, "iPhone 14 Pro Max, 2.69 iter/s"),
            ("G7", "m2", 0.326, "iPad Pro M2, 3.07 iter/s"),
        )
    ),
    # private-API programs on the M4 (maderix's benchmarks): the direct runtime on another chip
    *(
        VPoint(
            f"S20-{c}",
            f"one 1x1 convolution, {c} channels, 64 positions, fp16, direct",
            f"matmul:64x{c}x{c}",
            "m4",
            t,
            "maderix/ANE issue #3 (inmem_bench, M4 Mac mini)",
            runtime="direct",
        )
        for c, t in ((256, 0.106e-3), (1024, 0.116e-3), (2048, 0.237e-3), (4096, 1.012e-3))
    ),
    VPoint(
        "S21",
        "128 chained 1x1 convolutions, 512 channels, 64x64, fp16, direct",
        "convs:128x512x64x1",
        "m4",
        14.8e-3,
        "maderix/ANE README.md, ANE peak throughput (M4)",
        runtime="direct",
        note="the M4's FP16 peak in the chip table is this benchmark's figure",
        independent=False,
    ),
    VPoint(
        "S21-w8a8",
        "128 chained 1x1 convolutions, 512 channels, 64x64, W8A8, direct",
        "convs:128x512x64x1",
        "m4",
        7.8e-3,
        "maderix/ANE README.md, INT8 W8A8 quantization (M4)",
        runtime="direct",
        weight_bits=8,
        activation_bits=8,
        note=_W8A8,
    ),
    # ANEForge's watt-complete comparison on the M5: the programs of K12-K14 and K18-K24 on a
    # chip the fit never saw (its FP16 rate in the chip table is the M5 Max's, borrowed)
    *(
        aneforge_point(
            VPoint,
            f"S25-{i}",
            program,
            "m5",
            t,
            harness_copy=True,
            note="the harness's copy of the input and output at the fitted direct_copy_bw; the M5's FP16 "
            "rate is borrowed from the M5 Max (19.27 TFLOP/s), below the 24.3 TFLOP/s this conv stack "
            "runs at",
        )
        for i, (program, t) in enumerate(
            zip(ANEFORGE_PROGRAMS, (0.0917e-3, 0.0858e-3, 1.2927e-3, 0.1028e-3, 0.7571e-3), strict=True),
            start=1,
        )
    ),
    # palettized and weight-quantized programs (the fit saw ResNet-50 at 4 bits only, K8)
    _pal("Q1", "ResNet-50 224x224", "resnet50", 2, 1.43e-3),
    _pal("Q2", "ResNet-50 224x224", "resnet50", 6, 1.37e-3),
    _pal("Q3", "ResNet-50 224x224", "resnet50", 8, 1.40e-3),
    _pal("Q4", "MobileNetV2 224x224", "mobilenetv2", 2, 0.47e-3),
    _pal("Q5", "MobileNetV2 224x224", "mobilenetv2", 4, 0.45e-3),
    _pal("Q6", "MobileNetV2 224x224", "mobilenetv2", 6, 0.48e-3),
    _pal("Q7", "MobileNetV2 224x224", "mobilenetv2", 8, 0.45e-3),
    VPoint(
        "Q8", "ResNet-50 224x224, int8 weights", "resnet50", "a16", 1.49e-3, _QUANT, weight_bits=8, note=_W8
    ),
    VPoint(
        "Q9",
        "ResNet-50 224x224, int8 weights",
        "resnet50",
        "a17-pro",
        1.50e-3,
        _QUANT,
        weight_bits=8,
        note=_W8,
    ),
    VPoint(
        "Q10",
        "MobileNetV2 224x224, int8 weights",
        "mobilenetv2",
        "a16",
        0.45e-3,
        _QUANT,
        weight_bits=8,
        note=_W8,
    ),
    VPoint(
        "Q12",
        "ResNet-50 224x224, W8A8",
        "resnet50",
        "a17-pro",
        0.77e-3,
        _QUANT,
        weight_bits=8,
        activation_bits=8,
        note=_W8A8,
    ),
    VPoint(
        "Q13",
        "MobileNetV2 224x224, W8A8",
        "mobilenetv2",
        "a16",
        0.27e-3,
        _QUANT,
        weight_bits=8,
        activation_bits=8,
        note=_W8A8,
    ),
    VPoint(
        "Q14",
        "MobileNetV2 224x224, W8A8",
        "mobilenetv2",
        "a17-pro",
        0.20e-3,
        _QUANT,
        weight_bits=8,
        activation_bits=8,
        note=_W8A8,
    ),
    VPoint(
        "Q11",
        "MobileNetV2 224x224, int8 weights",
        "mobilenetv2",
        "a17-pro",
        0.44e-3,
        _QUANT,
        weight_bits=8,
        note=_W8,
    ),
    # 2026-12-06: other networks on the A14, read off Apple's accuracy-vs-latency charts
    # (the same ModelBench measurements as the README tables of K10/K11/K15 and A4-A15)
    *(
        VPoint(
            vid,
            what,
            spec,
            "a14",
            t,
            source,
            note="~ read off the chart (its axis fitted to the README's figures of the same points: "
            f"within 0.02 ms, FastViT-MA36 0.1 ms); {note}",
        )
        for vid, what, spec, t, source, note in (
            (
                "V1",
                "MobileNetV2 1.0, 224x224",
                "mobilenetv2",
                0.98e-3,
                _MOBILEONE_CHART,
                "precision of the model not stated",
            ),
            (
                "V2",
                "ResNet-50 (the RSB A2 weights), 224x224",
                "resnet50",
                2.61e-3,
                _FASTVIT_CHART,
                "which ResNet by its plotted top-1 (79.8%, ResNet-50's A2 recipe)",
            ),
            (
                "V3",
                "DeiT-B (ViT-B/16), 224x224",
                "vit-b16",
                11.6e-3,
                _FASTVIT_CHART,
                "which DeiT by its plotted top-1 (81.8%); attention as per-head matmuls and a softmax",
            ),
        )
    ),
    # 2026-12-06: ResNet-50 and MobileNetV2 (Hugging Face ports) through Core ML, compute
    # units CPU_AND_NE, on an M4 Pro and an M5 Max; batch 16 as 16 runs in one program
    *(
        VPoint(
            vid,
            f"{what}, batch 16",
            spec,
            chip,
            16 / rate,
            f"{_ZHANG} (batch-16 {chip} CPU_AND_NE median, {rate} img/s)",
            repeat=16,
            note=note,
            comparable=comparable,
        )
        for vid, what, spec, chip, rate, note, comparable in (
            (
                "V4",
                "ResNet-50 (microsoft/resnet-50, no classifier)",
                "resnet50",
                "m4-pro",
                929.6,
                _PY,
                True,
            ),
            (
                "V5",
                "ResNet-50 (microsoft/resnet-50, no classifier)",
                "resnet50",
                "m5-max",
                1094.6,
                _PY,
                True,
            ),
            (
                "V6",
                "MobileNetV2 (google/mobilenet_v2_1.0_224, no classifier)",
                "mobilenetv2",
                "m4-pro",
                3044.7,
                _TF_PAD,
                False,
            ),
            (
                "V7",
                "MobileNetV2 (google/mobilenet_v2_1.0_224, no classifier)",
                "mobilenetv2",
                "m5-max",
                3602.2,
                _TF_PAD,
                False,
            ),
        )
    ),
    VPoint(
        "V8",
        "MobileNetV2 (google/mobilenet_v2_1.0_224, no classifier), batch 1",
        "mobilenetv2",
        "m5-max",
        1 / 3389.58,
        f"{_ZHANG} (results/mobilenet-b1-deep.json @6fc64c3: CPU_AND_NE median, 3389.58 calls/s)",
        note=_TF_PAD,
        comparable=False,
    ),
)


def rows(arrays, values: dict | None = None, points=VALIDATION) -> list:
    """``[(point, predicted s, predicted / measured)]`` of ``points`` planned by ``arrays``
    (:func:`fastane.roofline.calibrate.errors` on the validation points)."""
    return errors(arrays, values, points)


def markdown(arrays, values: dict | None = None) -> str:
    """The validation table of docs/roofline.md, planned by ``arrays``."""
    rs = rows(arrays, values)
    lines = [
        "| id | model | chip | measured | predicted | pred/meas | comparable | independent | source | "
        "caveats |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p, t, r in rs:
        lines.append(
            f"| {p.id} | {p.what} | {p.chip} | {p.measured_s * 1e3:.2f} ms | {t * 1e3:.2f} ms | "
            f"{r:.2f} | {'yes' if p.comparable else 'no'} | {'yes' if p.independent else 'no'} | "
            f"{p.source} | {p.note} |"
        )
    lines.append("")
    for label, sel in (
        ("comparable and independent", lambda p: p.comparable and p.independent),
        ("independent", lambda p: p.independent),
        ("all", lambda p: True),
    ):
        rr = [r for p, _, r in rs if sel(p)]
        lines.append(
            f"- {label}: rms log-error x{rms_log_error(rr):.3f} over {len(rr)} points, "
            f"{sum(0.5 <= r <= 2 for r in rr)} within 2x"
        )
    return "\n".join(lines)
