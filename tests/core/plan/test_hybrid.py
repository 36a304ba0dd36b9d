"""Mamba2 and the hybrids (Nemotron-H, Jamba, Qwen3-Next): parameter counts exact against transformers 5.25, the
config.json files Hugging Face writes (``Infinity`` included) read, and the estimate refused in one line that says
why and gives the count. tests/data/hybrid holds the configs (each ``_source`` says where it came from);
tests/data/hybrid_counts.json what transformers builds from them and from small variants (bench/data/hybrid_counts.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA
from vramplan.cli.parser import run
from vramplan.core.plan.architecture.hf_config import read_hf_config
from vramplan.core.plan.architecture.hybrid import hybrid_params
from vramplan.core.plan.helpers.errors import PlanError

CONFIGS = DATA / "hybrid"
COUNTS: dict[str, Any] = json.loads((DATA / "hybrid_counts.json").read_text())
IDS = sorted(p.stem for p in CONFIGS.glob("*.json"))


@pytest.mark.parametrize("name", IDS)
def test_counts_and_blocks_exact_against_transformers(name: str) -> None:
    n = hybrid_params(json.loads((CONFIGS / f"{name}.json").read_text()))
    assert (n.total, list(n.layers)) == (COUNTS[name]["total"], COUNTS[name]["layers"])


@pytest.mark.parametrize("name", sorted(COUNTS["variants"]))
def test_variants_exact_against_transformers(name: str) -> None:
    """Biases, a latent MoE, legacy key names (mamba_n_groups, layers_block_type "mamba"), Jamba's offsets and dt
    rank, Qwen3-Next's sparse step and dense layers."""
    v = COUNTS["variants"][name]
    assert hybrid_params(v["config"]).total == v["total"]


def test_nemotron_h_8b_by_hand() -> None:
    """Nemotron-H-8B-Base-8K: 24 Mamba2 blocks (I = 128 x 64 = 8192, conv_dim = 8192 + 2 x 8 x 128 = 10240;
    in_proj 4096 x (8192 + 10240 + 128), conv 10240 x 4 + 10240, dt_bias/A_log/D 3 x 128, norm 8192, out_proj 8192 x
    4096), 4 attention blocks (4096 x (32 + 2 x 8) x 128 + 32 x 128 x 4096), 24 relu2 MLPs (2 x 4096 x 21504), a norm
    per block; untied 131,072 x 4096 embedding and lm_head and the final norm: 8.1B, the model's name."""
    mamba = 4096 * (8192 + 10240 + 128) + 10240 * 4 + 10240 + 3 * 128 + 8192 + 8192 * 4096
    attention = 4096 * (32 + 16) * 128 + 32 * 128 * 4096
    mlp = 2 * 4096 * 21504
    total = 24 * mamba + 4 * attention + 24 * mlp + 52 * 4096 + 2 * 131_072 * 4096 + 4096
    assert total == COUNTS["nemotron-h-8b"]["total"] == 8_100_852_736


@pytest.mark.parametrize("name", IDS)
def test_refused_in_one_line_with_the_count(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Not estimated (their blocks' memory is not modelled): one line, exit 2, with the exact count."""
    assert run(["estimate", "--hf-config", str(CONFIGS / f"{name}.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"({COUNTS[name]['total']:,} parameters;" in err[0]
    assert f"unsupported model_type '{json.loads((CONFIGS / f'{name}.json').read_text())['model_type']}': " in err[0]
    assert "memory is not modelled yet; vramplan trace --hf-config gives its memory" in err[0]


def test_infinity_is_read_as_hugging_face_writes_it(tmp_path: Path) -> None:
    """transformers 4.x wrote ``time_step_limit`` as ``[0.0, Infinity]`` (Python's json), 5.x as
    ``{"__float__": "Infinity"}``; both are read (the refusal names the model, not a JSON error)."""
    assert "Infinity" in (CONFIGS / "mamba2-defaults.json").read_text()
    for limit in ("[0.0, Infinity]", '[0.0, {"__float__": "Infinity"}]', "[NaN, -Infinity]"):
        p = tmp_path / "config.json"
        p.write_text('{"model_type": "mamba2", "time_step_limit": ' + limit + "}")
        with pytest.raises(PlanError, match="unsupported model_type 'mamba2': a Mamba2 state-space model"):
            read_hf_config(p)
    p.write_text('{"model_type": "llama", "vocab_size": Infinity}')
    with pytest.raises(PlanError, match=r"vocab_size: must be a positive integer \(got inf\)"):
        read_hf_config(p)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"hybrid_override_pattern": "M-X"}, "hybrid_override_pattern: must be a string of M, *, - and E"),
        ({"layers_block_type": ["mamba", 3]}, "layers_block_type: must be a list of"),
        ({"mamba_num_heads": 0}, "mamba_num_heads: must be a positive integer"),
    ],
)
def test_bad_hybrid_keys_are_named(change: dict[str, Any], where: str) -> None:
    raw = {**json.loads((CONFIGS / "nemotron-h-8b.json").read_text()), **change}
    if "layers_block_type" in change:
        raw.pop("hybrid_override_pattern")
    with pytest.raises(PlanError, match=where.replace("*", r"\*")):
        hybrid_params(raw)
