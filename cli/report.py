"""Plain-text reports for the headless CLI (no Rich, no Textual: they print fast over SSH)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramplan.core.memory.kinds import kind_label
from vramplan.core.memory.record import Estimate
from vramplan.core.memory.states.vision import vision_note
from vramplan.core.plan.describe import batch_label, gpu_name, method_label, model_name, parallel_summary
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import GiB, fmt_count, fmt_seconds, fmt_steps, gib_text
from vramplan.core.plan.resolved import choices_text
from vramplan.core.plan.schema.objectives import objective
from vramplan.core.time.record import StepTime, term_label

if TYPE_CHECKING:
    from vramplan.core.advice.advisor import Advice
    from vramplan.core.advice.checklist import Checklist
    from vramplan.core.plan.schema.plan import Plan


def estimate_document(plan: Plan) -> dict[str, Any]:
    """What ``vramplan estimate --json`` writes for a plan (before an import's ``--from`` note): the memory estimate
    and, under ``time``, the step time."""
    from vramplan import __version__
    from vramplan.core.memory.peak import estimate
    from vramplan.core.time.step import step_time

    data = estimate(plan).to_json(__version__)
    data["time"] = step_time(plan).to_json()
    return data


def _g(n: int) -> str:
    return f"{gib_text(n, 2):>8}"


def _batch_lines(p: Plan) -> list[str]:
    """The training line: an SFT plan's micro-batch, a DPO/GRPO/PPO plan's objective (wrapped at 80 columns)."""
    t = p.training
    text = f"{method_label(t)}, {t.regime}, {t.optimizer}; {batch_label(p)}"
    return [text] if not t.objective_spec.post_training else _wrap(text, 0, hang=2)


def plan_summary(est: Estimate) -> list[str]:
    p = est.plan
    m, hw, s = p.model, p.hardware, p.strategy
    trained = p.training.vision_tower == "trained"
    name = model_name(m) + (f" ({m.model_type}, config.json)" if m.hf_config else "")
    return [
        f"{name} on {hw.total_gpus} x {gpu_name(p)} ({hw.nodes} node{'s' if hw.nodes > 1 else ''})",
        *_batch_lines(p),
        f"{parallel_summary(p, offload=True, framework_words=True)}; checkpointing {s.gradient_checkpointing}, "
        f"{s.attention} attention"
        + (", fused cross-entropy" if s.fused_cross_entropy else "")
        + (", int8 activations" if s.activation_compression == "int8" else "")
        + stack_summary(p),
        f"parameters {fmt_count(est.params_total)}"
        + _moe_summary(est)
        + f" (trainable {fmt_count(est.params_trainable)})",
        *(_wrap(chose, 0, hang=2) if (chose := choices_text(p)) else []),
        *(_wrap(f"note: {vision}", 0, hang=2) if (vision := vision_note(m.vision_params or 0, trained)) else []),
        *_ignored_keys(m.hf_config),
    ]


def _ignored_keys(path: str | None) -> list[str]:
    """The config.json keys the model ignores (neither read nor known to leave the estimate unchanged)."""
    if not path:
        return []
    from vramplan.core.plan.architecture.hf_config import read_hf_config  # a model from a config.json only

    try:
        ignored = read_hf_config(path).ignored
    except PlanError:  # the plan was validated from it; a file changed since is the next estimate's error
        return []
    return [f"note: config.json keys not modelled, ignored: {', '.join(ignored)}"] if ignored else []


def _moe_summary(est: Estimate) -> str:
    """Mixture of experts: the parameters a token passes through, and the experts' layout."""
    moe = est.plan.model.arch().moe
    if moe is None:
        return ""
    ep = est.plan.strategy.expert_parallel
    active = est.parameters_json()["active"]
    where = f", EP {ep}: {moe.n_experts // ep} experts per GPU" if ep > 1 else ""
    return f", {fmt_count(active)} active (top-{moe.top_k} of {moe.n_experts} experts{where})"


def stack_summary(p: Plan) -> str:
    """The stack techniques a plan uses, as a suffix of the strategy line ("" when none)."""
    s = p.strategy
    parts = [
        "torch.compile" if s.compile else "",
        f"checkpoint every {s.checkpoint_every}" if s.checkpoint_every > 1 else "",
        "optimizer in backward" if s.optimizer_in_backward else "",
        "activation offload" if s.activation_offload != "none" else "",
        f"loss in {s.loss_chunks} chunks" if s.loss_chunks > 1 else "",
        "Float8" if s.float8 else "",
    ]
    return "".join(f", {x}" for x in parts if x)


def estimate_table(est: Estimate, hardware_note: str = "") -> str:
    lines = plan_summary(est)
    if hardware_note:
        lines.insert(1, f"hardware {hardware_note} (nvidia-smi)")
    stage = "" if est.stage == "all" else f" ({est.stage} pipeline stage)"
    lines += ["", f"per GPU{stage}, GiB          largest   at peak"]
    live = est.live_at_peak
    for kind, comp in est.components.items():
        lines.append(f"  {kind_label(kind, est.plan):<24}{_g(comp.bytes)}  {_g(live.get(kind, 0))}")
    lines.append("  " + "-" * 44)
    lines.append(f"  {'peak (' + est.peak_phase + ')':<24}{'':8}  {_g(est.total)}")
    lines.append(f"  {'  torch allocated':<24}{'':8}  {_g(est.allocated)}")
    lines.append(f"  {'  torch reserved':<24}{'':8}  {_g(est.reserved)}")
    cap = est.gpu_capacity
    if est.gpu_fits:
        verdict = f"fits: {est.headroom / GiB:.1f} GiB free ({est.headroom_fraction:.0%} headroom)"
        if not est.fits:
            verdict = f"fits on the GPU ({est.headroom / GiB:.1f} GiB free) but DOES NOT FIT in " + " and ".join(
                NODE_LIMIT_TEXT[k] for k in est.exceeded
            )
    else:
        verdict = f"DOES NOT FIT by {-est.headroom / GiB:.1f} GiB"
    lines.append(f"  of {cap / GiB:.1f} GiB per GPU: {verdict}")
    lines += _wrap(margin_line(est), 2, hang=2)
    lines += _wrap(f"estimate {est.expected_error.text()}", 2, hang=2)
    if est.plan.overhead.calibrated_from:
        lines.append(f"  overhead calibrated from {est.plan.overhead.calibrated_from}")
    lines.append(f"  peak moment: {est.peak.moment}")
    return "\n".join(lines + rl_memory_lines(est) + node_lines(est)) + "\n"


def margin_line(est: Estimate) -> str:
    """``may need up to 21.3 GiB with a 10% safety margin (fragmentation's 10%)`` (`core.advice.margin`)."""
    from vramplan.core.advice.margin import safety_margin

    m = safety_margin(est)
    return f"may need up to {m.need_bytes(est) / GiB:.1f} GiB with a {m.fraction:.0%} safety margin ({m.reason})"


def rl_memory_lines(est: Estimate) -> list[str]:
    """A DPO/GRPO/PPO plan's tensors per GPU by phase and why the peak phase is the largest (none for SFT)."""
    rl = est.rl
    if rl is None:
        return []
    phases = ", ".join(f"{p.name} {gib_text(p.total, 1)}" for p in rl.phases)
    out = [f"  phases (tensors per GPU, GiB): {phases}", *_wrap(rl.why, 2, hang=2)]
    if rl.server_gpus:
        out.append(f"  vLLM server: {rl.server_gpus} more GPU(s), {gib_text(rl.server_gpu_bytes, 1)} GiB each")
    if rl.engine_short:
        out += _wrap(
            "! vLLM's weights and one sequence's KV cache exceed rl.vllm_gpu_memory_utilization of the GPU: the "
            "engine cannot start",
            2,
            hang=2,
        )
    return out


NODE_LIMIT_TEXT = {"gpu_memory": "GPU memory", "host_memory": "host memory per node", "nvme": "NVMe per node"}


def brief_line(est: Estimate, st: StepTime) -> str:
    """``estimate --brief``: one line a script can show, ``fits: 17.8 / 80.0 GiB, 559.8 ms per step`` or ``does not
    fit by 3.1 GiB (83.1 / 80.0 GiB), ...``; a node limit it is over is named (``does not fit in host memory per
    node by ...``), the GPU's figures following when they fit."""
    gpu = f"{est.on_gpu / GiB:.1f} / {est.gpu_capacity / GiB:.1f} GiB"
    step = f"{fmt_seconds(st.step_seconds)} per step"
    if est.fits:
        return f"fits: {gpu}, {step}"
    need_have = {
        "gpu_memory": (est.on_gpu, est.gpu_capacity),
        "host_memory": (est.cpu_per_node, est.node.host.bytes),
        "nvme": (est.nvme_per_node, est.node.nvme.bytes),
    }
    parts = []
    for kind in est.exceeded:
        need, have = need_have[kind]
        where = "" if kind == "gpu_memory" else f"in {NODE_LIMIT_TEXT[kind]} "
        parts.append(f"{where}by {(need - have) / GiB:.1f} GiB ({need / GiB:.1f} / {have / GiB:.1f} GiB)")
    on_gpu = "" if "gpu_memory" in est.exceeded else f"; GPU {gpu}"
    return f"does not fit {' and '.join(parts)}{on_gpu}, {step}"


def node_lines(est: Estimate) -> list[str]:
    """What the node's ranks offload against the node's host memory and NVMe (`core.plan.node`): each over its
    limit says so, and where the limit comes from (none when nothing is offloaded)."""
    out = []
    for label, need, ok, limit, key in (
        ("host RAM", est.cpu_per_node, est.host_fits, est.node.host, "hardware.host_memory_gib"),
        ("NVMe", est.nvme_per_node, est.nvme_fits, est.node.nvme, "hardware.nvme_gib"),
    ):
        if not need:
            continue
        have = limit.bytes
        state = f"{(have - need) / GiB:.1f} GiB free" if ok else f"DOES NOT FIT by {(need - have) / GiB:.1f} GiB"
        out.append(f"  {label} per node {need / GiB:.1f} GiB of {have / GiB:.1f} GiB: {state}")
        hint = "" if limit.user else f"; set {key} for your node"
        out += _wrap(f"limit: {limit.source}{hint}", 4, hang=2)
    return out


def _assumed_lines(assumed: str) -> list[str]:
    """The placeholder-figures warning wrapped, its ``add PATH`` part on a line of its own (never split)."""
    why, _, how = assumed.partition("; add ")
    return _wrap(f"! {why}", 0, hang=2) + ([f"  add {how}"] if how else [])


def time_table(st: StepTime) -> str:
    """The step-time section of ``vramplan estimate`` (80 columns): throughput, the terms of the step, time to
    train."""
    assumed = st.assumed_figures
    lines = [
        *(_assumed_lines(assumed) if assumed else []),
        f"step time {fmt_seconds(st.step_seconds)} per step of {st.tokens_per_step:,} tokens, "
        f"bottleneck: {st.bottleneck}",
        f"  {st.tokens_per_second:,.0f} tokens/s ({st.tokens_per_second_per_gpu:,.0f} per GPU), MFU {st.mfu:.1%} "
        f"HFU {st.hfu:.1%} of {st.peak_flops / 1e12:g} TFLOP/s{_mfu_setting(st)}",
        f"  step time {st.error_text()}",
        *([f"  {st.anchor}"] if st.anchor else []),
        f"  {'per GPU, per step':<28}{'busy':>10}  {'exposed':>10}",
    ]
    for t in st.terms:
        if t.seconds <= 0:
            continue
        exposed = fmt_seconds(t.exposed) if t.exposed > 0 else "hidden"
        lines.append(f"  {term_label(t.name, st.plan):<28}{fmt_seconds(t.seconds):>10}  {exposed:>10}")
    lines += rl_time_lines(st)
    steps = st.train_steps
    if st.tokens is not None and st.train_seconds is not None and st.gpu_hours is not None and steps is not None:
        lines.append(
            f"  {fmt_count(st.tokens)} tokens: {fmt_seconds(st.train_seconds)} in {fmt_steps(steps)}, "
            f"{st.gpu_hours:,.0f} GPU-hours"
        )
        if st.cost is not None:
            lines.append(f"  cost {st.cost:,.0f} USD at {st.price_per_gpu_hour:g} USD per GPU-hour")
    return "\n".join(lines) + "\n"


def _mfu_setting(st: StepTime) -> str:
    """``, matmuls at training.mfu 0.5`` when the user set it (the reported MFU is a result, not the setting)."""
    return "" if st.mfu_setting is None else f", matmuls at training.mfu {st.mfu_setting:g}"


def rl_time_lines(st: StepTime) -> list[str]:
    """A DPO/GRPO/PPO step by phase with tokens/s (none for SFT)."""
    rl = st.rl
    if rl is None:
        return []
    prompts = objective(rl.objective).prompt
    return _wrap(f"{', '.join(rl.phase_texts())}; {rl.prompts_per_step:,} {prompts} per step", 2, hang=2)


def _wrap(text: str, indent: int, width: int = 80, hang: int = 0) -> list[str]:
    """``text`` wrapped to ``width`` columns at ``indent``, continuation lines ``hang`` columns further in."""
    import textwrap

    first, rest = " " * indent, " " * (indent + hang)
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False) or [first]


def _set_line(args: tuple[str, ...], indent: int) -> list[str]:
    """``--set key=value`` arguments, shell-quoted, never split from their value when wrapped."""
    import shlex

    text = " ".join(f"--set\0{shlex.quote(a)}" for a in args)
    return [line.replace("\0", " ") for line in _wrap(text, indent)]


CHECK_MARKS = {"ok": "ok", "warn": "warn", "fail": "FAIL"}


def checklist_text(cl: Checklist, title: str, alternatives: int = 2) -> str:
    """``vramplan check``: the three groups, each item's status, detail, fix (with its ``--set`` arguments) and a
    few measured alternatives; 80 columns."""
    from vramplan.core.advice.checklist import GROUPS

    lines = [f"{title}: {cl.summary()}"]
    for group, label in GROUPS.items():
        lines += ["", label]
        for item in cl.group(group):
            mark = ("[x]" if item.ticked else "[ ]") if item.status == "manual" else CHECK_MARKS[item.status]
            lines.append(f"  {mark:<5} {item.title:<44}{item.id:>27}"[:80].rstrip())
            lines += _wrap(item.detail, 8)
            if item.fix is not None:
                lines += _wrap(f"fix: {item.fix.text()}", 8, hang=5)
                lines += _set_line(item.fix.set_args(), 13)
            if item.status in ("warn", "fail"):
                fix = dict(item.fix.changes) if item.fix else None
                others = [e for e in item.alternatives if dict(e.changes) != fix]
                for e in others[:alternatives]:
                    lines += _wrap(f"or:  {e.text()}", 8, hang=5)
    lines += ["", 'Tick by-hand items in the plan file: [checklist] ticked = ["slow.data_loading"]']
    return "\n".join(lines) + "\n"


def advice_text(a: Advice, title: str) -> str:
    """``vramplan fit``: the verdict, the ranked suggestions with their ``--set`` arguments, the largest micro-batch
    and the fewest GPUs; 80 columns."""
    from vramplan.core.advice.fit_limits import layout_text, seq_len_text
    from vramplan.core.advice.moves import TIER_TEXT

    est = a.est
    need = f"{est.total / GiB:.1f} GiB of {est.gpu_capacity / GiB:.1f} GiB per GPU"
    if not est.gpu_fits:
        verdict = f"needs {need}: over by {-est.headroom / GiB:.1f} GiB"
    elif not est.fits:
        over = " and ".join(NODE_LIMIT_TEXT[k] for k in est.exceeded)
        verdict = f"fits on the GPU ({need}) but not in {over}"
    else:
        verdict = f"fits: {need}, {est.headroom_fraction:.0%} free"
    lines = [f"{title}: {verdict}", *node_lines(est)]
    for limit, key in ((est.node.host, "hardware.host_memory_gib"), (est.node.nvme, "hardware.nvme_gib")):
        if limit.user:  # the user's own limit: the suggestions that offload stay within it
            lines.append(f"  offload within {limit.bytes / GiB:.1f} GiB per node ({key}, as set)")
    if a.margin.explicit:
        goal = f"leave {a.goal_headroom:.0%} free ({a.margin.reason}; --headroom sets it)"
    else:  # each changed plan keeps its own margin: a change of method has other similar runs
        goal = (
            f"leave the safety margin free ({a.goal_headroom:.0%} for this plan: {a.margin.reason}; a changed plan "
            "keeps its own, shown where it differs; --headroom sets one for all)"
        )
    if not a.needed:
        lines += _wrap(f"Enough headroom: nothing to change (the margin: {a.margin.text()}).", 0)
    elif not a.suggestions:
        lines += _wrap(f"No set of up to 3 changes makes it {goal} ({a.searched:,} plans searched).", 0)
    else:
        lines += _wrap(
            f"Changes that make it {goal}, fastest first ({a.searched:,} plans searched): step time relative to now "
            f"({fmt_seconds(a.step_seconds)}; same global batch); changes of method after those that train the same "
            "model:",
            0,
        )
        same: bool | None = None
        for n, s in enumerate(a.suggestions, 1):
            if s.same_model != same:
                same = s.same_model
                lines += ["", "  same model" if same else f"  {TIER_TEXT[2]}"]
            e = s.effect
            kind = f" ({TIER_TEXT[1]})" if s.tier == 1 else ""
            lines += _wrap(f"{n:>2}. {s.title}{kind}", 2, hang=4)
            paged = e.memory_total - e.memory_on_gpu
            beside = f" + {paged / GiB:.1f} GiB paged" if paged else ""
            own = f"; margin {s.margin_fraction:.0%}" if abs(s.margin_fraction - a.goal_headroom) >= 0.005 else ""
            lines += _wrap(
                f"{e.memory_on_gpu / GiB:.1f} GiB per GPU{beside} ({e.headroom_fraction:.0%} free{own}), "
                f"step time x{e.relative_step_time:.2f} ({fmt_seconds(e.step_seconds)})",
                6,
                hang=2,
            )
            lines += _set_line(e.set_args(), 6)
    lines.append("")
    mb = a.max_micro_batch_size
    kept = f"with {a.goal_headroom:.0%} free"
    lines.append(f"Largest micro-batch that fits as is ({kept}): {mb if mb else 'none, not even 1'}")
    lines += _wrap(
        f"Largest sequence length that fits as is ({kept}): "
        f"{seq_len_text(a.max_seq_len, a.context_len, a.max_seq_changes)}",
        0,
        hang=2,
    )
    if a.min_gpus is None:
        lines.append("Fewest GPUs that fit with these strategies: none (more GPUs do not shrink what each holds)")
    else:
        layout = layout_text(a.min_gpus_changes)
        lines.append(f"Fewest GPUs that fit with these strategies ({kept}): {a.min_gpus} ({layout})")
    return "\n".join(lines) + "\n"
