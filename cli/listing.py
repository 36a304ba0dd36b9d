"""``vramplan keys`` (every settable key: type, default, meaning) and ``vramplan presets`` (the model and GPU
presets, text or one JSON object): listings."""

from __future__ import annotations

from typing import Any

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.presets import Registry
from vramplan.core.plan.helpers.units import fmt_count
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


def model_listing(reg: Registry) -> str:
    """One line per model preset within 80 columns: total parameters and, for mixture-of-experts models, the
    parameters one token passes through (active; equal to the total for a dense model)."""
    rows = ["models", f"  {'id':<17} {'name':<18} {'type':<11} {'params':>9} {'active':>9} {'layers':>6}"]
    for mp in reg.sorted_models():
        c = presets.model_config({"preset": mp.id})  # fills what a user preset leaves to defaults
        arch = c.arch()
        user = "  (user)" if reg.is_user("models", mp.id) else ""
        rows.append(
            f"  {mp.id:<17} {mp.name:<18} {c.model_type:<11} {fmt_count(arch.total_params):>9} "
            f"{fmt_count(arch.active_params):>9} {c.num_hidden_layers:>6}{user}"
        )
    return "\n".join(rows) + "\n"


def hardware_listing(reg: Registry) -> str:
    rows = ["hardware", f"  {'id':<13} {'name':<30} {'memory':>9} {'bf16 TF':>8} {'memory GB/s':>12} {'link GB/s':>9}"]
    for g in reg.sorted_gpus():
        tf = f"{g.bf16_tflops:g}" if g.bf16 else f"{g.fp16_tflops:g}*"
        origin = reg.origin.get(f"hardware/{g.id}", "built-in")
        user = "  (user)" if reg.is_user("hardware", g.id) else "  (detected)" if origin == "detected" else ""
        rows.append(
            f"  {g.id:<13} {g.name:<30} {g.memory_mib / 1024:>5.1f} GiB {tf:>8} "
            f"{f'{g.memory_type} {g.memory_bandwidth_gbs:g}':>12} "
            f"{g.gpu_link_gbs:>9g}{user}"
        )
    rows.append("  * no bf16: fp16 figure; TFLOP/s are dense; link bandwidth per direction")
    return "\n".join(rows) + "\n"
