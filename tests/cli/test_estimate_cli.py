"""The headless CLI: `vramplan estimate` and `vramplan presets`, its JSON contract and its errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.files.planio import resolve_plan
from vramplan.core.memory.peak import estimate

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vramplan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_estimate_json_is_one_object_with_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--json"]) == 0
    out = capsys.readouterr().out
    data = strict_json(out)  # exactly one JSON object: json.loads fails on trailing data
    assert set(data) >= {"version", "plan", "parameters", "memory"}
    assert set(data["plan"]) >= {"model", "hardware", "training", "strategy"}
    assert set(data["parameters"]) == {"total", "active", "trainable", "experts"}
    mem = data["memory"]
    per_gpu = mem["per_gpu"]
    for key in ("parameters", "gradients", "optimizer_states", "activations", "logits", "overhead", "total"):
        assert isinstance(per_gpu[key], int)
    assert isinstance(mem["peak_phase"], str)
    assert isinstance(mem["gpu_capacity"], int)
    assert isinstance(mem["fits"], bool)
    assert isinstance(mem["cpu_per_node"], int)
    assert mem["fits"] == (per_gpu["total"] <= mem["gpu_capacity"])
    assert sum(mem["live_at_peak"].values()) == per_gpu["total"]


def test_estimate_json_equals_core(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "estimate",
        "--model",
        "bloom-7b1",
        "--gpu",
        "h100-80gb",
        "--set",
        "strategy.zero_stage=3",
        "--set",
        'training.lora_targets=["qkv"]',
        "--set",
        "training.method=lora",
        "--json",
    ]
    assert run(args) == 0
    data = strict_json(capsys.readouterr().out)
    est = estimate(
        resolve_plan(
            None,
            "bloom-7b1",
            "h100-80gb",
            ["strategy.zero_stage=3", 'training.lora_targets=["qkv"]', "training.method=lora"],
        )
    )
    assert data["memory"]["per_gpu"] == {**est.per_gpu(), "expected_error": est.expected_error.to_json()}
    assert data["plan"]["training"]["lora_targets"] == ["qkv"]
    assert data["plan"]["model"]["preset"] == "bloom-7b1"


def test_plan_file_round_trips_through_json(tmp_plan, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_plan(
        """
[model]
preset = "llama-7b"
num_hidden_layers = 16

[hardware]
gpu = "a100-80gb"
gpus_per_node = 8
nodes = 1

[training]
micro_batch_size = 2
seq_len = 4096
precision = "bf16-master"
"""
    )
    assert run(["estimate", str(path), "--json"]) == 0
    data = strict_json(capsys.readouterr().out)
    assert data["plan"]["model"]["num_hidden_layers"] == 16
    assert data["plan"]["model"]["hidden_size"] == 4096  # from the preset
    assert data["plan"]["training"]["seq_len"] == 4096


def test_table_output_names_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--set", "hardware.gpu=rtx-3070-8gb", "--set", "strategy.zero_stage=0"]) == 1  # over
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out
    assert "Optimizer states" in out


def test_presets_lists_models_and_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["presets"]) == 0
    out = capsys.readouterr().out
    for pid in ("llama-7b", "bloom-7b1", "qwen2.5-72b", "a100-80gb", "h100-80gb", "mi250x", "rtx-3070-8gb"):
        assert pid in out
    assert run(["presets", "hardware"]) == 0
    out = capsys.readouterr().out
    assert "a100-80gb" in out and "llama-7b" not in out


BAD_FILES = {
    "malformed": (b"[model\npreset = 'llama-7b'\n", "not valid TOML"),
    "unknown_key": (b"[model]\npreset = 'llama-7b'\n[training]\nseq_lenght = 4\n", "training.seq_lenght: unknown key"),
    "unknown_table": (b"[model]\npreset = 'llama-7b'\n[trainig]\n", "trainig: unknown table"),
    "wrong_type": (b"[model]\npreset = 'llama-7b'\n[training]\nseq_len = 'long'\n", "training.seq_len"),
    "out_of_range": (b"[model]\npreset = 'llama-7b'\n[strategy]\nzero_stage = 4\n", "strategy.zero_stage"),
    "unknown_preset": (b"[model]\npreset = 'llama7b'\n", "did you mean llama-7b"),
    "unknown_gpu": (b"[model]\npreset = 'llama-7b'\n[hardware]\ngpu = 'h100'\n", "hardware.gpu"),
    "no_model": (b"[hardware]\ngpu = 'h100-80gb'\n", "missing [model]"),
    "bad_combination": (
        b"[model]\npreset = 'llama-7b'\n[strategy]\noffload_parameters = 'cpu'\nzero_stage = 2\n",
        "strategy.offload_parameters",
    ),
    "non_utf8": (b"[model]\npreset = '\xff\xfe llama'\n", "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_plan_files_give_one_line_and_exit_2(name: str, tmp_path: Path) -> None:
    content, expected = BAD_FILES[name]
    path = tmp_path / f"{name}.toml"
    path.write_bytes(content)
    r = cli("estimate", str(path))
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert expected in lines[0]
    assert str(path) in lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["estimate", "missing.toml"], "missing.toml: no such file"),
        (["estimate", "tests"], "tests: is a directory"),
        (["estimate", "--set", "strategy.zero_stage"], "expected table.key=value"),
        (["estimate", "--set", "zero_stage=3"], "keys are table.key"),
        (["estimate", "--set", "strategy.zero_stage=9"], "strategy.zero_stage"),
        (["estimate", "--gpu", "a100"], "which one: a100-40gb, a100-80gb?"),
        (["estimate", "--model", "nope"], "unknown model preset"),
        (["estimate", "--frobnicate"], "unrecognized arguments"),
        (["presets", "gpus"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args: list[str], expected: str) -> None:
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert expected in lines[0]
    assert "Traceback" not in r.stderr


def test_headless_commands_never_import_textual() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from vramplan.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['estimate', '--json']) == 0\n"
        "    assert main(['estimate']) == 0\n"
        "    assert main(['presets']) == 0\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr


def test_estimate_json_has_the_time_object(capsys: pytest.CaptureFixture[str]) -> None:
    from vramplan.core.time.record import CATEGORIES
    from vramplan.core.time.step import step_time

    assert run(["estimate", "--json"]) == 0
    data = strict_json(capsys.readouterr().out)
    time = data["time"]
    assert isinstance(time["flops_per_step"], int)
    for key in ("step_seconds", "tokens_per_second", "tokens_per_second_per_gpu", "mfu"):
        assert isinstance(time[key], float) and time[key] > 0
    assert time["bottleneck"] in CATEGORIES
    assert "train_hours" not in time and "gpu_hours" not in time  # no token budget in the default plan
    st = step_time(resolve_plan(None, None, None, []))
    assert time["step_seconds"] == st.step_seconds
    assert time["flops_per_step"] == st.flops_per_step
    assert sum(t["exposed_seconds"] for t in time["terms"].values()) == pytest.approx(time["step_seconds"])
    assert set(time["explain"]) >= set(time["terms"])


def test_estimate_json_time_to_train_with_a_token_budget(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "--json", "--set", "training.tokens=2e9", "--set", "hardware.price_per_gpu_hour=2.0"]
    assert run(args) == 0
    time = strict_json(capsys.readouterr().out)["time"]
    # 2e9 tokens at the predicted throughput; GPU-hours = hours x 8 GPUs; cost = GPU-hours x 2.0
    assert time["train_hours"] == pytest.approx(2e9 / time["tokens_per_second"] / 3600)
    assert time["gpu_hours"] == pytest.approx(time["train_hours"] * 8)
    assert time["cost"] == pytest.approx(time["gpu_hours"] * 2.0)


def test_table_output_shows_step_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--set", "training.tokens=1e9"]) == 0
    out = capsys.readouterr().out
    assert "step time" in out and "tokens/s" in out and "bottleneck: compute" in out
    assert "GPU-hours" in out


def test_a_plan_file_is_the_default_plan_plus_what_it_says(tmp_path: Path) -> None:
    """Issue 16.14: `[model] preset = "llama-7b"` alone is the default plan (ZeRO-3, full checkpointing, 8 GPUs,
    17.8 GiB), not DDP without checkpointing (158 GiB); what the file states still wins."""
    only = tmp_path / "only.toml"
    only.write_text('[model]\npreset = "llama-7b"\n')
    default = strict_json(cli("estimate", "--json").stdout)
    got = cli("estimate", str(only), "--json")
    assert got.returncode == 0, got.stderr
    data = strict_json(got.stdout)
    assert data["plan"] == default["plan"]
    assert data["memory"]["per_gpu"]["total"] == default["memory"]["per_gpu"]["total"] < 20 * 2**30
    stated = tmp_path / "stated.toml"
    stated.write_text('[model]\npreset = "llama-7b"\n[strategy]\nzero_stage = 1\n[training]\nseq_len = 1024\n')
    plan = strict_json(cli("estimate", str(stated), "--json").stdout)["plan"]
    assert plan["strategy"]["zero_stage"] == 1 and plan["strategy"]["gradient_checkpointing"] == "full"
    assert plan["training"]["seq_len"] == 1024 and plan["hardware"]["gpus_per_node"] == 8
    # a default that clashes with what the file says is named as the default plan's
    pp = tmp_path / "pp.toml"
    pp.write_text('[model]\npreset = "llama-7b"\n[strategy]\npipeline_parallel = 2\n')
    err = cli("estimate", str(pp))
    assert err.returncode == 2 and "zero_stage = 3 is the default plan's" in err.stderr


def test_counts_take_suffixes_exponents_and_underscores() -> None:
    """Issue 16.3: `--set training.seq_len=4k` is 4096 (context lengths are binary), `32K` 32768, `1e3` 1000,
    `2_048` 2048; a count elsewhere is decimal (`gpus_per_node=1e0`); a non-number is one line, exit 2."""
    for typed, seq_len in (("4k", 4096), ("32K", 32768), ("1e3", 1000), ("2_048", 2048)):
        got = cli("estimate", "--set", f"training.seq_len={typed}", "--json")
        assert got.returncode == 0, got.stderr
        assert strict_json(got.stdout)["plan"]["training"]["seq_len"] == seq_len
    got = cli("estimate", "--set", "hardware.gpus_per_node=4e0", "--set", "training.micro_batch_size=2", "--json")
    assert strict_json(got.stdout)["plan"]["hardware"]["gpus_per_node"] == 4
    bad = cli("estimate", "--set", "training.seq_len=4x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "enter a number: 2048, 4k" in bad.stderr
