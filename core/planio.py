"""Plan files: read a TOML plan (one-line errors naming file and key), parse ``--set table.key=value``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import PlanError
from core.plan import Plan, default_plan, plan_from_dict
from core.tomlio import loads, read_toml


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file. ``[model] hf_config`` is relative to the plan file's directory (the plan keeps
    it as an absolute path)."""
    raw = read_toml(path)
    model = raw.get("model")
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        model["hf_config"] = str((Path(path).parent / Path(model["hf_config"]).expanduser()).resolve())
    try:
        return plan_from_dict(raw)
    except PlanError as exc:
        raise exc.at(str(path)) from None


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (``3``, ``true``, ``["q","v"]``, ``"x"``), else a bare string."""
    try:
        return loads(f"v = {text}")["v"]
    except PlanError:
        return text


def parse_set(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise PlanError(f"expected table.key=value, got {item!r}", "--set")
    if key.count(".") != 1:
        raise PlanError("keys are table.key, e.g. strategy.zero_stage", f"--set {key}")
    return key, parse_value(value.strip())


def starting_plan() -> Plan:
    """The plan vramplan starts from without a plan file: the default plan, on this machine's GPUs when
    nvidia-smi reports them (`core.detect`: the matching hardware preset, the GPU count per node), else on the
    documented default hardware (8 x A100-80GB)."""
    from core.detect import detected_gpus

    plan = default_plan()
    det = detected_gpus()
    if det is None:
        return plan
    try:
        return plan.with_changes({"hardware.gpu": det.gpu_id, "hardware.gpus_per_node": det.count})
    except PlanError:  # pragma: no cover - a count no strategy of the default plan accepts
        return plan


def resolve_plan(
    path: str | None = None,
    model: str | None = None,
    gpu: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
    hf_config: str | None = None,
) -> Plan:
    """The plan a headless command works on: a file (or the starting plan), then --model or --hf-config, --gpu,
    --set."""
    if model and hf_config:
        raise PlanError("give --model or --hf-config, not both", "--hf-config")
    plan = load_plan(path) if path else starting_plan()
    changes: dict[str, Any] = {}
    if model:
        changes["model.preset"] = model
    if hf_config:
        changes["model.hf_config"] = str(Path(hf_config).expanduser().resolve())
    if gpu:
        changes["hardware.gpu"] = gpu
    for item in sets:
        key, value = parse_set(item)
        changes[key] = value
    return plan.with_changes(changes) if changes else plan
