"""The command table: every planner command once, generating the key bindings, the footer, the help screen and
the command palette.

Each row: a stable id (users remap keys by id with ``App.set_keymap``), the key(s), the action on the planner
screen, a short description (footer and help), whether the footer shows it, its namespaced palette entry, its help
group and, where the description is too long for the footer at 80 columns, a shorter footer label.
Later commands (checklist, advisor...) are one more row here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple, Protocol

from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.describe import short_gpu_name
from vramplan.core.plan.stack.config import PACKAGES
from vramplan.tui.choices import CHOICES, PARALLEL_PALETTE, PARALLEL_SIZES


class Command(NamedTuple):
    id: str  # stable binding id, for keymaps
    key: str | None  # Textual key names, comma-separated (None: palette only)
    action: str  # an action of the planner screen ("app.*" for the app's)
    description: str  # footer and help text
    footer: bool = False
    palette: str | None = None  # namespaced palette entry ("plan: undo"); None: not in the palette
    group: str = "Plan"  # section of the help screen
    label: str | None = None  # the footer's label where the description is too long for 80 columns
    extra: bool = False  # needs the `measure` extra (torch, transformers, peft): in the palette only with it


def _cycle(key: str) -> str:
    return f"cycle({key!r})"


COMMANDS: tuple[Command, ...] = (
    Command("help", "question_mark,f1", "help", "Help", True, "view: help (every key)", "View"),
    Command("undo", "ctrl+z", "undo", "Undo", True, "plan: undo"),
    Command("redo", "ctrl+y", "redo", "Redo", False, "plan: redo"),
    Command("export", "ctrl+s", "export", "Export", True, None),
    Command("export_toml", None, "export('toml')", "Export the plan file (TOML)", False, "export: TOML"),
    Command(
        "export_deepspeed", None, "export('deepspeed')", "Export a DeepSpeed config", False, "export: DeepSpeed config"
    ),
    Command("export_markdown", None, "export('markdown')", "Export a review report", False, "export: Markdown report"),
    Command(
        "export_accelerate",
        None,
        "export('accelerate')",
        "Export an accelerate FSDP config",
        False,
        "export: accelerate config",
    ),
    Command("open_plan", "ctrl+o", "open_plan", "Open", True, "plan: open"),
    Command("load_config", None, "load_config", "Load a config.json", False, "model: load a config.json", "View"),
    Command("explain", "e", "explain", "Explain", False, "view: explain a memory figure", "View"),
    Command("find_model", "slash", "find_model", "Find a model", False, "model: find a preset by name", "View"),
    Command("leave_field", "escape", "leave_field", "Leave a text field", False, None, "View"),
    Command("pane_model", "1", "show_pane('model')", "Model pane", False, "view: model pane", "View"),
    Command("pane_hardware", "2", "show_pane('hardware')", "Hardware pane", False, "view: hardware pane", "View"),
    Command("pane_training", "3", "show_pane('training')", "Training pane", False, "view: training pane", "View"),
    Command("pane_strategy", "4", "show_pane('strategy')", "Strategies pane", False, "view: strategies pane", "View"),
    Command(
        "pane_checklist",
        "5",
        "show_pane('checklist')",
        "Checklist, fit advisor",
        True,
        "view: checklist pane",
        "View",
        "Checks",
    ),
    Command("fit_advisor", None, "show_pane('checklist')", "Fit advisor", False, "view: fit advisor (what fits)"),
    Command("gpu_guide", "g", "gpu_guide", "GPU guide", False, "view: GPU guide (which GPU, how many)", "View"),
    Command("toggle_pin", "P", "toggle_pin", "Pin / unpin the plan", False, "plan: pin (compare edits with it)"),
    Command("unpin", None, "unpin", "Unpin the plan", False, "plan: unpin"),
    Command("compare", "d", "compare", "Compare to pinned", False, "view: compare with the pinned plan"),
    Command(
        "cycle_checkpointing",
        "c",
        _cycle("strategy.gradient_checkpointing"),
        "Checkpointing",
        True,
        None,
        "Strategies",
        "Ckpt",
    ),
    Command("cycle_zero", "z", _cycle("strategy.zero_stage"), "ZeRO stage", True, None, "Strategies", "ZeRO"),
    Command(
        "toggle_attention", "a", _cycle("strategy.attention"), "Flash or eager attention", False, None, "Strategies"
    ),
    Command(
        "toggle_int8", "i", _cycle("strategy.activation_compression"), "int8 activations", False, None, "Strategies"
    ),
    Command(
        "toggle_fused_ce", "x", _cycle("strategy.fused_cross_entropy"), "Fused cross-entropy", False, None, "Strategies"
    ),
    Command(
        "cycle_offload_optimizer",
        "o",
        _cycle("strategy.offload_optimizer"),
        "Offload optimizer",
        False,
        None,
        "Strategies",
    ),
    Command(
        "cycle_offload_parameters",
        "p",
        _cycle("strategy.offload_parameters"),
        "Offload parameters",
        False,
        None,
        "Strategies",
    ),
    Command(
        "toggle_sequence_parallel",
        "s",
        _cycle("strategy.sequence_parallel"),
        "Sequence parallel",
        False,
        None,
        "Strategies",
    ),
    Command("cycle_precision", "r", _cycle("training.precision"), "Precision regime", False, None, "Training"),
    Command("cycle_method", "m", _cycle("training.method"), "Method: full, LoRA, QLoRA", False, None, "Training"),
    Command("measure", None, "measure", "Measure this plan here", False, "plan: measure here (real step)", extra=True),
    Command("trace", None, "trace", "Trace this plan", False, "plan: trace this plan (fake tensors)", extra=True),
    Command("calibration", None, "load_calibration", "Apply a calibration file", False, "plan: apply a calibration"),
)


def measure_available() -> bool:
    """The ``measure`` extra is installed: torch, transformers and peft are found (``find_spec``), none imported."""
    from importlib.util import find_spec

    try:
        return all(find_spec(name) is not None for name in ("torch", "transformers", "peft"))
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
        return False


# The palette's key as the footer shows it: the commands the footer has no room for are found there.
PALETTE_LABEL = "all commands"

# Keys Textual and the focused widget handle, listed on the help screen after the table's.
WIDGET_KEYS: tuple[tuple[str, str], ...] = (
    ("tab", "Next field"),
    ("shift+tab", "Previous field"),
    ("↑ ↓ enter", "Move in a list, pick"),
    ("← → space", "Change a choice"),
    ("ctrl+p", "Command palette"),
    ("ctrl+q", "Quit"),
)


_KEY_LABELS = {"question_mark": "?", "slash": "/", "escape": "esc"}


def key_label(key: str) -> str:
    """A Textual key name as people write it (``question_mark`` -> ``?``)."""
    return _KEY_LABELS.get(key, key)


def bindings(commands: tuple[Command, ...] = COMMANDS) -> list[BindingType]:
    """The table's keys, each described in the footer by its ``label`` (or its description) and in full in its
    tooltip; every other key is in the help screen (?) and the palette (ctrl+p: all commands). A setting's key
    (``c``, ``z``...: a ``cycle``) is a priority binding, run as the app receives it instead of after the key has
    bubbled up from the focused widget through its five containers (about a tenth of a key's time to its frame).
    A text field still gets its letter: Textual leaves the keys a focused field takes (`Widget.check_consume_key`)
    out of the bindings it looks up."""
    return [
        Binding(
            c.key,
            c.action,
            c.label or c.description,
            show=c.footer,
            id=c.id,
            priority=c.action.startswith("cycle("),
            tooltip=c.description if c.label else "",
        )
        for c in commands
        if c.key
    ]


# The numeric settings, named as the palette finds them (`micro`, `seq`, `rank`, `gpus per node`...).
NUMBER_FIELDS: dict[str, str] = {
    "training.micro_batch_size": "micro batch size",
    "training.seq_len": "sequence length",
    "training.grad_accum_steps": "gradient accumulation steps",
    "training.lora_rank": "LoRA rank",
    "training.mfu": "MFU setting",
    "training.tokens": "token budget",
    "hardware.gpus_per_node": "GPUs per node",
    "hardware.nodes": "nodes",
    "hardware.price_per_gpu_hour": "price per GPU-hour",
    "hardware.host_memory_gib": "host memory per node, GiB",
    "hardware.nvme_gib": "NVMe per node, GiB",
    "strategy.tensor_parallel": "tensor parallel degree",
    "strategy.pipeline_parallel": "pipeline parallel degree",
    "strategy.loss_chunks": "loss chunks",
}
# The stack's package versions (text fields of the Hardware pane), as the palette finds them (`stack: torch`).
VERSION_FIELDS: dict[str, str] = {f"stack.{p}": f"{p} version" for p in PACKAGES}


class Planner(Protocol):
    """What the palette needs from the planner screen."""

    def apply_changes(self, changes: dict[str, Any]) -> bool: ...

    async def run_action(self, action: str) -> bool: ...


class Entry(NamedTuple):
    text: str  # "model: LLaMA-7B"
    help: str
    run: Callable[[], Any]


def palette_entries(planner: Planner) -> Iterator[Entry]:
    """Every palette entry: the table's commands, the numeric fields (first among equal matches: `seq` opens the
    sequence length), then model and GPU presets, then settings."""
    extra = measure_available()
    for command in COMMANDS:
        if command.palette and (extra or not command.extra):
            keys = f" ({' '.join(key_label(k) for k in command.key.split(','))})" if command.key else ""
            yield Entry(command.palette, command.description + keys, partial(planner.run_action, command.action))
    for key, label in (NUMBER_FIELDS | VERSION_FIELDS).items():  # the palette opens the field, typing does the rest
        table, _, name = key.partition(".")
        action = partial(planner.run_action, f"edit_field('{key}')")
        namespace = "gpu" if table == "hardware" else table  # the palette's namespaces (gpu: H100 80GB SXM5)
        yield Entry(f"{namespace}: {name} ({label})", f"edit {key}: the field takes what you type", action)
    reg = presets.registry()
    for mp in reg.sorted_models():
        cfg = mp.config
        user = " (user)" if reg.is_user("models", mp.id) else ""
        about = (
            f"{cfg['model_type']}, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}"
            if "model_type" in cfg
            else f"from {cfg.get('hf_config', 'a config.json')}"
        )
        yield Entry(
            f"model: {mp.name}{user}",
            about,
            partial(planner.apply_changes, {"model.preset": mp.id}),
        )
    for g in reg.sorted_gpus():
        tf = g.bf16_tflops if g.bf16 else g.fp16_tflops
        yield Entry(
            f"gpu: {short_gpu_name(g.name)}" + (" (user)" if reg.is_user("hardware", g.id) else ""),
            f"{g.memory_mib / 1024:.1f} GiB, {tf:g} dense {'bf16' if g.bf16 else 'fp16'} TFLOP/s",
            partial(planner.apply_changes, {"hardware.gpu": g.id}),
        )
    for key, choices in CHOICES.items():
        for choice in choices:
            yield Entry(
                choice.palette,
                f"set {key} = {choice.value if choice.value is not None else '(unset)'}",
                partial(planner.apply_changes, {key: choice.value}),
            )
    for key, short in PARALLEL_PALETTE.items():
        for n in PARALLEL_SIZES:
            yield Entry(f"strategy: {short} {n}", f"set {key} = {n}", partial(planner.apply_changes, {key: n}))


class PlannerCommands(Provider):
    """Namespaced planner commands in Textual's command palette (ctrl+p)."""

    def _entries(self) -> list[Entry]:
        screen = self.screen
        if not hasattr(screen, "apply_changes"):
            return []
        return list(palette_entries(screen))  # type: ignore[arg-type]

    async def discover(self) -> Hits:
        for e in self._entries():
            if not e.text.startswith(("model:", "gpu:")):
                yield DiscoveryHit(e.text, e.run, help=e.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for e in self._entries():
            score = matcher.match(e.text)
            if score > 0:
                yield Hit(score, matcher.highlight(e.text), e.run, text=e.text, help=e.help)
