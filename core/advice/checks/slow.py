"""Slow training: where the step time model (`core.time.step`) says the step waits, and what would shorten it.

Each rule reads the exposed seconds of the terms it is about; a fix is the fastest measured change that still fits
(and does not eat into the headroom fragmentation needs), and is offered only when it saves at least 5%.
"""

from __future__ import annotations

from typing import Any

from vramplan.core.advice.checks.base import Context, Item, Rule, fastest, pct
from vramplan.core.advice.whatif import Effect
from vramplan.core.memory.record import FRAGMENTATION_RISK
from vramplan.core.plan.helpers.units import fmt_seconds
from vramplan.core.time.offload import HOST_MEMORY_GBS_PER_NODE

WORTH = 0.95  # a fix must make the time per token at least 5% shorter
OFFLOAD_SHARE = 0.20
COMM_SHARE = 0.25
STREAM_SHARE = 0.10
BUBBLE_SHARE = 0.20
QUANT_SHARE = 0.15
EAGER_SHARE = 0.05

FP32_SRC = (
    "GPU datasheets (presets/hardware): fp32 runs on CUDA cores, bf16/fp16 on tensor cores; PyTorch leaves TF32 "
    "matmuls off by default (torch.backends.cuda.matmul.allow_tf32); Micikevicius et al. 2018 (mixed precision)"
)
OFFLOAD_SRC = (
    "ZeRO-Offload (Ren et al. 2021) §4-5: gradients and parameters cross PCIe each step and the CPU runs Adam; "
    "ZeRO-Infinity (Rajbhandari et al. 2021) for NVMe; core/time/offload.py models both"
)
COMM_SRC = (
    "ZeRO (Rajbhandari et al. 2020) §7: stage 3 moves 1.5x the data of data parallelism, every micro-batch; "
    "Megatron-LM (Narayanan et al. 2021 §3.2, §5.4): keep tensor parallelism inside a node, its all-reduces are "
    "on the critical path; inter-node bandwidth per GPU from the hardware preset"
)
RECOMPUTE_SRC = (
    "Korthikanti et al. 2022 §5: full recomputation re-runs the forward (about +33% of the model FLOPs); "
    "selective recomputation of the attention core costs a few percent"
)
STREAM_SRC = (
    "each micro-batch pays its fixed costs again: the host issues every kernel (core/time/launch.py), ZeRO-3 "
    "gathers every weight, and a matmul of few tokens fills few tiles of the GPU (core/time/kernels.py: tile and "
    "wave quantization) and reads all its weights for little math (roofline, Williams et al. 2009)"
)
BUBBLE_SRC = "1F1B schedule (Narayanan et al. 2021 §2.2): the bubble is (p - 1)/m of the ideal time; keep m >= 4 x p"
QUANT_SRC = (
    "QLoRA (Dettmers et al. 2023 §3): 4-bit weights are dequantized in the forward and again in the backward; "
    "int8 activations are quantized when saved and dequantized in the backward (core/time/flops.py); 8-bit optimizers "
    "(Dettmers et al. 2022) update 1-byte states in one fused kernel, no slower than 32-bit Adam"
)
EAGER_SRC = "Dao et al. 2022 (FlashAttention) §2.2, Theorem 2: eager attention reads and writes s x s matrices in HBM"
DATA_SRC = (
    "PyTorch DataLoader docs (num_workers, pin_memory); an input pipeline slower than the step idles the GPU, "
    "which no GPU-side change fixes"
)


def _mbs(n: int) -> str:
    return "1 micro-batch" if n == 1 else f"{n} micro-batches"


def _share(c: Context, seconds: float) -> float:
    return seconds / c.st.step_seconds


def _safe(c: Context, e: Effect) -> bool:
    """A speed fix must fit and must not push a comfortable plan into the fragmentation zone."""
    return e.fits and (e.headroom_fraction >= FRAGMENTATION_RISK or e.memory_delta <= 0)


def _fix(c: Context, options: list[tuple[str, dict[str, Any]]]) -> tuple[Effect | None, tuple[Effect, ...]]:
    measured = [e for title, ch in options if (e := c.measure(title, ch)) is not None]
    fix = fastest(measured, lambda e: _safe(c, e), WORTH)
    return fix, tuple(sorted(measured, key=lambda e: e.relative_token_time))


def _item(c: Context, key: str, status: str, title: str, detail: str, src: str, fix: Effect | None = None,
          alternatives: tuple[Effect, ...] = ()) -> Item:  # fmt: skip
    if fix is not None:
        faster = pct(1 - fix.relative_token_time)
        detail += f" {fix.title[:1].upper()}{fix.title[1:]} fits and is {faster} faster per token."
    return Item(f"slow.{key}", "slow", status, title, detail, src, fix, alternatives)


def fp32_math(c: Context) -> Item:
    t, gpu = c.plan.training, c.gpu
    half = "bf16" if gpu.bf16 else "fp16"
    fast = gpu.tflops(half)
    if t.regime != "fp32" or fast < 4 * gpu.fp32_tflops:
        detail = f"{t.regime} on {gpu.name}: matmuls at {c.st.peak_flops / 1e12:g} TFLOP/s peak."
        return _item(c, "fp32_math", "ok", "Tensor-core precision", detail, FP32_SRC)
    scaling = {"training.loss_scaling": "dynamic"} if half == "fp16" and t.loss_scaling != "dynamic" else {}
    fix, alts = _fix(
        c,
        [
            (f"{half}-autocast", {"training.precision": f"{half}-autocast", **scaling}),
            (f"{half}-master", {"training.precision": f"{half}-master", **scaling}),
        ],
    )
    detail = (
        f"fp32 matmuls run at {gpu.fp32_tflops:g} TFLOP/s on {gpu.name}, {half} tensor cores at {fast:g} "
        f"(TF32 is off by default): compute takes {fmt_seconds(c.st.by_category()['compute'])} of the "
        f"{fmt_seconds(c.st.step_seconds)} step."
    )
    return _item(c, "fp32_math", "warn", "Tensor-core precision", detail, FP32_SRC, fix, alts)


def offload(c: Context) -> Item:
    s, gpu = c.plan.strategy, c.gpu
    if s.offload_optimizer == "none" and s.offload_parameters == "none":
        return _item(c, "offload", "ok", "Offload", "nothing is offloaded to the host or NVMe.", OFFLOAD_SRC)
    exposed = c.st.by_category()["offload"]
    share = _share(c, exposed)
    detail = (
        f"offload adds {fmt_seconds(exposed)} to the {fmt_seconds(c.st.step_seconds)} step ({pct(share)}): "
        f"{gpu.host_link} at {gpu.host_link_gbs:g} GB/s per direction, CPU Adam on "
        f"{HOST_MEMORY_GBS_PER_NODE:g} GB/s of host memory per node."
    )
    if share < OFFLOAD_SHARE:
        return _item(c, "offload", "ok", "Offload", detail, OFFLOAD_SRC)
    options: list[tuple[str, dict[str, Any]]] = [
        ("no offload", {"strategy.offload_optimizer": "none", "strategy.offload_parameters": "none"})
    ]
    if s.offload_parameters != "none":
        options.append(("no parameter offload", {"strategy.offload_parameters": "none"}))
        if s.offload_parameters == "nvme":
            options.append(("parameter offload to CPU", {"strategy.offload_parameters": "cpu"}))
    if s.offload_optimizer == "nvme":
        to_cpu = {"strategy.offload_optimizer": "cpu"}
        if s.offload_parameters == "nvme":
            to_cpu["strategy.offload_parameters"] = "cpu"
        options.append(("offload to CPU instead of NVMe", to_cpu))
    fix, alts = _fix(c, options)
    return _item(c, "offload", "warn", "Offload", detail, OFFLOAD_SRC, fix, alts)


def _spans(c: Context) -> list[str]:
    p, s, hw, gpu = c.plan, c.plan.strategy, c.plan.hardware, c.gpu
    if hw.nodes == 1:
        return []
    out = []
    net = f"{gpu.internode_gbs:g} GB/s per GPU"
    if s.tensor_parallel > hw.gpus_per_node:
        out.append(f"TP {s.tensor_parallel} spans nodes ({net})")
    if s.tensor_parallel * p.data_parallel > hw.gpus_per_node and p.data_parallel > 1:
        what = {3: "ZeRO-3 gathers and reduce-scatters", 2: "ZeRO-2 reduce-scatters"}.get(
            s.zero_stage, "the gradient reduction"
        )
        out.append(f"{what} cross nodes ({net})")
    return out


def interconnect(c: Context) -> Item:
    s, hw = c.plan.strategy, c.plan.hardware
    exposed = c.st.by_category()["communication"]
    share = _share(c, exposed)
    spans = _spans(c)
    where = "; ".join(spans) if spans else ("one node" if hw.nodes == 1 else "no group crosses nodes")
    detail = f"communication the compute cannot hide: {fmt_seconds(exposed)} of the step ({pct(share)}); {where}."
    if share < COMM_SHARE:
        return _item(c, "interconnect", "ok", "Interconnect", detail, COMM_SRC)
    options: list[tuple[str, dict[str, Any]]] = []
    if s.tensor_parallel > hw.gpus_per_node:
        inside = max(k for k in (1, 2, 4, 8, 16, 32) if k <= hw.gpus_per_node and s.tensor_parallel % k == 0)
        pp = s.pipeline_parallel * s.tensor_parallel // inside
        changes: dict[str, Any] = {"strategy.tensor_parallel": inside, "strategy.pipeline_parallel": pp}
        if s.zero_stage >= 2:
            changes["strategy.zero_stage"] = 1
        if inside == 1:
            changes["strategy.sequence_parallel"] = False
        options.append((f"TP {inside} inside a node, PP {pp}", changes))
    if s.offload_parameters == "none":
        for stage in range(s.zero_stage - 1, 0, -1):
            options.append((f"ZeRO-{stage}", {"strategy.zero_stage": stage}))
    options += _bigger_micro_batches(c)
    fix, alts = _fix(c, options)
    return _item(c, "interconnect", "warn", "Interconnect", detail, COMM_SRC, fix, alts)


def recomputation(c: Context) -> Item:
    ckpt = c.plan.strategy.gradient_checkpointing
    if ckpt == "none":
        return _item(c, "recomputation", "ok", "Recomputation", "no activation checkpointing: nothing is recomputed.",
                     RECOMPUTE_SRC)  # fmt: skip
    levels = ("none", "selective", "op", "full")  # least memory last
    lighter = levels[: levels.index(ckpt)]
    titles = {"none": "no checkpointing", "selective": "selective checkpointing", "op": "per-op checkpointing"}
    every = {} if c.plan.strategy.checkpoint_every == 1 else {"strategy.checkpoint_every": 1}
    options: list[tuple[str, dict[str, Any]]] = [
        (titles[lv], {"strategy.gradient_checkpointing": lv, **every}) for lv in lighter
    ]
    if ckpt in ("op", "full") and c.plan.strategy.checkpoint_every == 1:  # torchtitan selective_ac_option = "2"
        options.append(("checkpoint every 2nd block", {"strategy.checkpoint_every": 2}))
    fix, alts = _fix(c, options)
    none = next((e for e in alts if e.changes.get("strategy.gradient_checkpointing") == "none"), None)
    cost = f"{ckpt} recomputation costs {pct(1 / none.relative_step_time - 1)} of the step" if none else ""
    if fix is None:
        need = min(alts, key=lambda e: e.memory_total, default=None)
        why = f"; {need.title} would need {need.memory_total / 2**30:.1f} GiB" if need and not _safe(c, need) else ""
        return _item(c, "recomputation", "ok", "Recomputation", f"{cost}, and is needed{why}.", RECOMPUTE_SRC,
                     alternatives=alts)  # fmt: skip
    return _item(c, "recomputation", "warn", "Recomputation", f"{cost}.", RECOMPUTE_SRC, fix, alts)


def _bigger_micro_batches(c: Context) -> list[tuple[str, dict[str, Any]]]:
    """Larger micro-batches with less accumulation: the same global batch."""
    b, m = c.plan.training.micro_batch_size, c.plan.training.grad_accum_steps
    out = []
    for k in [k for k in range(2, m + 1) if m % k == 0][:6]:
        title = f"micro-batch {b} -> {b * k}, accumulation {m} -> {m // k}"
        out.append((title, {"training.micro_batch_size": b * k, "training.grad_accum_steps": m // k}))
    return out


def micro_batch(c: Context) -> Item:
    t = c.plan.training
    launches = c.st.seconds("host_launch")
    gathers = c.st.seconds("zero3_comm")
    share = _share(c, launches + gathers)
    tokens = t.micro_batch_size * t.seq_len
    waits = [f"{what} {fmt_seconds(x)} ({pct(_share(c, x))})" for what, x in
             (("the host issuing kernels", launches), ("ZeRO-3 gathers", gathers)) if x > 0]  # fmt: skip
    waits_text = f"the step waits on {' and '.join(waits)}" if waits else "the GPU's work hides its fixed costs"
    detail = (
        f"{_mbs(t.grad_accum_steps)} of {t.micro_batch_size} x {t.seq_len} = {tokens:,} tokens per step; for each, "
        f"{waits_text}."
    )
    fix, alts = _fix(c, _bigger_micro_batches(c))
    if fix is None and share < STREAM_SHARE:
        return _item(c, "micro_batch", "ok", "Micro-batch size", detail, STREAM_SRC, alternatives=alts)
    if fix is None:
        detail += " No larger micro-batch with the same global batch fits: a larger global batch would amortise it."
    return _item(c, "micro_batch", "warn", "Micro-batch size", detail, STREAM_SRC, fix, alts)


def pipeline_bubble(c: Context) -> Item:
    t, pp = c.plan.training, c.plan.strategy.pipeline_parallel
    if pp == 1:
        return _item(c, "pipeline_bubble", "ok", "Pipeline bubble", "no pipeline parallelism.", BUBBLE_SRC)
    bubble = c.st.seconds("pipeline_bubble")
    share = _share(c, bubble)
    m, b = t.grad_accum_steps, t.micro_batch_size
    detail = (
        f"{pp} stages, {_mbs(m)} per step: (p - 1)/m = {(pp - 1) / m:.0%}, the bubble takes "
        f"{fmt_seconds(bubble)} of the step ({pct(share)})."
    )
    if share < BUBBLE_SHARE:
        return _item(c, "pipeline_bubble", "ok", "Pipeline bubble", detail, BUBBLE_SRC)
    same = [
        (f"micro-batch {b} -> {b // k}, accumulation {m} -> {m * k}",
         {"training.micro_batch_size": b // k, "training.grad_accum_steps": m * k})
        for k in range(2, b + 1) if b % k == 0
    ]  # fmt: skip
    fix, alts = _fix(c, same)
    if fix is None and m < 4 * pp:
        more = 4 * pp
        fix, alts = _fix(c, [(f"accumulation {m} -> {more} (global batch x{more / m:g})",
                              {"training.grad_accum_steps": more})])  # fmt: skip
    return _item(c, "pipeline_bubble", "warn", "Pipeline bubble", detail, BUBBLE_SRC, fix, alts)


def quantization(c: Context) -> Item:
    t = c.plan.training
    deq, comp = c.st.seconds("dequantization"), c.st.seconds("activation_compression")
    parts = []
    if deq:
        parts.append(f"dequantizing the {t.base_quantization} base {fmt_seconds(deq)}")
    if comp:
        parts.append(f"packing int8 activations {fmt_seconds(comp)}")
    if t.optimizer == "adamw-8bit":
        parts.append(f"the 8-bit AdamW step {fmt_seconds(c.st.seconds('optimizer_step'))} (no slower than 32-bit)")
    if not parts:
        return _item(c, "quantization", "ok", "8-bit and 4-bit overheads", "nothing is quantized.", QUANT_SRC)
    share = _share(c, deq + comp)
    detail = f"{'; '.join(parts)}: {pct(share)} of the {fmt_seconds(c.st.step_seconds)} step."
    if share < QUANT_SHARE:
        return _item(c, "quantization", "ok", "8-bit and 4-bit overheads", detail, QUANT_SRC)
    options: list[tuple[str, dict[str, Any]]] = []
    if comp:
        options.append(("no int8 activations", {"strategy.activation_compression": "none"}))
    if deq:
        options.append(("LoRA on a 16-bit base", {"training.method": "lora", "training.quantization": "none"}))
    fix, alts = _fix(c, options)
    return _item(c, "quantization", "warn", "8-bit and 4-bit overheads", detail, QUANT_SRC, fix, alts)


def eager_attention(c: Context) -> Item:
    if c.plan.strategy.attention == "flash":
        return _item(c, "eager_attention", "ok", "Attention kernel", "fused (flash) attention.", EAGER_SRC)
    eager = c.st.seconds("attention")
    share = _share(c, eager)
    detail = f"eager attention's s x s scores and softmax: {fmt_seconds(eager)} of the step ({pct(share)})."
    if share < EAGER_SHARE:
        return _item(c, "eager_attention", "ok", "Attention kernel", detail, EAGER_SRC)
    fix, alts = _fix(c, [("flash attention", {"strategy.attention": "flash"})])
    return _item(c, "eager_attention", "warn", "Attention kernel", detail, EAGER_SRC, fix, alts)


def data_loading(c: Context) -> Item:
    t, st = c.plan.training, c.st
    per_gpu = st.tokens_per_second_per_gpu / t.seq_len
    detail = (
        f"at {st.tokens_per_second:,.0f} tokens/s the input pipeline must deliver "
        f"{st.tokens_per_second / t.seq_len:,.1f} sequences of {t.seq_len:,} tokens per second ({per_gpu:,.2f} per "
        "GPU): pre-tokenize, use DataLoader workers and pinned memory, and check the GPU never idles between steps."
    )
    return Item("slow.data_loading", "slow", "manual", "Data loading keeps up", detail, DATA_SRC,
                ticked="slow.data_loading" in c.plan.checklist.ticked)  # fmt: skip


RULES: tuple[Rule, ...] = (
    fp32_math,
    offload,
    interconnect,
    recomputation,
    micro_batch,
    pipeline_bubble,
    quantization,
    eager_attention,
    data_loading,
)
