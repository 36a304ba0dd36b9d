"""The changes that save GPU memory, as they apply to one plan (the checklist's remedies, the advisor's moves).

Each `Move` is one decision a user would make ("full checkpointing", "ZeRO-3", "micro-batch 4 -> 2 with
accumulation 2 -> 4"), possibly setting several keys that only make sense together (CPU offload needs ZeRO). A move
says which memory it targets and its `tier`:

- 0: the same training, computed differently (checkpointing, fused kernels, sharding, offload, parallelism, a
  smaller micro-batch with more accumulation: the same global batch and the same update);
- 1: the same model and method with different numerics (8-bit optimizer states, int8 activations, another
  precision regime);
- 2: a different method (LoRA or QLoRA instead of full fine-tuning; QLoRA instead of LoRA).

Moves are proposals: a combination can still be an invalid plan, which `core.advice.whatif.WhatIf` skips.

`speed_moves` are the opposite kind: changes that cost memory (or none) to save step time (less recomputation, no
offload, no int8 activations, larger micro-batches with less accumulation). The advisor adds them to a set of
memory moves that frees more than it needs ("8-bit AdamW + no checkpointing"), and the checklist to its single
memory fixes, so both rank by the same step time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramplan.core.advice.rlmoves import rl_moves
from vramplan.core.memory.kinds import kinds_freed_by
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import REGIMES

# What a move frees: the estimate's kinds grouped as the checklist talks about them (`KindSpec.advice`), in the
# checklist's order.
ADVICE_GROUPS = ("activations", "logits", "optimizer_states", "weights")
TARGET_KINDS: dict[str, tuple[str, ...]] = {group: kinds_freed_by(group) for group in ADVICE_GROUPS}
TIER_TEXT = {0: "same training", 1: "different numerics", 2: "different method"}
PARALLEL_SIZES = (2, 4, 8, 16, 32, 64)
BROAD = frozenset(("activations", "logits", "weights", "optimizer_states"))  # TP, PP, precision: everything


@dataclass(frozen=True)
class Move:
    title: str
    changes: tuple[tuple[str, Any], ...]  # (dotted key, value) pairs
    dim: str  # one move per dimension in a change set
    targets: frozenset[str]  # keys of TARGET_KINDS
    tier: int = 0

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.changes)


def _move(title: str, changes: dict[str, Any], dim: str, targets: tuple[str, ...], tier: int = 0) -> Move:
    return Move(title, tuple(changes.items()), dim, frozenset(targets), tier)


def memory_moves(plan: Plan) -> tuple[Move, ...]:
    """Every single move that could lower the plan's peak memory, in a stable order."""
    t, s, hw = plan.training, plan.strategy, plan.hardware
    gpu = presets.gpu(hw.gpu)
    dp, tp, pp, zero = plan.data_parallel, s.tensor_parallel, s.pipeline_parallel, s.zero_stage
    out: list[Move] = []
    levels = ("none", "selective", "op", "full")  # least memory last
    titles = {"selective": "selective checkpointing", "op": "per-op checkpointing", "full": "full checkpointing"}
    for level in levels[levels.index(s.gradient_checkpointing) + 1 :]:
        changes: dict[str, Any] = {"strategy.gradient_checkpointing": level}
        if s.checkpoint_every > 1:
            changes["strategy.checkpoint_every"] = 1
        out.append(_move(titles[level], changes, "checkpointing", ("activations",)))
    if s.gradient_checkpointing in ("op", "full") and s.checkpoint_every > 1:
        out.append(_move("checkpoint every block", {"strategy.checkpoint_every": 1}, "checkpointing", ("activations",)))
    out += _stack_moves(plan)
    if s.attention == "eager":
        out.append(_move("flash attention", {"strategy.attention": "flash"}, "attention", ("activations",)))
    if not s.fused_cross_entropy:
        out.append(_move("fused cross-entropy", {"strategy.fused_cross_entropy": True}, "loss", ("logits",)))
    if tp > 1 and not s.sequence_parallel:
        out.append(_move("sequence parallelism", {"strategy.sequence_parallel": True}, "sp", ("activations",)))
    b, m = t.micro_batch_size, t.grad_accum_steps
    for smaller in sorted((d for d in range(1, b) if b % d == 0), reverse=True)[:4]:
        out.append(
            _move(
                f"micro-batch {b} -> {smaller}, accumulation {m} -> {m * b // smaller}",
                {"training.micro_batch_size": smaller, "training.grad_accum_steps": m * b // smaller},
                "batch",
                ("activations", "logits"),
            )
        )
    if dp > 1:
        top = 3 if pp == 1 else 1
        shards = {1: ("optimizer_states",), 2: ("optimizer_states", "weights"), 3: ("optimizer_states", "weights")}
        for stage in range(zero + 1, top + 1):
            out.append(_move(f"ZeRO-{stage}", {"strategy.zero_stage": stage}, "zero", shards[stage]))
    moe = plan.model.arch().moe
    if moe is not None and dp > 1:  # experts over the data-parallel ranks that hold the same micro-batch split
        for ep in PARALLEL_SIZES:
            if ep > s.expert_parallel and dp % ep == 0 and moe.n_experts % ep == 0 and tp * ep <= hw.gpus_per_node:
                out.append(
                    _move(f"expert parallelism {ep}", {"strategy.expert_parallel": ep}, "ep", ("weights",))
                )  # fmt: skip
    out += _offload_moves(plan)
    if t.optimizer == "adamw":
        out.append(_move("8-bit AdamW", {"training.optimizer": "adamw-8bit"}, "optimizer", ("optimizer_states",), 1))
    if t.optimizer in ("adamw", "adamw-8bit") and s.offload_optimizer == "none":
        out.append(
            _move(
                "paged 8-bit AdamW (bitsandbytes)",
                {"training.optimizer": "paged-adamw-8bit"},
                "optimizer",
                ("optimizer_states",),
                1,
            )
        )
    if s.activation_compression == "none":
        out.append(_move("int8 activations", {"strategy.activation_compression": "int8"}, "int8", ("activations",), 1))
    out += _precision_moves(plan, gpu.bf16)
    out += _method_moves(plan)
    out += _parallel_moves(plan)
    out += [_move(*spec) for spec in rl_moves(plan)]  # DPO/GRPO/PPO (none for SFT: `core.advice.rlmoves`)
    return tuple(out)


def _stack_moves(plan: Plan) -> list[Move]:
    """What today's stacks offer (torchtune, torchtitan): compile, the optimizer step in backward, activation
    offloading, a chunked loss, 16-bit adapters; each only where the plan allows it."""
    t, s = plan.training, plan.strategy
    out: list[Move] = []
    if not s.compile:
        out.append(_move("torch.compile", {"strategy.compile": True}, "compile", ("activations",)))
    if (
        not s.optimizer_in_backward
        and t.grad_accum_steps == 1
        and not t.grad_clip
        and s.offload_optimizer == "none"
        and s.pipeline_parallel == 1
    ):
        out.append(
            _move("optimizer step in backward", {"strategy.optimizer_in_backward": True}, "opt_in_bwd", ("weights",))
        )
    if s.activation_offload == "none" and s.gradient_checkpointing in ("op", "full"):
        out.append(
            _move("activation offload to CPU", {"strategy.activation_offload": "cpu"}, "act_offload", ("activations",))
        )
    if s.loss_chunks == 1 and not s.fused_cross_entropy:
        out.append(_move("chunked cross-entropy (8)", {"strategy.loss_chunks": 8}, "loss", ("logits",)))
    if t.method != "full" and t.lora_dtype == "fp32" and not REGIMES[t.regime].master_bytes:
        out.append(_move("16-bit adapters", {"training.lora_dtype": "bf16"}, "lora_dtype", ("activations",), 1))
    return out


def _offload_moves(plan: Plan) -> list[Move]:
    s = plan.strategy
    out: list[Move] = []
    zero = s.zero_stage
    if s.offload_optimizer == "none":
        stage = max(zero, 1)
        changes: dict[str, Any] = {"strategy.offload_optimizer": "cpu"}
        if stage != zero:
            changes = {"strategy.zero_stage": stage, **changes}
        suffix = f" with ZeRO-{stage}" if stage != zero else ""
        out.append(_move(f"optimizer offload to CPU{suffix}", changes, "offload", ("optimizer_states",)))
    if s.offload_parameters == "none" and plan.strategy.pipeline_parallel == 1:
        changes = {"strategy.zero_stage": 3} if zero != 3 else {}
        if s.offload_optimizer == "none":
            changes["strategy.offload_optimizer"] = "cpu"
        changes["strategy.offload_parameters"] = "cpu"
        what = "optimizer and parameter" if s.offload_optimizer == "none" else "parameter"
        suffix = " with ZeRO-3" if zero != 3 else ""
        out.append(_move(f"{what} offload to CPU{suffix}", changes, "offload", ("optimizer_states", "weights")))
        nvme: dict[str, Any] = {"strategy.zero_stage": 3} if zero != 3 else {}
        nvme |= {"strategy.offload_optimizer": "nvme", "strategy.offload_parameters": "nvme"}
        out.append(
            _move(f"optimizer and parameter offload to NVMe{suffix}", nvme, "offload", ("optimizer_states", "weights"))
        )
    return out


def _precision_moves(plan: Plan, has_bf16: bool) -> list[Move]:
    p = plan.training.regime
    half = "bf16" if has_bf16 else "fp16"
    scaling = {} if has_bf16 or plan.training.loss_scaling == "dynamic" else {"training.loss_scaling": "dynamic"}
    if p == "fp32":
        targets = ("activations", "logits", "weights", "optimizer_states")
        return [
            _move(f"{half}-autocast", {"training.precision": f"{half}-autocast", **scaling}, "precision", targets, 1),
            _move(f"{half}-master", {"training.precision": f"{half}-master", **scaling}, "precision", targets, 1),
        ]
    if p in ("bf16-autocast", "fp16-autocast"):
        master = p.replace("autocast", "master")
        return [_move(master, {"training.precision": master}, "precision", ("activations", "weights"), 1)]
    return []


def _method_moves(plan: Plan) -> list[Move]:
    t = plan.training
    allowed = {"all-linear", *plan.model.arch().roles()}
    # a full fine-tuning plan's lora_targets may not suit the family (the default q, v on BLOOM): use all-linear
    keep = {} if set(t.lora_targets) <= allowed else {"training.lora_targets": ("all-linear",)}
    out: list[Move] = []
    what = ("optimizer_states", "weights")
    if t.method == "full":
        out.append(_move(f"LoRA r={t.lora_rank}", {"training.method": "lora", **keep}, "method", what, 2))
    if t.method in ("full", "lora"):
        quant = {} if t.quantization in (None, "nf4", "fp4") else {"training.quantization": "nf4"}
        out.append(_move(f"QLoRA r={t.lora_rank}", {"training.method": "qlora", **keep, **quant}, "method", what, 2))
    return out


def _parallel_moves(plan: Plan) -> list[Move]:
    """Tensor parallelism inside a node (with sequence parallelism), pipeline stages over the GPUs the plan has."""
    m, s, hw = plan.model, plan.strategy, plan.hardware
    total, tp, pp = hw.total_gpus, s.tensor_parallel, s.pipeline_parallel
    out: list[Move] = []
    everything = tuple(BROAD)
    accum = plan.training.grad_accum_steps
    heads = (m.num_attention_heads, m.num_key_value_heads)
    for k in PARALLEL_SIZES:
        if tp < k <= hw.gpus_per_node and total % (k * pp) == 0 and all(n % k == 0 for n in heads):
            more = k // tp  # fewer data-parallel ranks: more accumulation keeps the global batch
            changes: dict[str, Any] = {"strategy.tensor_parallel": k, "strategy.sequence_parallel": True}
            changes["training.grad_accum_steps"] = accum * more
            title = f"tensor parallel {k} with sequence parallelism, accumulation {accum} -> {accum * more}"
            out.append(_move(title, changes, "tp", everything))
    for k in PARALLEL_SIZES:
        if pp < k <= m.num_hidden_layers and total % (tp * k) == 0 and s.offload_parameters == "none":
            more = k // pp if k % pp == 0 else 0
            if not more:
                continue
            changes = {"strategy.pipeline_parallel": k, "training.grad_accum_steps": accum * more}
            title = f"pipeline parallel {k}, accumulation {accum} -> {accum * more}"
            if s.zero_stage >= 2:
                changes["strategy.zero_stage"] = 1
                title += " with ZeRO-1"
            out.append(_move(title, changes, "pp", everything))
    return out


def speed_moves(plan: Plan) -> tuple[Move, ...]:
    """The same-training changes that can lower the step time at a memory cost, undoing the plan's memory savers;
    each in the dimension of the memory move it undoes (so a set never both adds and removes one)."""
    t, s = plan.training, plan.strategy
    out: list[Move] = []
    levels = ("none", "selective", "op", "full")  # fastest first
    titles = {"none": "no checkpointing", "selective": "selective checkpointing", "op": "per-op checkpointing"}
    every = {"strategy.checkpoint_every": 1} if s.checkpoint_every > 1 else {}
    for level in levels[: levels.index(s.gradient_checkpointing)]:
        out.append(_move(titles[level], {"strategy.gradient_checkpointing": level, **every}, "checkpointing", ()))
    if s.activation_offload != "none":
        out.append(_move("no activation offload", {"strategy.activation_offload": "none"}, "act_offload", ()))
    if s.activation_compression != "none":
        out.append(_move("16-bit activations", {"strategy.activation_compression": "none"}, "int8", (), 1))
    if s.offload_parameters != "none":
        out.append(_move("no parameter offload", {"strategy.offload_parameters": "none"}, "offload", ()))
    elif s.offload_optimizer != "none":
        out.append(_move("no optimizer offload", {"strategy.offload_optimizer": "none"}, "offload", ()))
    b, m = t.micro_batch_size, t.grad_accum_steps
    for k in [k for k in range(2, m + 1) if m % k == 0][:3]:
        title = f"micro-batch {b} -> {b * k}, accumulation {m} -> {m // k}"
        out.append(_move(title, {"training.micro_batch_size": b * k, "training.grad_accum_steps": m // k}, "batch", ()))
    return tuple(out)
