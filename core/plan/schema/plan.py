"""The plan: one frozen pydantic model with the tables of a plan file.

``[model]`` (HF config.json key names, optionally from a preset: `core.plan.architecture.config`), ``[hardware]``,
``[training]`` (`core.plan.schema.training`), ``[strategy]`` (`core.plan.schema.strategy`), ``[stack]``
(`core.plan.stack.config`, with the defaults it fills in: `core.plan.stack.defaults`), the optional ``[overhead]`` (the
GPU-only terms PyTorch's tensors do not see), ``[checklist]`` (which of the troubleshooting checklist's by-hand items
the user has ticked) and ``[advice]`` (the safety margin: `core.plan.schema.advice`). Every change goes through
`Plan.with_changes`, which re-validates; a bad value is a `PlanError` naming its dotted key."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, PrivateAttr, ValidationError, ValidatorFunctionWrapHandler, model_validator

from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError, pydantic_error
from vramplan.core.plan.helpers.field_values import FROZEN_TABLE
from vramplan.core.plan.schema.advice import AdviceConfig
from vramplan.core.plan.schema.checklist import ChecklistConfig
from vramplan.core.plan.schema.hardware import HardwareConfig
from vramplan.core.plan.schema.overhead import OverheadConfig
from vramplan.core.plan.schema.rl import APPLIES, RLConfig
from vramplan.core.plan.schema.rules import check_combinations
from vramplan.core.plan.schema.strategy import StrategyConfig
from vramplan.core.plan.schema.training import TrainingConfig
from vramplan.core.plan.stack.config import StackConfig, StackDefault
from vramplan.core.plan.stack.defaults import stack_choices

TABLES = ("model", "hardware", "training", "strategy", "stack", "overhead", "checklist", "advice", "rl")


class Plan(BaseModel):
    model_config = FROZEN_TABLE

    model: ModelConfig
    hardware: HardwareConfig = HardwareConfig()
    training: TrainingConfig = TrainingConfig()
    strategy: StrategyConfig = StrategyConfig()
    stack: StackConfig = StackConfig()
    overhead: OverheadConfig = OverheadConfig()
    checklist: ChecklistConfig = ChecklistConfig()
    advice: AdviceConfig = AdviceConfig()
    rl: RLConfig = RLConfig()
    _stack_chosen: dict[str, StackDefault] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _stack_defaults(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Plan:
        """The keys of `core.plan.stack.defaults.STACK_KEYS` that the data leaves unset, filled with the stack's
        defaults; the plan remembers which (`stack_chosen`), and `dump` leaves them out."""
        chosen: dict[str, StackDefault] = {}
        if isinstance(data, dict):
            data, chosen = _with_stack_defaults(data)
        plan: Plan = handler(data)
        if chosen:
            plan._stack_chosen = chosen
        return plan

    @model_validator(mode="before")
    @classmethod
    def _resolve_model(cls, data: Any) -> Any:
        """The ``[model]`` table with its preset's or config.json's keys merged in (`presets.resolve_model`)."""
        if isinstance(data, dict) and isinstance(data.get("model"), dict):
            data = {**data, "model": presets.resolve_model(data["model"])}
        return data

    @model_validator(mode="after")
    def _combinations(self) -> Plan:
        check_combinations(self)
        return self

    # -- derived sizes ----------------------------------------------------------------------------------------
    @property
    def data_parallel(self) -> int:
        s = self.strategy
        return self.hardware.total_gpus // (s.tensor_parallel * s.pipeline_parallel)

    @property
    def stack_chosen(self) -> dict[str, StackDefault]:
        """The keys the stack chose (the plan's data left them unset), each with the row of
        `core.plan.stack.defaults.STACK_DEFAULTS` that gave its value."""
        return self._stack_chosen

    def dump(self) -> dict[str, Any]:
        """The normalized plan as plain data (TOML/JSON ready; None omitted, TOML has no null). The keys the stack
        chose are left out: loaded back, the same stack chooses them again (and another stack its own)."""
        exclude: dict[str, Any] = {}
        for key in self._stack_chosen:
            table, _, field = key.partition(".")
            exclude.setdefault(table, set()).add(field)
        if self.training.objective == _DEFAULT_OBJECTIVE:  # an SFT plan's file, export and JSON: no objective
            exclude.setdefault("training", set()).add("objective")
        if not self.training.objective_spec.post_training:  # SFT, pretraining: no [rl] table
            exclude["rl"] = True
        return self.model_dump(mode="json", exclude_none=True, exclude=exclude or None)

    def with_changes(self, changes: dict[str, Any], *, whole: bool = False) -> Plan:
        """A new, validated plan with dotted-key changes (``{"strategy.zero_stage": 3}``).

        Choosing a new ``model.preset`` or ``model.hf_config`` replaces every model key not also given in ``changes``;
        a new ``training.objective`` drops the ``[rl]`` keys that do not apply to it (`core.plan.schema.rl.APPLIES`).

        Only what changed is validated (`_with_changed_tables`: the changed tables, the stack's defaults, the rules
        across tables), about a tenth of re-validating the whole plan; ``whole``: re-validate every table, the
        reference the tests hold the fast path to.
        """
        if not whole:
            quick = _with_changed_tables(self, changes)
            if quick is not None:
                return quick
        raw = self.dump()
        for key in ("model.preset", "model.hf_config"):
            if key in changes and changes[key] != getattr(self.model, key.partition(".")[2]):
                raw["model"] = {}  # a new model: drop every key of the old one
        objective = changes.get("training.objective")
        if isinstance(objective, str) and objective != self.training.objective:
            raw["rl"] = {  # a new objective: drop the [rl] keys that do not apply to it
                k: v for k, v in raw.get("rl", {}).items() if objective.lower() in APPLIES.get(k, ())
            }
        for key, value in changes.items():
            table, _, field = key.partition(".")
            if table not in TABLES or not field or "." in field:
                raise PlanError(f"not a plan key (use table.key with a table of {', '.join(TABLES)})", key)
            if value is None:
                raw.setdefault(table, {}).pop(field, None)
            else:
                raw.setdefault(table, {})[field] = value
        return plan_from_dict(raw)


_DEFAULT_RL = RLConfig()
_DEFAULT_OBJECTIVE = TrainingConfig.model_fields["objective"].default  # "sft": left out of files, as TOML omits it


def _with_changed_tables(plan: Plan, changes: dict[str, Any]) -> Plan | None:
    """`Plan.with_changes` validating only what changed, or None where it must re-validate the whole plan (a change
    of model or objective, an SFT plan holding ``[rl]`` keys its file would drop) or where the result is not a valid
    plan (the whole path then raises the error, worded as ever).

    The same steps as the whole path, on less: each changed table is validated from what `Plan.dump` writes of it
    with the changes laid over; the stack's defaults are chosen again for every key the plan leaves unset (a change
    can alter a row's ``when``), and a table whose chosen value moves is validated again too; the other tables are
    the plan's own (frozen: shared); the rules across tables (`check_combinations`) run on the result. Pydantic's
    ``model_copy`` skips validation, so it only assembles tables validated here (`tests/core/plan/test_with_changes.py`
    holds the result equal to the whole path's, stack choices included)."""
    by_table: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        table, _, field = key.partition(".")
        if table not in TABLES or not field or "." in field or table == "model" or key == "training.objective":
            return None
        by_table.setdefault(table, {})[field] = value
    no_rl = not plan.training.objective_spec.post_training  # SFT, pretraining
    if no_rl and plan.rl != _DEFAULT_RL:
        return None
    before = plan.stack_chosen

    def dumped(table: str) -> dict[str, Any]:
        """The table as `Plan.dump` writes it: no None, no key the stack chose (an SFT plan: no objective, no rl)."""
        if no_rl and table == "rl":
            return {}
        exclude = {k.partition(".")[2] for k in before if k.startswith(f"{table}.")}
        if table == "training" and plan.training.objective == _DEFAULT_OBJECTIVE:
            exclude.add("objective")
        data: dict[str, Any] = getattr(plan, table).model_dump(mode="json", exclude_none=True, exclude=exclude)
        return data

    raw: dict[str, dict[str, Any]] = {}
    for table, fields in by_table.items():
        raw[table] = data = dumped(table)
        for field, value in fields.items():
            if value is None:
                data.pop(field, None)
            else:
                data[field] = value

    def stated(key: str) -> Any:
        table, _, field = key.partition(".")
        if table in raw:
            return raw[table].get(field)
        return None if key in before else getattr(getattr(plan, table), field)

    def value_of(key: str) -> Any:
        value = stated(key)
        if value is None:
            table, _, field = key.partition(".")
            value = Plan.model_fields[table].annotation.model_fields[field].default  # type: ignore[union-attr]
        return value

    try:
        stack = StackConfig.model_validate(raw["stack"]) if "stack" in raw else plan.stack
        chosen = stack_choices(stack, lambda key: stated(key) is None, value_of)
        for key, row in chosen.items():  # a table whose chosen value moves is validated again
            table, _, field = key.partition(".")
            if table not in raw and getattr(getattr(plan, table), field) != row.value:
                raw[table] = dumped(table)
        for key, row in chosen.items():
            table, _, field = key.partition(".")
            if table in raw:
                raw[table][field] = row.value
        tables = {t: Plan.model_fields[t].annotation.model_validate(d) for t, d in raw.items()}  # type: ignore[union-attr]
        new = plan.model_copy(update=tables)
        new._stack_chosen = chosen
        check_combinations(new)
    except (ValidationError, ValueError):  # PlanError is a ValueError: the whole path words the error
        return None
    return new


def _with_stack_defaults(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, StackDefault]]:
    """``data`` with the stack keys it leaves unset filled in, and the rows that filled them. A table given as a
    model instance counts the fields it was given (``TrainingConfig(lora_dtype="bf16")`` sets one key). A
    ``[stack]`` table that does not validate fills nothing: the plan's validation then reports it."""
    tables = {
        name: (value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value)
        for name, value in data.items()
    }
    if any(not isinstance(tables.get(t) or {}, dict) for t in ("training", "strategy", "stack")):
        return data, {}  # not a table: the plan's validation says so
    try:
        config = StackConfig.model_validate(tables.get("stack") or {})
    except (ValidationError, ValueError):
        return data, {}

    def stated(key: str) -> Any:
        table, _, field = key.partition(".")
        return (tables.get(table) or {}).get(field)

    def value_of(key: str) -> Any:
        value = stated(key)
        if value is None:
            table, _, field = key.partition(".")
            value = Plan.model_fields[table].annotation.model_fields[field].default  # type: ignore[union-attr]
        return value

    chosen = stack_choices(config, lambda key: stated(key) is None, value_of)
    out = dict(data)
    for key, row in chosen.items():
        table, _, field = key.partition(".")
        out[table] = tables[table] = {**(tables.get(table) or {}), field: row.value}
    return out, chosen


def _known_keys(parent: list[str]) -> list[str]:
    if not parent:
        return list(TABLES)
    section = Plan.model_fields.get(parent[0])
    if section is None or len(parent) != 1:
        return []
    ann = section.annotation
    return list(getattr(ann, "model_fields", {}))


def plan_from_dict(raw: dict[str, Any]) -> Plan:
    """Validate plain data (a parsed TOML file) into a `Plan`; errors become one `PlanError` line."""
    if "model" not in raw:
        raise PlanError('missing [model] table (give at least preset = "...")', "model")
    try:
        return Plan.model_validate(raw)
    except ValidationError as exc:
        raise pydantic_error(exc, _known_keys, Plan) from None


DEFAULT_PLAN_DATA: dict[str, Any] = {
    "model": {"preset": "llama-7b"},
    "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 1},
    "training": {
        "micro_batch_size": 1,
        "seq_len": 2048,
        "grad_accum_steps": 1,
        "optimizer": "adamw",
        "method": "full",
    },
    "strategy": {"gradient_checkpointing": "full", "attention": "flash", "zero_stage": 3},
}


def default_plan() -> Plan:
    """The plan `vramplan` and `vramplan estimate` start from: full fine-tuning of LLaMA-7B on one 8 x A100-80GB
    node with ZeRO-3, full activation checkpointing and flash attention."""
    return plan_from_dict(DEFAULT_PLAN_DATA)


def over_default_plan(raw: dict[str, Any]) -> dict[str, Any]:
    """A plan file's tables laid over the default plan's (`DEFAULT_PLAN_DATA`): a file means "the default plan
    plus what I wrote", as `vramplan estimate --set` does, not the bare field defaults. ``[model]`` is taken
    whole (a model is not merged with LLaMA-7B's keys)."""
    merged = dict(raw)
    for table, defaults in DEFAULT_PLAN_DATA.items():
        if table != "model" and isinstance(raw.get(table, {}), dict):
            merged[table] = {**defaults, **raw.get(table, {})}
    return merged


def default_only(raw: dict[str, Any], where: str) -> str:
    """A note for an error at ``where`` (``strategy.zero_stage``) when the file did not state that key and the
    default plan filled it in (empty otherwise)."""
    table, _, key = where.partition(".")
    stated = raw.get(table)
    default = DEFAULT_PLAN_DATA.get(table, {}).get(key)
    if table == "model" or default is None or (isinstance(stated, dict) and key in stated):
        return ""
    shown = f'"{default}"' if isinstance(default, str) else str(default)
    return f" ({key} = {shown} is the default plan's: set {where} in the file)"
