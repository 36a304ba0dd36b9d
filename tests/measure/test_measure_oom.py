"""Out of memory is a measured outcome: `vramplan measure` reports the phase it stopped in and whether the estimate
said the plan fits, and exits 1 (the failure is injected: a real one would take this machine's memory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")

from vramplan.cli.parser import run
from vramplan.measure import run as measure_run

TINY = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}


def test_an_out_of_memory_error_in_backward_is_reported_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def backward_fails(r: Any, built: Any, meter: Any, device: str) -> None:
        r.phase = "backward"
        raise MemoryError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(measure_run, "_steps", backward_fails)
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    argv = ["measure", "--hf-config", str(tmp_path / "config.json"), "--gpus", "1", "--device", "cpu", "--json"]
    assert run([*argv, "--set", "training.seq_len=32"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["oom"] and not out["partial"]
    assert out["ranks"][0]["oom_phase"] == "backward"
    assert out["ranks"][0]["params_bytes"] > 0  # the build had finished
    assert out["estimate_fits"] is True  # 1 GPU of 80 GB for a 64-wide model: the estimate said it fits
    assert any("out of memory in backward" in n for n in out["notes"])


def test_the_table_says_the_phase_and_what_the_estimate_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def optimizer_fails(r: Any, built: Any, meter: Any, device: str) -> None:
        r.phase = "optimizer"
        raise MemoryError

    monkeypatch.setattr(measure_run, "_steps", optimizer_fails)
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    argv = ["measure", "--hf-config", str(tmp_path / "config.json"), "--gpus", "1", "--device", "cpu"]
    assert run([*argv, "--set", "training.seq_len=32"]) == 1
    assert "OUT OF MEMORY in optimizer; the estimate said it fits" in capsys.readouterr().out
