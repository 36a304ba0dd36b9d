"""The key syntax of the command line and of change sets: ``--set table.key=value`` (a TOML literal, or a bare
word for a string), ``--model``/``--hf-config``/``--gpu``, and the way back from a value to ``--set`` text."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from vramplan.core.plan.catalogue import hub_ids, presets
from vramplan.core.plan.helpers.errors import PlanError, PlanNotice, shown
from vramplan.core.plan.helpers.paths import absolute
from vramplan.core.plan.helpers.tomlio import loads
from vramplan.core.plan.schema.plan import Plan


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
        raise PlanError(f"expected table.key=value, got {shown(item)}", "--set")
    if key.count(".") != 1:
        raise PlanError("keys are table.key, e.g. strategy.zero_stage", f"--set {key}")
    return key, parse_value(value.strip())


def set_value(value: Any) -> str:
    """A value as ``--set`` reads it (`parse_value`): a TOML literal, or a bare word for a string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        bare = value and all(ch.isalnum() or ch in "-_." for ch in value) and parse_value(value) == value
        return value if bare else json.dumps(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(set_value(v) if not isinstance(v, str) else json.dumps(v) for v in value) + "]"
    raise TypeError(f"not a plan value: {value!r}")


def set_args(changes: Mapping[str, Any]) -> tuple[str, ...]:
    """``("strategy.zero_stage=3", ...)``: the change set as ``--set`` arguments."""
    return tuple(f"{key}={set_value(value)}" for key, value in changes.items())


def apply_overrides(
    plan: Plan,
    model: str | None = None,
    gpu: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
    hf_config: str | None = None,
) -> Plan:
    """``--model`` (a preset id, or a Hugging Face id ``ORG/NAME``: `core.plan.catalogue.hub_ids`) or
    ``--hf-config``, ``--gpu`` and ``--set table.key=value`` applied to a plan (validated)."""
    if model and hf_config:
        raise PlanError("give --model or --hf-config, not both", "--hf-config")
    changes: dict[str, Any] = {}
    if model and "/" in model:  # a Hugging Face id: the Hub cache's config.json, else the preset standing for it
        found = hub_ids.model_changes(model.strip())
        warnings.warn(f"--model {model.strip()}: {found.how}", PlanNotice, stacklevel=2)
        changes.update(found.changes)
    elif model:
        changes["model.preset"] = model
    if hf_config:
        changes["model.hf_config"] = str(absolute(hf_config))
    if gpu:
        gpu_id, note = presets.resolve_gpu_id(gpu)
        if note:
            warnings.warn(note, PlanNotice, stacklevel=2)
        changes["hardware.gpu"] = gpu_id
    for item in sets:
        key, value = parse_set(item)
        changes[key] = value
    return plan.with_changes(changes) if changes else plan
