"""The DeepSpeed export: DeepSpeed's keys and value types, batch arithmetic, and nothing silently dropped.

The key/type table below is transcribed from deepspeedai/DeepSpeed v0.19.6 (deepspeed/runtime/config.py,
constants.py, precision_config.py, zero/config.py, zero/offload_config.py, activation_checkpointing/config.py,
tensor_parallel/config.py). bench/deepspeed/check_configs.py parses the exports with DeepSpeed itself.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from vramplan.core.files.deepspeed_export import deepspeed_config
from vramplan.core.memory.overhead import zero_bucket_elements
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, plan_from_dict
from vramplan.core.plan.schema.training import OPTIMIZERS, PRECISIONS

DS_TYPES: dict[str, type | tuple[type, ...]] = {
    "train_batch_size": int,
    "train_micro_batch_size_per_gpu": int,
    "gradient_accumulation_steps": int,
    "gradient_clipping": float,
    "zero_allow_untested_optimizer": bool,
    "zero_force_ds_cpu_optimizer": bool,
    "optimizer.type": str,
    "optimizer.params": dict,
    "fp16.enabled": bool,
    "fp16.loss_scale": float,
    "fp16.initial_scale_power": int,
    "fp16.loss_scale_window": int,
    "fp16.hysteresis": int,
    "fp16.consecutive_hysteresis": bool,
    "fp16.min_loss_scale": int,
    "bf16.enabled": bool,
    "bf16.bf16_master_weights_and_grads": bool,
    "bf16.bf16_optimizer_states": bool,
    "torch_autocast.enabled": bool,
    "torch_autocast.dtype": str,
    "zero_optimization.stage": int,
    "zero_optimization.overlap_comm": bool,
    "zero_optimization.contiguous_gradients": bool,
    "zero_optimization.reduce_scatter": bool,
    "zero_optimization.reduce_bucket_size": int,
    "zero_optimization.allgather_bucket_size": int,
    "zero_optimization.stage3_prefetch_bucket_size": int,
    "zero_optimization.stage3_param_persistence_threshold": int,
    "zero_optimization.stage3_max_live_parameters": int,
    "zero_optimization.stage3_max_reuse_distance": int,
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": bool,
    "zero_optimization.offload_optimizer.device": str,
    "zero_optimization.offload_optimizer.pin_memory": bool,
    "zero_optimization.offload_optimizer.nvme_path": str,
    "zero_optimization.offload_param.device": str,
    "zero_optimization.offload_param.pin_memory": bool,
    "zero_optimization.offload_param.nvme_path": str,
    "activation_checkpointing.partition_activations": bool,
    "activation_checkpointing.cpu_checkpointing": bool,
    "activation_checkpointing.contiguous_memory_optimization": bool,
    "activation_checkpointing.synchronize_checkpoint_boundary": bool,
    "activation_checkpointing.profile": bool,
    "tensor_parallel.autotp_size": int,
}
OPAQUE = {"optimizer.params"}  # passed to the optimizer's constructor as keyword arguments


def leaves(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in OPAQUE:
            out.update(leaves(v, key + "."))
        else:
            out[key] = v
    return out


def plans() -> list[Plan]:
    out = []
    for precision, zero, offload, optimizer, ckpt, (tp, pp) in itertools.product(
        PRECISIONS,
        range(4),
        [("none", "none"), ("cpu", "none"), ("nvme", "nvme")],
        OPTIMIZERS,
        ["none", "selective", "full"],
        [(1, 1), (2, 1), (1, 2)],
    ):
        raw = {
            "model": {"preset": "llama-7b"},
            "hardware": {"gpus_per_node": 8, "nodes": 2},
            "training": {"micro_batch_size": 3, "grad_accum_steps": 5, "precision": precision, "optimizer": optimizer},
            "strategy": {
                "zero_stage": zero,
                "offload_optimizer": offload[0],
                "offload_parameters": offload[1],
                "gradient_checkpointing": ckpt,
                "tensor_parallel": tp,
                "pipeline_parallel": pp,
            },
        }
        try:
            out.append(plan_from_dict(raw))
        except PlanError:
            continue
    return out


PLANS = plans()


def test_grid_is_broad() -> None:
    assert len(PLANS) > 500
    assert {p.training.precision for p in PLANS} == set(PRECISIONS)


def test_keys_and_value_types_are_deepspeeds() -> None:
    for plan in PLANS:
        cfg = json.loads(deepspeed_config(plan).text())
        vr = cfg.pop("_vramplan")
        assert set(vr) == {"generated_by", "keys_checked_against", "not_expressed", "notes"}
        for key, value in leaves(cfg).items():
            assert key in DS_TYPES, f"{key} is not a DeepSpeed config key we checked"
            expected = DS_TYPES[key]
            assert isinstance(value, expected) and not (expected is not bool and isinstance(value, bool)), (
                key,
                value,
            )


def test_batch_sizes_multiply_over_data_parallel_ranks_only() -> None:
    for plan in PLANS:
        cfg = deepspeed_config(plan).config
        t = plan.training
        dp = 16 // (plan.strategy.tensor_parallel * plan.strategy.pipeline_parallel)
        assert cfg["train_batch_size"] == 3 * 5 * dp == t.micro_batch_size * t.grad_accum_steps * plan.data_parallel
        assert cfg["train_micro_batch_size_per_gpu"] == 3
        assert cfg["gradient_accumulation_steps"] == 5


def test_precision_regimes() -> None:
    def cfg(precision: str, zero: int = 1, scaling: str = "dynamic") -> dict[str, Any]:
        plan = plan_from_dict(
            {
                "model": {"preset": "llama-7b"},
                "training": {"precision": precision, "loss_scaling": scaling},
                "strategy": {"zero_stage": zero},
            }
        )
        return deepspeed_config(plan).config

    assert cfg("bf16-master")["bf16"] == {"enabled": True}
    assert "fp16" not in cfg("bf16-master")
    assert cfg("fp32")["bf16"] == cfg("fp32")["fp16"] == {"enabled": False}
    pure = cfg("bf16-pure")["bf16"]
    assert pure == {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
    assert cfg("bf16-autocast")["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert cfg("bf16-autocast")["bf16"] == {"enabled": False}
    assert cfg("fp16-autocast")["torch_autocast"]["dtype"] == "float16"
    dynamic = cfg("fp16-master")["fp16"]
    assert dynamic["enabled"] is True and dynamic["loss_scale"] == 0.0  # 0 = dynamic (precision_config.py)
    assert dynamic["initial_scale_power"] == 16 and dynamic["min_loss_scale"] == 1
    assert cfg("fp16-master", scaling="static")["fp16"] == {"enabled": True, "loss_scale": 65536.0}
    assert cfg("fp16-master", scaling="none")["fp16"] == {"enabled": True, "loss_scale": 1.0}


def test_zero_buckets_are_the_ones_the_estimate_counts() -> None:
    for plan in PLANS:
        zero = deepspeed_config(plan).config["zero_optimization"]
        assert zero["stage"] == plan.strategy.zero_stage
        if plan.strategy.zero_stage == 0:
            assert set(zero) == {"stage"} | {k for k in zero if k.startswith("offload")}
            continue
        est = estimate(plan)
        bucket = zero["reduce_bucket_size"]
        assert bucket == zero_bucket_elements(plan) == 4096**2  # hidden_size^2, HF's "auto"
        buffers = 2 if zero["overlap_comm"] else 1
        assert (buffers == 2) == (plan.strategy.zero_stage == 3)
        grad_bytes = 2 if plan.training.precision.endswith(("-master", "-pure")) else 4
        assert est.overhead_bytes["zero_buckets"] == buffers * bucket * grad_bytes


def test_offload_devices() -> None:
    for plan in PLANS:
        zero = deepspeed_config(plan).config["zero_optimization"]
        s = plan.strategy
        assert zero.get("offload_optimizer", {}).get("device", "none") == s.offload_optimizer
        assert zero.get("offload_param", {}).get("device", "none") == s.offload_parameters
        if "nvme" in (s.offload_optimizer, s.offload_parameters):
            assert any("nvme_path" in n for n in deepspeed_config(plan).notes)


CANNOT = {
    "pipeline": ({"strategy": {"pipeline_parallel": 2}}, "strategy.pipeline_parallel = 2"),
    "sequence_parallel": (
        {"strategy": {"tensor_parallel": 2, "sequence_parallel": True}},
        "strategy.sequence_parallel = true",
    ),
    "selective": ({"strategy": {"gradient_checkpointing": "selective"}}, "strategy.gradient_checkpointing = selective"),
    "int8_activations": ({"strategy": {"activation_compression": "int8"}}, "strategy.activation_compression = int8"),
    "adamw_8bit": ({"training": {"optimizer": "adamw-8bit"}}, "training.optimizer = adamw-8bit"),
    "bf16_pure_without_zero": ({"training": {"precision": "bf16-pure"}}, "precision = bf16-pure without ZeRO"),
    "fp16_autocast_static": (
        {"training": {"precision": "fp16-autocast", "loss_scaling": "static"}},
        "training.loss_scaling = static",
    ),
}


@pytest.mark.parametrize("name", sorted(CANNOT))
def test_what_deepspeed_cannot_express_is_said(name: str) -> None:
    changes, key = CANNOT[name]
    raw: dict[str, Any] = {"model": {"preset": "llama-7b"}, **changes}
    ds = deepspeed_config(plan_from_dict(raw))
    assert [x for x in ds.not_expressed if x.startswith(key)], ds.not_expressed
    assert ds.config["_vramplan"]["not_expressed"] == list(ds.not_expressed)
    warning = ds.warning()
    assert warning is not None and key in warning and "\n" not in warning


def test_a_plain_plan_is_fully_expressed() -> None:
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-7b"},
            "training": {"precision": "bf16-master", "grad_clip": 1.0, "learning_rate": 2e-5},
            "strategy": {"zero_stage": 2, "gradient_checkpointing": "full", "tensor_parallel": 2},
        }
    )
    ds = deepspeed_config(plan)
    assert ds.not_expressed == () and ds.warning() is None
    assert ds.config["tensor_parallel"] == {"autotp_size": 2}
    assert ds.config["gradient_clipping"] == 1.0
    # fused: DeepSpeed's FusedAdam; weight decay from the trainer (the plan has none)
    assert ds.config["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-5, "weight_decay": "auto"}}
    assert ds.config["activation_checkpointing"]["partition_activations"] is False


def test_optimizers() -> None:
    def opt(name: str, impl: str = "auto", zero: int = 1, offload: str = "none") -> dict[str, Any]:
        raw = {
            "model": {"preset": "llama-7b"},
            "training": {"optimizer": name, "optimizer_impl": impl},
            "strategy": {"zero_stage": zero, "offload_optimizer": offload},
        }
        return deepspeed_config(plan_from_dict(raw)).config

    auto = {"lr": "auto", "weight_decay": "auto"}  # HF Trainer fills them
    assert opt("adamw")["optimizer"]["params"] == {**auto, "torch_adam": True}  # autocast: torch's foreach AdamW
    assert opt("adamw", "for-loop")["optimizer"]["params"] == {**auto, "torch_adam": True, "foreach": False}
    assert opt("adamw", offload="cpu")["optimizer"]["params"] == auto  # DeepSpeedCPUAdam
    assert opt("lion")["optimizer"]["type"] == "Lion"
    sgd = opt("sgd-momentum")
    assert sgd["optimizer"]["type"] == "SGD" and sgd["optimizer"]["params"]["momentum"] == 0.9
    assert sgd["zero_allow_untested_optimizer"] is True
    assert "zero_allow_untested_optimizer" not in opt("sgd", zero=0)
    assert opt("adafactor", offload="cpu")["zero_force_ds_cpu_optimizer"] is False
    assert "optimizer" not in opt("adamw-8bit")


def test_handed_over_as_one_would_write_it() -> None:
    """Issue 16.17: no gradient_clipping 0.0 (clipping off) when the plan sets none; lr/weight_decay "auto" for
    HF; ZeRO-3 saves a 16-bit model; QLoRA + ZeRO-3 names bnb_4bit_quant_storage; ZeRO-3 + AutoTP is said to be
    unsupported (AutoTP training takes ZeRO 0-2)."""
    qlora = plan_from_dict(
        {"model": {"preset": "llama-7b"}, "training": {"method": "qlora"}, "strategy": {"zero_stage": 3}}
    )
    ds = deepspeed_config(qlora)
    assert "gradient_clipping" not in ds.config
    assert any("no gradient_clipping" in n and "1.0 since v0.19.3" in n for n in ds.notes)
    assert (
        ds.config["optimizer"]["params"]["lr"] == "auto" and ds.config["optimizer"]["params"]["weight_decay"] == "auto"
    )
    assert ds.config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert any("bnb_4bit_quant_storage=torch.bfloat16" in n for n in ds.notes)
    zero2 = deepspeed_config(qlora.with_changes({"strategy.zero_stage": 2}))
    assert "stage3_gather_16bit_weights_on_model_save" not in zero2.config["zero_optimization"]
    assert not any("bnb_4bit_quant_storage" in n for n in zero2.notes)
    tp = plan_from_dict({"model": {"preset": "llama-7b"}, "strategy": {"zero_stage": 3, "tensor_parallel": 2}})
    ds_tp = deepspeed_config(tp)
    assert [x for x in ds_tp.not_expressed if x.startswith("strategy.zero_stage = 3 with tensor_parallel")]
    assert "ZeRO stages 0-2 only (v0.16.4 to at least v0.19.6" in ds_tp.not_expressed[0]
