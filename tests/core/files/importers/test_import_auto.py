"""Issue 40.1-2: an import reads "auto" the way the tool that reads the file does (the HF Trainer fills a DeepSpeed
config's "auto" from TrainingArguments: transformers integrations/deepspeed.py trainer_config_process), says what
each became, and states the defaults it assumes (a TRL, axolotl or LLaMA-Factory config without DeepSpeed or FSDP
runs DDP); one summary line, the full list with -v."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA
from vramplan.core.files.importers.apply import Imported, import_config
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import default_plan

TEMPLATE = DATA / "import" / "hf_ds_config_zero2.json"  # transformers tests/deepspeed/ds_config_zero2.json
MISTRAL_ON_4_A100 = {"model": "mistral-7b", "gpu": "a100-80gb", "sets": ["hardware.gpus_per_node=4"]}


def autos(im: Imported) -> dict[str, tuple[str, object, str]]:
    return {r.key: (r.plan_key, r.plan_value, r.note) for r in im.reads if r.value == "auto"}


def test_the_hf_zero2_template_gives_bf16_model_states_as_enabled_true_does(tmp_path: Path) -> None:
    """Done when: the HF ZeRO-2 template ("auto" precision, CPU optimizer offload) gives Mistral-7B on 4 x A100 the
    bf16 model states of ``"bf16": {"enabled": true}``. Before: bf16 autocast over fp32 weights, 43.9 GiB per GPU;
    with bf16-master: 7.24e9 x 2 B of bf16 weights = 13.5 GiB of parameters (gradients and the fp32 master and
    AdamW state sharded to the host), 16.6 GiB at the peak."""
    im = import_config(TEMPLATE, default_plan(), **MISTRAL_ON_4_A100)  # type: ignore[arg-type]
    assert im.plan.training.precision == "bf16-master"
    s = im.plan.strategy
    assert (s.zero_stage, s.offload_optimizer, s.offload_parameters) == (2, "cpu", "none")
    data = json.loads(TEMPLATE.read_text())
    data["bf16"]["enabled"], data["fp16"]["enabled"] = True, False
    explicit = tmp_path / "true.json"
    explicit.write_text(json.dumps(data))
    on = import_config(explicit, default_plan(), **MISTRAL_ON_4_A100)  # type: ignore[arg-type]
    assert on.plan.training.precision == "bf16-master"
    est, est_on = estimate(im.plan), estimate(on.plan)
    assert est.total == est_on.total
    assert est.components["parameters"].bytes == 7_241_732_096 * 2  # bf16 weights, not fp32
    assert 15 * GiB < est.total < 18 * GiB  # 16.6 GiB (43.9 GiB when "auto" was read as "keep the plan's")
    plan_key, value, note = autos(im)["fp16.enabled + bf16.enabled"]
    assert (plan_key, value) == ("training.precision", "bf16-master")
    assert note.startswith('"auto": the HF Trainer\'s --bf16 (the plan computes in bf16): fp16.enabled false, '
                           "bf16.enabled true")  # fmt: skip
    assert '"auto" read as the HF Trainer fills it: fp16.enabled + bf16.enabled -> training.precision=bf16-master' in (
        im.summary()
    )


@pytest.mark.parametrize(
    ("precision", "regime"),
    [("fp16-autocast", "fp16-master"), ("bf16-pure", "bf16-master"), ("fp32", "fp32")],
)
def test_auto_precision_follows_the_trainers_flags_the_plan_stands_for(precision: str, regime: str) -> None:
    """--fp16 fills fp16.enabled true (fp16 weights, fp32 master); neither flag leaves both off: DeepSpeed's fp32."""
    im = import_config(TEMPLATE, default_plan().with_changes({"training.precision": precision}), model="mistral-7b")
    assert im.plan.training.precision == regime


def test_the_command_line_wins_over_an_auto(tmp_path: Path) -> None:
    im = import_config(TEMPLATE, default_plan(), sets=["training.precision=bf16-autocast"])
    assert im.plan.training.precision == "bf16-autocast"
    assert "training.precision" in im.overridden
    assert "the command line wins for training.precision" in im.summary()


def test_every_auto_of_the_template_is_read_or_said_with_what_the_trainer_fills_it_with() -> None:
    im = import_config(TEMPLATE, default_plan(), **MISTRAL_ON_4_A100)  # type: ignore[arg-type]
    t = im.plan.training
    read = autos(im)
    assert read["train_micro_batch_size_per_gpu"][:2] == ("training.micro_batch_size", t.micro_batch_size)
    assert read["gradient_accumulation_steps"][:2] == ("training.grad_accum_steps", t.grad_accum_steps)
    assert read["train_batch_size"][2].endswith(f"= 4 x {t.micro_batch_size} x {t.grad_accum_steps} = 4")
    assert read["gradient_clipping"][0] == "training.grad_clip" and "max_grad_norm" in read["gradient_clipping"][2]
    assert read["optimizer.params.lr"][0] == "training.learning_rate"
    ignored = {i.key: i.why for i in im.ignored if i.value == "auto"}
    assert ignored["optimizer.params.eps"].startswith('"auto": the HF Trainer fills it with adam_epsilon; ')
    assert not set(read) & {i.key for i in im.ignored}


def test_an_auto_bucket_is_hidden_size_squared(tmp_path: Path) -> None:
    """trainer_config_finalize: reduce_bucket_size "auto" = hidden_size x hidden_size (4,096^2 for Mistral-7B),
    the plan's own default: a plan file's other value is unset."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}))
    base = default_plan().with_changes({"overhead.zero_bucket_elements": 5 * 10**8})
    im = import_config(path, base, model="mistral-7b")
    assert im.plan.overhead.zero_bucket_elements is None
    assert autos(im)["zero_optimization.reduce_bucket_size"][2].endswith("= 4,096 x 4,096 = 16,777,216 elements")


def test_accelerates_deepspeed_defaults_and_autos(tmp_path: Path) -> None:
    """accelerate's DeepSpeedPlugin: ZeRO-2 when zero_stage is absent; gradient_accumulation_steps "auto" is the
    Accelerator's (the plan's)."""
    path = tmp_path / "acc.yaml"
    path.write_text("distributed_type: DEEPSPEED\nnum_processes: 4\ndeepspeed_config:\n"
                    "  gradient_accumulation_steps: auto\n  gradient_clipping: auto\n")  # fmt: skip
    im = import_config(path, default_plan().with_changes({"training.grad_accum_steps": 8}))
    assert im.plan.strategy.zero_stage == 2 and im.plan.training.grad_accum_steps == 8
    (zero,) = [r for r in im.reads if r.plan_key == "strategy.zero_stage"]
    assert zero.key == "(no deepspeed_config.zero_stage)" and "DeepSpeedPlugin's default" in zero.note
    assert set(autos(im)) == {"deepspeed_config.gradient_accumulation_steps", "deepspeed_config.gradient_clipping"}


GRPO = """model_name_or_path: Qwen/Qwen2.5-7B-Instruct
torch_dtype: bfloat16
bf16: true
use_vllm: true
vllm_mode: colocate
per_device_train_batch_size: 8
num_generations: 8
max_prompt_length: 512
max_completion_length: 1024
"""


def test_a_trl_config_without_deepspeed_or_fsdp_is_ddp_and_says_so(tmp_path: Path) -> None:
    """Issue 40.2: plain `accelerate launch` is DDP: the default plan's ZeRO-3 is not kept; vllm_mode is read, and
    not also named as ignored."""
    path = tmp_path / "grpo.yaml"
    path.write_text(GRPO)
    im = import_config(path, default_plan())
    s = im.plan.strategy
    assert (s.zero_stage, s.offload_optimizer, s.offload_parameters) == (0, "none", "none")
    assert "vllm_mode" not in {i.key for i in im.ignored}
    assert any("vllm_mode" in r.key.split(" + ") for r in im.reads)
    assert "no sharding (assumed: DDP under accelerate launch without a DeepSpeed or FSDP config" in im.summary()
    with_ds = tmp_path / "grpo_ds.yaml"
    with_ds.write_text(GRPO + "deepspeed: zero3.json\n")
    kept = import_config(with_ds, default_plan())
    assert kept.plan.strategy.zero_stage == default_plan().strategy.zero_stage
    assert "sharding ZeRO-3: the plan's (the file does not say)" in kept.summary()


@pytest.mark.parametrize(
    "text",
    [
        "base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: 2\nsequence_len: 2048\nbf16: true\n",
        "model_name_or_path: meta-llama/Llama-2-7b-hf\nfinetuning_type: lora\nper_device_train_batch_size: 2\n"
        "cutoff_len: 2048\nbf16: true\n",
    ],
)
def test_axolotl_and_llamafactory_without_deepspeed_or_fsdp_are_ddp(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    im = import_config(path, default_plan())
    assert im.plan.strategy.zero_stage == 0
    (read,) = [r for r in im.reads if r.plan_key == "strategy.zero_stage"]
    assert read.key == "(no deepspeed or fsdp)" and read.note.startswith("DDP under ")
