"""From a traced run (`vramplan.measure.trace_run`) to the report: the events of every step (traced, or a traced
step repeated), one rank's view of a sharded plan, the replay through the caching allocator model
(`vramplan.core.memory.caching_allocator`; on ``cpu`` kernels the tensors' own bytes, as the CPU allocator holds
them), the peaks by phase, role and module, and the comparison with the estimate, row by row with what differs."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from vramplan.core.memory.alloc_conf import AllocatorConfig, parse_alloc_conf
from vramplan.core.memory.caching_allocator import ALLOC, replay, round_size
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import ALLOCATED_TERMS
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.describe import plan_title
from vramplan.core.plan.helpers.units import MiB
from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.trace_limits import adjustments, not_traced, shard_factors
from vramplan.measure.trace_records import Difference, PhasePeak, TraceOptions, TraceReport
from vramplan.measure.tracer import PHASES

# traced roles -> the estimate's kinds of memory they are
ROLE_KINDS: dict[str, tuple[str, ...]] = {
    "parameters": ("parameters", "gathered_parameters"),
    "gradients": ("gradients",),
    "optimizer states": ("optimizer_states",),
    "activations": ("activations", "checkpoint_buffers", "autocast_cache"),
    "logits / loss": ("logits",),
    "temporaries": ("temporaries",),
}
ROLE_ROWS: dict[str, str] = {
    "parameter": "parameters",
    "gathered": "parameters",
    "buffer": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer states",
    "activation": "activations",
    "recomputed": "activations",
    "temporary": "temporaries",
    "input": "temporaries",
    "workspace": "temporaries",
}
# the row of each part taken from the estimate (`trace_limits.adjustments`), by its name's first word
ADJUSTED_ROWS = {"quantized": "parameters", "gathered": "parameters", "optimizer": "optimizer states"}
HEAD = "(model: loss and outputs)"
LAYER = re.compile(r"\.\d+(?=\.|$)")


def module_group(name: str) -> str:
    """``base_model.model.model.layers.12.self_attn.q_proj.lora_A.default`` -> ``model.layers.*.self_attn``: the
    layer index starred, PEFT's wrapper dropped, at most four parts."""
    if name.startswith("base_model.model"):
        name = name[len("base_model.model") :].lstrip(".")
    if not name:
        return HEAD
    return ".".join(LAYER.sub(".*", name).split(".")[:4])


def phase_group(a: Any) -> str:
    """Where an allocation was made: its module group in forward and backward, else its phase."""
    if a.phase in (1, 2):
        return module_group(a.module)
    return {0: "(built: parameters, buffers)", 3: "(optimizer step)", 4: "(zero_grad)"}.get(a.phase, "?")


def row_of(a: Any) -> str:
    """The comparison row of a traced allocation: its role's, except that what the LM head and the loss make
    (outside the decoder's modules: the logits, their fp32 copy and the loss's gradients) is the estimate's
    logits / loss, and a buffer made on another stream than the default (FSDP2's all-gather and reduce-scatter
    buffers) a temporary."""
    row = ROLE_ROWS.get(a.role, "temporaries")
    if a.stream and row in ("activations", "temporaries"):
        return "temporaries"
    if row in ("activations", "temporaries") and a.phase in (1, 2):
        group = module_group(a.module)
        if group == HEAD or group.endswith("lm_head"):
            return "logits / loss"
    return row


def step_events(traced: Any) -> tuple[list[tuple[int, int, int, int]], dict[int, int]]:
    """Every step's events as (kind, allocation id, phase, step), the build's first, and the recorded allocation
    each id is (`origin`: a repeated step's allocations get new ids). A traced step is its own events; a repeated
    one is the traced step's, less what that step left allocated (it exists already) and frees of what earlier steps
    made (they were freed once already)."""
    rec = traced.rec
    by_step: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    for e in rec.events:
        by_step[e[3]].append(e)
    events = list(by_step.get(0, []))
    origin: dict[int, int] = {}
    next_id = len(rec.allocs)
    done = set(traced.traced_steps)
    for k, source in enumerate(traced.plan_of_steps):
        step = k + 1
        if source + 1 not in done:
            break  # a stopped run: the steps after the last one traced
        if source == k:
            events += by_step.get(step, [])
            continue
        ids: dict[int, int] = {}
        for kind, i, phase, _ in by_step.get(source + 1, []):
            a = rec.allocs[i]
            if a.freed_step is None or a.freed_step > source + 1:
                continue  # what the step leaves allocated (the optimizer's state) exists already
            if kind == ALLOC:
                ids[i], next_id = next_id, next_id + 1
                origin[ids[i]] = i
                events.append((kind, ids[i], phase, step))
            elif i in ids:
                events.append((kind, ids[i], phase, step))
    return events, origin


def analyse(plan: Plan, options: TraceOptions, traced: Any) -> TraceReport:
    """The report of a traced run (see the module docstring)."""
    rec = traced.rec
    allocs = rec.allocs
    cuda = options.kernels == "cuda"
    factors = shard_factors(plan)
    events, origin = step_events(traced)
    sizes = _sizes(allocs, origin, events, factors)

    def info(i: int) -> Any:
        return allocs[origin.get(i, i)]

    conf = _allocator_conf(plan, options) if cuda else None
    kinds = [(k, i, sizes[i], info(i).stream) for k, i, _, _ in events]  # each block in its stream's pool
    if conf is not None:
        rp = replay(kinds, conf)
        allocated, reserved = rp.allocated, rp.reserved
        frag, failures, largest = rp.fragmentation, len(rp.failures), rp.largest_failed
    else:
        run, series = 0, []
        for k, _, n, _ in kinds:
            run += n if k == ALLOC else -n
            series.append(run)
        allocated = reserved = tuple(series)
        frag, failures, largest = 0.0, 0, 0
    peak_at = max(range(len(allocated)), key=allocated.__getitem__) if allocated else 0
    live = _live_at(events, peak_at)
    rnd = (lambda n: round_size(n, conf)) if conf is not None else (lambda n: n)
    by_role: dict[str, int] = defaultdict(int)
    by_module: dict[str, int] = defaultdict(int)
    for i in live:
        a = info(i)
        by_role[a.role] += rnd(sizes[i])
        by_module[phase_group(a)] += rnd(sizes[i])
    est = None if options.raw_config is not None else estimate(plan, cpu=not cuda)
    adj = adjustments(plan, est, dict(by_role)) if est is not None else ()
    extra = sum(n for _, n in adj)
    phases = _phase_peaks(events, allocated, reserved)
    tensor_peak = _tensor_peak(events, sizes)
    peak_phase, peak_step = (PHASES[events[peak_at][2]], events[peak_at][3]) if events else ("build", 0)
    return TraceReport(
        plan_summary=_title(plan, options),
        kernels=options.kernels,
        gpu=presets.gpu(plan.hardware.gpu).name,
        alloc_conf=_conf_text(plan, options) if cuda else "",
        steps=len(traced.plan_of_steps),
        steps_traced=len(traced.traced_steps),
        lengths=traced.lengths,
        peak_allocated=max(allocated, default=0) + extra,
        peak_reserved=max(reserved, default=0) + extra,
        peak_phase=peak_phase,
        peak_step=peak_step,
        tensor_peak=tensor_peak,
        fragmentation=frag,
        capacity_bytes=conf.capacity_bytes if conf is not None else None,
        largest_failed=largest,
        failures=failures,
        phases=phases,
        by_role=dict(by_role),
        by_module=tuple(sorted(by_module.items(), key=lambda kv: -kv[1])[:12]),
        saved_by_op=_saved_by_op(rec, traced),
        estimate_allocated=est.allocated if est is not None else 0,
        estimate_reserved=est.reserved if est is not None else 0,
        differences=_differences(est, adj, live, info, sizes, rnd, max(allocated, default=0) + extra,
                                 max(reserved, default=0) + extra),
        not_traced=not_traced(plan, options.raw_config),
        corrections=_corrections() if cuda else (),
        adjustments=adj,
        partial=traced.partial,
        events=len(events),
        ops=rec.ops,
        seconds=traced.seconds,
        versions=_versions(),
        notes=_notes(traced),
    )  # fmt: skip


def _title(plan: Plan, options: TraceOptions) -> str:
    raw = options.raw_config
    if raw is None:
        return plan_title(plan)
    gpu = presets.gpu(plan.hardware.gpu).name
    return f"model_type {raw['model_type']} (config.json) on {plan.hardware.total_gpus} x {gpu}"


def _sizes(
    allocs: list[Any], origin: dict[int, int], events: list[tuple[int, int, int, int]], factors: dict[str, int]
) -> dict[int, int]:
    """Each allocation's bytes on this rank: a sharded role's tensors divided by the data-parallel degree."""
    out: dict[int, int] = {}
    optimizer = PHASES.index("optimizer")
    for k, i, _, _ in events:
        if k == ALLOC:
            a = allocs[origin.get(i, i)]
            role = "optimizer_temporary" if (a.phase == optimizer and a.role == "temporary") else a.role
            out[i] = -(-a.nbytes // factors.get(role, 1))
    return out  # fmt: skip


def _allocator_conf(plan: Plan, options: TraceOptions) -> AllocatorConfig:
    gpu = presets.gpu(plan.hardware.gpu)
    device = gpu.memory_bytes
    capacity = None if options.unlimited_memory else device - plan.overhead.cuda_context_mib * MiB
    return parse_alloc_conf(_conf_text(plan, options), capacity_bytes=capacity, device_bytes=device)


def _conf_text(plan: Plan, options: TraceOptions) -> str:
    parts = [p for p in options.alloc_conf.split(",") if p.strip()]
    if plan.overhead.expandable_segments and not any(p.strip().startswith("expandable_segments") for p in parts):
        parts.append("expandable_segments:True")
    return ",".join(parts)


def _live_at(events: list[tuple[int, int, int, int]], index: int) -> set[int]:
    live: set[int] = set()
    for k, i, _, _ in events[: index + 1]:
        if k == ALLOC:
            live.add(i)
        else:
            live.discard(i)
    return live


def _tensor_peak(events: list[tuple[int, int, int, int]], sizes: dict[int, int]) -> int:
    run = top = 0
    for k, i, _, _ in events:
        run += sizes.get(i, 0) if k == ALLOC else -sizes.get(i, 0)
        top = max(top, run)
    return top


def _phase_peaks(
    events: list[tuple[int, int, int, int]], allocated: tuple[int, ...], reserved: tuple[int, ...]
) -> tuple[PhasePeak, ...]:
    peaks: dict[tuple[int, int], list[int]] = {}
    for n, (_, _, phase, step) in enumerate(events):
        if step == 0:
            continue
        p = peaks.setdefault((step, phase), [0, 0])
        p[0] = max(p[0], allocated[n])
        p[1] = max(p[1], reserved[n])
    return tuple(PhasePeak(s, PHASES[ph], a, r) for (s, ph), (a, r) in sorted(peaks.items()))


def _saved_by_op(rec: Any, traced: Any) -> tuple[tuple[str, str, int], ...]:
    """What the last traced step's first forward left for its backward, by module group and op (largest first)."""
    if not traced.traced_steps:
        return ()
    step = traced.traced_steps[-1]
    out: dict[tuple[str, str], int] = defaultdict(int)
    for a in rec.allocs:
        if a.step == step and a.micro == 1 and a.role == "activation":
            out[(module_group(a.module), a.op)] += a.nbytes
    return tuple((m, o, n) for (m, o), n in sorted(out.items(), key=lambda kv: -kv[1])[:15])


def _differences(
    est: Any,
    adj: tuple[tuple[str, int], ...],
    live: set[int],
    info: Any,
    sizes: dict[int, int],
    rnd: Any,
    allocated: int,
    reserved: int,
) -> tuple[Difference, ...]:
    """The comparison rows: each role live at the traced peak (with the parts taken from the estimate) against the
    estimate's kinds at its peak, then the peaks; a row's ``why`` names the largest traced items of the row."""
    rows: dict[str, int] = defaultdict(int)
    for i in live:
        rows[row_of(info(i))] += rnd(sizes[i])
    for what, n in adj:
        rows[ADJUSTED_ROWS.get(what.split(" ")[0], "temporaries")] += n
    if est is None:  # no formula family: the traced rows only
        none = "no formula family: no estimate"
        return (
            *(Difference(row, rows.get(row, 0), 0, none) for row in ROLE_KINDS),
            Difference("peak allocated", allocated, 0, none),
            Difference("peak reserved", reserved, 0, f"traced reserve {_pct(reserved, allocated)} over allocated"),
        )
    out = []
    for row, kinds in ROLE_KINDS.items():
        e = sum(est.peak.live.get(k, 0) for k in kinds)
        if row == "temporaries":  # the buckets DeepSpeed and DDP allocate through the allocator (est.allocated's)
            e += sum(est.overhead_bytes.get(k, 0) for k in ALLOCATED_TERMS)
        out.append(Difference(row, rows.get(row, 0), e, _why(row, live, info, sizes, rnd, rows.get(row, 0) - e)))
    parts = [f"{d.name} {_mib(d.traced - d.estimated)}" for d in out if abs(d.traced - d.estimated) >= 16 * MiB]
    why_a = ("traced - estimate: " + ", ".join(parts)) if parts else ""
    if est.peak_phase != "backward" or parts:
        why_a += ("; " if why_a else "") + f"the estimate's peak: {est.peak.moment}"
    out.append(Difference("peak allocated", allocated, est.allocated, why_a))
    why_r = (
        f"allocator: traced reserve {100 * (reserved - allocated) / max(allocated, 1):.1f}% over allocated, the "
        f"estimate's rules {100 * (est.reserved - est.allocated) / max(est.allocated, 1):.1f}%"
    )
    out.append(Difference("peak reserved", reserved, est.reserved, why_r))
    return tuple(out)  # fmt: skip


def _why(row: str, live: set[int], info: Any, sizes: dict[int, int], rnd: Any, delta: int) -> str:
    """The largest traced items of `row` at the peak (module and op), when the row differs by >= 1%."""
    items: dict[str, int] = defaultdict(int)
    total = 0
    for i in live:
        a = info(i)
        if row_of(a) != row:
            continue
        n = rnd(sizes[i])
        total += n
        where = f"stream {a.stream} " if a.stream else ""
        items[f"{where}{phase_group(a)}: {a.op}" if a.role != "workspace" else a.op] += n
    if not total or abs(delta) < total // 100:
        return ""
    top = sorted(items.items(), key=lambda kv: -kv[1])[:3]
    sign = "more" if delta > 0 else "less"
    return f"traced {abs(delta) / 2**20:,.0f} MiB {sign}; largest: " + ", ".join(
        f"{k} {v / 2**20:,.0f} MiB" for k, v in top
    )


def _pct(a: int, b: int) -> str:
    return f"{100 * (a - b) / max(b, 1):.1f}%"


def _mib(n: int) -> str:
    return f"{n / MiB:+,.0f} MiB"


def _corrections() -> tuple[str, ...]:
    from vramplan.measure.trace_kernels import CORRECTIONS

    return CORRECTIONS


def _versions() -> dict[str, str]:
    from vramplan.measure.run import versions

    return versions()


def _notes(traced: Any) -> tuple[str, ...]:
    notes = list(traced.notes)
    if traced.built_params:
        notes.append(f"transformers built {traced.built_params:,} parameters")
    if traced.partial:
        notes.append("stopped before the end (Ctrl-C): figures of the steps traced")
    return tuple(notes)
