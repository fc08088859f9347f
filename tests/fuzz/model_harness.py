"""fastane's model-file fuzzing harness: seeded mutations of ONNX and Core ML files, run
through the command line as a user would.

Case ``i`` of campaign ``seed`` is decided by ``random.Random(f"{seed}:{i}")`` alone.  Its
base is one of four seeds built offline (deterministically) at campaign start and cached
in ``OUT/seeds``: an ONNX CNN (Conv, BatchNormalization, Relu, MaxPool, Gemm), an ONNX
transformer block (MatMul, Softmax, LayerNormalization, Gelu and Erf, Reshape/Transpose, a
Shape subgraph), a Core ML ML Program ``.mlpackage`` (its weights in
``weights/weight.bin``) and a NeuralNetwork ``.mlmodel``.  The mutations:

* **bytes** of the protobuf file, ``weight.bin`` or ``Manifest.json``: bit flips, byte
  runs set to 0 or 0xff, truncation, insertion;
* **structure**: the protobuf parsed and one field of any message set to an extreme
  (integers 0, -1, 2^31-1, 2^63-1, ...; floats NaN, inf, huge; strings not UTF-8, long,
  with a NUL, another op's name for an op type, a traversal for a file name; bytes cut or
  doubled), a repeated element or map entry dropped or duplicated, an enum set out of
  range; Core ML weight blobs' file names and offsets in particular;
* **package games**: ``weights/`` or ``weight.bin`` or the spec or ``Manifest.json``
  linked outside the package, a FIFO or a directory in place of a file, traversal or
  absolute paths in ``Manifest.json``, deeply nested or malformed JSON; for ONNX, an
  initializer moved to an external data file and then pointed outside, linked outside,
  replaced by a FIFO or given extreme offsets and lengths.

Each case runs in a child forked from a warmed-up parent (``fuzzkit.run_isolated``:
``RLIMIT_AS`` of the parent's space plus 3 GiB, a timeout); the child writes the case's
files into a fresh folder, installs an audit hook on ``open`` and runs ``fastane run M
--random`` (a third of them with ``--report``, some with ``--json``) and ``fastane
roofline M`` in-process.  Outcome classes: ok, a clean error (exit status 2, one line on
stderr, no traceback), and the failures: ``traceback`` (an exception escaping the command
line, or an error of more than one line or another exit status), ``memory`` (a host
``MemoryError``), ``hang`` (the timeout), ``crash`` (a signal), ``read-outside`` (a file
opened outside the model's folder -- the package for an ``.mlpackage``).

Usage: ``python tests/fuzz/model_harness.py --cases N [--seed S] [--out .fuzz-models]
[--resume]`` (``scripts/fuzz_models.sh N`` wraps it); ``--case I`` replays one case in
this process, ``--summary DIR...`` prints the tables of merged shards.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import os
import random
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import fuzzkit
from fuzzkit import AS_HEADROOM

#: seconds a case may run (a seed runs in well under a second)
TIMEOUT = 10.0
#: the case's stand-in for /etc/passwd: what a link or a traversal out of the package reaches
SECRET = b"root:x:0:0:fuzz-secret:/root:/bin/sh\n" * 4
#: written in place of a string, then replaced by the same number of bytes that are not UTF-8
NOT_UTF8 = (b"\x01fzu8\x01", b"\xff\xfe\xc0\x80\xed\xa0")
KINDS = (("onnx-cnn", 30), ("onnx-transformer", 25), ("mlprogram", 30), ("mlmodel", 15))
PACKAGE = "model.mlpackage"
SPEC = "Data/com.apple.CoreML/model.mlmodel"
WEIGHTS = "Data/com.apple.CoreML/weights"
ONNX_OPS = (
    "Conv MaxPool AveragePool Expand Einsum Range Cast Reshape Slice Constant Gather Concat Shape "
    "Transpose MatMul Gemm Softmax LayerNormalization Erf Relu Add Mul Div Pow Sqrt Resize Pad Split "
    "Tile ConstantOfShape Where ReduceMean Flatten BatchNormalization GlobalAveragePool Unsqueeze "
    "Squeeze TopK NonZero Loop If Scan Identity ConvTranspose QuantizeLinear DequantizeLinear NoSuchOp"
).split()
MIL_OPS = (
    "conv linear matmul layer_norm softmax transpose reshape relu max_pool avg_pool reduce_mean add "
    "mul const gelu einsum expand_dims squeeze concat slice_by_index gather tile pad "
    "upsample_nearest_neighbor constexpr_affine_dequantize batch_norm instance_norm split range_1d "
    "fill conv_transpose no_such_op"
).split()

_SEEDS = None  # name -> {"model": path, "files": {path: bytes}, "argv": [...]}


# ------------------------------------------------------------------ seeds
def _onnx_cnn():
    from fastane.model import zoo
    from onnx import TensorProto, helper

    n = zoo._Net(0)
    y = n.conv_bn("x", 3, 4)
    y = n.node("MaxPool", [y], "pool", kernel_shape=[2, 2], strides=[2, 2])
    y = n.node("Flatten", [y], "flatten")
    w = (n.rng.standard_normal((5, 64)) * 0.1).astype("float32")
    y = n.node("Gemm", [y, n.const(w), n.const(w[:, 0] * 0, "b")], "fc", transB=1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    return n.model("cnn", [x], [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 5])], 17)


def _onnx_transformer():
    from fastane.model import zoo
    from onnx import helper

    m = zoo.transformer(seed=0, d=8, heads=2)
    g = m.graph
    y = g.output[0].name
    g.node.extend(
        [
            helper.make_node("Erf", [y], ["erf"], name="erf"),
            helper.make_node("Add", [y, "erf"], ["sum"], name="sum"),
            helper.make_node("Shape", ["x"], ["xshape"], name="xshape"),
            helper.make_node("Reshape", ["sum", "xshape"], ["out"], name="out"),
        ]
    )
    g.output[0].name = "out"
    return m


def _mlprogram(path: Path):
    import coremltools as ct
    import numpy as np
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    fc = (rng.standard_normal((6, 8)) * 0.3).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 8, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.relu(x=mb.conv(x=x, weight=w, bias=np.ones(8, np.float32), pad_type="same"))
        y = mb.max_pool(x=y, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")
        y = mb.transpose(x=mb.reduce_mean(x=y, axes=[2], keep_dims=False), perm=[0, 2, 1])
        y = mb.layer_norm(x=y, axes=[-1], gamma=np.ones(8, np.float32), epsilon=1e-5)
        y = mb.linear(x=y, weight=fc, bias=np.zeros(6, np.float32))
        return mb.softmax(x=mb.gelu(x=y), axis=-1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17).save(str(path))
    # the manifest's item identifiers are random UUIDs: fixed ones make the seed reproducible
    man = json.loads((path / "Manifest.json").read_text())
    entries = man["itemInfoEntries"]
    ids = {
        k: f"00000000-0000-0000-0000-00000000000{i}"
        for i, k in enumerate(sorted(entries, key=lambda k: entries[k]["path"]))
    }
    man["itemInfoEntries"] = {ids[k]: v for k, v in man["itemInfoEntries"].items()}
    man["rootModelIdentifier"] = ids[man["rootModelIdentifier"]]
    (path / "Manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    # and the spec's maps in a fixed order
    spec = path / SPEC
    msg = _proto_class("mlprogram")()
    msg.ParseFromString(spec.read_bytes())
    spec.write_bytes(msg.SerializeToString(deterministic=True))


def _mlmodel(path: Path):
    import coremltools as ct
    import numpy as np
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    rng = np.random.default_rng(0)
    b = NeuralNetworkBuilder([("x", datatypes.Array(3, 8, 8))], [("y", None)])
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)  # kh, kw, cin, cout
    b.add_convolution(
        "conv", 3, 4, 3, 3, 1, 1, "same", 1, w, np.ones(4, np.float32), True, input_name="x", output_name="c"
    )
    b.add_activation("relu", "RELU", "c", "r")
    b.add_pooling("pool", 2, 2, 2, 2, layer_type="MAX", padding_type="VALID", input_name="r", output_name="p")
    b.add_flatten("flat", mode=0, input_name="p", output_name="f")
    fc = rng.standard_normal((5, 64)).astype(np.float32)
    b.add_inner_product("fc", fc, np.zeros(5, np.float32), 64, 5, True, input_name="f", output_name="s")
    b.add_softmax("softmax", "s", "y")
    ct.models.MLModel(b.spec, skip_model_load=True).save(str(path))


def build_seeds(folder: Path) -> None:
    """Write the four seed models under ``folder`` (one subfolder each)."""
    import onnx

    for name, make in (("onnx-cnn", _onnx_cnn), ("onnx-transformer", _onnx_transformer)):
        (folder / name).mkdir(parents=True, exist_ok=True)
        onnx.save(make(), str(folder / name / "model.onnx"))
    (folder / "mlprogram").mkdir(parents=True, exist_ok=True)
    _mlprogram(folder / "mlprogram" / PACKAGE)
    (folder / "mlmodel").mkdir(parents=True, exist_ok=True)
    _mlmodel(folder / "mlmodel" / "model.mlmodel")


def seeds(folder: Path | None = None) -> dict:
    """The seeds (built once into ``folder``, default ``.fuzz-models/seeds``, then read
    from there): name -> the model's path, its files' bytes and the arguments it runs with."""
    global _SEEDS
    if _SEEDS is None:
        folder = Path(folder or ".fuzz-models/seeds")
        if not (folder / "mlmodel" / "model.mlmodel").exists():
            build_seeds(folder)
        _SEEDS = {}
        for name, _ in KINDS:
            root = folder / name
            files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
            model = PACKAGE if name == "mlprogram" else next(iter(files))
            shape = ["--shape", "x=1x4x8"] if name == "onnx-transformer" else []
            _SEEDS[name] = {"model": model, "files": files, "shape": shape}
    return _SEEDS


# ------------------------------------------------------------------ structure-aware mutation
def _is_map(fd) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _messages(msg, path: str):
    """Every message under ``msg`` with its path (map values too)."""
    yield msg, path
    for fd, val in msg.ListFields():
        if fd.message_type is None:
            continue
        if _is_map(fd):
            if fd.message_type.fields_by_name["value"].message_type is not None:
                for k in sorted(val):
                    yield from _messages(val[k], f"{path}.{fd.name}[{k!r}]")
        elif fd.is_repeated:
            for i, m in enumerate(val):
                yield from _messages(m, f"{path}.{fd.name}[{i}]")
        else:
            yield from _messages(val, f"{path}.{fd.name}")


_INT_RANGE = {"int32": 32, "sint32": 32, "sfixed32": 32, "int64": 64, "sint64": 64, "sfixed64": 64}


def _int_value(fd, rng: random.Random) -> int:
    v = rng.choice([0, -1, 1, 2, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**32, 2**20, 2**40, 3**33])
    v = rng.choice([v, v, rng.randrange(-100, 300)])
    type_name = {v: k for k, v in vars(type(fd)).items() if k.startswith("TYPE_")}[fd.type].lower()[5:]
    if type_name in _INT_RANGE:
        half = 1 << (_INT_RANGE[type_name] - 1)
        return max(-half, min(half - 1, v))
    return max(0, min((1 << (32 if "32" in type_name else 64)) - 1, v))  # unsigned


def _string_value(fd, old: str, rng: random.Random, names) -> str:
    if fd.name in ("op_type", "type") and names:
        return rng.choice(names)
    if fd.name in ("fileName", "location", "path") or rng.random() < 0.1:
        return rng.choice(
            [
                "../secret.bin",
                "@model_path/weights/../../../../secret.bin",
                "@outside/passwd",
                "/dev/zero",
                "",
            ]
        )
    return rng.choice(
        [
            "",
            NOT_UTF8[0].decode(),
            "a\x00b",
            "A" * 4096,
            old + "_",
            old[: len(old) // 2],
            rng.choice(names) if names else "x",
        ]
    )


def _set_scalar(msg, fd, rng: random.Random, names, index=None) -> str:
    """Set field ``fd`` of ``msg`` (element ``index`` of a repeated field) to an extreme."""
    c = fd.cpp_type
    old = getattr(msg, fd.name) if index is None else getattr(msg, fd.name)[index]
    if c in (fd.CPPTYPE_INT32, fd.CPPTYPE_INT64, fd.CPPTYPE_UINT32, fd.CPPTYPE_UINT64):
        v = _int_value(fd, rng)
    elif c in (fd.CPPTYPE_FLOAT, fd.CPPTYPE_DOUBLE):
        v = rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e38, -3.4e38, 1e-45, 1e300, 2.0**31])
    elif c == fd.CPPTYPE_BOOL:
        v = not old
    elif c == fd.CPPTYPE_ENUM:
        v = rng.choice([v.number for v in fd.enum_type.values] + [-1, 99, 2**31 - 1])
    elif fd.type == fd.TYPE_BYTES:
        v = rng.choice([b"", old[: rng.randrange(len(old) + 1)], old * 2, old[:-1], bytes(len(old) + 8)])
    else:
        v = _string_value(fd, old, rng, names)
    if index is None:
        setattr(msg, fd.name, v)
    else:
        getattr(msg, fd.name)[index] = v
    shown = (
        f"{len(v)} bytes" if isinstance(v, bytes) else (repr(v) if len(repr(v)) < 60 else f"{len(v)} chars")
    )
    return f"= {shown}"


def mutate_proto(msg, rng: random.Random, names) -> str:
    """One structure-aware mutation of the protobuf message ``msg`` (in place), in words."""
    msgs = list(_messages(msg, ""))
    for _ in range(20):  # a message with a field to mutate
        m, path = rng.choice(msgs)
        fields = [fd for fd, _ in m.ListFields()]
        if rng.random() < 0.15 or not fields:
            fields = list(m.DESCRIPTOR.fields)
        if fields:
            break
    else:
        return "nothing to mutate"
    fd = rng.choice(fields)
    where = f"{path}.{fd.name}"
    try:
        if _is_map(fd):
            val = getattr(m, fd.name)
            keys = sorted(val)
            if not keys:
                return f"{where}: empty map"
            k = rng.choice(keys)
            g = rng.choice(["drop", "rename", "copy"])
            if g != "drop":
                new = rng.choice([k + "_", NOT_UTF8[0].decode(), "", rng.choice(keys)])
                if new != k:
                    is_msg = fd.message_type.fields_by_name["value"].message_type is not None
                    if is_msg:
                        val[new].CopyFrom(val[k])
                    else:
                        val[new] = val[k]
            if g in ("drop", "rename"):
                del val[k]
            return f"{where}[{k!r}]: {g}"
        if fd.is_repeated:
            val = getattr(m, fd.name)
            n = len(val)
            g = rng.choice(["drop", "duplicate", "set", "set", "clear"] if n else ["add"])
            i = rng.randrange(n) if n else 0
            if g == "drop":
                del val[i]
            elif g == "clear":
                del val[:]
            elif g == "duplicate":
                if fd.message_type is not None:
                    val.add().CopyFrom(val[i])
                else:
                    val.append(val[i])
            elif g == "add":
                if fd.message_type is not None:
                    val.add()
                else:
                    val.append(_first_value(fd))
                    return f"{where}: add[0] {_set_scalar(m, fd, rng, names, 0)}"
            elif fd.message_type is None:
                return f"{where}[{i}] {_set_scalar(m, fd, rng, names, i)}"
            else:
                val[i].Clear()
                g = "empty"
            return f"{where}[{i}]: {g}"
        if fd.message_type is not None:
            if m.HasField(fd.name) and rng.random() < 0.5:
                m.ClearField(fd.name)
                return f"{where}: cleared"
            getattr(m, fd.name).SetInParent()
            return f"{where}: set empty"
        return f"{where} {_set_scalar(m, fd, rng, names)}"
    except (ValueError, TypeError, OverflowError) as exc:  # a value the field does not take
        return f"{where}: not set ({type(exc).__name__})"


def _first_value(fd):
    if fd.cpp_type == fd.CPPTYPE_STRING:
        return b"" if fd.type == fd.TYPE_BYTES else ""
    if fd.cpp_type == fd.CPPTYPE_BOOL:
        return False
    if fd.cpp_type in (fd.CPPTYPE_FLOAT, fd.CPPTYPE_DOUBLE):
        return 0.0
    return fd.enum_type.values[0].number if fd.cpp_type == fd.CPPTYPE_ENUM else 0


def _proto_class(base: str):
    if base.startswith("onnx"):
        import onnx

        return onnx.ModelProto
    from coremltools.proto import Model_pb2

    return Model_pb2.Model


def _blobs(msg):
    return [m for m, _ in _messages(msg, "") if m.DESCRIPTOR.name == "BlobFileValue"]


# ------------------------------------------------------------------ byte-level mutation
def mutate_bytes(data: bytearray, rng: random.Random) -> str:
    if not data:
        data.extend(rng.randbytes(rng.choice([1, 8, 64])))
        return f"filled with {len(data)} random bytes"
    g = rng.choice(["bit", "bit", "run", "truncate", "insert"])
    pos = rng.randrange(len(data))
    if g == "bit":
        bit = rng.randrange(8)
        data[pos] ^= 1 << bit
        return f"flip byte {pos:#x} bit {bit}"
    if g == "run":
        n = min(rng.choice([1, 2, 4, 8, 64]), len(data) - pos)
        v = rng.choice([0, 0xFF])
        data[pos : pos + n] = bytes([v]) * n
        return f"{n} bytes at {pos:#x} = {v:#x}"
    if g == "truncate":
        del data[pos:]
        return f"truncate to {pos:#x}"
    ins = rng.randbytes(rng.choice([1, 4, 16]))
    data[pos:pos] = ins
    return f"insert {ins.hex()} at {pos:#x}"


# ------------------------------------------------------------------ package games
def _place(case: dict, path: str, how: str, value=None) -> None:
    """Make ``path`` a file of bytes ``value``, a link to ``value``, a FIFO or a directory
    (``how``), removing what was at, below or above it (but the directories above)."""

    def clash(p):  # at, below or above path (a link, FIFO or file cannot hold it)
        return p == path or p.startswith(path + "/") or path.startswith(p + "/")

    for key in ("files", "links"):
        for p in [p for p in case[key] if clash(p)]:
            del case[key][p]
    for key in ("fifos", "dirs"):
        case[key] = [p for p in case[key] if not clash(p) or (key == "dirs" and path.startswith(p + "/"))]
    if how in ("files", "links"):
        case[how][path] = value
    else:
        case[how].append(path)


def _package_game(case: dict, rng: random.Random) -> str:
    files = case["files"]
    man_path = f"{PACKAGE}/Manifest.json"
    spec_path, wdir = f"{PACKAGE}/{SPEC}", f"{PACKAGE}/{WEIGHTS}"
    wbin = f"{wdir}/weight.bin"
    g = rng.choice(
        [
            "weights-link",
            "weights-link",
            "weightbin-link",
            "spec-link",
            "manifest-link",
            "fifo",
            "dir",
            "manifest-path",
            "manifest-path",
            "manifest-nest",
            "manifest-junk",
            "blob",
            "blob",
        ]
    )
    if g == "weights-link":
        # weights/ is a link to a folder outside holding the same weight.bin and a secret
        _place(case, wdir, "links", "@outside")
        if rng.random() < 0.5:
            _set_blobs(case, "@model_path/weights/passwd", None)
            return "weights/ linked outside the package; the blobs name weights/passwd"
        return "weights/ linked outside the package"
    if g in ("weightbin-link", "spec-link", "manifest-link"):
        path = {"weightbin-link": wbin, "spec-link": spec_path, "manifest-link": man_path}[g]
        target = {"weightbin-link": "@outside/weight.bin", "spec-link": "@outside/model.mlmodel"}.get(
            g, "@outside/Manifest.json"
        )
        _place(case, path, "links", target)
        return f"{path} linked to {target}"
    if g in ("fifo", "dir"):
        path = rng.choice([wbin, man_path, spec_path, wdir])
        _place(case, path, "fifos" if g == "fifo" else "dirs")
        return f"{path} is a {'FIFO' if g == 'fifo' else 'directory'}"
    if g == "manifest-nest":
        depth = rng.choice([1000, 10**4, 10**5, 10**6])
        open_, close = rng.choice([("[", "]"), ('{"a":', "}")])
        _place(case, man_path, "files", (open_ * depth + "0" + close * depth).encode())
        return f"Manifest.json nested {depth} deep"
    try:
        man = json.loads(files[man_path])
        entry = man["itemInfoEntries"][man["rootModelIdentifier"]]
    except (KeyError, TypeError, ValueError, RecursionError):  # an earlier mutation broke it
        man = json.loads(seeds()["mlprogram"]["files"][man_path])
        entry = man["itemInfoEntries"][man["rootModelIdentifier"]]
    if g == "manifest-path":
        p = rng.choice(
            [
                "../../secret.bin",
                "com.apple.CoreML/../../../secret.bin",
                "@outside/model.mlmodel",
                "/dev/zero",
                "com.apple.CoreML",
                "",
                NOT_UTF8[0].decode(),
            ]
        )
        entry["path"] = p
        _place(case, man_path, "files", json.dumps(man).encode())
        return f"Manifest.json: the root item's path = {p!r}"
    if g == "manifest-junk":
        junk = rng.choice(
            [
                b"",
                b"{}",
                b"[]",
                b"null",
                json.dumps({**man, "itemInfoEntries": []}).encode(),
                json.dumps({**man, "rootModelIdentifier": 7}).encode(),
                json.dumps({**man, "itemInfoEntries": {"x": {"path": 3}}}).encode(),
                b"\xff\xfe{",
                b'{"itemInfoEntries": {"a": {"path": "' + b"x" * (2 << 20) + b'"}}}',
            ]
        )
        _place(case, man_path, "files", junk)
        return f"Manifest.json = {junk[:60]!r}"
    # blob: a weight's file name or offset set to a hostile value
    name = rng.choice(
        [
            None,
            None,
            "@model_path/weights/../../../secret.bin",
            "@model_path/weights/../../Manifest.json",
            "@outside/passwd",
            "@model_path/weights/",
            "@model_path/weights/weight.bin\x00x",
        ]
    )
    off = rng.choice([0, 1, 63, 2**31 - 1, 2**63 - 1, 2**64 - 1]) if name is None else None
    _set_blobs(case, name, off, rng)
    return f"weight blobs: fileName = {name!r}" if name is not None else f"a weight blob: offset = {off}"


def _set_blobs(case: dict, name, offset, rng=None) -> None:
    """Set the file name (all) or the offset (one, at random) of the spec's weight blobs."""
    spec_path = f"{PACKAGE}/{SPEC}"
    msg = _proto_class("mlprogram")()
    try:
        msg.ParseFromString(case["files"][spec_path])
    except Exception:  # noqa: BLE001 (KeyError, DecodeError): an earlier mutation removed or broke it
        return
    blobs = _blobs(msg)
    if name is not None:
        for b in blobs:
            b.fileName = name
    elif blobs:
        rng.choice(blobs).offset = offset
    case["files"][spec_path] = msg.SerializeToString(deterministic=True)


def _external_data_game(case: dict, rng: random.Random) -> str:
    """An ONNX initializer moved to ``w.bin`` beside the model, then made hostile."""
    import onnx

    m = onnx.ModelProto()
    try:
        m.ParseFromString(case["files"]["model.onnx"])
    except Exception:  # noqa: BLE001 (DecodeError): an earlier byte mutation broke it
        return "model.onnx no longer parses: no initializer moved"
    inits = [t for t in m.graph.initializer if t.raw_data]
    if not inits:
        return "no initializer to move"
    t = rng.choice(inits)
    data = t.raw_data
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    g = rng.choice(["plain", "traversal", "absolute", "link", "fifo", "dir", "offset", "length"])
    loc, offset, length = "w.bin", 0, len(data)
    if g == "traversal":
        loc = rng.choice(["../secret.bin", "sub/../../secret.bin"])
    elif g == "absolute":
        loc = "@outside/weight.bin"
    elif g == "offset":
        offset = rng.choice([-1, 1, 2**31 - 1, 2**63 - 1, len(data)])
    elif g == "length":
        length = rng.choice([0, -1, len(data) + 1, 2**40, 2**63 - 1])
    for k, v in (("location", loc), ("offset", str(offset)), ("length", str(length))):
        t.external_data.add(key=k, value=v)
    if g == "link":
        _place(case, "w.bin", "links", "@outside/weight.bin")
    elif g in ("fifo", "dir"):
        _place(case, "w.bin", "fifos" if g == "fifo" else "dirs")
    else:
        _place(case, "w.bin", "files", data)
    case["files"]["model.onnx"] = m.SerializeToString(deterministic=True)
    return (
        f"initializer {t.name!r} in external data: {g} (location {loc!r}, offset {offset}, length {length})"
    )


# ------------------------------------------------------------------ cases
def make_case(seed: int, index: int) -> dict:
    """The case ``index`` of campaign ``seed`` (JSON-able: the files' bytes in base64)."""
    rng = random.Random(f"{seed}:{index}")
    base = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    s = seeds()[base]
    case = {
        "kind": base,
        "index": index,
        "base": base,
        "model": s["model"],
        "files": dict(s["files"]),
        "links": {},
        "fifos": [],
        "dirs": [],
        "mutations": [],
    }
    proto_file = s["model"] + ("/" + SPEC if base == "mlprogram" else "")
    names = ONNX_OPS if base.startswith("onnx") else MIL_OPS
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5])):
        m = rng.choice(["bytes", "struct", "struct", "struct", "game"])
        if m == "game" and base == "mlprogram":
            case["mutations"].append(_package_game(case, rng))
        elif m == "game" and base.startswith("onnx") and "model.onnx" in case["files"]:
            case["mutations"].append(_external_data_game(case, rng))
        elif m == "game" and rng.random() < 0.05:  # (a FIFO blocks open() until the timeout)
            _place(case, s["model"], "fifos")
            case["mutations"].append("the model file is a FIFO")
        elif m == "struct" and proto_file in case["files"]:
            msg = _proto_class(base)()
            try:
                msg.ParseFromString(case["files"][proto_file])
            except Exception:  # noqa: BLE001 (DecodeError): an earlier byte mutation broke it
                case["mutations"].append(f"{proto_file}: no longer parses, not mutated")
                continue
            case["mutations"].append(f"{proto_file}: {mutate_proto(msg, rng, names)}")
            data = msg.SerializeToString(deterministic=True)
            case["files"][proto_file] = data.replace(*NOT_UTF8)
        else:
            mutable = [p for p in case["files"] if not p.endswith(".bin") or rng.random() < 0.5]
            if not mutable:
                continue
            path = rng.choice(sorted(mutable))
            data = bytearray(case["files"][path])
            case["mutations"].append(f"{path}: {mutate_bytes(data, rng)}")
            case["files"][path] = bytes(data)
    argv = [["run", "--random"], ["roofline"]]
    if rng.random() < 0.33:
        argv[0].append("--report")
        if rng.random() < 0.3:
            argv[0].append("--json")
    argv[0] += s["shape"]
    case["argv"] = argv
    case["files"] = {p: base64.b64encode(d).decode() for p, d in case["files"].items()}
    return case


# ------------------------------------------------------------------ running a case
class Traceback_(fuzzkit.Failure):
    """An exception escaped the command line, or its error was not one line."""

    status = "traceback"


class MemoryBlowUp(fuzzkit.Failure):
    """A host ``MemoryError`` (not fastane's own ``DeviceMemoryError``)."""

    status = "memory"


class ReadOutside(fuzzkit.Failure):
    """A file outside the model's folder was opened."""

    status = "read-outside"


def materialize(case: dict, folder: Path) -> tuple:
    """Write the case under ``folder``: ``(model path, the folder the model may read)``.
    The model lives in ``folder/m``; ``folder/secret.bin`` is beside it (what a traversal
    out of the model's folder reaches) and ``folder/outside`` holds what the links point
    to (the seed's weight.bin, spec and manifest, and a ``passwd``)."""
    folder = Path(folder)
    out = folder / "outside"
    out.mkdir(parents=True, exist_ok=True)
    (folder / "secret.bin").write_bytes(SECRET * 32)
    (out / "passwd").write_bytes(SECRET)
    pkg = seeds()["mlprogram"]["files"]
    for name, rel in (
        ("weight.bin", f"{WEIGHTS}/weight.bin"),
        ("model.mlmodel", SPEC),
        ("Manifest.json", ""),
    ):
        (out / name).write_bytes(pkg[f"{PACKAGE}/{rel or 'Manifest.json'}"])

    def fix(text: str) -> str:
        return text.replace("@outside", str(out))

    root = folder / "m"
    for rel in case["dirs"]:
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel, data in case["files"].items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        raw = base64.b64decode(data)
        if b"@outside" in raw:  # the same length does not matter here: rewrite the protobuf
            raw = _rewrite_outside(rel, raw, str(out))
        p.write_bytes(raw)
    for rel, target in case["links"].items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(fix(target), p)
    for rel in case["fifos"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(p)
    model = root / case["model"]
    return model, (model if case["model"] == PACKAGE else root)


def _rewrite_outside(rel: str, raw: bytes, out: str) -> bytes:
    """``raw`` with "@outside" replaced by the outside folder's path (in a protobuf, through
    the message, so that lengths stay right; elsewhere as text)."""
    if not rel.endswith((".onnx", ".mlmodel")):
        return raw.replace(b"@outside", out.encode())
    msg = _proto_class("onnx" if rel.endswith(".onnx") else "mlprogram")()
    try:
        msg.ParseFromString(raw)
    except Exception:  # noqa: BLE001 (DecodeError)
        return raw
    for m, _ in _messages(msg, ""):
        for fd, val in m.ListFields():
            # (a string that is not UTF-8 reads as bytes)
            if fd.type == fd.TYPE_STRING and isinstance(val, str) and "@outside" in val:
                setattr(m, fd.name, val.replace("@outside", out))
    return msg.SerializeToString(deterministic=True)


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame in fastane (else the innermost)."""
    # without reading the source lines: the audit hook would see the files opened
    frames = traceback.StackSummary.extract(traceback.walk_tb(exc.__traceback__), lookup_lines=False)
    ours = [f for f in frames if "/fastane/" in f.filename] or frames
    if not ours:
        return "?"
    f = ours[-1]
    name = f.filename.split("/fastane/")[-1]
    return f"fastane/{name}:{f.lineno} in {f.name}"


#: lines a command prints on stderr besides its error (the inputs --random makes)
INFO_PREFIXES = ("fastane run: input ",)


def run_cli(argv: list) -> tuple:
    """``fastane ARGV`` in this process: ``(exit status, stderr)``; stdout is encoded as a
    terminal's (UTF-8, strict).  An exception escaping it is a :class:`Traceback_`, a
    host ``MemoryError`` a :class:`MemoryBlowUp`."""
    from fastane import cli
    from fastane.errors import DeviceMemoryError

    err = io.StringIO()
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
                out.flush()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    except MemoryError as exc:
        if not isinstance(exc, DeviceMemoryError):
            raise MemoryBlowUp(f"fastane {argv[0]}: MemoryError: {exc} at {_where(exc)}") from None
        raise Traceback_(f"fastane {argv[0]}: DeviceMemoryError escaped: {exc} at {_where(exc)}") from None
    except Exception as exc:  # noqa: BLE001
        msg = str(exc)
        msg = msg if len(msg) < 300 else msg[:300] + "..."
        raise Traceback_(f"fastane {argv[0]}: {type(exc).__name__}: {msg} at {_where(exc)}") from None
    return code, err.getvalue()


def check_outcome(argv: list, code: int, err: str) -> str:
    """``ok`` or ``refused`` (a clean error), else a :class:`Traceback_`."""
    lines = [ln for ln in err.splitlines() if ln and not ln.startswith(INFO_PREFIXES)]
    if code == 0:
        return "ok"
    if code == 2 and len(lines) == 1 and "Traceback" not in err:
        return "refused"
    raise Traceback_(f"fastane {argv[0]}: exit status {code}, {len(lines)} error lines: {err[-600:]!r}")


def _code_roots() -> tuple:
    """Where the child may read code: the Python tree, fastane's and its kernels' sources
    and Numba's cache beside them (a case reaching a kernel the warm-up did not compile
    loads it), and /proc (threadpoolctl reads /proc/self/maps when numpy's BLAS is first
    asked about).  Everything else a case opens must be inside the model's folder."""
    import fastane
    import fastane.kernels
    from numba.core import config

    roots = {sys.prefix, sys.base_prefix, "/proc"}
    roots |= {os.path.dirname(m.__file__) for m in (fastane, fastane.kernels)}
    roots |= {config.CACHE_DIR} if config.CACHE_DIR else set()
    return tuple(sorted(os.path.realpath(r) for r in roots))


def run_case(case: dict) -> str:
    """Run the case's commands on its model (in a fresh folder, ``case["dir"]`` or a
    temporary one): ``"run ok / roofline refused"`` and the like, or a failure."""
    warnings.simplefilter("ignore")
    if "dir" not in case:
        with tempfile.TemporaryDirectory(prefix="fastane-fuzz-") as d:
            return run_case(dict(case, dir=d))
    model, allowed = materialize(case, Path(case["dir"]))
    allowed = os.path.realpath(allowed)
    outside = []

    def audit(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            p = os.path.realpath(os.fsdecode(args[0]))
            if not any(p == r or p.startswith(r + os.sep) for r in (allowed, *roots)):
                outside.append(p)

    roots = _code_roots()
    sys.addaudithook(audit)
    res, failure = [], None
    for argv in case["argv"]:
        full = [argv[0], str(model), *argv[1:]]
        try:
            code, err = run_cli(full)
            what = argv[0] + (" --report" if "--report" in argv else "")
            res.append(f"{what} {check_outcome(full, code, err)}")
        except (Traceback_, MemoryBlowUp) as exc:
            failure = exc
            break
    if outside:
        raise ReadOutside(f"opened outside the model's folder: {sorted(set(outside))[:5]}")
    if failure is not None:
        raise failure
    return " / ".join(res)


def run_isolated(case: dict, timeout: float = TIMEOUT, headroom: int = AS_HEADROOM) -> tuple:
    """``run_case`` in a child (``fuzzkit.run_isolated``), in a temporary folder removed after."""
    with tempfile.TemporaryDirectory(prefix="fastane-fuzz-") as d:
        return fuzzkit.run_isolated(dict(case, dir=d), run_case, timeout, headroom)


def warm_up() -> None:
    """Import and compile, in the parent, all that the commands use on the seeds."""
    for name, s in sorted(seeds().items()):
        case = {"kind": name, "model": s["model"], "links": {}, "fifos": [], "dirs": []}
        case["files"] = {p: base64.b64encode(d).decode() for p, d in s["files"].items()}
        for extra in (["--report"], ["--report", "--json"], []):
            case["argv"] = [["run", "--random", *extra, *s["shape"]], ["roofline"]]
            with tempfile.TemporaryDirectory(prefix="fastane-fuzz-") as d:
                model, _ = materialize(case, Path(d))
                for argv in case["argv"]:
                    with contextlib.suppress(Exception):
                        run_cli([argv[0], str(model), *argv[1:]])


def campaign(n: int, seed: int = 0, out: Path | None = None, resume: bool = False, **kw) -> dict:
    """Run cases ``seed:start .. seed:start+n-1`` (``kw``: ``start``, ``timeout``, ``log``,
    ``budget`` as ``fuzzkit.campaign``); tallies, failures saved under ``out`` (the seeds
    are built into ``out/seeds`` first)."""
    seeds((out or Path(tempfile.mkdtemp(prefix="fastane-seeds-"))) / "seeds")
    kw = {"start": 0, "timeout": TIMEOUT, **kw}
    start, timeout = kw.pop("start"), kw.pop("timeout")
    return fuzzkit.campaign(
        n, seed, out, resume, start, timeout, make_case=make_case, run=run_isolated, warm_up=warm_up, **kw
    )


def summary(state: dict) -> str:
    """The campaign's figures as Markdown: cases by seed, failures by class, outcomes."""
    return "\n".join(
        fuzzkit.summary(state, "none (no traceback, memory blow-up, hang, crash or read outside the model)")
    )


def _replay(seed: int, index: int, out: Path) -> str:
    seeds(out / "seeds")
    case = make_case(seed, index)
    shown = {k: v for k, v in case.items() if k != "files"}
    shown["files"] = {p: f"{len(base64.b64decode(d))} bytes" for p, d in case["files"].items()}
    print(json.dumps(shown, indent=1), flush=True)  # before the run: a hang shows the case
    try:
        return run_case(case)
    except fuzzkit.Failure as f:
        return f"{f.status}: {f}"


def main(argv=None) -> int:
    fuzzkit.single_threaded_numba()
    a = fuzzkit.arguments(__doc__.split("\n")[0], TIMEOUT, ".fuzz-models").parse_args(argv)
    return fuzzkit.main(a, summary, lambda seed, index: _replay(seed, index, a.out), campaign)


if __name__ == "__main__":
    sys.exit(main())
