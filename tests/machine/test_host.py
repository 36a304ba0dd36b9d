"""This machine's host memory from /proc/meminfo (vramplan.machine.host): a fake file of each kind parses or is
refused, never a hang or a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.waiting import returns
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import DetectedGpus
from vramplan.machine import host

NORMAL = b"MemTotal:       131932160 kB\nMemFree:         1234567 kB\nMemAvailable:   99999999 kB\n"


def meminfo(tmp_path: Path, data: bytes) -> Path:
    p = tmp_path / "meminfo"
    p.write_bytes(data)
    return p


@pytest.fixture
def detect_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMPLAN_DETECT", "1")


def test_normal_file_is_kib(tmp_path: Path, detect_on: None) -> None:
    # 131,932,160 kB x 1024 B (the kernel's kB is KiB) = 135,098,531,840 B, about 125.8 GiB
    assert host.host_memory_bytes(meminfo(tmp_path, NORMAL)) == 131_932_160 * 1024


@pytest.mark.parametrize(
    "data",
    [
        b"",  # empty
        b"MemFree: 1234 kB\n",  # no MemTotal line
        b"MemTotal: lots kB\n",  # garbage
        b"MemTotal: 12 MB\n",  # not the kernel's unit
        b"MemTotal: 0 kB\n",  # zero
        b"MemTotal: -5 kB\n",
        b"MemTotal: 99999999999999999999 kB\n",  # 20 digits: past 1 EiB
        b"MemTotal: " + b"9" * 5000 + b" kB\n",  # a huge number is not parsed at all
        b"\xff\xfe\x00garbage\x00" * 100,
        b"MemTotal: 1 kB\n" + b"x" * (host.MAX_BYTES + 10),  # past the byte budget
    ],
)
def test_unparsable_files_are_none(tmp_path: Path, detect_on: None, data: bytes) -> None:
    assert host.host_memory_bytes(meminfo(tmp_path, data)) is None


def test_missing_file_and_directory_are_none(tmp_path: Path, detect_on: None) -> None:
    assert host.host_memory_bytes(tmp_path / "nope") is None
    assert host.host_memory_bytes(tmp_path) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_a_fifo_never_hangs(tmp_path: Path, detect_on: None) -> None:
    """Opened without O_NONBLOCK, a FIFO with no writer blocks the open forever: the read must return on its own
    (a writer opening it would release it, and the test would fail)."""
    fifo = tmp_path / "meminfo"
    os.mkfifo(fifo)

    def writer() -> None:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    assert returns(lambda: host.host_memory_bytes(fifo), writer, "reading a FIFO") is None


def test_detect_off_reads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")  # the conftest's default: the suite never reads this machine
    assert host.host_memory_bytes(meminfo(tmp_path, NORMAL)) is None


def test_note_this_machine_registers_for_the_detected_gpu(tmp_path: Path, detect_on: None) -> None:
    det = DetectedGpus("NVIDIA H100 80GB HBM3", 81559, 8, "h100-80gb", True)
    assert host.note_this_machine(det, meminfo(tmp_path, NORMAL)) == 131_932_160 * 1024
    assert presets.registry().machine_host == {"h100-80gb": 131_932_160 * 1024}
    assert host.note_this_machine(None, meminfo(tmp_path, NORMAL)) is None  # no GPU detected: nothing to say
    presets.reload()
    assert presets.registry().machine_host == {}  # reload forgets it, as it forgets detected GPUs


def test_available_memory_is_memavailable_or_a_cgroup_limit(tmp_path: Path) -> None:
    """What `vramplan measure` checks a plan against (issue 39): MemAvailable (99,999,999 KiB), less where a cgroup
    v2 limit leaves less (memory.max 8 GiB - memory.current 3 GiB = 5 GiB); read with detection off too."""
    path = meminfo(tmp_path, NORMAL)
    group = tmp_path / "cgroup"
    group.mkdir()
    assert host.available_memory_bytes(path, group) == 99_999_999 * 1024  # no limit files
    (group / "memory.max").write_text("max\n")
    (group / "memory.current").write_text(f"{3 << 30}\n")
    assert host.available_memory_bytes(path, group) == 99_999_999 * 1024  # "max": no limit
    (group / "memory.max").write_text(f"{8 << 30}\n")
    assert host.available_memory_bytes(path, group) == 5 << 30
    assert host.available_memory_bytes(meminfo(tmp_path, b"MemTotal: 1 kB\n"), group) is None
    assert host.available_memory_bytes(tmp_path / "missing", group) is None
