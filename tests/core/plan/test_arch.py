"""Parameter counts, exact to the parameter, and LoRA's trainable counts."""

from __future__ import annotations

import pytest

from vramplan.core.plan.architecture.arch import build_arch, lora_params_per_layer, lora_roles
from vramplan.core.plan.catalogue.presets import registry
from vramplan.core.plan.schema.plan import plan_from_dict

# Published totals (issue #2 and the models' cards / papers; also in each preset file's `params`)
PUBLISHED = {
    "llama-7b": 6_738_415_616,
    "bloom-7b1": 7_069_016_064,
    "qwen2.5-72b": 72_706_203_648,
    "llama-2-70b": 68_976_648_192,
    "qwen1.5-72b": 72_287_920_128,
    "llama-3-8b": 8_030_261_248,
    "llama-2-13b": 13_015_864_320,
    "llama-3-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-0.5b": 494_032_768,
    "bloom-560m": 559_214_592,
    "tinyllama-1.1b": 1_100_048_384,
    "llama-2-7b": 6_738_415_616,
}


@pytest.mark.parametrize(("preset", "count"), sorted(PUBLISHED.items()))
def test_preset_parameter_count_exact(preset: str, count: int) -> None:
    plan = plan_from_dict({"model": {"preset": preset}})
    assert plan.model.arch().total_params == count


def test_every_preset_declares_its_count_and_source() -> None:
    for mp in registry().models.values():
        assert mp.source
        assert mp.params == build_arch(**mp.config).total_params, mp.id


def test_llama7b_by_hand() -> None:
    # embedding + lm_head 2 x 32000 x 4096; per layer 4 x 4096^2 (q,k,v,o) + 3 x 4096 x 11008 (SwiGLU) + 2 x 4096
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert 2 * 32000 * 4096 + 32 * per_layer + 4096 == 6_738_415_616


def test_gqa_shrinks_k_and_v_only() -> None:
    mha = build_arch("llama", 32000, 4096, 14336, 32, 32, 32, False)
    gqa = build_arch("llama", 32000, 4096, 14336, 32, 32, 8, False)
    # k and v go from 4096x4096 to 4096x1024 each
    assert mha.total_params - gqa.total_params == 32 * 2 * (4096 * 4096 - 4096 * 1024)


def test_lora_counts_llama7b() -> None:
    arch = build_arch("llama", 32000, 4096, 11008, 32, 32, 32, False)
    # r (d_in + d_out) per adapted matrix: q,v -> 2 x 8 x 8192 per layer
    assert 32 * lora_params_per_layer(arch, lora_roles(arch, ("q", "v")), 8) == 4_194_304
    # all seven linears: 4 x 8 x 8192 + 3 x 8 x (4096 + 11008) = 624,640 per layer
    assert 32 * lora_params_per_layer(arch, lora_roles(arch, ("all-linear",)), 8) == 19_988_480


def test_bloom_fused_qkv_lora() -> None:
    arch = build_arch("bloom", 250880, 4096, 16384, 30, 32, 32, True)
    assert lora_params_per_layer(arch, lora_roles(arch, ("qkv",)), 8) == 8 * (4096 + 3 * 4096)
