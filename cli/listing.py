"""``vramplan keys`` (every settable key: type, default, meaning) and ``vramplan presets --json``: listings as
text or one JSON object."""

from __future__ import annotations

from typing import Any

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.presets import Registry
from vramplan.core.plan.keyref import KeyInfo


def keys_text(keys: tuple[KeyInfo, ...]) -> str:
    """One line per key (``training.seq_len  int  2048``), its meaning indented under it, tables apart."""
    rows = ["settable keys: --set TABLE.KEY=VALUE, or the key in a plan file's [TABLE] (default: the default plan's)"]
    table = ""
    for k in keys:
        if k.key.split(".")[0] != table:
            table = k.key.split(".")[0]
            rows.append(f"\n[{table}]")
        rows.append(f"  {k.key:<34} {k.type}" + (f"  (default {k.default})" if k.default else ""))
        if k.meaning:
            rows.append(f"      {k.meaning}")
    return "\n".join(rows) + "\n"


def keys_json(keys: tuple[KeyInfo, ...]) -> list[dict[str, str]]:
    return [{"key": k.key, "type": k.type, "default": k.default, "meaning": k.meaning} for k in keys]


def presets_json(reg: Registry, kind: str | None) -> dict[str, Any]:
    """``{"models": [...], "hardware": [...], "problems": [...]}`` (the kinds asked for), each preset with its
    id, name, figures and origin (built-in, user, detected)."""
    out: dict[str, Any] = {}
    if kind in (None, "models"):
        models = []
        for mp in reg.sorted_models():
            c = presets.model_config({"preset": mp.id})
            models.append(
                {
                    "id": mp.id,
                    "name": mp.name,
                    "model_type": c.model_type,
                    "params": c.arch().total_params,
                    "layers": c.num_hidden_layers,
                    "hidden_size": c.hidden_size,
                    "vocab_size": c.vocab_size,
                    "hub_ids": list(mp.hub_ids),
                    "user": reg.is_user("models", mp.id),
                }
            )
        out["models"] = models
    if kind in (None, "hardware"):
        out["hardware"] = [
            {
                "id": g.id,
                "name": g.name,
                "memory_mib": g.memory_mib,
                "bf16_tflops": g.bf16_tflops if g.bf16 else None,
                "fp16_tflops": g.fp16_tflops,
                "memory_bandwidth_gbs": g.memory_bandwidth_gbs,
                "gpu_link_gbs": g.gpu_link_gbs,
                "nvidia_smi_names": list(g.match),
                "origin": reg.origin.get(f"hardware/{g.id}", "built-in"),
                "user": reg.is_user("hardware", g.id),
            }
            for g in reg.sorted_gpus()
        ]
    out["problems"] = list(reg.problems)
    return out
