"""The model a config names -> the plan's model: a Hugging Face repo id (axolotl ``base_model``, LLaMA-Factory
``model_name_or_path``) resolved as ``--model`` resolves one (`core.plan.catalogue.hub_ids`: the Hub cache's
config.json, else the preset standing for it, ``NousResearch/Llama-2-7b-hf`` -> llama-2-7b), a local checkpoint,
or a torchtune model builder (``torchtune.models.llama2.qlora_llama2_7b`` -> llama-2-7b, lora/qlora)."""

from __future__ import annotations

from pathlib import Path

from vramplan.core.files.importers.record import ImportLog
from vramplan.core.plan.architecture.hub_cache import cached_config, is_repo_id
from vramplan.core.plan.catalogue.hub_ids import preset_for_repo
from vramplan.core.plan.helpers.errors import PlanError


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
    broken = ""  # the Hub cache holds the repo but cannot be read: said with whatever is used instead
    try:
        hit = cached_config(name.strip()) if is_repo_id(name.strip()) else None
    except PlanError as exc:
        hit, broken = None, f"the Hugging Face cache's copy is not used: {exc.line()}"
    if hit is not None:
        note = f"config.json from the Hugging Face cache, revision {hit.revision[:12]}"
        log.set(key, name, "model.hf_config", str(hit.path), note)
        return
    found = preset_for_repo(name)
    if found is not None:
        log.set(key, name, "model.preset", found[0], broken)
        return
    local = local_config(name)
    if local is not None:
        log.set(key, name, "model.hf_config", local, "a local checkpoint's config.json")
        return
    why = broken or "no model preset matches it"
    log.ignore(key, name, f"{why}: give --model ID or --hf-config PATH (the plan's model is kept)")
