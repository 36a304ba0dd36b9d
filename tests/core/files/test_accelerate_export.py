"""The accelerate FSDP export (issue 17.4): what it writes for each sharding, what it cannot express (comments at
its top and the warning line), that it imports back to the same keys with ``--from``, and (when accelerate is
installed) that accelerate's own config classes read it as planned."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import DATA
from vramplan.core.files.accelerate_export import accelerate_config
from vramplan.core.files.export import format_for_path, render
from vramplan.core.files.importers.apply import import_config
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict

KEYS = (
    "hardware.gpus_per_node",
    "hardware.nodes",
    "strategy.zero_stage",
    "strategy.offload_optimizer",
    "strategy.offload_parameters",
    "strategy.gradient_checkpointing",
    "strategy.compile",
)
PLANS: list[dict[str, Any]] = [
    {"training": {"precision": "bf16-fsdp"}},
    {"training": {"precision": "fp32"}, "hardware": {"gpus_per_node": 4, "nodes": 2},
     "strategy": {"offload_optimizer": "cpu", "offload_parameters": "cpu", "gradient_checkpointing": "none"}},
    {"training": {"precision": "bf16-autocast"}, "strategy": {"zero_stage": 2, "compile": True}},
    {"training": {"precision": "bf16-fsdp"}, "strategy": {"offload_optimizer": "cpu", "offload_parameters": "cpu"}},
    {"training": {"precision": "bf16-autocast"}, "hardware": {"gpus_per_node": 4}, "strategy": {"zero_stage": 0}},
    {"training": {"precision": "fp16-autocast"}, "hardware": {"gpus_per_node": 1}, "strategy": {"zero_stage": 0}},
]  # fmt: skip


def make(changes: dict[str, Any]) -> Plan:
    data: dict[str, Any] = {"model": {"preset": "llama-3.1-8b"}, "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8}}
    data["hardware"] |= changes.get("hardware", {})
    data["training"] = {"micro_batch_size": 2, **changes.get("training", {})}
    data["strategy"] = {"zero_stage": 3, "gradient_checkpointing": "full", **changes.get("strategy", {})}
    return plan_from_dict(data)


def keys_of(plan: Plan) -> dict[str, Any]:
    dumped = plan.dump()
    out = {key: dumped[key.split(".")[0]][key.split(".")[1]] for key in KEYS}
    return out | {"training.precision": plan.training.regime}


@pytest.mark.parametrize("changes", PLANS)
def test_the_accelerate_export_imports_back_to_the_same_keys(changes: dict[str, Any], tmp_path: Path) -> None:
    plan = make(changes)
    export = accelerate_config(plan)
    assert not export.not_expressed, export.not_expressed
    assert export.warning() is None
    path = tmp_path / "run.accelerate.yaml"
    path.write_text(export.text())
    base = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "hardware": {"gpu": "h100-80gb", "gpus_per_node": 3, "nodes": 1},
            "training": {"precision": "fp16-autocast"},
            "strategy": {"zero_stage": 1, "offload_optimizer": "cpu", "gradient_checkpointing": "selective",
                         "compile": not plan.strategy.compile},
        }
    )  # fmt: skip
    im = import_config(path, base)
    assert im.format == "accelerate"
    expected = keys_of(plan)
    if plan.strategy.zero_stage == 0:  # DDP: no fsdp_config, checkpointing is the script's (the plan's is kept)
        expected["strategy.gradient_checkpointing"] = base.strategy.gradient_checkpointing
    assert keys_of(im.plan) == expected


def test_fsdp2_keys_for_full_and_gradient_sharding() -> None:
    full = accelerate_config(make({"training": {"precision": "bf16-fsdp"}})).config
    assert full["distributed_type"] == "FSDP" and full["mixed_precision"] == "bf16"
    assert full["fsdp_config"]["fsdp_version"] == 2 and full["fsdp_config"]["fsdp_reshard_after_forward"] is True
    assert (full["num_processes"], full["num_machines"]) == (8, 1)
    grad = accelerate_config(make({"strategy": {"zero_stage": 2}})).config
    assert grad["fsdp_config"]["fsdp_reshard_after_forward"] is False
    ddp = accelerate_config(make({"strategy": {"zero_stage": 0}, "training": {"precision": "fp32"}})).config
    assert ddp["distributed_type"] == "MULTI_GPU" and "fsdp_config" not in ddp and ddp["mixed_precision"] == "no"


def test_what_it_cannot_express_is_said_in_the_yaml_and_the_warning() -> None:
    plan = make(
        {
            "training": {"precision": "bf16-master"},
            "strategy": {"zero_stage": 1, "offload_optimizer": "cpu", "gradient_checkpointing": "selective",
                         "tensor_parallel": 2, "loss_chunks": 8},
        }
    )  # fmt: skip
    rendered = render("accelerate", plan)
    (warning,) = rendered.warnings
    assert warning.startswith("the accelerate config cannot express: strategy.zero_stage = 1; ")
    for key in ("precision = bf16-master", "strategy.offload_optimizer = cpu", "strategy.gradient_checkpointing = "
                "selective", "strategy.tensor_parallel = 2", "strategy.loss_chunks"):  # fmt: skip
        assert key in warning
    head = rendered.text.split("\ncompute_environment:", 1)[0]
    assert "# cannot express (the run will differ from the plan here):" in head
    assert "#   - strategy.zero_stage = 1: FSDP has no optimizer-only sharding" in head
    data = yaml.safe_load(rendered.text)  # the comments leave valid YAML
    assert data["fsdp_config"]["fsdp_reshard_after_forward"] is False
    assert data["fsdp_config"]["fsdp_offload_params"] is False
    assert format_for_path("run.accelerate.yaml") == "accelerate"


def test_accelerates_own_config_classes_read_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """accelerate's ClusterConfig refuses unknown keys; `accelerate launch`'s own argument merging and environment
    (utils/launch.py prepare_multi_gpu_env) then build the FullyShardedDataParallelPlugin the run gets."""
    pytest.importorskip("accelerate", reason="accelerate (and torch) not installed")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    cases = [
        (make({"training": {"precision": "bf16-fsdp"}, "hardware": {"gpus_per_node": 4, "nodes": 2},
               "strategy": {"offload_optimizer": "cpu", "offload_parameters": "cpu"}}), True, True, True),
        (make({"strategy": {"zero_stage": 2, "gradient_checkpointing": "none"}}), False, False, False),
    ]  # fmt: skip
    for plan, reshard, offload, checkpointing in cases:
        path = tmp_path / "run.accelerate.yaml"
        path.write_text(render("accelerate", plan).text)
        cfg = ClusterConfig.from_yaml_file(str(path))
        assert cfg.distributed_type == DistributedType.FSDP
        assert (cfg.num_processes, cfg.num_machines) == (plan.hardware.total_gpus, plan.hardware.nodes)
        args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
        args, _, _ = _validate_launch_command(args)
        env = prepare_multi_gpu_env(args)
        assert env["ACCELERATE_MIXED_PRECISION"] == ("bf16" if plan.training.regime != "fp32" else "no")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        fsdp = FullyShardedDataParallelPlugin()
        assert fsdp.fsdp_version == 2
        assert fsdp.reshard_after_forward is reshard
        assert type(fsdp.cpu_offload).__name__ == ("CPUOffloadPolicy" if offload else "OffloadPolicy")
        assert fsdp.activation_checkpointing is checkpointing
    ddp = make({"strategy": {"zero_stage": 0}, "hardware": {"gpus_per_node": 4}})
    path = tmp_path / "ddp.accelerate.yaml"
    path.write_text(render("accelerate", ddp).text)
    assert ClusterConfig.from_yaml_file(str(path)).distributed_type == DistributedType.MULTI_GPU
    assert os.environ.get("ACCELERATE_USE_FSDP") == "true"  # set above by monkeypatch, undone after the test


def test_the_seed_deepspeed_config_converts_to_accelerate(tmp_path: Path) -> None:
    im = import_config(
        DATA / "import" / "seed_13b_zero3.json",
        default_plan(),
        model="llama-2-13b",
        sets=["hardware.gpus_per_node=4"],
    )
    rendered = render("accelerate", im.plan)
    assert rendered.warnings and "precision = fp16-master" in rendered.warnings[0]
    assert "strategy.offload_optimizer = cpu, offload_parameters = none" in rendered.warnings[0]
