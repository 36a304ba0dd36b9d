from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from vramplan.core.memory.activations.context import ActCtx, plan_ctx
from vramplan.core.memory.result import Estimate
from vramplan.core.plan import presets
from vramplan.core.plan.plan import plan_from_dict

# The suite is deterministic: the same examples on every run and machine (CI must pass on a clean clone).
# Explore with fresh random examples: pytest --hypothesis-profile=explore
settings.register_profile("default", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("default")

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent

PRECISION = {"fp32": "fp32", "bf16-mixed": "bf16-autocast", "bf16": "bf16-pure"}


EXPERTS = {"grouped_mm": "grouped", "eager": "loop", "batched_mm": "batched"}  # transformers' names -> the plan's


def case_plan_data(case: dict[str, Any], gpu: str = "h200") -> dict[str, Any]:
    """A measured case (tests/data/*truth.json ``resolved_case``) as plan data, with the mapping of
    ../shared/oracle/README.md (family -> model_type, bf16-mixed -> bf16-autocast, sdpa -> flash, ...)."""
    fam = case["family"]
    if "hf_config" in case:
        return _hf_case_plan_data(case, gpu)
    tie = case.get("tie_embeddings")
    tie = (fam == "bloom") if tie is None else tie
    training: dict[str, Any] = {
        "micro_batch_size": case["micro_batch_size"],
        "seq_len": case["seq_len"],
        "grad_accum_steps": case.get("grad_accum_steps", 1),
        "precision": PRECISION[case["precision"]],
        "optimizer": case["optimizer"],
        "optimizer_impl": case.get("optimizer_impl", "foreach"),
        "method": case["method"],
    }
    if case["method"] == "lora":
        t = case.get("lora_targets", "qv")
        if t == "qv":
            targets = ["qkv"] if fam == "bloom" else ["q", "v"]
        elif t == "all-linear":
            targets = ["all-linear"]
        else:
            targets = list(t)
        training |= {"lora_rank": case["lora_rank"], "lora_targets": targets}
    return {
        "model": {
            "model_type": fam,
            "vocab_size": case["vocab_size"],
            "hidden_size": case["hidden_size"],
            "intermediate_size": case.get("intermediate_size") or 4 * case["hidden_size"],
            "num_hidden_layers": case["num_layers"],
            "num_attention_heads": case["num_heads"],
            "num_key_value_heads": case.get("num_kv_heads") or case["num_heads"],
            "tie_word_embeddings": tie,
        },
        "hardware": {"gpu": gpu, "gpus_per_node": 1, "nodes": 1},
        "training": training,
        "strategy": {
            "gradient_checkpointing": "full" if case["gradient_checkpointing"] else "none",
            "attention": "flash" if case["attention"] == "sdpa" else "eager",
            "zero_stage": 0,
        },
    }


def _hf_case_plan_data(case: dict[str, Any], gpu: str) -> dict[str, Any]:
    """A measured case whose model is an HF config (bench/measure/families_cases.json): its [model] comes from
    vramplan's own config.json importer."""
    from vramplan.core.plan.hfconfig import map_config

    fam = case["family"]
    training: dict[str, Any] = {
        "micro_batch_size": case["micro_batch_size"],
        "seq_len": case["seq_len"],
        "grad_accum_steps": case.get("grad_accum_steps", 1),
        "precision": PRECISION[case["precision"]],
        "optimizer": case["optimizer"],
        "optimizer_impl": case.get("optimizer_impl", "foreach"),
        "method": case["method"],
    }
    if case["method"] == "lora":
        t = case.get("lora_targets", "qv")
        fused = fam in ("gpt2", "gpt_neox", "falcon", "phi3", "bloom")
        targets = (["qkv"] if fused else ["q", "v"]) if t == "qv" else ["all-linear"] if t == "all-linear" else list(t)
        training |= {"lora_rank": case.get("lora_rank", 8), "lora_targets": targets}
    return {
        "model": map_config({"model_type": fam, **case["hf_config"]}),
        "hardware": {"gpu": gpu, "gpus_per_node": 1, "nodes": 1},
        "training": training,
        "strategy": {
            "gradient_checkpointing": "full" if case["gradient_checkpointing"] else "none",
            "attention": "flash" if case["attention"] == "sdpa" else "eager",
            "zero_stage": 0,
            "experts": EXPERTS[case.get("experts_implementation") or "grouped_mm"],
        },
    }


def rel(a: int, b: int) -> float:
    """Relative error of `a` against the measured `b`."""
    return (a - b) / b if b else float(a != 0)


def case_ctx(case: dict[str, Any], cpu: bool = False) -> ActCtx:
    """The activation model's context for a measured case (``cpu``: PyTorch's CPU kernels)."""
    return plan_ctx(plan_from_dict(case_plan_data(case)), cpu)


def assert_issue_bounds(est: Estimate, f: dict[str, Any]) -> float:
    """The core issue's acceptance for one measured case; returns the peak's relative error (total - overhead
    against ``steady_peak_bytes``): parameter counts exact, parameters/gradients/optimizer states within 1%,
    activations within 5% of activation_bytes - logits_like_bytes + saved_weight_copy_bytes, the peak between -5%
    and +15%."""
    g = est.per_gpu()
    assert (est.params_total, est.params_trainable) == (f["params_total"], f["params_trainable"])
    for kind, key in (
        ("parameters", "param_bytes"),
        ("gradients", "grad_bytes"),
        ("optimizer_states", "optimizer_state_bytes"),
    ):
        assert abs(rel(g[kind], f[key])) <= 0.01, (kind, g[kind], f[key])
    act = f["activation_bytes"] - f["logits_like_bytes"] + f["saved_weight_copy_bytes"]
    assert abs(rel(g["activations"], act)) <= 0.05, (g["activations"], act)
    peak = rel(g["total"] - g["overhead"], f["steady_peak_bytes"])
    assert -0.05 <= peak <= 0.15, (g["total"] - g["overhead"], f["steady_peak_bytes"], peak)
    return peak


def load_truth(name: str) -> dict[str, Any]:
    path = DATA / name
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture(autouse=True)
def isolated_machine(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test sees the same machine: no user presets (an empty VRAMPLAN_CONFIG_DIR) and no GPU detection
    (VRAMPLAN_DETECT=0), whatever the developer's ~/.config or nvidia-smi; tests of those features opt back in."""
    from vramplan.core.plan import presets

    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "no-user-config"))
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    presets.reload()


@pytest.fixture
def tmp_plan(tmp_path: Path):
    def write(text: str, name: str = "plan.toml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> Path:
    """A user config directory holding ``files`` (relative path -> text), made the one vramplan reads."""
    root = tmp_path / "cfg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(root))
    presets.reload()
    return root
