"""`vramplan gpus` and `vramplan diff`: the real CLI output (text and JSON), errors as one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.hostile import strict_json
from tests.waiting import HANG_S
from vramplan.cli.parser import run
from vramplan.core.advice import gpuguide

ROOT = Path(__file__).resolve().parents[2]


def out_of(args: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> str:
    assert run(args) == code
    return capsys.readouterr().out


def test_gpus_json_lists_every_gpu_preset_with_min_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    hardware = strict_json(out_of(["presets", "hardware", "--json"], capsys))["hardware"]
    data = strict_json(out_of(["gpus", "--json", "--tokens", "10B", "--price", "h100=2.5"], capsys))
    rows = {g["gpu"]: g for g in data["gpus"]}
    assert set(rows) == {h["id"] for h in hardware}
    for g in rows.values():
        assert {"gpu", "min_gpus", "fits", "step_seconds", "tokens_per_second", "train_hours", "cost"} <= set(g)
        assert g["fits"] == (g["min_gpus"] is not None)
    h100 = rows["h100-80gb"]  # --price h100: the SXM part, as --gpu h100 takes it
    assert h100["min_gpus"] == 2 and h100["cost"] == pytest.approx(h100["train_hours"] * 2 * 2.5)
    assert rows["a100-80gb"]["cost"] is None  # no price for it
    est = strict_json(out_of(["estimate", "--json", "--gpu", "h100-80gb", "--gpus", "2"], capsys))
    assert h100["step_seconds"] == est["time"]["step_seconds"]  # the same time model as `vramplan estimate`


def test_gpus_text_table_within_80_columns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the advisor's time budget out of reach: which GPUs it searches must not depend on how busy the machine is
    monkeypatch.setattr(gpuguide, "gpu_guide", partial(gpuguide.gpu_guide, advisor_seconds=HANG_S))
    plan = tmp_path / "p.toml"
    plan.write_text('[model]\npreset = "llama-3.1-70b"\n[training]\ntokens = "1B"\n')
    text = out_of(["gpus", str(plan), "--sort", "cost", "--price", "3"], capsys)
    lines = text.splitlines()
    assert lines[0].startswith("GPU guide: Llama-3.1-70B full fine-tuning")
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["GPU", "GiB"])
    assert "sorted by cost" in lines[head - 1] and lines[head].split()[:3] == ["GPU", "GiB", "GPUs"]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "does not fit:" in text and "RTX 3070 8GB: at 1024 GPUs:" in text
    assert "fewer GPUs with one change" in text


def test_gpus_names_a_broken_user_preset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vramplan.core.plan.catalogue import presets

    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "bad-gpu.toml").write_text('name = "Bad"\n')
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    presets.reload()
    data = strict_json(out_of(["gpus", "--json", "--no-advice"], capsys))
    assert "bad-gpu" not in {g["gpu"] for g in data["gpus"]}
    assert run(["gpus", "--no-advice"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("vramplan: skipped user preset: ") and "bad-gpu.toml" in err


def test_gpus_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["gpus", "--price", "h100=cheap"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert run(["gpus", "--price", "nope=1"]) == 2
    assert "unknown GPU preset 'nope'" in capsys.readouterr().err


def test_gpus_headless_command_runs_in_its_own_process() -> None:
    """How fast, against `vramplan estimate --json`, is bench/bench_gpus.py's."""
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "gpus", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S
    )
    assert r.returncode == 0, r.stderr
    assert len(strict_json(r.stdout)["gpus"]) >= 28


A = '[model]\npreset = "llama-7b"\n'
B = A + "[training]\nmicro_batch_size = 4\n[strategy]\nzero_stage = 2\n"


def test_diff_shows_per_kind_memory_and_step_time_deltas(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(A)
    (tmp_path / "b.toml").write_text(B)
    a, b = str(tmp_path / "a.toml"), str(tmp_path / "b.toml")
    text = out_of(["diff", a, b], capsys)
    assert "2 keys differ (A -> B):" in text
    assert "training.micro_batch_size  1 -> 4" in text and "strategy.zero_stage        3 -> 2" in text
    assert "memory per GPU at the peak, GiB" in text
    for label in ("Parameters", "Optimizer states", "Activations", "Total", "Verdict"):
        assert f"\n  {label}" in text
    assert "\nstep time" in text and "each change alone, applied to A:" in text
    assert "strategy.zero_stage 3 -> 2: +" in text  # ZeRO-2 holds more per GPU
    data = strict_json(out_of(["diff", a, b, "--json"], capsys))
    ea = strict_json(out_of(["estimate", a, "--json"], capsys))
    eb = strict_json(out_of(["estimate", b, "--json"], capsys))
    assert data["delta"]["total"] == eb["memory"]["per_gpu"]["total"] - ea["memory"]["per_gpu"]["total"]
    assert data["delta"]["step_seconds"] == eb["time"]["step_seconds"] - ea["time"]["step_seconds"]
    assert sum(data["delta"]["memory_per_gpu"].values()) == data["delta"]["total"]
    assert [k["key"] for k in data["keys"]] == ["training.micro_batch_size", "strategy.zero_stage"]
    assert all(k["alone"]["memory_per_gpu"] for k in data["keys"])


def test_diff_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(A)
    assert run(["diff", str(tmp_path / "a.toml"), str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.toml" in err
    assert run(["diff", str(tmp_path / "a.toml")]) == 2
    assert "the following arguments are required: B.toml" in capsys.readouterr().err


def test_gpus_takes_a_config_with_from(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`gpus --from FILE` plans with the imported settings (issue 17: --from beside the other plan flags)."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 32, "gradient_accumulation_steps": 4, "fp16": {"enabled": True}}))
    assert run(["gpus", "--json", "--no-advice", "--from", str(ds), "--model", "llama-2-13b", "--gpus", "4"]) == 0
    captured = capsys.readouterr()
    assert "read from" in captured.err and "gradient_accumulation_steps" in captured.err
    data = strict_json(captured.out)
    plain = strict_json(out_of(["gpus", "--json", "--no-advice", "--model", "llama-2-13b", "--gpus", "4"], capsys))
    assert data["gpus"] != plain["gpus"]  # micro-batch 2, accumulation 4, fp16 master weights
