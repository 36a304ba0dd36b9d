"""Issue 28.3: the versions of a Python environment read from its dist-info METADATA, never importing anything,
within a time and byte budget; a hostile folder is one warning line, never an exception or a hang."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.machine.fake_envs import HOSTILE, SITE, make_env, metadata
from tests.waiting import HANG_S
from vramplan.core.plan.stack.config import StackConfig
from vramplan.machine import environment
from vramplan.machine.environment import canonical_name, default_environment, read_environment


def unhurried(path: Path | str) -> environment.EnvironmentStack:
    """`read_environment` with its time budget out of reach (`HANG_S`), for the large hostile folders: what it
    finds must not depend on how busy the machine is. The budget is tested by
    test_a_read_that_never_returns_is_left_behind; how fast the scan is, by bench/bench_environment.py."""
    return read_environment(path, time_budget_s=HANG_S)


def test_the_versions_of_a_venv(tmp_path: Path) -> None:
    env = make_env(
        tmp_path / "venv",
        {
            "torch": "2.5.1+cu124",
            "transformers": "4.46.3",
            "peft": "0.13.2",
            "bitsandbytes": "0.43.1",
            "torch_geometric": "2.6.0",  # torch-geometric is not torch
            "numpy": "2.1.0",
        },
    )
    found = read_environment(env)
    assert found.warning == ""
    assert found.versions == {
        "torch": "2.5.1+cu124",
        "transformers": "4.46.3",
        "peft": "0.13.2",
        "bitsandbytes": "0.43.1",
    }
    assert list(found.versions) == ["torch", "transformers", "peft", "bitsandbytes"]  # PACKAGES' order
    StackConfig.model_validate(found.versions)  # valid for the [stack] table as read


def test_names_are_normalised_and_every_layout_is_read(tmp_path: Path) -> None:
    """``Accelerate``, ``Deep_Speed``-style spellings are one name (PEP 503); conda's and Windows' layouts; a
    ``lib64`` that links to ``lib`` (as venv makes it) is read once; old ``*.egg-info`` (folder or file) too."""
    assert canonical_name("Deep_Speed") == canonical_name("deep.speed") == canonical_name("DEEP--speed") == "deep-speed"
    env = make_env(tmp_path / "conda", {"Torch": "2.4.0", "TRL": "0.12.1"}, site="lib/python3.12/site-packages")
    (env / "lib64").symlink_to("lib")
    egg = env / "lib/python3.12/site-packages/peft-0.10.0-py3.12.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text(metadata("peft", "0.10.0"))
    (env / "lib/python3.12/site-packages/accelerate-0.30.0-py3.12.egg-info").write_text(metadata("accelerate", "0.30"))
    found = read_environment(env)
    assert found.warning == ""  # lib64 -> lib: not "installed twice"
    assert found.versions == {"torch": "2.4.0", "peft": "0.10.0", "accelerate": "0.30", "trl": "0.12.1"}
    windows = make_env(tmp_path / "win", {"deepspeed": "0.15.4"}, site="Lib/site-packages")
    assert read_environment(windows).versions == {"deepspeed": "0.15.4"}


def test_two_dist_infos_of_one_package_take_the_newest_and_say_so(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"peft": "0.13.2"})
    make_env(tmp_path, {"peft": "0.9.0"})  # a stale one an interrupted upgrade left
    found = read_environment(env)
    assert found.versions == {"peft": "0.13.2"}
    assert "peft installed 2 times" in found.warning and "took 0.13.2" in found.warning


def test_a_version_the_stack_table_refuses_is_skipped(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"torch": "2.5.1"})
    info = tmp_path / SITE / "peft-x.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: peft\nVersion: not a version; rm -rf\n")
    found = read_environment(env)
    assert found.versions == {"torch": "2.5.1"}
    assert found.warning.count("\n") == 0 and "peft-x.dist-info (not a version" in found.warning


def test_not_an_environment(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    cases = {
        tmp_path / "missing": "no such folder",
        tmp_path / "file": "a file, not a folder",
        tmp_path / "fifo": "a FIFO, not a folder",
        tmp_path: "no site-packages folder",
    }
    for path, why in cases.items():
        found = read_environment(path)
        assert found.versions == {} and why in found.warning and str(path) in found.warning, found


@pytest.mark.parametrize("name", list(HOSTILE))
def test_each_hostile_file_is_named_with_its_reason(tmp_path: Path, name: str) -> None:
    env = make_env(tmp_path, {"torch": "2.5.1"})
    make, why = HOSTILE[name]
    make(env / SITE)
    found = read_environment(env)
    assert found.versions == {"torch": "2.5.1"}
    assert found.warning == f"stack from {env}: skipped {SITE}/{name} ({why}) (torch 2.5.1)", found.warning


def test_a_hostile_environment_is_one_line(tmp_path: Path) -> None:
    """Every hostile thing at once, beside a good package, a METADATA of 50 MB whose header is read (and nothing
    more), and a symlink loop where a python3.X folder should be."""
    env = make_env(tmp_path, {"torch": "2.5.1", "peft": "0.13.2"}, site="lib/python3.12/site-packages")
    (env / "lib" / "python3.10").symlink_to("python3.10")
    for make, _ in HOSTILE.values():
        make(env / "lib/python3.12/site-packages")
    with open(env / "lib/python3.12/site-packages/peft-0.13.2.dist-info/METADATA", "a") as f:
        f.truncate(50 * 2**20)  # the header first, then 50 MB of description (sparse)
    found = unhurried(env)
    assert found.versions == {"torch": "2.5.1", "peft": "0.13.2"}
    assert "\n" not in found.warning and len(found.warning) < 600
    assert found.warning.startswith(f"stack from {env}: skipped lib/python3.10/site-packages (Too many levels")
    assert found.warning.endswith("; and 4 more (torch 2.5.1, peft 0.13.2)"), found.warning


def test_unreadable_metadata_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root chmod 000 stops nothing, so the refusal is the kernel's EACCES itself, from ``os.open``."""
    env = make_env(tmp_path, {"torch": "2.5.1", "peft": "0.13.2"})
    real_open = os.open

    def refusing(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if "peft" in os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(environment.os, "open", refusing)
    found = read_environment(env)
    assert found.versions == {"torch": "2.5.1"}
    assert f"skipped {SITE}/peft-0.13.2.dist-info/METADATA (Permission denied)" in found.warning


def test_thousands_of_dist_infos(tmp_path: Path) -> None:
    site = tmp_path / SITE
    site.mkdir(parents=True)
    for i in range(5000):
        (site / f"pkg{i}-1.0.dist-info").mkdir()
    make_env(tmp_path, {"peft": "0.13.2"})
    found = unhurried(tmp_path)
    assert (found.versions, found.warning) == ({"peft": "0.13.2"}, "")


def test_the_entry_and_byte_budgets_stop_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_env(tmp_path, {f"other{i}": "1.0" for i in range(50)} | {"torch": "2.5.1"})
    monkeypatch.setattr(environment, "MAX_ENTRIES", 10)
    found = read_environment(tmp_path)
    assert "stopped after 10 folder entries" in found.warning
    monkeypatch.setattr(environment, "MAX_ENTRIES", 100_000)
    monkeypatch.setattr(environment, "MAX_TOTAL_BYTES", 10)
    make_env(tmp_path / "b", {"torch": "2.5.1", "trl": "0.12.1"})
    found = read_environment(tmp_path / "b")
    assert len(found.versions) == 1 and "stopped after reading 0 KiB" in found.warning


def test_a_read_that_never_returns_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stalled mount: the scan's thread is blocked in a read (until the test releases it, after the call); the
    caller gets its answer at the time budget, without the read."""
    env = make_env(tmp_path, {"torch": "2.5.1"})
    release = threading.Event()

    def stuck(scan: object, path: Path) -> str | None:
        release.wait(HANG_S)
        return None

    monkeypatch.setattr(environment, "read_header", stuck)
    found = read_environment(env, time_budget_s=0.2)
    release.set()
    assert found.versions == {} and "gave up after 0.2 s (a read did not return)" in found.warning


def test_the_environment_read_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMPLAN_DETECT", "1")
    monkeypatch.setenv("VIRTUAL_ENV", "/opt/venv")
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda")
    assert default_environment() == "/opt/venv"  # the venv activated on top of a conda base runs
    monkeypatch.delenv("VIRTUAL_ENV")
    assert default_environment() == "/opt/conda"
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    assert default_environment() is None
    monkeypatch.setenv("VRAMPLAN_DETECT", "1")
    monkeypatch.delenv("CONDA_PREFIX")
    assert default_environment() is None
