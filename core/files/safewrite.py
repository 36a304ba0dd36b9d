"""Writing a user's file without ever losing one: atomic replace, no overwrite unless asked.

`write_atomic` writes to a temporary file in the target's own directory, fsyncs it, then moves it into place in
one step (``os.link`` when the file must not exist, ``os.replace`` when overwriting is allowed), and fsyncs the
directory. Any failure (disk full, permission denied, an interrupt) removes the temporary file and leaves whatever
was at the path before untouched. Every failure is a `WriteError`: one line naming the path and what went wrong.

Overwrite policy: an existing file is replaced only with ``overwrite=True`` (the CLI's ``--force``, the TUI's
confirmation); otherwise `OverwriteRefused`, raised before anything is written and again, atomically, at the
final step if another program created the file meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from vramplan.core.plan.errors import PlanError

_REASONS = {
    errno.ENOSPC: "no space left on device",
    getattr(errno, "EDQUOT", -1): "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "directory does not exist",
    errno.ENOTDIR: "a parent of this path is not a directory",
    errno.EISDIR: "is a directory",
    errno.ENAMETOOLONG: "file name too long",
}


class WriteError(PlanError):
    """A file could not be written; nothing was changed on disk."""


class OverwriteRefused(WriteError):
    """The path exists and overwriting was not allowed (CLI: --force; TUI: confirm)."""


def _error(exc: OSError, path: Path) -> WriteError:
    if exc.errno == errno.EEXIST:
        return OverwriteRefused("already exists, not overwritten", str(path))
    reason = _REASONS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
    return WriteError(f"cannot write: {reason}", str(path))


def check_target(path: str | Path, overwrite: bool = False) -> Path:
    """The path a write would go to (a symlink's target), or a `WriteError` saying why not; writes nothing.

    Lets a dialog validate the path before asking for confirmation.
    """
    if "\0" in str(path):  # the OS layer would raise ValueError
        raise WriteError("a path cannot contain a NUL character", repr(str(path)))
    p = Path(path)
    if p.is_symlink():  # write through the link: the link stays, its target gets the new content
        p = Path(os.path.realpath(p))
    if p.is_dir():
        raise WriteError("is a directory; give a file name", str(path))
    parent = p.parent
    if not parent.exists():
        raise WriteError(f"directory does not exist: {parent}", str(path))
    if not parent.is_dir():
        raise WriteError(f"not a directory: {parent}", str(path))
    if p.exists() and not overwrite:
        raise OverwriteRefused("already exists, not overwritten", str(path))
    return p


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX); best effort where directories cannot be opened (Windows)."""
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:  # pragma: no cover - Windows
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: str | Path, data: bytes | str, *, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` all at once or not at all; return the path written.

    Raises `OverwriteRefused` if the path exists and ``overwrite`` is false, `WriteError` for anything else
    (directory missing, permission denied, disk full, path is a directory). After any error the path holds what
    it held before and no temporary file is left behind.
    """
    target = check_target(path, overwrite)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory = target.parent
    tmp = directory / f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        # O_EXCL: never reuse a file someone else made; 0o666 & ~umask, like any new file.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as exc:
        raise _error(exc, Path(path)) from None
    try:
        try:
            if target.exists():  # replacing: keep the old file's permissions
                os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
            _write_all(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, target)
        else:
            _link_no_clobber(tmp, target)
        _fsync_dir(directory)
    except OSError as exc:
        _discard(tmp)
        raise _error(exc, Path(path)) from None
    except BaseException:  # KeyboardInterrupt mid-write: no half-written file either
        _discard(tmp)
        raise
    return target


def _link_no_clobber(tmp: Path, target: Path) -> None:
    """Move ``tmp`` to ``target`` only if ``target`` does not exist, atomically (a hard link fails with EEXIST).

    File systems without hard links (FAT, some network mounts) fall back to a check then a rename.
    """
    try:
        os.link(tmp, target)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise
        if target.exists():
            raise FileExistsError(errno.EEXIST, "exists", str(target)) from None
        os.replace(tmp, target)
        return
    _discard(tmp)


def _discard(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)
