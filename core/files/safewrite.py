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
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vramplan.core.plan.helpers.errors import PlanError, shown
from vramplan.core.plan.helpers.readfile import kind_problem, path_problem

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
    if exc.errno == errno.ENOENT and path.parent.is_dir():  # the folder is there: it takes no new file
        reason = f"no file can be made in {path.parent}"
    return WriteError(f"cannot write: {reason}", str(path))


def _streams() -> dict[tuple[int, int], str]:
    """(device, inode) of this process's standard output and error: ``-o /dev/stdout`` is one of them."""
    out = {}
    for fd, name in ((2, "standard error"), (1, "standard output")):  # one terminal: standard output
        with contextlib.suppress(OSError, ValueError):
            st = os.fstat(fd)
            out[(st.st_dev, st.st_ino)] = name
    return out


def _not_a_file_problem(path: Path, st: os.stat_result) -> str:
    """Why ``path`` (``st``: what it leads to) is never replaced, or empty for a regular file. A standard stream
    (``-o /dev/stdout`` into a pipe or a terminal) says so: ``-o -`` prints."""
    problem = kind_problem(st.st_mode)
    if not problem:
        return ""
    stream = _streams().get((st.st_dev, st.st_ino))
    return f"{problem}: never replaced" + (f" ({stream}: -o - prints to it)" if stream else "")


def _no_files_here(parent: Path) -> str:
    """Why no new file can be made in the directory ``parent`` (empty if one can): a kernel file system (proc,
    sysfs: no blocks, no inodes, as ``statvfs`` reports them; ``/proc/self/mem`` is such a "file"), or one this
    user may not write to."""
    with contextlib.suppress(OSError, AttributeError):
        vfs = os.statvfs(parent)
        if vfs.f_blocks == 0 and vfs.f_files == 0:
            return f"is in {parent}, a file system of the kernel's (proc, sysfs): never written"
    if not os.access(parent, os.W_OK | os.X_OK):
        return "cannot write: permission denied"  # (in that folder: --force would not help)
    return ""


def check_target(path: str | Path, overwrite: bool = False) -> Path:
    """The path a write would go to (a symlink's target), or a `WriteError` saying why not; writes nothing.

    Refused even with ``overwrite``: an empty path, a path ending in ``/`` (a directory), an existing target that
    is not a regular file (``/dev/null``, a FIFO, a socket, a device: replacing it would destroy it), a dangling
    symlink (writing would create a file wherever it points), a symlink in a world-writable directory, sticky
    (``/tmp``) or not (anyone may have planted it), a symlink to a file owned by another user, and a folder where
    no file can be made (``/proc``, ``/sys``; one this user may not write to). An ordinary
    symlink to the user's own file is written through (the link stays, its target gets the new content).
    Lets a dialog validate the path before asking for confirmation.
    """
    text = str(path)
    if "\0" in text:  # the OS layer would raise ValueError
        raise WriteError("a path cannot contain a NUL character", repr(text))
    if not text.strip():
        raise WriteError("empty path; give a file name", "output")
    p = Path(path)
    if text.endswith(("/", os.sep)):
        what = "is a directory" if p.is_dir() else "ends with / (a directory), and that directory does not exist"
        raise WriteError(f"{what}; give a file name", text)
    if p.is_symlink():
        p = _link_target(p)
    if p.is_dir():
        raise WriteError("is a directory; give a file name", text)
    parent = p.parent
    if not parent.exists():
        raise WriteError(f"directory does not exist: {parent}", text)
    if not parent.is_dir():
        raise WriteError(f"not a directory: {parent}", text)
    try:
        st = os.stat(p)
    except OSError:
        st = None
    problem = _not_a_file_problem(p, st) if st is not None else ""
    if problem:
        raise WriteError(problem, text)
    problem = _no_files_here(parent)  # before "exists, use --force": --force would not help
    if problem:
        raise WriteError(problem, text)
    if st is None:
        return p
    if not overwrite:
        raise OverwriteRefused("already exists, not overwritten", text)
    return p


def _link_target(link: Path) -> Path:
    """Where writing through ``link`` would go, if that is safe; `WriteError` otherwise."""
    where = str(link)
    try:
        dir_st = os.stat(link.parent)
    except OSError as exc:
        raise _error(exc, link) from None
    if dir_st.st_mode & stat.S_IWOTH:  # sticky (/tmp) or not: anyone may have planted it, pointing anywhere
        raise WriteError("is a symbolic link in a shared directory (world-writable): not written through", where)
    problem = path_problem(link)
    if problem:
        raise WriteError(f"{problem}: not written through", where)
    st = os.stat(link)  # what it leads to (a pipe's /proc/self/fd/1 has no path of its own to stat)
    problem = _not_a_file_problem(link, st)
    if problem:
        raise WriteError(problem, where)
    target = Path(os.path.realpath(link))
    owner = st.st_uid
    if hasattr(os, "geteuid") and owner != os.geteuid():
        raise WriteError(f"is a symbolic link to a file of another user ({target}): not written through", where)
    return target


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
    (directory missing, permission denied, disk full, path is a directory or not a regular file). After any error,
    an interrupt (SIGINT) or SIGTERM/SIGHUP the path holds what it held before and no temporary file is left
    behind (the signal then takes its usual course).
    """
    target = check_target(path, overwrite)
    try:
        payload = data.encode("utf-8") if isinstance(data, str) else data
    except UnicodeEncodeError as exc:  # a lone surrogate: bytes of another encoding in a command-line argument
        raise WriteError(
            f"cannot write: the text holds {shown(data[exc.start : exc.end])}, not UTF-8 (a non-UTF-8 argument?); "
            "nothing written",
            str(path),
        ) from None
    directory = target.parent
    # short: a target name of up to 255 bytes (the file system's limit) still has a legal temporary name
    tmp = directory / f".vramplan-{secrets.token_hex(4)}.tmp"
    try:
        with _signals_interrupt() as previous:
            try:
                _write_and_place(tmp, target, payload, overwrite)
            except OSError as exc:
                _discard(tmp)
                raise _error(exc, Path(path)) from None
            except Interrupted as exc:
                _discard(tmp)
                _restore(previous)
                _redeliver(exc.signum)
                raise WriteError("interrupted; nothing written", str(path)) from None
            except BaseException:  # KeyboardInterrupt mid-write: no half-written file either
                _discard(tmp)
                raise
    except Interrupted as exc:  # the signal came between the write and leaving the handlers' scope
        _redeliver(exc.signum)
        raise WriteError("interrupted", str(path)) from None
    _fsync_dir(directory)
    return target


def _write_and_place(tmp: Path, target: Path, payload: bytes, overwrite: bool) -> None:
    """The temporary file written and synced (O_EXCL: never reuse a file someone else made; 0o666 & ~umask,
    like any new file), then moved into place."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        if target.exists():  # replacing: keep the old file's permissions
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        _write_all(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    if overwrite:
        _refuse_non_regular(target)  # a FIFO or a device put there since `check_target`: still refused
        os.replace(tmp, target)
    else:
        _link_no_clobber(tmp, target)


def _refuse_non_regular(target: Path) -> None:
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    problem = None if stat.S_ISLNK(mode) else kind_problem(mode)
    if problem:
        raise WriteError(f"{problem}: never replaced", str(target))


class Interrupted(BaseException):
    """SIGTERM or SIGHUP (as an SSH disconnect sends) arrived during a write: raised there so the temporary file
    is removed, then the signal goes to what handled it before."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[dict[int, Any]]:
    """While a write is under way, SIGTERM and SIGHUP raise `Interrupted`; the previous handlers come back
    after. Only the main thread can set handlers (elsewhere nothing changes); an ignored signal stays ignored."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is None:  # pragma: no cover - Windows has no SIGHUP
                continue
            old = signal.getsignal(signum)
            if old is signal.SIG_IGN or old is None:
                continue
            previous[signum] = old
            signal.signal(signum, _interrupt)
    try:
        yield previous
    finally:
        _restore(previous)


def _restore(previous: dict[int, Any]) -> None:
    for signum, old in list(previous.items()):
        signal.signal(signum, old)
    previous.clear()


def _redeliver(signum: int) -> None:
    """Pass on a signal caught during a write (handlers already restored): the default action ends the process
    as it would have; a handler of the program's own is called."""
    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


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
