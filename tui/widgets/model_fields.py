"""The Model pane's own rows: the config.json path prompt, and the structure keys beyond the sizes (biases, parallel
residual, activation, partial RoPE, learned positions, Falcon's flags, head_dim), shown for the families whose
config has them (`core.plan.architecture.arch.Family.options`), each showing what is in effect when the plan leaves it
unset."""

from __future__ import annotations

import os
from typing import Any

from textual import on
from textual.widget import Widget
from textual.widgets import Input

from vramplan.core.plan.architecture.arch import ACTIVATIONS, OPTION_KEYS
from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.architecture.families import FAMILIES
from vramplan.core.plan.helpers.units import number_text
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.choices import Choice
from vramplan.tui.widgets.fields import ChoiceField, FieldRow, NumberField
from vramplan.tui.widgets.path_input import PathSuggester
from vramplan.tui.widgets.text import compact

STRUCTURE_KEYS = frozenset({"head_dim", *OPTION_KEYS})
YES_NO = (Choice(False, "no", ""), Choice(True, "yes", ""))


def structure_value(model: ModelConfig, key: str) -> Any:
    """The structure key in effect: the plan's value, else what the family builds
    (`core.plan.architecture.arch.build_arch`)."""
    value = getattr(model, key)
    if value is not None:
        return value
    arch = model.arch()
    fam = arch.fam
    return {
        "head_dim": arch.d,
        "attention_bias": arch.linears[0].bias,
        "mlp_bias": arch.linears[-1].bias,
        "use_parallel_residual": arch.parallel,
        "num_ln_in_parallel_attn": 2 if model.new_decoder_architecture else fam.norms_in_parallel,
        "hidden_act": arch.act,
        "partial_rotary_factor": fam.rotary_factor,
        "max_position_embeddings": arch.positions or fam.max_positions,
        "alibi": arch.alibi,
        "new_decoder_architecture": arch.kv_expanded,
    }[key]


def structure_keys(model_type: str) -> frozenset[str]:
    """The structure keys a family's config may set: its `options`, and ``head_dim`` where heads need not be
    hidden_size / num_attention_heads wide (separate q/k/v projections, and Phi-3)."""
    fam = FAMILIES[model_type]
    free_head_dim = not fam.fused_qkv or model_type == "phi3"
    return fam.options | ({"head_dim"} if free_head_dim else set())


class StructureChoice(ChoiceField):
    """A choice among a structure key's values, showing the one in effect when the plan leaves the key unset."""

    def value_in(self, plan: Plan) -> Any:
        return structure_value(plan.model, self.key.partition(".")[2])


class OptionalNumber(NumberField):
    """A structure number that may be left empty: unset, the family's default (shown as the placeholder)."""

    def __init__(self, key: str, label: str, kind: type[int] | type[float], **kw: Any) -> None:
        super().__init__(key, label, integer=kind is int, **kw)

    def show_default(self, value: float) -> None:
        self.set_placeholder(f"{number_text(value, self.integer)} (default)")


def structure_rows() -> list[FieldRow]:
    """One row per structure key (the Model pane shows those the model's family allows)."""
    acts = tuple(Choice(a, a, "") for a in ACTIVATIONS)
    return [
        OptionalNumber("model.head_dim", "head_dim", int, tooltip="head_dim: empty = hidden_size / heads"),
        StructureChoice("model.attention_bias", "attention bias", YES_NO, tooltip="attention_bias (falcon: bias)"),
        StructureChoice("model.mlp_bias", "MLP bias", YES_NO, tooltip="mlp_bias (falcon: bias)"),
        StructureChoice(
            "model.use_parallel_residual",
            "parallel residual",
            YES_NO,
            tooltip="use_parallel_residual (falcon: parallel_attn): attention and MLP both read the block input",
        ),
        StructureChoice(
            "model.num_ln_in_parallel_attn",
            "parallel norms",
            (Choice(1, "1", ""), Choice(2, "2", "")),
            tooltip="num_ln_in_parallel_attn: LayerNorms of a parallel block",
        ),
        StructureChoice(
            "model.new_decoder_architecture", "new decoder arch", YES_NO, tooltip="new_decoder_architecture (falcon)"
        ),
        StructureChoice("model.alibi", "ALiBi", YES_NO, tooltip="alibi: ALiBi instead of RoPE"),
        StructureChoice("model.hidden_act", "activation", acts, tooltip="hidden_act of the MLP"),
        OptionalNumber(
            "model.partial_rotary_factor",
            "rotary fraction",
            float,
            tooltip="partial_rotary_factor (gpt_neox: rotary_pct): the part of a head RoPE rotates",
        ),
        OptionalNumber(
            "model.max_position_embeddings",
            "max positions",
            int,
            tooltip="max_position_embeddings (gpt2: n_positions): learned position rows; bounds seq_len",
        ),
    ]


def short_path(path: str) -> str:
    """``~/ckpt/config.json`` for a path under the home directory."""
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return path


class ConfigPathField(FieldRow):
    """The model's config.json (or checkpoint directory): typed, then loaded with enter."""

    keeps_text = True
    _plan_value: Any = ()  # the plan's value last shown (the text is replaced only when that changes)

    def make_control(self) -> Widget:
        return compact(
            Input(
                placeholder="path, enter loads it",
                suggester=PathSuggester((".json",)),
                classes="-valid",  # as `fields.plan_input`
            )
        )

    def set_control(self, value: Any) -> None:
        field = self.control
        assert isinstance(field, Input)
        if value != self._plan_value:
            self._plan_value = value
            field.value = short_path(value) if value else ""

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()  # loaded on enter, not on every key

    @on(Input.Submitted)
    def _load(self, event: Input.Submitted) -> None:
        event.stop()
        path = event.value.strip()
        if not path:
            self.post_invalid("enter the path of a config.json or of a checkpoint directory holding one")
        else:
            self.post_change(path)
