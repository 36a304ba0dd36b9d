"""The discrete settings of a plan (`plan_value` reads one): their choices, labels, palette entries, and which are
impossible now.

Plain data shared by the panes (selects, checkboxes), the keys that cycle a setting and the command palette, so
the three never disagree. No Textual here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.field_values import literal_values
from vramplan.core.plan.resolved import plan_value
from vramplan.core.plan.schema.objectives import OBJECTIVES
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.training import OPTIMIZERS, PRECISIONS
from vramplan.core.plan.stack.config import FRAMEWORKS
from vramplan.core.plan.stack.defaults import STACK_KEYS


class Choice(NamedTuple):
    value: Any  # the plan value (None: the key is unset, e.g. quantization "auto")
    label: str  # shown in a select
    palette: str  # namespaced command palette entry, e.g. "strategy: ZeRO-3"


def _simple(namespace: str, what: str, values: tuple[Any, ...]) -> tuple[Choice, ...]:
    return tuple(Choice(v, str(v), f"{namespace}: {what} {v}") for v in values)


CHOICES: dict[str, tuple[Choice, ...]] = {
    "training.precision": (
        Choice(None, "auto", "training: precision auto (bf16-autocast; LoRA/QLoRA: a bf16 base)"),
        *_simple("training", "precision", PRECISIONS),
    ),
    "training.lora_dtype": (
        Choice(None, "stack's", "training: LoRA adapters in the dtype the stack makes them"),
        Choice("fp32", "fp32", "training: LoRA adapters fp32 (PEFT)"),
        Choice("bf16", "bf16", "training: LoRA adapters 16-bit (torchtune, litgpt)"),
    ),
    "training.optimizer": _simple("training", "optimizer", OPTIMIZERS),
    "training.objective": tuple(
        Choice(o.name, o.label, f"training: objective {o.label} {o.about}") for o in OBJECTIVES.values()
    ),
    "training.method": (
        Choice("full", "full", "training: full fine-tuning"),
        Choice("lora", "LoRA", "training: LoRA"),
        Choice("qlora", "QLoRA", "training: QLoRA"),
    ),
    "training.quantization": (
        Choice(None, "auto", "training: base weights auto (QLoRA nf4, else 16-bit)"),
        Choice("none", "none", "training: base weights unquantized"),
        Choice("int8", "int8", "training: base weights int8"),
        Choice("nf4", "nf4", "training: base weights nf4"),
        Choice("fp4", "fp4", "training: base weights fp4"),
    ),
    "training.quantized_modules": (
        Choice(None, "stack's", "training: 4-bit base quantizes the linears the stack quantizes"),
        Choice("block-linears", "block linears", "training: 4-bit base: every block linear (transformers)"),
        Choice("all-linears", "all linears", "training: 4-bit base: every linear, lm_head too (litgpt)"),
        Choice("adapted", "adapted", "training: 4-bit base: only the LoRA-adapted linears (torchtune < 0.3)"),
    ),
    "training.bnb_generation": (
        Choice(None, "stack's", "training: bitsandbytes as the stack's version runs it"),
        Choice("current", "current", "training: bitsandbytes >= 0.43.2 (4-bit inputs not kept)"),
        Choice("legacy", "legacy", "training: bitsandbytes <= 0.43.1 (each 4-bit linear keeps its input)"),
    ),
    "strategy.fsdp_version": (
        Choice(None, "stack's", "strategy: FSDP version as the stack runs it"),
        Choice(1, "1", "strategy: FSDP1 (FullyShardedDataParallel, flat parameters)"),
        Choice(2, "2", "strategy: FSDP2 (fully_shard, per-parameter shards)"),
    ),
    "strategy.fsdp_adapter_wrap": (
        Choice(None, "stack's", "strategy: FSDP1 LoRA units as the stack wraps them"),
        Choice("block", "block", "strategy: FSDP1 LoRA adapters share their block's flat parameter (litgpt)"),
        Choice("own", "own", "strategy: FSDP1 LoRA adapters in units of their own (PEFT)"),
    ),
    "strategy.fsdp_grad_sync": (
        Choice(None, "stack's", "strategy: FSDP gradient accumulation as the stack runs it"),
        Choice("each", "each", "strategy: FSDP reduce-scatters every micro-batch (torchtune, torchtitan)"),
        Choice("last", "last", "strategy: FSDP no_sync until the last micro-batch: unsharded gradients held"),
    ),
    "strategy.gradient_checkpointing": (
        Choice("none", "none", "strategy: checkpointing off"),
        Choice("selective", "selective", "strategy: selective checkpointing"),
        Choice("op", "op", "strategy: per-op checkpointing (torchtitan)"),
        Choice("full", "full", "strategy: full checkpointing"),
    ),
    "strategy.checkpoint_impl": (
        Choice(None, "stack's", "strategy: checkpointing as the stack does (reentrant or not)"),
        Choice("reentrant", "reentrant", "strategy: reentrant checkpointing (autograd.Function)"),
        Choice("non-reentrant", "non-reentrant", "strategy: non-reentrant checkpointing (saved-tensor hooks)"),
    ),
    "strategy.compile": (
        Choice(False, "off", "strategy: torch.compile off"),
        Choice(True, "on", "strategy: torch.compile"),
    ),
    "strategy.optimizer_in_backward": (
        Choice(False, "off", "strategy: optimizer step after backward"),
        Choice(True, "on", "strategy: optimizer step in backward (torchtune)"),
    ),
    "strategy.activation_offload": (
        Choice("none", "off", "strategy: activations on GPU"),
        Choice("cpu", "cpu", "strategy: offload activations to CPU (torchtune)"),
    ),
    "strategy.float8": (
        Choice(False, "off", "strategy: Float8 off"),
        Choice(True, "on", "strategy: Float8 linears (torchao)"),
    ),
    "strategy.attention": (
        Choice("flash", "flash", "strategy: flash attention"),
        Choice("eager", "eager", "strategy: eager attention"),
    ),
    "strategy.experts": (
        Choice("grouped", "grouped", "strategy: experts by grouped_mm (transformers >= 5)"),
        Choice("loop", "loop", "strategy: experts one by one (per-expert loop, transformers 4.x)"),
        Choice("batched", "batched", "strategy: experts by batched_mm (copies each token's expert weights)"),
    ),
    "strategy.activation_compression": (
        Choice("none", "off", "strategy: int8 activations off"),
        Choice("int8", "on", "strategy: int8 activations"),
    ),
    "strategy.fused_cross_entropy": (
        Choice(False, "off", "strategy: fused cross-entropy off"),
        Choice(True, "on", "strategy: fused cross-entropy"),
    ),
    "strategy.zero_stage": (
        Choice(0, "off", "strategy: ZeRO off (DDP)"),
        Choice(1, "1", "strategy: ZeRO-1 (optimizer states sharded)"),
        Choice(2, "2", "strategy: ZeRO-2 (+ gradients)"),
        Choice(3, "3", "strategy: ZeRO-3 (+ parameters)"),
    ),
    "strategy.offload_optimizer": (
        Choice("none", "none", "strategy: optimizer on GPU"),
        Choice("cpu", "cpu", "strategy: offload optimizer to CPU"),
        Choice("nvme", "nvme", "strategy: offload optimizer to NVMe"),
    ),
    "strategy.offload_parameters": (
        Choice("none", "none", "strategy: parameters on GPU"),
        Choice("cpu", "cpu", "strategy: offload parameters to CPU"),
        Choice("nvme", "nvme", "strategy: offload parameters to NVMe"),
    ),
    "strategy.sequence_parallel": (
        Choice(False, "off", "strategy: sequence parallel off"),
        Choice(True, "on", "strategy: sequence parallel"),
    ),
    "stack.framework": _simple("stack", "framework", FRAMEWORKS),
}


def choices_of(key: str) -> tuple[Choice, ...]:
    """The choices of a plan key: its row of `CHOICES`, else made from its schema (a stack-decided key added to
    the schema shows in the planner with no row here: "stack's", then each ``Literal`` value or off/on)."""
    if key in CHOICES:
        return CHOICES[key]
    table, _, name = key.partition(".")
    annotation = Plan.model_fields[table].annotation.model_fields[name].annotation  # type: ignore[union-attr]
    values: tuple[Any, ...] = literal_values(annotation) or (False, True)
    out = [Choice(None, "stack's", f"{table}: {name} as the stack sets it")] if key in STACK_KEYS else []
    for v in values:
        label = ("on" if v else "off") if isinstance(v, bool) else str(v)
        out.append(Choice(v, label, f"{table}: {name} {label}"))
    CHOICES[key] = tuple(out)
    return CHOICES[key]


# Sizes offered in the palette for the parallel degrees (any value can be typed in the Strategies pane).
PARALLEL_PALETTE = {"strategy.tensor_parallel": "TP", "strategy.pipeline_parallel": "PP"}
PARALLEL_SIZES = (1, 2, 4, 8)


def shown_value(plan: Plan, key: str) -> Any:
    """The value a choice control shows: None (its "stack's" choice) for a key the stack chose when the key has
    such a choice (`strategy.checkpoint_impl`), else the key's value."""
    if key in plan.stack_chosen and any(c.value is None for c in choices_of(key)):
        return None
    return plan_value(plan, key)


def choice_index(plan: Plan, key: str) -> int:
    value = shown_value(plan, key)
    for i, c in enumerate(choices_of(key)):
        if c.value == value and type(c.value) is type(value):
            return i
    return 0


def try_change(plan: Plan, changes: dict[str, Any]) -> Plan | PlanError:
    """The changed plan, or the `PlanError` that says why it is impossible."""
    try:
        return plan.with_changes(changes)
    except PlanError as exc:
        return exc


def next_valid(plan: Plan, key: str) -> Plan | PlanError:
    """Cycle a setting to its next choice that makes a valid plan (skipping impossible ones).

    When no other choice is possible, the error of the immediate next one says why.
    """
    options = choices_of(key)
    start = choice_index(plan, key)
    first_error: PlanError | None = None
    for step in range(1, len(options)):
        result = try_change(plan, {key: options[(start + step) % len(options)].value})
        if isinstance(result, Plan):
            return result
        first_error = first_error or result
    assert first_error is not None
    return first_error


def blocked(plan: Plan, key: str) -> list[tuple[Choice, str]]:
    """The choices of `key` other than the current one that the plan cannot take, each with the reason."""
    current = choice_index(plan, key)
    out = []
    for i, c in enumerate(choices_of(key)):
        if i == current:
            continue
        result = try_change(plan, {key: c.value})
        if isinstance(result, PlanError):
            out.append((c, result.message))
    return out


def error_text(exc: PlanError, key: str | None) -> str:
    """A PlanError for display next to the control of `key`: the other key is named when it is not this one."""
    if exc.where and exc.where != key:
        return f"{exc.where}: {exc.message}"
    return exc.message
