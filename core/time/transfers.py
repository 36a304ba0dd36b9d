"""The step's transfers, each a term: collectives between GPUs (`core.time.comm`) and offload to the host and NVMe
(`core.time.offload`), with what runs under the micro-batch's compute and what the step waits for.

Per micro-batch: tensor-parallel all-reduces (Megatron f/g operators: 2 forward and 2 backward per layer, 2 more when
full checkpointing re-runs the forward; Shoeybi et al. 2019 §3; not overlapped), pipeline sends of the activations
and their gradients (Narayanan et al. 2021 §4.1), expert all-to-alls (dispatch and combine, forward and backward:
DeepSpeed-MoE, Rajbhandari et al. 2022 §5), ZeRO-3's all-gathers and reduce-scatter (prefetched under the passes'
compute), ZeRO-2's reduce-scatter, offloaded parameters' fetches, gradients streamed to the host, activations
offloaded in the forward and brought back in the backward. Once per step: the gradient all-reduce (DDP) or
reduce-scatter (ZeRO-1) under the last backward, ZeRO-1/2's all-gather of the updated parameters under the next
forward, CPU Adam and NVMe swapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.memory.activations.context import plan_ctx
from vramplan.core.memory.activations.stage import plan_layout, stage_acts
from vramplan.core.memory.states.stages import stages
from vramplan.core.plan.catalogue.specs import GpuSpec
from vramplan.core.plan.schema.precision import OPTIMIZERS
from vramplan.core.time import flops as fl
from vramplan.core.time.comm import (
    ALL_TO_ALL_SRC,
    RING_SRC,
    Link,
    Links,
    all_gather_seconds,
    all_reduce_seconds,
    all_to_all_seconds,
    expert_link,
    reduce_scatter_seconds,
    transfer_seconds,
)
from vramplan.core.time.offload import (
    CPU_ADAM_SRC,
    NVME_SRC,
    PCIE_SRC,
    cpu_adam_seconds,
    exposed_shares,
    nvme_optimizer_bytes,
    offload_overlap,
    param_fetch_bytes,
    param_fetch_seconds,
)
from vramplan.core.time.record import TimeTerm, time_term

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

ACTIVATION_OFFLOAD_SRC = (
    "torchtune/trl activation_offloading.py OffloadActivations(use_streams=True): each saved tensor is copied to "
    "pinned host memory on a side stream during the forward and prefetched back during the backward, 'the "
    "communications get overlapped with the computation'; what exceeds the pass's compute is exposed; "
)


class Transfers(NamedTuple):
    """What the transfers read of a plan and of its micro-batch."""

    plan: Plan
    gpu: GpuSpec
    links: Links
    nvme: Link
    gathered: float  # ZeRO-3: parameter bytes gathered per pass
    grad_bytes: float  # unsharded gradient bytes per TP/PP rank
    trainable: float  # trainable elements per TP/PP rank
    grad_elem: int
    compute_elem: int
    window: float  # one micro-batch's compute (its forward about a third, its backward the rest)
    layers: int  # blocks on the stage


def _split(window: float) -> tuple[float, float]:
    """A micro-batch's forward and backward windows: the backward does about twice the forward's work (Kaplan et al.
    2020 §2.1)."""
    return window / 3, 2 * window / 3


def communication_terms(x: Transfers, m: int) -> tuple[list[TimeTerm], float, float]:
    """The collectives: (terms, exposed seconds per micro-batch, seconds a backward's collectives take).
    The last is what offloaded gradients wait for: DeepSpeed copies a partition to the host once it is reduced
    (stage_1_and_2.py ``async_inplace_copy_grad_to_fp32_buffer_from_gpu`` after the bucket's reduce)."""
    p, lk = x.plan, x.links
    t, s = p.training, p.strategy
    tp, pp, dp, zero = s.tensor_parallel, s.pipeline_parallel, p.data_parallel, s.zero_stage
    arch = p.model.arch()
    T = t.micro_batch_size * t.seq_len
    C = x.compute_elem
    full_ck = s.gradient_checkpointing == "full"
    fwd_w, bwd_w = _split(x.window)
    out: list[TimeTerm] = []
    per_mb = 0.0
    if tp > 1:
        n = 4 + 2 * full_ck
        sec = n * x.layers * all_reduce_seconds(T * arch.h * C, tp, lk.tp)
        out.append(time_term("tp_comm", m * sec, "communication",
                             "{} x {} all-reduces per layer x {} layers of {:,} x h x {} B over TP {} on {},"
                             " not overlapped",
                             m, n, x.layers, T, C, tp, lk.tp.name, source="Megatron f/g operators (Shoeybi et al. 2019 "
                             "§3); sequence parallelism swaps each for reduce-scatter + all-gather of the same volume "
                             "(Korthikanti et al. 2022 §4.2.2); " + RING_SRC))  # fmt: skip
        per_mb += sec
    if pp > 1:
        sec = 2 * transfer_seconds(T * arch.h * C / tp, lk.pp)
        out.append(time_term("pp_p2p", m * sec, "communication", "{} x 2 sends of {:,} x h x {} B / TP {} on {}",
                             m, T, C, tp, lk.pp.name, source="Megatron pipeline p2p: activations forward, gradients "
                             "backward, scattered over TP ranks (Narayanan et al. 2021 §4.1)"))  # fmt: skip
        per_mb += sec
    if arch.moe is not None and s.expert_parallel > 1:
        sent = T * arch.moe.top_k * arch.h * C / tp
        n = 4 + 2 * full_ck
        link = expert_link(x.gpu, p.hardware.gpus_per_node, tp, s.expert_parallel)
        sec = n * arch.moe.moe_layers / pp * all_to_all_seconds(sent, s.expert_parallel, link)
        out.append(time_term("ep_all_to_all", m * sec, "communication",
                             "{} x {} all-to-alls per MoE layer of {:,} x top-{} x h x {} B over EP {}, not overlapped",
                             m, n, T, arch.moe.top_k, C, s.expert_parallel, source=ALL_TO_ALL_SRC))  # fmt: skip
        per_mb += sec
    ag = all_gather_seconds(x.gathered, dp, lk.dp) if zero == 3 else 0.0
    rs = reduce_scatter_seconds(x.grad_bytes, dp, lk.dp) if zero >= 2 else 0.0
    fwd_exposed = max(0.0, ag - fwd_w)
    bwd_exposed = max(0.0, ag + rs - bwd_w)
    if zero == 3:
        out.append(time_term("zero3_comm", m * (2 * ag + rs), "communication",
                             "{} x (2 all-gathers of {:.3g} B + reduce-scatter of {:.3g} B) over DP {} on {}",
                             m, x.gathered, x.grad_bytes, dp, lk.dp.name, exposed=m * (fwd_exposed + bwd_exposed),
                             source="ZeRO (Rajbhandari et al. 2020) §7.2.2: stage 3 moves 3Ψ per step; gathers "
                             "are prefetched during the forward, gathers + reduce-scatter overlap the backward; "
                             + RING_SRC))  # fmt: skip
    per_mb += fwd_exposed + bwd_exposed
    reduce = 0.0
    if zero == 0:
        reduce = all_reduce_seconds(x.grad_bytes, dp, lk.dp)
    elif zero == 1:
        reduce = reduce_scatter_seconds(x.grad_bytes, dp, lk.dp)
    once = max(0.0, reduce - bwd_w)
    if reduce or (rs and zero == 2):
        kind = {0: "all-reduce", 1: "reduce-scatter", 2: "reduce-scatter per micro-batch"}[zero]
        out.append(time_term("grad_reduce", reduce + m * rs, "communication",
                             "{} of {:.3g} B of gradients over DP {} on {}",
                             kind, x.grad_bytes, dp, lk.dp.name, exposed=once + (m * bwd_exposed if zero == 2 else 0),
                             source="overlapped with the backward of the same micro-batch: DDP/DeepSpeed bucketed "
                             "reduction (Li et al. 2020 §3.2.3; DeepSpeed overlap_comm); " + RING_SRC))  # fmt: skip
    if zero in (1, 2):
        update = x.trainable * (x.compute_elem if t.method == "full" else x.grad_elem)
        param_ag = all_gather_seconds(update, dp, lk.dp)
        exposed = max(0.0, param_ag - fwd_w)
        out.append(time_term("param_allgather", param_ag, "communication",
                             "all-gather of {:.3g} B of updated parameters over DP {} on {}", update, dp, lk.dp.name,
                             exposed=exposed, source="ZeRO §7.2.1: stages 1-2 all-gather the updated parameters "
                             "(overlapped with the next forward: FSDP SHARD_GRAD_OP prefetch, Megatron "
                             "--overlap-param-gather)"))  # fmt: skip
    return out, per_mb, reduce if zero <= 1 else ag + rs  # ZeRO-3: the backward's gathers come first


def offloads(plan: Plan) -> bool:
    """Whether anything of `plan` crosses the host link or the NVMe drive (else `offload_terms` has no term)."""
    s = plan.strategy
    return s.offload_optimizer != "none" or s.offload_parameters != "none" or s.activation_offload != "none"


def offload_terms(
    x: Transfers, m: int, cores: float, host_gbs_node: float, reduce_s: float = 0.0
) -> tuple[list[TimeTerm], float]:
    """Host and NVMe transfers, CPU Adam and NVMe swapping: (terms, exposed seconds per micro-batch). Offloaded
    gradients leave after their reduction (``reduce_s`` of the backward's window, `communication_terms`)."""
    p = x.plan
    t, s = p.training, p.strategy
    dp, zero = p.data_parallel, s.zero_stage
    fwd_w, bwd_w = _split(x.window)
    after_reduce = max(0.0, bwd_w - reduce_s) if s.offload_optimizer != "none" else bwd_w
    host = x.links.host
    out: list[TimeTerm] = []
    offload = s.offload_optimizer != "none"
    part = x.trainable / (dp if zero >= 1 else 1)
    d2h = transfer_seconds(part * x.grad_elem, host) if offload else 0.0
    fetch, fetch_nvme = param_fetch_seconds(param_fetch_bytes(x.gathered, dp), s.offload_parameters, host, x.nvme)
    act = activation_offload_bytes(p)
    act_s = transfer_seconds(act, host)
    fwd_pcie, bwd_pcie = fetch + act_s, fetch + act_s + (d2h if zero >= 2 else 0.0)
    fwd_host, fwd_nvme = exposed_shares(fwd_w, fwd_pcie, fetch_nvme)
    bwd_host, bwd_nvme = exposed_shares(after_reduce, bwd_pcie, fetch_nvme)
    per_mb = fwd_host + fwd_nvme + bwd_host + bwd_nvme
    end_d2h = d2h if zero == 1 else 0.0
    end_host = max(0.0, end_d2h - after_reduce)
    if act:
        out.append(time_term("activation_offload", m * 2 * act_s, "offload",
                             "{} x 2 x {:.3g} B of saved activations over {} at {:.1f} GB/s (out in the forward, back "
                             "in the backward)", m, act, host.name, host.bytes_per_second / 1e9,
                             exposed=m * (max(0.0, act_s - fwd_w) + max(0.0, act_s - after_reduce)),
                             source=ACTIVATION_OFFLOAD_SRC + PCIE_SRC))  # fmt: skip
    if fetch or d2h:
        busy = m * (2 * fetch + (d2h if zero >= 2 else 0.0)) + end_d2h
        acts = m * (max(0.0, act_s - fwd_w) + max(0.0, act_s - after_reduce))
        exposed = m * (fwd_host + bwd_host) + end_host - acts
        out.append(time_term("offload_transfers", busy, "offload",
                             "gradient partitions to the host and parameters to the GPU over {} at {:.1f} GB/s",
                             host.name, host.bytes_per_second / 1e9, exposed=max(0.0, exposed),
                             source="ZeRO-Offload (Ren et al. 2021) §4.1; ZeRO-Infinity §5-6: parameter partitions "
                             "prefetched for the forward and the backward; " + PCIE_SRC))  # fmt: skip
    if fetch_nvme:
        out.append(time_term("nvme_reads", m * 2 * fetch_nvme, "offload",
                             "{} x 2 passes of parameters from NVMe at {:.2f} GB/s ({})", m,
                             x.nvme.bytes_per_second / 1e9, x.nvme.name, exposed=m * (fwd_nvme + bwd_nvme),
                             source="ZeRO-Infinity (Rajbhandari et al. 2021) §5-6; " + NVME_SRC))  # fmt: skip
    overlapped = (
        offload_overlap(fwd_w, fwd_pcie, fetch_nvme).overlapped
        + offload_overlap(after_reduce, bwd_pcie, fetch_nvme).overlapped
    )
    if overlapped and (fetch or d2h or act):
        out.append(time_term("offload_overlap", m * overlapped, "offload",
                             "offload traffic running while the GPU computes: {:.3g} s hidden per micro-batch",
                             overlapped, exposed=0.0, source="DeepSpeed prefetches parameters and streams gradients "
                             "during compute (ZeRO-Infinity §6.2; ZeRO-Offload §4.1); never more than the compute it "
                             "hides behind"))  # fmt: skip
    if offload:
        w16 = 2 if t.method != "full" else min(x.compute_elem, 2)
        per = fl.optimizer_bytes_per_element(t.optimizer, w16, 4, 4, 4)
        h2d = transfer_seconds(part * w16, host)
        host_bps = host_gbs_node * 1e9 / p.hardware.gpus_per_node
        cpu = max(cpu_adam_seconds(part, cores, per, host_bps), h2d)
        out.append(time_term("cpu_optimizer", cpu, "offload",
                             "CPU Adam over {:.3g} elements on {:g} cores, {} B per element over {:.1f} GB/s of host "
                             "memory (the updated parameters copied back meanwhile)", part, cores, per, host_bps / 1e9,
                             source=CPU_ADAM_SRC))  # fmt: skip
        if s.offload_optimizer == "nvme":
            swap = transfer_seconds(nvme_optimizer_bytes(part, OPTIMIZERS[t.optimizer].dense_states), x.nvme)
            out.append(time_term("nvme_swap", swap, "offload", "fp32 master and states read in and written back: "
                                 "{:.3g} elements at {:.2f} GB/s, not overlapped", part, x.nvme.bytes_per_second / 1e9,
                                 source="ZeRO-Infinity §5.1 optimizer swapping; " + NVME_SRC))  # fmt: skip
    return out, per_mb


def activation_offload_bytes(plan: Plan) -> float:
    """The saved activations one micro-batch offloads to the host (as the memory estimate counts them:
    `core.memory.activations.stage` ``offloaded``; 0 without activation offloading)."""
    if plan.strategy.activation_offload != "cpu":
        return 0.0
    ctx, lay = plan_ctx(plan), plan_layout(plan)
    stage = stages(ctx.arch.L, plan.strategy.pipeline_parallel, plan.training.grad_accum_steps)[0]
    return float(stage_acts(ctx, stage, lay).offloaded)
