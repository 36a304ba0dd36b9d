"""Parse vramplan's DeepSpeed exports with DeepSpeed itself (its pydantic config models forbid unknown keys).

Not part of the test suite (DeepSpeed needs torch, which vramplan never depends on). Run with an environment that
has torch and deepspeed, from the repository root:

    PYTHONPATH=. python bench/deepspeed/check_configs.py

For every valid plan in a grid of precisions x ZeRO stages x offloads x optimizers x checkpointing x TP/PP x loss
scaling, `deepspeed.runtime.config.DeepSpeedConfig` must accept the exported config, with the data-parallel size
the plan implies, and read back the batch sizes, precision, ZeRO stage and offload devices the plan asked for.
"""

from __future__ import annotations

import itertools
import json
import sys
from types import SimpleNamespace

import deepspeed
import deepspeed.comm as ds_comm
from deepspeed.runtime import config as ds_config

from vramplan.core.files.deepspeed_export import deepspeed_config
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.core.plan.schema.training import OPTIMIZERS, PRECISIONS

# Outside a launched job deepspeed.comm has no backend; the config asks it for a rank before it asks the mpu for
# the data-parallel size. Rank 0, and an mpu that gives the plan's data-parallel size.
ds_comm.get_rank = lambda *a, **k: 0
ds_config.dist.get_rank = ds_comm.get_rank


def mpu(dp: int) -> SimpleNamespace:
    return SimpleNamespace(get_data_parallel_world_size=lambda: dp)


def grid():
    for precision, zero, offload, optimizer, ckpt, (tp, pp), scaling in itertools.product(
        PRECISIONS,
        range(4),
        [("none", "none"), ("cpu", "none"), ("cpu", "cpu"), ("nvme", "nvme")],
        OPTIMIZERS,
        ["none", "selective", "full"],
        [(1, 1), (2, 1), (1, 2)],
        ["dynamic", "static", "none"],
    ):
        raw = {
            "model": {"preset": "llama-7b"},
            "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 2},
            "training": {
                "micro_batch_size": 2,
                "grad_accum_steps": 4,
                "precision": precision,
                "optimizer": optimizer,
                "loss_scaling": scaling,
                # half the grid leaves clipping and the learning rate to DeepSpeed's / the trainer's defaults
                **({"grad_clip": 1.0, "learning_rate": 2e-5} if scaling != "none" else {}),
            },
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
            yield plan_from_dict(raw)
        except PlanError:
            continue


def main() -> int:
    checked, failures = 0, []
    for plan in grid():
        ds = deepspeed_config(plan)
        cfg = json.loads(ds.text())
        try:
            parsed = ds_config.DeepSpeedConfig(cfg, mpu=mpu(plan.data_parallel))
            t, s = plan.training, plan.strategy
            assert parsed.train_batch_size == t.micro_batch_size * t.grad_accum_steps * plan.data_parallel
            assert parsed.train_micro_batch_size_per_gpu == t.micro_batch_size
            assert parsed.gradient_accumulation_steps == t.grad_accum_steps
            assert parsed.zero_optimization_stage == s.zero_stage
            assert parsed.gradient_clipping == (t.grad_clip if t.grad_clip is not None else 1.0)  # 1.0: v0.19.3+
            assert parsed.bfloat16_config.enabled == (t.precision in ("bf16-master", "bf16-pure", "bf16-fsdp"))
            assert parsed.float16_config.enabled == (t.precision == "fp16-master")
            assert parsed.torch_autocast_enabled == t.precision.endswith("-autocast")
            zc = parsed.zero_config
            assert (zc.offload_optimizer.device if zc.offload_optimizer else "none") == s.offload_optimizer
            assert (zc.offload_param.device if zc.offload_param else "none") == s.offload_parameters
            if s.tensor_parallel > 1:
                assert parsed.tensor_parallel_config.autotp_size == s.tensor_parallel
            if s.zero_stage == 3:  # a consolidated 16-bit model on save_model
                assert zc.gather_16bit_weights_on_model_save is True
            if t.learning_rate is None and "optimizer" in cfg:  # "auto" for HF Trainer: DeepSpeed passes it through
                assert parsed.optimizer_params["lr"] == "auto"
        except Exception as exc:  # report every failure, keep going
            failures.append(f"{plan.training.precision} zero{plan.strategy.zero_stage} {exc!r}"[:300])
        checked += 1
    print(f"deepspeed {deepspeed.__version__}: {checked} exported configs parsed, {len(failures)} failed")
    for line in failures[:20]:
        print("  ", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
