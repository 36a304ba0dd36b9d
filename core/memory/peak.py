"""``estimate(plan)``: the peak GPU memory of a steady-state training step, moment by moment.

Not every kind of memory is alive at once, so the peak is the largest of a few moments of the step (measured in
../shared/oracle, README "What the runs show"):

- **forward** (end of the last micro-batch's forward, at the loss): everything saved so far, autocast's cached
  weight copies, and the lm_head output (plus its fp32 upcast) next to the saved fp32 log-softmax.
- **backward start** (the loss's backward): everything the forward kept plus two fp32 [b*s, V] gradients
  (``nll_loss_backward``, ``_log_softmax_backward_data``), before any parameter gradient exists.
- **backward** through the blocks: activations are freed block by block while gradients appear; memory is
  linear in the block index, so the top and bottom blocks bound it; plus each block's transient.
- **optimizer step**: weights + gradients + optimizer state + the step's temporaries.

With ``set_to_none`` gradients are absent from the first micro-batch's forward; from micro-batch 2 on
(gradient accumulation) they are all there (oracle ``llama_ga2``).
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.activations.context import ActCtx, plan_ctx
from vramplan.core.memory.activations.stage import Layout, StageActs, loss_parallel_on, stage_acts
from vramplan.core.memory.allocator import moment_requests, pack, step_shapes
from vramplan.core.memory.estimate_record import Estimate, OverheadTerm, Phase
from vramplan.core.memory.flat_params import flat_units, fsdp1_states
from vramplan.core.memory.kinds import KINDS
from vramplan.core.memory.memory_formulas import component_formulas
from vramplan.core.memory.overhead import overhead_bytes, overhead_terms
from vramplan.core.memory.states import Stage, States, model_states, stages
from vramplan.core.plan.architecture.arch import Arch, lora_params_per_layer, lora_roles
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.node import node_limits
from vramplan.core.plan.resolved import fsdp_sharded
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import REGIMES


@memoised(1024)
def _phases(ctx: ActCtx, stage: Stage, st: States, a: StageActs, lay: Layout) -> tuple[Phase, ...]:
    """The candidate moments of the step on one stage, each with what is live then."""
    z, accum = lay.zero, lay.accum
    m = stage.in_flight
    G = st.grads
    # gradients already accumulated when a later micro-batch runs: the kept partition, or under FSDP's no_sync
    # (`Layout.unsynced`) every unit's unsharded gradient until the last micro-batch's reduce-scatter
    held = st.grads_whole if (lay.unsynced and G) else G
    gk = held if accum else 0
    # other micro-batches in flight on this stage (pipeline 1F1B), each with its own saved weight copies
    others = (m - 1) * (a.saved + a.copies)
    P, OS, GA, CB = st.params, st.optimizer, st.gathered, m * a.closure

    dp = lay.dp

    def new_grads(done: int) -> int:
        """Gradient bytes present after `done` bytes were produced in this backward (ZeRO-2/3 keep their shard).
        With the optimizer step in backward (torchtune training/memory.py register_optim_in_bwd_hooks: a
        post-accumulate-grad hook steps and frees each parameter's gradient), at most the largest one."""
        if accum:
            return held
        got = min(G, done // dp if z >= 2 else done)
        return min(got, st.largest_grad) if lay.opt_in_bwd else got

    fused_head_grad = st.head_grad if lay.fused_ce and not accum else 0
    # compiled chunked loss: each chunk's lm_head backward makes a partial [V, h] weight gradient; up to three
    # are alive while autograd's InputBuffer sums them (measured on the CPU, tests/data/chunked_ce.json)
    partial_head = 2 * st.head_grad if (lay.loss_chunks > 1 and ctx.compiled) else 0
    phases = [
        Phase(
            "forward",
            "end of forward of the last micro-batch: the loss is computed from the lm_head output",
            {
                "parameters": P,
                "optimizer_states": OS,
                "gathered_parameters": GA,
                "checkpoint_buffers": CB,
                "gradients": gk + fused_head_grad,
                "activations": others + a.saved + a.copies,
                "autocast_cache": a.copies_fwd - a.copies,
                "logits": a.logsm + a.logits_fwd,
                "temporaries": a.head_work,
            },
        ),
        Phase(
            "backward",
            "start of backward: everything the forward kept plus the loss's two fp32 [b*s, V] gradients",
            {
                "parameters": P,
                "optimizer_states": OS,
                "gathered_parameters": GA,
                "checkpoint_buffers": CB,
                "gradients": gk + fused_head_grad,
                "activations": others + a.saved + a.copies,
                "logits": a.logsm + a.loss_grads,
                "temporaries": (a.head_work + partial_head) if stage.last else a.dy,
            },
        ),
    ]
    arch = ctx.arch
    vocab_g = arch.V * arch.h * st.grad_bytes // lay.tp if ctx.full else 0
    # A tied embedding/lm_head weight: autograd buffers the lm_head's gradient until the embedding's backward,
    # then sums both out of place (InputBuffer: old + new) before AccumulateGrad (oracle README; measured).
    tied = vocab_g if (arch.tied and stage.first and stage.last) else 0
    buffered = tied if (accum or z >= 2) else 0  # (otherwise it is the gradient `new_grads` already counts)
    if stage.layers:
        n = stage.layers
        layer_g = st.layer_grad
        head_g = st.head_grad
        # A block's own weight gradients are made op by op as its backward frees its saved tensors; its worst
        # transient comes first (the MLP's down projection and activation, layer_work), when only the down
        # projection's gradient exists, in place of its freed input: a block's moment counts the gradients of the
        # blocks behind it, not its own (measured, tests/data/moe_truth.json: mixtral_base's backward within 0.01%,
        # qwen3_bf16mixed_gc's peak in the optimizer step). Its end, all of its gradients made and little activation
        # memory left, is the next block's start (the `n - 1` blocks below) or, for the first block, the end of
        # backward. With gradient accumulation each new gradient is added in place as it is made.
        # ZeRO-2/3: the block behind's gradients wait unsharded while their reduce-scatter overlaps this block's
        # backward (FSDP2 frees its input at the next reduce-scatter), the lm_head's before the last block.
        pending = layer_g + st.reduce_extra if z >= 2 else 0
        # FSDP2's root unit (`States.head_held`): the lm_head's unsharded gradient waits for the end of backward
        head_fresh = (st.head_held or head_g) if z >= 2 else 0
        copies_layers = a.copies - a.head_copies
        per_layer_copies = copies_layers // n if n else 0
        top_acts = others + a.saved - a.head
        phases.append(
            Phase(
                "backward",
                "backward of the last block: its transients on top of all other blocks' activations",
                {
                    "parameters": P,
                    "optimizer_states": OS,
                    "gathered_parameters": GA,
                    "checkpoint_buffers": CB,
                    "gradients": new_grads(0 if z >= 2 else head_g),
                    "activations": top_acts + copies_layers,
                    "temporaries": a.dy + a.layer_work + max(head_fresh, buffered),
                },
            )
        )
        bottom_acts = others + a.embed + a.first_layer + a.rope
        phases.append(
            Phase(
                "backward",
                "backward of the first block: every other block's gradients exist, little activation memory is left",
                {
                    "parameters": P,
                    "optimizer_states": OS,
                    "gathered_parameters": GA,
                    "checkpoint_buffers": CB,
                    "gradients": new_grads(head_g + (n - 1) * layer_g),
                    "activations": bottom_acts + per_layer_copies,
                    "temporaries": a.dy + a.layer_work + (pending + st.head_held if n > 1 else head_fresh) + buffered,
                },
            )
        )
    # embedding backward: a dense [V, h] gradient, added in place if one exists (ZeRO-2/3: produced unsharded,
    # then reduce-scattered). Tied: the buffered lm_head gradient + the dense one, summed out of place when the
    # buffered one is a transposed view of the matmul's gradient; under autocast it is a fresh fp32 cast and the
    # sum happens in place (measured: llama tied fp32 vs BLOOM tied bf16-autocast)
    tail = 0
    if tied:
        tail = tied + (tied if ctx.reg.compute != "autocast" else 0) + buffered
    elif stage.first and (accum or z >= 2):
        tail = vocab_g
    tail = max(tail, st.root_reduce)  # FSDP2's root unit reduces its gradients only now (`fsdp2_root_reduce`)
    phases.append(
        Phase(
            "backward",
            "end of backward: all gradients, the embedding's gradient being accumulated",
            {
                "parameters": P,
                "optimizer_states": OS,
                "gathered_parameters": GA,
                "gradients": min(G, st.largest_grad) if lay.opt_in_bwd else (held if accum else G),
                "activations": others + a.embed,
                "temporaries": a.dy + tail,
                "checkpoint_buffers": (m - 1) * a.closure,  # released with the last block's backward
            },
        )
    )
    if not lay.opt_in_bwd:  # in backward, each parameter's step ran already
        phases.append(
            Phase(
                "optimizer",
                "optimizer step: weights, gradients, optimizer state and the step's temporaries",
                {"parameters": P, "optimizer_states": OS, "gradients": G, "temporaries": st.optimizer_temp},
            )
        )
    return tuple(phases)


class StagePeak(NamedTuple):
    """The moments of one pipeline stage's step and the worst of them."""

    tensor_bytes: int  # live tensor bytes at the peak moment
    moment: int  # the peak moment's index in `phases`
    phases: tuple[Phase, ...]
    largest: dict[str, int]  # each kind at its largest over the moments (must not be mutated: memoised)
    acts: StageActs


class BusiestStage(NamedTuple):
    """The pipeline stage whose peak is highest: what the estimate reports."""

    name: str  # "all" without pipeline parallelism, else "first" or "last"
    states: States
    peak: StagePeak
    acts: StageActs
    stage: Stage


@memoised(1024)
def _stage_peak(ctx: ActCtx, stage: Stage, st: States, lay: Layout) -> StagePeak:
    """A stage's phases, the live bytes at its peak, the peak's index, and each kind at its largest."""
    acts = stage_acts(ctx, stage, lay)
    phases = _phases(ctx, stage, st, acts, lay)
    top, peak = max((sum(p.live.values()), i) for i, p in enumerate(phases))
    largest = dict.fromkeys(KINDS[:-1], 0)
    for p in phases:
        for k, v in p.live.items():
            if v > largest[k]:
                largest[k] = v
    return StagePeak(tensor_bytes=top, moment=peak, phases=phases, largest=largest, acts=acts)


@memoised(1024)
def _packed(ctx: ActCtx, stage: Stage, st: States, lay: Layout, expandable: bool) -> tuple[int, ...]:
    """The bytes the caching allocator reserves for each moment's live tensors (`core.memory.allocator`)."""
    shapes = step_shapes(ctx, stage, lay)
    phases = _stage_peak(ctx, stage, st, lay).phases
    w, g = ctx.reg.weight_bytes, st.grad_bytes
    return tuple(pack(moment_requests(p.live, shapes, w, g), expandable) for p in phases)


def allocator_waste(packed: tuple[int, ...], moment: int, tensor_peak: int, stranded: int) -> int:
    """Reserved beyond the peak's tensors and `stranded` (freed_logits): the allocator never returns a segment
    (until ``empty_cache``), so ``max_memory_reserved`` is at least the largest over the step's moments of what
    that moment's tensors fill, the peak's stranded block included."""
    most = max(p + (stranded if i == moment else 0) for i, p in enumerate(packed))
    return max(0, most - tensor_peak - stranded)


def _flat(plan: Plan, arch: Arch, stage: Stage, st: States, roles: tuple[str, ...]) -> States:
    """``st`` under FSDP1 (`core.memory.flat_params`): the stage's units as padded FlatParameters."""
    t, s = plan.training, plan.strategy
    reg, quant, tp = REGIMES[t.regime], t.base_quantization, s.tensor_parallel
    rank = t.lora_rank
    lora = tuple((rank * lin.d_in // tp, rank * lin.d_out // tp) for lin in arch.linears if lin.role in roles)
    adapted = t.quantized_modules == "adapted"
    quantized = tuple(lin.role for lin in arch.linears if quant != "none" and (not adapted or lin.role in roles))
    units = flat_units(
        arch,
        stage,
        tp=tp,
        world=plan.data_parallel,
        elem=reg.weight_bytes,
        lora=lora,
        adapter_wrap=s.fsdp_adapter_wrap or "own",
        quantized=quantized,
        quantization=quant,
        double_quant=t.double_quantization,
    )
    return fsdp1_states(st, units, stage, reg, zero=s.zero_stage, dp=plan.data_parallel, full=t.method == "full")


def estimate(plan: Plan, *, cpu: bool = False) -> Estimate:
    """Per-GPU memory of the busiest rank at the peak of a steady-state step: `sft_estimate` for supervised
    fine-tuning, `core.memory.rl.estimate.rl_estimate` (phase by phase, its update phase `sft_estimate`'s) for
    ``training.objective`` dpo, grpo and ppo."""
    if plan.training.objective_spec.post_training:
        from vramplan.core.memory.rl.estimate import rl_estimate  # an SFT plan's estimate never loads it

        return rl_estimate(plan, sft_estimate, cpu=cpu)
    return sft_estimate(plan, cpu=cpu)


def sft_estimate(plan: Plan, *, cpu: bool = False) -> Estimate:
    """Per-GPU memory of the busiest rank at the peak of a steady-state step (see module docstring).

    ``cpu``: reproduce PyTorch's CPU kernels where they differ from CUDA's
    (`core.memory.activations.context.CPU_DIFFERENCES`), to compare with measurements taken on the CPU; the prediction
    for a GPU is the default."""
    t, s = plan.training, plan.strategy
    ctx = plan_ctx(plan, cpu)
    arch, reg = ctx.arch, ctx.reg
    gpu = presets.gpu(plan.hardware.gpu)
    tp, pp, dp = s.tensor_parallel, s.pipeline_parallel, plan.data_parallel
    full = ctx.full
    roles = () if full else lora_roles(arch, t.lora_targets)
    quant = t.base_quantization
    lay = Layout(
        tp=tp,
        sp=s.sequence_parallel,
        dp=dp,
        zero=s.zero_stage,
        int8=s.activation_compression == "int8",
        fused_ce=s.fused_cross_entropy and s.loss_chunks == 1,  # a chunked loss replaces the fused one
        accum=t.grad_accum_steps > 1,
        loss_chunks=s.loss_chunks,
        checkpoint_every=s.checkpoint_every,
        offload=s.activation_offload == "cpu",
        opt_in_bwd=s.optimizer_in_backward,
        unsynced=t.grad_accum_steps > 1 and s.fsdp_grad_sync == "last" and fsdp_sharded(plan),
        loss_parallel=loss_parallel_on(tp, plan.stack.framework),
        dtensor_tp=tp > 1 and plan.stack.framework == "torchtitan",  # parallelize apply_tp: DTensor TP
    )
    best: BusiestStage | None = None
    for stage in stages(arch.L, pp, t.grad_accum_steps):
        st = model_states(
            arch,
            stage,
            reg,
            method=t.method,
            lora_roles=roles,
            lora_rank=t.lora_rank,
            quantization=quant,
            double_quant=t.double_quantization,
            optimizer=t.optimizer,
            optimizer_impl=t.optimizer_impl,
            zero=s.zero_stage,
            dp=dp,
            tp=tp,
            offload_optimizer=s.offload_optimizer,
            offload_params=s.offload_parameters,
            lora_dtype=t.lora_dtype,
            quantized_modules=t.quantized_modules,
            ep=s.expert_parallel,
            fsdp2=fsdp_sharded(plan) and s.fsdp_version != 1,
        )
        if s.fsdp_version == 1 and s.zero_stage >= 2 and dp > 1:
            st = _flat(plan, arch, stage, st, roles)
        sp = _stage_peak(ctx, stage, st, lay)
        if best is None or sp.tensor_bytes > best.peak.tensor_bytes:
            name = "all" if pp == 1 else ("first" if stage.first else "last")
            best = BusiestStage(name=name, states=st, peak=sp, acts=sp.acts, stage=stage)
    assert best is not None
    st, stage_name, phases, most = best.states, best.name, best.peak.phases, best.peak.largest
    peak = phases[best.peak.moment]

    trainable = arch.total_params if full else arch.L * lora_params_per_layer(arch, roles, t.lora_rank)
    # the 16-bit logits freed before the loss's backward (HF, torchtitan: upcast to fp32 for the loss) stay
    # reserved when the peak is that backward's start (moment 1)
    upcast = not s.fused_cross_entropy and s.loss_chunks == 1 and reg.act_bytes != 4
    freed = reg.act_bytes * ctx.T * arch.V // tp if (upcast and best.stage.last and best.peak.moment == 1) else 0
    expandable = plan.overhead.expandable_segments
    rules = 0
    if plan.overhead.allocator_reserve_percent is None:
        packed = _packed(ctx, best.stage, st, lay, expandable)
        rules = allocator_waste(packed, best.peak.moment, best.peak.tensor_bytes, 0 if expandable else freed)
    overheads = overhead_bytes(
        plan,
        st,
        best.peak.tensor_bytes,
        grads_at_peak=peak.live.get("gradients", 0),
        freed_logits=freed,
        allocator_rules=rules,
    )
    largest = dict(most)  # the Estimate's own (the memo's stays as it is)

    def explain() -> tuple[dict[str, tuple[str, str]], tuple[OverheadTerm, ...]]:
        return (
            component_formulas(plan, arch, reg, st, ctx, roles, trainable, largest),
            overhead_terms(plan, st, overheads),
        )

    gpus_node = plan.hardware.gpus_per_node
    return Estimate(
        plan=plan,
        params_total=arch.total_params + (0 if full else trainable),
        params_trainable=trainable,
        largest=largest,
        phases=phases,
        peak=peak,
        overhead_bytes=overheads,
        gpu_capacity=gpu.memory_bytes,
        cpu_per_node=(st.cpu + best.acts.offloaded * best.stage.in_flight) * gpus_node,
        nvme_per_node=st.nvme * gpus_node,
        node=node_limits(plan),
        stage=stage_name,
        explainer=explain,
    )
