"""Which stack an imported DeepSpeed config names: its "auto" values are the HF Trainer's."""

from __future__ import annotations

import json
from pathlib import Path

from vramplan.core.files.importers.apply import read_config


def _framework(path: Path) -> str:
    (read,) = [r for r in read_config(path).reads if r.plan_key == "stack.framework"]
    return str(read.plan_value)


def test_a_deepspeed_config_with_auto_values_runs_under_the_hf_trainer(tmp_path: Path) -> None:
    ds = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}}
    (tmp_path / "plain.json").write_text(json.dumps(ds))
    assert _framework(tmp_path / "plain.json") == "deepspeed"
    auto = {
        **ds,
        "train_micro_batch_size_per_gpu": "auto",
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"},
    }
    (tmp_path / "auto.json").write_text(json.dumps(auto))
    assert _framework(tmp_path / "auto.json") == "hf-trainer"
