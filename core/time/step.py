"""Step time, throughput and time-to-train: ``step_time(plan) -> StepTime`` (pure, microseconds).

The step is a list of kernels the plan implies, each timed by what bounds it (`core.time.kernels`: its math at the
rate its shape reaches, or its bytes at the memory's bandwidth, plus its overhead), and the transfers between GPUs
and to the host at their links' bandwidths. One GPU's step, the model split over its TP x PP ranks, each data-parallel
rank running ``m`` micro-batches (``grad_accum_steps``):

    micro-batch = max(GPU time of its kernels, host time to issue them) + exposed transfers   (`core.time.compute`)
    step        = (m + p - 1) x micro-batch       (1F1B pipeline; p = 1: m micro-batches)
                + exposed gradient reduction and parameter all-gather + optimizer step (GPU, or CPU)

What overlaps with compute (as the frameworks schedule it; what exceeds the window is exposed):
- bucketed gradient all-reduce / reduce-scatter runs during the backward of its micro-batch (DDP, DeepSpeed
  ``overlap_comm``; PyTorch DDP paper, Li et al. 2020 §3.2.3);
- ZeRO-3 / FSDP prefetch: parameter all-gathers run during the forward; all-gathers and gradient reduce-scatters
  during the backward; parameter partitions fetched from the host or NVMe likewise (Rajbhandari et al. 2021,
  ZeRO-Infinity §6); ZeRO-1/2 gather the updated parameters during the next forward;
- offloaded gradients stream to the host during the backward, updated parameters stream back while CPU Adam works
  (Ren et al. 2021, ZeRO-Offload §4.1 and §5.1); offloaded activations go to the host during the forward and come
  back during the backward, each on its own stream (torchtune training/_activation_offloading.py);
- not overlapped: TP all-reduces (each layer waits on them; Korthikanti et al. 2022 §4.2.2), pipeline sends, the
  pipeline bubble, the optimizer step and the CPU step.

The reported ``mfu`` is what the step achieves: model FLOPs (PaLM's definition: 6N + attention per token, no
recomputation) / (step time x GPUs x dense peak); ``training.mfu``, when set, is the fraction of the peak every
matmul runs at (it replaces the GPU's measured matmul efficiency and the shape's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.memory.activations.block import layer_saved
from vramplan.core.memory.activations.context import int8_bytes, plan_ctx
from vramplan.core.memory.states.optimizer import trainable_tensors
from vramplan.core.memory.states.stages import Stage
from vramplan.core.plan.architecture.arch import Arch, lora_params_per_layer, lora_roles
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.schema.precision import OPTIMIZERS, REGIMES, quantized_bytes, resolve_impl
from vramplan.core.time import flops as fl
from vramplan.core.time.anchor import anchor_note, anchored
from vramplan.core.time.attention_time import FA2_SRC
from vramplan.core.time.block_time import DEQUANT_SRC
from vramplan.core.time.chip import MEMORY_EFFICIENCY_SRC, Chip, plan_chip
from vramplan.core.time.comm import links
from vramplan.core.time.compute import MicroBatch, micro_batch
from vramplan.core.time.head_time import LOSS_BYTES_PER_LOGIT
from vramplan.core.time.kernels import MATMUL_SRC
from vramplan.core.time.launch import LAUNCH_SRC
from vramplan.core.time.offload import (
    HOST_MEMORY_GBS_PER_NODE,
    cpu_cores_per_rank,
    nvme_link,
    pcie_link,
)
from vramplan.core.time.optimizer_time import OPTIMIZER_STEP_SRC, optimizer_step
from vramplan.core.time.record import StepTime, TimeTerm, time_term
from vramplan.core.time.transfers import (
    Transfers,
    communication_terms,
    offload_terms,
    offloads,
)

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


BUBBLE_SRC = "1F1B schedule (Narayanan et al. 2021 §2.2): bubble fraction (p - 1)/m"


def step_time(plan: Plan) -> StepTime:
    """The step time of a plan: `sft_step_time`, or for ``training.objective`` dpo/grpo/ppo
    `core.time.rl_time.rl_step_time` (generation, scoring and the update, the update's `sft_step_time`)."""
    if plan.training.objective_spec.post_training:
        from vramplan.core.time.rl_time import rl_step_time  # an SFT plan's step time never loads it

        return rl_step_time(plan, sft_step_time)
    return sft_step_time(plan)


def _int8_traffic(plan: Plan) -> int:
    """Bytes one block's int8 activation compression moves per micro-batch on one GPU (`fl.int8_compression_bytes`
    of what the block saves as the estimate counts it: the checkpoint alone under full checkpointing)."""
    t, s = plan.training, plan.strategy
    reg, tp, arch = REGIMES[t.regime], s.tensor_parallel, plan.model.arch()
    sp = s.sequence_parallel
    if s.gradient_checkpointing == "full":
        saved = arch.h * t.micro_batch_size * t.seq_len * reg.resid_bytes // (tp if sp else 1)
        elems = saved // reg.resid_bytes
    else:
        x = layer_saved(plan_ctx(plan), True)
        saved = x.local(tp, sp)
        elems = x.elems * saved // (x.rep + x.split) if x.rep + x.split else 0
    return fl.int8_compression_bytes(saved, int8_bytes(elems))


def compute_terms(plan: Plan, mb: MicroBatch, m: int, c: Chip, compress: float) -> list[TimeTerm]:
    """The micro-batches' kernels by mechanism, and what the host adds when it issues them slower than the GPU runs
    them (``compress``: one micro-batch's int8 activation packing, seconds, outside its blocks' kernels)."""
    t, s = plan.training, plan.strategy
    T = t.micro_batch_size * t.seq_len
    L = mb.layers
    eff = f"training.mfu {t.mfu:g}" if t.mfu is not None else f"{c.matmul_efficiency:g} x tile and wave efficiency"
    out = [
        time_term("matmuls", m * mb.linears.seconds, "compute",
                  "{} x {} blocks' linears + lm_head, forward and backward: {:.3g} FLOP at {:g} TFLOP/s x {} ({} SMs)",
                  m, L, mb.linears.flops, c.flops / 1e12, eff, c.sms, source=MATMUL_SRC),
        time_term("attention", m * mb.attention.seconds, "compute",
                  "{} x {} blocks' attention core ({} attention, b·s = {:,}): {:.3g} FLOP",
                  m, L, s.attention, T, mb.attention.flops, source=FA2_SRC if s.attention == "flash" else
                  "eager attention: QKᵀ and PV batched matmuls, the softmax's s x s traffic (Dao et al. 2022 §2.2)"),
        time_term("memory_ops", m * mb.elementwise.seconds, "memory",
                  "{} x {:.3g} B of norms, rotary, activations, adds, casts, embedding ({:,} kernels)"
                  " / HBM {:.0f} GB/s",
                  m, mb.elementwise.bytes, mb.elementwise.kernels, c.hbm / 1e9,
                  source="core/time/block_time.py (transformers' modeling code op by op, or fused by torch.compile); "
                  + MEMORY_EFFICIENCY_SRC),
        time_term("loss", m * mb.loss.seconds, "memory",
                  "{} x {:.3g} B over the logits ({} B per logit unfused) / HBM", m, mb.loss.bytes,
                  LOSS_BYTES_PER_LOGIT, source="core/time/head_time.py (transformers ForCausalLMLoss; Liger's "
                  "fused_linear_cross_entropy)"),
    ]  # fmt: skip
    if mb.adapters.seconds:
        out.append(time_term("adapters", m * mb.adapters.seconds, "compute",
                             "{} x LoRA A and B on {} linears x {} blocks, forward and backward (skinny matmuls)",
                             m, len(lora_roles(plan.model.arch(), t.lora_targets)), L, source=MATMUL_SRC))  # fmt: skip
    if compress:
        out.append(time_term("activation_compression", m * compress, "memory",
                             "{} x {} blocks' int8 packing and unpacking of what they save: {:.3g} B / HBM", m,
                             mb.layers, compress / mb.layers * c.hbm, source=fl.INT8_SRC))  # fmt: skip
    if mb.dequantization.seconds:
        out.append(time_term("dequantization", m * mb.dequantization.seconds, "memory",
                             "{} x {:.3g} B: the {} base's linears read and written as 16-bit weights for each "
                             "matmul / HBM", m, mb.dequantization.bytes, t.base_quantization,
                             source=DEQUANT_SRC))  # fmt: skip
    if mb.recompute.seconds:
        out.append(time_term("recompute", m * mb.recompute.seconds, "compute",
                             "{} x the forward work {} checkpointing re-runs ({:.3g} FLOP)", m,
                             s.gradient_checkpointing, mb.recompute.flops, source=fl.RECOMPUTE_SRC))  # fmt: skip
    idle = max(0.0, mb.host_seconds - mb.gpu)
    if idle:
        out.append(time_term("host_launch", m * idle, "host",
                             "{} x (host {:.3g} s to issue {:,} forward + {:,} backward kernels - GPU {:.3g} s)",
                             m, mb.host_seconds, mb.forward_kernels, mb.backward_kernels, mb.gpu,
                             source=LAUNCH_SRC))  # fmt: skip
    return out


class Batch(NamedTuple):
    """What the transfers and the optimizer need of one rank's share of the model."""

    trainable: float  # trainable elements per TP/PP rank
    grad_bytes: float  # their gradients, unsharded
    gathered: float  # ZeRO-3: parameter bytes gathered per pass
    grad_elem: int
    compute_elem: int  # bytes per element of the weights the model computes with


def batch_sizes(plan: Plan) -> Batch:
    t, s = plan.training, plan.strategy
    arch, reg = plan.model.arch(), REGIMES[t.regime]
    full, quant = t.method == "full", t.base_quantization
    roles = () if full else lora_roles(arch, t.lora_targets)
    share = s.tensor_parallel * s.pipeline_parallel
    grad_elem = reg.grad_bytes if full else (2 if reg.master_bytes else 4)
    trainable = (arch.total_params if full else arch.L * lora_params_per_layer(arch, roles, t.lora_rank)) / share
    elem16 = 4 if reg.compute == "fp32" else 2
    block_weights = arch.L * arch.layer_weight_params
    if quant != "none":
        q_layer = sum(quantized_bytes(lin.d_in, lin.d_out, quant, t.double_quantization) for lin in arch.linears)
        frozen_blocks = arch.L * q_layer
    else:
        frozen_blocks = block_weights * elem16
    gathered = (block_weights * elem16 if full else frozen_blocks) / share
    gathered += (arch.total_params - block_weights) / share * elem16
    if s.expert_parallel > 1:  # a rank gathers only its own experts (sharded over the dp / ep expert-data ranks)
        gathered -= arch.expert_params * (1 - 1 / s.expert_parallel) / share * elem16
    return Batch(trainable, trainable * grad_elem, gathered, grad_elem, elem16)


@memoised(256)  # keyed on frozen inputs
def _tensors(arch: Arch, layers: int, tp: int, method: str, roles: tuple[str, ...], rank: int) -> int:
    """The trainable tensors of a stage's rank (the optimizer's kernels loop over them)."""
    stage = Stage(first=True, last=True, layers=layers, in_flight=1)
    return sum(n for _, n in trainable_tensors(arch, stage, tp, method, roles, rank))


def _optimizer(plan: Plan, bt: Batch, c: Chip) -> TimeTerm | None:
    """The optimizer step on the GPU (none when it is offloaded: `core.time.transfers`)."""
    t, s = plan.training, plan.strategy
    if s.offload_optimizer != "none":
        return None
    reg = REGIMES[t.regime]
    full = t.method == "full"
    dp, zero = plan.data_parallel, s.zero_stage
    part = bt.trainable / (dp if zero >= 1 else 1)
    w16 = reg.weight_bytes if full else bt.grad_elem
    state = reg.state_bytes if full else 4
    per = fl.optimizer_bytes_per_element(t.optimizer, w16, bt.grad_elem, state, reg.master_bytes)
    arch = plan.model.arch()
    roles = () if full else lora_roles(arch, t.lora_targets)
    tensors = _tensors(arch, arch.L // s.pipeline_parallel, s.tensor_parallel, t.method, roles, t.lora_rank)
    impl = resolve_impl(t.optimizer_impl, reg)
    w = optimizer_step(part, per, tensors, impl, c)
    return time_term("optimizer_step", w.seconds, "memory",
                     "{:.3g} elements x {} B ({}, {}) / HBM + {:,} kernels", part, per, OPTIMIZERS[t.optimizer].name,
                     impl, w.kernels, source=OPTIMIZER_STEP_SRC)  # fmt: skip


def sft_step_time(plan: Plan) -> StepTime:
    """The step time of `plan` on one GPU, term by term (see the module docstring)."""
    hw, t, s = plan.hardware, plan.training, plan.strategy
    c = plan_chip(plan)
    gpu = presets.gpu(hw.gpu)
    tp, pp, dp = s.tensor_parallel, s.pipeline_parallel, plan.data_parallel
    m = t.grad_accum_steps
    mb = micro_batch(plan, c, first=pp == 1, last=True)
    compress = _int8_traffic(plan) * mb.layers / c.hbm if s.activation_compression == "int8" else 0.0
    bt = batch_sizes(plan)
    lk = links(gpu, hw.gpus_per_node, hw.nodes, tp, dp)._replace(host=pcie_link(plan))
    tr = Transfers(plan, gpu, lk, nvme_link(plan), bt.gathered, bt.grad_bytes, bt.trainable, bt.grad_elem,
                   bt.compute_elem, mb.seconds + compress, mb.layers)  # fmt: skip
    comm, per_mb_exposed, reduce_s = communication_terms(tr, m)
    off, off_mb = (
        offload_terms(tr, m, cpu_cores_per_rank(plan), HOST_MEMORY_GBS_PER_NODE, reduce_s)
        if offloads(plan)
        else ([], 0.0)
    )
    opt = _optimizer(plan, bt, c)
    micro = mb.seconds + compress + per_mb_exposed + off_mb
    bubble = (pp - 1) * micro
    terms = compute_terms(plan, mb, m, c, compress)
    terms += comm + off
    if bubble:
        terms.append(time_term("pipeline_bubble", bubble, "pipeline bubble",
                               "(p - 1) x micro-batch time = {} x {:.3g} s: (p - 1)/m = {:.0%} of the {} micro-batches",
                               pp - 1, micro, (pp - 1) / m, m,
                               source=BUBBLE_SRC))  # fmt: skip
    if opt is not None:
        terms.append(opt)
    terms = anchored(plan, terms)
    step = sum(x.exposed for x in terms)
    assert step > 0
    arch = plan.model.arch()
    roles = () if t.method == "full" else lora_roles(arch, t.lora_targets)
    tok = fl.token_flops(arch, t.seq_len, full=t.method == "full", roles=roles, rank=t.lora_rank,
                         checkpointing=s.gradient_checkpointing, checkpoint_every=s.checkpoint_every)  # fmt: skip
    tokens_per_step = t.micro_batch_size * t.seq_len * m * dp
    return StepTime(
        plan=plan,
        flops_per_step=tok.model * tokens_per_step,
        hardware_flops_per_step=tok.hardware * tokens_per_step,
        tokens_per_step=tokens_per_step,
        step_seconds=step,
        terms=tuple(terms),
        gpus=hw.total_gpus,
        peak_flops=c.flops,
        mfu_setting=t.mfu,
        price_per_gpu_hour=hw.price_per_gpu_hour if hw.price_per_gpu_hour is not None else gpu.price_per_gpu_hour,
        anchor=anchor_note(plan),
    )
