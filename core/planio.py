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


def resolve_plan(
    path: str | None = None, model: str | None = None, gpu: str | None = None, sets: list[str] | tuple[str, ...] = ()
) -> Plan:
    """The plan a headless command works on: a file (or the default plan), then --model, --gpu, --set."""
    plan = load_plan(path) if path else default_plan()
    changes: dict[str, Any] = {}
    if model:
        changes["model.preset"] = model
    if gpu:
        changes["hardware.gpu"] = gpu
    for item in sets:
        key, value = parse_set(item)
        changes[key] = value
    return plan.with_changes(changes) if changes else plan
