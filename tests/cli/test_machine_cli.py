"""The CLI on the user's machine: --hf-config, detected GPUs, user presets (one-line errors, exit 2)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bench.data.published_configs import REAL
from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.plan.catalogue import presets

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vramplan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)


def checkpoint(tmp_path: Path, name: str, config: dict | None = None) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config if config is not None else REAL[name][0]))
    return d


def test_estimate_from_a_checkpoint_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = checkpoint(tmp_path, "gpt2")
    assert run(["estimate", "--hf-config", str(d), "--set", "training.seq_len=1024", "--json"]) == 0
    data = strict_json(capsys.readouterr().out)
    assert data["parameters"]["total"] == 124_439_808
    assert data["plan"]["model"]["hf_config"] == str(d.resolve())
    assert data["plan"]["model"]["model_type"] == "gpt2"
    assert run(["estimate", "--hf-config", str(d / "config.json"), "--set", "training.seq_len=1024"]) == 0
    assert capsys.readouterr().out.startswith("gpt2 (gpt2, config.json) on 8 x NVIDIA A100 80GB SXM4")


def test_hf_config_in_a_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint(tmp_path, "pythia-160m")
    plan = tmp_path / "plan.toml"
    plan.write_text('[model]\nhf_config = "pythia-160m"\n[training]\nmicro_batch_size = 4\n')
    assert run(["estimate", str(plan), "--json"]) == 0
    assert strict_json(capsys.readouterr().out)["parameters"]["total"] == 162_322_944


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, "no such file or directory"),
        ({"model_type": "jamba", "num_experts": 16}, "'jamba': a hybrid of Mamba and attention blocks with experts ("),
        ({"model_type": "olmoe", "num_experts": 64}, "mixture-of-experts"),
        ({"model_type": "t5"}, "unsupported model_type 't5'; supported: llama, mistral, qwen2, gemma, phi3"),
        ({"model_type": "gpt2", "n_embd": 768, "n_head": -1}, "n_head: must be a positive integer"),
    ],
)
def test_hf_config_errors_are_one_line(tmp_path: Path, config: dict | None, expected: str) -> None:
    path = tmp_path / "nothing-here" if config is None else checkpoint(tmp_path, "ckpt", config)
    r = cli("estimate", "--hf-config", str(path))
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("vramplan: model.hf_config: ") and str(path) in line and expected in line, line


def test_model_and_hf_config_are_exclusive(tmp_path: Path) -> None:
    r = cli("estimate", "--model", "llama-7b", "--hf-config", str(checkpoint(tmp_path, "gpt2")))
    assert (r.returncode, r.stderr.strip()) == (2, "vramplan: --hf-config: give --model or --hf-config, not both")


def install_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    script = bindir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho x >> \"{calls}\"\ncat <<'EOF'\n{output}EOF\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("VRAMPLAN_DETECT", "1")
    presets.reload()
    return calls


def test_estimate_starts_on_the_detected_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_smi(tmp_path, monkeypatch, "NVIDIA H100 80GB HBM3, 81559\n" * 8)
    r = cli("estimate")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "LLaMA-7B on 8 x NVIDIA H100 80GB SXM5 (1 node)"
    assert lines[1] == "hardware detected: 8 x H100 80GB HBM3 (nvidia-smi)"
    data = strict_json(cli("estimate", "--json").stdout)
    assert (data["plan"]["hardware"]["gpu"], data["plan"]["hardware"]["gpus_per_node"]) == ("h100-80gb", 8)
    assert "detected" not in cli("estimate", "--gpu", "a100-80gb").stdout


def test_a_plan_file_or_presets_never_run_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_plan, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = install_smi(tmp_path, monkeypatch, "NVIDIA H100 80GB HBM3, 81559\n")
    assert run(["estimate", str(tmp_plan('[model]\npreset = "llama-7b"\n'))]) == 0
    assert run(["presets"]) == 0
    capsys.readouterr()
    assert not calls.exists()


def test_presets_lists_user_presets_and_reports_broken_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cfg"
    (root / "models").mkdir(parents=True)
    (root / "hardware").mkdir()
    good = (ROOT / "presets/models/tinyllama-1.1b.toml").read_text().replace('id = "tinyllama-1.1b"', 'id = "mine"')
    (root / "models/mine.toml").write_text(good)
    (root / "hardware/bad.toml").write_text("name = 'x'\nmemory_mib = 'lots'\n")
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(root))
    r = cli("presets")
    assert r.returncode == 0
    assert any(line.split()[0] == "mine" and line.endswith("(user)") for line in r.stdout.splitlines())
    assert "llama-7b" in r.stdout and "a100-80gb" in r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"vramplan: skipped user preset: {root / 'hardware/bad.toml'}: ") and "memory_mib" in line
    r = cli("estimate", "--gpu", "bad")
    assert r.returncode == 2 and "user preset file is broken" in r.stderr and len(r.stderr.splitlines()) == 1


def test_an_exported_plan_opens_without_its_config_json(tmp_path: Path) -> None:
    """Issue 16.2: an export from a config.json stores hf_config relative to the plan file (provenance) and every
    model key; moved to a machine without the config.json it still opens, with a notice, not exit 2."""
    d = checkpoint(tmp_path, "pythia-160m")
    out_dir = tmp_path / "plans"
    out_dir.mkdir()
    made = cli("export", "--hf-config", str(d), "-o", str(out_dir / "p.toml"))
    assert made.returncode == 0, made.stderr
    text = (out_dir / "p.toml").read_text()
    assert 'hf_config = "../pythia-160m"' in text
    assert str(tmp_path) not in text  # nothing absolute from this machine
    before = strict_json(cli("estimate", str(out_dir / "p.toml"), "--json").stdout)["memory"]["per_gpu"]

    moved = tmp_path / "another" / "machine"
    moved.mkdir(parents=True)
    (out_dir / "p.toml").rename(moved / "p.toml")  # reviewed elsewhere: ../pythia-160m is not there
    assert not (moved / ".." / "pythia-160m").exists()
    got = cli("estimate", str(moved / "p.toml"), "--json")
    assert got.returncode == 0, got.stderr
    assert strict_json(got.stdout)["memory"]["per_gpu"] == before
    assert "hf_config" in got.stderr and "not found; the model keys in the file are used" in got.stderr
    # without the model keys a missing config.json is still an error, one line, exit 2
    (moved / "bare.toml").write_text('[model]\nhf_config = "nowhere"\n')
    bare = cli("estimate", str(moved / "bare.toml"))
    assert bare.returncode == 2 and "no such file or directory" in bare.stderr


def test_export_file_names_follow_the_config_json_model_name(tmp_path: Path) -> None:
    """Issue 16.18: a plan from a config.json is exported as `mistral-nemo-base-2407-...` (its model's name), not
    `mistral-40l-5120h-...`."""
    d = tmp_path / "ckpt"
    d.mkdir()
    config = {
        "_name_or_path": "mistralai/Mistral-Nemo-Base-2407",
        "model_type": "mistral",
        "vocab_size": 131072,
        "hidden_size": 5120,
        "intermediate_size": 14336,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    }
    (d / "config.json").write_text(json.dumps(config))
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "export", "--hf-config", str(d), "--format", "markdown"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (written,) = [p.name for p in tmp_path.iterdir() if p.suffix == ".md"]
    assert written.startswith("mistral-nemo-base-2407-8xa100-80gb-full-zero3"), written


def test_an_unknown_detected_gpu_is_timed_as_assumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16.7: a detected GPU without a preset (an L4 then; an H800 PCIe now that L4 has one) was timed with
    placeholder TFLOP/s and bandwidth and nothing said so. The step time is marked as assumed, with how to add a
    user preset (text and JSON); a known GPU's is not."""
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path / "cfg"))
    install_smi(tmp_path, monkeypatch, "NVIDIA H800 PCIe, 81559\n" * 4)
    r = cli("estimate")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "! assumed: NVIDIA H800 PCIe has no preset, so its 100 TFLOP/s and 1000 GB/s are placeholders" in text
    assert f"add {tmp_path / 'cfg'}/hardware/detected-h800-pcie.toml" in text
    data = strict_json(cli("estimate", "--json").stdout)
    assert data["time"]["assumed_figures"].startswith("assumed: NVIDIA H800 PCIe has no preset")
    known = strict_json(cli("estimate", "--gpu", "a100-80gb", "--json").stdout)
    assert known["time"]["assumed_figures"] is None
