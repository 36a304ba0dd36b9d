"""The plan's ``[stack]`` in the Hardware pane: the framework (a choice: changing it re-chooses the keys the plan
leaves to the stack, `core.plan.stack.config`), the line naming what the stack chose, and one text field per package
version. And the node's host memory and NVMe limits (`core.plan.node`) as the Hardware pane shows them."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from textual.content import Content
from textual.widget import Widget
from textual.widgets import Label, Static

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.field_values import literal_values
from vramplan.core.plan.helpers.units import gib_text
from vramplan.core.plan.node import Limit
from vramplan.core.plan.resolved import choices_text, key_matters
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.stack.config import PACKAGES
from vramplan.core.plan.stack.defaults import STACK_KEYS
from vramplan.tui.widgets.fields import ChoiceField, FieldRow, NumberField, TextField
from vramplan.tui.widgets.text import show_text

NODE_KEYS = ("hardware.host_memory_gib", "hardware.nvme_gib")


def stack_rows() -> Iterator[Widget]:
    """The stack section of the Hardware pane."""
    yield Label("stack (what runs the training)", classes="section")
    yield ChoiceField(
        "stack.framework",
        "framework",
        tooltip="its defaults fill the keys the plan leaves unset (checkpointing's implementation, LoRA dtype...)",
    )
    yield Static(id="stack-chose", classes="details muted")
    for package in PACKAGES:
        tooltip = f"the {package} version, e.g. 2.5.1; empty: unset"
        yield TextField(f"stack.{package}", package, placeholder="unset (newest)", tooltip=tooltip)


def show_stack(pane: Widget, est: Estimate) -> None:
    """The line naming the keys the stack chose for this plan (`core.plan.resolved.choices_text`)."""
    text = choices_text(est.plan) or f"stack {est.plan.stack.framework}: no key of this plan left to it"
    show_text(pane.query_one("#stack-chose", Static), Content(text))


def unplaced_stack_keys(table: str, placed: Collection[str]) -> tuple[str, ...]:
    """The stack-decided keys of ``table`` (`core.plan.stack.defaults.STACK_KEYS`) a pane does not place itself."""
    return tuple(k for k in STACK_KEYS if k.partition(".")[0] == table and k not in placed)


def stack_key_rows(table: str, placed: Collection[str]) -> Iterator[FieldRow]:
    """A row for each stack-decided key of ``table`` the pane does not place itself, made from the schema: a choice
    for a ``Literal`` or a flag (with the stack's choice first), a number otherwise; labelled by its name and
    explained by its description. A new stack key shows in the planner with no change to it."""
    for key in unplaced_stack_keys(table, placed):
        name = key.partition(".")[2]
        field = Plan.model_fields[table].annotation.model_fields[name]  # type: ignore[union-attr]
        label, tip = name.replace("_", " ")[:17], field.description
        if literal_values(field.annotation) or field.annotation in (bool, bool | None):
            yield ChoiceField(key, label, tooltip=tip)
        else:
            yield NumberField(key, label, placeholder="the stack's", tooltip=tip)


def show_stack_keys(pane: Widget, plan: Plan, keys: Collection[str]) -> None:
    """Each generated stack-key row shows where the key changes the plan's estimate (`key_matters`)."""
    for key in keys:
        pane.query_one(f"#f-{key.replace('.', '-')}").display = key_matters(plan, key)


def node_rows() -> Iterator[FieldRow]:
    yield NumberField(
        "hardware.host_memory_gib",
        "host RAM / node",
        effect=True,
        tooltip="GiB of host memory per node, the limit of CPU offload; empty: the limit shown under the field",
    )
    yield NumberField(
        "hardware.nvme_gib",
        "NVMe / node",
        effect=True,
        tooltip="GiB of NVMe space per node, the limit of NVMe offload; empty: the limit shown under the field",
    )


def show_limit(row: NumberField, limit: Limit, need: int, what: str, same_source: bool = False) -> None:
    """One node limit at its field: the limit in effect as the placeholder, where it comes from when unset (the
    same node as the field above: ``same_source``), what the plan offloads against it, and a warning when that
    is over it."""
    where = "this machine" if "machine" in limit.source else limit.source.partition(":")[0]
    row.set_placeholder(f"{gib_text(limit.bytes, 0)} ({where})")
    lines = [] if limit.user else [f"unset: {'the same ' + where if same_source else limit.source}"]
    if need and need <= limit.bytes:
        lines.append(f"{what} per node: {gib_text(need)} of {gib_text(limit.bytes)} GiB")
    row.set_effect("\n".join(lines))
    over = need - limit.bytes
    row.set_note(f"✘ {what} needs {gib_text(need)} GiB per node: over by {gib_text(over)} GiB" if over > 0 else "")
