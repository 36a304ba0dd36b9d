"""Models from a local config.json: each family's own key names, exact parameter counts, clear errors.

Every config below is the model's published config.json (abridged to the keys transformers reads for the
architecture; keys left out take transformers' defaults, as they do when transformers loads the file). The
expected counts are the published ones, and bench/measure/check_params.py confirms that transformers 5.24 builds
exactly that many parameters from the same dicts (``AutoModelForCausalLM.from_config`` on the meta device).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.data.published_configs import REAL
from tests.core.plan.test_model_types import HF_CONFIGS
from vramplan.core.files.planio import load_plan
from vramplan.core.plan.architecture.hf_config import SUPPORTED, map_config, read_hf_config
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict


def write_config(tmp_path: Path, config: dict[str, Any], name: str = "ckpt") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.mark.parametrize("name", sorted(REAL))
def test_published_parameter_count_exact(tmp_path: Path, name: str) -> None:
    config, count, _source = REAL[name]
    ckpt = write_config(tmp_path, config, name)
    plan = plan_from_dict({"model": {"hf_config": str(ckpt)}, "training": {"seq_len": 1024}})
    assert plan.model.arch().total_params == count


def test_every_family_has_a_real_config() -> None:
    new = {json.loads(p.read_text())["model_type"] for p in HF_CONFIGS.glob("*.json")}
    multimodal = [json.loads(p.read_text()) for p in (HF_CONFIGS.parent / "multimodal").glob("*.json")]
    new |= {c["model_type"] for c in multimodal} | {c["text_config"]["model_type"] for c in multimodal}
    assert {c["model_type"] for c, _, _ in REAL.values()} | new == set(SUPPORTED)


def test_gpt2_by_hand() -> None:
    """GPT-2 124M: wte 50257 x 768 + wpe 1024 x 768; per block ln_1, ln_2 (2 x 2 x 768), c_attn 768 x 2304 + 2304,
    c_proj 768^2 + 768, c_fc 768 x 3072 + 3072, c_proj 3072 x 768 + 768; ln_f 2 x 768; lm_head tied."""
    per_block = 4 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768)
    total = 50257 * 768 + 1024 * 768 + 12 * per_block + 2 * 768
    assert total == 124_439_808
    arch = plan_from_dict({"model": map_config(REAL["gpt2"][0]), "training": {"seq_len": 1024}}).model.arch()
    assert (arch.positions, arch.layer_params) == (1024, per_block)


def test_falcon_7b_multi_query_by_hand() -> None:
    """Falcon-7B: query_key_value 4544 x (4544 + 2 x 64) (one key/value head), dense 4544^2, MLP 2 x 4544 x 18176,
    one shared LayerNorm (2 x 4544) per block, no biases; embedding 65024 x 4544 tied; ln_f."""
    per_block = 4544 * (4544 + 128) + 4544**2 + 2 * 4544 * 18176 + 2 * 4544
    assert 65024 * 4544 + 32 * per_block + 2 * 4544 == 6_921_720_704
    m = map_config(REAL["falcon-7b"][0])
    assert (m["num_key_value_heads"], m["use_parallel_residual"]) == (1, True)
    assert plan_from_dict({"model": m}).model.arch().n_norms == 1


def test_falcon_new_architecture_has_two_norms_and_grouped_heads() -> None:
    m = map_config(REAL["falcon-40b"][0])
    arch = plan_from_dict({"model": m}).model.arch()
    assert (arch.kv, arch.n_norms, arch.linear("qkv").d_out) == (8, 2, (128 + 2 * 8) * 64)


def test_gemma_head_dim_independent_of_hidden_size() -> None:
    """Gemma-7B: 16 heads x 256 = 4096 != hidden 3072, so q is 3072 -> 4096 and o 4096 -> 3072."""
    arch = plan_from_dict({"model": map_config(REAL["gemma-7b"][0])}).model.arch()
    assert (arch.linear("q").d_out, arch.linear("o").d_in, arch.tied) == (4096, 4096, True)
    assert map_config(REAL["gemma-7b"][0])["hidden_act"] == "gelu_pytorch_tanh"  # GemmaConfig's legacy rewrite


def test_phi3_fused_projections() -> None:
    arch = plan_from_dict({"model": map_config(REAL["phi-3-mini-4k"][0])}).model.arch()
    assert arch.roles() == ("qkv", "o", "gate_up", "down")
    assert arch.linear("gate_up").d_out == 2 * 8192


def test_neox_keys_and_partial_rotary() -> None:
    m = map_config(REAL["pythia-160m"][0])
    assert (m["partial_rotary_factor"], m["use_parallel_residual"], m["attention_bias"]) == (0.25, True, True)
    assert plan_from_dict({"model": m}).model.arch().rotary_dim == 16  # int(64 x 0.25)
    nested = {**REAL["pythia-160m"][0], "rope_parameters": {"partial_rotary_factor": 0.5}}
    del nested["rotary_pct"]
    assert map_config(nested)["partial_rotary_factor"] == 0.5


def test_llama_biases_count() -> None:
    base = REAL["llama-3-8b"][0]
    plain = plan_from_dict({"model": map_config(base)}).model.arch()
    biased = plan_from_dict({"model": map_config({**base, "attention_bias": True, "mlp_bias": True})}).model.arch()
    # q 4096 + k 1024 + v 1024 + o 4096 + gate/up 2 x 14336 + down 4096 per layer
    assert biased.total_params - plain.total_params == 32 * (4096 + 1024 + 1024 + 4096 + 2 * 14336 + 4096)


def test_plan_file_hf_config_relative_to_the_plan(tmp_path: Path) -> None:
    write_config(tmp_path / "models", REAL["pythia-160m"][0], "pythia")
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "p.toml").write_text('[model]\nhf_config = "../models/pythia"\nnum_hidden_layers = 6\n')
    plan = load_plan(plans / "p.toml")
    assert plan.model.model_type == "gpt_neox"
    assert plan.model.num_hidden_layers == 6  # a key in the plan overrides the file
    assert Path(plan.model.hf_config or "").is_absolute()
    assert plan_from_dict(plan.dump()) == plan


def test_config_json_file_or_directory(tmp_path: Path) -> None:
    d = write_config(tmp_path, REAL["gpt2"][0])
    assert read_hf_config(d).model == read_hf_config(d / "config.json").model
    assert read_hf_config(d).name == "ckpt"
    (d / "config.json").write_text(json.dumps({**REAL["gpt2"][0], "_name_or_path": "openai-community/gpt2"}))
    assert read_hf_config(d).name == "openai-community/gpt2"  # a rewrite is seen (size/mtime key)


def test_changing_hf_config_replaces_the_model(tmp_path: Path) -> None:
    a = write_config(tmp_path, REAL["pythia-160m"][0], "a")
    b = write_config(tmp_path, REAL["phi-3-mini-4k"][0], "b")
    plan = plan_from_dict({"model": {"hf_config": str(a), "num_hidden_layers": 2}})
    plan = plan.with_changes({"model.hf_config": str(b)})
    assert (plan.model.model_type, plan.model.num_hidden_layers) == ("phi3", 32)


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"model_type": "olmoe", "num_experts": 64, "hidden_size": 2048}, "mixture-of-experts config: num_experts"),
        ({"model_type": "jamba", "num_experts": 16, "hidden_size": 4096}, "'jamba': a hybrid of Mamba and attention"),
        ({"model_type": "mamba", "hidden_size": 768}, "unsupported model_type 'mamba'; supported: llama"),
        ({"hidden_size": 768}, 'no "model_type" key'),
        ({**REAL["gpt2"][0], "n_head": 0}, "n_head: must be a positive integer"),
        ({**REAL["llama-3-8b"][0], "hidden_size": "4096"}, "hidden_size: must be a positive integer"),
        ({**REAL["falcon-7b"][0], "multi_query": "yes"}, "multi_query: must be true or false"),
        ({**REAL["gpt2"][0], "activation_function": "swish"}, "activation 'swish' is not modelled"),
    ],
)
def test_unsupported_or_incomplete_configs_say_why(tmp_path: Path, config: dict, needle: str) -> None:
    d = write_config(tmp_path, config)
    with pytest.raises(PlanError) as exc:
        plan_from_dict({"model": {"hf_config": str(d)}})
    line = exc.value.line()
    assert needle in line, line
    assert line.startswith("model.hf_config: ") and str(d / "config.json") in line
    if "supported" in needle or "experts" in needle:
        assert all(t in line for t in SUPPORTED)


def test_file_problems_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"no config\.json in this directory"):
        read_hf_config(tmp_path)
    with pytest.raises(PlanError, match="no such file or directory"):
        read_hf_config(tmp_path / "nope")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(PlanError, match=r"not valid JSON: .* \(line 1, column 2\)"):
        read_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(PlanError, match="expected a JSON object"):
        read_hf_config(bad)


def test_preset_and_hf_config_are_exclusive(tmp_path: Path) -> None:
    d = write_config(tmp_path, REAL["gpt2"][0])
    with pytest.raises(PlanError) as exc:
        plan_from_dict({"model": {"preset": "llama-7b", "hf_config": str(d)}})
    assert exc.value.where == "model.hf_config"


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ({"attention_bias": True}, "model.attention_bias"),  # Qwen2's biases are fixed (q/k/v yes, o no)
        ({"use_parallel_residual": True}, "model.use_parallel_residual"),
        ({"max_position_embeddings": 4096}, "model.max_position_embeddings"),  # RoPE: no learned positions
        ({"hidden_act": "tanh"}, "model.hidden_act"),
    ],
)
def test_options_a_family_does_not_have_name_the_key(model: dict, key: str) -> None:
    with pytest.raises(PlanError) as exc:
        plan_from_dict({"model": {"preset": "qwen2.5-7b", **model}})
    assert exc.value.where == key, exc.value.line()


def test_gpt2_learned_positions_bound_the_sequence() -> None:
    model = map_config(REAL["gpt2"][0])
    with pytest.raises(PlanError) as exc:
        plan_from_dict({"model": model, "training": {"seq_len": 2048}})
    assert exc.value.where == "training.seq_len"
    assert plan_from_dict({"model": model, "training": {"seq_len": 1024}}).training.seq_len == 1024


def test_falcon_head_counts_follow_its_architecture() -> None:
    m = map_config(REAL["falcon-7b"][0])
    with pytest.raises(PlanError) as exc:
        plan_from_dict({"model": {**m, "num_key_value_heads": 71 // 71 * 3}})
    assert exc.value.where == "model.num_key_value_heads"


@pytest.mark.parametrize(
    ("name", "targets", "ok"),
    [
        ("phi-3-mini-4k", ["gate_up", "qkv"], True),
        ("phi-3-mini-4k", ["gate"], False),
        ("gpt2", ["qkv", "o", "up", "down"], True),
        ("gpt2", ["q", "v"], False),
        ("falcon-7b", ["gate"], False),
    ],
)
def test_lora_targets_follow_the_block(name: str, targets: list[str], ok: bool) -> None:
    data = {"model": map_config(REAL[name][0]), "training": {"method": "lora", "lora_targets": targets, "seq_len": 512}}
    if ok:
        plan_from_dict(data)
    else:
        with pytest.raises(PlanError) as exc:
            plan_from_dict(data)
        assert exc.value.where == "training.lora_targets"


def test_a_relative_hf_config_is_kept_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, REAL["phi-3-mini-4k"][0])
    monkeypatch.chdir(tmp_path)
    plan = plan_from_dict({"model": {"hf_config": "ckpt"}})
    assert plan.model.hf_config == str(tmp_path / "ckpt")
    monkeypatch.chdir("/")
    assert plan_from_dict(plan.dump()) == plan  # still found from elsewhere


def test_dropout_probabilities_are_read_per_family() -> None:
    """GPT-2's attn_pdrop / resid_pdrop / embd_pdrop (GPT2Config defaults 0.1 each), GPT-NeoX's hidden_dropout
    (its residual and embedding dropouts), Llama's attention_dropout; 0 leaves the key unset."""
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100}
    m = map_config(gpt2)
    assert (m["attention_dropout"], m["hidden_dropout"], m["embedding_dropout"]) == (0.1, 0.1, 0.1)
    off = map_config({**gpt2, "attn_pdrop": 0.0, "resid_pdrop": 0, "embd_pdrop": 0.0})
    assert not {"attention_dropout", "hidden_dropout", "embedding_dropout"} & set(off)
    neox = {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4}
    m = map_config({**neox, "num_hidden_layers": 2, "vocab_size": 100, "hidden_dropout": 0.2})
    assert (m["hidden_dropout"], m["embedding_dropout"]) == (0.2, 0.2) and "attention_dropout" not in m
    llama = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
    m = map_config({**llama, "num_hidden_layers": 2, "vocab_size": 100, "attention_dropout": 0.1})
    assert m["attention_dropout"] == 0.1 and "hidden_dropout" not in m
    with pytest.raises(PlanError, match="attn_pdrop"):
        map_config({**gpt2, "attn_pdrop": 1.5})
