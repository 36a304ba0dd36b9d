"""A stack-decided key added to the schema shows in the planner with no change to the TUI: its choices are made from
the schema (the stack's choice first) and the pane of its table gives it a row (`tui.widgets.stack_fields`)."""

from __future__ import annotations

import pytest

from vramplan.core.plan.stack.defaults import STACK_KEYS
from vramplan.tui import choices
from vramplan.tui.widgets.fields import ChoiceField, NumberField
from vramplan.tui.widgets.stack_fields import stack_key_rows, unplaced_stack_keys
from vramplan.tui.widgets.strategy_pane import PLACED_STACK_KEYS as STRATEGY_PLACED
from vramplan.tui.widgets.training_pane import PLACED_STACK_KEYS as TRAINING_PLACED


def test_a_stack_key_without_a_choices_row_gets_its_choices_from_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {k: v for k, v in choices.CHOICES.items() if k != "strategy.fsdp_grad_sync"}
    monkeypatch.setattr(choices, "CHOICES", table)
    made = choices.choices_of("strategy.fsdp_grad_sync")
    assert [c.value for c in made] == [None, "each", "last"]  # the stack's, then StrategyConfig's Literal
    assert made[0].label == "stack's"


def test_every_stack_key_has_a_row_placed_or_made() -> None:
    for table in ("strategy", "training"):
        made = {row.key: row for row in stack_key_rows(table, placed=())}
        assert set(made) == {k for k in STACK_KEYS if k.startswith(table + ".")}
    # the panes place their own rows for the older keys; issue 43's loss path gets the row made from the schema
    assert unplaced_stack_keys("training", TRAINING_PLACED) == ()
    assert unplaced_stack_keys("strategy", STRATEGY_PLACED) == ("strategy.loss_path",)
    rows = {row.key: row for row in stack_key_rows("training", placed=())}
    assert isinstance(rows["training.lora_dtype"], ChoiceField)
    assert isinstance(rows["training.lora_dropout"], NumberField)  # a float: a number row
