"""Multimodal config.json files (Gemma 3 4B-27B, Llama 4): the text model read through ``text_config``, the vision
tower and projector counted exactly, frozen or trained as the plan says; what the estimate leaves out said in one
line. tests/data/multimodal holds the published config.json files (each ``_source`` says where it came from);
tests/data/multimodal_counts.json what transformers 5.25 builds from them (bench/data/multimodal_counts.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA
from vramplan.cli.parser import run
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.architecture.hf_config import map_config, read_hf_config
from vramplan.core.plan.architecture.vision import vision
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict

CONFIGS = DATA / "multimodal"
COUNTS: dict[str, Any] = json.loads((DATA / "multimodal_counts.json").read_text())
IDS = sorted(p.stem for p in CONFIGS.glob("*.json"))


def _raw(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return raw


def _plan(name: str, **training: Any) -> Any:
    return plan_from_dict(
        {"model": {"hf_config": str(CONFIGS / f"{name}.json")}, "training": {"seq_len": 1024, **training}}
    )


@pytest.mark.parametrize("name", IDS)
def test_counts_exact_against_transformers(name: str) -> None:
    """Total, text model, vision tower and projector as transformers builds them from the same file."""
    arch = _plan(name).model.arch()
    n = COUNTS[name]
    assert arch.total_params == n["total"]
    assert arch.vision_params == n["vision_tower"] + n["projector"]
    assert arch.total_params - arch.vision_params == n["text"]
    raw = _raw(name)
    seen = vision(raw["model_type"], raw, arch.h)
    assert (seen.tower_params, seen.projector_params) == (n["vision_tower"], n["projector"])


def test_gemma3_12b_by_hand() -> None:
    """SigLIP so400m at 896 px: patch conv 1152 x 3 x 14^2 + 1152, 64^2 = 4096 positions x 1152, 27 layers of
    4 (1152^2 + 1152) + (2 x 1152 x 4304 + 4304 + 1152) + 4 x 1152 = 15,239,504, post LayerNorm 2 x 1152, no head;
    the projector 1152 x 3840 + 1152; an image is 256 soft tokens. Text: the gemma-3-12b preset's 11,766,034,176."""
    layer = 4 * (1152**2 + 1152) + (2 * 1152 * 4304 + 4304 + 1152) + 4 * 1152
    assert layer == 15_239_504
    tower = 1152 * 3 * 14**2 + 1152 + 4096 * 1152 + 27 * layer + 2 * 1152
    seen = vision("gemma3", _raw("gemma-3-12b-it"), 3840)
    assert (seen.tower_params, seen.projector_params, seen.image_tokens) == (tower, 1152 * 3840 + 1152, 256)
    m = map_config(_raw("gemma-3-12b-it"))
    assert m["model_type"] == "gemma3_text" and m["tie_word_embeddings"] is True and m["sliding_layers"] == 40
    assert _plan("gemma-3-12b-it").model.arch().total_params - tower - 1152 * 3840 - 1152 == 11_766_034_176


def test_llama4_scout_by_hand() -> None:
    """Scout: 48 MoE layers of 16 experts (3 x 5120 x 8192 each), a shared expert of 8192, a router 16 x 5120;
    attention 5120 x (40 + 8 + 8) x 128 + 40 x 128 x 5120; untied 202,048 x 5120 embedding and lm_head; 17B active
    (one expert and the shared one per token), 109B total with the vision tower (model card)."""
    attn = 5120 * (40 + 2 * 8) * 128 + 40 * 128 * 5120
    layer = attn + 16 * 3 * 5120 * 8192 + 3 * 5120 * 8192 + 16 * 5120 + 2 * 5120
    text = 48 * layer + 2 * 202_048 * 5120 + 5120
    arch = _plan("llama-4-scout-17b-16e").model.arch()
    assert arch.total_params - arch.vision_params == text == 107_769_861_120
    assert arch.moe is not None and (arch.moe.n_experts, arch.moe.top_k, arch.moe.moe_layers) == (16, 1, 48)
    assert round(arch.active_params / 1e9) == 17 and round(arch.total_params / 1e9) == 109


def test_interleaved_moe_layers() -> None:
    """Llama4TextConfig.__post_init__: MoE layers every ``interleave_moe_layer_step``-th from step - 1, unless
    ``moe_layers`` lists them; the others dense of ``intermediate_size_mlp``."""
    text = {**_raw("llama-4-scout-17b-16e")["text_config"], "interleave_moe_layer_step": 2}
    assert map_config(text)["dense_layers"] == 24
    assert map_config({**text, "moe_layers": [0, 47, 99]})["dense_layers"] == 46
    with pytest.raises(PlanError, match="moe_layers: must be a list of layer indices"):
        map_config({**text, "moe_layers": "all"})


def test_frozen_or_trained_tower() -> None:
    """Frozen (the default, LLaMA-Factory's freeze_vision_tower): held in the weights, not trained; trained: its
    gradients and optimizer states too. LoRA keeps it frozen."""
    frozen, trained = _plan("gemma-3-12b-it"), _plan("gemma-3-12b-it", vision_tower="trained")
    v = frozen.model.arch().vision_params
    ef, et = estimate(frozen), estimate(trained)
    assert et.params_trainable - ef.params_trainable == v
    assert ef.params_total == et.params_total == COUNTS["gemma-3-12b-it"]["total"]
    # one GPU, bf16-autocast: fp32 weights 4 B, gradients 4 B, Adam's two states 8 B per trained element
    assert et.per_gpu()["gradients"] - ef.per_gpu()["gradients"] == 4 * v
    assert et.per_gpu()["optimizer_states"] - ef.per_gpu()["optimizer_states"] == 8 * v
    assert ef.per_gpu()["parameters"] == et.per_gpu()["parameters"]
    assert (
        ef.parameters_json()["vision"] == v
        and "vision" not in estimate(plan_from_dict({"model": {"preset": "llama-7b"}})).parameters_json()
    )
    with pytest.raises(PlanError, match=r"training\.vision_tower: a trained vision tower needs full fine-tuning"):
        _plan("gemma-3-12b-it", method="lora", vision_tower="trained")
    with pytest.raises(PlanError, match="needs a multimodal model"):
        plan_from_dict({"model": {"preset": "llama-7b"}, "training": {"vision_tower": "trained"}})


def test_what_is_left_out_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # 1: a 109B model in fp32 weights does not fit 8 x A100 (the notes are printed either way)
    assert run(["estimate", "--hf-config", str(CONFIGS / "llama-4-scout-17b-16e.json"), "--gpus", "8"]) == 1
    out = capsys.readouterr().out
    note = out.split("note: vision tower and projector: ", 1)[1].split("\nnote:", 1)[0]
    assert note.startswith("871,932,416 params in the weights (frozen") and "not estimated" in note
    assert "text_config.attention_chunk_size, text_config.use_qk_norm" in out  # read, not modelled: said


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"text_config": [1]}, "text_config: must be an object"),
        ({"text_config": {"model_type": "llama"}}, "text_config.model_type: a gemma3 config's text model"),
        ({"text_config": {"hidden_size": "wide"}}, "text_config.hidden_size: must be a positive integer"),
        ({"vision_config": "siglip"}, "vision_config: must be an object"),
        ({"vision_config": {"patch_size": 0}}, "vision_config.patch_size: must be a positive integer"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings: must be true or false"),
        ({"mm_tokens_per_image": -1}, "mm_tokens_per_image: must be a positive integer"),
    ],
)
def test_bad_multimodal_keys_are_named(tmp_path: Path, change: dict[str, Any], where: str) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**_raw("gemma-3-12b-it"), **change}))
    with pytest.raises(PlanError, match=where):
        read_hf_config(p)


def test_defaults_of_the_config_classes() -> None:
    """A config giving only the model_type builds what transformers builds: Gemma3Config's defaults (a 4B-like
    text model, SigLIP base at 224 px with its pooling head) and Llama4Config's (Scout's text model)."""
    g = map_config({"model_type": "gemma3"})
    assert g["model_type"] == "gemma3_text" and g["hidden_size"] == 2304 and g["vision_params"] > 0
    assert map_config({"model_type": "llama4"})["num_experts"] == 16
