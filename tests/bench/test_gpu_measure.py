"""bench/measure/gpu_measure.py (issue 29, Done when: the GPU script): its GPU set is valid plans that fit one
80 GB GPU and stay within the 8-minute budget, and the CPU mode runs end to end through `vramplan.measure` and
writes its JSON (machine, versions, date), never over an existing file."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "measure" / "gpu_measure.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_measure", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_set_fits_one_gpu_and_the_budget() -> None:
    gm = load()
    cases = gm.gpu_cases("h100-80gb")
    names = [c[0] for c in cases]
    assert len(set(names)) == len(names) >= 6
    assert sum(c[2] for c in cases) <= 8 * 60 * 0.75  # expected seconds, with room under 8 minutes
    for name, data, _ in cases:
        plan = plan_from_dict(data)
        assert plan.hardware.total_gpus == 1, name
        assert estimate(plan).fits, name  # a case that cannot fit would measure an OOM, not the estimate
    methods = {plan_from_dict(d).training.method for _, d, _ in cases}
    assert {"full", "lora"} <= methods
    ckpt = {plan_from_dict(d).strategy.gradient_checkpointing for _, d, _ in cases}
    assert {"none", "full"} <= ckpt


def test_cpu_mode_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    out = tmp_path / "m.json"
    cmd = [sys.executable, str(SCRIPT), str(out), "--device", "cpu", "--only", "tiny-llama-lora", "--steps", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and data["created"].endswith("Z") and data["machine"]
    assert {"vramplan", "torch", "transformers", "peft"} <= set(data["versions"])
    (case,) = data["cases"]
    assert case["name"] == "tiny-llama-lora" and not case["report"]["partial"]
    rows = {r["name"]: r for r in case["comparison"]}
    assert rows["parameters"]["measured_bytes"] == rows["parameters"]["predicted_bytes"] > 0
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr
