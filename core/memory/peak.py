"""``estimate(plan)``: the peak GPU memory of a steady-state training step, moment by moment.

The composer: the model states of each pipeline stage (`core.memory.states`), one micro-batch's activations
(`core.memory.activations`), the moments of the step each mechanism of `MECHANISMS` fills (`core.memory.step`),
the busiest stage's worst moment, and the memory outside the tensors (`core.memory.overhead`, the caching
allocator's rules: `core.memory.allocator`). A mechanism is one module and one row of `MECHANISMS`.
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.activations.context import ActCtx, Layout, plan_ctx
from vramplan.core.memory.activations.stage import plan_layout, stage_acts
from vramplan.core.memory.allocator import moment_requests, pack, step_shapes
from vramplan.core.memory.kinds import STEP_KINDS
from vramplan.core.memory.overhead import overhead_headline, overhead_terms
from vramplan.core.memory.record import Estimate, Phase
from vramplan.core.memory.states.model_states import model_states, state_ctx
from vramplan.core.memory.states.record import StateCtx, States
from vramplan.core.memory.states.stages import Stage, stages
from vramplan.core.memory.step.activations import ACTIVATIONS
from vramplan.core.memory.step.checkpointing import CHECKPOINTING
from vramplan.core.memory.step.gradients import GRADIENTS
from vramplan.core.memory.step.loss import LOSS
from vramplan.core.memory.step.moments import BACKWARD_START, Mechanism, StepView, compose
from vramplan.core.memory.step.pending import PENDING
from vramplan.core.memory.step.resident import RESIDENT
from vramplan.core.memory.step.transients import TRANSIENTS
from vramplan.core.memory.terms import Term
from vramplan.core.plan.architecture.arch import lora_params_per_layer
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.node import node_limits
from vramplan.core.plan.schema.plan import Plan

# The mechanisms of a supervised step, each a module of core/memory/step: what it keeps live at each moment and the
# headline formulas of the kinds it owns.
MECHANISMS: tuple[Mechanism, ...] = (RESIDENT, GRADIENTS, ACTIVATIONS, LOSS, CHECKPOINTING, TRANSIENTS, PENDING)


class StagePeak(NamedTuple):
    """The moments of one pipeline stage's step and the worst of them."""

    tensor_bytes: int  # live tensor bytes at the peak moment
    moment: int  # the peak moment's index in `phases`
    phases: tuple[Phase, ...]
    largest: dict[str, int]  # each kind at its largest over the moments (must not be mutated: memoised)
    view: StepView
    headlines: tuple[Term, ...]  # the mechanisms' headline terms of the kinds they own


@memoised(1024)
def _stage_peak(ctx: ActCtx, lay: Layout, sc: StateCtx, stage: Stage, st: States) -> StagePeak:
    """A stage's phases, the live bytes at its peak, the peak's index, and each kind at its largest."""
    view = StepView(ctx, lay, sc, stage, st, stage_acts(ctx, stage, lay))
    phases = compose(view, MECHANISMS)
    top, peak = max((sum(p.live.values()), i) for i, p in enumerate(phases))
    largest = dict.fromkeys(STEP_KINDS, 0)
    for p in phases:
        for k, v in p.live.items():
            if v > largest[k]:
                largest[k] = v
    headlines = tuple(t for m in MECHANISMS for t in m.headlines(view))
    return StagePeak(tensor_bytes=top, moment=peak, phases=phases, largest=largest, view=view, headlines=headlines)


@memoised(1024)
def _packed(ctx: ActCtx, lay: Layout, sc: StateCtx, stage: Stage, st: States, expandable: bool) -> tuple[int, ...]:
    """The bytes the caching allocator reserves for each moment's live tensors (`core.memory.allocator`)."""
    shapes = step_shapes(ctx, stage, lay)
    phases = _stage_peak(ctx, lay, sc, stage, st).phases
    w, g = ctx.reg.weight_bytes, st.grad_bytes
    return tuple(pack(moment_requests(p.live, shapes, w, g), expandable) for p in phases)


def allocator_waste(packed: tuple[int, ...], moment: int, tensor_peak: int, stranded: int) -> int:
    """Reserved beyond the peak's tensors and `stranded` (freed_logits): the allocator never returns a segment
    (until ``empty_cache``), so ``max_memory_reserved`` is at least the largest over the step's moments of what
    that moment's tensors fill, the peak's stranded block included."""
    most = max(p + (stranded if i == moment else 0) for i, p in enumerate(packed))
    return max(0, most - tensor_peak - stranded)


def estimate(plan: Plan, *, cpu: bool = False, pack: bool = True) -> Estimate:
    """Per-GPU memory of the busiest rank at the peak of a steady-state step: `sft_estimate` for supervised
    fine-tuning, `core.memory.rl.estimate.rl_estimate` (phase by phase, its update phase `sft_estimate`'s) for
    ``training.objective`` dpo, grpo and ppo.

    ``pack=False``: without the caching allocator's rounding and segment waste (`core.memory.allocator`, its
    ``allocator_reserve`` term 0), so every figure is at most the whole estimate's and the packing, most of an
    estimate's time, is skipped: a search rules a plan out with it before paying for the packing
    (`core.advice.whatif.WhatIf.memory`). Never shown. A DPO/GRPO/PPO plan is always packed."""
    if plan.training.objective_spec.post_training:
        from vramplan.core.memory.rl.estimate import rl_estimate  # an SFT plan's estimate never loads it

        return rl_estimate(plan, sft_estimate, cpu=cpu)
    return sft_estimate(plan, cpu=cpu, pack=pack)


def packs(plan: Plan) -> bool:
    """Whether `estimate` packs the step's tensors into the caching allocator's segments (`core.memory.allocator`):
    an SFT plan whose ``overhead.allocator_reserve_percent`` is unset; else ``pack=False`` changes nothing."""
    return plan.overhead.allocator_reserve_percent is None and not plan.training.objective_spec.post_training


def _busiest(ctx: ActCtx, lay: Layout, sc: StateCtx, plan: Plan) -> tuple[str, StagePeak]:
    """The pipeline stage whose peak is highest ("all" without pipeline parallelism, else "first" or "last")."""
    t, pp = plan.training, plan.strategy.pipeline_parallel
    best: tuple[str, StagePeak] | None = None
    for stage in stages(ctx.arch.L, pp, t.grad_accum_steps):
        sp = _stage_peak(ctx, lay, sc, stage, model_states(sc, stage))
        if best is None or sp.tensor_bytes > best[1].tensor_bytes:
            best = ("all" if pp == 1 else ("first" if stage.first else "last"), sp)
    assert best is not None
    return best


def _freed_logits(sp: StagePeak) -> int:
    """The 16-bit logits freed before the loss's backward (the loss path's `logits_freed`) stay reserved when the
    peak is that backward's start."""
    last = sp.view.stage.last and sp.moment == BACKWARD_START
    return sp.view.a.logits_freed if last else 0


def sft_estimate(plan: Plan, *, cpu: bool = False, pack: bool = True) -> Estimate:
    """Per-GPU memory of the busiest rank at the peak of a steady-state step (see module docstring).

    ``cpu``: reproduce PyTorch's CPU kernels where they differ from CUDA's
    (`core.memory.activations.context.CPU_DIFFERENCES`), to compare with measurements taken on the CPU; the prediction
    for a GPU is the default. ``pack=False``: without the allocator's packing (see `estimate`)."""
    ctx, lay, sc = plan_ctx(plan, cpu), plan_layout(plan), state_ctx(plan)
    stage_name, sp = _busiest(ctx, lay, sc, plan)
    v, peak = sp.view, sp.phases[sp.moment]
    freed = _freed_logits(sp)
    expandable = plan.overhead.expandable_segments
    rules = 0
    if plan.overhead.allocator_reserve_percent is None and pack:
        packed = _packed(ctx, lay, sc, v.stage, v.st, expandable)
        rules = allocator_waste(packed, sp.moment, sp.tensor_bytes, 0 if expandable else freed)
    overheads = overhead_terms(
        plan,
        v.st,
        sp.tensor_bytes,
        grads_at_peak=peak.live.get("gradients", 0),
        freed_logits=freed,
        allocator_rules=rules,
    )
    headlines = (*sp.headlines, overhead_headline(plan))
    arch, gpus_node = ctx.arch, plan.hardware.gpus_per_node
    return Estimate(
        plan=plan,
        params_total=arch.total_params + (0 if sc.full else trainable_params(sc)),
        params_trainable=trainable_params(sc),
        largest=dict(sp.largest),  # the Estimate's own (the memo's stays as it is)
        phases=sp.phases,
        peak=peak,
        overhead_bytes={t.name: t.bytes for t in overheads},
        gpu_capacity=presets.gpu(plan.hardware.gpu).memory_bytes,
        cpu_per_node=(v.st.cpu + v.a.offloaded * v.stage.in_flight) * gpus_node,
        nvme_per_node=v.st.nvme * gpus_node,
        node=node_limits(plan),
        stage=stage_name,
        headlines=headlines,
        overhead_terms=overheads,
    )


def trainable_params(sc: StateCtx) -> int:
    """Every trained parameter of the model (all ranks): the whole model (less a frozen vision tower), or every
    layer's adapters."""
    arch = sc.arch
    if not sc.full:
        return arch.L * lora_params_per_layer(arch, sc.lora_roles, sc.lora_rank)
    return arch.total_params - (0 if sc.vision_trained else arch.vision_params)  # a frozen vision tower
