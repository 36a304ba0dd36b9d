"""The measured RL cases (tests/data/rl_truth.json, bench/measure/measure_rl.py) as plan data: shared by
tests/core/memory/rl/test_rl_measured.py and bench/measure/rl_compare.py (``python -m bench.measure.rl_compare``)."""

from __future__ import annotations

from typing import Any

PRECISION = {"fp32": "fp32", "bf16-mixed": "bf16-autocast"}


def rl_plan_data(c: dict[str, Any]) -> dict[str, Any]:
    """A measured RL case (``resolved_case``) as plan data: the model keys as the SFT oracle maps them, the batch
    as TRL counts it (DPO: pairs per micro-batch; GRPO: completions), and the lengths the trainer ran."""
    training: dict[str, Any] = {
        "objective": c["objective"],
        "micro_batch_size": c["micro_batch_size"],
        "grad_accum_steps": c["grad_accum_steps"],
        "precision": PRECISION[c["precision"]],
        "optimizer": c["optimizer"],
        "optimizer_impl": c["optimizer_impl"],
        "method": c["method"],
    }
    if c["method"] == "lora":
        t = c["lora_targets"]
        training |= {"lora_rank": c["lora_rank"], "lora_targets": ["q", "v"] if t == "qv" else [t]}
    rl: dict[str, Any] = {"reference": c["reference"], "beta": c["beta"]}
    if c["objective"] == "dpo":
        rl["max_length"] = c["max_length"]
    else:
        rl |= {
            "max_prompt_length": c["prompt_length"],
            "max_completion_length": c["max_completion_length"],
            "num_generations": c["num_generations"],
            "num_iterations": c.get("num_iterations", 1),
            "generation": "hf",
            # measure_rl.py forces every completion to full length (min_new_tokens): no padding in the update
            "padding_free": True,
        }
    return {
        "model": {
            "model_type": c["family"],
            "vocab_size": c["vocab_size"],
            "hidden_size": c["hidden_size"],
            "intermediate_size": c["intermediate_size"],
            "num_hidden_layers": c["num_layers"],
            "num_attention_heads": c["num_heads"],
            "num_key_value_heads": c["num_kv_heads"],
            "tie_word_embeddings": c["tie_embeddings"],
        },
        "hardware": {"gpu": "h200", "gpus_per_node": 1, "nodes": 1},
        "training": training,
        "strategy": {
            "gradient_checkpointing": "full" if c["gradient_checkpointing"] else "none",
            "attention": "flash" if c["attention"] == "sdpa" else "eager",
            "zero_stage": 0,
        },
        "rl": rl,
    }
