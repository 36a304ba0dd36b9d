"""The kinds of GPU memory an estimate sorts its bytes into, as records (`KindSpec`): each kind's label, its glyph
and theme colour in the planner's gauges, the advice group whose moves free it, and how its figure is shown. Every
table, gauge, legend, advice rule and report reads a kind from here; adding a kind is one row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramplan.core.plan.resolved import fsdp_sharded

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


@dataclass(frozen=True)
class KindSpec:
    """One kind of GPU memory."""

    key: str  # the estimate's name for it (JSON keys, the live bytes of a moment)
    label: str  # what tables and gauges call it
    glyph: str  # its letter in the gauges without colour (NO_COLOR): unique per kind
    colour: str  # the Textual theme variable the gauges draw it in
    advice: str | None  # the group of fit moves that free it (`core.advice.moves.ADVICE_GROUPS`; "rl": RL moves)
    always_shown: bool = False  # listed in tables even at 0 bytes
    post_training: bool = False  # only DPO/GRPO/PPO plans have it (`core.memory.rl`)
    digits: int = 2  # GiB digits of the figure in its formula
    formula_total: bool = True  # its formula ends with its figure ("... = 1.23 GiB"); the overhead's lists terms


# In the order gauges and tables show them (overhead last).
KIND_SPECS: tuple[KindSpec, ...] = (
    KindSpec("parameters", "Parameters", "P", "$primary", "weights", always_shown=True),
    KindSpec("gradients", "Gradients", "G", "$secondary-lighten-1", "weights", always_shown=True),
    KindSpec("optimizer_states", "Optimizer states", "O", "$accent", "optimizer_states", always_shown=True),
    KindSpec("activations", "Activations", "A", "$success", "activations", always_shown=True),
    KindSpec("logits", "Logits / loss", "L", "$error-lighten-1", "logits", always_shown=True),
    KindSpec("gathered_parameters", "ZeRO-3 gathered", "Z", "$primary-lighten-3", "weights", digits=1),
    KindSpec("autocast_cache", "Autocast cache", "C", "$success-darken-2", "activations"),
    KindSpec("temporaries", "Temporaries", "T", "$warning-lighten-3", None),
    KindSpec("checkpoint_buffers", "Checkpoint buffers", "B", "$accent-darken-3", "activations", digits=3),
    KindSpec("frozen_models", "Reference / reward", "R", "$primary-darken-2", "rl", post_training=True),
    KindSpec("vllm_engine", "vLLM engine", "V", "$warning", "rl", post_training=True),
    KindSpec("kv_cache", "KV cache (generate)", "K", "$warning-darken-2", "rl", post_training=True),
    KindSpec("rollout", "Rollout batch", "Q", "$secondary-darken-2", "rl", post_training=True),
    KindSpec("overhead", "Overhead", "X", "$foreground-darken-3", None, formula_total=False),
)
# Not a kind of GPU memory: the host memory the plan offloads to, drawn in the gauges beside the GPU's kinds.
HOST = KindSpec("host", "Host (offload)", "H", "$secondary-lighten-2", None)

KIND: dict[str, KindSpec] = {k.key: k for k in KIND_SPECS}
# Every kind a plan's memory can have, in the order gauges show them (overhead last).
ALL_KINDS: tuple[str, ...] = tuple(k.key for k in KIND_SPECS)
# The kinds of a supervised step (overhead last); `RL_KINDS`: what preference/RL post-training adds (zero, and so
# never shown, for an SFT plan).
KINDS: tuple[str, ...] = tuple(k.key for k in KIND_SPECS if not k.post_training)
RL_KINDS: tuple[str, ...] = tuple(k.key for k in KIND_SPECS if k.post_training)
# The tensors of a step (every kind but the overhead, which is not a tensor of the step: `core.memory.overhead`).
TENSOR_KINDS: tuple[str, ...] = tuple(k for k in ALL_KINDS if k != "overhead")
# The tensors of a supervised step (what its moments hold).
STEP_KINDS: tuple[str, ...] = tuple(k for k in KINDS if k != "overhead")
KIND_LABELS: dict[str, str] = {k.key: k.label for k in KIND_SPECS}
# The labels a plan names in its framework's words: the weights a plan FSDP shards gathers (`fsdp_sharded`) are
# FSDP's all-gather, as the estimate's header says "FSDP2 full shard (ZeRO-3)" of it (`describe.sharding_label`).
FSDP_LABELS: dict[str, str] = {"gathered_parameters": "FSDP gathered"}


def plan_labels(plan: Plan) -> dict[str, str]:
    """The labels of ``plan``'s kinds that differ from `KIND_LABELS` (none for most plans)."""
    return FSDP_LABELS if fsdp_sharded(plan) else {}


def kind_label(kind: str, plan: Plan | None = None) -> str:
    """What tables and gauges call ``kind``, in the words of ``plan``'s framework where it has its own."""
    return (plan_labels(plan) if plan is not None else {}).get(kind) or KIND_LABELS.get(kind, kind)


def kinds_freed_by(group: str) -> tuple[str, ...]:
    """The kinds a group of fit moves frees (`KindSpec.advice`), in table order."""
    return tuple(k.key for k in KIND_SPECS if k.advice == group)
