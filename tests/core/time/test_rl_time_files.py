"""DPO, GRPO and PPO: step time by phase, the CLI's --json, plan files and `vramplan keys` (issue 30)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.planio import plan_file_from_data
from vramplan.core.plan.keyref import settable_keys
from vramplan.core.plan.plan import Plan, default_plan
from vramplan.core.plan.rl import RLConfig
from vramplan.core.plan.tomlio import loads
from vramplan.core.time.step import step_time

GRPO = {"hardware.gpu": "h100-80gb", "training.objective": "grpo", "training.micro_batch_size": 8}


def grpo(**changes: Any) -> Plan:
    return default_plan().with_changes({**GRPO, **changes})


def test_the_step_is_generation_plus_scoring_plus_update() -> None:
    st = step_time(grpo(**{"rl.beta": 0.04, "rl.generation": "vllm-colocate"}))
    assert st.rl is not None
    assert st.step_seconds == pytest.approx(st.rl.generation_s + st.rl.scoring_s + st.rl.update_s)
    assert sum(t.exposed for t in st.terms) == pytest.approx(st.step_seconds)
    # 8 GPUs x 8 completions x 512 tokens generated per step
    assert st.rl.generated_tokens == 8 * 8 * 512
    # two scoring forwards (vLLM importance sampling's old log-probs, the reference) of 8 x 1024 tokens per GPU
    assert st.rl.scored_tokens == 2 * 8 * 1024 * 8


def test_decoding_is_bandwidth_bound_and_grows_with_the_completion() -> None:
    short, long = (step_time(grpo(**{"rl.max_completion_length": c})) for c in (128, 512))
    assert short.rl is not None and long.rl is not None and short.rl.gen is not None
    assert long.rl.generation_s > 3 * short.rl.generation_s
    # hf generate reads the fp32 weights (bf16-autocast) and the KV cache of its 8 sequences (2 x 32 x 32 x 128
    # x 2 B = 524,288 B per token, over the mean context 512 + 64) every decode step, at 3,350 GB/s x 0.8
    per_token = (6_738_415_616 * 4 + 8 * 524_288 * (512 + 64)) / (3350e9 * 0.8)
    assert short.rl.gen.decode_s == pytest.approx(128 * per_token, rel=1e-9)


def test_time_to_train_counts_prompts() -> None:
    st = step_time(grpo(**{"rl.prompts": 1000}))
    assert st.rl is not None
    assert st.rl.prompts_per_step == 8 * 8 // 8  # 64 completions in groups of 8
    assert st.train_steps == 125
    assert st.train_seconds == pytest.approx(125 * st.step_seconds)


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


@pytest.mark.parametrize(
    "changes",
    [
        {"rl.beta": 0.04, "rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": 0.4},
        {"training.objective": "dpo", "rl.max_length": 2048, "rl.reference": "precomputed"},
        {"training.objective": "ppo", "rl.reward_model": "llama-7b", "rl.frozen_offload": "cpu"},
        {"rl.generation": "vllm-server", "rl.vllm_tensor_parallel_size": 2, "rl.prompts": 5000},
    ],
)
def test_rl_plans_round_trip_through_the_toml_export(changes: dict[str, Any]) -> None:
    plan = grpo(**changes)
    text = plan_toml(plan, created="2026-01-01T00:00:00Z")
    data = loads(text)
    assert data["training"]["objective"] == plan.training.objective
    assert data["rl"] == plan.rl.stated()
    again = plan_file_from_data(data, "<export>").plan
    assert again == plan
    assert plan_toml(again, created="2026-01-01T00:00:00Z") == text


def test_every_rl_key_is_listed_and_settable() -> None:
    keys = {k.key: k for k in settable_keys()}
    assert keys["training.objective"].type == "sft|dpo|grpo|ppo"
    assert keys["training.objective"].default == "sft"
    for name in RLConfig.model_fields:
        assert f"rl.{name}" in keys and keys[f"rl.{name}"].meaning, name
    plan = grpo(**{"rl.generation": "vllm-colocate", "rl.vllm_enable_sleep_mode": True})
    assert plan.rl.vllm_enable_sleep_mode is True
