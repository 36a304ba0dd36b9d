"""Which framework wrote a config, told by its content (the extension only separates JSON from YAML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramplan.core.plan.helpers.errors import PlanError

FORMATS: dict[str, str] = {
    "deepspeed": "DeepSpeed JSON",
    "accelerate": "accelerate config",
    "torchtune": "torchtune recipe",
    "axolotl": "axolotl config",
    "llamafactory": "LLaMA-Factory config",
    "trl": "TRL DPO/GRPO config",
    "verl": "verl trainer config",
}
# The [stack] framework that runs each format (`core.plan.stack.config.FRAMEWORKS`): its defaults fill the keys left
# unset
FRAMEWORK_OF: dict[str, str] = {
    "deepspeed": "deepspeed",
    "accelerate": "accelerate",
    "torchtune": "torchtune",
    "axolotl": "axolotl",
    "llamafactory": "llamafactory",
    "trl": "trl",
    "verl": "custom",  # verl is no [stack] framework: its own defaults are in the reader
}
_DEEPSPEED_KEYS = ("zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu", "fp16", "bf16")
_AXOLOTL_KEYS = ("base_model", "micro_batch_size", "sequence_len", "adapter", "lora_r")
_LLAMAFACTORY_KEYS = ("model_name_or_path", "finetuning_type", "cutoff_len", "per_device_train_batch_size", "stage")


def detect_format(data: Any, where: str) -> str:
    """The format id of a parsed config (a key of `FORMATS`); a `PlanError` naming what is understood otherwise."""
    if not isinstance(data, dict) or not data:
        raise PlanError("not a training config: expected a table of settings at the top", where)
    keys = set(data)
    model = data.get("model")
    if isinstance(model, dict) and "_component_" in model:
        return "torchtune"
    if isinstance(data.get("actor_rollout_ref"), dict):
        return "verl"
    if "distributed_type" in keys or ("fsdp_config" in keys and "num_processes" in keys):
        return "accelerate"
    if keys & set(_DEEPSPEED_KEYS) and not keys & {"base_model", "model_name_or_path"}:
        return "deepspeed"
    if "base_model" in keys or len(keys & set(_AXOLOTL_KEYS)) >= 2:
        return "axolotl"
    from vramplan.core.files.importers.trl import is_trl  # its readers load with it: after the first frame

    if is_trl(keys):
        return "trl"
    if len(keys & set(_LLAMAFACTORY_KEYS)) >= 2:
        return "llamafactory"
    raise PlanError(
        "not a config vramplan can import: expected a DeepSpeed JSON (zero_optimization, train_batch_size), an "
        "accelerate config (distributed_type), a torchtune recipe (model._component_), an axolotl config "
        "(base_model), a LLaMA-Factory config (model_name_or_path, finetuning_type), a TRL DPO/GRPO config (beta, "
        "num_generations) or a verl config (actor_rollout_ref)",
        where,
    )


CONFIG_SUFFIXES = (".json", ".yaml", ".yml")


def is_config_path(path: str | Path) -> bool:
    """A training config by its name (``.json``, ``.yaml``, ``.yml``); anything else opens as a TOML plan file."""
    return str(path).lower().endswith(CONFIG_SUFFIXES)
