"""Display text for the planner: GiB with a fixed number of decimals, model and GPU names. No Textual."""

from __future__ import annotations

from typing import Any

from core import presets
from core.errors import PlanError
from core.hfconfig import read_hf_config
from core.plan import ModelConfig, Plan
from core.units import GiB


def gib(n_bytes: int, digits: int = 1) -> str:
    """``16.6`` (GiB, no unit): the planner's per-GPU figures use the same rounding as ``--json`` / GiB."""
    return f"{n_bytes / GiB:.{digits}f}"


def model_base(model: ModelConfig) -> tuple[str, dict[str, Any]] | None:
    """The name and keys a model starts from: its preset's, or its config.json's (None: a custom model, or a
    config.json that can no longer be read)."""
    try:
        if model.preset is not None:
            mp = presets.model_preset(model.preset)
            keys = dict(mp.config)
            if isinstance(keys.get("hf_config"), str):  # a user preset made of a config.json
                keys = {**read_hf_config(keys["hf_config"]).model, **keys}
            return mp.name, keys
        if model.hf_config is not None:
            hf = read_hf_config(model.hf_config)
            return hf.name, hf.model
    except PlanError:
        return None
    return None


def modified_keys(model: ModelConfig) -> list[str]:
    """Model keys that differ from the model's preset or config.json (a custom model built from one)."""
    base = model_base(model)
    if base is None:
        return []
    keys = base[1]
    dumped = model.model_dump(exclude_none=True)
    skip = ("preset", "hf_config")
    return [k for k, v in dumped.items() if k not in skip and k in keys and keys[k] != v] + [
        k for k in dumped if k not in keys and k not in skip
    ]


def model_name(model: ModelConfig) -> str:
    base = model_base(model)
    if base is None:
        return f"custom {model.model_type}"
    return f"{base[0]} (modified)" if modified_keys(model) else base[0]


def gpu_name(plan: Plan) -> str:
    return presets.gpu(plan.hardware.gpu).name


def parallel_summary(plan: Plan) -> str:
    s = plan.strategy
    parts = [f"DP {plan.data_parallel}"]
    if s.tensor_parallel > 1:
        parts.append(f"TP {s.tensor_parallel}" + ("+SP" if s.sequence_parallel else ""))
    if s.pipeline_parallel > 1:
        parts.append(f"PP {s.pipeline_parallel}")
    if s.zero_stage:
        parts.append(f"ZeRO-{s.zero_stage}")
    return ", ".join(parts)


_VENDOR_PREFIXES = ("NVIDIA ", "AMD Instinct ", "AMD ", "GeForce ", "Tesla ")


def short_gpu_name(name: str) -> str:
    """``H100 80GB SXM5`` for ``NVIDIA H100 80GB SXM5``: lists and the palette have little room."""
    for prefix in _VENDOR_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name
