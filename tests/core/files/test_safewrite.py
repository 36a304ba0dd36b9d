"""Never lose a file: atomic writes, no overwrite without asking, one clear error for each failure."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from vramplan.core.files import safewrite
from vramplan.core.files.safewrite import OverwriteRefused, WriteError, check_target, write_atomic

ORIGINAL = b"[model]\npreset = 'llama-7b'  # the reviewer's annotated copy\n"


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_writes_a_new_file(tmp_path: Path) -> None:
    target = tmp_path / "plan.toml"
    assert write_atomic(target, "x = 1\n") == target
    assert target.read_text() == "x = 1\n"
    assert leftovers(tmp_path) == []


def test_new_file_gets_ordinary_permissions(tmp_path: Path) -> None:
    target = tmp_path / "plan.toml"
    old = os.umask(0o022)
    try:
        write_atomic(target, b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # 0o666 & ~umask, not mkstemp's 0o600


def test_existing_file_is_not_overwritten_without_force(tmp_path: Path) -> None:
    target = tmp_path / "plan.toml"
    target.write_bytes(ORIGINAL)
    with pytest.raises(OverwriteRefused) as info:
        write_atomic(target, "new")
    assert info.value.line() == f"{target}: already exists, not overwritten"
    assert target.read_bytes() == ORIGINAL
    assert leftovers(tmp_path) == []


def test_force_replaces_and_keeps_the_files_permissions(tmp_path: Path) -> None:
    target = tmp_path / "plan.toml"
    target.write_bytes(ORIGINAL)
    target.chmod(0o640)
    write_atomic(target, "new", overwrite=True)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_file_created_by_someone_else_meanwhile_is_not_clobbered(tmp_path: Path, monkeypatch) -> None:
    """The existence check and the final link are separate steps: the link itself refuses an existing file."""
    target = tmp_path / "plan.toml"
    real_fsync = os.fsync

    def fsync_then_race(fd: int) -> None:
        real_fsync(fd)
        if not target.exists():
            target.write_bytes(ORIGINAL)  # another program writes the file while ours is being prepared

    monkeypatch.setattr(safewrite.os, "fsync", fsync_then_race)
    with pytest.raises(OverwriteRefused):
        write_atomic(target, "ours")
    assert target.read_bytes() == ORIGINAL
    assert leftovers(tmp_path) == []


def test_file_systems_without_hard_links_fall_back_to_rename(tmp_path: Path, monkeypatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(safewrite.os, "link", no_links)
    target = tmp_path / "plan.toml"
    write_atomic(target, "x")
    assert target.read_text() == "x"
    assert leftovers(tmp_path) == []
    with pytest.raises(OverwriteRefused):
        write_atomic(target, "y")
    assert target.read_text() == "x"


def test_path_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(WriteError, match="is a directory"):
        write_atomic(tmp_path, "x", overwrite=True)
    assert leftovers(tmp_path) == []


def test_directory_missing(tmp_path: Path) -> None:
    target = tmp_path / "nope" / "plan.toml"
    with pytest.raises(WriteError, match="directory does not exist"):
        write_atomic(target, "x")
    assert not (tmp_path / "nope").exists()


def test_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteError, match="not a directory"):
        write_atomic(tmp_path / "file" / "plan.toml", "x")


def _write_as_nobody(target: Path) -> str:
    """Root ignores file permissions, so the write runs in a forked child that has dropped to ``nobody``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            try:
                write_atomic(target, "x", overwrite=True)
                message = "written"
            except WriteError as exc:
                message = exc.line()
            os.write(write, message.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        message = f.read()
    os.waitpid(pid, 0)
    return message


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX permissions")
def test_permission_denied_real() -> None:
    """A real EACCES from the OS: a directory this user may not write to (as root: a child dropped to nobody)."""
    locked = Path(tempfile.mkdtemp(prefix="vramplan-locked-"))
    try:
        target = locked / "plan.toml"
        target.write_bytes(ORIGINAL)
        if os.geteuid() == 0:
            locked.chmod(0o755)  # owned by root: nobody may read, not write
            message = _write_as_nobody(target)
        else:
            locked.chmod(0o555)
            try:
                write_atomic(target, "x", overwrite=True)
                message = "written"
            except WriteError as exc:
                message = exc.line()
        assert message == f"{target}: cannot write: permission denied"
        assert target.read_bytes() == ORIGINAL
        assert leftovers(locked) == []
    finally:
        locked.chmod(0o755)
        shutil.rmtree(locked)


def test_permission_denied_reported(tmp_path: Path, monkeypatch) -> None:
    """The same failure simulated (it runs as root too): the OS refuses to create the temporary file."""

    def refuse(*args: object, **kwargs: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(safewrite.os, "open", refuse)
    target = tmp_path / "plan.toml"
    target.write_bytes(ORIGINAL)
    with pytest.raises(WriteError) as info:
        write_atomic(target, "x", overwrite=True)
    assert info.value.line() == f"{target}: cannot write: permission denied"
    assert target.read_bytes() == ORIGINAL


def test_read_only_file_system(tmp_path: Path, monkeypatch) -> None:
    def read_only(*args: object, **kwargs: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(safewrite.os, "open", read_only)
    with pytest.raises(WriteError, match="read-only file system"):
        write_atomic(tmp_path / "plan.toml", "x")


@pytest.mark.parametrize("fail_in", ["write", "fsync"])
def test_disk_full_leaves_the_original_intact_and_no_temporary_file(tmp_path: Path, monkeypatch, fail_in: str) -> None:
    target = tmp_path / "plan.toml"
    target.write_bytes(ORIGINAL)
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))  # part of it lands on disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    def fsync_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    if fail_in == "write":
        monkeypatch.setattr(safewrite.os, "write", half_then_full)
    else:
        monkeypatch.setattr(safewrite.os, "fsync", fsync_full)
    with pytest.raises(WriteError) as info:
        write_atomic(target, "new content " * 1000, overwrite=True)
    assert info.value.line() == f"{target}: cannot write: no space left on device"
    assert target.read_bytes() == ORIGINAL
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]


def test_interrupt_mid_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch) -> None:
    def interrupted(fd: int, data: bytes) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(safewrite.os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "plan.toml", "x")
    assert list(tmp_path.iterdir()) == []


def test_partial_writes_are_completed(tmp_path: Path, monkeypatch) -> None:
    real_write = os.write

    def short(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(safewrite.os, "write", short)
    text = "0123456789" * 100
    write_atomic(tmp_path / "plan.toml", text)
    assert (tmp_path / "plan.toml").read_text() == text


def test_symlink_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_bytes(ORIGINAL)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    with pytest.raises(OverwriteRefused):
        write_atomic(link, "x")
    write_atomic(link, "x", overwrite=True)
    assert link.is_symlink()
    assert real.read_text() == "x"


def test_check_target_writes_nothing(tmp_path: Path) -> None:
    assert check_target(tmp_path / "a.toml") == tmp_path / "a.toml"
    assert list(tmp_path.iterdir()) == []
