"""User presets: TOML files in the user's config directory, same schema as the built-in ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.data.published_configs import REAL
from tests.conftest import user_dir
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.presets import user_config_dir
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import plan_from_dict

MY_MODEL = """
id = "my-llama"
name = "My LLaMA"
source = "our own fine-tune"

[config]
model_type = "llama"
vocab_size = 32000
hidden_size = 2048
intermediate_size = 5632
num_hidden_layers = 16
num_attention_heads = 16
num_key_value_heads = 4
"""

MY_GPU = """
name = "Lab GPU 48GB"
memory_mib = 49152
bf16 = true
bf16_tflops = 200.0
fp16_tflops = 200.0
fp32_tflops = 50.0
memory_bandwidth_gbs = 1500
gpu_link = "PCIe Gen5"
gpu_link_gbs = 64.0
host_link = "PCIe Gen5"
host_link_gbs = 64.0
internode_gbs = 25.0
flash_attention = true
match = ["Lab GPU 48GB"]
source = "vendor sheet"
generation = "hopper"
sm_count = 100
matmul_efficiency = 0.7
kernel_overhead_us = 2.0
time_source = "sm_count, matmul_efficiency: vendor sheet and our own mamf-finder run"
"""


def test_user_presets_load_beside_the_built_in_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = user_dir(tmp_path, monkeypatch, {"models/my-llama.toml": MY_MODEL, "hardware/lab-gpu.toml": MY_GPU})
    reg = presets.registry()
    assert "my-llama" in reg.models and "llama-7b" in reg.models
    assert reg.gpus["lab-gpu"].memory_mib == 49152  # the id defaults to the file name
    assert reg.origin["models/my-llama"] == str(root / "models/my-llama.toml")
    assert reg.is_user("models", "my-llama") and not reg.is_user("models", "llama-7b")
    plan = plan_from_dict({"model": {"preset": "my-llama"}, "hardware": {"gpu": "lab-gpu", "gpus_per_node": 1}})
    assert estimate(plan).gpu_capacity == 49152 * 2**20
    assert reg.problems == []


def test_a_user_file_overrides_a_built_in_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user_dir(tmp_path, monkeypatch, {"hardware/a100-80gb.toml": MY_GPU.replace("Lab GPU 48GB", "A100 (ours)")})
    assert presets.gpu("a100-80gb").memory_mib == 49152
    assert presets.registry().is_user("hardware", "a100-80gb")


@pytest.mark.parametrize(
    ("rel", "text", "needle"),
    [
        ("models/broken.toml", "id = 'broken'\n[config\n", "not valid TOML"),
        ("models/extra.toml", MY_MODEL.replace('id = "my-llama"', 'id = "extra"\ncolour = "red"'), "colour"),
        ("models/bad-type.toml", MY_MODEL.replace('"llama"', '"mamba"'), "config.model_type"),
        ("models/bad-heads.toml", MY_MODEL.replace("= 4\n", "= 5\n"), "config.num_key_value_heads"),
        ("hardware/no-memory.toml", MY_GPU.replace("memory_mib = 49152\n", ""), "memory_mib"),
        ("hardware/negative.toml", MY_GPU.replace("= 49152", "= -1"), "memory_mib"),
    ],
)
def test_a_broken_user_file_is_reported_and_the_rest_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rel: str, text: str, needle: str
) -> None:
    root = user_dir(tmp_path, monkeypatch, {rel: text, "models/my-llama.toml": MY_MODEL})
    reg = presets.registry()
    (problem,) = reg.problems
    assert problem.startswith(str(root / rel)) and needle in problem, problem
    assert "my-llama" in reg.models and "llama-7b" in reg.models
    kind, stem = rel.split("/")[0], Path(rel).stem
    with pytest.raises(PlanError, match="user preset file is broken"):
        presets.model_preset(stem) if kind == "models" else presets.gpu(stem)


def test_user_model_preset_from_a_config_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = tmp_path / "cfg" / "models" / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text(json.dumps(REAL["phi-3-mini-4k"][0]))
    text = 'name = "Phi-3 mini (local)"\nsource = "checkpoint"\n[config]\nhf_config = "ckpt"\n'
    user_dir(tmp_path, monkeypatch, {"models/phi.toml": text})
    plan = plan_from_dict({"model": {"preset": "phi"}})
    assert plan.model.arch().total_params == REAL["phi-3-mini-4k"][1]
    assert plan_from_dict(plan.dump()) == plan  # preset + the preset's own hf_config round-trip


def test_config_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_config_dir() == tmp_path / "explicit"
    monkeypatch.delenv("VRAMPLAN_CONFIG_DIR")
    assert user_config_dir() == tmp_path / "xdg" / "vramplan"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_config_dir() == tmp_path / "home" / ".config" / "vramplan"
