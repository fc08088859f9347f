"""Quantized convolutions and matmuls of a model on the INT8 path (docs/models.md,
"Quantized models"; docs/numerics.md, "Quantized models on the INT8 path").

The importer turns QLinearConv / QLinearMatMul into ``dequantize -> conv/matmul ->
quantize`` (ONNX's definition), the same chain an ONNX QDQ model spells out; a constant
weight's (and bias's) ``dequantize`` is folded at bind time.  :func:`place_qlinear` finds

    dequantize(qx, x_scale, x_zp) -> conv(., dequantize(qw), [dequantize(qb)]) | matmul(., dequantize(qw))
    -> [relu] -> quantize(., y_scale, y_zp)

and runs it as INT8 tasks (:mod:`fastane.quantized`: integer operands, the 32-bit
accumulator, ``PostScale``/``PostRightShift``, a saturating int8/uint8 output).  The NE has
no zero-point field, so the zero points are folded as a compiler without one would:

* the weight zero point is subtracted at compile time: the kernel is ``qw - w_zp`` when
  every value fits int8 (or uint8): always for ``w_zp = 0`` and for a uint8 weight with
  ``w_zp = 128``; otherwise the layer is beyond the lowering (``NotImplementedError`` when
  it runs: it runs on the host with that reason);
* the input zero point: ``sum (qx - x_zp) wc = sum qx wc - x_zp * sum_k wc``, a constant
  per output channel, goes into the int16 per-channel bias vector (``MatrixBias``) with the
  quantized bias ``qb``; the convolution's zero padding is then materialized on the host
  as ``x_zp`` (the TD's padding reads integer zeros);
* the output zero point: ``round(s acc) + y_zp = round(s (acc + y_zp / s))``, so
  ``y_zp / s`` joins the bias too; the NE's saturation to the output format then clamps
  exactly where ONNX's does.  The bias holds an int16 times one common ``2**AccBiasShift``
  per task: the sum is rounded onto that grid (exact when it fits int16, else off by at
  most ``2**(shift-1)`` accumulator units, i.e. ``2**(shift-1) * s`` output steps);
* the scale ``s = x_scale * w_scale / y_scale`` is one fp16 ``PostScale`` times
  ``2**-PostRightShift`` a task: a per-channel weight scale gives a task group per
  distinct scale (the output channels sharing it).

A ReLU between the MAC op and the quantize is fused into the NE stage when ``y_zp = 0``
(with ``y_zp != 0`` the chain is not fused: the MAC runs on the FP16 path).
"""

from __future__ import annotations

import math

import numpy as np

from ... import quantized as _q
from ...stats import Stats
from ..ops import conv_geometry
from .context import Context

__all__ = ["place_qlinear", "match", "bias_grid"]

_INT8 = (np.dtype(np.int8), np.dtype(np.uint8))


def _scalar(consts, name):
    """A constant scalar (or 1-element) tensor's value; None if absent or not constant."""
    if not name:
        return 0
    v = consts.get(name)
    if v is None or v.size != 1:
        return None
    return v.reshape(-1)[0]


def match(dq, bound, only, why=None) -> dict | None:
    """The quantized MAC chain starting at the ``dequantize`` node ``dq`` (see the module
    docs), or None when the chain is not there (the nodes are then placed one by one); a
    chain that is there but not lowerable leaves its reason in ``why`` (by the MAC node's id)."""

    def _why(mac, reason: str) -> None:
        if why is not None:
            why[id(mac)] = f"not on the INT8 path: {reason}; its MACs run in fp16"
        return None

    consts, types = bound.consts, bound.types
    folded = {o: n for n in bound.folded for o in n.outputs}
    if len(dq.inputs) < 2 or dq.inputs[0] in consts:
        return None
    x = dq.inputs[0]
    if np.dtype(types[x].dtype) not in _INT8:
        return None
    xs, xz = _scalar(consts, dq.inputs[1]), _scalar(consts, dq.inputs[2] if len(dq.inputs) > 2 else "")
    if xs is None or xz is None:
        return None
    mac = only(dq.outputs[0])
    if mac is None or mac.op not in ("conv", "matmul") or mac.inputs[0] != dq.outputs[0]:
        return None
    rank = len(types[x].shape)
    if (mac.op == "conv" and rank != 4) or (mac.op == "matmul" and rank < 2):
        return None
    w = _weight(mac, bound, folded, xs, _why)
    if w is None:
        return None
    qw, ws, wz, qb = w
    nodes, last = [dq, mac], mac
    nxt = only(mac.outputs[0])
    relu = nxt is not None and nxt.op == "relu"
    if relu:
        nodes.append(nxt)
        last, nxt = nxt, only(nxt.outputs[0])
    if nxt is None or nxt.op != "quantize" or nxt.inputs[0] != last.outputs[0]:
        return None
    ys, yz = _scalar(consts, nxt.inputs[1]), _scalar(consts, nxt.inputs[2] if len(nxt.inputs) > 2 else "")
    if ys is None or yz is None or np.dtype(types[nxt.outputs[0]].dtype) not in _INT8:
        return None
    scales = np.concatenate([ws, [float(xs), float(ys)]])
    if not (np.isfinite(scales).all() and (scales > 0).all()):
        return _why(mac, "a scale that is not finite and positive (the NE's PostScale)")
    if relu and int(yz) != 0:
        # max(round(v) + y_zp, y_zp): no NE field clamps at the zero point
        return _why(mac, "a ReLU before a quantize with a non-zero zero point (no NE clamp at it)")
    if mac.op == "conv" and int(mac.attrs.get("groups", 1)) != 1 and np.unique(ws).size > 1:
        return _why(mac, "per-channel weight scales in a grouped convolution (a task group a scale)")
    nodes.append(nxt)
    return {
        "nodes": nodes,
        "mac": mac,
        "x": x,
        "x_dtype": np.dtype(types[x].dtype),
        "x_shape": tuple(types[x].shape),
        "xs": float(xs),
        "xz": int(xz),
        "qw": qw,
        "ws": ws,
        "wz": wz,
        "qb": qb,
        "ys": float(ys),
        "yz": int(yz),
        "y_dtype": np.dtype(types[nxt.outputs[0]].dtype),
        "y_shape": tuple(types[nxt.outputs[0]].shape),
        "relu": relu,
    }


def _weight(mac, bound, folded, xs, why):
    """``(qw, ws, wz, qb)``: the quantized weight of ``mac`` (folded dequantize), its scales
    and zero points (one, or one per output channel), and its int32 bias in accumulator
    units (None without one); None when they are not there (``why(mac, reason)``: there
    but not lowerable)."""
    consts = bound.consts
    dw = folded.get(mac.inputs[1])
    if dw is None or dw.op != "dequantize" or not all(t in consts for t in dw.inputs if t):
        return None
    qw = consts[dw.inputs[0]]
    if qw.dtype not in _INT8 or qw.ndim != (4 if mac.op == "conv" else 2):
        return None
    cout_axis = 0 if mac.op == "conv" else 1
    cout = qw.shape[cout_axis]
    ws = np.asarray(consts[dw.inputs[1]], np.float64).reshape(-1)
    wz = np.asarray(consts[dw.inputs[2]] if len(dw.inputs) > 2 and dw.inputs[2] else 0, np.int64).reshape(-1)
    if ws.size not in (1, cout) or wz.size not in (1, cout):
        return None
    if ws.size > 1 and int(dw.attrs.get("axis", 1)) % qw.ndim != cout_axis:
        return None
    qb = None
    if mac.op == "conv" and len(mac.inputs) > 2 and mac.inputs[2]:
        db = folded.get(mac.inputs[2])
        if db is None or db.op != "dequantize" or consts[db.inputs[0]].dtype != np.int32:
            return None
        bs = np.asarray(consts[db.inputs[1]], np.float64).reshape(-1)
        want = np.float32(xs) * np.asarray(ws, np.float32)
        bz = _scalar(consts, db.inputs[2] if len(db.inputs) > 2 else "")
        if bz != 0 or not np.allclose(bs, want, rtol=1e-6, atol=0):
            return why(mac, "the bias's scale is not x_scale * w_scale (accumulator units)")
        qb = np.asarray(consts[db.inputs[0]], np.int64).reshape(-1)
    return qw, ws, wz, qb


def bias_grid(b: np.ndarray) -> tuple:
    """``(integers, shift)``: the real accumulator-unit biases ``b`` rounded (to nearest,
    ties to even) onto the NE's grid, an int16 times one common ``2**shift``, with the
    smallest shift that holds them all (docs/numerics.md)."""
    b = np.asarray(b, np.float64)
    for shift in range(32):
        r = np.rint(b / 2.0**shift)
        if r.size == 0 or (r.min() >= -(2**15) and r.max() < 2**15):
            return r.astype(np.int64) << shift, shift
    raise NotImplementedError("a folded bias is beyond int16 x 2**31")


def _kernel_dtype(m) -> np.dtype:
    """The kernel's dtype from the types alone: the weight's, or int8 for a uint8 weight
    centered on 128 (the values decide the rest when the layer runs)."""
    if m["wz"].size == 1 and int(m["wz"][0]) == 128 and m["qw"].dtype == np.uint8:
        return np.dtype(np.int8)
    return m["qw"].dtype


def _centered(m, what) -> np.ndarray:
    """The kernel ``qw - w_zp`` (Cout first), int8 or uint8; NotImplementedError else."""
    qw = m["qw"].astype(np.int64)
    if m["mac"].op == "matmul":
        qw = qw.T  # (N, K): the linear layout
    wz = m["wz"].reshape((-1,) + (1,) * (qw.ndim - 1))
    wc = qw - wz
    for dt in (np.int8, np.uint8):
        info = np.iinfo(dt)
        if wc.size == 0 or (wc.min() >= info.min and wc.max() <= info.max):
            return wc.astype(dt)
    raise NotImplementedError(
        f"{what}: the weight minus its zero point spans [{wc.min()}, {wc.max()}], beyond int8 and "
        f"uint8: the INT8 path's kernel would be 9-bit"
    )


def _groups(m):
    """``[(output channel indices, scale)]``: one task group per distinct scale."""
    ws = m["ws"]
    cout = m["qw"].shape[0 if m["mac"].op == "conv" else 1]
    base = m["xs"] / m["ys"]
    if ws.size == 1:
        return [(np.arange(cout), base * float(ws[0]))]
    return [(np.flatnonzero(ws == u), base * float(u)) for u in np.unique(ws)]


def place_qlinear(dq, ctx: Context) -> bool:
    """Place the quantized MAC chain at ``dq`` on the INT8 path; False if there is none (a
    chain there but not lowerable leaves its reason in ``ctx.off_int8``: :func:`match`)."""
    m = match(dq, ctx.bound, ctx.only, ctx.off_int8)
    if m is None:
        return False
    chain = _Chain(m)
    notes = [f"INT8 lanes ({m['x_dtype'].name} x {chain.kdt.name} -> {chain.out})"]
    if len(chain.tasks) > 1:
        notes.append(f"per-channel weight scales: {len(chain.tasks)} task groups, one a scale")
    if chain.padded:
        notes.append("the padding materialized on the host as the input zero point")
    layer = ctx.add(
        m["nodes"],
        "ane",
        "; ".join(notes),
        "mac",
        chain.run,
        "conv2d" if chain.is_conv else "linear",
        chain.plan,
        int8=True,
        activation=chain.act,
    )
    layer.name = m["mac"].name  # named after its MAC op (the chain starts at the dequantize)
    return True


class _Chain:
    """A matched chain (:func:`match`) as INT8 tasks: one task group per weight scale."""

    def __init__(self, m: dict):
        self.m, mac = m, m["mac"]
        self.what = mac.describe()
        self.is_conv = mac.op == "conv"
        self.padded = False
        if self.is_conv:
            self.s, self.d, self.pads, _ = conv_geometry(mac, m["x_shape"], m["qw"].shape[2:])
            self.groups = int(mac.attrs.get("groups", 1))
            sym = all(pb == pe for pb, pe in self.pads)
            self.padded = any(p for pp in self.pads for p in pp) and (m["xz"] != 0 or not sym)
        self.act = "relu" if m["relu"] else None
        self.out = m["y_dtype"].name
        self.tasks = _groups(m)
        self.kdt = _kernel_dtype(m)
        self.has_bias = m["qb"] is not None or m["xz"] != 0 or m["yz"] != 0
        self._kept: list = []  # the compile-time constants, made on first run

    def consts(self) -> list:
        """``[(output channels, scale, kernel, bias or None)]`` a task group."""
        m = self.m
        if not self._kept:
            wc = _centered(m, self.what)
            per = wc.reshape(wc.shape[0], -1).astype(np.int64).sum(axis=1)
            qb = np.zeros(wc.shape[0], np.int64) if m["qb"] is None else m["qb"]
            parts = []
            for idx, sc in self.tasks:
                # y_zp / s with the s the NE multiplies by (fastane.quantized.ne_scale)
                bits, rshift = _q.ne_scale(sc)
                s_ne = float(np.array(bits, np.uint16).view(np.float16)) * 2.0**-rshift
                b = qb[idx] - m["xz"] * per[idx] + m["yz"] / s_ne
                parts.append((idx, sc, wc[idx], bias_grid(b)[0] if self.has_bias else None))
            self._kept.append(parts)
        return self._kept[0]

    def call(self, x, w, b, sc, stats_only=False):
        """One task group: ``(y, Stats)``, or its Stats from the shapes (``w`` a shape)."""
        m, act, out, kdt, has_bias = self.m, self.act, self.out, self.kdt, self.has_bias
        x_shape = m["x_shape"]
        opts = _q.options(m["mac"].op, sc, out)
        if self.is_conv:
            pads = self.pads
            pad = ((0, 0), (0, 0)) if self.padded else tuple(tuple(p) for p in pads)
            if stats_only:
                xsh = x_shape
                if self.padded:
                    xsh = x_shape[:2] + tuple(n + sum(p) for n, p in zip(x_shape[2:], pads))
                return _q.plan(
                    xsh, m["x_dtype"], w, kdt, has_bias, self.s, pad, self.d, self.groups, act, sc, out
                )
            return _q._run("conv2d", x, w, b, self.s, pad, self.d, self.groups, act, opts)
        K, M = x_shape[-1], math.prod(x_shape[:-1])
        if stats_only:
            return _q.plan((1, K, 1, M), m["x_dtype"], (w[0], K, 1, 1), kdt, has_bias, (1, 1),
                           ((0, 0), (0, 0)), (1, 1), 1, act, sc, out)  # fmt: skip
        xc = np.ascontiguousarray(x.reshape(M, K).T).reshape(1, K, 1, M)
        y, st = _q._run("linear", xc, w.reshape(w.shape[0], K, 1, 1), b, (1, 1), ((0, 0), (0, 0)), (1, 1), 1,
                        act, opts)  # fmt: skip
        return np.ascontiguousarray(y.reshape(w.shape[0], M).T), st

    def run(self, xs):
        m = self.m
        x = np.asarray(xs[0])
        if self.padded:
            x = np.pad(x, ((0, 0), (0, 0)) + tuple(self.pads), constant_values=m["xz"])
        y = np.empty(m["y_shape"], m["y_dtype"])
        total = Stats()
        for idx, sc, w, b in self.consts():
            r, st = self.call(x, w, b, sc)
            if self.is_conv:
                y[:, idx] = r
            else:
                y.reshape(-1, y.shape[-1])[:, idx] = r
            total = total + st
        return [y], total

    def plan(self) -> Stats:
        total = Stats()
        kshape = self.m["qw"].shape if self.is_conv else self.m["qw"].shape[::-1]
        for idx, sc in self.tasks:
            total = total + self.call(None, (idx.size,) + tuple(kshape[1:]), None, sc, stats_only=True)
        return total
