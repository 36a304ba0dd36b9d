#!/usr/bin/env python3
"""Write the hybrid models' config.json files that transformers writes and tests/data/hybrid_counts.json: what
transformers builds from each config.json of tests/data/hybrid.

Usage, from the repository root (an environment with torch and transformers):  python -m bench.data.hybrid_counts

The config classes' defaults are the sizes of the checkpoints their docstrings name (``@auto_docstring(checkpoint=
...)``: Mamba2Config state-spaces/mamba2-2.8b's layout at 7B sizes, JambaConfig ai21labs/Jamba-v0.1, Qwen3NextConfig
Qwen/Qwen3-Next-80B-A3B-Instruct, NemotronHConfig NVIDIA-Nemotron-3-Nano-30B-A3B's block kinds); each is written as
transformers 4.x's ``save_pretrained`` wrote a config.json (``json.dumps``: ``time_step_limit`` as
``[0.0, Infinity]``, as the Hub's files have it), with a ``_source`` saying so. The transcribed files (a
``_source`` without ``"written_by"``) are kept as they are. For each file: ``AutoConfig.for_model(**config)``
and ``AutoModelForCausalLM.from_config`` on ``torch.device("meta")``, parameters counted once each, and the block
kinds (``layer_types``).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers

CONFIGS = Path("tests/data/hybrid")
OUT = Path("tests/data/hybrid_counts.json")
WRITTEN = {
    "mamba2-defaults": ("mamba2", "state-spaces/mamba2-2.8b"),
    "jamba-v0.1": ("jamba", "ai21labs/Jamba-v0.1"),
    "qwen3-next-80b-a3b": ("qwen3_next", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    "nemotron-h-defaults": ("nemotron_h", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
}


# Small configs that turn on what the defaults leave off (biases, a latent MoE, legacy key names, offsets, a
# dense layer among experts): counted by transformers here, by core.plan.architecture.hybrid in the tests.
VARIANTS: dict[str, dict[str, Any]] = {
    "mamba2_biases_tied": {"model_type": "mamba2", "hidden_size": 64, "num_heads": 8, "head_dim": 16, "state_size": 16,
                           "n_groups": 2, "num_hidden_layers": 2, "vocab_size": 100, "use_bias": True,
                           "use_conv_bias": False, "tie_word_embeddings": True},
    "nemotron_h_pattern_biases": {"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 96,
                                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                  "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
                                  "vocab_size": 100, "n_routed_experts": 4, "moe_intermediate_size": 32,
                                  "moe_shared_expert_intermediate_size": 48, "hybrid_override_pattern": "M-M*EME",
                                  "mlp_bias": True, "attention_bias": True, "use_bias": True},
    "nemotron_h_latent_legacy": {"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 96,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                 "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "vocab_size": 100,
                                 "n_routed_experts": 4, "moe_intermediate_size": 32,
                                 "moe_shared_expert_intermediate_size": 48,
                                 "layers_block_type": ["mamba", "moe", "attention", "moe"], "moe_latent_size": 24,
                                 "mamba_n_groups": 4, "mamba_d_conv": 3},
    "jamba_offsets_dt_rank": {"model_type": "jamba", "hidden_size": 64, "intermediate_size": 96,
                              "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
                              "num_experts": 4, "vocab_size": 100, "mamba_d_state": 8, "attn_layer_period": 4,
                              "attn_layer_offset": 2, "expert_layer_period": 3, "expert_layer_offset": 0,
                              "mamba_proj_bias": True, "mamba_dt_rank": 7},
    "qwen3_next_sparse_step": {"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 96,
                               "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 16, "linear_key_head_dim": 8, "linear_value_head_dim": 16,
                               "linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_experts": 4,
                               "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                               "num_experts_per_tok": 2, "vocab_size": 100, "mlp_only_layers": [1],
                               "decoder_sparse_step": 2, "full_attention_interval": 3, "attention_bias": True},
}  # fmt: skip


def written(model_type: str, checkpoint: str) -> str:
    """The config.json transformers writes for its config class's defaults, with a ``_source``."""
    data = transformers.AutoConfig.for_model(model_type).to_dict()
    data["_source"] = {
        "hf_repo": checkpoint,
        "written_by": f"python -m bench.data.hybrid_counts: AutoConfig.for_model({model_type!r}).to_dict() "
        f"(transformers {transformers.__version__}), the defaults its docstring names {checkpoint} for, written "
        "with json.dumps as transformers 4.x's to_json_string wrote config.json (Infinity bare; 5.x writes "
        '{"__float__": "Infinity"})',
    }
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=True) + "\n"


def count(config: dict[str, Any]) -> dict[str, Any]:
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "_source"})
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    kinds = list(getattr(cfg, "layer_types", None) or cfg.layers_block_type)
    return {"class": type(model).__name__, "total": sum(p.numel() for p in model.parameters()), "layers": kinds}


def main() -> int:
    for name, (model_type, checkpoint) in WRITTEN.items():
        (CONFIGS / f"{name}.json").write_text(written(model_type, checkpoint))
    out: dict[str, Any] = {
        "_doc": "python -m bench.data.hybrid_counts: AutoModelForCausalLM.from_config on the meta device",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    for path in sorted(CONFIGS.glob("*.json")):
        out[path.stem] = count(json.loads(path.read_text()))
        print(path.stem, out[path.stem]["total"], file=sys.stderr)
    out["variants"] = {name: {"config": config, **count(config)} for name, config in VARIANTS.items()}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
