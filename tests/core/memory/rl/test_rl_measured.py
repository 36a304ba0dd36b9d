"""The RL estimate against real TRL steps measured on the CPU (issue 30, point 6).

tests/data/rl_truth.json: 19 DPOTrainer / GRPOTrainer steps of trl 1.16.0 on tiny random-weight Llama/Qwen2 models
(torch 2.13.0+cpu, transformers 5.24.0, peft 0.21.2), measured by bench/measure/measure_rl.py from
bench/measure/rl_cases.json (figure definitions in that script's docstring). Bounds: those of the SFT oracle
(tests/core/memory/test_measured_accuracy.py): activations within 5% of activation_bytes - logits_like_bytes +
saved_weight_copy_bytes, the peak (total - overhead) between -5% and +15% of steady_peak_bytes; the estimate is
taken with PyTorch's CPU kernels (``estimate(plan, cpu=True)``).
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.data.rl_cases import rl_plan_data
from tests.conftest import load_truth, rel
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

TRUTH = load_truth("rl_truth.json")
CASES = sorted(TRUTH.items())


PARAMS = [pytest.param(cid, rec, id=cid) for cid, rec in CASES]


def _estimate(rec: dict[str, Any]) -> Any:
    return estimate(plan_from_dict(rl_plan_data(rec["resolved_case"])), cpu=True)


def test_rl_truth_present() -> None:
    """At least 12 measured cases, across both objectives, full and LoRA, and every reference choice."""
    cases = [rec["resolved_case"] for rec in TRUTH.values()]
    assert len(cases) >= 12
    assert {c["objective"] for c in cases} == {"dpo", "grpo"}
    assert {c["method"] for c in cases} == {"full", "lora"}
    assert {c["reference"] for c in cases} == {"copy", "adapter", "precomputed", "none"}


@pytest.mark.parametrize(("cid", "rec"), PARAMS)
def test_rl_case_model_states(cid: str, rec: dict[str, Any]) -> None:
    """Parameter counts exact; the policy's and the reference's weights and the optimizer states within 1%."""
    f, est = rec["figures"], _estimate(rec)
    g = est.per_gpu()
    assert (est.params_total, est.params_trainable) == (f["params_total"], f["params_trainable"])
    weights = g["parameters"] + g.get("frozen_models", 0)
    assert abs(rel(weights, f["param_bytes"] + f["ref_param_bytes"])) <= 0.01, (weights, f["ref_param_bytes"])
    assert abs(rel(g["optimizer_states"], f["optimizer_state_bytes"])) <= 0.01


@pytest.mark.parametrize(("cid", "rec"), PARAMS)
def test_rl_case_activations_within_5_percent(cid: str, rec: dict[str, Any]) -> None:
    f, g = rec["figures"], _estimate(rec).per_gpu()
    act = f["activation_bytes"] - f["logits_like_bytes"] + f["saved_weight_copy_bytes"]
    assert abs(rel(g["activations"], act)) <= 0.05, (g["activations"], act)


@pytest.mark.parametrize(("cid", "rec"), PARAMS)
def test_rl_case_peak_within_bounds(cid: str, rec: dict[str, Any]) -> None:
    f, g = rec["figures"], _estimate(rec).per_gpu()
    peak = rel(g["total"] - g["overhead"], f["steady_peak_bytes"])
    assert -0.05 <= peak <= 0.15, (g["total"] - g["overhead"], f["steady_peak_bytes"], peak)


def test_rl_measured_physics() -> None:
    """What the measurements themselves show (no estimator): a LoRA reference adds no weights, beta = 0 adds no
    reference, precomputed reference log-probs hold no reference copy, and memory grows with num_generations and
    max_completion_length."""
    f = {cid: rec["figures"] for cid, rec in TRUTH.items()}
    assert f["dpo_llama_lora_adapter"]["ref_param_bytes"] == 0
    assert f["grpo_llama_lora_beta"]["ref_param_bytes"] == 0
    assert f["grpo_llama_full_b0"]["ref_param_bytes"] == 0
    assert f["grpo_llama_full_beta"]["ref_param_bytes"] == f["grpo_llama_full_beta"]["param_bytes"]
    assert f["dpo_llama_full_precomputed"]["ref_param_bytes"] == 0
    assert "steady_scoring_peak_above_baseline_bytes" not in f["dpo_llama_full_precomputed"]
    # one generation batch of micro x accumulation completions: twice the KV cache and working set at GA 2
    # (276,624 B: 16 B short of 2 x 138,320)
    gen = "steady_generation_peak_above_baseline_bytes"
    assert f["grpo_llama_full_ga2"][gen] == 276_624 and f["grpo_llama_full_beta"][gen] == 138_320
    # num_iterations = 2 (GA 1): step 2 reuses step 1's completions, step 3 generates and scores again
    steps = [set(s["phases"]) for s in TRUTH["grpo_llama_full_iter2"]["per_step"]]
    assert "generation" not in steps[1] and {"generation", "scoring"} <= steps[2]
    beta = f["grpo_llama_full_beta"]["steady_peak_bytes"]
    assert f["grpo_llama_full_g4"]["steady_peak_bytes"] > beta
    assert f["grpo_llama_full_c32"]["steady_peak_bytes"] > beta
