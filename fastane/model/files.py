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
is checked before anything is read.  A file inside a model's folder (``root``) is checked
inside it again on the open descriptor (its path from ``/proc/self/fd``; where there is
no ``/proc``, it is opened one path component at a time from the folder's real path, each
directory with ``O_NOFOLLOW`` relative to the one before): a directory of the package
swapped for a link between the check and the open (by a process writing into the package
while it loads) is refused before anything is read.  A refused file is never read: no
byte of it reaches an error message.  Every refusal is a
:class:`~fastane.errors.ModelError` naming the file and the reason."""

from __future__ import annotations

import errno
import mmap
import os
import stat

from ..errors import ModelError

__all__ = ["inside", "read_file", "map_file", "open_file", "npy_header"]

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


_DIR_FLAGS = (
    os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def _open_under(root: str, real: str, path: str, what: str) -> tuple:
    """``(fd, stat)`` of the file at ``real`` (a real path inside the real path of
    ``root``), checked inside it on the open descriptor: its path from ``/proc/self/fd``
    (Linux), else opened from the root one component at a time, no link followed."""
    base = os.path.realpath(root)
    rel = os.path.relpath(real, base)
    if os.path.commonpath([real, base]) != base or rel == os.curdir:
        raise ModelError(f"{what}: {path!r} is not a file inside the model's folder {base!r}")
    changed = f"{what}: {path!r} changed while it was opened (a link in its path); fastane does not read it"
    if os.path.isdir("/proc/self/fd"):
        st = os.lstat(real)
        _check_kind(st, path, what, changed)
        fd = os.open(real, _FLAGS)
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = None
        if where is not None:
            if os.path.commonpath([where, base]) != base:
                os.close(fd)
                raise ModelError(changed)
            return fd, st
        os.close(fd)
    return _walk_open(base, rel.split(os.sep), path, what, changed)


def _check_kind(st, path: str, what: str, changed: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise ModelError(changed)
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(
            f"{what}: {path!r} is {_kind(st.st_mode)}, not a regular file; fastane does not open it"
        )


def _walk_open(base: str, parts: list, path: str, what: str, changed: str) -> tuple:
    """``(fd, stat)`` of ``base/parts...``, each directory opened with ``O_NOFOLLOW``
    relative to the one before."""
    dfd = os.open(base, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=dfd)
            except (NotADirectoryError, IsADirectoryError):
                raise ModelError(changed) from None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK):  # a link (EMLINK: FreeBSD)
                    raise ModelError(changed) from None
                raise
            os.close(dfd)
            dfd = nfd
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        _check_kind(st, path, what, changed)
        return os.open(parts[-1], _FLAGS, dir_fd=dfd), st
    finally:
        os.close(dfd)


def _open(path, what: str, limit, why, missing, root=None) -> tuple:
    """``(fd, size)`` of the regular file at the real path of ``path`` (with ``root``:
    ``path`` is the real path of a file inside that folder, from :func:`inside`, opened
    under it with no link followed)."""
    path = os.fspath(path)
    if "\0" in path:
        raise ModelError(f"{what}: path {path!r} holds a NUL byte")
    real = os.path.realpath(path) if root is None else os.path.abspath(path)
    try:
        if root is not None:
            fd, st = _open_under(root, real, path, what)
        else:
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


def read_file(path, what: str, limit: int, why: str, missing: str | None = None, root=None) -> bytes:
    """The bytes of the regular file at ``path``: at most ``limit`` bytes (``why``: the limit's
    reason, for the message), else a ModelError; ``missing``: the message if it does not exist;
    ``root``: the model's folder ``path`` lies in (from :func:`inside`), checked again at the open."""
    fd, size = _open(path, what, limit, why, missing, root)
    try:
        with os.fdopen(fd, "rb") as f:
            return f.read(size)
    except OSError as exc:
        raise ModelError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None


def open_file(path, what: str, limit: int, why: str, missing: str | None = None):
    """The regular file at ``path`` open for reading (binary), under the same checks as
    :func:`read_file`: for a caller that reads a header before deciding to read the rest."""
    fd, _ = _open(path, what, limit, why, missing)
    return os.fdopen(fd, "rb")


def map_file(path, what: str, missing: str | None = None, root=None) -> memoryview:
    """The regular file at ``path``, mapped read-only (nothing copied until a slice is);
    ``root`` as for :func:`read_file`."""
    fd, size = _open(path, what, None, "", missing, root)
    try:
        return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else b"")
    except OSError as exc:
        raise ModelError(f"{what}: cannot map {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def npy_header(f) -> tuple:
    """``(shape, dtype)`` from the .npy header at the start of ``f`` (a header of at most 10000
    bytes, numpy's own default limit, and no Python objects: nothing else is read); ``f``
    is left where it was.  A ValueError (or OSError, EOFError) for anything else."""
    import struct

    import numpy as np

    start = f.tell()
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"format version {version} is not supported (1.0 and 2.0 are)")
    n = struct.calcsize("<H" if version == (1, 0) else "<I")
    pos = f.tell()
    (size,) = struct.unpack("<H" if version == (1, 0) else "<I", f.read(n).ljust(n, b"\0"))
    if size > 10000:
        raise ValueError(f"a header of {size} bytes (at most 10000)")
    f.seek(pos)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(f)
    if dtype.hasobject:
        raise ValueError("the array holds Python objects")
    f.seek(start)
    return tuple(shape), dtype
