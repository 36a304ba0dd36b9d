"""``--from`` for preference and RL post-training (issue 30.5): TRL's DPO/GRPO YAML and verl's trainer config read
into RL plans, every setting read or named as ignored; hostile input is one PlanError line. The sample configs are
the projects' own (tests/data/import/README.md)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import DATA as TEST_DATA
from vramplan.core.files.importers.apply import Imported, import_config
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import default_plan

DATA = TEST_DATA / "import"


def ignored(im: Imported) -> dict[str, str]:
    return {i.key: i.why for i in im.ignored}


def every_key_accounted(im: Imported, data: dict[str, Any]) -> None:
    named = [r.key for r in im.reads] + [i.key for i in im.ignored]
    for key in data:
        assert any(n == key or n.startswith((f"{key}.", f"(no {key}", f"{key} +")) for n in named), key


def test_open_r1_grpo_recipe() -> None:
    """open-r1's Qwen2.5-1.5B GRPO demo: 16 completions per GPU, 16 generations per prompt, 512 + 1024 tokens,
    vLLM on its own GPU (vllm_device: the TRL of the time) at 0.7 utilisation, bf16 weights, checkpointing."""
    im = import_config(DATA / "openr1_qwen2.5_1.5b_grpo_config_demo.yaml", default_plan(), model="qwen2.5-7b")
    t, rl = im.plan.training, im.plan.rl
    assert im.format == "trl" and im.plan.stack.framework == "trl"
    assert (t.objective, t.method, t.micro_batch_size, t.grad_accum_steps, t.precision) == (
        "grpo",
        "full",
        16,
        4,
        "bf16-pure",
    )
    assert rl is not None
    assert (rl.num_generations, rl.max_prompt_length, rl.max_completion_length) == (16, 512, 1024)
    assert (rl.generation, rl.vllm_gpu_memory_utilization) == ("vllm-server", 0.7)
    assert im.plan.strategy.gradient_checkpointing == "full"
    assert {"reward_funcs", "dataset_name", "system_prompt"} <= set(ignored(im))
    every_key_accounted(im, _yaml(DATA / "openr1_qwen2.5_1.5b_grpo_config_demo.yaml"))
    assert estimate(im.plan).rl is not None


def test_alignment_handbook_dpo_qlora_recipe() -> None:
    """The zephyr-7b DPO QLoRA recipe: 4 pairs per GPU, accumulation 4, max_length 1024, beta 0.01, a 4-bit base
    with rank-128 adapters on every projection; no precompute: the reference is the adapter-disabled base."""
    path = DATA / "alignment_handbook_zephyr_7b_dpo_qlora.yaml"
    im = import_config(path, default_plan(), model="mistral-7b")
    t, rl = im.plan.training, im.plan.rl
    assert im.format == "trl"
    assert (t.objective, t.method, t.quantization, t.lora_rank) == ("dpo", "qlora", "nf4", 128)
    assert (t.micro_batch_size, t.grad_accum_steps, t.optimizer) == (4, 4, "paged-adamw")
    assert rl is not None and (rl.max_length, rl.beta, rl.reference) == (1024, 0.01, None)
    assert "max_prompt_length" in ignored(im)
    every_key_accounted(im, _yaml(path))
    est = estimate(im.plan)
    assert est.rl is not None and est.rl.objective == "dpo"


def test_verl_ppo_config() -> None:
    """verl's split-placement PPO config: GAE (a critic), 512 + 512 tokens, FSDP with checkpointing, no KL term
    (no reference), vLLM colocated at 0.5 with TP 2 and its cache freed for the update, 8 GPUs."""
    path = DATA / "verl_ppo_trainer_split.yaml"
    im = import_config(path, default_plan(), model="mistral-7b")
    p, rl = im.plan, im.plan.rl
    assert im.format == "verl"
    assert (p.training.objective, p.strategy.zero_stage, p.training.precision) == ("ppo", 3, "bf16-fsdp")
    assert rl is not None
    assert (rl.max_prompt_length, rl.max_completion_length, rl.reference, rl.beta) == (512, 512, "none", 0.0)
    assert (rl.generation, rl.vllm_gpu_memory_utilization, rl.vllm_tensor_parallel_size) == ("vllm-colocate", 0.5, 2)
    assert rl.vllm_enable_sleep_mode is True
    assert (p.hardware.gpus_per_node, p.strategy.gradient_checkpointing) == (8, "full")
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in ignored(im)  # null: verl decides
    every_key_accounted(im, _yaml(path))


def test_verl_grpo_with_kl_loss_and_offloaded_reference(tmp_path: Path) -> None:
    """GRPO in verl: adv_estimator grpo, rollout.n = num_generations, use_kl_loss -> beta = kl_loss_coef and a
    reference sharded like the actor; ``${...}`` references are followed."""
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text(
        "data: {max_prompt_length: 256, max_response_length: 1024}\n"
        "actor_rollout_ref:\n"
        "  model: {path: x, lora_rank: 32, enable_gradient_checkpointing: true}\n"
        "  actor: {ppo_micro_batch_size_per_gpu: 4, use_kl_loss: true, kl_loss_coef: 0.002, strategy: fsdp2}\n"
        "  ref: {fsdp_config: {param_offload: true}}\n"
        "  rollout: {name: vllm, n: 8, gpu_memory_utilization: 0.6, tensor_model_parallel_size: 1,\n"
        "            response_length: '${data.max_response_length}'}\n"
        "algorithm: {adv_estimator: grpo}\n"
        "trainer: {n_gpus_per_node: 4, nnodes: 1}\n"
    )
    im = import_config(cfg, default_plan(), model="mistral-7b")
    p, rl = im.plan, im.plan.rl
    assert rl is not None
    assert (p.training.objective, p.training.method, p.training.lora_rank, p.training.micro_batch_size) == (
        "grpo",
        "lora",
        32,
        4,
    )
    assert (rl.num_generations, rl.beta, rl.frozen_offload, rl.frozen_sharding) == (8, 0.002, "cpu", "sharded")
    assert ignored(im)["actor_rollout_ref.rollout.response_length"]  # followed, then named as not planned


def test_grpo_without_vllm_generates_in_the_training_process(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text("model_name_or_path: x\nnum_generations: 4\nmax_completion_length: 256\nbeta: 0.04\n")
    im = import_config(cfg, default_plan())
    rl = im.plan.rl
    assert rl is not None and (rl.generation, rl.beta, rl.num_generations) == ("hf", 0.04, 4)
    assert im.plan.training.precision == "bf16-autocast"  # TRL's bf16 default over fp32 weights (full)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_name_or_path: x\nnum_generations: 1\n", "num_generations"),
        ("actor_rollout_ref: {rollout: {n: 0}}\nalgorithm: {adv_estimator: grpo}\n", "rollout.n"),
        ("model_name_or_path: x\nuse_vllm: true\nvllm_gpu_memory_utilization: 7\n", "vllm_gpu_memory_utilization"),
    ],
)
def test_impossible_rl_settings_are_one_plan_error_or_named(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    try:
        im = import_config(cfg, default_plan())
    except PlanError as exc:
        assert "\n" not in exc.line()
        return
    assert any(message in i.key for i in im.ignored) or any(message in r.key for r in im.reads)


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["auto", "server", "colocate", "hf", "vllm", "grpo", "gae", "fsdp", "true", "${data.x}", "",
                     "bfloat16", "q_proj"]),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["n", "name", "gpu_memory_utilization", "actor", "rollout", "ref", "use_kl_loss", "x"]), inner,
    max_size=3), max_leaves=6)  # fmt: skip
KNOWN = [
    "model_name_or_path", "num_generations", "max_completion_length", "max_prompt_length", "beta", "use_vllm",
    "vllm_mode", "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "use_peft", "lora_r", "load_in_4bit",
    "precompute_ref_log_probs", "max_length", "torch_dtype", "bf16", "per_device_train_batch_size",
    "actor_rollout_ref", "algorithm", "data", "trainer", "critic",
]  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(data=st.dictionaries(st.sampled_from(KNOWN), VALUES, min_size=1, max_size=8))
def test_any_rl_config_imports_or_is_one_plan_error_and_every_key_is_named(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.json"
        path.write_text(json.dumps(data))
        try:
            im = import_config(path, default_plan())
        except PlanError as exc:
            assert "\n" not in exc.line()
            return
        every_key_accounted(im, data)
        json.dumps(im.to_json(), allow_nan=False)


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_dpo_padding_free_is_read(tmp_path: Path) -> None:
    """DPOConfig ``padding_free: true`` flattens the batch: no padded mask reaches SDPA (``rl.padding_free``)."""
    path = tmp_path / "dpo.yaml"
    path.write_text("model_name_or_path: m\nbeta: 0.1\nprecompute_ref_log_probs: false\npadding_free: true\n")
    im = import_config(path, default_plan(), model="mistral-7b")
    assert im.plan.training.objective == "dpo"
    assert im.plan.rl is not None and im.plan.rl.padding_free is True
