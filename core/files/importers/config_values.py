"""Values as configs write them: booleans as ``true``/``"yes"``/``"auto"``, counts as numbers or strings, HF
Trainer's optimizer names, LoRA target module names."""

from __future__ import annotations

import math
from typing import Any

AUTO = "auto"


def flag(value: Any) -> bool | None:
    """A boolean as configs write it (``true``, ``"True"``, ``"yes"``, ``1``); None for ``"auto"`` or anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("true", "yes", "on", "1"):
            return True
        if v in ("false", "no", "off", "0", "none", ""):
            return False
    return None


def count(value: Any) -> int | None:
    """A positive whole number (``4``, ``"4"``, ``4.0``); None for ``"auto"``, null or anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and value >= 1 else None


def number(value: Any) -> float | None:
    """A finite number (``1.0``, ``"3e-4"``); None for anything else."""
    if isinstance(value, bool):
        return None
    out: float | None = None
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value)
        except ValueError:
            return None
    return out if out is not None and math.isfinite(out) else None


# HF Trainer's ``optim`` names (transformers training_args.OptimizerNames), as axolotl and LLaMA-Factory take them:
# -> (training.optimizer, training.optimizer_impl or None)
HF_OPTIMIZERS: dict[str, tuple[str, str | None]] = {
    "adamw_torch": ("adamw", None),
    "adamw_hf": ("adamw", "for-loop"),
    "adamw_torch_fused": ("adamw", "fused"),
    "adamw_apex_fused": ("adamw", "fused"),
    "adamw_bnb_8bit": ("adamw-8bit", None),
    "adamw_8bit": ("adamw-8bit", None),
    "bnb_adamw_8bit": ("adamw-8bit", None),
    "paged_adamw_8bit": ("paged-adamw-8bit", None),
    "paged_adamw_32bit": ("paged-adamw", None),
    "paged_adamw": ("paged-adamw", None),
    "adafactor": ("adafactor", None),
    "sgd": ("sgd", None),
    "lion_32bit": ("lion", None),
    "lion_pytorch": ("lion", None),
}

# LoRA target module names (HF/PEFT, torchtune) -> the plan's roles
LORA_MODULES: dict[str, str] = {
    "q_proj": "q",
    "k_proj": "k",
    "v_proj": "v",
    "o_proj": "o",
    "output_proj": "o",  # torchtune
    "dense": "o",
    "gate_proj": "gate",
    "up_proj": "up",
    "down_proj": "down",
    "w1": "gate",  # torchtune FeedForward: w1 gate, w3 up, w2 down
    "w3": "up",
    "w2": "down",
    "qkv_proj": "qkv",
    "query_key_value": "qkv",
    "gate_up_proj": "gate_up",
}


def lora_targets(names: Any) -> tuple[tuple[str, ...], list[str]]:
    """The plan's LoRA targets for a list (or comma-separated string) of module names, and the names it cannot
    take."""
    if isinstance(names, str):
        names = [n for n in names.replace(",", " ").split() if n]
    if not isinstance(names, list):
        return (), [str(names)]
    roles: list[str] = []
    unknown: list[str] = []
    for name in names:
        text = str(name).strip()
        if text.lower() in ("all", "all-linear", "all_linear"):
            return ("all-linear",), []
        role = LORA_MODULES.get(text)
        if role is None:
            unknown.append(text)
        elif role not in roles:
            roles.append(role)
    return tuple(roles), unknown
