"""The estimate: plain frozen dataclasses (fast to build), each figure with its formula and source (its terms,
`core.memory.terms`, formatted when read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from vramplan.core.memory.kinds import ALL_KINDS, KIND, KIND_LABELS, TENSOR_KINDS
from vramplan.core.memory.terms import Term
from vramplan.core.plan.helpers.units import fmt_gib
from vramplan.core.plan.node import NodeLimits
from vramplan.core.plan.resolved import choices_json

if TYPE_CHECKING:
    from vramplan.core.memory.accuracy import ExpectedError
    from vramplan.core.memory.rl.rl_memory import RLMemory
    from vramplan.core.plan.schema.plan import Plan


class Component(NamedTuple):
    """One kind of memory at its largest during the step, with how it was computed."""

    kind: str
    bytes: int
    formula: str
    source: str

    @property
    def label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)


class Phase(NamedTuple):
    """One moment of the steady-state step and the bytes live then, by kind."""

    name: str  # forward | backward | optimizer
    moment: str  # what happens at that moment, in words
    live: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.live.values())


ALWAYS_SHOWN = tuple(k for k in ALL_KINDS if KIND[k].always_shown)
# Overhead terms by what sees them: PyTorch's allocator hands them out (in torch.cuda.max_memory_allocated), it
# keeps them cached (in max_memory_reserved only), or they live outside it (the whole process, nvidia-smi).
ALLOCATED_TERMS = ("zero_buckets", "ddp_buckets")
RESERVE_TERMS = ("allocator_reserve", "freed_logits", "stream_pools", "all_gather_pool")
OUTSIDE_TERMS = ("cuda_context", "nccl", "paged_optimizer_states")
SPILLS_TO_HOST = ("paged_optimizer_states",)  # unified memory: the driver pages it out instead of failing

# Headroom below this fraction of the GPU's memory is an OOM risk even when the estimate fits: the estimate's
# allocator reserve (the caching allocator's rounding and segment rules, core.memory.allocator) leaves out the holes
# the order of allocations and frees makes, and fragmentation measured on LLM training is larger (GMLake, Guo et
# al. ASPLOS 2024: 15% on average), so keep about 10% free. The checklist warns under it
# (`core.advice.whatif`) and the planner's headline turns amber.
FRAGMENTATION_RISK = 0.10


@dataclass(frozen=True)
class Estimate:
    """Numbers first (cheap to build: an estimate takes microseconds); formulas and sources on demand."""

    plan: Plan
    params_total: int
    params_trainable: int
    largest: dict[str, int]  # each kind at its largest over the step's moments
    phases: tuple[Phase, ...]  # candidate moments of the step (tensor bytes only)
    peak: Phase  # the moment with the most tensor bytes
    overhead_bytes: dict[str, int]  # named overhead terms
    gpu_capacity: int
    cpu_per_node: int
    nvme_per_node: int
    node: NodeLimits  # the node's host memory and NVMe: limits like the GPU's memory (`core.plan.node`)
    stage: str  # which pipeline stage is the busiest ("all" without pipeline parallelism)
    headlines: tuple[Term, ...] = field(repr=False, compare=False)  # what each kind is, in words (one per kind)
    overhead_terms: tuple[Term, ...] = field(default=(), repr=False, compare=False)  # `overhead_bytes`, explained
    rl: RLMemory | None = field(default=None, compare=False)  # DPO/GRPO/PPO: memory per phase (`core.memory.rl`)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def parameters_json(self) -> dict[str, int]:
        """``active``: every parameter one token passes through (embedding and lm_head included, the top-k routed
        experts of each MoE layer; with LoRA the adapters too); equal to ``total`` for a dense model.
        ``experts``: the routed experts' parameters (0: dense); ``mtp``: DeepSeek's multi-token-prediction
        module, not in ``total`` (transformers does not build it); ``vision``: a multimodal model's vision tower and
        projector, in ``total``, not in ``active``."""
        arch = self.plan.model.arch()
        adapters = self.params_total - arch.total_params
        out = {
            "total": self.params_total,
            "active": arch.active_params + adapters,
            "trainable": self.params_trainable,
            "experts": arch.expert_params,
        }
        if arch.mtp_params:
            out["mtp"] = arch.mtp_params
        if arch.vision_params:  # a multimodal model's vision tower and projector, in ``total``
            out["vision"] = arch.vision_params
        return out

    @property
    def components(self) -> dict[str, Component]:
        """Each kind at its largest (those that occur), with its formula (its headline term's, with the kind's
        largest figure) and source."""
        if "components" not in self._cache:
            heads = {t.kind: t for t in self.headlines}
            out: dict[str, Component] = {}
            for kind in (*(k for k in TENSOR_KINDS if k in ALWAYS_SHOWN or self.largest.get(k)), "overhead"):
                n = self.overhead if kind == "overhead" else self.largest.get(kind, 0)
                head, spec = heads[kind], KIND[kind]
                formula = f"{head.formula} = {fmt_gib(n, spec.digits)}" if spec.formula_total else head.formula
                out[kind] = Component(kind, n, formula, head.source)
            self._cache["components"] = out
        components: dict[str, Component] = self._cache["components"]
        return components

    @property
    def overhead(self) -> int:
        return sum(self.overhead_bytes.values())

    @property
    def total(self) -> int:
        """Predicted peak per GPU of the whole process: the largest moment's tensors plus every overhead term
        (what nvidia-smi shows for the process)."""
        return self.peak.total + self.overhead

    @property
    def allocated(self) -> int:
        """What ``torch.cuda.max_memory_allocated()`` would report: the peak moment's tensors and the
        communication buckets the allocator hands out."""
        return self.peak.total + sum(self.overhead_bytes.get(k, 0) for k in ALLOCATED_TERMS)

    @property
    def reserved(self) -> int:
        """What ``torch.cuda.max_memory_reserved()`` would report: `allocated` plus what the caching allocator
        keeps cached (fragmentation, freed blocks that cannot serve the peak's requests, other streams' pools)."""
        return self.allocated + sum(self.overhead_bytes.get(k, 0) for k in RESERVE_TERMS)

    @property
    def on_gpu(self) -> int:
        """What must fit on the GPU: `total` less what the driver can page to host memory."""
        return self.total - sum(self.overhead_bytes.get(k, 0) for k in SPILLS_TO_HOST)

    @property
    def peak_phase(self) -> str:
        """forward | backward | optimizer; for DPO/GRPO/PPO: generation | scoring | update."""
        return self.peak.name

    @property
    def live_at_peak(self) -> dict[str, int]:
        live = {k: v for k, v in self.peak.live.items() if v}
        live["overhead"] = self.overhead
        return live

    @property
    def gpu_fits(self) -> bool:
        return self.on_gpu <= self.gpu_capacity

    @property
    def host_fits(self) -> bool:
        """The host memory the node's ranks offload to fits in the node's (`core.plan.node`)."""
        return self.cpu_per_node <= self.node.host.bytes

    @property
    def nvme_fits(self) -> bool:
        return self.nvme_per_node <= self.node.nvme.bytes

    @property
    def exceeded(self) -> tuple[str, ...]:
        """The limits the plan is over: ``gpu_memory``, ``host_memory``, ``nvme`` (empty: it fits)."""
        over = (not self.gpu_fits, not self.host_fits, not self.nvme_fits)
        return tuple(n for n, o in zip(("gpu_memory", "host_memory", "nvme"), over, strict=True) if o)

    @property
    def fits(self) -> bool:
        """Fits on the GPU and in the node's host memory and NVMe: a plan that offloads more than the node holds
        does not run either."""
        return self.gpu_fits and self.host_fits and self.nvme_fits

    @property
    def headroom(self) -> int:
        """Bytes left on the GPU at the peak (negative: over by that much); paged optimizer states excluded."""
        return self.gpu_capacity - self.on_gpu

    @property
    def headroom_fraction(self) -> float:
        return self.headroom / self.gpu_capacity

    def per_gpu(self) -> dict[str, int]:
        """Each kind at its largest, then the predicted peak (`total`)."""
        out = {k: self.largest.get(k, 0) for k in TENSOR_KINDS if k in ALWAYS_SHOWN or self.largest.get(k)}
        out["overhead"] = self.overhead
        out["allocated"] = self.allocated
        out["reserved"] = self.reserved
        out["total"] = self.total
        return out

    def phase_totals(self) -> dict[str, int]:
        """The largest tensor total of each phase (forward, backward, optimizer)."""
        out: dict[str, int] = {}
        for p in self.phases:
            out[p.name] = max(out.get(p.name, 0), p.total)
        return out

    @property
    def expected_error(self) -> ExpectedError:
        """The estimate's error on the published GPU runs nearest to this plan (same method, stack family, size:
        `core.memory.accuracy`; its module and data load on first use)."""
        from vramplan.core.memory.accuracy import expected_error

        t = self.plan.training
        return expected_error(t.method, self.plan.stack.framework, self.params_total)

    def to_json(self, version: str) -> dict[str, Any]:
        return {
            "version": version,
            "plan": self.plan.dump(),
            "stack": choices_json(self.plan),
            "parameters": self.parameters_json(),
            "memory": {
                "per_gpu": {**self.per_gpu(), "expected_error": self.expected_error.to_json()},
                "peak_phase": self.peak_phase,
                "peak_moment": self.peak.moment,
                "live_at_peak": self.live_at_peak,
                "gpu_capacity": self.gpu_capacity,
                "fits": self.fits,
                "headroom": self.headroom,
                "cpu_per_node": self.cpu_per_node,
                "nvme_per_node": self.nvme_per_node,
                "host_limit_per_node": self.node.host.bytes,
                "host_limit_source": self.node.host.source,
                "nvme_limit_per_node": self.node.nvme.bytes,
                "nvme_limit_source": self.node.nvme.source,
                "gpu_fits": self.gpu_fits,
                "exceeded": list(self.exceeded),
                "stage": self.stage,
                "overhead_terms": dict(self.overhead_bytes),
                "calibrated_from": self.plan.overhead.calibrated_from,
                "phases": self.phase_totals(),
                **({"rl": self.rl.to_json()} if self.rl is not None else {}),
            },
            "explain": {k: {"formula": c.formula, "source": c.source} for k, c in self.components.items()},
        }
