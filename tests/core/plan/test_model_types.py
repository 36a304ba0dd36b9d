"""The 2024-2025 families from their published config.json: exact total and active parameter counts.

tests/data/hf_configs/*.json are the config.json files of the preset models, written from the model cards (their
``_source`` says where each came from); tests/data/param_counts.json holds what transformers 5.24 builds from the
same files (``AutoModelForCausalLM.from_config`` on the meta device, ``model.parameters()`` deduplicated; active =
embedding + lm_head + attention + norms + routers + shared and dense MLPs + top_k / E of the routed experts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA
from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.architecture.hf_config import map_config, read_hf_config
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict

HF_CONFIGS = DATA / "hf_configs"
COUNTS: dict[str, Any] = json.loads((DATA / "param_counts.json").read_text())
IDS = sorted(p.stem for p in HF_CONFIGS.glob("*.json"))


def _raw(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((HF_CONFIGS / f"{name}.json").read_text())
    return raw


@pytest.mark.parametrize("name", IDS)
def test_total_and_active_exact_against_transformers(name: str) -> None:
    arch = ModelConfig(**read_hf_config(HF_CONFIGS / f"{name}.json").model).arch()
    assert (arch.total_params, arch.active_params) == (COUNTS[name]["total"], COUNTS[name]["active"])
    if arch.moe is None:
        assert arch.active_params == arch.total_params and arch.expert_params == 0
    else:
        assert arch.expert_params == COUNTS[name]["by_module"]["experts"]


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [("mixtral-8x7b", 46.7e9, 12.9e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9), ("deepseek-v3", 671e9, 37e9)],
)
def test_model_card_figures(name: str, total: float, active: float) -> None:
    """The model cards' rounded totals, and their active counts within 2% (DeepSeek-V3's 37B counts the
    embedding and lm_head once each; ours 37.55B)."""
    arch = ModelConfig(**map_config(_raw(name))).arch()
    assert round(arch.total_params / 1e8) == round(total / 1e8)
    assert abs(arch.active_params / active - 1) < 0.02


def test_deepseek_mtp_stated_apart() -> None:
    """DeepSeek-V3's multi-token-prediction module is not in the 671B; its 11.5B block (README_WEIGHTS.md) plus
    enorm, hnorm, eh_proj and the head norm = 11,610,067,968."""
    arch = ModelConfig(**map_config(_raw("deepseek-v3"))).arch()
    assert arch.mtp_params == COUNTS["deepseek-v3"]["mtp_unique_params"]
    assert arch.mla is not None and arch.mla.q_lora == 1536 and arch.rotary_dim == 64
    assert arch.moe is not None and arch.moe.moe_layers == 58


def test_missing_keys_take_transformers_defaults() -> None:
    """A config that gives only the model_type builds what transformers builds from it (its config class's
    defaults); MixtralConfig() is 8 x 14336 experts, top-2, as Mixtral-8x7B but with a 32000 vocabulary."""
    m = map_config({"model_type": "mixtral"})
    assert (m["num_experts"], m["num_experts_per_tok"], m["num_key_value_heads"]) == (8, 2, 8)
    assert ModelConfig(**m).arch().total_params == COUNTS["mixtral-8x7b"]["total"]
    assert map_config({"model_type": "mistral", "hidden_size": 1024})["num_key_value_heads"] == 8
    assert map_config({"model_type": "gpt2"})["num_attention_heads"] == 12


def test_unknown_keys_are_ignored_with_a_note(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**_raw("qwen3-8b"), "fancy_new_thing": 3, "rope_scaling": {"rope_type": "yarn"}}))
    hf = read_hf_config(p)
    assert hf.ignored == ("fancy_new_thing",)
    assert read_hf_config(HF_CONFIGS / "llama-3.1-8b.json").ignored == ()  # rope_scaling llama3: no parameters


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ({"model_type": "llama", "num_experts": 8}, "model.num_experts"),
        ({"model_type": "mixtral", "q_lora_rank": 8}, "model.q_lora_rank"),
        ({"model_type": "qwen3", "qk_layernorm": True}, "model.qk_layernorm"),
        ({"model_type": "mixtral", "num_experts_per_tok": 9}, "model.num_experts_per_tok"),
    ],
)
def test_structure_keys_only_where_the_family_has_them(model: dict[str, Any], key: str) -> None:
    with pytest.raises(PlanError) as exc:
        plan_from_dict({"model": map_config({"model_type": model["model_type"]}) | model})
    assert exc.value.line().startswith(key)


ISSUE_PRESETS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "llama-3.3-70b",
    "qwen3-0.6b",
    "qwen3-4b",
    "qwen3-8b",
    "qwen3-14b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "gemma-2-9b",
    "gemma-2-27b",
    "gemma-3-1b",
    "gemma-3-4b",
    "gemma-3-12b",
    "gemma-3-27b",
    "olmo-2-7b",
    "olmo-2-13b",
    "phi-3.5-mini",
    "phi-4",
]


def test_presets_of_the_issue_exact_and_listed_after_the_first_three() -> None:
    """Each preset's count is the transformers count of its config.json; LLaMA-7B, BLOOM-7B1 and the 72B stay
    first in the list."""
    from vramplan.core.plan.catalogue import presets

    reg = presets.registry()
    assert [m.id for m in reg.sorted_models()[:3]] == ["llama-7b", "bloom-7b1", "qwen2.5-72b"]
    for pid in ISSUE_PRESETS:
        mp = presets.model_preset(pid)
        arch = presets.model_config({"preset": pid}).arch()
        assert arch.total_params == mp.params == COUNTS[pid]["total"], pid
        assert arch.active_params == COUNTS[pid]["active"], pid
        assert "huggingface.co" in mp.source


def test_sliding_window_layers_from_the_config() -> None:
    """Gemma 2 windows every other layer, Gemma 3 five in six (or its layer_types), gpt-oss its layer_types,
    Mistral v0.1 every layer; Qwen3 none (use_sliding_window false)."""

    def window(name: str) -> tuple[int | None, int | None]:
        m = map_config(_raw(name))
        return m.get("sliding_window"), m.get("sliding_layers")

    assert window("gemma-2-9b") == (4096, 21)
    assert window("gpt-oss-20b") == (128, 12)
    assert window("qwen3-8b") == (None, None)
    g3 = map_config(_raw("gemma-3-27b"))
    assert g3["sliding_layers"] == 62 - 62 // 6
    mistral = map_config({"model_type": "mistral", "sliding_window": 4096, "num_hidden_layers": 32})
    assert (mistral["sliding_window"], mistral["sliding_layers"]) == (4096, 32)
    assert "sliding_window" not in map_config({"model_type": "mistral", "sliding_window": None})


def test_the_cli_notes_ignored_keys(tmp_path: Path) -> None:
    import subprocess
    import sys

    p = tmp_path / "config.json"
    p.write_text(json.dumps({**_raw("qwen3-8b"), "fancy_new_thing": 3}))
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "estimate", "--hf-config", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 0
    assert "note: config.json keys not modelled, ignored: fancy_new_thing" in r.stdout


@pytest.mark.parametrize("name", IDS)
def test_each_presets_trained_context_is_its_config_jsons(name: str) -> None:
    """Issue 40.4: the largest-sequence searches stop at the trained context (a GRPO plan offered 16,777,216 tokens,
    the search's bound, where its preset had none): config.json's max_position_embeddings (Gemma 3's under
    text_config)."""
    from vramplan.core.plan.catalogue import presets

    raw = _raw(name)
    context = raw.get("max_position_embeddings", raw.get("text_config", {}).get("max_position_embeddings"))
    assert presets.model_preset(name).context == context


def test_every_built_in_model_preset_states_its_trained_context() -> None:
    """Issue 40.4 (user-40a's leftover): the presets without a config.json in tests/data state it from their own
    source: BLOOM's model cards (sequence length 2048; ALiBi, no position rows), the Qwen configs'
    max_position_embeddings."""
    from vramplan.core.plan.catalogue import presets

    reg = presets.registry()
    missing = [m.id for m in reg.sorted_models() if not reg.is_user("models", m.id) and m.context is None]
    assert missing == []
    contexts = {i: presets.model_preset(i).context for i in ("bloom-560m", "bloom-7b1", "qwen1.5-72b")}
    assert contexts == {"bloom-560m": 2048, "bloom-7b1": 2048, "qwen1.5-72b": 32768}
    contexts = {i: presets.model_preset(i).context for i in ("qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b")}
    assert contexts == {"qwen2.5-0.5b": 32768, "qwen2.5-7b": 131072, "qwen2.5-72b": 131072}
