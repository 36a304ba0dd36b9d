"""The time model against whole pretraining runs' published averages: LLaMA-65B's tokens/s/GPU and Llama 2's
GPU-hours.

These are averages over a run (restarts, evaluation and checkpointing included, the strategy not published), not
step timings, so they are not in the step-time evaluation set (bench/data/published_time.py lists them as
excluded). What they do bound: a step cannot be slower than the run's average, so vramplan's tokens/s must be at
least the published figure, and its GPU-hours for the token budget at most the published ones. How close the step
time is to measured steps: core/time/accuracy.json and docs/accuracy.md.

Each run's strategy is not fully published; what is assumed is stated next to it. Micro-batches are the largest
power of two that leaves at least 10% of the 80 GB free by vramplan's own estimate (asserted, so the assumption
stays true as the estimator changes).
"""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.core.time.step import step_time

# LLaMA-65B: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models", Table 2 (dimension 8192,
# 64 heads, 80 layers, FFN 22016 = 2/3·4d rounded to 256, §2.2), vocab 32,000 (§2.1), context 2048 and batch 4M
# tokens (§2.3), and §2.4: "When training a 65B-parameter model, our code processes around 380 tokens/sec/GPU
# on 2048 A100 GPU with 80GB of RAM."
LLAMA_65B = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 8192,
    "intermediate_size": 22016,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "tie_word_embeddings": False,
}
LLAMA_65B_TOKENS_PER_S_PER_GPU = 380.0

# Llama 2: Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 2 (CO2 emissions
# during pretraining): 7B 184,320 and 70B 1,720,320 A100-80GB GPU-hours; Table 1 and §2.2: 2.0T tokens,
# context 4096, global batch 4M tokens. Tokens/s/GPU = 2e12 / (GPU-hours x 3600).
LLAMA2_TOKENS = 2_000_000_000_000
LLAMA2_7B_GPU_HOURS = 184_320  # -> 3,014 tokens/s/GPU
LLAMA2_70B_GPU_HOURS = 1_720_320  # -> 323 tokens/s/GPU


def _a100_nodes(nodes: int) -> dict[str, Any]:
    return {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": nodes}


RUNS: dict[str, tuple[dict[str, Any], float]] = {
    # Assumed: 256 nodes x 8 (2048 GPUs); "model and sequence parallelism" (§2.4, citing Korthikanti et al.
    # 2022) as Megatron TP 8 + SP inside a node; "we save the activations that are expensive to compute, such as
    # the outputs of linear layers" as selective recomputation; xformers' memory-efficient causal attention as
    # flash; bf16 with fp32 master weights and AdamW (§2.3); optimizer states sharded over DP 256 (ZeRO-1);
    # micro-batch 4, accumulation 2: 2048 sequences x 2048 tokens = 4M tokens per step.
    "llama-65b": (
        {
            "model": LLAMA_65B,
            "hardware": _a100_nodes(256),
            "training": {
                "micro_batch_size": 4,
                "seq_len": 2048,
                "grad_accum_steps": 2,
                "precision": "bf16-master",
                "optimizer": "adamw",
            },
            "strategy": {
                "gradient_checkpointing": "selective",
                "attention": "flash",
                "zero_stage": 1,
                "tensor_parallel": 8,
                "sequence_parallel": True,
            },
        },
        LLAMA_65B_TOKENS_PER_S_PER_GPU,
    ),
    # Assumed: 32 nodes x 8 (the paper gives GPU-hours, not the GPU count; per-GPU throughput barely depends on
    # it here); data parallelism with ZeRO-1, no activation checkpointing (it fits: asserted), flash attention,
    # bf16 with fp32 master weights; micro-batch 1, accumulation 4: 1024 x 4096 = 4M tokens per step.
    "llama-2-7b": (
        {
            "model": {"preset": "llama-2-7b"},
            "hardware": _a100_nodes(32),
            "training": {
                "micro_batch_size": 1,
                "seq_len": 4096,
                "grad_accum_steps": 4,
                "precision": "bf16-master",
                "optimizer": "adamw",
            },
            "strategy": {"gradient_checkpointing": "none", "attention": "flash", "zero_stage": 1},
        },
        LLAMA2_TOKENS / (LLAMA2_7B_GPU_HOURS * 3600),
    ),
    # Assumed: as LLaMA-65B (2048 GPUs, TP 8 + SP, selective recomputation, ZeRO-1 over DP 256); GQA with 8 KV
    # heads (Table 1); micro-batch 2, accumulation 2: 1024 x 4096 = 4M tokens per step.
    "llama-2-70b": (
        {
            "model": {"preset": "llama-2-70b"},
            "hardware": _a100_nodes(256),
            "training": {
                "micro_batch_size": 2,
                "seq_len": 4096,
                "grad_accum_steps": 2,
                "precision": "bf16-master",
                "optimizer": "adamw",
            },
            "strategy": {
                "gradient_checkpointing": "selective",
                "attention": "flash",
                "zero_stage": 1,
                "tensor_parallel": 8,
                "sequence_parallel": True,
            },
        },
        LLAMA2_TOKENS / (LLAMA2_70B_GPU_HOURS * 3600),
    ),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_step_is_no_slower_than_the_runs_average(name: str) -> None:
    data, published = RUNS[name]
    plan = plan_from_dict(data)
    assert plan.training.mfu is None  # the matmuls' efficiency modelled, not fitted to the run
    est = estimate(plan)
    assert est.fits and est.headroom_fraction >= 0.10, "the assumed micro-batch must fit with 10% to spare"
    st = step_time(plan)
    assert st.tokens_per_step == 4 * 1024 * 1024  # 4M-token global batch, as published
    predicted = st.tokens_per_second_per_gpu
    assert predicted >= published, f"{name}: {predicted:.0f} vs {published:.0f} tokens/s/GPU"
    # the step's MFU is a result, below the A100's measured best matmul efficiency
    assert 0 < st.mfu < 0.869


def test_llama2_gpu_hours_for_the_token_budget() -> None:
    """The same bound through the time-to-train path: GPU-hours for 2T tokens at most Table 2's."""
    for name, published_hours in (("llama-2-7b", LLAMA2_7B_GPU_HOURS), ("llama-2-70b", LLAMA2_70B_GPU_HOURS)):
        data, _ = RUNS[name]
        plan = plan_from_dict(data).with_changes({"training.tokens": LLAMA2_TOKENS})
        st = step_time(plan)
        assert st.gpu_hours is not None and st.train_steps is not None
        assert st.gpu_hours <= published_hours, f"{name}: {st.gpu_hours:,.0f} GPU-hours"
        assert st.train_steps == LLAMA2_TOKENS // st.tokens_per_step + 1
