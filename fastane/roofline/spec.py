"""Workloads described on the command line: ``--transformer "layers=24,d=1024,..."`` and
``--matmul MxKxN`` (docs/roofline.md, "Your own workloads").  A malformed spec raises
:class:`ValueError` with one precise line (the CLI prints it and exits 2).
"""

from __future__ import annotations

from .. import workloads as _wl

__all__ = ["parse_transformer", "parse_matmul", "parse_convs", "parse_relu", "TRANSFORMER_KEYS"]

#: required and optional keys of a transformer spec
_REQUIRED = ("layers", "d", "heads", "ffn", "vocab", "seq")
_INTS = _REQUIRED + ("kv", "lm_tokens", "kv_heads", "head_dim")
_CHOICES = {
    "gated": ("0", "1"),
    "act": ("gelu", "silu", "relu"),
    "norm": ("layer", "rms"),
    "cache": ("none", "concat"),
}
TRANSFORMER_KEYS = _INTS + tuple(_CHOICES)
#: sizes past these are not a model anyone runs on an ANE (and would plan for ever)
_MAX = {
    "layers": 256,
    "d": 32768,
    "heads": 1024,
    "ffn": 1 << 18,
    "vocab": 1 << 20,
    "seq": 1 << 15,
    "kv": 1 << 18,
    "lm_tokens": 1 << 15,
    "kv_heads": 1024,
    "head_dim": 4096,
}


def _int(key: str, text: str, lo: int) -> int:
    t = text.strip()
    if not t.isdigit():
        raise ValueError(f"{key}={text!r} is not a non-negative integer")
    v = int(t)
    name = key.split(": ")[-1]
    if v < lo or v > _MAX[name]:
        raise ValueError(f"{key}={v} is out of range ({lo}..{_MAX[name]})")
    return v


def parse_transformer(spec: str) -> _wl.Workload:
    """The :func:`fastane.workloads.transformer` a spec like
    ``"layers=24,d=1024,heads=16,ffn=4096,vocab=50257,seq=512,kv=512,lm_tokens=1"`` names."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            "--transformer needs a spec such as 'layers=24,d=1024,heads=16,ffn=4096,vocab=50257,seq=512'"
        )
    vals: dict = {}
    for item in spec.split(","):
        if "=" not in item:
            raise ValueError(f"--transformer: {item.strip()!r} is not key=value")
        k, v = (s.strip() for s in item.split("=", 1))
        if k not in TRANSFORMER_KEYS:
            raise ValueError(f"--transformer: unknown key {k!r} (keys: {', '.join(TRANSFORMER_KEYS)})")
        if k in vals:
            raise ValueError(f"--transformer: {k} given twice")
        if k in _CHOICES:
            if v not in _CHOICES[k]:
                raise ValueError(f"--transformer: {k}={v!r} is not one of {'|'.join(_CHOICES[k])}")
            vals[k] = v
        else:
            vals[k] = _int(f"--transformer: {k}", v, 0 if k == "vocab" else 1)  # vocab=0: no LM head
    missing = [k for k in _REQUIRED if k not in vals]
    if missing:
        raise ValueError(f"--transformer: missing {', '.join(missing)} (required: {', '.join(_REQUIRED)})")
    heads, kvh = vals["heads"], vals.get("kv_heads", vals["heads"])
    head_dim = vals.get("head_dim")
    if head_dim is None and vals["d"] % heads:
        raise ValueError(f"--transformer: d={vals['d']} is not a multiple of heads={heads} (give head_dim=)")
    if heads % kvh:
        raise ValueError(f"--transformer: heads={heads} is not a multiple of kv_heads={kvh}")
    if vals.get("lm_tokens", 0) > vals["seq"]:
        raise ValueError(f"--transformer: lm_tokens={vals['lm_tokens']} exceeds seq={vals['seq']}")
    if "lm_tokens" in vals and vals["vocab"] == 0:
        raise ValueError("--transformer: lm_tokens= needs an LM head (vocab > 0)")
    if vals["seq"] > vals.get("kv", vals["seq"]):
        raise ValueError(f"--transformer: seq={vals['seq']} exceeds the attention context kv={vals['kv']}")
    if vals.get("cache") == "concat" and vals.get("kv", vals["seq"]) == vals["seq"]:
        raise ValueError(f"--transformer: cache=concat needs kv= past seq={vals['seq']} (the cached rows)")
    return _wl.transformer(
        layers=vals["layers"],
        d=vals["d"],
        heads=heads,
        ffn=vals["ffn"],
        vocab=vals["vocab"],
        seq=vals["seq"],
        kv=vals.get("kv"),
        lm_tokens=vals.get("lm_tokens"),
        kv_heads=vals.get("kv_heads"),
        head_dim=head_dim,
        gated=vals.get("gated", "0") == "1",
        act=vals.get("act", "gelu"),
        norm=vals.get("norm", "layer"),
        cache=vals.get("cache", "none"),
    )


#: how many numbers a shape spec has, in words (its "expected ..." message)
_COUNT = {2: "two", 3: "three", 4: "four"}


def _dims(label: str, spec, highs: dict, example: str) -> tuple:
    """The positive integers of a shape spec such as ``1x4096x128256``, one per key of
    ``highs`` (the name of each, in order -> its largest value); :class:`ValueError` naming
    ``label`` and ``spec`` if the count, a digit or a range is wrong."""
    parts = str(spec).strip().lower().split("x")
    if len(parts) != len(highs) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(
            f"{label} {spec!r}: expected {'x'.join(highs)}, {_COUNT[len(highs)]} positive integers "
            f"such as {example}"
        )
    vals = tuple(int(p) for p in parts)
    for (name, hi), v in zip(highs.items(), vals):
        if not 1 <= v <= hi:
            raise ValueError(f"{label} {spec!r}: {name}={v} is out of range (1..{hi})")
    return vals


def parse_matmul(spec: str) -> _wl.Workload:
    """The one-matmul workload ``MxKxN`` names (weights K x N)."""
    m, k, n = _dims("--matmul", spec, {"M": 1 << 16, "K": 1 << 20, "N": 1 << 20}, "1x4096x128256")
    return _wl.matmul(m, k, n)


def parse_convs(spec: str) -> _wl.Workload:
    """The :func:`fastane.workloads.conv_stack` ``NxCxHWxK`` names: N chained K x K
    convolutions of C channels on an HW x HW map (``16x256x32x3``)."""
    n, c, hw, k = _dims("convs", spec, {"N": 256, "C": 1 << 14, "HW": 1 << 12, "K": 15}, "16x256x32x3")
    if k > hw:
        raise ValueError(f"convs {spec!r}: a {k}x{k} kernel is larger than the {hw}x{hw} map")
    return _wl.conv_stack(n, c, hw, k)


def parse_relu(spec: str) -> _wl.Workload:
    """The :func:`fastane.workloads.relu_stream` ``RxD`` names: one relu of an R x D array."""
    r, d = _dims("relu", spec, {"R": 1 << 16, "D": 1 << 16}, "8192x4096")
    return _wl.relu_stream(r, d)
