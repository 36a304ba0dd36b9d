"""The planner's plain logic (no app running): undo history, choices, palette entries, bar geometry, export paths,
path completion, the Model pane's structure keys."""

from __future__ import annotations

import typing

import pytest

from vramplan.core.files.planfile import Meta
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.core.plan.schema.plan import Plan, StrategyConfig, default_plan, plan_from_dict
from vramplan.core.plan.schema.training import TrainingConfig
from vramplan.core.plan.stack.config import StackConfig
from vramplan.tui.choices import CHOICES, blocked, choice_index, error_text, next_valid, plan_value, shown_value
from vramplan.tui.command_table import COMMANDS, bindings, palette_entries
from vramplan.tui.history import PlanHistory
from vramplan.tui.screens.files import with_format
from vramplan.tui.widgets.bars import segment_cells
from vramplan.tui.widgets.choice_bar import layout_tokens
from vramplan.tui.widgets.model_fields import structure_keys, structure_value
from vramplan.tui.widgets.model_pane import model_rows, preset_params
from vramplan.tui.widgets.path_input import complete_path


def _plans(n: int) -> list[Plan]:
    base = default_plan()
    return [base.with_changes({"training.seq_len": 1024 * (i + 1)}) for i in range(n)]


def test_history_undo_redo_and_a_new_change_drops_redo() -> None:
    a, b, c, d = _plans(4)
    h = PlanHistory(a)
    assert h.undo() is None
    h.push(b)
    h.push(c)
    assert h.undo() == b and h.undo() == a and h.undo() is None
    assert h.redo() == b
    h.push(d)  # branches: c is gone
    assert not h.can_redo
    assert h.undo() == b and h.redo() == d


def test_history_coalesces_typing_in_one_field() -> None:
    a, b, c, d = _plans(4)
    h = PlanHistory(a)
    h.push(b, coalesce="training.seq_len")
    h.push(c, coalesce="training.seq_len")  # the same field, still typing: replaces b
    assert h.current == c
    assert h.undo() == a
    assert h.redo() == c
    h.push(d, coalesce="training.seq_len")  # after an undo/redo a new step begins
    assert h.undo() == c


def test_history_is_bounded() -> None:
    plans = _plans(6)
    h = PlanHistory(plans[0], limit=3)
    for p in plans[1:]:
        h.push(p)
    assert h.current == plans[-1]
    assert h.undo() == plans[-2] and h.undo() == plans[-3] and h.undo() is None


def test_history_keeps_each_steps_file_meta() -> None:
    a, b, c, d = _plans(4)
    first, opened = Meta(title="started from"), Meta(title="opened", note="for review")
    h = PlanHistory(a, first)
    h.push(b)  # an edit keeps the file's title and note
    assert h.meta == first
    h.push(c)
    h.set_meta(opened)  # a file opened: its plan and its [meta]
    h.push(d)
    assert h.meta == opened
    assert h.undo() == c and h.meta == opened
    assert h.undo() == b and h.meta == first  # back before the open: the old title and note
    assert h.redo() == c and h.meta == opened
    h.undo()
    h.push(d)  # a new branch drops the opened file's steps
    assert h.meta == first and h.redo() is None


@pytest.mark.parametrize(
    ("key", "literal"),
    [
        ("training.precision", TrainingConfig.model_fields["precision"].annotation),
        ("training.optimizer", TrainingConfig.model_fields["optimizer"].annotation),
        ("training.method", TrainingConfig.model_fields["method"].annotation),
        ("strategy.gradient_checkpointing", StrategyConfig.model_fields["gradient_checkpointing"].annotation),
        ("strategy.attention", StrategyConfig.model_fields["attention"].annotation),
        ("strategy.offload_optimizer", StrategyConfig.model_fields["offload_optimizer"].annotation),
        ("strategy.checkpoint_impl", StrategyConfig.model_fields["checkpoint_impl"].annotation),
        ("stack.framework", StackConfig.model_fields["framework"].annotation),
    ],
)
def test_choices_cover_every_value_of_the_plan_field(key: str, literal: object) -> None:
    values: set[object] = set()
    for arg in typing.get_args(literal):  # Optional[Literal[...]]: the literal's values and None ("auto")
        values |= set(typing.get_args(arg)) if typing.get_args(arg) else {None if arg is type(None) else arg}
    assert {c.value for c in CHOICES[key]} == values


def test_a_key_the_stack_chose_shows_as_the_stacks_choice() -> None:
    """checkpoint_impl left to the stack is its "stack's" choice (None), though the plan holds the stack's value;
    set in the plan, it is that value's choice. The other keys the stack chooses (lora_dtype, quantized_modules,
    bnb_generation, fsdp_version, fsdp_adapter_wrap) have the same choice."""
    plan = default_plan()
    key = "strategy.checkpoint_impl"
    assert plan_value(plan, key) == "non-reentrant" and key in plan.stack_chosen
    assert shown_value(plan, key) is None and CHOICES[key][choice_index(plan, key)].label == "stack's"
    set_ = plan.with_changes({key: "reentrant"})
    assert shown_value(set_, key) == "reentrant" and CHOICES[key][choice_index(set_, key)].value == "reentrant"
    for key in ("training.lora_dtype", "training.quantized_modules", "training.bnb_generation"):
        assert shown_value(plan, key) is None and plan_value(plan, key) is not None and key in plan.stack_chosen
    mine = plan.with_changes({"training.lora_dtype": "fp32"})
    assert shown_value(mine, "training.lora_dtype") == "fp32"


def test_every_choice_is_a_valid_plan_value() -> None:
    plan = default_plan()
    for key, choices in CHOICES.items():
        assert choices[choice_index(plan, key)].value == shown_value(plan, key) or key == "training.quantization"
        for c in choices:
            try:
                plan.with_changes({key: c.value})
            except PlanError as exc:  # impossible with this plan, but never a type error
                assert exc.where and not exc.message.startswith("Input should be"), exc.line()


def test_next_valid_skips_impossible_choices() -> None:
    plan = default_plan().with_changes({"strategy.zero_stage": 1, "strategy.pipeline_parallel": 2})
    nxt = next_valid(plan, "strategy.zero_stage")  # 2 and 3 cannot combine with PP: wraps to 0
    assert isinstance(nxt, Plan) and nxt.strategy.zero_stage == 0
    err = next_valid(default_plan(), "strategy.sequence_parallel")  # needs TP > 1
    assert isinstance(err, PlanError) and "tensor_parallel" in err.message


def test_blocked_choices_and_reasons() -> None:
    plan = default_plan()  # ZeRO-3, no optimizer offload
    reasons = {c.value: why for c, why in blocked(plan, "strategy.offload_parameters")}
    assert set(reasons) == {"cpu", "nvme"}
    assert all("offload_optimizer" in why for why in reasons.values())
    assert blocked(plan, "strategy.gradient_checkpointing") == []


def test_error_text_names_the_other_key() -> None:
    exc = PlanError("needs ZeRO", "strategy.zero_stage")
    assert error_text(exc, "strategy.zero_stage") == "needs ZeRO"
    assert error_text(exc, "strategy.pipeline_parallel") == "strategy.zero_stage: needs ZeRO"


def test_command_table_ids_and_keys_are_unique_and_bound() -> None:
    ids = [c.id for c in COMMANDS]
    assert len(ids) == len(set(ids))
    keys = [k for c in COMMANDS if c.key for k in c.key.split(",")]
    assert len(keys) == len(set(keys))
    assert {b.id for b in bindings()} == {c.id for c in COMMANDS if c.key}
    assert not {"ctrl+q", "ctrl+p", "ctrl+c"} & set(keys)  # left to Textual


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def apply_changes(self, changes: dict[str, object]) -> bool:
        self.calls.append(changes)
        return True

    async def run_action(self, action: str) -> bool:
        self.calls.append(action)
        return True


def test_palette_entries_are_namespaced_and_act_on_the_plan() -> None:
    rec = _Recorder()
    entries = {e.text: e for e in palette_entries(rec)}
    namespaces = {"plan", "view", "model", "gpu", "strategy", "training", "stack", "export"}
    assert all(t.split(": ", 1)[0] in namespaces for t in entries)
    for text in ("model: LLaMA-7B", "model: BLOOM-7B1", "gpu: H100 80GB SXM5", "strategy: ZeRO-3 (+ parameters)"):
        assert any(t.startswith(text) for t in entries), text
    assert entries["plan: undo"].help == "Undo (ctrl+z)"  # no [brackets]: the palette reads help as markup
    assert entries["view: help (every key)"].help == "Help (? f1)"
    entries["model: LLaMA-7B"].run()
    entries["gpu: H100 80GB SXM5"].run()
    entries["strategy: TP 4"].run()
    entries["stack: framework torchtune"].run()
    entries["strategy: checkpointing as the stack does (reentrant or not)"].run()
    assert rec.calls == [
        {"model.preset": "llama-7b"},
        {"hardware.gpu": "h100-80gb"},
        {"strategy.tensor_parallel": 4},
        {"stack.framework": "torchtune"},
        {"strategy.checkpoint_impl": None},  # unset: the stack chooses again
    ]
    assert "stack: torch (torch version)" in entries and "gpu: host_memory_gib (host memory per node, GiB)" in entries
    assert entries["plan: open"].help == "Open (ctrl+o)"
    for text in ("export: TOML", "export: DeepSpeed config", "export: Markdown report"):
        assert text in entries, text


def test_segment_cells_add_up_to_the_rounded_total() -> None:
    assert segment_cells([1, 1, 1], 3, 10) == [3, 4, 3]
    assert sum(segment_cells([5, 7, 11], 40, 38)) == round(23 * 38 / 40)
    assert segment_cells([10], 0, 10) == [0]


def test_choice_bar_layout_wraps_and_packs() -> None:
    labels = ["none", "selective", "full"]
    assert layout_tokens(labels, 30) == [[(0, 0), (1, 7), (2, 19)]]  # one space apart
    assert layout_tokens(labels, 23) == [[(0, 0), (1, 6), (2, 17)]]  # touching, still one line
    assert layout_tokens(labels, 18) == [[(0, 0), (1, 6)], [(2, 0)]]  # wrapped


def test_model_filter_is_loose_and_keeps_the_preset_order() -> None:
    assert [pid for pid, _ in model_rows("")][:3] == ["llama-7b", "bloom-7b1", "qwen2.5-72b"]
    assert model_rows("qwen72")[0][0] == "qwen2.5-72b"  # letters in order, punctuation ignored
    assert model_rows("bloom 7")[0][0] == "bloom-7b1"  # exact matches first (olmo-2-7b matches loosely)
    assert {pid for pid, _ in model_rows("llama 70")} == {
        "llama-2-70b",
        "llama-3-70b",
        "llama-3.1-70b",
        "llama-3.3-70b",
    }
    assert model_rows("zzz") == ()


def test_the_list_counts_each_preset_as_its_architecture_does(tmp_path, monkeypatch) -> None:
    """Built-in rows show the preset's stated count (no architecture worked out at start); it is the
    architecture's count. A user preset's row is worked out from its architecture, whatever it states."""
    for mp in presets.registry().sorted_models():
        assert preset_params(mp.id) == fmt_count(presets.model_config({"preset": mp.id}).arch().total_params), mp.id
    (tmp_path / "models").mkdir()
    llama = (presets.DATA_DIR / "models" / "llama-7b.toml").read_text()
    wrong = llama.replace('id = "llama-7b"\n', "").replace("params = 6738415616", "params = 1000")
    (tmp_path / "models" / "mine.toml").write_text(wrong)
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    try:
        presets.reload()
        assert presets.registry().models["mine"].params == 1000
        assert preset_params("mine") == preset_params("llama-7b") == "6.74 B"
    finally:
        monkeypatch.undo()
        presets.reload()


def test_export_path_follows_the_format() -> None:
    assert with_format("plans/llama.toml", "markdown") == "plans/llama.md"
    assert with_format("llama.md", "deepspeed") == "llama.deepspeed.json"
    assert with_format("llama.deepspeed.json", "toml") == "llama.toml"  # the whole two-part extension
    assert with_format("llama", "toml") == "llama.toml" and with_format("  ", "toml") == "  "


def test_path_completion(tmp_path) -> None:
    (tmp_path / "ckpt-7b").mkdir()
    (tmp_path / "plan.toml").write_text("")
    (tmp_path / "plan.txt").write_text("")
    (tmp_path / ".hidden.toml").write_text("")
    base = f"{tmp_path}/"
    assert complete_path(base + "ck") == base + "ckpt-7b/"  # a directory gets its slash
    assert complete_path(base + "pl", (".toml",)) == base + "plan.toml"  # only the wanted files
    assert complete_path(base + "plan.t", (".json",)) is None
    assert complete_path(base + "plan.toml") is None  # complete already
    assert complete_path(base + ".h") == base + ".hidden.toml"  # hidden names only when asked for
    assert complete_path(base, (".toml",)) == base + "ckpt-7b/"
    assert complete_path(f"{tmp_path}/missing/x") is None and complete_path("") is None
    assert complete_path(base + "plan\0") is None and complete_path("~no-such-user-here/pl") is None  # no raise


def test_structure_keys_follow_the_family() -> None:
    assert structure_keys("mistral") == {"head_dim"}
    assert structure_keys("gpt_neox") == {
        "attention_bias",
        "use_parallel_residual",
        "hidden_act",
        "partial_rotary_factor",
    }
    assert "head_dim" not in structure_keys("bloom") and "head_dim" in structure_keys("phi3")
    sizes = {"vocab_size": 50304, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12}
    neox = plan_from_dict({"model": {"model_type": "gpt_neox", **sizes, "num_attention_heads": 12}}).model
    # unset keys show what the family builds: parallel residual, GELU, a quarter of each head rotated, biases
    shown = {k: structure_value(neox, k) for k in sorted(structure_keys("gpt_neox") | {"head_dim"})}
    assert shown == {
        "attention_bias": True,
        "head_dim": 768 // 12,
        "hidden_act": "gelu",
        "partial_rotary_factor": 0.25,
        "use_parallel_residual": True,
    }
