"""`vramplan measure` on the CPU against the oracle's method: on tiny models of three families (LLaMA, GPT-2 and
the MoE Qwen2-MoE / Qwen3-MoE), full and LoRA, its activations agree within 1% and its peak within 5% with the
committed truth of bench/measure/measure_step.py (tests/data/*_truth.json: the same cases, measured by the oracle's
method; torch, transformers and peft versions in each case's "versions"). Skipped without the measure extra."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_truth

pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")

from vramplan.cli.parser import run

# case id, truth file, LoRA targets of the plan (the oracle's "qv": q/v, GPT-2's fused c_attn)
CASES = (
    ("llama_base", "oracle_truth", None),
    ("llama_lora_qv", "oracle_truth", '["q", "v"]'),
    ("gpt2_base", "families_truth", None),
    ("gpt2_lora_qkv", "families_truth", '["qkv"]'),
    ("qwen2moe_base", "moe_truth", None),
    ("qwen3moe_lora_qv", "moe_truth", '["q", "v"]'),
)


def config_json(c: dict[str, Any]) -> dict[str, Any]:
    """The case's model as a config.json: its hf_config keys, or the oracle's size keys for LLaMA."""
    if "hf_config" in c:
        return {"model_type": c["family"], **c["hf_config"]}
    return {
        "model_type": c["family"],
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_layers"],
        "num_attention_heads": c["num_heads"],
        "num_key_value_heads": c["num_kv_heads"],
        "tie_word_embeddings": c["tie_embeddings"],
    }


def measure_args(c: dict[str, Any], config: Path, targets: str | None) -> list[str]:
    """The plan of an oracle case: fp32, AdamW foreach, SDPA, no checkpointing, one GPU; 1 warm-up + 1 measured
    step (the oracle's steady step is its second)."""
    sets = {
        "training.seq_len": c["seq_len"],
        "training.micro_batch_size": c["micro_batch_size"],
        "training.precision": "fp32",
        "training.optimizer": "adamw",
        "training.optimizer_impl": "foreach",
        "training.method": c["method"],
        "strategy.gradient_checkpointing": "none",
        "strategy.attention": "flash",
    }
    if targets:
        sets |= {"training.lora_rank": c["lora_rank"], "training.lora_targets": targets}
    args = ["measure", "--hf-config", str(config), "--gpus", "1", "--device", "cpu", "--warmup", "1", "--steps", "1"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return [*args, "--json"]


@pytest.mark.parametrize(("case_id", "truth_file", "targets"), CASES, ids=[c[0] for c in CASES])
def test_measure_on_the_cpu_agrees_with_the_oracle(
    case_id: str, truth_file: str, targets: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = load_truth(f"{truth_file}.json")[case_id]
    c, f = truth["resolved_case"], truth["figures"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(config_json(c)))
    assert run(measure_args(c, config, targets)) == 0
    out = json.loads(capsys.readouterr().out)
    (rank,) = out["ranks"]
    assert not out["partial"] and out["steps_done"] == 2
    assert rank["params_bytes"] == f["param_bytes"]
    assert rank["grads_bytes"] == f["grad_bytes"]
    assert rank["optimizer_bytes"] == f["optimizer_state_bytes"]
    assert abs(rank["activation_peak_bytes"] - f["activation_bytes"]) <= 0.01 * f["activation_bytes"]
    assert abs(rank["max_allocated_bytes"] - f["steady_peak_bytes"]) <= 0.05 * f["steady_peak_bytes"]
    rows = {r["name"]: r for r in out["comparison"]}
    assert rows["max_allocated"]["measured_bytes"] == rank["max_allocated_bytes"]
    assert rows["parameters"]["reproducible"] and not rows["step_time"]["reproducible"]
    assert "predicted_s" in rows["step_time"] and "measured_tokens_per_s" in rows["tokens_per_s"]


def test_what_it_cannot_reproduce_is_listed_before_anything_runs_and_marks_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128}
    tiny |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny))
    argv = ["measure", "--hf-config", str(config), "--gpus", "1", "--device", "cpu", "--steps", "1", "--json"]
    argv += ["--set", "training.seq_len=32", "--set", "training.optimizer=lion"]
    assert run(argv) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    lion = next(i for i, line in enumerate(err) if "optimizer lion: not in torch.optim" in line)
    building = next(i for i, line in enumerate(err) if "building" in line)
    assert lion < building
    out = json.loads(captured.out)
    assert any("optimizer lion" in line for line in out["cannot_reproduce"])
    rows = {r["name"]: r["reproducible"] for r in out["comparison"]}
    assert not rows["optimizer_states"] and not rows["parameters"]  # the limitation marks every row
