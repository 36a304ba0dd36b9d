"""Mixture of experts in the plan: active parameters, expert parallelism in memory and time (issue 14)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.core.time.step import step_time


def _plan(model: str, **strategy: Any) -> Any:
    return plan_from_dict(
        {
            "model": {"preset": model},
            "hardware": {"gpu": "h200", "gpus_per_node": 8, "nodes": strategy.pop("nodes", 1)},
            "strategy": strategy,
        }
    )


def cli_json(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "vramplan", *args, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def test_estimate_json_states_active_parameters() -> None:
    """Done-when of issue 14: Mixtral-8x7B with 8-way expert parallelism, DeepSeek-V3 on 8 nodes of 8 H200."""
    mixtral = cli_json("estimate", "--model", "mixtral-8x7b", "--set", "strategy.expert_parallel=8")["parameters"]
    assert (round(mixtral["total"] / 1e8), round(mixtral["active"] / 1e8)) == (467, 129)
    ds = cli_json(
        "estimate", "--model", "deepseek-v3", "--gpu", "h200", "--set", "hardware.nodes=8",
        "--set", "strategy.expert_parallel=8",
    )  # fmt: skip
    assert ds["plan"]["strategy"]["expert_parallel"] == 8 and ds["plan"]["hardware"]["nodes"] == 8
    p = ds["parameters"]
    assert round(p["total"] / 1e9) == 671 and abs(p["active"] / 37e9 - 1) < 0.02 and p["mtp"] > 11e9
    dense = cli_json("estimate", "--model", "llama-3.1-8b")["parameters"]
    assert dense["active"] == dense["total"] and dense["experts"] == 0


def test_expert_parallel_shards_the_experts_states() -> None:
    """ZeRO-1 on 8 GPUs: weights are replicated, except that EP 8 leaves each rank 1/8 of the experts; ZeRO
    shards the experts' optimizer states over dp / ep = 1 rank and the rest over 8, so the states do not change."""
    base, ep8 = (
        estimate(_plan("mixtral-8x7b", zero_stage=1)),
        estimate(_plan("mixtral-8x7b", zero_stage=1, expert_parallel=8)),
    )
    arch = base.plan.model.arch()
    w = 4  # bf16-autocast keeps fp32 weights
    assert base.per_gpu()["parameters"] == w * arch.total_params
    expected = w * (arch.total_params - arch.expert_params + arch.expert_params // 8)
    assert abs(ep8.per_gpu()["parameters"] - expected) <= w * arch.L  # per-layer rounding
    assert abs(ep8.per_gpu()["optimizer_states"] / base.per_gpu()["optimizer_states"] - 1) < 0.01


def test_expert_parallel_all_to_all_in_the_step_time() -> None:
    """Two all-to-alls forward and two backward per MoE layer (+2 recomputed); across nodes on the network."""
    inside = step_time(_plan("mixtral-8x7b", expert_parallel=8))
    by = {t.name: t for t in inside.terms}
    assert by["ep_all_to_all"].seconds > 0
    assert "ep_all_to_all" not in {t.name for t in step_time(_plan("mixtral-8x7b")).terms}
    # TP 2 x EP 4 stays in a node (NVLink, 450 GB/s); TP 2 x EP 8 crosses it (50 GB/s per GPU)
    near = step_time(_plan("mixtral-8x7b", expert_parallel=4, tensor_parallel=2))
    far = step_time(_plan("mixtral-8x7b", expert_parallel=8, tensor_parallel=2, nodes=2))
    a2a = [{t.name: t for t in st.terms}["ep_all_to_all"].seconds for st in (near, far)]
    assert a2a[1] > 8 * a2a[0]


@pytest.mark.parametrize(
    ("model", "strategy", "needle"),
    [
        ("llama-3.1-8b", {"expert_parallel": 2}, "no routed experts"),
        ("mixtral-8x7b", {"expert_parallel": 3}, "must divide the 8 routed experts"),
        ("mixtral-8x7b", {"expert_parallel": 8, "tensor_parallel": 2}, "must divide the data-parallel size 4"),
    ],
)
def test_expert_parallel_must_fit_the_model_and_the_ranks(model: str, strategy: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError) as exc:
        _plan(model, **strategy)
    assert exc.value.where == "strategy.expert_parallel" and needle in exc.value.message


def test_lora_on_an_moe_model_adapts_the_attention_only() -> None:
    """transformers 5 keeps the routed experts as 3-D parameters, which peft's LoRA does not wrap: all-linear
    adapts q, k, v and o (r x (d_in + d_out) each) in every layer."""
    plan = plan_from_dict(
        {
            "model": {"preset": "qwen3-30b-a3b"},
            "training": {"method": "lora", "lora_rank": 16, "lora_targets": ["all-linear"]},
        }
    )
    arch = plan.model.arch()
    per_layer = sum(16 * (arch.linear(r).d_in + arch.linear(r).d_out) for r in ("q", "k", "v", "o"))
    assert estimate(plan).params_trainable == arch.L * per_layer
