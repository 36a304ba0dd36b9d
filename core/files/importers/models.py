"""The model a config names -> a model preset: a Hugging Face repo id (axolotl ``base_model``, LLaMA-Factory
``model_name_or_path``: ``NousResearch/Llama-2-7b-hf`` -> llama-2-7b) or a torchtune model builder
(``torchtune.models.llama2.qlora_llama2_7b`` -> llama-2-7b, lora/qlora)."""

from __future__ import annotations

import re
from pathlib import Path

from vramplan.core.files.importers.record import ImportLog
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError

_SUFFIXES = ("-hf", "-instruct", "-chat", "-base", "-it", "-pt")


def _norm(name: str) -> str:
    n = name.strip().rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if n.endswith(suffix):
                n, changed = n[: -len(suffix)], True
    return n.removeprefix("meta-")


def _source_repo(source: str) -> str | None:
    m = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)/", source)
    return m.group(1) if m else None


def preset_for_repo(name: str) -> str | None:
    """The model preset whose id or Hugging Face repo matches ``name`` (a repo id or a local path), if any."""
    wanted = _norm(name)
    if not wanted:
        return None
    reg = presets.registry()
    for preset_id in reg.models:
        if _norm(preset_id) == wanted:
            return preset_id
    for preset_id in reg.models:
        try:
            repo = _source_repo(reg.models[preset_id].source)
        except (PlanError, KeyError):  # a broken user preset is not a match
            continue
        if repo and (_norm(repo) == wanted or repo.lower() == name.strip().lower()):
            return preset_id
    return None


def local_config(name: str) -> str | None:
    """A local checkpoint directory holding a config.json (or a config.json itself), if ``name`` is one."""
    p = Path(name).expanduser()
    try:
        if p.is_dir() and (p / "config.json").is_file():
            return str(p.resolve())
        if p.is_file() and p.name.endswith(".json"):
            return str(p.resolve())
    except OSError:
        return None
    return None


# torchtune builders (torchtune/models/<family>/_model_builders.py) -> presets; _base/_instruct suffixes dropped
TORCHTUNE_MODELS: dict[str, str] = {
    "llama2_7b": "llama-2-7b",
    "llama2_13b": "llama-2-13b",
    "llama2_70b": "llama-2-70b",
    "llama3_8b": "llama-3-8b",
    "llama3_70b": "llama-3-70b",
    "llama3_1_8b": "llama-3.1-8b",
    "llama3_1_70b": "llama-3.1-70b",
    "llama3_1_405b": "llama-3.1-405b",
    "llama3_2_1b": "llama-3.2-1b",
    "llama3_2_3b": "llama-3.2-3b",
    "llama3_3_70b": "llama-3.3-70b",
    "mistral_7b": "mistral-7b",
    "gemma2_9b": "gemma-2-9b",
    "gemma2_27b": "gemma-2-27b",
    "qwen2_5_0_5b": "qwen2.5-0.5b",
    "qwen2_5_7b": "qwen2.5-7b",
    "qwen2_5_72b": "qwen2.5-72b",
    "qwen3_0_6b": "qwen3-0.6b",
    "qwen3_4b": "qwen3-4b",
    "qwen3_8b": "qwen3-8b",
    "qwen3_14b": "qwen3-14b",
    "qwen3_32b": "qwen3-32b",
    "phi4_14b": "phi-4",
}


def torchtune_builder(component: str) -> tuple[str, str, str | None]:
    """``torchtune.models.llama2.qlora_llama2_7b`` -> (``llama2_7b``, method, preset or None)."""
    name = component.rsplit(".", 1)[-1]
    method = "full"
    for prefix, m in (("qlora_", "qlora"), ("lora_", "lora")):
        if name.startswith(prefix):
            name, method = name[len(prefix) :], m
            break
    for suffix in ("_base", "_instruct"):
        name = name.removesuffix(suffix)
    return name, method, TORCHTUNE_MODELS.get(name)


def read_model(log: ImportLog, key: str, name: object) -> None:
    """The model a config names, into ``model.preset`` (or ``model.hf_config`` for a local checkpoint); a name no
    preset matches is named, and the plan's model kept."""
    if not isinstance(name, str) or not name.strip():
        log.ignore(key, name, "no model name")
        return
    preset = preset_for_repo(name)
    if preset is not None:
        log.set(key, name, "model.preset", preset)
        return
    local = local_config(name)
    if local is not None:
        log.set(key, name, "model.hf_config", local, "a local checkpoint's config.json")
        return
    log.ignore(key, name, "no model preset matches it: give --model ID or --hf-config PATH (the plan's model is kept)")
