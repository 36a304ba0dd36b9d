from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from bench.data.measured_cases import case_plan_data  # the suite's one mapping: see there
from vramplan.core.memory.activations.context import ActCtx, plan_ctx
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import plan_from_dict

# The suite is deterministic: the same examples on every run and machine (CI must pass on a clean clone).
# Explore with fresh random examples: pytest --hypothesis-profile=explore
settings.register_profile("default", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("default")

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def rel(a: int, b: int) -> float:
    """Relative error of `a` against the measured `b`."""
    return (a - b) / b if b else float(a != 0)


def case_ctx(case: dict[str, Any], cpu: bool = False) -> ActCtx:
    """The activation model's context for a measured case (``cpu``: PyTorch's CPU kernels)."""
    return plan_ctx(plan_from_dict(case_plan_data(case)), cpu)


def assert_issue_bounds(est: Estimate, f: dict[str, Any]) -> float:
    """The core issue's acceptance for one measured case; returns the peak's relative error (total - overhead
    against ``steady_peak_bytes``): parameter counts exact, parameters/gradients/optimizer states within 1%,
    activations within 5% of activation_bytes - logits_like_bytes + saved_weight_copy_bytes, the peak between -5%
    and +15%."""
    g = est.per_gpu()
    assert (est.params_total, est.params_trainable) == (f["params_total"], f["params_trainable"])
    for kind, key in (
        ("parameters", "param_bytes"),
        ("gradients", "grad_bytes"),
        ("optimizer_states", "optimizer_state_bytes"),
    ):
        assert abs(rel(g[kind], f[key])) <= 0.01, (kind, g[kind], f[key])
    act = f["activation_bytes"] - f["logits_like_bytes"] + f["saved_weight_copy_bytes"]
    assert abs(rel(g["activations"], act)) <= 0.05, (g["activations"], act)
    peak = rel(g["total"] - g["overhead"], f["steady_peak_bytes"])
    assert -0.05 <= peak <= 0.15, (g["total"] - g["overhead"], f["steady_peak_bytes"], peak)
    return peak


def load_truth(name: str) -> dict[str, Any]:
    path = DATA / name
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture(autouse=True)
def isolated_machine(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test sees the same machine: no user presets (an empty VRAMPLAN_CONFIG_DIR), no GPU detection
    (VRAMPLAN_DETECT=0) and an empty Hugging Face cache (HF_HUB_CACHE), whatever the developer's ~/.config,
    nvidia-smi or ~/.cache; tests of those features opt back in."""
    from vramplan.core.plan.catalogue import presets

    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "no-user-config"))
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    # no Hugging Face Hub cache: `--model ORG/NAME` and the importers never read the developer's
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.getbasetemp() / "no-hub-cache"))
    presets.reload()


@pytest.fixture
def tmp_plan(tmp_path: Path):
    def write(text: str, name: str = "plan.toml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> Path:
    """A user config directory holding ``files`` (relative path -> text), made the one vramplan reads."""
    root = tmp_path / "cfg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(root))
    presets.reload()
    return root
