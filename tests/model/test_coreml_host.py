"""The MIL ops fastane runs only on the host (no ANE lowering), one program per op built
with coremltools' MIL builder, against numpy written from the MIL op reference; their
placement (host, with the reason) and predicted Core ML unit (CPU); control flow refused."""

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types as mtypes  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402
from fastane.model.placement.predict import predict  # noqa: E402
from tests.helpers.coreml import save as _save  # noqa: E402  (the one way a test saves an ML Program)
from tests.helpers.coreml import stateful  # noqa: E402

RNG = np.random.default_rng(11)


def _load(prog, tmp_path, target=ct.target.iOS17):
    return fastane.load_model(_save(prog, tmp_path / "m.mlpackage", target))


def _run(m, *xs):
    """(reference outputs, model outputs), in the model's output order."""
    ins = dict(zip(m.inputs, xs))
    ref, out = m.reference(ins), m(ins)
    return [ref[n] for n in m.outputs], [out[n] for n in m.outputs]


def _close(got, want, fp16_out):
    """float outputs: the float32 reference to 1e-6 relative, the fp16 output within 1 ulp16;
    integer outputs exactly, dtype kept."""
    want = np.asarray(want)
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(fp16_out, want)
        assert np.asarray(fp16_out).dtype.kind in "iu"
        return
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    w16 = want.astype(np.float16).astype(np.float64)
    assert np.all(np.abs(np.asarray(fp16_out, np.float64) - want) <= np.abs(w16 - want) + 1e-7)


def _host_placed(m, *xs, ops):
    """Every layer running one of ``ops`` is on the host with the reason; Core ML's
    predicted unit for it is the CPU, with a reason."""
    bound, layers = m.bind({k: np.shape(x) for k, x in zip(m.inputs, xs)})
    seen = 0
    for lay, pr in zip(layers, predict(layers, bound, "CPU_AND_NE")):
        if {n.op for n in lay.nodes} & set(ops):
            seen += 1
            assert lay.placement in ("host", "layout"), (lay.op, lay.placement)
            assert lay.reason, lay.op
            assert pr.unit == "cpu" and pr.reason, (lay.op, pr)
    assert seen, f"no layer runs {ops}"


def test_einsum(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 3, 4)), mb.TensorSpec(shape=(1, 4, 3, 5))])
    def prog(a, b):
        return mb.einsum(values=(a, b), equation="nchw,nwhu->nchu")

    m = _load(prog, tmp_path)
    a, b = (
        RNG.standard_normal((1, 2, 3, 4)).astype(np.float32),
        RNG.standard_normal((1, 4, 3, 5)).astype(np.float32),
    )
    (r,), (y,) = _run(m, a, b)
    want = np.zeros((1, 2, 3, 5))
    for c in range(2):
        for h in range(3):
            want[0, c, h] = a[0, c, h].astype(np.float64) @ b[0, :, h, :]
    _close(r, want, y)
    _host_placed(m, a, b, ops={"einsum"})


def test_topk_argsort_argmax(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(3, 8))])
    def prog(x):
        v, i = mb.topk(x=x, k=3, axis=-1, ascending=False)
        s = mb.argsort(x=x, axis=0, ascending=True)
        a = mb.reduce_argmax(x=x, axis=1, keep_dims=True)
        b = mb.reduce_argmin(x=x, axis=0, keep_dims=False)
        return v, i, s, a, b

    m = _load(prog, tmp_path)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    x[1, 5] = x[1, 2]  # a tie: the lower index first
    refs, outs = _run(m, x)
    order = np.array([sorted(range(8), key=lambda j: (-x[r, j], j))[:3] for r in range(3)])
    want = [
        np.take_along_axis(x, order, 1),
        order.astype(np.int32),
        np.array([sorted(range(3), key=lambda r: (x[r, c], r)) for c in range(8)]).T.astype(np.int32),
        x.argmax(1)[:, None].astype(np.int32),
        x.argmin(0).astype(np.int32),
    ]
    for r, y, w in zip(refs, outs, want):
        _close(r, w, y)
        assert r.dtype == w.dtype
    _host_placed(m, x, ops={"topk", "argmax", "argmin"})


def test_cumsum_tile_band_part(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 5, 5))])
    def prog(x):
        c = mb.cumsum(x=x, axis=1, exclusive=True, reverse=True)
        t = mb.tile(x=x, reps=[2, 1, 3])
        b = mb.band_part(x=x, lower=1, upper=0)
        return c, t, b

    m = _load(prog, tmp_path)
    x = RNG.standard_normal((2, 5, 5)).astype(np.float32)
    refs, outs = _run(m, x)
    xd = x.astype(np.float64)
    cs = np.zeros_like(xd)
    for i in range(5):
        cs[:, i] = xd[:, i + 1 :].sum(1)
    i, j = np.indices((5, 5))
    band = np.where((i - j <= 1) & (j - i <= 0), xd, 0.0)
    for r, y, w in zip(refs, outs, [cs, np.tile(xd, (2, 1, 3)), band]):
        _close(r, w, y)
    _host_placed(m, x, ops={"cumsum"})


def test_gathers_and_scatters(tmp_path):
    gi = np.array([[1, 2], [3, 0], [0, 4]], np.int32)
    ai = RNG.integers(0, 5, (4, 2, 6)).astype(np.int32)
    si = np.array([[0, 1], [2, 3], [0, 1]], np.int32)  # a duplicate: added twice

    @mb.program(
        input_specs=[
            mb.TensorSpec(shape=(4, 5, 6)),
            mb.TensorSpec(shape=(3, 6)),
            mb.TensorSpec(shape=(4, 2, 6)),
        ]
    )
    def prog(x, u, v):
        g = mb.gather_nd(x=x, indices=gi)
        a = mb.gather_along_axis(x=x, indices=ai, axis=1)
        s = mb.scatter_nd(data=x, indices=si, updates=u, mode="add")
        e = mb.scatter_along_axis(
            data=x,
            indices=ai[:, :1, :],
            updates=mb.slice_by_size(x=v, begin=[0, 0, 0], size=[4, 1, 6]),
            axis=1,
            mode="update",
        )
        c = mb.scatter(data=x, indices=np.array([4, 1], np.int32), updates=v, axis=1, mode="mul")
        return g, a, s, e, c

    m = _load(prog, tmp_path)
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    u = RNG.standard_normal((3, 6)).astype(np.float32)
    v = RNG.standard_normal((4, 2, 6)).astype(np.float32)
    refs, outs = _run(m, x, u, v)
    xd = x.astype(np.float64)
    g = np.stack([xd[a, b] for a, b in gi])
    a = np.empty((4, 2, 6))
    for p in range(4):
        for q in range(2):
            for r in range(6):
                a[p, q, r] = xd[p, ai[p, q, r], r]
    s = xd.copy()
    for k, (p, q) in enumerate(si):
        s[p, q] += u[k]
    e = xd.copy()
    for p in range(4):
        for r in range(6):
            e[p, ai[p, 0, r], r] = v[p, 0, r]
    c = xd.copy()
    for k, q in enumerate([4, 1]):
        c[:, q] *= v[:, k]
    for r, y, w in zip(refs, outs, [g, a, s, e, c]):
        _close(r, w, y)
    _host_placed(m, x, u, v, ops={"gather_nd", "gather_elements", "scatter_nd", "scatter_elements"})


def test_gather_nd_index_out_of_range_is_a_model_error(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 5)), mb.TensorSpec(shape=(2, 2), dtype=mtypes.int32)])
    def prog(x, i):
        return mb.gather_nd(x=x, indices=i)

    m = _load(prog, tmp_path)
    with pytest.raises(ModelError, match="out of range"):
        m({"x": np.zeros((4, 5), np.float32), "i": np.array([[0, 1], [4, 0]], np.int32)})


def test_one_hot(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3), dtype=mtypes.int32)])
    def prog(i):
        return mb.one_hot(indices=i, one_hot_vector_size=4, axis=1, on_value=2.5, off_value=-1.0)

    m = _load(prog, tmp_path)
    i = np.array([[0, 3, 1], [2, 2, -1]], np.int32)
    (r,), (y,) = _run(m, i)
    want = np.full((2, 4, 3), -1.0)
    for a in range(2):
        for c in range(3):
            k = i[a, c] % 4
            want[a, k, c] = 2.5
    _close(r, want, y)


def _grid(mode, n, m, align=None):
    """Source coordinates of Core ML's sampling modes (coremltools' resize_bilinear docs)."""
    y = np.arange(m, dtype=np.float64)
    if mode == "STRICT_ALIGN_CORNERS" or (mode == "ALIGN_CORNERS" and m > 1):
        g = y * (n - 1) / (m - 1) if m > 1 else np.zeros(m)
    elif mode == "ALIGN_CORNERS":
        g = np.full(m, (n - 1) / 2)
    elif mode == "DEFAULT":
        g = y * (n - n / m) / (m - 1) if m > 1 else np.zeros(m)
    elif mode == "OFFSET_CORNERS":
        d = max(1, n - 1) / m
        g = 0.5 * d + y * d
    else:  # UNALIGN_CORNERS
        g = y * n / m + 0.5 * n / m - 0.5
    return np.clip(g, 0, n - 1)


def _bilinear(x, sizes, mode):
    out = x.astype(np.float64)
    for ax, m in zip((-2, -1), sizes):
        n = out.shape[ax]
        g = _grid(mode, n, m)
        lo = np.floor(g).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        t = g - lo
        a, b = np.take(out, lo, ax), np.take(out, hi, ax)
        shp = [1] * out.ndim
        shp[ax] = m
        out = a * (1 - t).reshape(shp) + b * t.reshape(shp)
    return out


def _nearest(x, sizes):
    out = x
    for ax, m in zip((-2, -1), sizes):
        n = out.shape[ax]
        out = np.take(out, np.minimum(np.arange(m) * n // m, n - 1), ax)
    return out.astype(np.float64)


@pytest.mark.parametrize(
    "mode", ["STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS"]
)
def test_resize_bilinear_sampling_modes(tmp_path, mode):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 4, 5))])
    def prog(x):
        a = mb.resize_bilinear(x=x, target_size_height=7, target_size_width=3, sampling_mode=mode)
        b = mb.resize_bilinear(x=x, target_size_height=1, target_size_width=9, sampling_mode=mode)
        return a, b

    m = _load(prog, tmp_path)
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    refs, outs = _run(m, x)
    for r, y, s in zip(refs, outs, [(7, 3), (1, 9)]):
        _close(r, _bilinear(x, s, mode), y)
    _host_placed(m, x, ops={"resize"})


def test_upsample_and_resize_ops(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 4, 6))], opset_version=ct.target.iOS17)
    def prog(x):
        a = mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=False)
        b = mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=2.0, align_corners=True)
        c = mb.upsample_nearest_neighbor(x=x, scale_factor_height=1.5, scale_factor_width=0.5)
        d = mb.resize_nearest_neighbor(x=x, target_size_height=5, target_size_width=9)
        e = mb.resize(
            x=x,
            shape=np.array([0, 7, 0], np.int32),
            resized_dims=np.uint32(2),
            sampling_mode="UNALIGN_CORNERS",
        )
        return a, b, c, d, e

    m = _load(prog, tmp_path)
    x = RNG.standard_normal((1, 3, 4, 6)).astype(np.float32)
    refs, outs = _run(m, x)
    want = [
        _bilinear(x, (8, 9), "UNALIGN_CORNERS"),
        _bilinear(x, (8, 12), "STRICT_ALIGN_CORNERS"),
        _nearest(x, (6, 3)),
        _nearest(x, (5, 9)),
        _bilinear(x, (7, 6), "UNALIGN_CORNERS"),
    ]
    for r, y, w in zip(refs, outs, want):
        assert r.shape == w.shape
        _close(r, w, y)
    _host_placed(m, x, ops={"resize"})


def test_control_flow_is_refused_with_the_reason(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2,))])
    def prog(x):
        return mb.cond(
            pred=mb.greater(x=mb.reduce_sum(x=x), y=0.0),
            _true_fn=lambda: mb.mul(x=x, y=2.0),
            _false_fn=lambda: mb.mul(x=x, y=3.0),
        )

    with pytest.raises(ModelError, match=r"\(cond\): control flow.*not a dataflow graph"):
        _load(prog, tmp_path)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,))])
    def loop(x):
        return mb.while_loop(
            _cond=lambda v: mb.less(x=mb.reduce_sum(x=v), y=10.0),
            _body=lambda v: [mb.add(x=v, y=1.0)],
            loop_vars=[x],
        )

    with pytest.raises(ModelError, match=r"\(while_loop\): control flow"):
        _load(loop, tmp_path)


def test_stateful_model_runs_from_zeros_and_outputs_the_state(tmp_path):
    """A state is an input (zeros unless given, as Core ML's makeState), read_state reads its
    latest write, and its last write, rounded to the fp16 storage, is the output ``s:next``."""

    m = fastane.load_model(stateful(tmp_path / "st.mlpackage"))
    assert m.graph.states == {"s": "s:next"} and m.outputs[-1] == "s:next"
    x = RNG.standard_normal((1, 4)).astype(np.float16)
    for given in ({}, {"s": np.full((1, 4), 0.5, np.float16)}):
        state = given.get("s", np.zeros((1, 4), np.float16)).astype(np.float64)
        want = (state + x).astype(np.float16).astype(np.float64)
        for out in (m.reference({"x": x, **given}), m({"x": x, **given})):
            np.testing.assert_array_equal(out["s:next"], want)
            np.testing.assert_allclose(out[m.outputs[0]], 3 * want, rtol=1e-3)


def test_slice_update_writes_the_slice(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec((2, 6, 5)), mb.TensorSpec((2, 3))], opset_version=ct.target.iOS18)
    def prog(x, u):
        return mb.slice_update(
            x=x,
            update=u,
            begin=[0, 1, -2],
            end=[2, 6, 0],
            stride=[1, 2, 1],
            begin_mask=[True, False, False],
            end_mask=[True, False, False],
            squeeze_mask=[False, False, True],
        )

    m = _load(prog, tmp_path, ct.target.iOS18)
    x, u = RNG.standard_normal((2, 6, 5)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    want = x.copy()
    want[:, 1:6:2, -2] = u
    (r,), (y,) = _run(m, x, u)
    _close(r, want, y)
    _host_placed(m, x, u, ops={"scatter_nd"})


def _lstm_numpy(x, w, r, b, h, c):
    """One direction of MIL's lstm (gate order input, forget, output, cell), float64."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    ys = []
    for t in range(x.shape[0]):
        i, f, o, z = np.split(x[t] @ w.T + h @ r.T + b, 4, axis=-1)
        c = sig(f) * c + sig(i) * np.tanh(z)
        h = sig(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h, c


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("sequence", [True, False])
def test_lstm(tmp_path, direction, sequence):
    s, b, i, h = 5, 2, 3, 4
    nd = 2 if direction == "bidirectional" else 1
    ws = [
        RNG.standard_normal(shape).astype(np.float32) * 0.5
        for shape in [(4 * h, i), (4 * h, h), (4 * h,)] * nd
    ]
    h0, c0 = (RNG.standard_normal((b, nd * h)).astype(np.float32) for _ in range(2))

    @mb.program(input_specs=[mb.TensorSpec((s, b, i))])
    def prog(x):
        back = dict(zip(("weight_ih_back", "weight_hh_back", "bias_back"), ws[3:]))
        return mb.lstm(
            x=x,
            initial_h=h0,
            initial_c=c0,
            weight_ih=ws[0],
            weight_hh=ws[1],
            bias=ws[2],
            direction=direction,
            output_sequence=sequence,
            **back,
        )

    m = _load(prog, tmp_path)
    x = RNG.standard_normal((s, b, i)).astype(np.float32)
    runs = []
    for d in range(nd):
        rev = direction == "reverse" or d == 1
        xd = x[::-1] if rev else x
        y, hh, cc = _lstm_numpy(
            xd.astype(np.float64),
            *ws[3 * d : 3 * d + 3],
            h0[:, d * h : (d + 1) * h],
            c0[:, d * h : (d + 1) * h],
        )
        runs.append((y[::-1] if rev else y, hh, cc))
    y = np.concatenate([run[0] for run in runs], -1)
    hh, cc = (np.concatenate([run[k] for run in runs], -1) for k in (1, 2))
    wants = [y if sequence else hh[None], hh, cc]
    refs, outs = _run(m, x)
    for r, o, want in zip(refs, outs, wants):
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(o, want, atol=5e-3)  # fp16 weights and inputs: host float32 from there
    _host_placed(m, x, ops={"lstm"})
