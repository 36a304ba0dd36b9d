"""The model `vramplan measure` builds is the plan's: for every model preset, and for the measured cases' models given
as plan keys (no config.json: the renames of `vramplan.measure.recipe.CONFIG_NAMES`), transformers builds on the
meta device exactly the parameter count the estimate uses. Skipped without the measure extra."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_truth
from vramplan.core.plan.architecture.hf_config import map_config
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.recipe import recipe

torch = pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
transformers = pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")

from vramplan.measure.build import transformers_config  # noqa: E402 - imports torch

PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "presets" / "models").glob("*.toml"))
CASES = {
    cid: {"model_type": v["resolved_case"]["family"], **v["resolved_case"]["hf_config"]}
    for name in ("families_truth.json", "moe_truth.json")
    for cid, v in load_truth(name).items()
    if "hf_config" in v["resolved_case"]
}


def meta_params(model: dict[str, Any]) -> tuple[int, int]:
    """(parameters transformers builds, the plan's count) for a plan's [model] table."""
    plan = plan_from_dict({"model": model, "hardware": {"gpus_per_node": 1}, "training": {"seq_len": 64}})
    r = recipe(plan)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = transformers.AutoModelForCausalLM.from_config(transformers_config(r))
    return sum(p.numel() for p in built.parameters()), r.expected_params


@pytest.mark.parametrize("preset", PRESETS)
def test_every_model_preset_builds_with_the_estimates_parameters(preset: str) -> None:
    built, planned = meta_params({"preset": preset})
    assert built == planned


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_measured_cases_model_from_plan_keys_builds_the_same(case: str) -> None:
    built, planned = meta_params(map_config(CASES[case]))
    assert built == planned


@pytest.mark.parametrize("name", ["gemma-3-12b-it", "llama-4-scout-17b-16e"])
def test_a_multimodal_config_measures_its_text_model(name: str) -> None:
    """`vramplan measure` runs a multimodal model's text model (its frozen vision tower is not run): built from
    text_config, as many parameters as the plan's total less model.vision_params."""
    path = Path(__file__).resolve().parents[1] / "data" / "multimodal" / f"{name}.json"
    built, planned = meta_params({"hf_config": str(path)})
    assert (
        built
        == planned
        == plan_from_dict({"model": {"hf_config": str(path)}}).model.arch().total_params
        - (plan_from_dict({"model": {"hf_config": str(path)}}).model.vision_params or 0)
    )
