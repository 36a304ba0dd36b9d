"""What `vramplan measure` cannot reproduce here is listed from the plan alone (no torch), before anything runs."""

from __future__ import annotations

from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.limitations import ALL_ROWS, cannot_reproduce, limitations
from vramplan.measure.recipe import recipe

TINY = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}


def test_a_plain_one_gpu_plan_on_cuda_has_nothing_to_say() -> None:
    plan = plan_from_dict(
        {"model": TINY, "hardware": {"gpus_per_node": 1}, "strategy": {"attention": "eager"}, "training": {}}
    )
    assert cannot_reproduce(plan, "cuda", 1) == ()


def test_the_cpu_marks_reserved_process_and_time() -> None:
    plan = plan_from_dict({"model": TINY, "hardware": {"gpus_per_node": 1}})
    rows = {row for lim in limitations(plan, "cpu", 0) for row in lim.rows}
    assert rows == {"max_reserved", "process", "step_time", "tokens_per_s"}


def test_what_no_single_process_runs_is_each_said() -> None:
    plan = plan_from_dict(
        {
            "model": TINY,
            "hardware": {"gpus_per_node": 8, "nodes": 2},
            "training": {"method": "qlora", "optimizer": "lion"},
            "strategy": {
                "zero_stage": 3,
                "tensor_parallel": 2,
                "offload_optimizer": "cpu",
                "fused_cross_entropy": True,
            },
        }
    )
    text = "\n".join(cannot_reproduce(plan, "cpu", 0))
    for part in ("16 GPUs", "2 nodes", "tensor parallel 2", "offload", "quantized base (nf4)", "optimizer lion"):
        assert part in text, (part, text)
    assert "fused cross-entropy" in text
    qlora = next(lim for lim in limitations(plan, "cpu", 0) if "quantized" in lim.what)
    assert qlora.rows == ALL_ROWS


def test_an_rl_objective_is_said() -> None:
    plan = plan_from_dict({"model": TINY, "hardware": {"gpus_per_node": 1}, "training": {"objective": "dpo"}})
    assert any("objective dpo" in line for line in cannot_reproduce(plan, "cuda", 1))


def test_the_recipe_follows_the_plan_and_its_stack() -> None:
    plan = plan_from_dict(
        {
            "model": TINY,
            "hardware": {"gpus_per_node": 1},
            "training": {"method": "lora", "lora_targets": ["q", "v", "down"], "lora_dropout": 0.1},
            "strategy": {"gradient_checkpointing": "full", "checkpoint_impl": "reentrant", "attention": "flash"},
        }
    )
    r = recipe(plan)
    assert r.lora_modules == ("q_proj", "v_proj", "down_proj")
    assert (r.weights_dtype, r.autocast) == ("bf16", None)  # LoRA's default: a bf16-pure base
    assert r.checkpointing and r.reentrant and r.attention == "sdpa" and r.lora_dropout == 0.1
    assert r.config["hidden_size"] == 64 and r.expected_params == plan.model.arch().total_params
