"""The checklist items of DPO/GRPO/PPO plans (`core.memory.rl`, `core.time.rl_time`); none for an SFT plan.

- ``oom.rl_phase``: which phase is the peak and why; under memory pressure, the RL knobs that lower it, measured
  (`core.advice.rlmoves`): a smaller vLLM share, sleep mode, the server mode, precomputed or adapter reference
  log-probs, frozen weights on the host.
- ``oom.vllm_share``: a colocated engine whose weights and one sequence's KV cache do not fit in its share
  (vLLM refuses to start), or whose KV cache holds less than the step's batch (it generates in waves).
- ``slow.rl_generation``: a step that mostly waits on generation; the faster engines and settings, measured.
"""

from __future__ import annotations

from vramplan.core.advice.checks.base import Context, Item, fastest, gib, pct
from vramplan.core.advice.rlmoves import RL_TARGET, needed_utilization
from vramplan.core.advice.whatif import Effect
from vramplan.core.memory.record import FRAGMENTATION_RISK
from vramplan.core.memory.rl.estimate import settings
from vramplan.core.plan.helpers.units import fmt_seconds

PHASE_SRC = (
    "core/memory/rl: generation (transformers DynamicCache, vLLM gpu_memory_utilization), scoring (TRL "
    "_get_per_token_logps_and_entropies without grad), the update (the SFT estimate on the trained sequences)"
)
VLLM_SRC = (
    "vllm/v1/worker/gpu_worker.py determine_available_memory: the KV cache is gpu_memory_utilization x total "
    "memory less the weights and activations; vLLM raises 'No available memory for the cache blocks' when none "
    "is left, and preempts sequences when the cache is full (vllm/v1/core/sched/scheduler.py)"
)
GEN_SRC = (
    "decoding reads every weight and the KV cache per token (Pope et al. 2022 §2): bound by HBM bandwidth at "
    "small batches; vLLM's paged KV cache runs the whole batch at once, model.generate a static batch "
    "(TRL docs, 'Speeding up training' with vLLM)"
)
GEN_SHARE = 0.5  # generation past this share of the step is the slow item's warning
WORTH = 0.95


def phase(c: Context) -> Item:
    rl = c.est.rl
    assert rl is not None
    totals = ", ".join(f"{p.name} {gib(p.total)}" for p in rl.phases)
    detail = f"{rl.why}; tensors per GPU by phase: {totals}."
    status = "ok"
    fix: Effect | None = None
    alternatives: tuple[Effect, ...] = ()
    if c.pressure:
        alternatives = c.remedies(RL_TARGET)
        good = [e for e in alternatives if c.goal(e)]
        fix = good[0] if good else (alternatives[0] if alternatives else None)
        status = "warn" if alternatives else "ok"
        if fix is not None:
            detail += f" Best: {fix.title}, {gib(-fix.memory_delta)} less per GPU."
    return Item("oom.rl_phase", "oom", status, "Peak phase (RL)", detail, PHASE_SRC, fix, alternatives)


def vllm_share(c: Context) -> Item | None:
    r = settings(c.plan)
    rl = c.est.rl
    if r.generation != "vllm-colocate" or rl is None:
        return None
    need = needed_utilization(c.plan)
    u = r.vllm_utilization
    if rl.engine_short:
        detail = (
            f"vLLM's weights and one sequence's KV cache do not fit in {u:g} of the GPU: the engine cannot start. "
            f"About {need:g} holds the whole batch."
        )
        fix = c.measure(f"vLLM share {u:g} -> {need:g}", {"rl.vllm_gpu_memory_utilization": need})
        return Item("oom.vllm_share", "oom", "fail", "vLLM's share of the GPU", detail, VLLM_SRC, fix)
    if need > u:
        detail = (
            f"the KV cache in {u:g} of the GPU holds fewer than the step's {rl.generation_sequences} sequences: vLLM "
            f"generates in waves (slower, not an OOM); {need:g} holds them all."
        )
        return Item("oom.vllm_share", "oom", "ok", "vLLM's share of the GPU", detail, VLLM_SRC)
    detail = f"{u:g} of the GPU holds vLLM's weights and the KV cache of every sequence of the step ({need:g} would)."
    return Item("oom.vllm_share", "oom", "ok", "vLLM's share of the GPU", detail, VLLM_SRC)


def _safe(e: Effect) -> bool:
    return e.fits and (e.headroom_fraction >= FRAGMENTATION_RISK or e.memory_delta <= 0)


def generation(c: Context) -> Item | None:
    tt = c.st.rl
    if tt is None or tt.gen is None:
        return None
    r = settings(c.plan)
    share = tt.generation_s / c.st.step_seconds
    detail = (
        f"generation takes {fmt_seconds(tt.generation_s)} of the {fmt_seconds(c.st.step_seconds)} step "
        f"({pct(share)}): {tt.gen.sequences} sequences per engine, {tt.gen.concurrent} at once, "
        f"{r.completion_len} decoding steps each."
    )
    if share < GEN_SHARE:
        return Item("slow.rl_generation", "slow", "ok", "Generation (RL)", detail, GEN_SRC)
    options: list[tuple[str, dict[str, object]]] = []
    if r.generation == "hf":
        options.append(("vLLM colocated", {"rl.generation": "vllm-colocate"}))
        sleep = {"rl.generation": "vllm-colocate", "rl.vllm_enable_sleep_mode": True}
        options.append(("vLLM colocated with sleep mode", sleep))
    if r.generation == "vllm-colocate" and tt.gen.concurrent < tt.gen.sequences:
        more = min(0.9, needed_utilization(c.plan))
        options.append((f"vLLM share {r.vllm_utilization:g} -> {more:g}", {"rl.vllm_gpu_memory_utilization": more}))
    if r.generation != "vllm-server":
        server: dict[str, object] = {"rl.generation": "vllm-server"}
        if r.sleep_mode:
            server["rl.vllm_enable_sleep_mode"] = False
        options.append(("vLLM server on separate GPUs", server))
    measured = [e for title, ch in options if (e := c.measure(title, dict(ch))) is not None]
    fix = fastest(measured, _safe, WORTH)
    alternatives = tuple(sorted(measured, key=lambda e: e.relative_token_time))
    if fix is not None:
        detail += f" Best: {fix.title}, which fits and is {pct(1 - fix.relative_token_time)} faster."
    elif r.completion_len >= 128:
        detail += " A shorter max_completion_length shortens it in proportion (a different training)."
    return Item("slow.rl_generation", "slow", "warn", "Generation (RL)", detail, GEN_SRC, fix, alternatives)


OOM_RULES = (phase, vllm_share)
SLOW_RULES = (generation,)
