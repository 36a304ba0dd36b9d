"""The GPU measurement kit's cases: what each one trains, and how it maps onto a transformers config and a vramplan
plan. No torch, transformers or vramplan at import: the suite checks this module on machines without them (CI).

A case is a dict. Its model is a Hugging Face config.json (``hf_config``: one of SHAPES, the published config of
the model it is shaped after, optionally with fewer layers), the rest says how it trains:

  micro_batch_size, seq_len, grad_accum_steps   the batch (random token ids, labels = the ids)
  precision        fp32 | bf16-mixed (fp32 weights, torch.autocast bf16) | bf16 (model.to(bfloat16), "pure")
  optimizer        adamw | sgd;  optimizer_impl foreach | for-loop | fused (torch.optim's foreach=/fused=)
  gradient_checkpointing   HF gradient_checkpointing_enable(use_reentrant=False)
  attention        sdpa | eager (transformers' attn_implementation)
  method           full | lora | qlora;  lora_rank, lora_alpha, lora_dropout, lora_targets (qv | all-linear)
  quant_type, double_quant, compute_dtype, kbit_prepare   QLoRA: bitsandbytes Linear4bit on every block linear
                   (the lm_head stays 16-bit, as transformers' 4-bit loading keeps it), peft's
                   prepare_model_for_kbit_training when kbit_prepare
  warmup_steps, steps   optimizer steps run before the measured ones, and the measured ones
  expect_s         the seconds the case is expected to take on an H200 (the kit skips it when less is left)
  note             what the case is for

`plan_data` maps a resolved case onto vramplan's plan data (the mapping of ../../tests/conftest.py for the CPU
cases: bf16-mixed -> bf16-autocast, bf16 -> bf16-pure, sdpa -> flash, ...; the [model] from vramplan's own
config.json importer); `future_sets` are plan keys that express the case more exactly once vramplan accepts them
(each is tried, and kept only where the installed vramplan accepts it, as ../shared/published/check.py does).
"""

from __future__ import annotations

import copy
from typing import Any

# Published config.json keys (as the model's repository has them; transformers' defaults for the rest).
SHAPES: dict[str, dict[str, Any]] = {
    # meta-llama/Meta-Llama-3-8B config.json
    "llama-3-8b": {
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    # Qwen/Qwen2-7B config.json
    "qwen2-7b": {
        "model_type": "qwen2",
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
    },
    # mistralai/Mistral-7B-v0.1 config.json (its 4096-token sliding window included)
    "mistral-7b": {
        "model_type": "mistral",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
    },
}
FAMILIES = ("llama", "qwen2", "mistral")
# Every dropout off (the measured step is deterministic in memory), no KV cache in training.
NO_DROPOUT = {"attention_dropout": 0.0}

DEFAULTS: dict[str, Any] = {
    "micro_batch_size": 1,
    "seq_len": 2048,
    "grad_accum_steps": 1,
    "precision": "bf16",
    "optimizer": "adamw",
    "optimizer_impl": "foreach",
    "gradient_checkpointing": False,
    "attention": "sdpa",
    "method": "full",
    "lora_rank": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "lora_targets": "qv",
    "quant_type": "nf4",
    "double_quant": True,
    "compute_dtype": "bf16",
    "kbit_prepare": False,
    "warmup_steps": 1,
    "steps": 3,
    "lr": 1e-5,
    "seed": 0,
    "expect_s": 20,
    "note": "",
}
CHOICES: dict[str, tuple[Any, ...]] = {
    "precision": ("fp32", "bf16-mixed", "bf16"),
    "optimizer": ("adamw", "sgd"),
    "optimizer_impl": ("foreach", "for-loop", "fused"),
    "attention": ("sdpa", "eager"),
    "method": ("full", "lora", "qlora"),
    "lora_targets": ("qv", "all-linear"),
    "quant_type": ("nf4", "fp4"),
    "compute_dtype": ("bf16", "fp32"),
}
POSITIVE = ("micro_batch_size", "seq_len", "grad_accum_steps", "lora_rank", "steps", "expect_s")
KEYS = ("id", "shape", "hf_config", "layers", *DEFAULTS)


def _case(cid: str, shape: str, layers: int | None = None, **train: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"id": cid, "shape": shape, **train}
    if layers is not None:
        c["layers"] = layers
    return c


# Ordered small to large (the kit also sorts by vramplan's estimate when it can). "L8": the model with 8 of its
# layers (all of its widths and its vocabulary), so that fp32-weight cases fit and the pairs run fast.
DEFAULT_SET: tuple[dict[str, Any], ...] = (
    _case("l3-8b-L8_bf16_sdpa_b1_s2048", "llama-3-8b", 8, expect_s=12, note="pure bf16, SDPA (flash)"),
    _case("l3-8b-L8_bf16_eager_b1_s2048", "llama-3-8b", 8, attention="eager", expect_s=12, note="eager attention"),
    _case("l3-8b-L8_bf16_sdpa_b4_s2048", "llama-3-8b", 8, micro_batch_size=4, expect_s=15, note="batch x4"),
    _case("l3-8b-L8_autocast_b1_s2048", "llama-3-8b", 8, precision="bf16-mixed", expect_s=15, note="bf16 autocast"),
    _case(
        "l3-8b-L8_autocast_gc_b1_s2048",
        "llama-3-8b",
        8,
        precision="bf16-mixed",
        gradient_checkpointing=True,
        expect_s=15,
        note="bf16 autocast + full checkpointing",
    ),
    _case(
        "l3-8b_lora-qv-r16_bf16_b1_s4096",
        "llama-3-8b",
        method="lora",
        lora_rank=16,
        lora_alpha=32,
        seq_len=4096,
        expect_s=20,
        note="LoRA r16 on q,v (PEFT: fp32 adapters on a bf16 base)",
    ),
    _case(
        "l3-8b_lora-all-r8_bf16_b1_s4096",
        "llama-3-8b",
        method="lora",
        lora_targets="all-linear",
        seq_len=4096,
        expect_s=20,
        note="LoRA r8 on every block linear",
    ),
    _case(
        "l3-8b_lora-all-r8_bf16_gc_b2_s4096",
        "llama-3-8b",
        method="lora",
        lora_targets="all-linear",
        gradient_checkpointing=True,
        micro_batch_size=2,
        seq_len=4096,
        expect_s=25,
        note="LoRA all-linear + checkpointing, batch 2",
    ),
    _case(
        "l3-8b_qlora-all-r16_b1_s2048",
        "llama-3-8b",
        method="qlora",
        lora_rank=16,
        lora_alpha=32,
        lora_targets="all-linear",
        expect_s=25,
        note="QLoRA NF4 + double quant, bf16 compute, fp32 adapters, no prepare_model_for_kbit_training (TRL)",
    ),
    _case(
        "l3-8b_qlora-all-r16_prep_gc_b1_s2048",
        "llama-3-8b",
        method="qlora",
        lora_rank=16,
        lora_alpha=32,
        lora_targets="all-linear",
        kbit_prepare=True,
        gradient_checkpointing=True,
        expect_s=30,
        note="QLoRA after peft.prepare_model_for_kbit_training (fp32 non-4-bit weights, reentrant checkpointing)",
    ),
    _case("qwen2-7b_bf16_gc_b1_s4096", "qwen2-7b", gradient_checkpointing=True, seq_len=4096, expect_s=25),
    _case(
        "mistral-7b_bf16_gc_b2_s4096",
        "mistral-7b",
        gradient_checkpointing=True,
        micro_batch_size=2,
        seq_len=4096,
        expect_s=25,
        note="Mistral-7B-v0.1 with its 4096-token sliding window",
    ),
    _case(
        "l3-8b_bf16_gc_foreach_b1_s4096",
        "llama-3-8b",
        gradient_checkpointing=True,
        seq_len=4096,
        expect_s=25,
        note="full fine-tune, pure bf16, AdamW foreach",
    ),
    _case(
        "l3-8b_bf16_gc_fused_b1_s4096",
        "llama-3-8b",
        gradient_checkpointing=True,
        seq_len=4096,
        optimizer_impl="fused",
        expect_s=25,
        note="as the foreach case, AdamW fused",
    ),
    _case(
        "l3-8b_autocast_gc_fused_b1_s2048",
        "llama-3-8b",
        precision="bf16-mixed",
        gradient_checkpointing=True,
        optimizer_impl="fused",
        expect_s=40,
        note="fp32 weights + AdamW (16 B/param), near the H200's capacity",
    ),
    _case(
        "l3-8b_autocast_gc_foreach_b1_s2048",
        "llama-3-8b",
        precision="bf16-mixed",
        gradient_checkpointing=True,
        expect_s=40,
        note="as the fused case with foreach's param-sized temporaries: expected not to fit",
    ),
)

# Tiny versions keep each case's structure (family, GQA ratio where it divides, precision, checkpointing,
# attention, method, optimizer) at a size that runs in seconds on a CPU.
TINY_DIMS = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2}
TINY_HEADS = 4
TINY_BATCH = {"micro_batch_size": 2, "seq_len": 64}


def tiny(case: dict[str, Any]) -> dict[str, Any]:
    """The case at CPU size: same structure, a model of ~0.1 M parameters, batch at most 2 x 64."""
    c = resolve(case)
    cfg = dict(c["hf_config"])
    kv_groups = cfg["num_attention_heads"] // cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    cfg |= TINY_DIMS
    cfg["num_attention_heads"] = TINY_HEADS
    cfg["num_key_value_heads"] = max(1, TINY_HEADS // min(kv_groups, TINY_HEADS))
    cfg["max_position_embeddings"] = max(TINY_BATCH["seq_len"], 128)
    if "sliding_window" in cfg:  # the window keeps its relation to the sequence (at least as long, or shorter)
        full = cfg["sliding_window"] >= c["seq_len"]
        cfg["sliding_window"] = TINY_BATCH["seq_len"] if full else TINY_BATCH["seq_len"] // 2
    out = {k: v for k, v in case.items() if k not in ("shape", "layers")}
    out |= {"id": f"tiny_{c['id']}", "hf_config": cfg, "expect_s": 5}
    out["micro_batch_size"] = min(c["micro_batch_size"], TINY_BATCH["micro_batch_size"])
    out["seq_len"] = TINY_BATCH["seq_len"]
    out["steps"] = 2
    return out


PLAN_SETS = {
    "default": lambda: [copy.deepcopy(c) for c in DEFAULT_SET],
    "tiny": lambda: [tiny(c) for c in DEFAULT_SET],
}


class CaseError(ValueError):
    """A case that cannot run: one line naming the case and the key."""


def resolve(case: dict[str, Any]) -> dict[str, Any]:
    """The case with its defaults and its model's full config.json; a `CaseError` for a bad one."""
    cid = case.get("id")
    if not isinstance(cid, str) or not cid:
        raise CaseError(f"a case without an id: {case!r}")
    unknown = sorted(set(case) - set(KEYS))
    if unknown:
        raise CaseError(f"{cid}: unknown key(s) {', '.join(unknown)}")
    c = {**DEFAULTS, **copy.deepcopy(case)}
    if "hf_config" not in c:
        shape = c.pop("shape", None)
        if shape not in SHAPES:
            raise CaseError(f"{cid}: shape {shape!r} is not one of {', '.join(SHAPES)} (or give hf_config)")
        c["hf_config"] = dict(SHAPES[shape])
    c.pop("shape", None)
    layers = c.pop("layers", None)
    if layers is not None:
        c["hf_config"]["num_hidden_layers"] = layers
    if c["hf_config"].get("model_type") not in FAMILIES:
        raise CaseError(f"{cid}: model_type must be one of {', '.join(FAMILIES)}")
    for key, allowed in CHOICES.items():
        if c[key] not in allowed:
            raise CaseError(f"{cid}: {key} = {c[key]!r}, not one of {', '.join(map(str, allowed))}")
    for key in POSITIVE:
        if not isinstance(c[key], int) or isinstance(c[key], bool) or c[key] < 1:
            raise CaseError(f"{cid}: {key} must be a positive integer, not {c[key]!r}")
    if c["optimizer_impl"] == "fused" and c["optimizer"] != "adamw":
        raise CaseError(f"{cid}: fused is modelled for AdamW only")
    if c["kbit_prepare"] and c["method"] != "qlora":
        raise CaseError(f"{cid}: kbit_prepare is for method = qlora")
    if c["method"] == "qlora" and c["precision"] == "fp32":
        raise CaseError(f"{cid}: a QLoRA base is loaded in bf16 (precision bf16 or bf16-mixed)")
    return c


def resolve_all(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [resolve(c) for c in cases]
    ids = [c["id"] for c in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CaseError(f"duplicate case id(s): {', '.join(dup)}")
    return out


def select(cases: list[dict[str, Any]], only: list[str] | None) -> list[dict[str, Any]]:
    """The cases whose id starts with one of `only` (all when empty); a `CaseError` when one matches nothing."""
    if not only:
        return cases
    missing = [p for p in only if not any(c["id"].startswith(p) for c in cases)]
    if missing:
        raise CaseError(f"--only {', '.join(missing)}: no such case (see --list)")
    return [c for c in cases if any(c["id"].startswith(p) for p in only)]


def hf_config_kwargs(c: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(model_type, keyword arguments of transformers.AutoConfig.for_model) for a resolved case."""
    cfg = {k: v for k, v in c["hf_config"].items() if k != "model_type"}
    return c["hf_config"]["model_type"], {**cfg, **NO_DROPOUT, "use_cache": False}


def peft_targets(c: dict[str, Any]) -> list[str] | str:
    """PEFT's target_modules: q and v projections, or PEFT's "all-linear" (every linear but the output layer)."""
    return ["q_proj", "v_proj"] if c["lora_targets"] == "qv" else "all-linear"


PRECISION = {"fp32": "fp32", "bf16-mixed": "bf16-autocast", "bf16": "bf16-pure"}


def plan_data(c: dict[str, Any], gpu: str = "h200") -> dict[str, Any]:
    """The vramplan plan data of a resolved case, on one GPU (`gpu`: a hardware preset id). Needs vramplan."""
    from vramplan.core.plan.architecture.hf_config import map_config

    precision = PRECISION[c["precision"]]
    if c["method"] == "qlora" and c["kbit_prepare"]:
        precision = "fp32"  # prepare_model_for_kbit_training casts every 16-bit weight that is not 4-bit to fp32
    training: dict[str, Any] = {
        "micro_batch_size": c["micro_batch_size"],
        "seq_len": c["seq_len"],
        "grad_accum_steps": c["grad_accum_steps"],
        "precision": precision,
        "optimizer": c["optimizer"],
        "optimizer_impl": c["optimizer_impl"],
        "method": c["method"],
    }
    if c["method"] != "full":
        training["lora_rank"] = c["lora_rank"]
        training["lora_targets"] = ["q", "v"] if c["lora_targets"] == "qv" else ["all-linear"]
    if c["method"] == "qlora":
        training["quantization"] = c["quant_type"]
        training["double_quantization"] = c["double_quant"]
    return {
        "model": map_config(c["hf_config"]),
        "hardware": {"gpu": gpu, "gpus_per_node": 1, "nodes": 1},
        "training": training,
        "strategy": {
            "gradient_checkpointing": "full" if c["gradient_checkpointing"] else "none",
            "attention": "flash" if c["attention"] == "sdpa" else "eager",
            "zero_stage": 0,
        },
    }


def future_sets(c: dict[str, Any]) -> dict[str, Any]:
    """Plan keys (dotted, with their value) that say more about the case than today's plan keys can; each is used
    where the installed vramplan accepts it (the QLoRA keys proposed in issue 13)."""
    out: dict[str, Any] = {}
    if c["method"] != "full" and c["lora_dropout"]:
        out["training.lora_dropout"] = c["lora_dropout"]
    if c["method"] == "qlora":
        out["training.kbit_prepare"] = c["kbit_prepare"]
        out["training.bnb_compute_dtype"] = c["compute_dtype"]
        out["training.lora_dtype"] = "fp32"  # PEFT's default (autocast_adapter_dtype=True)
        out["training.quantized_modules"] = "block-linears"  # transformers' 4-bit loading keeps the lm_head
    return out


def tokens_per_step(c: dict[str, Any]) -> int:
    return c["micro_batch_size"] * c["seq_len"] * c["grad_accum_steps"]
