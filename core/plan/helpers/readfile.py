"""Reading a user's file without hanging or exhausting memory: regular files only, up to a size limit.

A FIFO would block `open` until a writer comes (forever), ``/dev/zero`` never ends, a directory or a device is no
file to parse: `read_regular` opens without blocking (``O_NONBLOCK``), checks that what it opened is a regular file
and reads at most ``limit`` bytes. Every failure is one `PlanError` naming the path: a symlink loop or a dangling
link is said so, not reported as a missing file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from vramplan.core.plan.helpers.errors import PlanError

MAX_TEXT_BYTES = 4 * 1024 * 1024  # plan files, presets, config.json: a few KB in practice
_NOT_REGULAR = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISFIFO, "is a named pipe (FIFO), not a file"),
    (stat.S_ISSOCK, "is a socket, not a file"),
    (stat.S_ISCHR, "is a device, not a file"),
    (stat.S_ISBLK, "is a device, not a file"),
)


def kind_problem(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not a regular file, or None if it is one."""
    if stat.S_ISREG(mode):
        return None
    return next((why for test, why in _NOT_REGULAR if test(mode)), "is not a regular file")


def path_problem(path: Path) -> str:
    """Why ``path`` cannot be opened, in words: missing, a dangling symlink, a symlink loop."""
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "symbolic link loop"
            return f"dangling symbolic link (to {os.readlink(path)})"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        if exc.errno == errno.ENOENT:
            return "no such file"
        return (exc.strerror or str(exc)).lower()
    return ""


def read_regular(path: str | Path, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit``); a `PlanError` naming the path otherwise."""
    where = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            raise PlanError(path_problem(Path(path)) or "no such file", where) from None
        if exc.errno == errno.EISDIR:
            raise PlanError("is a directory", where) from None
        raise PlanError(f"cannot read: {(exc.strerror or str(exc)).lower()}", where) from None
    except ValueError:  # a NUL character
        raise PlanError("a path cannot contain a NUL character", repr(where)) from None
    try:
        st = os.fstat(fd)
        problem = kind_problem(st.st_mode)
        if problem:
            raise PlanError(problem, where)
        if st.st_size > limit:
            raise PlanError(f"too large ({st.st_size:,} bytes; at most {limit:,} are read)", where)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # a file that grows while read stops at the limit too
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise PlanError(f"too large (more than {limit:,} bytes)", where)
        return b"".join(chunks)
    except OSError as exc:
        raise PlanError(f"cannot read: {(exc.strerror or str(exc)).lower()}", where) from None
    finally:
        os.close(fd)
