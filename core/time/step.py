"""Step time, throughput and time-to-train: ``step_time(plan) -> StepTime`` (pure, microseconds).

One GPU's step, the model's work split evenly over its TP x PP ranks, each data-parallel rank running ``m``
micro-batches (``grad_accum_steps``) of ``b x s`` tokens:

    micro-batch = max(math at the plan's MFU, weight streaming) + memory-bound kernels + exposed transfers
    step        = (m + p - 1) x micro-batch            (1F1B pipeline; p = 1: m micro-batches)
                + exposed gradient reduction and parameter all-gather + optimizer step (GPU, or CPU)

What overlaps with compute (assumed, as the frameworks schedule it; what exceeds the window is exposed):
- bucketed gradient all-reduce / reduce-scatter runs during the backward of its micro-batch (DDP, DeepSpeed
  ``overlap_comm``; PyTorch DDP paper, Li et al. 2020 §3.2.3);
- ZeRO-3 / FSDP prefetch: parameter all-gathers run during the forward; all-gathers and gradient reduce-scatters
  during the backward; parameter partitions fetched from the host or NVMe likewise (Rajbhandari et al. 2021,
  ZeRO-Infinity §6); ZeRO-1/2 gather the updated parameters during the next forward (FSDP ``SHARD_GRAD_OP``,
  Megatron ``--overlap-param-gather``; DeepSpeed's stage 1/2 gathers right after the step, unhidden);
- offloaded gradients stream to the host during the backward, updated parameters stream back while CPU Adam works
  on the next tile (Ren et al. 2021, ZeRO-Offload §4.1 and §5.1);
- not overlapped: TP all-reduces (each layer waits on them; Korthikanti et al. 2022 §4.2.2), pipeline sends, the
  pipeline bubble, the optimizer step and the CPU step.

The plan's ``training.mfu`` is the fraction of the GPU's dense peak (bf16/fp16 tensor cores, or fp32 for the
fp32 regime) that the step's math reaches; the reported ``mfu`` is what the whole step achieves: model FLOPs /
(step time x GPUs x peak), lower when the plan recomputes activations or waits on transfers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.memory.activations.block import layer_saved
from vramplan.core.memory.activations.context import int8_bytes, plan_ctx
from vramplan.core.plan.architecture.arch import Arch, lora_params_per_layer, lora_roles
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.precision import OPTIMIZERS, REGIMES, quantized_bytes
from vramplan.core.time import flops as fl
from vramplan.core.time.assumptions import (
    HOST_MEMORY_GBS_PER_NODE,
    DefaultMfu,
    default_mfu,
    gpu_generation,
)
from vramplan.core.time.comm import LINK_EFFICIENCY as EFF
from vramplan.core.time.comm import (
    all_gather_seconds,
    all_reduce_seconds,
    all_to_all_seconds,
    expert_link,
    links,
    reduce_scatter_seconds,
    transfer_seconds,
)
from vramplan.core.time.offload import (
    cpu_adam_seconds,
    cpu_cores_per_rank,
    exposed_shares,
    nvme_link,
    nvme_optimizer_bytes,
    offload_overlap,
    param_fetch_bytes,
    param_fetch_seconds,
    pcie_link,
)
from vramplan.core.time.step_record import StepTime, TimeTerm, Work
from vramplan.core.time.time_formulas import time_formulas

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


def peak_flops(plan: Plan) -> tuple[float, str]:
    """Dense peak FLOP/s of one GPU for the regime's compute dtype (bf16/fp16 tensor cores, fp32 for ``fp32``:
    PyTorch leaves TF32 matmuls off by default, ``torch.backends.cuda.matmul.allow_tf32``). A GPU without native
    bf16 runs bf16 at no better than its fp32 rate."""
    gpu = presets.gpu(plan.hardware.gpu)
    dtype = REGIMES[plan.training.regime].compute_dtype
    tf = gpu.tflops(dtype)
    if tf <= 0:
        return gpu.fp32_tflops * 1e12, f"fp32 ({gpu.name} has no native {dtype})"
    return tf * 1e12, dtype


def _int8_traffic(plan: Plan, arch: Arch, tp: int) -> int:
    """Bytes one block's int8 activation compression moves per micro-batch on one GPU (`fl.int8_compression_bytes`
    of what the block saves as the estimate counts it: the checkpoint alone under full checkpointing)."""
    t, s = plan.training, plan.strategy
    reg = REGIMES[t.regime]
    sp = s.sequence_parallel
    if s.gradient_checkpointing == "full":
        saved = arch.h * t.micro_batch_size * t.seq_len * reg.resid_bytes // (tp if sp else 1)
        elems = saved // reg.resid_bytes
    else:
        x = layer_saved(plan_ctx(plan), True)
        saved = x.local(tp, sp)
        elems = x.elems * saved // (x.rep + x.split) if x.rep + x.split else 0
    return fl.int8_compression_bytes(saved, int8_bytes(elems))


def plan_default_mfu(plan: Plan, tok: fl.TokenFlops) -> DefaultMfu:
    """The MFU the plan gets when ``training.mfu`` is unset (`core.time.assumptions.default_mfu`): the GPU
    generation's math MFU, the attention share of the model FLOPs at this sequence length, and the share of the
    math's time its recomputation takes (model / hardware FLOPs: the recomputed FLOPs run at the same rate)."""
    arch = plan.model.arch()
    gpu = presets.gpu(plan.hardware.gpu)
    mm = fl.forward_matmul_flops(arch)
    att = fl.attention_forward_flops(arch, plan.training.seq_len)
    return default_mfu(gpu_generation(gpu), att / (mm + att), tok.model / tok.hardware)


def float8_factor(plan: Plan, arch: Arch, tok: fl.TokenFlops) -> float:
    """torchao Float8 linears run the block matmuls on fp8 tensor cores (torchtitan converts every Linear but the
    output head: float8.py ``module_filter_fn``): their share of the model FLOPs at the fp8/bf16 peak ratio."""
    if not plan.strategy.float8:
        return 1.0
    gpu = presets.gpu(plan.hardware.gpu)
    half = gpu.tflops("bf16")
    if not gpu.fp8_tflops or half <= 0:
        return 1.0
    linear_share = 6 * arch.L * arch.layer_weight_params / tok.model
    return 1 - linear_share + linear_share * half / gpu.fp8_tflops


def step_time(plan: Plan) -> StepTime:
    """The step time of a plan: `sft_step_time`, or for ``training.objective`` dpo/grpo/ppo
    `core.time.rl_time.rl_step_time` (generation, scoring and the update, the update's `sft_step_time`)."""
    if plan.training.objective_spec.post_training:
        from vramplan.core.time.rl_time import rl_step_time  # an SFT plan's step time never loads it

        return rl_step_time(plan, sft_step_time)
    return sft_step_time(plan)


def sft_step_time(plan: Plan) -> StepTime:
    """The step time of `plan` on one GPU, term by term (see the module docstring)."""
    # Long: the MFU-based model written as one derivation; the op-level model of the time issue (38) replaces it
    # with one module per mechanism.
    hw, t, s = plan.hardware, plan.training, plan.strategy
    arch = plan.model.arch()
    reg = REGIMES[t.regime]
    gpu = presets.gpu(hw.gpu)
    tp, pp, dp, zero = s.tensor_parallel, s.pipeline_parallel, plan.data_parallel, s.zero_stage
    full, ckpt, quant = t.method == "full", s.gradient_checkpointing, t.base_quantization
    roles = () if full else lora_roles(arch, t.lora_targets)
    b, seq, m = t.micro_batch_size, t.seq_len, t.grad_accum_steps
    T, share = b * seq, tp * pp

    tok = fl.token_flops(
        arch, seq, full=full, roles=roles, rank=t.lora_rank, checkpointing=ckpt, checkpoint_every=s.checkpoint_every
    )
    peak, peak_dtype = peak_flops(plan)
    dm = plan_default_mfu(plan, tok)
    mfu = t.mfu if t.mfu is not None else dm.value
    hbm = gpu.memory_bandwidth_gbs * 1e9 * EFF
    C = reg.act_bytes
    lk = links(gpu, hw.gpus_per_node, hw.nodes, tp, dp)._replace(host=pcie_link(plan))
    nvme = nvme_link(plan)

    # -- one micro-batch on one GPU: math and memory-bound kernels, forward and backward (with recomputation) ----
    # MFU counts model FLOPs (PaLM App. B): the step's math takes model FLOPs / (MFU x peak), recomputation
    # included in that time: it runs in the backward at the rate of the rest of the math (the default MFU already
    # carries model / hardware FLOPs: `plan_default_mfu`)
    math = tok.model * T / share / (peak * mfu) * float8_factor(plan, arch, tok)
    math_f = math * tok.forward / tok.hardware
    math_b = math - math_f
    math_r = math * tok.recompute / tok.hardware  # the recomputation's part of the backward
    weights_local = arch.matmul_weight_params / share
    per_pass = weights_local * C / hbm  # streaming every matmul weight once
    stream_f, stream_b = per_pass, (fl.weight_read_passes(full, ckpt) - 1) * per_pass
    recompute = ckpt == "full"
    mem_f = mem_b = 0.0  # serial memory-bound kernels: casts, eager attention, dequantization
    cast = eager = dequant = 0.0
    if reg.compute == "autocast" and quant == "none":
        # fp32 weights cast to 16 bit (read 4 B, write 2 B) each forward and recompute; FSDP (ZeRO-2/3) casts the
        # local shard before gathering it (MixedPrecision param_dtype)
        cast = weights_local * 6 / (dp if zero >= 2 else 1) / hbm
        mem_f, mem_b = mem_f + cast, mem_b + cast * recompute
        cast *= 1 + recompute
    if s.attention == "eager":  # 4 passes over the scores forward, the rest backward
        eager = fl.eager_attention_bytes(arch, b, seq, C, tp, ckpt) / pp / hbm
        eager_f = eager * 4 / (12 + 4 * recompute)
        mem_f, mem_b = mem_f + eager_f, mem_b + eager - eager_f
    q_layer = 0
    if quant != "none":  # dequantized once forward, once backward, once more in the recompute
        q_layer = sum(quantized_bytes(lin.d_in, lin.d_out, quant, t.double_quantization) for lin in arch.linears)
        dequant = fl.dequant_bytes_per_pass(arch, q_layer // tp, tp) / pp / hbm
        mem_f, mem_b = mem_f + dequant, mem_b + dequant * (1 + recompute)
        dequant *= 2 + recompute
    compress = 0.0
    if s.activation_compression == "int8":  # quantized when saved (forward), dequantized when used (backward)
        compress = _int8_traffic(plan, arch, tp) * arch.L / pp / hbm
        mem_f, mem_b = mem_f + compress / 2, mem_b + compress / 2
    fwd_mb = max(math_f, stream_f) + mem_f
    bwd_mb = max(math_b, stream_b) + mem_b
    core_mb = fwd_mb + bwd_mb
    math_mb, stream_mb = math_f + math_b, stream_f + stream_b
    stream_exposed = max(0.0, stream_f - math_f) + max(0.0, stream_b - math_b)

    # -- transfers during one micro-batch -----------------------------------------------------------------------
    tp_mb = pp_mb = 0.0
    if tp > 1:  # Megatron f/g: 2 all-reduces per layer forward, 2 backward, 2 more when the forward is recomputed
        tp_mb = (4 + 2 * (ckpt == "full")) * arch.L / pp * all_reduce_seconds(T * arch.h * C, tp, lk.tp)
    if pp > 1:  # the activations forward and their gradient backward, scattered over the TP ranks
        pp_mb = 2 * transfer_seconds(T * arch.h * C / tp, lk.pp)
    ep_mb = 0.0
    if arch.moe is not None and s.expert_parallel > 1:  # dispatch + combine, forward, backward and recompute
        sent = T * arch.moe.top_k * arch.h * C / tp  # each token's hidden state, once per routed expert
        ep_link = expert_link(gpu, hw.gpus_per_node, tp, s.expert_parallel)
        ep_mb = (
            (4 + 2 * (ckpt == "full")) * arch.moe.moe_layers / pp * all_to_all_seconds(sent, s.expert_parallel, ep_link)
        )

    grad_elem = reg.grad_bytes if full else (2 if reg.master_bytes else 4)
    trainable = (arch.total_params if full else arch.L * lora_params_per_layer(arch, roles, t.lora_rank)) / share
    grad_bytes = trainable * grad_elem
    elem16 = 4 if reg.compute == "fp32" else 2
    block_weights = arch.L * arch.layer_weight_params
    frozen_blocks = arch.L * q_layer if quant != "none" else block_weights * elem16
    gathered = (block_weights * elem16 if full else frozen_blocks) / share
    gathered += (arch.total_params - block_weights) / share * elem16
    if s.expert_parallel > 1:  # a rank gathers only its own experts (sharded over the dp / ep expert-data ranks)
        gathered -= arch.expert_params * (1 - 1 / s.expert_parallel) / share * elem16

    offload = s.offload_optimizer != "none"
    part_elems = trainable / (dp if zero >= 1 else 1)
    d2h = transfer_seconds(part_elems * grad_elem, lk.host) if offload else 0.0
    ag = rs = 0.0
    if zero == 3:
        ag = all_gather_seconds(gathered, dp, lk.dp)
    # each rank fetches its ZeRO-3 partition for every pass, even alone: over PCIe, and first from NVMe
    fetch, fetch_nvme = param_fetch_seconds(param_fetch_bytes(gathered, dp), s.offload_parameters, lk.host, nvme)
    if zero >= 2:
        rs = reduce_scatter_seconds(grad_bytes, dp, lk.dp)
    act_off = 0.0
    if s.activation_offload == "cpu" and ckpt in ("op", "full"):
        # torchtune training/_activation_offloading.py: each checkpoint's input goes to pinned host memory on a
        # side stream during the forward and comes back when its block's backward starts (overlapped; what
        # exceeds the pass is exposed)
        per_block = reg.resid_bytes * T * arch.h / (tp if s.sequence_parallel else 1)
        act_off = transfer_seconds(arch.L // s.checkpoint_every / pp * per_block, lk.host)
    fwd_pcie, bwd_pcie = fetch + act_off, fetch + act_off + (d2h if zero >= 2 else 0.0)
    fwd_comm, fwd_host, fwd_nvme = exposed_shares(fwd_mb, ag, fwd_pcie, fetch_nvme)
    bwd_comm, bwd_host, bwd_nvme = exposed_shares(bwd_mb, ag + rs, bwd_pcie, fetch_nvme)
    mb = core_mb + tp_mb + pp_mb + ep_mb + fwd_comm + fwd_host + fwd_nvme + bwd_comm + bwd_host + bwd_nvme
    overlapped = offload_overlap(fwd_mb, fwd_pcie, fetch_nvme).overlapped
    overlapped += offload_overlap(bwd_mb, bwd_pcie, fetch_nvme).overlapped

    # -- once per step ------------------------------------------------------------------------------------------
    reduce = 0.0
    if zero == 0:
        reduce = all_reduce_seconds(grad_bytes, dp, lk.dp)
    elif zero == 1:
        reduce = reduce_scatter_seconds(grad_bytes, dp, lk.dp)
    end_d2h = d2h if zero == 1 else 0.0
    end_comm, end_host = exposed_shares(bwd_mb, reduce, end_d2h)  # overlaps the last micro-batch's backward
    update_bytes = trainable * (elem16 if full else grad_elem)  # gathered in the compute dtype
    param_ag = all_gather_seconds(update_bytes, dp, lk.dp) if zero in (1, 2) else 0.0
    param_ag_exposed = max(0.0, param_ag - fwd_mb)  # during the first micro-batch's forward
    w16 = reg.weight_bytes if full else grad_elem
    if offload:  # DeepSpeed CPU Adam: fp32 master, fp32 gradient partition and states on the host
        opt_elem = fl.optimizer_bytes_per_element(t.optimizer, min(w16, 2), 4, 4, 4)
    else:
        state = reg.state_bytes if full else 4
        opt_elem = fl.optimizer_bytes_per_element(t.optimizer, w16, grad_elem, state, reg.master_bytes)
    host_rank_bps = HOST_MEMORY_GBS_PER_NODE * 1e9 / hw.gpus_per_node
    gpu_opt = cpu_opt = swap = 0.0
    cores = cpu_cores_per_rank(plan)
    if offload:  # the updated 16-bit parameters stream back to the GPU while CPU Adam runs
        h2d = transfer_seconds(part_elems * min(w16, 2), lk.host)
        cpu_opt = max(cpu_adam_seconds(part_elems, cores, opt_elem, host_rank_bps), h2d)
        if s.offload_optimizer == "nvme":  # fp32 master and states read in and written back each step
            swap = transfer_seconds(nvme_optimizer_bytes(part_elems, OPTIMIZERS[t.optimizer].dense_states), nvme)
    else:
        gpu_opt = part_elems * opt_elem / hbm

    bubble = (pp - 1) * mb
    step = m * mb + bubble + end_comm + end_host + param_ag_exposed + gpu_opt + cpu_opt + swap

    z3 = zero == 3
    per_mb_comm = m * (fwd_comm + bwd_comm)  # ZeRO-3 gathers + reduce-scatter, or ZeRO-2 reduce-scatter
    mem, com, off = "memory", "communication", "offload"
    candidates = (
        TimeTerm(name="compute", seconds=m * (math_mb - math_r), exposed=m * (math_mb - math_r), category="compute"),
        TimeTerm(name="recompute", seconds=m * math_r, exposed=m * math_r, category="compute"),
        TimeTerm(name="weight_streaming", seconds=m * stream_mb, exposed=m * stream_exposed, category=mem),
        TimeTerm(name="autocast_casts", seconds=m * cast, exposed=m * cast, category=mem),
        TimeTerm(name="eager_attention", seconds=m * eager, exposed=m * eager, category=mem),
        TimeTerm(name="dequantization", seconds=m * dequant, exposed=m * dequant, category=mem),
        TimeTerm(name="activation_compression", seconds=m * compress, exposed=m * compress, category=mem),
        TimeTerm(name="tp_comm", seconds=m * tp_mb, exposed=m * tp_mb, category=com),
        TimeTerm(name="pp_p2p", seconds=m * pp_mb, exposed=m * pp_mb, category=com),
        TimeTerm(name="ep_all_to_all", seconds=m * ep_mb, exposed=m * ep_mb, category=com),
        TimeTerm(
            name="zero3_comm",
            seconds=m * (2 * ag + rs) if z3 else 0.0,
            exposed=per_mb_comm if z3 else 0.0,
            category=com,
        ),
        TimeTerm(
            name="grad_reduce",
            seconds=0.0 if z3 else reduce + m * rs,
            exposed=0.0 if z3 else end_comm + per_mb_comm,
            category=com,
        ),
        TimeTerm(name="param_allgather", seconds=param_ag, exposed=param_ag_exposed, category=com),
        TimeTerm(
            name="offload_transfers",
            seconds=m * (2 * fetch + 2 * act_off + (d2h if zero >= 2 else 0.0)) + end_d2h,
            exposed=m * (fwd_host + bwd_host) + end_host,
            category=off,
        ),
        TimeTerm(
            name="nvme_reads",
            seconds=m * 2 * fetch_nvme,
            exposed=m * (fwd_nvme + bwd_nvme),
            category=off,
        ),
        TimeTerm(
            name="offload_overlap",
            seconds=m * overlapped + min(end_d2h, bwd_mb),
            exposed=0.0,
            category=off,
        ),
        TimeTerm(name="pipeline_bubble", seconds=bubble, exposed=bubble, category="pipeline bubble"),
        TimeTerm(name="optimizer_step", seconds=gpu_opt, exposed=gpu_opt, category=mem),
        TimeTerm(name="cpu_optimizer", seconds=cpu_opt, exposed=cpu_opt, category=off),
        TimeTerm(name="nvme_swap", seconds=swap, exposed=swap, category=off),
    )
    terms = tuple(c for c in candidates if c.name in ("compute", "weight_streaming") or c.seconds > 0)

    tokens_per_step = T * m * dp
    work = Work(
        T=T,
        m=m,
        share=share,
        tok=tok,
        peak=peak,
        peak_dtype=peak_dtype,
        mfu=mfu,
        mfu_default=None if t.mfu is not None else dm,
        hbm=hbm,
        act_bytes=C,
        weights_local=weights_local,
        links=lk,
        gathered_bytes=gathered,
        grad_bytes=grad_bytes,
        update_bytes=update_bytes,
        part_elems=part_elems,
        opt_bytes_per_elem=opt_elem,
        host_rank_bps=host_rank_bps,
        cpu_cores=cores,
        nvme=nvme,
        micro_batch_seconds=mb,
        once_seconds=step - (m + pp - 1) * mb,
    )
    price = hw.price_per_gpu_hour if hw.price_per_gpu_hour is not None else gpu.price_per_gpu_hour

    def explain() -> dict[str, tuple[str, str]]:
        return time_formulas(plan, work, terms)

    return StepTime(
        plan=plan,
        flops_per_step=tok.model * tokens_per_step,
        hardware_flops_per_step=tok.hardware * tokens_per_step,
        tokens_per_step=tokens_per_step,
        step_seconds=step,
        terms=terms,
        gpus=hw.total_gpus,
        peak_flops=peak,
        mfu_setting=mfu,
        price_per_gpu_hour=price,
        mfu_default=None if t.mfu is not None else dm,
        explainer=explain,
    )
