"""The recurrent ops of the vocabulary: ``lstm``, ``gru`` and ``rnn`` (ONNX LSTM, GRU, RNN),
on the host in float32 (the arithmetic in float64, rounded once to float32).

They run on the host because Core ML places recurrent layers on the CPU (a step depends on
the one before: no ANE program streams the sequence), and fastane has no ANE lowering for
them either.  ONNX's semantics: gate orders ``i o f c`` (LSTM), ``z r h`` (GRU); every
direction (forward, reverse, bidirectional); layout 0 (``X`` sequence-first) and 1
(batch-first); the default activations only (sigmoid for the gates, tanh otherwise);
``clip`` on the activations' inputs; optional biases, initial states and LSTM peepholes;
``sequence_lens`` absent or constant (a sequence shorter than ``X`` stops its state at its
length, its later ``Y`` rows 0, and a reverse direction starts at its own last step).
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError, ModelNotImplementedError
from .opdef import HostCost, OnnxName, need_const, need_float, need_input, register_op
from ..tensor import TensorType

#: op -> (gates, state outputs (Y_h, and LSTM's Y_c), its ONNX default activations)
_SPEC = {
    "lstm": (4, 2, ("sigmoid", "tanh", "tanh")),
    "gru": (3, 1, ("sigmoid", "tanh")),
    "rnn": (1, 1, ("tanh",)),
}
#: the inputs after X, W, R, B, sequence_lens: initial_h (and LSTM's initial_c, P)
_H0 = 5


def _parse(c, a, ins):
    gates, states, acts = _SPEC[c.fop]
    if not any(c.outs):  # every output is optional
        raise ModelError(f"{c.where}: uses none of its outputs")
    direction = a.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ModelError(f"{c.where}: direction {direction!r} is not forward, reverse or bidirectional")
    nd = 2 if direction == "bidirectional" else 1
    given = [str(s).lower() for s in a.get("activations", [])]
    if given and given != list(acts) * nd:
        raise ModelNotImplementedError(
            f"{c.where}: activations {a['activations']} are not implemented (only the default "
            f"{', '.join(acts)})"
        )
    if a.get("input_forget", 0):
        raise ModelNotImplementedError(f"{c.where}: input_forget=1 (coupled gates) is not implemented")
    attrs = {
        "direction": direction,
        "layout": a.get("layout", 0),
        "hidden_size": a.get("hidden_size"),
        "clip": a.get("clip"),
        "linear_before_reset": a.get("linear_before_reset", 0),
    }
    return c.mk(attrs, n_out=1 + states)


def _dims(node, types):
    """``(seq, batch, input, hidden, directions)`` of a recurrent node."""
    gates = _SPEC[node.op][0]
    x = need_float(need_input(types, 0, node), node)
    if len(x.shape) != 3:
        raise ModelError(f"{node.describe()}: X must be 3-D, got {x}")
    seq, batch, inp = x.shape if not node.attrs.get("layout") else (x.shape[1], x.shape[0], x.shape[2])
    nd = 2 if node.attrs.get("direction") == "bidirectional" else 1
    w = need_float(need_input(types, 1, node, "W"), node, 1)
    hidden = node.attrs.get("hidden_size") or (w.shape[1] // gates if len(w.shape) == 3 else 0)
    return seq, batch, inp, int(hidden), nd


def _infer(node, types, consts):
    gates, states, _ = _SPEC[node.op]
    seq, batch, inp, h, nd = _dims(node, types)
    layout = node.attrs.get("layout", 0)
    state = (batch, nd, h) if layout else (nd, batch, h)
    want = {1: (nd, gates * h, inp), 2: (nd, gates * h, h), 3: (nd, 2 * gates * h), 7: (nd, 3 * h)}
    want.update({i: state for i in range(_H0, _H0 + states)})
    for i, shape in want.items():
        t = types[i] if i < len(types) else None
        if t is None:
            if i in (1, 2):
                raise ModelError(f"{node.describe()}: missing input {i}")
            continue
        need_float(t, node, i)
        if tuple(t.shape) != shape or h < 1:
            raise ModelError(f"{node.describe()}: input {i} must have shape {shape}, got {t}")
    if len(node.inputs) > 4 and node.inputs[4]:
        lens = np.asarray(need_const(consts, 4, node, "sequence_lens"))
        if lens.shape != (batch,) or lens.dtype.kind not in "iu" or (lens.size and not (0 <= lens).all()):
            raise ModelError(f"{node.describe()}: sequence_lens must be {batch} non-negative integers")
        if lens.size and lens.max() > seq:
            raise ModelError(f"{node.describe()}: sequence_lens {lens.tolist()} exceed the {seq} steps of X")
    y = (batch, seq, nd, h) if layout else (seq, nd, batch, h)
    dt = types[0].dtype
    return [TensorType(dt, y)] + [TensorType(dt, state)] * states


def _cost(node, in_types, out_types):
    seq, batch, inp, h, nd = _dims(node, in_types)
    gates = _SPEC[node.op][0]
    # float64: the input projection of every step, the outputs, a step's gates
    temp = 8 * (seq * batch * nd * gates * h + seq * batch * nd * h + seq * batch * inp)
    return HostCost(temp, seq * batch * nd * gates * h * (inp + h), taps=seq * nd)


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _step(op, node, g, h, c, p, r, rb):
    """One step of ``op``: ``g`` the input's projection (with its bias), ``h``/``c`` the
    states, ``p`` LSTM's peepholes, ``r``/``rb`` the recurrence weight and bias; the new
    ``(h, c)``."""
    clip = node.attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    if op == "rnn":
        return np.tanh(cl(g + h @ r.T + rb)), c
    if op == "lstm":
        gi, go, gf, gc = np.split(g + h @ r.T + rb, 4, axis=-1)
        pi, po, pf = np.split(p, 3)
        i, f = _sigmoid(cl(gi + pi * c)), _sigmoid(cl(gf + pf * c))
        c = f * c + i * np.tanh(cl(gc))
        return _sigmoid(cl(go + po * c)) * np.tanh(c), c
    gz, gr, gh = np.split(g, 3, axis=-1)
    rz, rr, rh = np.split(r, 3)
    bz, br, bh = np.split(rb, 3)
    z, rg = _sigmoid(cl(gz + h @ rz.T + bz)), _sigmoid(cl(gr + h @ rr.T + br))
    if node.attrs.get("linear_before_reset"):
        n = np.tanh(cl(gh + rg * (h @ rh.T + bh)))
    else:
        n = np.tanh(cl(gh + (rg * h) @ rh.T + bh))
    return (1 - z) * n + z * h, c


def _direction(op, node, x, w, r, b, h, c, p, lens, reverse):
    """One direction over ``x`` (seq x batch x input): ``(Y, h, c)``."""
    seq, batch = x.shape[:2]
    gw = w.shape[0]
    proj = x @ w.T + b[:gw]  # every step's input projection at once
    y = np.zeros((seq, batch, h.shape[-1]))
    rows = np.arange(batch)
    for s in range(seq):
        live = s < lens
        if not live.any():
            break
        t = np.where(live, lens - 1 - s, 0) if reverse else np.full(batch, s)
        h2, c2 = _step(op, node, proj[t, rows], h, c, p, r, b[gw:])
        keep = live[:, None]
        h, c = np.where(keep, h2, h), np.where(keep, c2, c)
        y[t[live], rows[live]] = h[live]
    return y, h, c


def _host(node, x, w, r, b=None, lens=None, h0=None, c0=None, p=None):
    op = node.op
    gates, states, _ = _SPEC[op]
    layout = node.attrs.get("layout", 0)
    x = np.swapaxes(x, 0, 1) if layout else x
    seq, batch, _ = x.shape
    nd, hid = w.shape[0], w.shape[1] // gates
    f64 = lambda v, shape: np.zeros(shape) if v is None else v.astype(np.float64)  # noqa: E731
    state = lambda v: None if v is None else (np.swapaxes(v, 0, 1) if layout else v)  # noqa: E731
    b, p = f64(b, (nd, 2 * gates * hid)), f64(p, (nd, 3 * hid))
    h0, c0 = f64(state(h0), (nd, batch, hid)), f64(state(c0), (nd, batch, hid))
    lens = np.full(batch, seq) if lens is None else np.asarray(lens).astype(np.int64)
    x, w, r = x.astype(np.float64), w.astype(np.float64), r.astype(np.float64)
    reverse = node.attrs.get("direction") == "reverse"
    runs = [
        _direction(op, node, x, w[d], r[d], b[d], h0[d], c0[d], p[d], lens, reverse or d == 1)
        for d in range(nd)
    ]
    y = np.stack([y for y, _, _ in runs], 1)  # seq x nd x batch x hidden
    hs = [np.stack([run[k] for run in runs]) for k in (1, 2)[:states]]
    if layout:
        y, hs = np.transpose(y, (2, 0, 1, 3)), [np.swapaxes(v, 0, 1) for v in hs]
    return [y.astype(np.float32)] + [v.astype(np.float32) for v in hs]


#: the docs' word on them: where they run and why
_DOC = "default activations"
for _op, _onnx in (("lstm", "LSTM"), ("gru", "GRU"), ("rnn", "RNN")):
    register_op(_op, _infer, ane="recurrent", onnx=[OnnxName(_onnx, _parse, doc=_DOC)], cost=_cost)(_host)
