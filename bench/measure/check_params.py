#!/usr/bin/env python3
"""Check vramplan's parameter counts against what transformers builds from the same config.json.

Usage, from the repository root:  python -m bench.measure.check_params  (in an environment with torch and
transformers). For every config of bench/data/published_configs.py (the published models) and the measured cases of
families_cases.json (tiny models, with their variants), build ``AutoModelForCausalLM.from_config`` on the meta
device (no memory, no weights: ``vramplan.measure.build.meta_model``), sum ``p.numel()`` over ``model.parameters()``
(tied weights once) and compare with ``vramplan.core.plan.architecture.hf_config.map_config`` -> ``Plan`` ->
``Arch.total_params``. Prints one line per config; exit 1 on any difference. Needs vramplan installed in that
environment (``pip install -e .``)."""

import json
import sys
from pathlib import Path

import transformers

from bench.data.published_configs import REAL
from vramplan.core.plan.architecture.hf_config import map_config
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.build import meta_model

ROOT = Path(__file__).resolve().parents[2]

# Variants the published configs do not cover (each changes the block structure)
VARIANTS = {
    "llama, biases, head_dim != h/a": {
        "model_type": "llama", "hidden_size": 192, "intermediate_size": 320, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 500,
        "attention_bias": True, "mlp_bias": True,
    },
    "gpt_neox sequential residual, no attention bias, tied": {
        "model_type": "gpt_neox", "hidden_size": 128, "intermediate_size": 384, "num_attention_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 500, "use_parallel_residual": False, "attention_bias": False,
        "tie_word_embeddings": True,
    },
    "falcon-rw (ALiBi, sequential, biases, all heads)": {
        "model_type": "falcon", "hidden_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
        "vocab_size": 500, "alibi": True, "bias": True, "multi_query": False, "parallel_attn": False,
    },
    "falcon new architecture, one norm": {
        "model_type": "falcon", "hidden_size": 128, "num_attention_heads": 8, "num_kv_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 500, "new_decoder_architecture": True, "num_ln_in_parallel_attn": 1,
        "ffn_hidden_size": 320,
    },
    "phi3 GQA, partial rotary, tied": {
        "model_type": "phi3", "hidden_size": 128, "intermediate_size": 320, "num_attention_heads": 8,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 500, "partial_rotary_factor": 0.75,
        "tie_word_embeddings": True, "pad_token_id": 0,
    },
    "gpt2 n_inner": {
        "model_type": "gpt2", "n_embd": 96, "n_head": 4, "n_layer": 3, "n_inner": 200, "n_positions": 64,
        "vocab_size": 500,
    },
}  # fmt: skip


def transformers_count(config: dict) -> int:
    """The parameters transformers builds from `config` (on the meta device: `vramplan.measure.build.meta_model`)."""
    model = meta_model(transformers.AutoConfig.for_model(**config))
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    configs = {name: cfg for name, (cfg, _, _) in REAL.items()} | VARIANTS
    cases = json.loads((ROOT / "bench/measure/families_cases.json").read_text())["cases"]
    for case in cases:
        configs.setdefault(f"case {case['id']}", {"model_type": case["family"], **case["hf_config"]})
    bad = 0
    for name, config in configs.items():
        want = transformers_count(config)
        got = plan_from_dict({"model": map_config(config), "training": {"seq_len": 64}}).model.arch().total_params
        published = REAL[name][1] if name in REAL else None
        ok = got == want and published in (None, want)
        bad += not ok
        extra = f" published {published:,}" if published else ""
        print(f"{'ok ' if ok else 'BAD'} {name:52s} transformers {want:>15,}  vramplan {got:>15,}{extra}")
    print(f"{len(configs)} configs, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
