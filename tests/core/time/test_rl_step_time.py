"""DPO, GRPO and PPO step time by phase: generation, scoring and update (issue 30)."""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.plan.schema.plan import Plan, default_plan
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
