#!/usr/bin/env python3
"""Write tests/data/param_counts.json: what transformers builds from each config.json of tests/data/hf_configs.

Usage, from the repository root (an environment with torch and transformers):  python -m bench.data.param_counts
[-o tests/data/param_counts.json]

For each config (its ``_source`` key dropped): ``AutoConfig.for_model(**config)`` and
``AutoModelForCausalLM.from_config`` on ``torch.device("meta")`` (no memory, no weights); parameters counted once
each (tied weights once), by module from their names: embeddings, lm_head, attention (with gpt-oss's sinks apart),
norms (q/k norms included), routers, experts, shared experts (with their gate), dense MLPs. Active = embeddings +
lm_head + attention + sinks + norms + routers + shared experts + dense MLPs + experts x top_k / E. DeepSeek-V3's
multi-token-prediction module, which transformers does not build, is counted apart (``mtp_unique_params``: one MoE
decoder layer, ``eh_proj`` 2h x h, ``enorm``, ``hnorm`` and the shared head's norm). The published counts
(bench/data/published_param_counts.json, each with its source) are compared with the built ones.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers

HERE = Path(__file__).resolve().parent
CONFIGS = Path("tests/data/hf_configs")
OUT = Path("tests/data/param_counts.json")
ACTIVE_DEFINITION = (
    "embeddings + lm_head + attention + sinks + norms + routers + shared experts + dense MLPs + experts*top_k/E "
    "(embedding matrix counted whole, like the model cards of Mixtral/Qwen3)"
)


def module_of(name: str) -> str:
    """The module kind of a parameter, from its name in transformers' causal-LM classes."""
    if re.search(r"(^|\.)(lm_head|embed_out)\.", name):
        return "lm_head"
    if re.search(r"(embed_tokens|wte|word_embeddings|embed_in)\.", name):
        return "embeddings"
    if name.endswith(".sinks"):
        return "sinks"
    if re.search(r"norm|(^|\.)ln_", name):
        return "norms"
    if ".shared_expert" in name:
        return "shared_experts"
    if ".experts." in name or name.endswith(".experts"):
        return "experts"
    if re.search(r"\.(mlp|block_sparse_moe)\.(gate|router)\.", name):
        return "routers"
    if re.search(r"\.(self_attn|attn|attention)\.", name):
        return "attention"
    return "dense_mlp"


def built(config: dict[str, Any]) -> Any:
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cfg, transformers.AutoModelForCausalLM.from_config(cfg)


def counts(config: dict[str, Any]) -> dict[str, Any]:
    cfg, model = built(config)
    by: dict[str, int] = {}
    for name, p in model.named_parameters():  # named_parameters() yields a tied weight once
        kind = module_of(name)
        by[kind] = by.get(kind, 0) + p.numel()
    total = sum(by.values())
    experts = by.get("experts", 0)
    n_experts = next(
        (getattr(cfg, k) for k in ("num_local_experts", "n_routed_experts", "num_experts") if getattr(cfg, k, None)), 0
    )
    top_k = getattr(cfg, "num_experts_per_tok", 0) or 0
    active = total - experts + (experts * top_k // n_experts if n_experts else 0)
    out: dict[str, Any] = {"total": total, "active": active, "by_module": dict(sorted(by.items()))}
    if getattr(cfg, "num_nextn_predict_layers", 0):
        h = cfg.hidden_size
        moe_layer = next(layer for layer in model.model.layers if hasattr(layer.mlp, "experts"))
        layer_params = sum(p.numel() for p in moe_layer.parameters())
        out["mtp_unique_params"] = cfg.num_nextn_predict_layers * (layer_params + 2 * h * h + 3 * h)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    published = json.loads((HERE / "published_param_counts.json").read_text())["counts"]
    doc: dict[str, Any] = {
        "_meta": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "method": "AutoModelForCausalLM.from_config on torch.device('meta'); model.parameters() deduplicated",
            "active_definition": ACTIVE_DEFINITION,
        }
    }
    for path in sorted(CONFIGS.glob("*.json")):
        raw = json.loads(path.read_text())
        source = raw.pop("_source")
        row = {"hf_repo": source["hf_repo"], "model_type": raw["model_type"], **counts(raw)}
        if path.stem in published:
            pub = published[path.stem]
            row["published"] = {
                **pub,
                "total_rel_diff": round(row["total"] / pub["total"] - 1, 4),
                "active_rel_diff": round(row["active"] / pub["active"] - 1, 4),
            }
            row = {k: row[k] for k in ("hf_repo", "model_type", "total", "active", "by_module", "published")} | {
                k: v for k, v in row.items() if k == "mtp_unique_params"
            }
        doc[path.stem] = row
        print(f"{path.stem}: total {row['total']:,} active {row['active']:,}", file=sys.stderr)
    args.out.write_text(json.dumps(doc, indent=1))  # no final newline, as first committed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
