"""The formula and source behind each term of a step time (built on demand: what `explain` and the UI show)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.plan.helpers.units import fmt_seconds
from vramplan.core.time import flops as fl
from vramplan.core.time.assumptions import HOST_MEMORY_SRC, MFU_SOURCE
from vramplan.core.time.comm import ALL_TO_ALL_SRC, LINK_EFFICIENCY, LINK_EFFICIENCY_SRC, RING_SRC
from vramplan.core.time.offload import CPU_ADAM_PARAMS_PER_CORE_S, CPU_ADAM_SRC, NVME_SRC, PCIE_SRC

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan
    from vramplan.core.time.step_record import TimeTerm, Work

OVERLAP_SRC = (
    "overlapped with the backward of the same micro-batch: DDP/DeepSpeed bucketed reduction (Li et al. 2020, "
    "PyTorch Distributed §3.2.3; DeepSpeed overlap_comm); only what exceeds it is exposed"
)


def _g(x: float) -> str:
    """A large count or size: 6.7e9 -> '6.70e9'."""
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2e}".replace("e+0", "e").replace("e+", "e")


def _ms(x: float) -> str:
    return fmt_seconds(x) if x > 0 else "0"


def _mbs(count: int) -> str:
    return "1 micro-batch" if count == 1 else f"{count} micro-batches"


def time_formulas(plan: Plan, w: Work, terms: tuple[TimeTerm, ...]) -> dict[str, tuple[str, str]]:
    # Long: the MFU-based model's formula texts, a mirror of sft_step_time; the op-level model of the time issue
    # (38) builds each term's text where it computes the term, and this module goes.
    t, s = plan.training, plan.strategy
    tp, pp, dp = s.tensor_parallel, s.pipeline_parallel, plan.data_parallel
    m, T, tok = w.m, w.T, w.tok
    by = {x.name: x for x in terms}
    eff = f"{LINK_EFFICIENCY:.0%}"
    out: dict[str, tuple[str, str]] = {}
    step = (m + pp - 1) * w.micro_batch_seconds + w.once_seconds
    out["step"] = (
        f"({_mbs(m)} + {pp - 1} bubble) x {_ms(w.micro_batch_seconds)} + {_ms(w.once_seconds)} once per "
        f"step (gradient reduction, optimizer) = {_ms(step)}",
        "1F1B pipeline schedule (Narayanan et al. 2021 §2.2); what overlaps with compute: core/time/step.py docstring",
    )
    out["mfu"] = (
        f"model FLOPs {_g(tok.model)} per token x {w.T * m:,} tokens per rank / {w.share} (TP x PP) / "
        f"({_ms(step)} x {w.peak / 1e12:g} TFLOP/s)",
        "MFU as defined by PaLM (Chowdhery et al. 2022) App. B: model FLOPs, recomputation not counted",
    )

    method = "6N + 12·L·s·h_q" if t.method == "full" else "4N + 12·L·s·h_q + adapters (frozen: no dW)"
    src = fl.MATMUL_SRC + "; " + fl.ATTENTION_SRC
    if t.method != "full":
        src += "; " + fl.LORA_SRC
    how = w.mfu_default.text() if w.mfu_default is not None else f"training.mfu = {w.mfu:g}"
    f8 = " x Float8 share at the fp8 peak" if s.float8 else ""
    math_mfu = w.mfu * tok.hardware / tok.model  # the rate of all the math, recomputation included
    rate = f"/ {w.share} (TP x PP) / ({w.peak / 1e12:g} TFLOP/s {w.peak_dtype} x {math_mfu:.3g} math MFU){f8}"
    out["compute"] = (
        f"{_mbs(m)} x {T:,} tokens x {_g(tok.model)} model FLOP/token ({method}) {rate} = "
        f"{_ms(by['compute'].seconds)}; with the recomputation, MFU {w.mfu:.3g} = math MFU x model / hardware "
        f"FLOPs {tok.model / tok.hardware:.3f} (HFU = MFU x {tok.hardware / tok.model:.3f}). {how}",
        f"{src}; {MFU_SOURCE}",
    )
    if "recompute" in by:
        ckpt = s.gradient_checkpointing
        blocks = fl.recomputed_blocks(plan.model.num_hidden_layers, ckpt, s.checkpoint_every)
        what = {
            "full": "each block's forward: 2 x block linear weights + 4·s·h_q"
            + ("" if t.method == "full" else " + adapters, the frozen base included"),
            "selective": "the attention core: 4·s·h_q (QKᵀ and AV)",
            "op": "the matmuls the per-op policy does not save: every second one",
        }[ckpt]
        every = (
            f" (checkpoint_every = {s.checkpoint_every})" if s.checkpoint_every > 1 and ckpt in ("full", "op") else ""
        )
        out["recompute"] = (
            f"{_mbs(m)} x {T:,} tokens x {blocks} blocks{every} x {_g(tok.recompute // max(blocks, 1))} FLOP/token "
            f"({what}; the embedding and lm_head are not re-run) {rate} = {_ms(by['recompute'].seconds)}: "
            f"+{tok.recompute / tok.model:.1%} of the model FLOPs",
            fl.RECOMPUTE_SRC,
        )
    passes = fl.weight_read_passes(t.method == "full", s.gradient_checkpointing)
    out["weight_streaming"] = (
        f"{m} x {passes} passes x {_g(w.weights_local)} weights x {w.act_bytes} B / HBM {w.hbm / 1e9:.0f} GB/s = "
        f"{_ms(by['weight_streaming'].seconds)}; exposed only where it exceeds the math (small micro-batches)",
        "roofline (Williams et al. 2009): a matmul cannot run faster than its weights stream from HBM; HBM at "
        f"{eff} of peak ({LINK_EFFICIENCY_SRC})",
    )
    if "autocast_casts" in by:
        out["autocast_casts"] = (
            f"{m} x fp32 weights read (4 B) and written as bf16 (2 B) per forward = "
            f"{_ms(by['autocast_casts'].seconds)}",
            "torch.autocast casts each fp32 weight per forward (autocast_mode.cpp cached_cast; cached within "
            "one forward only); ZeRO-3 casts its shard",
        )
    if "eager_attention" in by:
        out["eager_attention"] = (
            f"{m} x 12 passes over b·a·s² scores x {w.act_bytes} B x {plan.model.num_hidden_layers} layers / "
            f"(TP x PP) / HBM = {_ms(by['eager_attention'].seconds)}",
            "Dao et al. 2022 (FlashAttention) §2.2, Theorem 2: standard attention reads and writes the s x s "
            "matrices in HBM; flash attention keeps them on chip",
        )
    if "dequantization" in by:
        out["dequantization"] = (
            f"{m} x (2 + recompute) dequantizations of the {t.base_quantization} base (read quantized, write "
            f"bf16) / HBM = {_ms(by['dequantization'].seconds)}",
            "bitsandbytes MatMul4Bit dequantizes in the forward and again in the backward (Dettmers et al. 2023, "
            "QLoRA §3)",
        )
    if "activation_compression" in by:
        what = "each block's checkpoint" if s.gradient_checkpointing == "full" else "each block's saved activations"
        out["activation_compression"] = (
            f"{m} x 2 x ({what} + its int8 copy) per layer x {plan.model.num_hidden_layers} layers / PP / HBM = "
            f"{_ms(by['activation_compression'].seconds)}",
            " ".join((fl.int8_compression_bytes.__doc__ or "").split()),
        )
    if "tp_comm" in by:
        n = 4 + 2 * (s.gradient_checkpointing == "full")
        out["tp_comm"] = (
            f"{m} x {n} all-reduces per layer x {plan.model.num_hidden_layers // pp} layers of {T:,} x h x "
            f"{w.act_bytes} B over TP {tp} on {w.links.tp.name} = {_ms(by['tp_comm'].seconds)}, not overlapped",
            "Megatron f/g operators (Shoeybi et al. 2019 §3): 2 all-reduces forward and 2 backward per layer; "
            "sequence parallelism swaps each for reduce-scatter + all-gather of the same volume (Korthikanti "
            f"et al. 2022 §4.2.2); {RING_SRC}",
        )
    if "pp_p2p" in by:
        out["pp_p2p"] = (
            f"{m} x 2 sends of {T:,} x h x {w.act_bytes} B / TP {tp} on {w.links.pp.name} = "
            f"{_ms(by['pp_p2p'].seconds)}",
            "Megatron pipeline p2p: activations forward, gradients backward, scattered over TP ranks "
            "(Narayanan et al. 2021 §4.1)",
        )
    if "ep_all_to_all" in by:
        moe = plan.model.arch().moe
        k = moe.top_k if moe else 0
        n_a2a = 4 + 2 * (s.gradient_checkpointing == "full")
        out["ep_all_to_all"] = (
            f"{m} x {n_a2a} all-to-alls per MoE layer of {T:,} x top-{k} x h x {w.act_bytes} B over EP "
            f"{s.expert_parallel} = {_ms(by['ep_all_to_all'].seconds)}, not overlapped",
            ALL_TO_ALL_SRC,
        )
    if "zero3_comm" in by:
        x = by["zero3_comm"]
        out["zero3_comm"] = (
            f"{m} x (2 all-gathers of {_g(w.gathered_bytes)} B + reduce-scatter of {_g(w.grad_bytes)} B) over DP "
            f"{dp} on {w.links.dp.name} = {_ms(x.seconds)}; exposed {_ms(x.exposed)}",
            "ZeRO (Rajbhandari et al. 2020) §7.2.2: stage 3 moves 3Ψ per step (1.5x data parallelism); gathers "
            "are prefetched during the forward, gathers + reduce-scatter overlap the backward; " + RING_SRC,
        )
    if "grad_reduce" in by:
        x = by["grad_reduce"]
        kind = {0: "all-reduce", 1: "reduce-scatter", 2: "reduce-scatter per micro-batch"}[s.zero_stage]
        out["grad_reduce"] = (
            f"{kind} of {_g(w.grad_bytes)} B of gradients over DP {dp} on {w.links.dp.name} = {_ms(x.seconds)}; "
            f"exposed {_ms(x.exposed)}",
            f"{OVERLAP_SRC}; {RING_SRC}",
        )
    if "param_allgather" in by:
        out["param_allgather"] = (
            f"all-gather of {_g(w.update_bytes)} B of updated parameters over DP {dp} on {w.links.dp.name} = "
            f"{_ms(by['param_allgather'].seconds)}; exposed {_ms(by['param_allgather'].exposed)}",
            "ZeRO §7.2.1: stages 1-2 reduce-scatter gradients and all-gather updated parameters (2Ψ, as data "
            "parallelism); assumed overlapped with the next forward (FSDP SHARD_GRAD_OP prefetch, Megatron "
            "--overlap-param-gather; DeepSpeed stage 1/2 gathers right after the step, which exposes it)",
        )
    out |= _offload_formulas(plan, w, by)
    if "pipeline_bubble" in by:
        out["pipeline_bubble"] = (
            f"(p - 1) x micro-batch time = {pp - 1} x {_ms(by['pipeline_bubble'].seconds / max(pp - 1, 1))}: "
            f"(p - 1)/m = {(pp - 1) / m:.0%} of the {m} micro-batches",
            "1F1B schedule (Narayanan et al. 2021 §2.2): bubble fraction (p - 1)/m",
        )
    if "optimizer_step" in by:
        out["optimizer_step"] = (
            f"{_g(w.part_elems)} elements x {w.opt_bytes_per_elem} B read + written / HBM = "
            f"{_ms(by['optimizer_step'].seconds)}",
            "the optimizer step is memory-bound: " + (fl.optimizer_bytes_per_element.__doc__ or "").split("\n")[0],
        )
    return out


def _offload_formulas(plan: Plan, w: Work, by: dict[str, TimeTerm]) -> dict[str, tuple[str, str]]:
    """The offload terms: PCIe and NVMe traffic, what of it runs under compute, CPU Adam, optimizer swapping."""
    out: dict[str, tuple[str, str]] = {}
    dp, m = plan.data_parallel, w.m
    per_pass = w.gathered_bytes / dp
    pcie, nvme = w.links.host, w.nvme
    if "offload_transfers" in by:
        x = by["offload_transfers"]
        fetch = (
            f"; {m} x 2 passes x {_g(per_pass)} B of parameters" if plan.strategy.offload_parameters != "none" else ""
        )
        out["offload_transfers"] = (
            f"gradient partitions to the host and parameters to the GPU over {pcie.name} at "
            f"{pcie.bytes_per_second / 1e9:.1f} GB/s{fetch} = {_ms(x.seconds)}; exposed {_ms(x.exposed)}",
            "ZeRO-Offload (Ren et al. 2021) §4.1: 16-bit gradients stream to the host during the backward; "
            f"ZeRO-Infinity §5-6: parameter partitions are prefetched for the forward and the backward; {PCIE_SRC}",
        )
    if "nvme_reads" in by:
        x = by["nvme_reads"]
        out["nvme_reads"] = (
            f"{m} x 2 passes x {_g(per_pass)} B of parameters / {nvme.bytes_per_second / 1e9:.2f} GB/s "
            f"({nvme.name}, this rank's share) = {_ms(x.seconds)}; exposed {_ms(x.exposed)}",
            "ZeRO-Infinity (Rajbhandari et al. 2021) §5-6: parameters read from NVMe into pinned host buffers, then "
            f"copied to the GPU, the stages pipelined with each other and the compute; {NVME_SRC}",
        )
    if "offload_overlap" in by:
        out["offload_overlap"] = (
            f"offload traffic running while the GPU computes, per pass min(longest transfer, the pass's compute) "
            f"= {_ms(by['offload_overlap'].seconds)} hidden; what exceeds a pass is exposed in the rows above",
            "DeepSpeed prefetches parameters and streams gradients during compute (ZeRO-Infinity §6.2 "
            "overlap-centric design; ZeRO-Offload §4.1); never more than the compute it hides behind",
        )
    if "cpu_optimizer" in by:
        rate = CPU_ADAM_PARAMS_PER_CORE_S * w.cpu_cores
        out["cpu_optimizer"] = (
            f"max({_g(w.part_elems)} elements / ({w.cpu_cores:g} cores x {CPU_ADAM_PARAMS_PER_CORE_S:.3g}/s) = "
            f"{_ms(w.part_elems / rate)}, x {w.opt_bytes_per_elem} B / {w.host_rank_bps / 1e9:.1f} GB/s of host "
            f"memory = {_ms(w.part_elems * w.opt_bytes_per_elem / w.host_rank_bps)}) = "
            f"{_ms(by['cpu_optimizer'].seconds)} (updated parameters copied back meanwhile)",
            f"{CPU_ADAM_SRC}; {HOST_MEMORY_SRC}",
        )
    if "nvme_swap" in by:
        out["nvme_swap"] = (
            f"fp32 master and optimizer states read in and written back: 2 x {_g(w.part_elems)} elements x "
            f"4 B x (1 + states) / {nvme.bytes_per_second / 1e9:.2f} GB/s = {_ms(by['nvme_swap'].seconds)}, "
            "not overlapped",
            f"ZeRO-Infinity (Rajbhandari et al. 2021) §5.1 optimizer swapping (pipeline_read/write off); {NVME_SRC}",
        )
    return out
