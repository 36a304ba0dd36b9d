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

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from core import presets
from core.activations import (
    ActCtx,
    Saved,
    checkpointed_layer,
    closure_bytes,
    embed_saved,
    head_saved,
    int8_bytes,
    layer_saved,
    logsoftmax_bytes,
    once_bytes,
)
from core.arch import Arch, lora_params_per_layer, lora_roles
from core.explain import component_formulas
from core.overhead import overhead_bytes, overhead_terms
from core.plan import Plan
from core.precision import REGIMES
from core.result import KINDS, Estimate, OverheadTerm, Phase
from core.states import Stage, States, model_states, stages


class Layout(NamedTuple):
    """The strategy settings the activation and phase model read (hashable: results are cached on it; a
    NamedTuple, built per estimate, is four times faster to build than a frozen dataclass)."""

    tp: int
    sp: bool
    dp: int
    zero: int
    int8: bool
    fused_ce: bool
    accum: bool  # more than one micro-batch per optimizer step


@dataclass(frozen=True, slots=True)
class StageActs:
    """Activation bytes of one micro-batch on one stage, per TP rank."""

    layers: int  # saved by all blocks of the stage
    first_layer: int  # saved by the stage's first block (LoRA: block 0 saves less)
    embed: int
    head: int
    rope: int
    logsm: int  # saved fp32 log-softmax
    loss_grads: int  # the loss's two fp32 gradients at backward start
    logits_fwd: int  # lm_head output (+ fp32 upcast) while the loss is computed
    copies: int  # saved 16-bit weight copies at the start of backward
    copies_fwd: int  # weight copies alive at the end of forward (autocast cache)
    head_copies: int
    closure: int  # checkpoint closures
    layer_work: int  # largest backward transient of a block (incl. recompute)
    dy: int  # gradient of the hidden states flowing between blocks

    @property
    def saved(self) -> int:
        return self.layers + self.embed + self.head + self.rope


@lru_cache(maxsize=1024)
def _stage_acts(ctx: ActCtx, stage: Stage, lay: Layout) -> StageActs:
    tp, sp, int8 = lay.tp, lay.sp, lay.int8
    arch, T = ctx.arch, ctx.T
    n = stage.layers
    rest = layer_saved(ctx, True)
    first = rest if (ctx.full or ctx.gc) else layer_saved(ctx, False)

    def local(x: Saved) -> int:
        b = x.local(tp, sp)
        if int8 and (x.rep + x.split):
            return b * int8_bytes(x.elems) // (x.rep + x.split)
        return b

    if lay.zero == 3:
        # ZeRO-3 / FSDP gather each module's 16-bit weights for use and free them after: autograd's saved weights
        # are re-gathered in backward (the gathered_parameters term), no whole-model 16-bit copy persists.
        first, rest = _without_copies(first), _without_copies(rest)
    rest_b = local(rest)
    first_b = local(first) if stage.first else rest_b
    if ctx.gc:
        ck = checkpointed_layer(ctx) // (tp if sp else 1)
        ck = int8_bytes(ck // ctx.reg.resid_bytes) if int8 else ck
        layers, first_layer = n * ck, ck
        layer_copies = 0
        # backward recomputes one block (its saved tensors; an fp32 block input is the checkpoint itself, not a
        # copy), re-casts its weights under autocast, then runs its backward
        own_input = ctx.arch.fam.norm == "layer" or ctx.reg.resid_bytes == 4  # RMSNorm saves an fp32 version
        shared = ck if own_input and not int8 else 0
        work = rest_b - shared + rest.cache // tp + rest.work // tp
    else:
        layers = first_b + (n - 1) * rest_b
        first_layer = first_b
        layer_copies = ((first.copies if stage.first else rest.copies) + (n - 1) * rest.copies) // tp
        work = rest.work // tp + (rest.local(tp, sp) if int8 else 0)  # int8: one block decompressed
    cache = ((first.cache if stage.first else rest.cache) + (n - 1) * rest.cache) // tp
    # frozen weights' saved copies (not in autocast's cache); checkpointed blocks save none
    frozen = (
        0
        if ctx.gc
        else ((first.frozen_copies if stage.first else rest.frozen_copies) + (n - 1) * rest.frozen_copies) // tp
    )
    embed = embed_saved(ctx, ctx.full or ctx.gc).local(tp, sp) if stage.first else 0
    head = logsm = loss_grads = logits_fwd = head_copies = head_cache = 0
    if stage.last:
        hs = head_saved(ctx)
        head = hs.local(tp, sp)
        if lay.zero != 3:
            head_copies = hs.copies // tp
            head_cache = hs.cache // tp
            frozen += hs.frozen_copies // tp
        C = ctx.reg.act_bytes
        if lay.fused_ce:
            chunk = _fused_ce_chunk(T, arch)
            loss_grads = chunk * arch.V * (8 + C) // tp
            logits_fwd = loss_grads
        else:
            logsm = logsoftmax_bytes(ctx) // tp
            loss_grads = 2 * logsm
            logits_fwd = (C * T * arch.V + (4 * T * arch.V if C != 4 else 0)) // tp
    copies = layer_copies + head_copies
    copies_fwd = max(copies, cache + head_cache + frozen)
    rope = 0 if ctx.gc else once_bytes(ctx)
    dy = ctx.reg.resid_bytes * T * arch.h // (tp if sp else 1)
    return StageActs(
        layers,
        first_layer,
        embed,
        head,
        rope,
        logsm,
        loss_grads,
        logits_fwd,
        copies,
        copies_fwd,
        head_copies,
        closure_bytes(ctx),
        work,
        dy,
    )


def _without_copies(x: Saved) -> Saved:
    return Saved(x.rep, x.split, 0, 0, 0, x.elems, x.work)


def _fused_ce_chunk(T: int, arch: Arch) -> int:
    """Liger's fused linear cross-entropy processes ``next_pow2(ceil(T / ceil(V/h)))`` tokens at a time
    (liger_kernel/ops/fused_linear_cross_entropy.py), so a chunk of logits is about the size of the hidden
    states; Cut Cross-Entropy needs even less."""
    inc = -(-arch.V // arch.h)
    chunk = -(-T // inc)
    return min(T, 1 << max(chunk - 1, 0).bit_length())


@lru_cache(maxsize=1024)
def _phases(ctx: ActCtx, stage: Stage, st: States, a: StageActs, lay: Layout) -> tuple[Phase, ...]:
    """The candidate moments of the step on one stage, each with what is live then."""
    z, accum = lay.zero, lay.accum
    m = stage.in_flight
    G = st.grads
    gk = G if accum else 0  # gradients already accumulated when the last micro-batch runs
    # other micro-batches in flight on this stage (pipeline 1F1B), each with its own saved weight copies
    others = (m - 1) * (a.saved + a.copies)
    P, OS, GA, CB = st.params, st.optimizer, st.gathered, m * a.closure

    dp = lay.dp

    def new_grads(done: int) -> int:
        """Gradient bytes present after `done` bytes were produced in this backward (ZeRO-2/3 keep their shard)."""
        if accum:
            return G
        return min(G, done // dp if z >= 2 else done)

    fused_head_grad = st.head_grad if lay.fused_ce and not accum else 0
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
                "temporaries": 0 if stage.last else a.dy,
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
        fresh = layer_g if (accum or z >= 2) else 0  # a block's new gradient before it is added or reduced
        head_fresh = head_g if z >= 2 else 0  # the lm_head's unsharded gradient still waiting in a reduce bucket
        own = 0 if z >= 2 else layer_g  # the block's gradients: ZeRO-2/3 hold them unsharded in `fresh` instead
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
                    "gradients": new_grads(own + (0 if z >= 2 else head_g)),
                    "activations": top_acts + copies_layers,
                    "temporaries": a.dy + a.layer_work + fresh + max(head_fresh, buffered),
                },
            )
        )
        bottom_acts = others + a.embed + a.first_layer + a.rope
        phases.append(
            Phase(
                "backward",
                "backward of the first block: nearly all gradients exist, little activation memory is left",
                {
                    "parameters": P,
                    "optimizer_states": OS,
                    "gathered_parameters": GA,
                    "checkpoint_buffers": CB,
                    "gradients": new_grads(head_g + (n - 1) * layer_g + own),
                    "activations": bottom_acts + per_layer_copies,
                    "temporaries": a.dy + a.layer_work + fresh + buffered,
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
    phases.append(
        Phase(
            "backward",
            "end of backward: all gradients, the embedding's gradient being accumulated",
            {
                "parameters": P,
                "optimizer_states": OS,
                "gathered_parameters": GA,
                "gradients": G,
                "activations": others + a.embed,
                "temporaries": a.dy + tail,
                "checkpoint_buffers": (m - 1) * a.closure,  # released with the last block's backward
            },
        )
    )
    phases.append(
        Phase(
            "optimizer",
            "optimizer step: weights, gradients, optimizer state and the step's temporaries",
            {"parameters": P, "optimizer_states": OS, "gradients": G, "temporaries": st.optimizer_temp},
        )
    )
    return tuple(phases)


@lru_cache(maxsize=1024)
def _stage_peak(
    ctx: ActCtx, stage: Stage, st: States, lay: Layout
) -> tuple[int, int, tuple[Phase, ...], dict[str, int]]:
    """A stage's phases, the live bytes at its peak, the peak's index, and each kind at its largest."""
    phases = _phases(ctx, stage, st, _stage_acts(ctx, stage, lay), lay)
    top, peak = max((sum(p.live.values()), i) for i, p in enumerate(phases))
    largest = dict.fromkeys(KINDS[:-1], 0)
    for p in phases:
        for k, v in p.live.items():
            if v > largest[k]:
                largest[k] = v
    return top, peak, phases, largest


def estimate(plan: Plan, *, cpu: bool = False) -> Estimate:
    """Per-GPU memory of the busiest rank at the peak of a steady-state step (see module docstring).

    ``cpu``: reproduce PyTorch's CPU kernels where they differ from CUDA's (`core.activations.CPU_DIFFERENCES`), to
    compare with measurements taken on the CPU; the prediction for a GPU is the default."""
    m, t, s = plan.model, plan.training, plan.strategy
    arch = m.arch()
    reg = REGIMES[t.precision]
    gpu = presets.gpu(plan.hardware.gpu)
    tp, pp, dp = s.tensor_parallel, s.pipeline_parallel, plan.data_parallel
    full = t.method == "full"
    roles = () if full else lora_roles(arch, t.lora_targets)
    quant = t.base_quantization
    ctx = ActCtx(
        arch,
        t.micro_batch_size,
        t.seq_len,
        reg,
        full,
        frozenset(roles),
        quant != "none",
        s.attention == "eager",
        s.gradient_checkpointing == "selective",
        s.gradient_checkpointing == "full",
        t.lora_rank,
        cpu,
    )
    lay = Layout(
        tp,
        s.sequence_parallel,
        dp,
        s.zero_stage,
        s.activation_compression == "int8",
        s.fused_cross_entropy,
        t.grad_accum_steps > 1,
    )
    best: tuple[int, Phase, States, str, tuple[Phase, ...]] | None = None
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
        )
        top, peak, phases, most = _stage_peak(ctx, stage, st, lay)
        if best is None or top > best[0]:
            name = "all" if pp == 1 else ("first" if stage.first else "last")
            best = (top, phases[peak], st, name, phases, most)
    assert best is not None
    _, peak, st, stage_name, phases, most = best

    trainable = arch.total_params if full else arch.L * lora_params_per_layer(arch, roles, t.lora_rank)
    overheads = overhead_bytes(plan, st, best[0])
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
        cpu_per_node=st.cpu * gpus_node,
        nvme_per_node=st.nvme * gpus_node,
        stage=stage_name,
        explainer=explain,
    )
