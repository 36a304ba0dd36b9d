"""A model without a formula family (issue 41.4): the hybrid Mamba-2/attention Nemotron-H 8B, from its real
config.json (tests/data/hybrid/nemotron-h-8b.json), is refused by `vramplan estimate` in one line that names
`vramplan trace`, and `vramplan trace` builds it with transformers and traces it at full size (its state-space
layers through transformers' reference PyTorch path, said before the run). Skipped without the measure extra."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.hostile import strict_json
from vramplan.cli.parser import run

CONFIG = DATA / "hybrid" / "nemotron-h-8b.json"


def test_estimate_refuses_it_in_one_line_naming_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--hf-config", str(CONFIG)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "unsupported model_type 'nemotron_h'" in line and "vramplan trace --hf-config" in line


def test_trace_builds_and_traces_it_at_full_size(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")
    argv = ["trace", "--hf-config", str(CONFIG), "--gpu", "h100-80gb", "--gpus", "1", "--steps", "1"]
    argv += ["--set", "training.seq_len=256", "--set", "training.method=lora", "--set", "strategy.zero_stage=0"]
    assert run([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    out = strict_json(captured.out)
    assert "no formula family" in captured.err and "reference path" in captured.err
    assert "transformers built 8,100,852,736 parameters" in out["notes"]  # the 8B of its model card
    rows = {d["name"]: d for d in out["differences"]}
    params = rows["parameters"]["traced_bytes"]  # bf16, each tensor's storage in 512-byte blocks
    assert 2 * 8_100_852_736 <= params <= 1.001 * 2 * 8_100_852_736
    assert out["traced"]["peak_allocated_bytes"] > params
    assert out["estimate"]["allocated_bytes"] == 0
