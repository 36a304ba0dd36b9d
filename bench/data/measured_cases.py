"""The CPU-measured training steps of tests/data (oracle_truth.json, extra_truth.json, random*_truth.json,
families_truth.json, moe_truth.json) as plans, and the estimate's error on each.

Used by the suite (tests/conftest.py re-exports `case_plan_data`) and by `python -m bench.docs`, which writes the
accuracy page (docs/accuracy.md) and the README's accuracy table from `oracle_summary`. The mapping of a measured
case to a plan is ../shared/oracle/README.md's (family -> model_type, bf16-mixed -> bf16-autocast, sdpa -> flash).
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"

PRECISION = {"fp32": "fp32", "bf16-mixed": "bf16-autocast", "bf16": "bf16-pure"}
# the dropout keys bench/measure/measure_step.py (HF_FAMILIES) sets to 0 before a case's own hf_config keys
DROPOUT_OFF = {"gpt2": {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}}


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
    from vramplan.core.plan.architecture.hf_config import map_config

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
        # measure_step.py builds with every dropout at 0 unless the case's hf_config sets one
        "model": map_config({"model_type": fam, **DROPOUT_OFF.get(fam, {}), **case["hf_config"]}),
        "hardware": {"gpu": gpu, "gpus_per_node": 1, "nodes": 1},
        "training": training,
        "strategy": {
            "gradient_checkpointing": "full" if case["gradient_checkpointing"] else "none",
            "attention": "flash" if case["attention"] == "sdpa" else "eager",
            "zero_stage": 0,
            "experts": EXPERTS[case.get("experts_implementation") or "grouped_mm"],
        },
    }


class TruthFile(NamedTuple):
    """One file of CPU-measured steps, and how its cases are compared (``cpu``: with PyTorch's CPU kernels)."""

    name: str
    what: str
    cpu: bool


# The measured steps, in the order the accuracy page lists them. The dense LLaMA-style cases are compared with the
# CUDA prediction (their CPU kernels save the same bytes); the other families and the MoE cases with `cpu=True`,
# which differs from it only by the CPU kernels' documented differences (core/memory/activations/context.py).
TRUTH_FILES = (
    TruthFile("oracle_truth.json", "the oracle: LLaMA, Qwen2, BLOOM; fp32, bf16, autocast; LoRA; SGD/AdamW", False),
    TruthFile("extra_truth.json", "combinations the oracle lacks: autocast + checkpointing, GQA, Mistral", False),
    TruthFile("random_truth.json", "random cases of the oracle's space (seed 7), measured after the model", False),
    TruthFile("random2_truth.json", "random cases with varied dimensions too (seed 11)", False),
    TruthFile("families_truth.json", "GPT-2, GPT-NeoX, Falcon, Gemma, Phi-3 from their config.json keys", True),
    TruthFile(
        "moe_truth.json", "mixture of experts: Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3, gpt-oss, Llama 4", True
    ),
)


class FileSummary(NamedTuple):
    """The estimate against one file's measured steps: the peak's error (total - overhead against the measured
    steady-state peak), percent."""

    name: str
    what: str
    cases: int
    params_exact: int  # cases whose total and trainable parameter counts are exact
    same_phase: int  # cases whose predicted peak is in the measured peak's phase
    median_abs_pct: float
    worst_under_pct: float  # the most negative error, as a percent (0 or less)
    worst_over_pct: float
    versions: str  # the measuring environment: ``torch 2.13.0+cpu, transformers 5.24.0, peft 0.21.2``


def peak_error(rec: dict[str, Any], cpu: bool) -> tuple[float, bool, bool]:
    """(the peak's signed relative error, parameter counts exact, same phase) of one measured step."""
    f = rec["figures"]
    est = estimate(plan_from_dict(case_plan_data(rec["resolved_case"])), cpu=cpu)
    measured = f["steady_peak_bytes"]
    err = (est.total - est.overhead - measured) / measured
    exact = (est.params_total, est.params_trainable) == (f["params_total"], f["params_trainable"])
    return err, exact, est.peak_phase == f["steady_peak_phase"]


@cache  # the accuracy page and README's table both read it
def oracle_summary(data: Path = DATA) -> tuple[FileSummary, ...]:
    """One row per truth file present, in `TRUTH_FILES`' order."""
    out = []
    for tf in TRUTH_FILES:
        path = data / tf.name
        if not path.exists():
            continue
        records = list(json.loads(path.read_text()).values())
        results = [peak_error(rec, tf.cpu) for rec in records]
        versions = sorted(
            {", ".join(f"{k} {r['versions'][k]}" for k in ("torch", "transformers", "peft")) for r in records}
        )
        errors = [100 * e for e, _, _ in results]
        out.append(
            FileSummary(
                tf.name,
                tf.what,
                len(results),
                sum(x for _, x, _ in results),
                sum(p for _, _, p in results),
                round(statistics.median(abs(e) for e in errors), 3),
                round(min(0.0, *errors), 3),
                round(max(0.0, *errors), 3),
                "; ".join(versions),
            )
        )
    return tuple(out)
