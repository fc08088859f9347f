"""The datasets :func:`fastane.evaluate` reads: each input an id and its arrays, read by index.

A dataset is picklable and reads an input only when asked (:meth:`Dataset.item`), so that
a Dask worker reads the inputs of its own tasks where they are (a path on a shared disk, or
the arrays a task carries) and the driver holds only ids:

* :class:`ArrayFile` -- one ``.npz`` with one array per model input, the inputs along the
  first axis (``x[i]`` is input ``i``); its ids are the indices.
* :class:`FileFolder` -- a folder of ``.npy`` files (one-input models) or ``.npz`` files (one
  array per input name), one input per file, sorted by relative path (the ids).
* :class:`ImageFolder` -- a folder of images (Pillow), each made into one input by
  :class:`Preprocess` (resize, centre crop, scale, mean/std, layout).
* :class:`Items` -- a Python iterable of arrays or of name -> array dicts (the API).

:func:`fit` gives an item the model's leading batch axis where the array lacks it.
:func:`open_dataset` picks the reader from a path, :func:`read_labels` reads ``--labels``.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, quote
from ..budget import MAX_TENSOR_ELEMENTS
from ..files import inside, npy_header, open_file
from ..tensor import check_size

__all__ = [
    "Dataset",
    "ArrayFile",
    "FileFolder",
    "ImageFolder",
    "Items",
    "Preprocess",
    "open_dataset",
    "read_labels",
    "fit",
    "IMAGE_SUFFIXES",
]

#: the image files an :class:`ImageFolder` reads (Pillow decodes them)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
#: the largest array file a dataset reads (float64 of the largest tensor, and a header)
_MAX_FILE = MAX_TENSOR_ELEMENTS * 8 + (1 << 20)
#: the most files a folder dataset lists (beyond it: an error, before anything is read)
MAX_FILES = 10_000_000
#: the largest image an :class:`ImageFolder` decodes, and the largest a :class:`Preprocess`
#: makes (pixels: 8192 x 8192)
MAX_IMAGE_PIXELS = 1 << 26
#: the kinds of array a dataset holds (numpy's dtype.kind: float, signed, unsigned, bool)
DTYPE_KINDS = "fiub"


class Dataset:
    """Inputs by index: :attr:`ids` (one str each) and :meth:`item` (name -> array, or one
    array for a one-input model).  ``source`` names the dataset in messages."""

    ids: list
    source: str = ""

    def __len__(self) -> int:
        return len(self.ids)

    def item(self, i: int):
        raise NotImplementedError

    def identity(self) -> list:
        """What the inputs are made from (paths, sizes and times of the files; the arrays'
        bytes for inputs given in Python): a partial results file resumes only the same."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """A digest of :meth:`identity` and the ids."""
        import hashlib
        import json

        return hashlib.sha256(json.dumps([self.identity(), self.ids], default=str).encode()).hexdigest()


def _read_array(stream, what: str, shape_dtype=None) -> np.ndarray:
    """The .npy array at the start of ``stream``: its header read and checked first
    (:func:`~fastane.model.files.npy_header`, :func:`~fastane.model.tensor.check_size`), so
    that no more than the declared array is ever allocated, whatever the file claims."""
    shape, dtype = shape_dtype or npy_header(stream)
    check_size(shape, what)
    if dtype.kind not in DTYPE_KINDS:
        raise ModelError(f"{what}: an array of {dtype} (expected numbers)")
    return np.lib.format.read_array(stream, allow_pickle=False)


def _npz_headers(path: str, what: str) -> dict:
    """name -> ``(shape, dtype)`` of the arrays of the .npz ``path`` (headers only)."""
    with open_file(path, what, _MAX_FILE, "the largest input", missing=f"{what}: no such file") as f:
        try:
            with zipfile.ZipFile(f) as z:
                out = {}
                for info in z.infolist():
                    if not info.filename.endswith(".npy"):
                        continue
                    with z.open(info) as m:
                        out[info.filename[:-4]] = npy_header(m)
                return out
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
            raise ModelError(f"{what}: cannot read {quote(path)} as .npz ({exc})") from None


def _load_npz(path: str, what: str, names=None) -> dict:
    """The arrays ``names`` (None: all) of the .npz ``path``, each checked by its header
    before it is read, opened as a model's files are."""
    with open_file(path, what, _MAX_FILE, "the largest input", missing=f"{what}: no such file") as f:
        try:
            with zipfile.ZipFile(f) as z:
                out = {}
                for info in z.infolist():
                    name = info.filename[:-4]
                    if not info.filename.endswith(".npy") or (names is not None and name not in names):
                        continue
                    with z.open(info) as m:
                        out[name] = _read_array(m, f"{what}: array {quote(name)}")
                return out
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
            raise ModelError(f"{what}: cannot read {quote(path)} as .npz ({exc})") from None


def _load_npy(path: str, what: str) -> np.ndarray:
    with open_file(path, what, _MAX_FILE, "the largest input", missing=f"{what}: no such file") as f:
        try:
            return _read_array(f, what)
        except (OSError, ValueError, EOFError) as exc:
            raise ModelError(f"{what}: cannot read {quote(path)} as .npy ({exc})") from None


def _stat_key(path: str) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def file_stamps(path: str) -> list:
    """``[relative path, size, modification time]`` of the file ``path``, or of every file of
    the folder ``path`` (an ``.mlpackage``), in order: what changes when its content does."""
    if not os.path.isdir(path):
        return [[os.path.basename(path), *_stat_key(path)]]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for f in sorted(filenames):
            full = os.path.join(dirpath, f)
            out.append([os.path.relpath(full, path), *_stat_key(full)])
    return out


def digest(h, a, name: str = "") -> None:
    """Feed array ``a`` (its name, dtype, shape and bytes) to the hash ``h``."""
    a = np.ascontiguousarray(a)
    h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
    h.update(a.tobytes())


class ArrayFile(Dataset):
    """One ``.npz``: an array per model input, input ``i`` at index ``i`` of the first axis.
    ``inputs``: the model's input names; the arrays read are those, or, for a one-input
    model, the file's only array but ``exclude`` (e.g. the labels).  Each array is at most
    :data:`~fastane.model.budget.MAX_TENSOR_ELEMENTS` (a larger dataset is a folder of
    files).  The file is read once per process that reads an item."""

    def __init__(self, path: str, inputs=(), exclude=()):
        self.source = os.fspath(path)
        self.path = os.path.abspath(self.source)  # as a worker elsewhere must find it
        heads = _npz_headers(self.path, "the dataset")
        others = [k for k in heads if k not in exclude]
        if inputs and all(k in heads for k in inputs):
            names = list(inputs)
        elif len(inputs) <= 1 and len(others) == 1:
            names = others  # one array for one input, whatever its name
        else:
            missing = [k for k in inputs if k not in heads] or ["to evaluate"]
            raise ModelError(
                f"{quote(self.source)}: no array for the model's input {quote(missing[0])} "
                f"(it holds {', '.join(map(quote, heads)) or 'none'})"
            )
        lengths = {k: (heads[k][0][0] if heads[k][0] else None) for k in names}
        if len(set(lengths.values())) != 1 or None in lengths.values():
            raise ModelError(
                f"{quote(self.source)}: the input arrays must share their first axis (the inputs); "
                f"got {', '.join(f'{quote(k)}: {heads[k][0]}' for k in names)}"
            )
        for k in names:
            check_size(
                heads[k][0], f"{quote(self.source)}: array {quote(k)} (a larger dataset is a folder of files)"
            )
        self.names = names
        self.ids = [str(i) for i in range(lengths[names[0]])]

    def identity(self) -> list:
        return ["npz", self.path, *_stat_key(self.path), self.names]

    def _arrays(self) -> dict:
        cached = getattr(self, "_cache", None)
        if cached is None:
            cached = self._cache = _load_npz(self.path, "the dataset", self.names)
        return cached

    def __getstate__(self):  # a worker reads the file itself
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def item(self, i: int):
        arrays = self._arrays()
        return {k: arrays[k][i] for k in self.names}


class FileFolder(Dataset):
    """A folder of ``.npy`` files (one input each, for a one-input model) or ``.npz`` files
    (one array per input name), read recursively; ids are the paths relative to the folder."""

    def __init__(self, root: str, files: list):
        self.source = os.fspath(root)
        self.root = os.path.abspath(self.source)
        self.ids = files

    def identity(self) -> list:
        return ["files", self.root, [_stat_key(os.path.join(self.root, f)) for f in self.ids]]

    def item(self, i: int):
        path = os.path.join(self.root, self.ids[i])
        what = f"dataset file {quote(self.ids[i])}"
        return _load_npz(path, what) if path.endswith(".npz") else _load_npy(path, what)


@dataclass(frozen=True)
class Preprocess:
    """How an image becomes an input (torchvision's convention): resize the shorter side to
    ``resize`` (or to ``(height, width)``), centre-crop ``crop`` (or ``(height, width)``),
    multiply by ``scale`` (default 1/255), subtract ``mean`` and divide by ``std`` per channel,
    lay out as ``NCHW`` or ``NHWC``.  ``channels``: 1 (grey) or 3 (RGB); None: the model's
    (:func:`fastane.evaluate` sets it from the input's shape), else RGB."""

    resize: tuple | None = None
    crop: tuple | None = None
    scale: float = 1 / 255
    mean: tuple | None = None
    std: tuple | None = None
    layout: str = "NCHW"
    channels: int | None = None

    def __post_init__(self):
        for what, v in (("resize", self.resize), ("crop", self.crop)):
            if v is not None and (len(v) not in (1, 2) or any(int(d) < 1 for d in v)):
                raise ModelError(f"{what} {v}: expected N or (height, width), at least 1")
            if v is not None and (v[0] * v[-1] > MAX_IMAGE_PIXELS):
                raise ModelError(f"{what} {v}: beyond MAX_IMAGE_PIXELS ({MAX_IMAGE_PIXELS})")
        if self.layout.upper() not in ("NCHW", "NHWC"):
            raise ModelError(f"layout {self.layout!r}: expected NCHW or NHWC")
        if self.channels is not None and self.channels not in (1, 3):
            raise ModelError(f"{self.channels} channels: an image gives 1 (grey) or 3 (RGB)")
        for what, v in (("mean", self.mean), ("std", self.std)):
            if v is not None and len(v) not in (1, self.channels or len(v)):
                raise ModelError(f"{what} has {len(v)} values for {self.channels} channels")
        if self.std is not None and any(s == 0 for s in self.std):
            raise ModelError("std holds a zero")

    def __call__(self, img) -> np.ndarray:
        from PIL import Image

        channels = self.channels or 3
        img = img.convert("L" if channels == 1 else "RGB")
        if self.resize is not None:
            if len(self.resize) == 1:
                s = self.resize[0]
                w, h = img.size
                size = (s, max(1, round(w * s / h))) if w >= h else (max(1, round(h * s / w)), s)
            else:
                size = self.resize
            img = img.resize((size[1], size[0]), Image.BILINEAR)
        if self.crop is not None:
            ch, cw = (self.crop[0], self.crop[0]) if len(self.crop) == 1 else self.crop
            w, h = img.size
            if ch > h or cw > w:
                raise ModelError(f"crop {ch}x{cw} is larger than the image ({h}x{w})")
            top, left = (h - ch) // 2, (w - cw) // 2
            img = img.crop((left, top, left + cw, top + ch))
        x = np.asarray(img, dtype=np.float32).reshape(img.size[1], img.size[0], channels)
        x = x * np.float32(self.scale)
        if self.mean is not None:
            x = x - np.asarray(self.mean, np.float32)
        if self.std is not None:
            x = x / np.asarray(self.std, np.float32)
        x = x[None]
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if self.layout.upper() == "NCHW" else x)


class ImageFolder(Dataset):
    """A folder of images (:data:`IMAGE_SUFFIXES`, recursively), each made into the model's
    one input by ``preprocess``; ids are the paths relative to the folder."""

    def __init__(self, root: str, files: list, preprocess: Preprocess):
        self.source = os.fspath(root)
        self.root = os.path.abspath(self.source)
        self.ids = files
        self.preprocess = preprocess

    def identity(self) -> list:
        return [
            "images",
            self.root,
            repr(self.preprocess),
            [_stat_key(os.path.join(self.root, f)) for f in self.ids],
        ]

    def item(self, i: int):
        import warnings

        from PIL import Image, UnidentifiedImageError

        what = f"image {quote(self.ids[i])}"
        path = os.path.join(self.root, self.ids[i])
        errors = (
            OSError,
            UnidentifiedImageError,
            Image.DecompressionBombError,
            Image.DecompressionBombWarning,
        )
        with open_file(path, what, _MAX_FILE, "the largest input", missing=f"{what}: no such file") as f:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", Image.DecompressionBombWarning)
                    with Image.open(f) as img:
                        if img.width * img.height > MAX_IMAGE_PIXELS:
                            raise ModelError(
                                f"{what}: {img.width}x{img.height} pixels, beyond MAX_IMAGE_PIXELS "
                                f"({MAX_IMAGE_PIXELS})"
                            )
                        return self.preprocess(img)
            except errors as exc:
                raise ModelError(f"{what}: cannot read it as an image ({exc})") from None


class Items(Dataset):
    """The inputs of a Python iterable (arrays, or name -> array dicts), held in memory;
    ids are the positions, or the keys when ``items`` is a dict id -> input."""

    def __init__(self, items):
        if isinstance(items, dict):
            self.ids = [str(k) for k in items]
            self.values = list(items.values())
        else:
            self.values = list(items)
            self.ids = [str(i) for i in range(len(self.values))]
        self.source = f"{len(self.values)} inputs given in Python"

    def item(self, i: int):
        return self.values[i]

    def identity(self) -> list:
        import hashlib

        h = hashlib.sha256()
        for v in self.values:
            for name, a in sorted(v.items()) if isinstance(v, dict) else [("", v)]:
                digest(h, a, name)
        return ["items", h.hexdigest()]


def _listing(root: str, suffixes: tuple) -> list:
    """The files of ``root`` (recursively, sorted) whose names end in ``suffixes``: each a
    regular file inside ``root`` once every link is resolved, or a ModelError before any
    input is read (a link out of the folder, a FIFO, a device)."""
    import stat

    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in filenames:
            if f.lower().endswith(suffixes):
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                real = inside(root, rel, f"dataset file {quote(rel)}")
                try:
                    regular = stat.S_ISREG(os.stat(real).st_mode)
                except OSError as exc:
                    raise ModelError(f"dataset file {quote(rel)}: {exc.strerror}") from None
                if not regular:
                    raise ModelError(f"dataset file {quote(rel)} is not a regular file")
                out.append(rel)
                if len(out) > MAX_FILES:
                    raise ModelError(f"{quote(root)}: more than {MAX_FILES} files")
    return sorted(out)


def open_dataset(data, preprocess: Preprocess | None = None, exclude=(), inputs=()) -> Dataset:
    """The dataset ``data`` names: a :class:`Dataset`, an ``.npz`` file (:class:`ArrayFile`;
    ``inputs``: the model's input names; ``exclude``: its arrays that are not inputs, e.g. the
    labels), a folder of ``.npy``/``.npz`` files or of images, or an iterable of inputs
    (:class:`Items`)."""
    if isinstance(data, Dataset):
        return data
    if not isinstance(data, (str, os.PathLike)):
        if isinstance(data, np.ndarray):
            return Items(list(data))
        try:
            return Items(data)
        except TypeError:
            raise TypeError(
                f"data: expected a path, a Dataset or an iterable, got {type(data).__name__}"
            ) from None
    path = os.fspath(data)
    if "\0" in path:
        raise ModelError(f"the dataset path {path!r} holds a NUL byte")
    if os.path.isdir(path):
        arrays = _listing(path, (".npy", ".npz"))
        images = _listing(path, IMAGE_SUFFIXES)
        if arrays and images:
            raise ModelError(f"{quote(path)} holds both arrays (.npy/.npz) and images: give one kind")
        if images:
            return ImageFolder(path, images, preprocess or Preprocess())
        if not arrays:
            raise ModelError(f"{quote(path)} holds no .npy, .npz or image files")
        return FileFolder(path, arrays)
    if not os.path.exists(path):
        raise ModelError(f"the dataset {quote(path)}: no such file or folder")
    if path.lower().endswith(".npz"):
        return ArrayFile(path, inputs, exclude)
    raise ModelError(f"the dataset {quote(path)}: expected a folder or an .npz file")


def read_labels(spec, n: int, ids: list) -> np.ndarray:
    """The labels ``spec`` gives for ``n`` inputs (int64, one each): an array; a ``.npy``;
    ``FILE.npz:KEY``; a ``.txt`` of one integer a line; a ``.csv`` of ``id,label`` rows (by id)."""
    if not isinstance(spec, (str, os.PathLike)):
        labels = np.asarray(spec)
    else:
        spec = os.fspath(spec)
        path, _, key = spec.rpartition(":") if ".npz:" in spec else (spec, "", "")
        what = f"--labels {quote(spec)}"
        if path.endswith(".npz"):
            heads = _npz_headers(path, what)
            if key not in heads:
                raise ModelError(f"{what}: no array {quote(key)} (it holds {', '.join(map(quote, heads))})")
            labels = _load_npz(path, what, [key])[key]
        elif path.endswith(".npy"):
            labels = _load_npy(path, what)
        elif path.endswith((".txt", ".csv")):
            # a line per input: an integer of up to 20 digits, and the id for a .csv
            limit = 4096 + 24 * n + (sum(len(i.encode()) + 4 for i in ids) if path.endswith(".csv") else 0)
            with open_file(path, what, limit, f"{n} labels", missing=f"{what}: no such file") as f:
                text = f.read().decode("utf-8", "replace")
            labels = _text_labels(text, path.endswith(".csv"), ids, what)
        else:
            raise ModelError(f"{what}: expected .npy, FILE.npz:KEY, .txt or .csv")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ModelError(f"labels: expected one per input ({n}), got shape {labels.shape}")
    if labels.dtype.kind not in "iu":
        raise ModelError(f"labels: expected integer class indices, got {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() > np.iinfo(np.int64).max):
        bad = labels.min() if labels.min() < 0 else labels.max()
        raise ModelError(f"labels: a class index of {bad} (expected 0 and above)")
    return labels.astype(np.int64)


def _text_labels(text: str, csv: bool, ids: list, what: str) -> list:
    rows = [r.strip() for r in text.splitlines() if r.strip() and not r.startswith("#")]
    try:
        if not csv:
            return [int(r) for r in rows]
        by_id = {}
        for r in rows:
            k, _, v = r.rpartition(",")
            by_id[k.strip()] = int(v)
    except ValueError as exc:
        raise ModelError(f"{what}: {exc}") from None
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ModelError(f"{what}: no label for {len(missing)} inputs (the first: {quote(missing[0])})")
    return [by_id[i] for i in ids]


def fit(x, t, name: str) -> np.ndarray:
    """Input ``x`` for a model input of type ``t`` (a TensorType): with the leading batch axis
    of size 1 added when ``x`` has one axis fewer than the input declares."""
    x = np.asarray(x)
    rank = len(t.shape)
    if x.ndim == rank - 1 and rank and (isinstance(t.shape[0], str) or t.shape[0] == 1):
        x = x[None]
    if x.ndim != rank:
        raise ModelError(f"input {quote(name)}: an item of shape {x.shape} for {t}")
    return x
