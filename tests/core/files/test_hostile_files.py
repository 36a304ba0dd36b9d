"""Issue 15, items 1-3: an export never destroys or creates a file where it should not (non-regular targets,
symlinks, signals during the write, long names, odd paths)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.waiting import HANG_S
from vramplan.core.files import safewrite
from vramplan.core.files.safewrite import OverwriteRefused, WriteError, check_target, write_atomic

ORIGINAL = b"[model]\npreset = 'llama-7b'\n"


def test_non_regular_targets_are_never_replaced_even_with_overwrite(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.toml"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for target, kind in ((fifo, "named pipe"), (sock_path, "socket")):
            for overwrite in (False, True):
                with pytest.raises(WriteError, match=rf"{kind}.*never replaced") as info:
                    write_atomic(target, "x", overwrite=overwrite)
                assert not isinstance(info.value, OverwriteRefused)  # no "use --force": forcing cannot help
    finally:
        sock.close()
    assert fifo.is_fifo() and sock_path.is_socket()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.toml", "sock.toml"]


def test_devices_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """``/dev/null`` (``export -o /dev/null --force`` as root replaced it): checked with `check_target`, which
    writes nothing, so a regression here can never destroy the machine's /dev/null."""
    link = tmp_path / "out.toml"
    link.symlink_to("/dev/null")
    for target in (Path("/dev/null"), link):
        for overwrite in (False, True):
            with pytest.raises(WriteError, match=r"device.*never replaced"):
                check_target(target, overwrite)
    assert Path("/dev/null").is_char_device() and link.is_symlink()


def test_a_dangling_link_creates_nothing(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "plan.toml"
    link.symlink_to(elsewhere / "victim.toml")
    for overwrite in (False, True):
        with pytest.raises(WriteError, match="dangling symbolic link"):
            write_atomic(link, "x", overwrite=overwrite)
    assert list(elsewhere.iterdir()) == [] and link.is_symlink()


def test_links_in_sticky_world_writable_directories_are_refused(tmp_path: Path) -> None:
    """A link planted in /tmp (mode 1777) could point at any of the victim's files: never written through."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim.toml"
    victim.write_bytes(ORIGINAL)
    link = shared / "plan.toml"
    link.symlink_to(victim)
    with pytest.raises(WriteError, match="shared directory"):
        write_atomic(link, "x", overwrite=True)
    assert victim.read_bytes() == ORIGINAL


def test_links_to_another_users_file_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim.toml"
    victim.write_bytes(ORIGINAL)
    link = tmp_path / "plan.toml"
    link.symlink_to(victim)
    monkeypatch.setattr(os, "geteuid", lambda: victim.stat().st_uid + 1)  # as if another user ran vramplan
    with pytest.raises(WriteError, match="another user"):
        write_atomic(link, "x", overwrite=True)
    assert victim.read_bytes() == ORIGINAL


def test_a_link_to_the_users_own_file_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_bytes(ORIGINAL)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    write_atomic(link, "new", overwrite=True)
    assert real.read_text() == "new" and link.is_symlink()


@pytest.mark.parametrize("length", [242, 250, 255])
def test_long_legal_names_can_be_written(tmp_path: Path, length: int) -> None:
    target = tmp_path / ("p" * (length - 5) + ".toml")
    write_atomic(target, "x")
    assert target.read_text() == "x"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_odd_paths_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WriteError, match="empty path"):
        check_target("")
    with pytest.raises(WriteError, match="ends with /"):
        write_atomic("newdir/", "x")
    (tmp_path / "dir").mkdir()
    with pytest.raises(WriteError, match="is a directory"):
        write_atomic("dir/", "x", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


WRITER = textwrap.dedent(
    """
    import os, sys, time
    from vramplan.core.files import safewrite
    real_fsync = os.fsync
    def slow_fsync(fd):
        real_fsync(fd)
        if os.path.isfile(os.readlink(f"/proc/self/fd/{fd}")):
            print("writing", flush=True)
            time.sleep(3600)  # the write never ends by itself: only the signal ends the process
    safewrite.os.fsync = slow_fsync
    safewrite.write_atomic(sys.argv[1], "x" * 1000, overwrite=True)
    """
)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_the_write_leaves_no_temporary_file(tmp_path: Path, signum: int) -> None:
    target = tmp_path / "plan.toml"
    target.write_bytes(ORIGINAL)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
    assert len(list(tmp_path.iterdir())) == 2  # the temporary file is there, beside the target
    proc.send_signal(signum)
    try:
        proc.wait(timeout=HANG_S)  # its end is the event: without the signal's handling it sleeps an hour
    finally:
        proc.kill()  # a no-op once it has ended
    assert proc.returncode == -signum  # the signal still ends the process, as it would have
    assert [p.name for p in tmp_path.iterdir()] == ["plan.toml"]
    assert target.read_bytes() == ORIGINAL


def test_a_fifo_made_during_the_write_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before writing and the final rename are separate steps: the rename checks again."""
    target = tmp_path / "plan.toml"
    real_fsync = os.fsync

    def fsync_then_fifo(fd: int) -> None:
        real_fsync(fd)
        if not target.exists():
            os.mkfifo(target)  # another program puts a FIFO there while ours is being written

    monkeypatch.setattr(safewrite.os, "fsync", fsync_then_fifo)
    with pytest.raises(WriteError, match="named pipe"):
        write_atomic(target, "ours", overwrite=True)
    assert target.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["plan.toml"]
