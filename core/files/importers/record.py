"""What an import read and what it left: every key of the file is either read into a plan key (`Read`) or named as
ignored with the reason (`Ignored`); `Section` walks one table of the file and names the keys nobody read."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

NOT_PLANNED = "not a memory or step-time setting"


def plain(value: Any) -> Any:
    """A file's value as strict JSON takes it (``inf`` and ``nan``, which YAML and Python's JSON read, as text)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def shown(value: Any, limit: int = 60) -> str:
    """A value as the report shows it: JSON-like and short."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):  # pragma: no cover - safe_load/json data is always JSON-like
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Read:
    """A setting of the file read into the plan: ``key`` (dotted, as in the file) = ``value`` gave ``plan_key`` =
    ``plan_value``; ``note`` says how, when it is not one-to-one."""

    key: str
    value: Any
    plan_key: str
    plan_value: Any
    note: str = ""
    sets: bool = True  # False: an "auto" that is the plan's own value, said (`Auto`)

    def to_json(self) -> dict[str, Any]:
        out = {"key": self.key, "value": plain(self.value), "plan_key": self.plan_key, "plan_value": self.plan_value}
        return {**out, "note": self.note} if self.note else out


@dataclass(frozen=True)
class Ignored:
    """A setting of the file the plan does not take, and why."""

    key: str
    value: Any
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "value": plain(self.value), "why": self.why}


@dataclass(frozen=True)
class Auto:
    """A setting the file leaves ``"auto"``, which the tool that reads the file fills from its own arguments (the HF
    Trainer from TrainingArguments: transformers integrations/deepspeed.py ``trainer_config_process``). It resolves
    once the plan is known: ``resolve(plan)`` gives the plan value and how it was found; with ``sets`` the value is
    laid on the plan (``bf16.enabled`` -> ``training.precision``), else it is the plan's own, and only said."""

    key: str
    plan_key: str
    resolve: Callable[[Plan], tuple[Any, str]]
    sets: bool = False


@dataclass
class Batch:
    """The batch sizes a file states (DeepSpeed's three, which resolve against the data-parallel size)."""

    micro: int | None = None
    accum: int | None = None
    total: int | None = None
    keys: dict[str, str] = field(default_factory=dict)  # micro/accum/total -> the file's key
    auto: set[str] = field(default_factory=set)  # the sizes left "auto": the tool that reads the file fills them


class ImportLog:
    """The plan changes an import makes, each with the file key it came from, and every key it leaves."""

    def __init__(self, fmt: str) -> None:
        self.format = fmt
        self.changes: dict[str, Any] = {}
        self.reads: list[Read] = []
        self.ignored: list[Ignored] = []
        self.batch = Batch()
        self.autos: list[Auto] = []  # "auto" values, resolved against the plan (`core.files.importers.apply`)
        self.shard_by_gpus = False  # torchtune: the sharding follows the plan's GPU count (`apply`)

    def set(self, key: str, value: Any, plan_key: str, plan_value: Any, note: str = "") -> None:
        self.changes[plan_key] = plan_value
        self.reads = [r for r in self.reads if r.plan_key != plan_key]  # a later setting of the file decides
        self.reads.append(Read(key, value, plan_key, plan_value, note))

    def ignore(self, key: str, value: Any, why: str) -> None:
        self.ignored.append(Ignored(key, value, why))

    def auto(self, key: str, plan_key: str, resolve: Callable[[Plan], tuple[Any, str]], sets: bool = False) -> None:
        """``key`` is ``"auto"``: `Auto` resolves it once the plan is known."""
        self.autos.append(Auto(key, plan_key, resolve, sets))

    def used(self, key: str, value: Any, how: str) -> None:
        """A setting read that sets no plan key itself but decides how others are read (``distributed_type``)."""
        self.reads.append(Read(key, value, "", None, how))

    def section(self, data: Any, prefix: str = "") -> Section:
        return Section(self, data if isinstance(data, Mapping) else {}, prefix)


class Section:
    """One table of a config: `get` marks a key read; `rest` names every key not read as ignored."""

    def __init__(self, log: ImportLog, data: Mapping[str, Any], prefix: str) -> None:
        self.log, self.data, self.prefix = log, data, prefix
        self.taken: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def has(self, name: str) -> bool:
        return name in self.data

    def get(self, name: str, default: Any = None) -> Any:
        self.taken.add(name)
        return self.data.get(name, default)

    def sub(self, name: str) -> Section:
        """The table ``name``; a value that is not a table is named as ignored."""
        value = self.get(name)
        if name in self.data and (not isinstance(value, Mapping) or not value):
            why = "empty" if value is None or value == {} else "expected a table of settings"
            self.log.ignore(self.key(name), value, why)
        return self.log.section(value, self.key(name))

    def ignore(self, name: str, why: str) -> None:
        """Name ``name`` as ignored (when present) with ``why``."""
        if name in self.data:
            self.taken.add(name)
            self.log.ignore(self.key(name), self.data[name], why)

    def rest(self, why: str = NOT_PLANNED, reasons: Mapping[str, str] | None = None) -> None:
        for name, value in self.data.items():
            if name not in self.taken:
                self.taken.add(name)
                self.log.ignore(self.key(str(name)), value, (reasons or {}).get(str(name), why))
