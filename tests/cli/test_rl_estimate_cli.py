"""DPO, GRPO and PPO in `vramplan estimate`: per-phase memory and time in --json, the peak phase in the text
report (issue 30)."""

from __future__ import annotations

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run


def test_estimate_json_has_per_phase_memory_and_time(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "--json", "--gpu", "h100-80gb", "--set", 'training.objective="grpo"']
    args += ["--set", "training.micro_batch_size=8", "--set", "rl.generation=vllm-colocate"]
    assert run(args) == 0
    data = strict_json(capsys.readouterr().out)
    rl = data["memory"]["rl"]
    assert set(rl["phases"]) == {"generation", "scoring", "update"}
    assert rl["peak_phase"] == data["memory"]["peak_phase"]
    assert all(p["total"] > 0 for p in rl["phases"].values())
    phases = data["time"]["rl"]["phases"]
    assert all(phases[p]["seconds"] > 0 and phases[p]["tokens_per_second"] > 0 for p in phases)
    assert data["plan"]["training"]["objective"] == "grpo"


def test_the_text_report_names_the_peak_phase(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--set", "training.objective=dpo"]) == 0
    out = capsys.readouterr().out
    assert "DPO: 1 pairs/GPU of 1024 tokens" in out
    assert "peak (update)" in out and "phases (tensors per GPU, GiB): scoring" in out
    start = out.index("  phases (tensors per GPU")
    added = out[start : out.index("\n\n", start)].splitlines() + [line for line in out.splitlines() if "tok/s" in line]
    assert added and max(len(line) for line in added) <= 80
