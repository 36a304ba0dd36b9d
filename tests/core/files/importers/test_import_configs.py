"""Config import (issue 17.1): DeepSpeed, accelerate, torchtune, axolotl and LLaMA-Factory configs read into a plan,
every setting read or named as ignored; unsafe files refused with one line; vramplan's DeepSpeed export imports back
to the same training and strategy keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import DATA as TEST_DATA
from vramplan.core.files.deepspeed_export import deepspeed_config
from vramplan.core.files.importers.apply import Imported, import_config
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict

DATA = TEST_DATA / "import"


def ignored(im: Imported) -> dict[str, str]:
    return {i.key: i.why for i in im.ignored}


def read_keys(im: Imported) -> dict[str, Any]:
    return {r.plan_key: r.plan_value for r in im.reads}


def every_key_accounted(im: Imported, data: dict[str, Any]) -> None:
    """Each top-level key of the file is read or named as ignored (possibly through its sub-keys)."""
    named = [r.key for r in im.reads] + [i.key for i in im.ignored]
    for key in data:
        assert any(n == key or n.startswith(f"{key}.") or n.startswith(f"(no {key}") for n in named), key


def test_the_seeds_deepspeed_config_on_4_a100s() -> None:
    """Done when: 13B on 4 x A100-80GB, train_batch_size 32, accumulation 4, fp16, ZeRO-3 with optimizer offload to
    CPU, partitioned activation checkpointing -> micro 2, accumulation 4, fp16-master, ZeRO-3, offload cpu, full
    checkpointing, and the fit verdict."""
    im = import_config(
        DATA / "seed_13b_zero3.json",
        default_plan(),
        model="llama-2-13b",
        gpu="a100-80gb",
        sets=["hardware.gpus_per_node=4"],
    )
    t, s = im.plan.training, im.plan.strategy
    assert im.format == "deepspeed"
    assert (t.micro_batch_size, t.grad_accum_steps, t.precision) == (2, 4, "fp16-master")
    assert (s.zero_stage, s.offload_optimizer, s.offload_parameters, s.gradient_checkpointing) == (
        3,
        "cpu",
        "none",
        "full",
    )
    assert (im.plan.model.preset, im.plan.hardware.gpu, im.plan.hardware.total_gpus) == ("llama-2-13b", "a100-80gb", 4)
    assert t.learning_rate == 6e-5 and t.optimizer == "adamw"
    est = estimate(im.plan)
    assert est.fits and est.total < 80 * 2**30  # "this configuration trains 13B on 4 A100 80GB" (the seed)
    lines = im.lines()
    batch = "train_batch_size=32 -> training.micro_batch_size=2 (32 / (accumulation 4 x 4 data-parallel GPUs))"
    assert f"read from seed_13b_zero3.json: {batch}" in lines
    ckpt = "activation_checkpointing.partition_activations=true -> strategy.gradient_checkpointing=full"
    assert any(line.startswith(f"read from seed_13b_zero3.json: {ckpt}") for line in lines)
    assert set(ignored(im)) == {"fp16.loss_scale_window", "activation_checkpointing.contiguous_memory_optimization"}
    every_key_accounted(im, json.loads((DATA / "seed_13b_zero3.json").read_text()))


def test_a_total_batch_resolves_against_the_gpu_count_or_says_it_does_not(tmp_path: Path) -> None:
    base = plan_from_dict({"model": {"preset": "llama-2-7b"}, "hardware": {"gpus_per_node": 8}})
    on8 = import_config(DATA / "seed_13b_zero3.json", base)
    assert (on8.plan.training.micro_batch_size, on8.plan.training.grad_accum_steps) == (1, 4)
    with pytest.raises(PlanError, match=r"train_batch_size 32 is not a multiple of accumulation 4 x 16 data-parallel"):
        import_config(DATA / "seed_13b_zero3.json", base, sets=["hardware.gpus_per_node=16"])
    cfg = tmp_path / "ds.json"
    cfg.write_text(
        json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})
    )
    assert import_config(cfg, base).plan.training.micro_batch_size == 2  # 2 x 4 x 8 = 64
    with pytest.raises(
        PlanError, match=r"train_batch_size 64 != micro-batch 2 x accumulation 4 x 4 data-parallel GPUs"
    ):
        import_config(cfg, base, sets=["hardware.gpus_per_node=4"])
    cfg.write_text(
        json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}})
    )
    im = import_config(cfg, base)
    assert im.plan.training == base.training  # "auto": HF Trainer's, the plan's values kept
    assert set(ignored(im)) >= {"train_batch_size", "train_micro_batch_size_per_gpu", "bf16.enabled"}


def test_the_command_line_wins_over_the_file() -> None:
    im = import_config(
        DATA / "seed_13b_zero3.json",
        default_plan(),
        model="llama-2-13b",
        sets=["hardware.gpus_per_node=4", "strategy.offload_optimizer=none", "training.micro_batch_size=1"],
    )
    assert im.plan.strategy.offload_optimizer == "none" and im.plan.training.micro_batch_size == 1
    assert "strategy.offload_optimizer" in im.overridden
    assert "seed_13b_zero3.json: command line wins over the file for strategy.offload_optimizer" in im.lines()


PLANS = [
    {},
    {"training": {"precision": "bf16-master", "micro_batch_size": 4, "grad_accum_steps": 2, "grad_clip": 1.0}},
    {"strategy": {"zero_stage": 2, "offload_optimizer": "cpu", "gradient_checkpointing": "none"},
     "training": {"precision": "fp16-master", "loss_scaling": "static"}},
    {"strategy": {"zero_stage": 3, "offload_optimizer": "nvme", "offload_parameters": "nvme"},
     "training": {"precision": "bf16-master", "optimizer": "lion"}},
    {"strategy": {"zero_stage": 1}, "training": {"precision": "bf16-autocast", "optimizer_impl": "for-loop"}},
    {"strategy": {"zero_stage": 0}, "training": {"precision": "fp32", "optimizer": "sgd-momentum"},
     "hardware": {"gpus_per_node": 2}},
    {"strategy": {"zero_stage": 2, "tensor_parallel": 2},
     "training": {"precision": "bf16-pure", "micro_batch_size": 2}},
]  # fmt: skip
ROUND_TRIP_KEYS = {
    "training": ("micro_batch_size", "grad_accum_steps", "precision", "optimizer", "optimizer_impl", "grad_clip",
                 "loss_scaling", "learning_rate"),
    "strategy": ("zero_stage", "offload_optimizer", "offload_parameters", "gradient_checkpointing", "tensor_parallel"),
}  # fmt: skip


def keys_of(plan: Plan) -> dict[str, Any]:
    """The keys a DeepSpeed config carries; the precision as the regime in effect (unset = bf16-autocast)."""
    dumped = plan.dump()
    out = {f"{t}.{k}": dumped[t].get(k) for t, keys in ROUND_TRIP_KEYS.items() for k in keys}
    return out | {"training.precision": plan.training.regime}


@pytest.mark.parametrize("changes", PLANS)
def test_vramplans_deepspeed_export_imports_back_to_the_same_keys(changes: dict[str, Any], tmp_path: Path) -> None:
    data: dict[str, Any] = {"model": {"preset": "llama-2-7b"}, "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8}}
    data["training"] = {
        "micro_batch_size": 2,
        "grad_accum_steps": 8,
        "learning_rate": 2e-5,
        **changes.get("training", {}),
    }
    data["strategy"] = {"zero_stage": 3, "gradient_checkpointing": "full", **changes.get("strategy", {})}
    data["hardware"] |= changes.get("hardware", {})
    plan = plan_from_dict(data)
    export = deepspeed_config(plan)
    assert not export.not_expressed, export.not_expressed
    path = tmp_path / "ds.json"
    path.write_text(export.text())
    # a base plan that differs in every key the config carries: the values must come from the file
    base = plan_from_dict(
        {
            "model": {"preset": "llama-2-7b"},
            "hardware": {"gpu": "h100-80gb", "gpus_per_node": plan.hardware.gpus_per_node},
            "training": {"micro_batch_size": 7, "grad_accum_steps": 3, "precision": "fp16-autocast", "grad_clip": 9.0,
                         "optimizer": "adafactor", "loss_scaling": "none", "learning_rate": 1.0},
            "strategy": {"zero_stage": 3, "offload_optimizer": "cpu", "offload_parameters": "cpu",
                         "gradient_checkpointing": "none" if plan.strategy.gradient_checkpointing != "none"
                         else "selective"},
        }
    )  # fmt: skip
    im = import_config(path, base)
    expected = keys_of(plan)
    got = keys_of(im.plan)
    if plan.strategy.gradient_checkpointing == "none":  # no activation_checkpointing table: the plan's is kept
        expected["strategy.gradient_checkpointing"] = base.strategy.gradient_checkpointing
    if plan.training.regime != "fp16-master":  # loss scaling is written only for fp16
        expected["training.loss_scaling"] = base.training.loss_scaling
    if plan.training.grad_clip is None:
        expected["training.grad_clip"] = base.training.grad_clip
    assert got == expected
    assert not [i for i in im.ignored if not i.key.startswith(("_vramplan", "zero_optimization.", "optimizer.params",
                                                                 "zero_", "activation_checkpointing.", "fp16.",
                                                                 "bf16.", "torch_autocast."))]  # fmt: skip


def test_torchtune_recipe_from_torchtunes_examples() -> None:
    path = DATA / "torchtune_llama2_7B_qlora_single_device.yaml"
    im = import_config(path, default_plan(), sets=["hardware.gpus_per_node=1"])  # tune run ... (one GPU)
    p, t, s = im.plan, im.plan.training, im.plan.strategy
    assert im.format == "torchtune"
    assert (p.model.preset, t.method, t.quantization, t.quantized_modules, t.lora_rank) == (
        "llama-2-7b",
        "qlora",
        "nf4",
        "adapted",
        8,
    )
    assert set(t.lora_targets) == {"q", "k", "v", "o", "gate", "up", "down"}
    assert (t.precision, t.micro_batch_size, t.grad_accum_steps, t.optimizer, t.optimizer_impl) == (
        "bf16-pure",
        2,
        16,
        "adamw",
        "fused",
    )
    assert (s.gradient_checkpointing, s.activation_offload, s.compile, s.loss_chunks, s.zero_stage) == (
        "full",
        "none",
        False,
        8,
        0,
    )
    one = "(no fsdp_* keys) -> strategy.zero_stage=0 (1 GPU(s): a single-device recipe)"
    assert f"read from torchtune_llama2_7B_qlora_single_device.yaml: {one}" in im.lines()
    on4 = import_config(path, default_plan(), sets=["hardware.gpus_per_node=4"])  # tune run --nproc_per_node 4 ...
    assert on4.plan.strategy.zero_stage == 3 and on4.plan.hardware.total_gpus == 4  # FSDP2 fully_shard
    named = ignored(im)
    for key in ("model.lora_alpha", "tokenizer.max_seq_len", "tokenizer.path", "checkpointer", "dataset", "seed",
                "shuffle", "lr_scheduler", "epochs", "max_steps_per_epoch", "output_dir", "metric_logger",
                "log_every_n_steps", "log_peak_memory_stats", "device", "profiler", "low_cpu_ram",
                "optimizer.weight_decay", "resume_from_checkpoint", "save_adapter_weights_only"):  # fmt: skip
        assert key in named, key
    import yaml

    every_key_accounted(im, yaml.safe_load((DATA / "torchtune_llama2_7B_qlora_single_device.yaml").read_text()))


def test_torchtune_low_memory_recipe_paged_optimizer_in_backward_and_offloading() -> None:
    im = import_config(
        DATA / "torchtune_llama2_7B_full_low_memory.yaml", default_plan(), sets=["hardware.gpus_per_node=1"]
    )
    t, s = im.plan.training, im.plan.strategy
    assert (im.plan.model.preset, t.method, t.precision, t.optimizer) == (
        "llama-2-7b",
        "full",
        "bf16-pure",
        "paged-adamw",
    )
    assert (s.optimizer_in_backward, s.activation_offload, s.gradient_checkpointing, s.zero_stage) == (
        True,
        "cpu",
        "full",
        0,
    )
    assert {"dataset", "epochs", "lr_scheduler", "checkpointer", "metric_logger", "device"} <= set(ignored(im))


def test_accelerate_fsdp_config_from_accelerates_examples() -> None:
    im = import_config(DATA / "accelerate_fsdp.yaml", default_plan())
    p, s = im.plan, im.plan.strategy
    assert im.format == "accelerate"
    assert (p.hardware.gpus_per_node, p.hardware.nodes) == (2, 1)
    assert (s.zero_stage, s.offload_optimizer, s.offload_parameters, s.gradient_checkpointing) == (
        3,
        "none",
        "none",
        "none",
    )
    assert p.training.precision == "bf16-fsdp"
    assert set(ignored(im)) == {
        f"fsdp_config.fsdp_{k}"
        for k in ("auto_wrap_policy", "backward_prefetch", "cpu_ram_efficient_loading", "forward_prefetch",
                  "state_dict_type", "sync_module_states", "use_orig_params")
    }  # fmt: skip


def test_axolotl_config_from_axolotls_examples() -> None:
    im = import_config(DATA / "axolotl_llama2_qlora_fsdp.yml", default_plan())
    p, t, s = im.plan, im.plan.training, im.plan.strategy
    assert im.format == "axolotl"
    assert (p.model.preset, t.method, t.quantization, t.lora_rank, t.lora_targets) == (
        "llama-2-7b",
        "qlora",
        "nf4",
        32,
        ("all-linear",),
    )
    assert (t.micro_batch_size, t.grad_accum_steps, t.seq_len, t.optimizer_impl) == (4, 4, 512, "fused")
    assert (s.zero_stage, s.offload_optimizer, s.offload_parameters, s.gradient_checkpointing, s.attention) == (
        3,
        "cpu",
        "cpu",
        "full",
        "flash",
    )
    # gradient_checkpointing_kwargs: {use_reentrant: true} is read, and the file names its framework
    assert (s.checkpoint_impl, p.stack.framework) == ("reentrant", "axolotl")
    assert "strategy.checkpoint_impl" not in p.stack_chosen and "stack.framework" in read_keys(im)
    named = ignored(im)
    for key in ("lora_alpha", "lora_model_dir", "load_in_8bit", "tf32", "model_type",
                "tokenizer_type", "sample_packing", "pad_to_sequence_len", "datasets", "dataset_prepared_path",
                "val_set_size", "output_dir", "wandb_project", "num_epochs", "lr_scheduler", "warmup_steps",
                "weight_decay", "special_tokens", "fsdp_config.fsdp_limit_all_gathers",
                "fsdp_config.fsdp_transformer_layer_cls_to_wrap", "fsdp_config.fsdp_state_dict_type"):  # fmt: skip
        assert key in named, key
    import yaml

    every_key_accounted(im, yaml.safe_load((DATA / "axolotl_llama2_qlora_fsdp.yml").read_text()))


def test_an_axolotl_deepspeed_path_is_named_as_not_followed(tmp_path: Path) -> None:
    cfg = tmp_path / "axolotl.yml"
    cfg.write_text("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 2\nsequence_len: 4096\nbf16: true\n"
                   "deepspeed: deepspeed_configs/zero3_bf16.json\n")  # fmt: skip
    im = import_config(cfg, default_plan())
    why = ignored(im)["deepspeed"]
    assert why.startswith("NOT FOLLOWED: import deepspeed_configs/zero3_bf16.json with --from")
    assert im.plan.training.precision == "bf16-master"  # HF Trainer + DeepSpeed bf16
    assert im.plan.model.preset == "llama-3.1-8b" and im.plan.training.seq_len == 4096


def test_llamafactory_config_from_llamafactorys_examples() -> None:
    im = import_config(DATA / "llamafactory_llama3_lora_sft_otfq.yaml", default_plan())
    p, t = im.plan, im.plan.training
    assert im.format == "llamafactory"
    assert (p.model.preset, t.method, t.quantization, t.lora_targets) == ("llama-3-8b", "qlora", "nf4", ("all-linear",))
    assert (t.micro_batch_size, t.grad_accum_steps, t.seq_len, t.precision) == (1, 8, 2048, "bf16-pure")
    assert p.strategy.gradient_checkpointing == "full"  # LLaMA-Factory's default
    assert {"template", "dataset", "num_train_epochs", "eval_steps"} <= set(ignored(im))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
            "alias bomb",
        ),
        ("a: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 32 levels"),
        ("{" + '"a": {' * 50 + "}" * 51, "nested deeper than 32 levels"),
        ("model: !!python/object/apply:os.system ['echo hi']\n", "not valid YAML"),
        ("just a string\n", "not a training config"),
        ("epochs: 3\nseed: 1\n", "not a config vramplan can import"),
        ("a: [1, 2\n", "not valid YAML"),
        ("---\na: 1\n---\nb: 2\n", "several YAML documents"),
    ],
)
def test_unsafe_or_unknown_files_are_refused_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / ("c.json" if text.startswith("{") else "c.yaml")
    cfg.write_text(text)
    with pytest.raises(PlanError, match=message) as info:
        import_config(cfg, default_plan())
    assert "\n" not in str(info.value) and str(cfg) in str(info.value)


def test_only_regular_files_under_the_size_limit_are_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" + "# padding\n" * 200_000)
    with pytest.raises(PlanError, match="too large"):
        import_config(big, default_plan())
    with pytest.raises(PlanError, match="is a directory"):
        import_config(tmp_path, default_plan())
    with pytest.raises(PlanError, match="no such file"):
        import_config(tmp_path / "missing.json", default_plan())
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(PlanError, match="named pipe"):  # never blocks on a pipe
        import_config(fifo, default_plan())


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["auto", "cpu", "nvme", "none", "bf16", "fp16", "FULL_SHARD", "true", "3", "", "q_proj",
                     "torch.optim.AdamW", "bitsandbytes.optim.PagedAdamW8bit", "qlora", "lora", "full", "FSDP"]),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["enabled", "stage", "device", "_component_", "lora_rank", "fsdp_offload_params", "x"]), inner,
    max_size=3), max_leaves=6)  # fmt: skip
KNOWN = [
    # DeepSpeed
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "fp16", "bf16",
    "torch_autocast", "zero_optimization", "activation_checkpointing", "optimizer", "gradient_clipping",
    "tensor_parallel",
    # accelerate, torchtune, axolotl, LLaMA-Factory
    "distributed_type", "fsdp_config", "deepspeed_config", "mixed_precision", "num_processes", "num_machines",
    "dynamo_config", "model", "dtype", "batch_size", "enable_activation_checkpointing", "optimizer_in_bwd",
    "loss", "fsdp_cpu_offload", "base_model", "adapter", "load_in_4bit", "micro_batch_size", "sequence_len",
    "lora_target_modules", "fsdp", "deepspeed", "attention", "model_name_or_path", "finetuning_type",
    "quantization_bit", "lora_target", "cutoff_len", "flash_attn", "stage", "seed",
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(st.sampled_from(KNOWN), VALUES, min_size=1, max_size=8))
def test_any_config_imports_or_is_one_plan_error_and_every_key_is_named(data: dict[str, Any]) -> None:
    import tempfile

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


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("acc.yaml", "distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 8\ndeepspeed_config:\n"
         "  deepspeed_config_file: ds_z3.json\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
         "  gradient_accumulation_steps: 4\n", "deepspeed_config.deepspeed_config_file"),
        ("lf.yaml", "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: full\n"
         "per_device_train_batch_size: 2\ncutoff_len: 4096\nbf16: true\n"
         "deepspeed: examples/deepspeed/ds_z3_config.json\n",
         "deepspeed"),
    ],
)  # fmt: skip
def test_a_deepspeed_file_named_in_a_config_is_not_followed_but_named(
    tmp_path: Path, name: str, text: str, key: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    im = import_config(path, default_plan())
    assert ignored(im)[key].startswith("NOT FOLLOWED: import ")
    assert f"{name}: ignored {key}=" in "\n".join(im.lines())
    if name == "acc.yaml":  # accelerate's own DeepSpeed keys are read
        p = im.plan
        assert (p.strategy.zero_stage, p.strategy.offload_optimizer, p.training.precision) == (3, "cpu", "bf16-master")
        assert (p.training.grad_accum_steps, p.hardware.total_gpus) == (4, 8)
    else:  # LLaMA-Factory under DeepSpeed: bf16 is DeepSpeed's bf16 with fp32 master weights
        p = im.plan
        assert (p.model.preset, p.training.method, p.training.precision, p.training.seq_len) == (
            "qwen2.5-7b",
            "full",
            "bf16-master",
            4096,
        )
