"""Model and hardware presets: TOML data validated into frozen models, looked up by id.

Built-in files live in the ``presets`` package (``presets/models/*.toml``, ``presets/hardware/*.toml``). Each file
carries a ``source``: where its figures come from. User presets, same schema, live in
``$VRAMPLAN_CONFIG_DIR`` or ``$XDG_CONFIG_HOME/vramplan`` (default ``~/.config/vramplan``), under ``models/`` and
``hardware/``; a user file overrides a built-in one of the same id, and a broken one is reported (``problems``)
while the others load.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.catalogue.specs import GpuSpec, ModelPreset
from vramplan.core.plan.helpers import memo
from vramplan.core.plan.helpers.errors import PlanError, pydantic_error, shown, suggest
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.helpers.paths import absolute, user_path
from vramplan.core.plan.helpers.tomlio import read_toml
from vramplan.presets import DATA_DIR

T = TypeVar("T", bound=BaseModel)


class PresetTable(Mapping[str, T]):
    """Presets of one kind by id. Built-in files are parsed and validated on first access (a headless command
    needs one or two of them); user files are validated when their directory is added."""

    def __init__(self, schema: type[T]) -> None:
        self.schema = schema
        self._paths: dict[str, Path] = {}
        self._items: dict[str, T] = {}

    def add_lazy(self, path: Path) -> None:
        self._paths[path.stem] = path
        self._items.pop(path.stem, None)

    def add(self, item: T) -> None:
        self._items[item.id] = item  # type: ignore[attr-defined]
        self._paths.pop(item.id, None)  # type: ignore[attr-defined]

    def __getitem__(self, key: str) -> T:
        if key not in self._items:
            path = self._paths[key]  # KeyError for an unknown id
            self._items[key] = _validate(self.schema, path)
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._paths, *self._items}))

    def __len__(self) -> int:
        return len({*self._paths, *self._items})

    def __contains__(self, key: object) -> bool:
        return key in self._paths or key in self._items


class Registry:
    """The presets of a process (`registry`), filled by `load_registry`. A plain class: a dataclass took 0.7 ms of
    the planner's start to define."""

    def __init__(self) -> None:
        self.models: PresetTable[ModelPreset] = PresetTable(ModelPreset)
        self.gpus: PresetTable[GpuSpec] = PresetTable(GpuSpec)
        # "models/<id>" -> "built-in" | "detected" (a GPU nvidia-smi reported that no preset knows) | a user file
        self.origin: dict[str, str] = {}
        self.problems: list[str] = []  # broken user files: "path: problem"
        self.broken: dict[str, str] = {}  # "models/<file stem>" -> its problem line
        self.machine_host: dict[str, int] = {}  # this machine's GPU preset -> its host memory, bytes

    def problem_lines(self) -> list[str]:
        """One line per broken user file; one that has a built-in preset's id says that the built-in is used."""
        lines = []
        for key, line in self.broken.items():
            kind, _, stem = key.partition("/")
            table: PresetTable[Any] = self.models if kind == "models" else self.gpus
            shadowed = stem in table and self.origin.get(key) == "built-in"
            lines.append(f"skipped user preset: {line}" + (f" (the built-in {stem} is used)" if shadowed else ""))
        return lines

    def is_user(self, kind: str, preset_id: str) -> bool:
        return self.origin.get(f"{kind}/{preset_id}", "built-in") not in ("built-in", "detected")

    def sorted_models(self) -> list[ModelPreset]:
        return sorted(self.models.values(), key=lambda m: (m.order, m.id))

    def sorted_gpus(self) -> list[GpuSpec]:
        return sorted(self.gpus.values(), key=lambda g: (g.memory_mib, g.id))


def _first_error(exc: ValidationError) -> str:
    """The first problem of a preset file, as plan errors say it (``memory_mib: must be a whole number (got
    'lots')``): no pydantic wording, the value cut short."""
    err = pydantic_error(exc, lambda parent: [])
    return f"{err.where}: {err.message}" if err.where else err.message


def _validate(schema: type[T], path: Path) -> T:
    """One preset file, validated; a problem is a `PlanError` naming the file."""
    data = read_toml(path)
    data.setdefault("id", path.stem)
    missing = [k for k in TIME_FIELDS if k not in data] if schema is GpuSpec else []
    try:
        # a file written for the old model is checked for its other problems first (they say more), with
        # stand-ins for the fields it lacks; then refused for those fields
        item = schema.model_validate({**TIME_STAND_INS, **data} if missing else data)
    except ValidationError as exc:
        raise PlanError(_first_error(exc), str(path)) from None
    if missing:
        raise PlanError(
            f"a GPU preset needs the step-time model's {', '.join(missing)} (as the built-in "
            "presets/hardware/h100-80gb.toml states them, each with its source)",
            str(path),
        )
    return item


# What the step-time model reads of a GPU that older presets lack (a file without them is refused, naming them).
TIME_FIELDS = ("generation", "sm_count", "matmul_efficiency", "kernel_overhead_us", "time_source")
TIME_STAND_INS = {"generation": "ampere", "sm_count": 1, "matmul_efficiency": 0.5, "kernel_overhead_us": 1.0,
                  "time_source": "-"}  # fmt: skip


def _model_keys(parent: list[str]) -> list[str]:
    return list(ModelConfig.model_fields) if not parent else []


def _validate_user(schema: type[T], path: Path, reg: Registry) -> T:
    """A user file: the schema, and for a model its ``[config]`` as a plan's ``[model]`` table (so a typo is
    reported now, with the file, not when the preset is used). ``hf_config`` is relative to the file; ``preset``
    names a preset the config starts from: a built-in one or a user one read before this file, and for the
    preset's own id the built-in it replaces (``llama-7b.toml`` with ``preset = "llama-7b"``: LLaMA-7B with the
    keys the file changes). That preset's keys are merged in now, so a user preset never refers to another one
    when it is used (no chain, no loop)."""
    item = _validate(schema, path)
    if isinstance(item, ModelPreset):
        preset: ModelPreset = item
        config = dict(preset.config)
        if isinstance(config.get("hf_config"), str) and config["hf_config"].strip():
            config["hf_config"] = str(absolute(path.parent / user_path(config["hf_config"])))
        try:
            if "preset" in config:
                config = _flatten(config, reg)
            ModelConfig.model_validate(resolve_model(config, reg))
        except (PlanError, ValidationError) as exc:
            err = pydantic_error(exc, _model_keys) if isinstance(exc, ValidationError) else exc
            key = (err.where or "").removeprefix("model.")
            raise PlanError(err.message, f"{path}: config" + (f".{key}" if key else "")) from None
        item = item.model_copy(update={"config": config})
    return item


def _flatten(config: dict[str, Any], reg: Registry) -> dict[str, Any]:
    """A user preset's ``[config]`` with the keys of the preset it starts from merged under its own."""
    name = config["preset"]
    if not isinstance(name, str):
        raise PlanError(f"must be a preset id (got {shown(name)})", "model.preset")
    base = {k: v for k, v in resolve_model({"preset": name}, reg).items() if k != "preset"}
    own = {k: v for k, v in config.items() if k != "preset"}
    if own.get("hf_config") is not None and own["hf_config"] != base.get("hf_config"):
        raise PlanError("give preset or hf_config, not both", "model.hf_config")
    return {**base, **own}


MAX_PRESET_CHAIN = 8  # a user preset may start from a preset that starts from another, this deep


def resolve_model(data: dict[str, Any], reg: Registry | None = None, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A ``[model]`` table with the keys its ``preset`` or ``hf_config`` gives merged under the ones it states.

    A preset's own ``[config]`` may name a preset it starts from (resolved first, ``MAX_PRESET_CHAIN`` deep, a
    loop is an error); ``hf_config`` is read as `vramplan.core.plan.architecture.hf_config.read_hf_config` maps it,
    relative to the working directory. `reg`: the registry to look presets up in (default: `registry()`)."""
    if isinstance(data.get("preset"), str):
        name = data["preset"]
        if name in seen or len(seen) >= MAX_PRESET_CHAIN:
            chain = " -> ".join((*seen, name))
            raise PlanError(f"model presets start from each other in a loop or too deep: {chain}", "model.preset")
        base = model_preset(name, reg=reg).config
        if data.get("hf_config") is not None and data["hf_config"] != base.get("hf_config"):
            raise PlanError("give preset or hf_config, not both", "model.hf_config")
        if isinstance(base.get("preset"), str):
            base = resolve_model(base, reg, (*seen, name))
        data = {**base, **data}
    if isinstance(data.get("hf_config"), str):
        if not data["hf_config"].strip():
            raise PlanError("must not be empty (give a config.json or a checkpoint directory)", "model.hf_config")
        path = str(user_path(data["hf_config"]).absolute())  # relative: to the working directory
        if not Path(path).exists() and states_every_key(data):
            # a plan exported elsewhere: its model keys decide, hf_config is where they came from (provenance)
            return {**data, "hf_config": path}
        # a plan's first config.json loads the reader
        from vramplan.core.plan.architecture.hf_config import read_hf_config

        try:
            base = read_hf_config(path).model
        except PlanError as exc:
            raise PlanError(exc.line(), "model.hf_config") from None
        data = {**base, **data, "hf_config": path}
    return data


def states_every_key(data: Mapping[str, Any]) -> bool:
    """Whether a ``[model]`` table gives every key `ModelConfig` requires (so it needs no preset or config.json)."""
    return all(key in data for key, info in ModelConfig.model_fields.items() if info.is_required())


def model_config(data: dict[str, Any]) -> ModelConfig:
    """A ``[model]`` table (e.g. ``{"preset": "llama-7b"}``) resolved and validated."""
    return ModelConfig.model_validate(resolve_model(data))


def _load_dir(reg: Registry, directory: Path, kind: str, builtin: bool) -> None:
    if not directory.is_dir():
        return
    table: PresetTable[Any] = reg.models if kind == "models" else reg.gpus
    for path in sorted(directory.glob("*.toml")):
        if builtin:
            table.add_lazy(path)
            reg.origin[f"{kind}/{path.stem}"] = "built-in"
            continue
        try:
            item = _validate_user(table.schema, path, reg)
        except PlanError as exc:
            reg.problems.append(exc.line())
            reg.broken[f"{kind}/{path.stem}"] = exc.line()
            continue
        table.add(item)
        reg.origin[f"{kind}/{item.id}"] = str(path)


def user_config_dir() -> Path:
    """``$VRAMPLAN_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/vramplan``, else ``~/.config/vramplan``."""
    explicit = os.environ.get("VRAMPLAN_CONFIG_DIR")
    if explicit:
        return user_path(explicit)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = user_path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "vramplan"


def load_registry(extra_dirs: Iterable[Path] = ()) -> Registry:
    """Built-in presets, then each extra directory (its ``models/`` and ``hardware/``) overriding by id."""
    reg = Registry()
    _load_dir(reg, DATA_DIR / "models", "models", builtin=True)
    _load_dir(reg, DATA_DIR / "hardware", "hardware", builtin=True)
    for d in extra_dirs:
        _load_dir(reg, d / "models", "models", builtin=False)
        _load_dir(reg, d / "hardware", "hardware", builtin=False)
    return reg


@memoised(None, group="presets")
def registry() -> Registry:
    """Built-in presets and the user's (`user_config_dir`), loaded once per process (`reload` starts over)."""
    return load_registry([user_config_dir()])


def reload() -> Registry:
    """Forget the loaded presets (and what depends on them: the detected GPUs, the estimator's memos) and load
    them again: after the user's files or ``VRAMPLAN_CONFIG_DIR`` changed."""
    memo.clear("presets")
    memo.clear("estimate")
    return registry()


def register_gpu(spec: GpuSpec, origin: str) -> None:
    """Add a preset at runtime (a detected GPU no preset knows, one a plan file carries)."""
    reg = registry()
    reg.gpus.add(spec)
    reg.origin[f"hardware/{spec.id}"] = origin


def register_model(preset: ModelPreset, origin: str) -> None:
    """Add a model preset at runtime (one a plan file carries: `core.files.planfile`)."""
    reg = registry()
    reg.models.add(preset)
    reg.origin[f"models/{preset.id}"] = origin


# the kinds of preset a plan file may carry
CARRIED: dict[str, type[GpuSpec | ModelPreset]] = {"hardware": GpuSpec, "models": ModelPreset}


def carried_presets(gpu_id: str, model_id: str | None) -> dict[str, dict[str, dict[str, Any]]]:
    """The presets a plan names that are not built in (a user's file, a GPU detected without a preset), as a plan
    file carries them so that it loads where they are missing: ``{"hardware": {id: figures}, "models": {...}}``."""
    reg = registry()
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for kind, preset_id in (("hardware", gpu_id), ("models", model_id)):
        if preset_id is None or reg.origin.get(f"{kind}/{preset_id}", "built-in") == "built-in":
            continue
        table: PresetTable[Any] = reg.gpus if kind == "hardware" else reg.models
        if preset_id in table:
            item = table[preset_id].model_dump(mode="json", exclude_none=True, exclude={"id"})
            out.setdefault(kind, {})[preset_id] = item
    return out


def register_carried(raw: Any, origin: str) -> None:
    """Register the presets a plan file carries (`carried_presets`) whose ids are unknown here; one known here is
    used as it is (the file's ``[estimate]`` then says if the figures differ). A `PlanError` names the key."""
    if not isinstance(raw, dict):
        raise PlanError("must be a table (written by vramplan export)", "presets")
    reg = registry()
    for kind, items in raw.items():
        schema = CARRIED.get(kind)
        if schema is None:
            raise PlanError(f"unknown table (known: {', '.join(CARRIED)})", f"presets.{kind}")
        if not isinstance(items, dict):
            raise PlanError("must be a table", f"presets.{kind}")
        table: PresetTable[Any] = reg.gpus if kind == "hardware" else reg.models
        for preset_id, data in items.items():
            where = f"presets.{kind}.{preset_id}"
            if preset_id in table or f"{kind}/{preset_id}" in reg.broken:
                continue
            if not isinstance(data, dict):
                raise PlanError("must be a table", where)
            try:
                item = schema.model_validate({**data, "id": preset_id})
            except ValidationError as exc:
                err = pydantic_error(exc, lambda parent: [])
                raise PlanError(err.message, f"{where}.{err.where}" if err.where else where) from None
            table.add(item)
            reg.origin[f"{kind}/{item.id}"] = origin


def register_machine_host(gpu_id: str, host_bytes: int) -> None:
    """This machine's host memory, for plans on its GPU (`core.plan.node`): a front end reads it (vramplan.machine)
    and says it here, as it registers a detected GPU; `reload` forgets it. Estimates made before are forgotten."""
    registry().machine_host[gpu_id] = host_bytes
    memo.clear("estimate")


def model_preset(preset_id: str, where: str = "model.preset", reg: Registry | None = None) -> ModelPreset:
    reg = reg if reg is not None else registry()
    try:
        return reg.models[preset_id]
    except KeyError:
        if f"models/{preset_id}" in reg.broken:
            raise PlanError(f"user preset file is broken: {reg.broken[f'models/{preset_id}']}", where) from None
        hint = suggest(preset_id, reg.models) or " (vramplan presets models lists them)"
        raise PlanError(f"unknown model preset {shown(preset_id)}{hint}", where) from None


def gpu(gpu_id: str, where: str = "hardware.gpu") -> GpuSpec:
    reg = registry()
    try:
        return reg.gpus[gpu_id]
    except KeyError:
        if f"hardware/{gpu_id}" in reg.broken:
            raise PlanError(f"user preset file is broken: {reg.broken[f'hardware/{gpu_id}']}", where) from None
        family = [g for g in reg.gpus if g.lower().startswith(gpu_id.strip().lower() + "-")]
        if family:  # `a100`: one of several parts
            hint = f"; which one: {', '.join(sorted(family))}?"
        else:
            hint = suggest(gpu_id, reg.gpus) or " (vramplan presets hardware lists them)"
        raise PlanError(f"unknown GPU preset {shown(gpu_id)}{hint}", where) from None


_VARIANTS = ("pcie", "nvl", "gt")  # other form factors (gt: Grand Teton's 96 GB, 500 W): --gpu h100 is the SXM


def resolve_gpu_id(text: str) -> tuple[str, str]:
    """The GPU preset ``--gpu TEXT`` names, and a note when it was not the exact id: any case (``H100-80GB``),
    an nvidia-smi name (``NVIDIA H100 80GB HBM3``), or a family when one part is the obvious one (``h100`` ->
    ``h100-80gb``, the SXM part; ``h100-pcie`` stays the PCIe card). Anything else is returned as given (the
    plan's validation then names close matches)."""
    reg = registry()
    gpus = reg.sorted_gpus()
    want = text.strip().lower()
    for g in gpus:
        if g.id == text.strip():
            return g.id, ""
    for g in gpus:
        if want in (g.id.lower(), g.name.lower(), *(m.lower() for m in g.match)):
            return g.id, ""
    family = [g for g in gpus if g.id.lower().startswith(want + "-")]
    main = [g for g in family if not any(v in g.id.lower() for v in _VARIANTS)]
    if len(main) == 1:
        others = ", ".join(g.id for g in family if g is not main[0])
        return main[0].id, f"--gpu {text}: taken as {main[0].id} ({main[0].name})" + (
            f"; {others} for the other form factors" if others else ""
        )
    return text, ""
