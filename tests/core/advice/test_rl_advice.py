"""The checklist and the fit advisor know the RL knobs (issue 30, point 4)."""

from __future__ import annotations

from typing import Any

from vramplan.core.advice.checklist import checklist
from vramplan.core.advice.moves import memory_moves
from vramplan.core.advice.rlmoves import needed_utilization
from vramplan.core.plan.schema.plan import Plan, default_plan

GRPO = {"hardware.gpu": "h100-80gb", "training.objective": "grpo", "training.micro_batch_size": 8}


def grpo(**changes: Any) -> Plan:
    return default_plan().with_changes({**GRPO, **changes})


def titles(plan: Plan) -> list[str]:
    return [m.title for m in memory_moves(plan)]


def test_an_sft_plan_has_no_rl_items_or_moves() -> None:
    plan = default_plan()
    assert not [i for i in checklist(plan) if "rl" in i.id or "vllm" in i.id]
    assert not [t for t in titles(plan) if "vLLM" in t or "reference" in t]


def test_the_rl_moves_name_the_knobs() -> None:
    colocate = titles(grpo(**{"rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": 0.6}))
    assert "vLLM sleep mode" in colocate and "vLLM server on separate GPUs" in colocate
    assert any(t.startswith("vLLM share 0.6 -> ") for t in colocate)
    assert "max_completion_length 512 -> 256" in colocate
    assert any(t.startswith("num_generations 8 -> 4") for t in colocate)
    dpo = titles(default_plan().with_changes({"training.objective": "dpo"}))
    assert "precomputed reference log-probs" in dpo
    lora = titles(grpo(**{"training.method": "lora", "rl.reference": "copy", "rl.beta": 0.04}))
    assert "LoRA reference (adapters disabled)" in lora


def test_the_needed_share_holds_weights_and_the_batch_kv_cache() -> None:
    # 6.74e9 x 2 B + 8 sequences x 1024 tokens x 524,288 B = 17.77e9 B of 85.52e9 B: 0.21 -> 0.25
    assert needed_utilization(grpo(**{"rl.generation": "vllm-colocate"})) == 0.25


def test_the_checklist_names_the_peak_phase_and_fixes_it_with_sleep_mode() -> None:
    plan = grpo(
        **{
            "training.micro_batch_size": 16,
            "rl.generation": "vllm-colocate",
            "rl.vllm_gpu_memory_utilization": 0.6,
            "strategy.gradient_checkpointing": "selective",
        }
    )
    cl = checklist(plan)
    item = cl.item("oom.rl_phase")
    assert item.detail.startswith("update is the largest phase")
    assert item.status == "warn" and item.fix is not None
    assert any(e.title == "vLLM sleep mode" for e in item.alternatives)
    assert cl.item("oom.vllm_share").status == "ok"


def test_a_too_small_vllm_share_fails() -> None:
    cl = checklist(grpo(**{"rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": 0.1}))
    item = cl.item("oom.vllm_share")
    assert item.status == "fail" and item.fix is not None
    assert dict(item.fix.changes) == {"rl.vllm_gpu_memory_utilization": 0.25}


def test_a_generation_bound_step_is_a_slow_item_with_faster_engines() -> None:
    item = checklist(grpo()).item("slow.rl_generation")  # hf generate of fp32 weights: most of the step
    assert item.status == "warn"
    assert {e.title for e in item.alternatives} >= {"vLLM colocated", "vLLM server on separate GPUs"}
    assert item.fix is not None and item.fix.relative_token_time < 0.95
