"""A Hugging Face model id (``meta-llama/Llama-3.1-8B-Instruct``) -> the model it names, for ``--model`` and the
config importers alike: the config.json of the local Hub cache when it holds the repo (offline,
`core.plan.architecture.hub_cache`), else the preset that names the id (each preset's ``hub_ids``: one table),
else a preset whose id or source repo has the same name once the ``-hf``/``-Instruct``/``-it``... suffixes are
dropped (``NousResearch/Llama-2-7b-hf`` -> llama-2-7b), else one line saying what to do."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from vramplan.core.plan.architecture.hub_cache import cached_config, hub_cache_dir, is_repo_id
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError, shown

_SUFFIXES = ("-hf", "-instruct", "-chat", "-base", "-it", "-pt")


class HubModel(NamedTuple):
    """What a model id resolved to: the plan changes (``model.preset`` or ``model.hf_config``) and how, in words."""

    changes: dict[str, str]
    how: str


def hub_table(reg: presets.Registry | None = None) -> dict[str, str]:
    """Every id a preset names in ``hub_ids``, lower case -> the preset id (a broken user preset names none)."""
    reg = reg if reg is not None else presets.registry()
    table: dict[str, str] = {}
    for preset_id in reg.models:
        try:
            ids = reg.models[preset_id].hub_ids
        except (PlanError, KeyError):
            continue
        for hub_id in ids:
            table.setdefault(hub_id.lower(), preset_id)
    return table


def _norm(name: str) -> str:
    n = name.strip().rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if n.endswith(suffix):
                n, changed = n[: -len(suffix)], True
    return n.removeprefix("meta-")


def preset_for_repo(name: str) -> tuple[str, str] | None:
    """The model preset that stands for ``name`` (a repo id or a local path) and how it was found ("named by the
    preset" or "matched by name"), if any."""
    reg = presets.registry()
    exact = hub_table(reg).get(name.strip().lower())
    if exact is not None:
        return exact, "named by the preset"
    wanted = _norm(name)
    if not wanted:
        return None
    for preset_id in reg.models:
        if _norm(preset_id) == wanted:
            return preset_id, "matched by name"
    for preset_id in reg.models:
        try:
            ids = reg.models[preset_id].hub_ids
        except (PlanError, KeyError):  # a broken user preset is not a match
            continue
        if any(_norm(hub_id) == wanted for hub_id in ids):
            return preset_id, "matched by name"
    return None


def model_changes(text: str, cache: Path | None = None) -> HubModel:
    """``--model ORG/NAME``: the Hub cache's config.json, else the preset standing for it; else a `PlanError`."""
    if not is_repo_id(text):
        raise PlanError(
            f"{shown(text)} is neither a model preset id nor a Hugging Face id ORG/NAME "
            "(a local checkpoint: --hf-config PATH)",
            "--model",
        )
    cache = hub_cache_dir() if cache is None else cache
    try:
        hit = cached_config(text, cache)
    except PlanError as exc:
        raise PlanError(exc.line(), f"--model {text}") from None
    if hit is not None:
        how = f"config.json from the Hugging Face cache, revision {hit.revision[:12]} ({hit.pinned_by})"
        return HubModel({"model.hf_config": str(hit.path)}, how)
    found = preset_for_repo(text)
    if found is not None:
        preset_id, how = found
        return HubModel({"model.preset": preset_id}, f"not in the Hugging Face cache; preset {preset_id} ({how})")
    raise PlanError(
        f"not in the Hugging Face cache ({cache}) and no preset stands for it: download its config.json "
        f"(hf download {text} config.json) or give --hf-config PATH",
        f"--model {text}",
    )
