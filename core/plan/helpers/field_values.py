"""What a user types for a plan value, read the same in the planner's fields, plan files and ``--set``: whole
numbers with suffixes (``4k``, ``32K``, ``1e3``, ``2_048``) and choices in any case (``LoRA``)."""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict

from vramplan.core.plan.helpers.errors import PlanError, shown
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.helpers.units import parse_number

# every table of a plan: immutable, no unknown keys, no NaN or infinity
FROZEN_TABLE = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

BINARY_K_KEYS = frozenset({"training.seq_len"})  # where 4k is 4096 (context lengths), elsewhere K is 1000


def parse_count(key: str, text: str) -> int | None:
    """A whole number as typed for the plan key ``key`` (``4k``, ``32K``, ``1e3``, ``2_048``; empty: None), the
    same in the planner's fields, plan files and ``--set``. ValueError says what a whole number looks like."""
    value = parse_number(text, integer=True, binary=key in BINARY_K_KEYS)
    assert value is None or isinstance(value, int)
    return value


def count_value(v: Any, key: str) -> Any:
    """A pydantic before-validator's value: a string is parsed as `parse_count` does, anything else passed on."""
    if isinstance(v, str):
        return parse_count(key, v)
    return v


def word_list(v: Any, lower: bool = False) -> Any:
    """A list key's value as typed: ``"q,v"`` or ``"q v"`` (the planner's fields, ``--set key=q,v``) as a tuple of
    its words, a list as it is (the list keys' before-validator: ``training.lora_targets``, ``checklist.ticked``)."""
    if isinstance(v, str):
        words = tuple(w.lower() if lower else w for w in v.replace(",", " ").split())
        return words or (v,)
    return v


def literal_values(annotation: Any) -> tuple[str, ...]:
    """The strings a ``Literal[...]`` (or ``Literal[...] | None``) field takes; () for any other type."""
    if get_origin(annotation) is Literal:
        return tuple(a for a in get_args(annotation) if isinstance(a, str))
    return tuple(v for arg in get_args(annotation) for v in literal_values(arg))


def caseless_choices(model: type[BaseModel], data: Any) -> Any:
    """A table's data with each choice spelled as the plan spells it: ``LoRA`` -> ``lora``, ``Full`` -> ``full``
    (the planner shows ``LoRA``/``QLoRA``; the CLI and plan files take either case)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, value in data.items():
        if isinstance(value, str):
            allowed = field_choices(model, name)
            if allowed and value not in allowed:
                out[name] = next((a for a in allowed if a.lower() == value.strip().lower()), value)
    return out


@memoised(None, group="schema")
def field_choices(model: type[BaseModel], name: str) -> tuple[str, ...]:
    """The strings field `name` of `model` takes (its annotation read once per field, not per validation)."""
    field = model.model_fields.get(name)
    return literal_values(field.annotation) if field is not None else ()


@memoised(None, group="schema")
def field_strictness(model: type[BaseModel], name: str) -> str:
    """``"number"`` for a field that takes numbers but no switch, ``"switch"`` for one that takes a switch but no
    number, ``""`` otherwise (or no such field): the annotation is read once per field, not per validation."""
    field = model.model_fields.get(name)
    if field is None:
        return ""
    kinds = scalar_types(field.annotation)
    number = bool(kinds & {int, float})
    if number and bool not in kinds:
        return "number"
    return "switch" if bool in kinds and not number else ""


def scalar_types(annotation: Any) -> set[type]:
    """The plain types a field's annotation admits: ``int | None`` -> {int, NoneType}, ``PositiveInt`` -> {int}."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return scalar_types(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return {t for arg in get_args(annotation) for t in scalar_types(arg)}
    if origin is Literal:
        return {type(a) for a in get_args(annotation)}
    return {annotation} if isinstance(annotation, type) else set()


def strict_scalars(model: type[BaseModel], data: Any, table: str) -> Any:
    """Refuse what pydantic would coerce silently: ``true`` for a number (``micro_batch_size = true`` is not 1)
    and a number or a string for a switch (``compile = 1``, ``compile = "yes"``). A `PlanError` names
    ``table.key``."""
    if not isinstance(data, dict):
        return data
    for name, value in data.items():
        kind = field_strictness(model, name)
        if not kind:
            continue
        if kind == "number" and isinstance(value, bool):
            raise PlanError(f"must be a number, not {str(value).lower()}", f"{table}.{name}" if table else name)
        if kind == "switch" and not isinstance(value, bool) and isinstance(value, int | float | str):
            # "yes", "0" or "off" for a switch: pydantic would read them as true or false, as it does not 1 or 0
            raise PlanError(f"must be true or false (got {shown(value)})", f"{table}.{name}" if table else name)
    return data
