"""Opening a model's files: the one place where :mod:`fastane.model` opens a file.

The rule: a file is opened only when, after resolving every symbolic link, it is a
**regular file** (not a FIFO, device, socket or directory) and, for a file a model refers
to, it lies **inside the model's folder**: for an ``.mlpackage``, the real path of the
package directory (``Manifest.json``, the spec, every weight file, whatever links its
``Data`` or ``weights`` folders hold); for an ONNX model's external data, the model file's
directory (fastane refuses external data for now: see
:mod:`~fastane.model.frontends.onnx.importer`).  The model file the user names may lie anywhere but
must be a regular file too.

The file is opened with ``O_NONBLOCK`` (a FIFO cannot block the open) and ``O_NOFOLLOW``
(a link put in place of the checked file is not followed), then checked again on the open
descriptor (``fstat``: a regular file, the same inode as the checked path) and its size
is checked before anything is read.  A refused file is never read: no byte of it reaches
an error message.  Every refusal is a :class:`~fastane.errors.ModelError` naming the file
and the reason."""

from __future__ import annotations

import mmap
import os
import stat

from ..errors import ModelError

__all__ = ["inside", "read_file", "map_file"]

_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def inside(root: str, rel: str, what: str) -> str:
    """The real path of ``rel`` under ``root`` (every link resolved), or a ModelError if it
    lies outside the real path of ``root`` (``what``: the referring item, for the message)."""
    if "\0" in rel:
        raise ModelError(f"{what}: path {rel!r} holds a NUL byte")
    base = os.path.realpath(root)
    full = os.path.realpath(os.path.join(base, rel))
    if os.path.commonpath([full, base]) != base:
        raise ModelError(f"{what}: path {rel!r} resolves to {full!r}, outside the model's folder {base!r}")
    return full


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), f"not a regular file (mode {mode:#o})")


def _open(path, what: str, limit, why, missing) -> tuple:
    """``(fd, size)`` of the regular file at the real path of ``path``."""
    path = os.fspath(path)
    if "\0" in path:
        raise ModelError(f"{what}: path {path!r} holds a NUL byte")
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            raise ModelError(
                f"{what}: {path!r} is {_kind(st.st_mode)}, not a regular file; fastane does not open it"
            )
        fd = os.open(real, _FLAGS)
    except FileNotFoundError:
        raise ModelError(missing or f"{what}: {path!r} does not exist") from None
    except OSError as exc:
        raise ModelError(f"{what}: cannot open {path!r}: {exc.strerror or exc}") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise ModelError(f"{what}: {path!r} changed while it was opened; fastane does not read it")
        if limit is not None and fst.st_size > limit:
            raise ModelError(f"{what}: {path!r} has {fst.st_size} bytes, beyond the limit of {limit} ({why})")
    except BaseException:
        os.close(fd)
        raise
    return fd, fst.st_size


def read_file(path, what: str, limit: int, why: str, missing: str | None = None) -> bytes:
    """The bytes of the regular file at ``path``: at most ``limit`` bytes (``why``: the limit's
    reason, for the message), else a ModelError; ``missing``: the message if it does not exist."""
    fd, size = _open(path, what, limit, why, missing)
    try:
        with os.fdopen(fd, "rb") as f:
            return f.read(size)
    except OSError as exc:
        raise ModelError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None


def map_file(path, what: str, missing: str | None = None) -> memoryview:
    """The regular file at ``path``, mapped read-only (nothing copied until a slice is)."""
    fd, size = _open(path, what, None, "", missing)
    try:
        return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else b"")
    except OSError as exc:
        raise ModelError(f"{what}: cannot map {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
