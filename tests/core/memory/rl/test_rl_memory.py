"""DPO, GRPO and PPO memory by phase (issue 30): physical sanity and worked numbers.

LLaMA-7B (6,738,415,616 parameters) on 8 x H100-80GB (81,559 MiB = 85,520,809,984 B per GPU), ZeRO-3 full
fine-tuning under bf16-autocast (fp32 weights, 4 B each) unless a test says otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.memory.activations.block import head_saved
from vramplan.core.memory.activations.context import plan_ctx
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.memory.rl.estimate import settings, update_plan
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan

N = 6_738_415_616
CAP = 81_559 * 2**20


def grpo(**changes: Any) -> Plan:
    base: dict[str, Any] = {
        "hardware.gpu": "h100-80gb",
        "training.objective": "grpo",
        "training.micro_batch_size": 8,
    }
    return default_plan().with_changes({**base, **changes})


def phase(est: Estimate, name: str) -> dict[str, int]:
    assert est.rl is not None
    return next(p.live for p in est.rl.phases if p.name == name)


def test_an_sft_plan_has_no_rl_part_and_dumps_as_before() -> None:
    plan = default_plan()
    assert plan.training.objective == "sft"
    assert estimate(plan).rl is None
    assert "rl" not in plan.dump() and "objective" not in plan.dump()["training"]


def test_memory_grows_with_num_generations_at_the_same_prompts_per_gpu() -> None:
    """TRL's per_device_train_batch_size counts completions: 2 prompts per GPU with G generations each is a
    micro-batch of 2 G completions, so more generations per prompt means more sequences in every phase."""
    totals = [estimate(grpo(**{"rl.num_generations": g, "training.micro_batch_size": 2 * g})).total for g in (2, 4, 8)]
    assert totals[0] < totals[1] < totals[2]


def test_num_generations_alone_leaves_memory_per_gpu_as_is() -> None:
    """At the same completions per GPU, the group size changes the prompts per step, not the memory."""
    assert estimate(grpo(**{"rl.num_generations": 4})).total == estimate(grpo(**{"rl.num_generations": 8})).total


def test_memory_grows_with_max_completion_length() -> None:
    a, b = (estimate(grpo(**{"rl.max_completion_length": c})) for c in (256, 1024))
    assert b.total > a.total
    # hf generation's KV cache: 2 x 32 layers x 32 kv heads x 128 x 2 B x 8 sequences x (512 + c) tokens
    assert phase(a, "generation")["kv_cache"] == 2 * 32 * 32 * 128 * 2 * 8 * (512 + 256)
    assert phase(b, "generation")["kv_cache"] == 2 * 32 * 32 * 128 * 2 * 8 * (512 + 1024)


def test_beta_zero_loads_no_reference_and_beta_a_sharded_copy() -> None:
    none = estimate(grpo())  # GRPOConfig beta = 0.0: GRPOTrainer sets ref_model = None
    assert none.largest.get("frozen_models", 0) == 0
    copy = estimate(grpo(**{"rl.beta": 0.04}))
    # ZeRO-3 shards the reference like the policy (trl prepare_deepspeed): N x 4 B / 8 = 3,369,207,808 B
    assert phase(copy, "update")["frozen_models"] == N * 4 // 8 == 3_369_207_808
    replicated = estimate(grpo(**{"rl.beta": 0.04, "rl.frozen_sharding": "replicated"}))
    assert phase(replicated, "update")["frozen_models"] == N * 4


def test_a_lora_reference_adds_no_weights() -> None:
    lora = {"training.method": "lora", "rl.beta": 0.04}
    adapter = estimate(grpo(**lora))  # unset under LoRA: the base with its adapters disabled
    assert adapter.plan.rl.reference is None
    assert adapter.largest.get("frozen_models", 0) == 0
    copy = estimate(grpo(**lora, **{"rl.reference": "copy"}))
    assert copy.largest["frozen_models"] > 0
    assert copy.total - adapter.total == pytest.approx(copy.largest["frozen_models"], rel=0.01)


def test_colocated_vllm_memory_follows_its_utilisation_fraction() -> None:
    engines = {}
    for u in (0.3, 0.5):
        est = estimate(grpo(**{"rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": u}))
        engines[u] = phase(est, "generation")["vllm_engine"]
        assert engines[u] == int(CAP * u)  # vLLM takes u x total memory (gpu_worker.py requested_memory)
        assert phase(est, "update")["vllm_engine"] == engines[u]  # no sleep mode: resident in the update
    assert engines[0.5] - engines[0.3] == pytest.approx(0.2 * CAP, abs=2)


def test_sleep_mode_frees_the_engine_outside_generation() -> None:
    keys = {"rl.generation": "vllm-colocate", "rl.vllm_enable_sleep_mode": True}
    est = estimate(grpo(**keys))
    assert phase(est, "generation")["vllm_engine"] == int(CAP * 0.3)
    assert phase(est, "update").get("vllm_engine", 0) == 0
    assert est.total < estimate(grpo(**{"rl.generation": "vllm-colocate"})).total


def test_server_mode_moves_generation_memory_off_the_training_gpus() -> None:
    est = estimate(grpo(**{"rl.generation": "vllm-server"}))
    gen = phase(est, "generation")
    assert not gen.get("vllm_engine") and not gen.get("kv_cache")
    assert est.rl is not None and est.rl.server_gpus == 1
    assert est.rl.server_gpu_bytes == int(CAP * 0.9)  # trl vllm-serve's gpu_memory_utilization default
    hf = estimate(grpo())
    assert phase(hf, "generation")["kv_cache"] > 0
    assert sum(gen.values()) < sum(phase(hf, "generation").values())


def test_an_engine_whose_weights_exceed_its_share_is_flagged() -> None:
    # 6.7 B x 2 B = 13.5 GB of weights in 0.1 x 79.6 GiB: vLLM finds no memory for the KV cache
    est = estimate(grpo(**{"rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": 0.1}))
    assert est.rl is not None and est.rl.engine_short
    assert phase(est, "generation")["vllm_engine"] > int(CAP * 0.1)


def test_dpo_trains_chosen_and_rejected_concatenated_and_precomputed_skips_scoring() -> None:
    dpo = default_plan().with_changes({"training.objective": "dpo", "training.micro_batch_size": 2})
    est = estimate(dpo)
    assert est.rl is not None
    assert (est.rl.update_sequences, est.rl.update_seq_len) == (4, 1024)  # 2 x 2 pairs of DPOConfig max_length
    assert [p.name for p in est.rl.phases] == ["scoring", "update"]
    pre = estimate(dpo.with_changes({"rl.reference": "precomputed"}))
    assert pre.rl is not None and [p.name for p in pre.rl.phases] == ["update"]
    assert pre.largest.get("frozen_models", 0) == 0 < est.largest["frozen_models"]


def test_ppo_trains_a_value_model_and_holds_a_reward_model() -> None:
    ppo = estimate(grpo(**{"training.objective": "ppo"}))
    g = estimate(grpo(**{"rl.beta": 0.04}))
    upd, upd_g = phase(ppo, "update"), phase(g, "update")
    assert upd["optimizer_states"] > 1.9 * upd_g["optimizer_states"]  # the value model's, less its lm_head
    assert upd["frozen_models"] > upd_g["frozen_models"]  # reference + reward


def test_the_peak_is_the_worst_phase_and_the_json_says_which() -> None:
    est = estimate(grpo())
    assert est.rl is not None
    assert est.peak.total == max(p.total for p in est.rl.phases)
    data = est.to_json("test")["memory"]
    assert data["peak_phase"] == data["rl"]["peak_phase"] == est.rl.peak_phase
    assert set(data["rl"]["phases"]) == {"generation", "update"}  # beta 0, hf: no scoring forward
    assert data["rl"]["why"].startswith(est.rl.peak_phase)


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"rl.beta": 0.1}, "rl.beta"),  # an SFT plan
        ({"training.objective": "dpo", "rl.num_generations": 4}, "rl.num_generations"),
        ({"training.objective": "grpo", "rl.vllm_gpu_memory_utilization": 0.5}, "rl.vllm_gpu_memory_utilization"),
        (
            {"training.objective": "grpo", "rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": 1.5},
            "rl.vllm_gpu_memory_utilization",
        ),
        ({"training.objective": "grpo", "rl.num_generations": 1}, "rl.num_generations"),
        ({"training.objective": "grpo", "rl.reference": "adapter", "rl.beta": 0.1}, "rl.reference"),
        ({"training.objective": "grpo", "rl.reference": "precomputed", "rl.beta": 0.1}, "rl.reference"),
        ({"training.objective": "grpo", "rl.reference": "copy"}, "rl.reference"),  # beta 0
        (
            {"training.objective": "grpo", "training.micro_batch_size": 1, "hardware.gpus_per_node": 2},
            "training.micro_batch_size",
        ),  # 2 completions: not a group of 8
        ({"training.objective": "ppo", "rl.reward_model": "lama-7b"}, "rl.reward_model"),
    ],
)
def test_bad_rl_keys_name_the_key(changes: dict[str, Any], where: str) -> None:
    with pytest.raises(PlanError) as err:
        default_plan().with_changes(changes)
    assert err.value.where == where, err.value.line()


def test_a_new_objective_drops_the_keys_it_does_not_take() -> None:
    plan = grpo(**{"rl.num_generations": 4, "rl.beta": 0.04})
    dpo = plan.with_changes({"training.objective": "dpo"})
    assert dpo.rl.num_generations is None and dpo.rl.beta == 0.04
    assert "rl" not in plan.with_changes({"training.objective": "sft"}).dump()


def test_a_padded_batch_saves_one_sdpa_mask_per_layer() -> None:
    """SDPA converts a padded batch's bool mask to the query's dtype on every call and saves it
    (aten/src/ATen/native/transformers/attention.cpp): 32 layers x b x s x s x 2 B (bf16 autocast), on the update
    batch (DPO: 2 x 2 pairs of 1024 tokens, no checkpointing). ``rl.padding_free`` removes it."""
    dpo = {"training.objective": "dpo", "training.micro_batch_size": 2, "strategy.gradient_checkpointing": "none"}
    padded = estimate(grpo(**dpo)).per_gpu()["activations"]
    free = estimate(grpo(**dpo, **{"rl.padding_free": True})).per_gpu()["activations"]
    assert padded - free == 32 * 4 * 1024 * 1024 * 2


def test_trl_fused_head_saves_its_hidden_copy_under_lora_too() -> None:
    """TRL's fused log-prob head saves the [N, h] hidden states it projects whether or not lm_head trains
    (trl/kernels/chunked_logprob.py ChunkedLogProbFunction.forward), so a LoRA plan's head is no smaller than
    that copy: N = 8 completions x 512 tokens on CUDA (only the scored positions), h = 4096, fp32 residual."""
    plan = grpo(**{"training.method": "lora", "strategy.zero_stage": 0})
    ctx = plan_ctx(update_plan(plan, settings(plan)))
    assert ctx.logprob_rows == 8 * 512
    assert head_saved(ctx).local(1, False) >= 4 * 8 * 512 * 4096 + 16 * 8 * 512
