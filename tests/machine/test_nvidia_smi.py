"""Detected hardware: nvidia-smi's GPUs become the starting plan's hardware; anything odd falls back silently.

A fake ``nvidia-smi`` (a shell script) is put first on PATH; it counts its calls in a file next to it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.waiting import HANG_S
from vramplan.core.plan.catalogue import gpu_match, presets
from vramplan.core.plan.catalogue.gpu_match import parse
from vramplan.core.plan.helpers.units import MiB
from vramplan.machine import nvidia_smi
from vramplan.machine.nvidia_smi import detected_gpus, starting_plan

H100_X8 = "NVIDIA H100 80GB HBM3, 81559\n" * 8


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """Install ``nvidia-smi`` running `body` (sh) and enable detection; returns the call-count file. Its timeout is
    out of reach: a fake that answers is read however busy the machine is (the timeout has its own test)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    script = bindir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho x >> "{calls}"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("VRAMPLAN_DETECT", "1")
    monkeypatch.setattr(nvidia_smi, "TIMEOUT_S", HANG_S)
    presets.reload()
    return calls


def printing(text: str) -> str:
    return "cat <<'EOF'\n" + text + "EOF"


def n_calls(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.mark.parametrize(
    ("output", "gpu", "count"),
    [
        (H100_X8, "h100-80gb", 8),
        ("NVIDIA A100-SXM4-80GB, 81920\n" * 4, "a100-80gb", 4),
        ("NVIDIA A100-PCIE-40GB, 40960\n", "a100-40gb", 1),
        ("Tesla V100-SXM2-32GB, 32768\nTesla V100-SXM2-32GB, 32768\n", "v100-32gb", 2),
        ("NVIDIA GeForce RTX 4090, 24564\n", "rtx-4090", 1),
    ],
)
def test_known_gpus_become_the_default_hardware(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, gpu: str, count: int
) -> None:
    fake_smi(tmp_path, monkeypatch, printing(output))
    plan = starting_plan()
    assert (plan.hardware.gpu, plan.hardware.gpus_per_node, plan.hardware.nodes) == (gpu, count, 1)
    det = detected_gpus()
    assert det is not None and det.matched
    name = output.splitlines()[0].rpartition(",")[0]
    assert det.name == name
    assert det.label == f"detected: {count} x {name.removeprefix('NVIDIA ')}"  # "detected: 8 x H100 80GB HBM3"


def test_the_query_is_the_csv_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = tmp_path / "args"
    fake_smi(tmp_path, monkeypatch, f'echo "$@" > "{args}"\n' + printing(H100_X8))
    assert detected_gpus() is not None
    assert args.read_text().split() == ["--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]


def test_unknown_gpu_becomes_a_custom_preset_with_its_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path, monkeypatch, printing("NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887\n" * 2))
    plan = starting_plan()
    spec = presets.gpu(plan.hardware.gpu)
    assert plan.hardware.gpu == "detected-rtx-pro-6000-blackwell-server-edition"
    assert (spec.memory_mib, spec.name, plan.hardware.gpus_per_node) == (97887, spec.match[0], 2)
    assert "placeholder" in spec.note and "placeholder" in spec.source
    assert presets.registry().origin[f"hardware/{spec.id}"] == "detected"
    det = detected_gpus()
    assert det is not None and not det.matched and "unknown GPU" in det.label
    from vramplan.core.memory.peak import estimate

    assert estimate(plan).gpu_capacity == 97887 * MiB


@pytest.mark.parametrize(
    "body",
    [
        "exit 9",  # a failing nvidia-smi (no driver loaded)
        printing("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"),
        printing("NVIDIA H100 80GB HBM3, [N/A]\n"),
        printing(""),
        "sleep 5",  # hangs: the short timeout gives up
    ],
)
def test_odd_nvidia_smi_falls_back_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_smi(tmp_path, monkeypatch, body)
    if body.startswith("sleep"):  # the one that hangs: a short timeout gives up (the others are read to their end)
        monkeypatch.setattr(nvidia_smi, "TIMEOUT_S", 0.3)
    plan = starting_plan()
    assert (plan.hardware.gpu, plan.hardware.gpus_per_node) == ("a100-80gb", 8)  # README's default
    assert detected_gpus() is None
    assert capsys.readouterr() == ("", "")


def test_no_nvidia_smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("VRAMPLAN_DETECT", "1")
    presets.reload()
    assert detected_gpus() is None
    assert starting_plan().hardware.gpu == "a100-80gb"


def test_asked_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_smi(tmp_path, monkeypatch, printing(H100_X8))
    for _ in range(3):
        starting_plan()
    assert n_calls(calls) == 1


def test_detection_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_smi(tmp_path, monkeypatch, printing(H100_X8))
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    presets.reload()
    assert starting_plan().hardware.gpu == "a100-80gb"
    assert n_calls(calls) == 0


def test_mixed_gpus_take_the_most_common_model() -> None:
    out = "NVIDIA A100-SXM4-80GB, 81920\n" * 3 + "NVIDIA H100 80GB HBM3, 81559\n"
    assert parse(out)[-1] == ("NVIDIA H100 80GB HBM3", 81559)
    assert parse("garbage") == []
    assert parse("NVIDIA A10, 0") == []


def test_names_match_loosely_when_not_listed() -> None:
    assert gpu_match.match_preset("nvidia h100 80gb hbm3", 81559) == "h100-80gb"  # case
    assert gpu_match.match_preset("NVIDIA-A100-SXM4-80GB", 81920) == "a100-80gb"  # punctuation
    assert gpu_match.match_preset("NVIDIA H800 PCIe", 81559) is None
