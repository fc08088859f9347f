"""Layer shapes of the convolutional reference networks (no weights), for the roofline model.

ResNet-50, MobileNetV2, MobileNetV3-Small and MobileOne; :mod:`fastane.workloads` (the
conventions, the transformers and the registry :func:`~fastane.workloads.get`) re-exports
them.
"""

from __future__ import annotations

from .layers import Conv2d, Eltwise, Matmul, Workload

__all__ = ["resnet50", "mobilenetv2", "mobilenetv3_small", "mobileone", "squeeze_excite"]


def resnet50(image: int = 224) -> Workload:
    """ResNet-50 v1.5 (torchvision: the stride-2 sits on the 3x3 conv), batch 1."""
    L = []
    s = image
    L.append(Conv2d("conv1", 3, 64, s, s, 7, 7, 2, 3, activation="relu"))
    s = L[-1].hout
    L.append(
        Eltwise(
            "maxpool", "maxpool3x3/2", (64, s, s), (64, (s - 1) // 2 + 1, (s - 1) // 2 + 1), ops_per_out=9
        )
    )
    s = (s - 1) // 2 + 1
    cin = 64
    for stage, (width, blocks, stride) in enumerate(
        [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1
    ):
        for b in range(blocks):
            st = stride if b == 0 else 1
            p = f"layer{stage}.{b}"
            L.append(Conv2d(f"{p}.conv1", cin, width, s, s, 1, 1, 1, 0, activation="relu"))
            L.append(Conv2d(f"{p}.conv2", width, width, s, s, 3, 3, st, 1, activation="relu", follows=True))
            so = L[-1].hout
            L.append(Conv2d(f"{p}.conv3", width, 4 * width, so, so, follows=True))
            if b == 0:
                L.append(Conv2d(f"{p}.downsample", cin, 4 * width, s, s, 1, 1, st, 0))
            L.append(Eltwise(f"{p}.add_relu", "add+relu", (4 * width, so, so), n_inputs=2))
            cin, s = 4 * width, so
    L.append(Eltwise("avgpool", "avgpool", (cin, s, s), (cin, 1, 1), ops_per_out=s * s))
    L.append(Matmul("fc", 1, 1, cin, 1000))
    return Workload(
        "resnet50",
        f"ResNet-50 v1.5, {image}x{image}, batch 1",
        tuple(L),
        source="He et al. 2015; torchvision resnet50",
    )


def mobilenetv2(image: int = 224) -> Workload:
    """MobileNetV2 1.0, batch 1 (ReLU6 fused into the convs)."""
    L = []
    s = image
    L.append(Conv2d("features.0", 3, 32, s, s, 3, 3, 2, 1, activation="relu6"))
    s, cin = L[-1].hout, 32
    idx = 1
    for t, c, n, st in [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]:
        for i in range(n):
            stride = st if i == 0 else 1
            hid = cin * t
            p = f"features.{idx}"
            if t != 1:
                L.append(
                    Conv2d(
                        f"{p}.expand", cin, hid, s, s, activation="relu6", follows=isinstance(L[-1], Conv2d)
                    )
                )
            L.append(
                Conv2d(
                    f"{p}.dw", hid, hid, s, s, 3, 3, stride, 1, groups=hid, activation="relu6", follows=True
                )
            )
            so = L[-1].hout
            L.append(Conv2d(f"{p}.project", hid, c, so, so, follows=True))
            if stride == 1 and cin == c:
                L.append(Eltwise(f"{p}.add", "add", (c, so, so), n_inputs=2))
            cin, s = c, so
            idx += 1
    L.append(
        Conv2d(f"features.{idx}", cin, 1280, s, s, activation="relu6", follows=isinstance(L[-1], Conv2d))
    )
    L.append(Eltwise("avgpool", "avgpool", (1280, s, s), (1280, 1, 1), ops_per_out=s * s))
    L.append(Matmul("classifier", 1, 1, 1280, 1000))
    return Workload(
        "mobilenetv2",
        f"MobileNetV2 1.0, {image}x{image}, batch 1",
        tuple(L),
        source="Sandler et al. 2018; torchvision mobilenet_v2",
    )


def squeeze_excite(L, p, c, s, squeeze, gate, then=None):
    """Squeeze-excite on a (c, s, s) tensor: pool, two 1x1 convs (ReLU, then ``gate``; the
    hard sigmoid is costed as ``relu6``), the rescale multiply (planar), followed by the
    activation ``then`` when one comes after the block (``"mul+gelu"``)."""
    L.append(Eltwise(f"{p}.pool", "avgpool", (c, s, s), (c, 1, 1), ops_per_out=s * s))
    L.append(Conv2d(f"{p}.reduce", c, squeeze, 1, 1, activation="relu"))
    L.append(Conv2d(f"{p}.expand", squeeze, c, 1, 1, activation=gate, follows=True))
    op, n = ("mul", 1) if then is None else (f"mul+{then}", 2)
    L.append(Eltwise(f"{p}.scale", op, (c, s, s), n_inputs=2, ops_per_out=n))


def mobilenetv3_small(image: int = 224) -> Workload:
    """MobileNetV3-small 1.0 (torchvision ``mobilenet_v3_small``), batch 1.  Hardswish and
    ReLU are fused into the convs (hardswish as a one-stage LUT activation is not in the
    registry: ``relu6`` stands for it, same cost); squeeze-excite is its two 1x1 convs on
    the pooled vector (the pooling and the rescale multiply are planar ``Eltwise``)."""
    L = [Conv2d("features.0", 3, 16, image, image, 3, 3, 2, 1, activation="relu6")]
    s, cin = L[-1].hout, 16
    # (kernel, expanded, out, squeeze-excite, activation, stride): torchvision's table
    cfg = [
        (3, 16, 16, True, "relu", 2),
        (3, 72, 24, False, "relu", 2),
        (3, 88, 24, False, "relu", 1),
        (5, 96, 40, True, "relu6", 2),
        (5, 240, 40, True, "relu6", 1),
        (5, 240, 40, True, "relu6", 1),
        (5, 120, 48, True, "relu6", 1),
        (5, 144, 48, True, "relu6", 1),
        (5, 288, 96, True, "relu6", 2),
        (5, 576, 96, True, "relu6", 1),
        (5, 576, 96, True, "relu6", 1),
    ]
    for i, (k, exp, out, se, act, st) in enumerate(cfg, start=1):
        p = f"features.{i}"
        if exp != cin:
            L.append(Conv2d(f"{p}.expand", cin, exp, s, s, activation=act, follows=isinstance(L[-1], Conv2d)))
        L.append(
            Conv2d(
                f"{p}.dw",
                exp,
                exp,
                s,
                s,
                k,
                k,
                st,
                k // 2,
                groups=exp,
                activation=act,
                follows=isinstance(L[-1], Conv2d),
            )
        )
        so = L[-1].hout
        if se:
            squeeze_excite(L, f"{p}.se", exp, so, max(8, (exp // 4 + 4) // 8 * 8), "relu6")
        L.append(Conv2d(f"{p}.project", exp, out, so, so, follows=isinstance(L[-1], Conv2d)))
        if st == 1 and cin == out:
            L.append(Eltwise(f"{p}.add", "add", (out, so, so), n_inputs=2))
        cin, s = out, so
    L.append(Conv2d("features.12", cin, 576, s, s, activation="relu6", follows=isinstance(L[-1], Conv2d)))
    L.append(Eltwise("avgpool", "avgpool", (576, s, s), (576, 1, 1), ops_per_out=s * s))
    L.append(Matmul("classifier.0", 1, 1, 576, 1024, activation="relu6"))
    L.append(Matmul("classifier.3", 1, 1, 1024, 1000, follows=True))
    return Workload(
        "mobilenetv3-small",
        f"MobileNetV3-small 1.0, {image}x{image}, batch 1",
        tuple(L),
        source="Howard et al. 2019; torchvision mobilenet_v3_small",
    )


#: width multipliers of stages 1-4 (apple/ml-mobileone@b7f4e6d ``mobileone.py``, ``PARAMS``)
_MOBILEONE = {
    "s0": (0.75, 1.0, 1.0, 2.0),
    "s1": (1.5, 1.5, 2.0, 2.5),
    "s2": (1.5, 2.0, 2.5, 4.0),
    "s3": (2.0, 2.5, 3.0, 4.0),
    "s4": (3.0, 3.5, 3.5, 4.0),
}


def mobileone(variant: str = "s0", image: int = 224) -> Workload:
    """MobileOne (Vasu et al. 2023, apple/ml-mobileone ``mobileone.py``) after
    reparameterization: every block is one 3x3 depthwise and one 1x1 pointwise conv, each
    with a fused ReLU.  Stage widths 64/128/256/512 x the variant's multipliers, 2/8/10/1
    blocks, each stage starting with stride 2 (``num_blocks_per_stage``); variants S0-S4
    (:data:`_MOBILEONE`); S4 alone has squeeze-excite (``use_se``: the last 5 blocks of stage
    3 and stage 4), its two 1x1 convs on the pooled vector."""
    wm = _MOBILEONE[variant]
    se = variant == "s4"
    cin = min(64, int(64 * wm[0]))
    L = [Conv2d("stage0", 3, cin, image, image, 3, 3, 2, 1, activation="relu")]
    s = L[-1].hout
    for st, (width, n) in enumerate(zip((64, 128, 256, 512), (2, 8, 10, 1)), start=1):
        planes = int(width * wm[st - 1])
        n_se = (5 if st == 3 else n if st == 4 else 0) if se else 0
        for b in range(n):
            p = f"stage{st}.{b}"
            stride = 2 if b == 0 else 1
            L.append(
                Conv2d(
                    f"{p}.dw",
                    cin,
                    cin,
                    s,
                    s,
                    3,
                    3,
                    stride,
                    1,
                    groups=cin,
                    activation="relu",
                    follows=isinstance(L[-1], Conv2d),
                )
            )
            s = L[-1].hout
            if b >= n - n_se:
                squeeze_excite(L, f"{p}.dw.se", cin, s, cin // 16, "sigmoid")
            L.append(
                Conv2d(f"{p}.pw", cin, planes, s, s, activation="relu", follows=isinstance(L[-1], Conv2d))
            )
            if b >= n - n_se:
                squeeze_excite(L, f"{p}.pw.se", planes, s, planes // 16, "sigmoid")
            cin = planes
    L.append(Eltwise("gap", "avgpool", (cin, s, s), (cin, 1, 1), ops_per_out=s * s))
    L.append(Matmul("linear", 1, 1, cin, 1000))
    return Workload(
        f"mobileone-{variant}",
        f"MobileOne-{variant.upper()} (reparameterized), {image}x{image}, batch 1",
        tuple(L),
        source="Vasu et al. 2023; apple/ml-mobileone mobileone.py",
    )
