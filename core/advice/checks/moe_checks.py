"""Checklist rules for mixture-of-experts models (issue 14): how the experts run, router precision, the
load-balancing loss, expert imbalance (by hand: it depends on the data) and expert parallelism across nodes. They
apply to MoE models only; for a dense model each returns None and the checklist leaves it out."""

from __future__ import annotations

from collections.abc import Callable

from vramplan.core.advice.checks.base import Context, Item, pct
from vramplan.core.plan.helpers.units import fmt_seconds
from vramplan.core.plan.schema.precision import REGIMES

MoeRule = Callable[[Context], Item | None]

ROUTER_SRC = (
    "Switch Transformer (Fedus et al. 2021) §2.4: selective precision, the router in fp32; transformers' routers "
    "take softmax(logits.float()) (Mixtral, Qwen) and keep DeepSeek-V3's router weight fp32 "
    "(_keep_in_fp32_modules_strict), but under autocast F.linear still computes the logits in bf16"
)
AUX_SRC = (
    "Switch Transformer eq. 4-6 (load_balancing_loss_func in transformers: output_router_logits=True adds "
    "router_aux_loss_coef x aux to the loss); ST-MoE (Zoph et al. 2022) z-loss; DeepSeek-V3 balances with a bias "
    "instead (auxiliary-loss-free, report §2.1.2)"
)
IMBALANCE_SRC = (
    "GShard (Lepikhin et al. 2020) §2.2 expert capacity; the HF implementations are dropless, so a rank holds "
    "every token routed to its experts: the estimate assumes even routing"
)
EP_SRC = (
    "DeepSpeed-MoE (Rajbhandari et al. 2022) §5 and Megatron-Core: keep the expert-parallel all-to-all inside a "
    "node (NVLink) where it fits; nccl-tests PERFORMANCE.md for the all-to-all bus bandwidth"
)

EXPERTS_SRC = (
    "transformers integrations/moe.py: grouped_mm_experts_forward (the default), batched_mm_experts_forward "
    "(gate_up_proj[expert_ids] per token-expert pair), and the experts classes' own per-expert loop "
    "(experts_implementation = eager); measured on the CPU, tests/data/moe_truth.json"
)


def _ticked(c: Context, item: str) -> bool:
    return item in c.plan.checklist.ticked


def router_precision(c: Context) -> Item | None:
    moe = c.arch.moe
    if moe is None:
        return None
    reg = REGIMES[c.plan.training.regime]
    title = "Router precision"
    if reg.weight_bytes == 2 and c.plan.training.method == "full":
        detail = (
            f"{c.plan.training.regime} holds the {moe.n_experts}-way router's weights in 16 bit: the routing "
            "decisions drift with rounding; keep the router (gate) weights and logits in fp32."
        )
        return Item("nan.moe_router", "nan", "warn", title, detail, ROUTER_SRC)
    detail = (
        "router weights are fp32 and the softmax runs in fp32; under autocast the logits themselves are bf16 "
        "(transformers): fine for fine-tuning, keep it so."
    )
    return Item("nan.moe_router", "nan", "ok", title, detail, ROUTER_SRC)


def aux_loss(c: Context) -> Item | None:
    moe = c.arch.moe
    if moe is None:
        return None
    detail = (
        "check that the load-balancing loss is on (output_router_logits=True, router_aux_loss_coef about 1e-3) when "
        "the router is trained, or experts collapse onto a few; DeepSeek-V3 balances with a bias and has none."
    )
    return Item(
        "nan.moe_aux_loss",
        "nan",
        "manual",
        "Load-balancing loss",
        detail,
        AUX_SRC,
        ticked=_ticked(c, "nan.moe_aux_loss"),
    )


def expert_imbalance(c: Context) -> Item | None:
    moe = c.arch.moe
    if moe is None:
        return None
    T = c.plan.training.micro_batch_size * c.plan.training.seq_len
    detail = (
        f"the estimate routes evenly ({T * moe.top_k:,} token-expert pairs reach each GPU's experts per "
        f"micro-batch, {T * moe.top_k // moe.n_experts:,} per expert); a hot "
        "expert holds more activations and stalls its rank: watch per-expert token counts in the first steps."
    )
    return Item(
        "slow.moe_imbalance", "slow", "manual", "Expert imbalance", detail, IMBALANCE_SRC,
        ticked=_ticked(c, "slow.moe_imbalance"),
    )  # fmt: skip


def expert_parallel_nodes(c: Context) -> Item | None:
    moe = c.arch.moe
    if moe is None:
        return None
    s, hw = c.plan.strategy, c.plan.hardware
    ep, tp = s.expert_parallel, s.tensor_parallel
    title = "Expert parallelism"
    terms = {t.name: t for t in c.st.terms}
    a2a = terms["ep_all_to_all"].exposed if "ep_all_to_all" in terms else 0.0
    share = a2a / c.st.step_seconds if c.st.step_seconds else 0.0
    if ep == 1:
        return Item("slow.moe_ep", "slow", "ok", title, "no expert parallelism: no all-to-all.", EP_SRC)
    if tp * ep <= hw.gpus_per_node:
        detail = f"EP {ep} stays inside a node: all-to-all {fmt_seconds(a2a)} per step ({pct(share)})."
        return Item("slow.moe_ep", "slow", "ok", title, detail, EP_SRC)
    inside = max(k for k in (1, 2, 4, 8, 16, 32, 64) if tp * k <= hw.gpus_per_node and moe.n_experts % k == 0)
    detail = (
        f"EP {ep} crosses nodes: the all-to-all runs at {c.gpu.internode_gbs:g} GB/s per GPU, "
        f"{fmt_seconds(a2a)} per step ({pct(share)})."
    )
    fix = c.measure(f"EP {inside} inside a node", {"strategy.expert_parallel": inside})
    return Item("slow.moe_ep", "slow", "warn", title, detail, EP_SRC, fix)


def experts_path(c: Context) -> Item | None:
    moe = c.arch.moe
    if moe is None:
        return None
    title = "How the experts run"
    how = c.plan.strategy.experts
    if how == "batched":
        detail = (
            "batched_mm copies each token-expert pair's expert weights and keeps them for backward "
            f"({moe.top_k} x 3 x hidden x expert width per token, per MoE layer): an inference path; train with "
            "grouped_mm (transformers' default) or the per-expert loop."
        )
        fix = c.measure("experts by grouped_mm", {"strategy.experts": "grouped"})
        return Item("oom.moe_experts", "oom", "fail" if not c.est.fits else "warn", title, detail, EXPERTS_SRC, fix)
    if how == "loop":
        detail = (
            "the per-expert loop (experts_implementation = eager, transformers 4.x) saves what grouped_mm saves, "
            "in the compute dtype, plus each expert's 16-bit weight copies under autocast; it runs one small "
            "GEMM per expert (slower)."
        )
    else:
        detail = (
            "grouped_mm (transformers >= 5's default): one GEMM for all experts, saved in the weights' dtype (it is "
            "no autocast op: fp32 under bf16 autocast with fp32 weights)."
        )
    return Item("oom.moe_experts", "oom", "ok", title, detail, EXPERTS_SRC)


OOM_RULES: tuple[MoeRule, ...] = (experts_path,)
NAN_RULES: tuple[MoeRule, ...] = (router_precision, aux_loss)
SLOW_RULES: tuple[MoeRule, ...] = (expert_imbalance, expert_parallel_nodes)
