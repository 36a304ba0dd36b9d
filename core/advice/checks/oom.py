"""Out of memory: does the plan fit with room to spare, and if not, which memory dominates and what frees it.

Every remedy is measured by re-estimating the changed plan (`Context.remedies`): the fix an item carries is the
fastest change that solves the problem (fits, or leaves enough headroom), else the one that frees the most.
"""

from __future__ import annotations

from vramplan.core.advice.checks.base import Context, Item, Rule, gib, pct
from vramplan.core.advice.moves import TARGET_KINDS
from vramplan.core.advice.whatif import Effect
from vramplan.core.memory.record import FRAGMENTATION_RISK
from vramplan.core.plan.describe import sharding_label
from vramplan.core.plan.helpers.units import fmt_count

FRAGMENTATION_SRC = (
    "PyTorch's caching allocator keeps freed blocks reserved and splits them (c10/cuda/CUDACachingAllocator.cpp); "
    "GMLake (Guo et al., ASPLOS 2024) measured about 15% fragmentation on LLM training; PyTorch docs, CUDA "
    "semantics, 'Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF': expandable_segments:True lets segments "
    "grow instead of fragmenting"
    "; the estimate's error on the nearest published GPU runs: vramplan.core.memory.accuracy "
    "(tests/data/published, bench/data/accuracy.py)"
)
SIGNIFICANT = 0.25  # a kind of memory this large a share of the peak is worth acting on
DOMINANCE_SRC = {
    "activations": (
        "Korthikanti et al. 2022 §4-5 (activation memory per layer; selective and full recomputation); "
        "Dao et al. 2022 (FlashAttention: no s x s scores saved); Chen et al. 2016 (checkpointing)"
    ),
    "logits": (
        "the loss keeps b·s x vocabulary fp32 log-probabilities and, at the start of backward, two more fp32 "
        "gradients (PyTorch cross_entropy = log_softmax + nll_loss); chunked/fused losses avoid them: Liger Kernel "
        "(Hsu et al. 2024) FusedLinearCrossEntropy, Cut Cross-Entropy (Wijmans et al. 2024)"
    ),
    "optimizer_states": (
        "ZeRO (Rajbhandari et al. 2020) §5: Adam keeps 12 B per parameter in mixed precision (fp32 master, m, v), "
        "sharded by stage 1; ZeRO-Offload (Ren et al. 2021); 8-bit optimizers (Dettmers et al. 2022)"
    ),
    "weights": (
        "ZeRO §5: stage 2 shards gradients, stage 3 parameters; Megatron-LM tensor parallelism (Shoeybi et al. "
        "2019) and pipeline parallelism (Narayanan et al. 2021) split the weights"
    ),
}
TITLES = {
    "activations": "Activations",
    "logits": "Logits and loss",
    "optimizer_states": "Optimizer states",
    "weights": "Weights and gradients",
}


def _best(c: Context, effects: tuple[Effect, ...]) -> Effect | None:
    """The fastest remedy that solves the problem, else the one that frees the most."""
    solving = [e for e in effects if c.goal(e)]
    if solving:
        return min(solving, key=lambda e: (e.relative_step_time, e.memory_total))
    return min(effects, key=lambda e: (e.memory_total, e.relative_step_time), default=None)


def capacity(c: Context) -> Item:
    """Fits with the safety margin free (`core.advice.margin`, the fit advisor's): fails over capacity, warns when the
    plan leaves less than the margin free, saying what it may need."""
    est, o, margin = c.est, c.plan.overhead, c.margin
    total, cap = est.total, est.gpu_capacity
    where = f"the peak ({est.peak.moment})"
    fix: Effect | None = None
    alternatives: tuple[Effect, ...] = ()
    if not est.fits:
        status = "fail"
        detail = f"{where} needs {gib(total)} of {gib(cap)} per GPU: over by {gib(-est.headroom)}."
    elif not margin.keeps(est):
        status = "warn"
        detail = (
            f"{gib(total)} of {gib(cap)} per GPU leaves {gib(est.headroom)} ({pct(est.headroom_fraction)}) free, "
            f"less than the safety margin, {margin.text()}: it may need up to {gib(margin.need_bytes(est))}."
        )
        if est.headroom_fraction < FRAGMENTATION_RISK:
            reserve = (
                f"{o.allocator_reserve_percent:g}% of the tensor peak"
                if o.allocator_reserve_percent is not None
                else f"{gib(est.reserved - est.allocated)} for the caching allocator's rounding and segments"
            )
            detail += (
                f" The estimate reserves {reserve}: set PYTORCH_CUDA_ALLOC_CONF to expandable_segments:True, or free"
                " memory."  # not VAR=value: 44 columns, longer than a Checks pane line at 80x24, cut mid-word
            )
    else:
        status = "ok"
        detail = (
            f"{gib(total)} of {gib(cap)} per GPU at {where}; {gib(est.headroom)} ({pct(est.headroom_fraction)}) free, "
            f"may need up to {gib(margin.need_bytes(est))} (margin {margin.fraction:.0%})."
        )
    if status != "ok":
        alternatives = tuple(e for e in c.remedies() if c.runs(e))
        fix = c.fastest_fix() or _best(c, alternatives)
        if fix is not None and c.goal(fix):
            detail += f" Fastest change that solves it: {fix.title}."
        elif fix is not None:
            detail += " No single change solves it: see `vramplan fit` for combinations."
    return Item("oom.capacity", "oom", status, "Fits in GPU memory", detail, FRAGMENTATION_SRC, fix, alternatives)


def _what(c: Context, target: str) -> str:
    p, est = c.plan, c.est
    t, s = p.training, p.strategy
    if target == "activations":
        n, seq = c.batch  # DPO/GRPO/PPO: the update's sequences, not training.seq_len
        return f"micro-batch {n} x {seq} tokens, checkpointing {s.gradient_checkpointing}, {s.attention} attention" + (
            ", int8" if s.activation_compression == "int8" else ""
        )
    if target == "logits":
        tokens = t.micro_batch_size * t.seq_len
        if est.rl is not None:
            return f"TRL's fused lm-head: one [4096, 32768] tile per forward, no [b, s, V] logits ({c.arch.V:,} vocab)"
        if s.fused_cross_entropy:
            return f"fused cross-entropy over a vocabulary of {c.arch.V:,}"
        return f"{tokens:,} tokens x a vocabulary of {c.arch.V:,} in fp32"
    if target == "optimizer_states":
        how = sharding_label(p)  # ZeRO-N, or FSDP's words for a plan FSDP shards
        shard = f", sharded over {p.data_parallel} ranks: {how}" if s.zero_stage >= 1 else ""
        if s.offload_optimizer != "none":
            where = "host RAM" if s.offload_optimizer == "cpu" else "NVMe"
            held = est.cpu_per_node if s.offload_optimizer == "cpu" else est.nvme_per_node
            shard += f", offloaded to {where} ({gib(held)} per node)"
        return f"{t.optimizer} for {fmt_count(est.params_trainable)} trainable parameters{shard}"
    shard = f", sharded over {p.data_parallel} ranks" if s.zero_stage == 3 else ""
    split = f", split over TP {s.tensor_parallel} x PP {s.pipeline_parallel}" if p.hardware.total_gpus > 1 else ""
    return f"{fmt_count(est.params_total)} parameters in {t.regime}{shard}{split}"


def dominance(target: str) -> Rule:
    """The rule for one kind of memory: a warning when it is a large share of a peak that is too high."""

    def rule(c: Context) -> Item:
        part = c.share(TARGET_KINDS[target])
        share = part / c.est.total
        largest = max(TARGET_KINDS, key=lambda k: c.share(TARGET_KINDS[k]))
        most = sum(c.est.largest.get(k, 0) for k in TARGET_KINDS[target] if k in c.est.largest)
        if part:
            detail = f"{gib(part)} of the {gib(c.est.total)} peak ({pct(share)}): {_what(c, target)}."
        else:
            detail = f"none at the peak (the {c.est.peak_phase} phase), at most {gib(most)}: {_what(c, target)}."
        fix: Effect | None = None
        alternatives: tuple[Effect, ...] = ()
        status = "ok"
        if c.pressure and part > 0 and (share >= SIGNIFICANT or largest == target):
            status = "warn"
            alternatives = c.remedies(target)
            fix = _best(c, alternatives)
            detail = ("The largest part of the peak: " if largest == target else "") + detail
            if not alternatives:
                detail += " Nothing vramplan can change here lowers it."
            elif fix is not None and not c.goal(fix):
                detail += " No single change here solves it: see `vramplan fit` for combinations."
        return Item(f"oom.{target}", "oom", status, TITLES[target], detail, DOMINANCE_SRC[target], fix, alternatives)

    return rule


def other_processes(c: Context) -> Item:
    return Item(
        "oom.other_processes",
        "oom",
        "manual",
        "Nothing else on the GPU",
        f"vramplan predicts {gib(c.est.total)} for one training process per GPU. Another process (a second job, an "
        "inference server, a notebook kernel), evaluation or generation during training, or a reference model "
        "(DPO, distillation) adds to it: check nvidia-smi before launching.",
        "the estimate models one training step of one process per GPU (README, What the estimate models)",
        ticked="oom.other_processes" in c.plan.checklist.ticked,
    )


def host_memory(c: Context) -> Item:
    """What the node's ranks offload against the node's host memory and NVMe (`core.plan.node`): over is a
    failure (the job dies in the optimizer's allocation or the OOM killer ends it); less than `HOST_SPARE` left is
    a warning (the OS, page cache, data-loader workers and pinned staging buffers live there too)."""
    est = c.est
    parts, status = [], "ok"
    for label, need, limit in (
        ("host memory", est.cpu_per_node, est.node.host),
        ("NVMe", est.nvme_per_node, est.node.nvme),
    ):
        if not need and label == "NVMe":
            continue
        free = limit.bytes - need
        text = f"{label}: {gib(need)} of {gib(limit.bytes)} per node ({limit.source})"
        if free < 0:
            status = "fail"
            text += f", over by {gib(-free)}"
        elif need and free < HOST_SPARE * limit.bytes:
            status = "warn" if status == "ok" else status
            text += f", {gib(free)} left: less than {pct(HOST_SPARE)} for the OS and data loading"
        parts.append(text)
    detail = "; ".join(parts) + "."
    if not est.cpu_per_node and not est.nvme_per_node:
        detail = (
            f"nothing is offloaded; the node has {gib(est.node.host.bytes)} of host memory ({est.node.host.source})."
        )
    elif status == "fail":
        detail += (
            " Offload less (`vramplan fit` proposes only plans within these limits), spread it over more nodes, "
            "or set hardware.host_memory_gib / hardware.nvme_gib to your node's."
        )
    return Item("oom.host_memory", "oom", status, "Fits in host memory", detail, HOST_SRC)


HOST_SPARE = 0.10  # host memory to leave free per node
HOST_SRC = (
    "DeepSpeed ZeRO-Offload keeps the fp32 master weights, gradients and optimizer states of each rank's partition "
    "in pinned host memory, ZeRO-Infinity on NVMe (Ren et al. 2021, Rajbhandari et al. 2021); the node's figures: "
    "the plan's key, this machine's /proc/meminfo, or the GPU preset's typical node (core/plan/node.py)"
)

RULES: tuple[Rule, ...] = (capacity, host_memory, *(dominance(k) for k in TARGET_KINDS), other_processes)
