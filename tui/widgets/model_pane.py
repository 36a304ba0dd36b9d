"""The Model pane: presets (filtered by typing), the chosen model's dimensions and parameter count, and its
config.json keys, editable for a custom model."""

from __future__ import annotations

import asyncio
import re
from functools import cached_property
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.widgets import Input, Label, OptionList, Static

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.architecture.families import FAMILIES
from vramplan.core.plan.architecture.hub_cache import is_repo_id
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.hub_ids import hub_table, model_changes
from vramplan.core.plan.describe import model_name, modified_keys
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.tui.choices import Choice
from vramplan.tui.widgets.fields import ChoiceField, FieldRow, IntField, PlanPane
from vramplan.tui.widgets.model_fields import (
    STRUCTURE_KEYS,
    ConfigPathField,
    OptionalNumber,
    short_path,
    structure_keys,
    structure_rows,
    structure_value,
)
from vramplan.tui.widgets.preset_list import USER_MARK, PresetList, broken_notes
from vramplan.tui.widgets.text import compact, show_text

FAMILY_CHOICES = tuple(Choice(t, t, f"model: type {t}") for t in FAMILIES)
TIED = (Choice(False, "no", ""), Choice(True, "yes", ""))
MODEL_INTS = (
    ("model.vocab_size", "vocab_size"),
    ("model.hidden_size", "hidden_size"),
    ("model.intermediate_size", "intermediate"),
    ("model.num_hidden_layers", "layers"),
    ("model.num_attention_heads", "heads"),
    ("model.num_key_value_heads", "KV heads"),
)


@memoised(None, group="presets")  # emptied with the presets (`presets.reload`): a user preset may change
def preset_params(preset_id: str) -> str:
    """The preset's parameter count, as the list shows it. A built-in preset states it (``params``, equal to the
    architecture's count: `tests/core/plan/test_arch.py` checks every one), so the list needs no 45 architectures at
    start (14M of the first frame's instructions); a user preset's is worked out from its architecture."""
    reg = presets.registry()
    if not reg.is_user("models", preset_id) and (stated := reg.models[preset_id].params) is not None:
        return fmt_count(stated)
    try:
        return fmt_count(presets.model_config({"preset": preset_id}).arch().total_params)
    except ValueError:  # PlanError, ValidationError: a user preset whose config.json went away: still listed
        return "?"


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _subsequence(needle: str, hay: str) -> bool:
    it = iter(hay)
    return all(ch in it for ch in needle)


@memoised(64, group="presets")  # emptied with the presets (`presets.reload`)
def model_rows(query: str) -> tuple[tuple[str, str], ...]:
    """Presets in their `order` (LLaMA-7B, BLOOM-7B1 and Qwen2.5-72B first) matching every word of `query`,
    punctuation and case ignored, letters in order (``qwen72`` finds Qwen2.5-72B); exact substrings first. Worked
    out once per query: the list is shown again after every plan change."""
    words = [_squash(w) for w in query.split() if _squash(w)]
    named = hub_table().get(query.strip().lower()) if "/" in query else None  # a Hugging Face id a preset names
    ranked = []
    for mp in presets.registry().sorted_models():
        hay = _squash(f"{mp.name} {mp.id} {mp.config.get('model_type', '')}")
        if mp.id == named:
            ranked.append((False, mp))
        elif all(_subsequence(w, hay) for w in words):
            exact = all(w in hay for w in words)
            ranked.append((not exact, mp))
    ranked.sort(key=lambda r: r[0])  # stable: keeps the preset order within each group
    reg = presets.registry()
    return tuple(
        (
            mp.id,
            f"{mp.name:<16} {preset_params(mp.id):>9}" + (USER_MARK if reg.is_user("models", mp.id) else ""),
        )
        for _, mp in ranked
    )


class ModelFilter(Input):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("down", "app.focus_next", "Into the list", show=False)]


class ModelPane(PlanPane):
    TITLE = "Model"

    _shown_for: tuple[object, ...] | None = None  # what `show_estimate` last showed: the model, trainable, presets

    def compose(self) -> ComposeResult:
        yield compact(ModelFilter(placeholder="type to filter presets  ( / )", id="model-filter"))
        yield PresetList("model.preset", id="model-list")
        yield Static(id="model-details", classes="details")

    @cached_property
    def _rows_built(self) -> asyncio.Event:
        return asyncio.Event()

    def on_mount(self) -> None:
        self.call_after_refresh(self._mount_rows)

    async def built(self) -> None:
        await self._rows_built.wait()

    async def _mount_rows(self) -> None:
        """The config.json rows and the structure rows, mounted after the first frame: at 80x24 the list and the
        details fill the pane, and styling these 19 rows (95 widgets) would more than double the first frame's
        work. Each structure row is shown once the plan says its family has it."""
        structure = structure_rows()
        for row in structure:
            row.display = False
        rows: list[FieldRow] = [
            ConfigPathField("model.hf_config", "load config.json", tooltip="a local config.json or checkpoint dir"),
            ChoiceField("model.model_type", "model_type", FAMILY_CHOICES),
            *(IntField(key, label) for key, label in MODEL_INTS),
            ChoiceField("model.tie_word_embeddings", "tied embeddings", TIED),
            *structure,
        ]
        self.fields.update({row.key: row for row in rows})
        self._shown_for = None  # the new rows show the model too
        # Shown before they are mounted: styled and laid out once, with their values. Set after, each control's
        # repaint reached the screen after the mount's layout pass, marked its map of the whole screen stale, and
        # the first key pressed paid for rebuilding it (2 ms).
        self._sync()
        await self.mount_all([Label("config.json (edit for a custom model)", classes="section"), *rows])
        self._rows_built.set()

    def show_estimate(self, est: Estimate) -> None:
        shown = (est.plan.model, est.params_trainable, presets.registry())
        if self._shown_for is not None and all(a is b or a == b for a, b in zip(shown, self._shown_for, strict=True)):
            return  # a change outside [model] and the trainable count (a strategy key): nothing here changes
        self._shown_for = shown
        self._show_list()
        m = est.plan.model
        changed = modified_keys(m)
        head = f"  {m.model_type}, {fmt_count(est.params_total)} params"
        moe = m.arch().moe
        if moe is not None:  # what one token passes through (parameters.active in --json)
            active = est.parameters_json()["active"]
            head += f", {fmt_count(active)} active (top-{moe.top_k} of {moe.n_experts} experts)"
        if est.params_trainable != est.params_total:
            head += f" ({fmt_count(est.params_trainable)} trainable)"
        kv = f" ({m.num_key_value_heads} KV)" if m.num_key_value_heads != m.num_attention_heads else ""
        dims = (
            f"{m.num_hidden_layers} layers, hidden {m.hidden_size}, FFN {m.intermediate_size}, "
            f"{m.num_attention_heads} heads{kv}, vocab {m.vocab_size}" + (", tied" if m.tie_word_embeddings else "")
        )
        text = Content.from_markup("[b]$name[/b]$rest", name=model_name(m), rest=f"{head}\n{dims}")
        reg = presets.registry()
        if m.preset and reg.is_user("models", m.preset):
            text += Content.styled(f"\nuser preset: {reg.origin[f'models/{m.preset}']}", "dim")
        if m.vision_params:  # a multimodal model: its vision tower, in the total, frozen unless the plan trains it
            how = "trained" if est.plan.training.vision_tower == "trained" else "frozen"
            text += Content.styled(f"\nvision tower {fmt_count(m.vision_params)} params ({how})", "dim")
        if m.hf_config and not m.preset:
            text += Content.styled(f"\nfrom {short_path(m.hf_config)}", "dim")
        if changed:
            source = "preset" if m.preset else "config.json"
            text += Content.styled(f"\nchanged from the {source}: {', '.join(changed)}", "dim")
        show_text(self.query_one("#model-details", Static), text)
        self._show_structure(m)

    def _show_structure(self, m: ModelConfig) -> None:
        """The structure rows of this family only; an empty number shows the default in effect."""
        allowed = structure_keys(m.model_type)
        for key, row in self.fields.items():
            name = key.partition(".")[2]
            if name in STRUCTURE_KEYS:
                row.display = name in allowed
                if isinstance(row, OptionalNumber) and name in allowed:
                    row.show_default(structure_value(m.model_copy(update={name: None}), name))

    def _show_list(self) -> None:
        query = self.query_one("#model-filter", Input).value
        current = self.estimate.plan.model.preset if self.estimate else None
        rows = model_rows(query)
        self.query_one("#model-list", PresetList).show_rows(rows, current, broken_notes("models"), bool(query.strip()))

    @on(Input.Changed, "#model-filter")
    def _filter(self, event: Input.Changed) -> None:
        event.stop()
        self._show_list()

    @on(Input.Submitted, "#model-filter")
    def _pick_first(self, event: Input.Submitted) -> None:
        """Enter in the filter: a Hugging Face id ``ORG/NAME`` as ``--model`` takes one (the Hub cache's
        config.json, else its preset); anything else picks the highlighted preset."""
        event.stop()
        text = event.input.value.strip()
        if is_repo_id(text):
            try:
                found = model_changes(text)
            except PlanError as exc:
                self.post_message(PlanPane.Invalid("model.preset", exc.message))
                return
            self.post_message(PlanPane.Changed(dict(found.changes)))
            event.input.value = ""
            return
        options = self.query_one("#model-list", PresetList)
        option = options.highlighted_option
        if option is not None and option.id:
            self.post_message(PlanPane.Changed({"model.preset": option.id}))
            event.input.value = ""  # done filtering: the whole list again, the pick marked, keys are commands
            self.screen.set_focus(options)

    @on(OptionList.OptionSelected, "#model-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(PlanPane.Changed({"model.preset": event.option.id}))
