"""DPO, GRPO and PPO step time by phase: generation, scoring and update (issue 30)."""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.memory.rl.sizes import vllm_weight_bytes
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.time.chip import MEMORY_EFFICIENCY, plan_chip
from vramplan.core.time.launch import EAGER_FORWARD_S
from vramplan.core.time.rl_time import forward_pass
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


def test_hf_generate_is_bound_by_the_host_vllm_by_bandwidth() -> None:
    """model.generate issues the model's eager forward token by token: a LLaMA-7B's 1,473 kernels at 24.5 us each
    take longer than reading its fp32 weights (bf16-autocast) and its 8 sequences' KV cache on an H100; vLLM
    replays a CUDA graph of its fused layers (10 kernels each) and waits on HBM instead."""
    short, long = (step_time(grpo(**{"rl.max_completion_length": c})) for c in (128, 512))
    assert short.rl is not None and long.rl is not None and short.rl.gen is not None
    assert long.rl.generation_s > 3 * short.rl.generation_s
    plan = grpo(**{"rl.max_completion_length": 128})
    _, kernels = forward_pass(plan, plan_chip(plan), 8, 1, 1)
    assert kernels == 1473
    host = kernels * EAGER_FORWARD_S
    # 2 x 32 layers x 32 heads x 128 x 2 B = 524,288 B of KV per token, over the mean context 512 + 64
    hbm = (6_738_415_616 * 4 + 8 * 524_288 * (512 + 64)) / (3350e9 * MEMORY_EFFICIENCY)
    assert host > hbm
    assert short.rl.gen.decode_s == pytest.approx(128 * host, rel=1e-9)
    vllm = step_time(grpo(**{"rl.max_completion_length": 128, "rl.generation": "vllm-colocate"}))
    assert vllm.rl is not None and vllm.rl.gen is not None
    # vLLM holds bf16 weights; its 8 sequences read the same KV cache; 32 x 10 + 4 kernels at the GPU's 2 us floor
    weights = vllm_weight_bytes(6_738_415_616, 1)
    per_step = (weights + 8 * 524_288 * (512 + 64)) / (3350e9 * MEMORY_EFFICIENCY) + (32 * 10 + 4) * 2e-6
    assert vllm.rl.gen.decode_s == pytest.approx(128 * per_step, rel=1e-9)
    assert vllm.rl.gen.decode_s < short.rl.gen.decode_s / 3


def test_time_to_train_counts_prompts() -> None:
    st = step_time(grpo(**{"rl.prompts": 1000}))
    assert st.rl is not None
    assert st.rl.prompts_per_step == 8 * 8 // 8  # 64 completions in groups of 8
    assert st.train_steps == 125
    assert st.train_seconds == pytest.approx(125 * st.step_seconds)
