"""The time model's result: `StepTime` and its `TimeTerm`s, and a DPO/GRPO/PPO step's phases (`RLTime`, made by
`core.time.rl_time`): plain frozen records, cheap to build."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from vramplan.core.memory.terms import Part
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.units import fmt_seconds

if TYPE_CHECKING:
    from vramplan.core.memory.accuracy import ExpectedError
    from vramplan.core.plan.schema.plan import Plan

CATEGORIES = ("compute", "memory", "host", "communication", "offload", "pipeline bubble")


class Generation(NamedTuple):
    """The generation of one step on one engine, and how it was derived."""

    seconds: float
    prefill_s: float
    decode_s: float
    sync_s: float  # vllm-server: the new weights broadcast to the server each step
    sequences: int  # sequences the engine generates per step
    concurrent: int  # sequences it decodes at once
    tokens: int  # tokens generated per step, all GPUs


@dataclass(frozen=True)
class RLTime:
    """The phases of one RL step (per optimizer step, seconds), with tokens/s each."""

    objective: str
    generation_s: float
    scoring_s: float
    update_s: float
    generated_tokens: int  # completion tokens per step, all GPUs
    scored_tokens: int  # tokens through the scoring forwards per step, all GPUs (every forward counted)
    update_tokens: int
    prompts_per_step: int  # DPO: preference pairs
    prompts: int | None  # rl.prompts
    server_gpus: int
    gen: Generation | None

    @property
    def train_steps(self) -> int | None:
        return None if self.prompts is None else -(-self.prompts // self.prompts_per_step)

    def phases(self) -> tuple[tuple[str, float, int], ...]:
        """``(name, seconds, tokens)`` of the generation, the scoring forwards and the update, in that order."""
        return (
            ("generation", self.generation_s, self.generated_tokens),
            ("scoring", self.scoring_s, self.scored_tokens),
            ("update", self.update_s, self.update_tokens),
        )

    def phase_texts(self) -> list[str]:
        """``generation 1.20 s (3,413 tok/s)`` for each phase the step runs (what the CLI and the TUI show)."""
        return [f"{name} {fmt_seconds(s)} ({tokens / s:,.0f} tok/s)" for name, s, tokens in self.phases() if s > 0]

    def to_json(self) -> dict[str, Any]:
        def rate(tokens: int, s: float) -> float:
            return tokens / s if s > 0 else 0.0

        out: dict[str, Any] = {
            "objective": self.objective,
            "phases": {name: {"seconds": s, "tokens": tokens} for name, s, tokens in self.phases()},
            "prompts_per_step": self.prompts_per_step,
            "vllm_server_gpus": self.server_gpus,
        }
        for name, ph in out["phases"].items():
            ph["tokens_per_second"] = rate(ph["tokens"], ph["seconds"])
            if name == "generation" and self.gen is not None:
                ph |= {
                    "prefill_seconds": self.gen.prefill_s,
                    "decode_seconds": self.gen.decode_s,
                    "weight_sync_seconds": self.gen.sync_s,
                    "concurrent_sequences": self.gen.concurrent,
                }
        if self.prompts is not None:
            out |= {"prompts": self.prompts, "train_steps": self.train_steps}
        return out


class TimeTerm(NamedTuple):
    """One part of the step: how long it keeps its resource busy, how much of that the step waits for, and how it
    was computed (its formula's parts, formatted when read, and its source): built where it is computed."""

    name: str
    seconds: float  # busy time per optimizer step (per GPU)
    exposed: float  # the part not hidden behind compute: what it adds to the step
    category: str  # one of CATEGORIES
    parts: tuple[Part, ...] = ()
    source: str = ""

    @property
    def formula(self) -> str:
        return "".join(template.format(*args) for template, args in self.parts)


def time_term(
    name: str, seconds: float, category: str, template: str, *args: Any, source: str, exposed: float | None = None
) -> TimeTerm:
    """A term whose formula is ``template`` formatted with ``args`` when read; exposed = seconds unless given."""
    return TimeTerm(name, seconds, seconds if exposed is None else exposed, category, ((template, args),), source)


LABELS: dict[str, str] = {
    "matmuls": "Matmuls",
    "attention": "Attention core",
    "adapters": "LoRA adapters",
    "memory_ops": "Norms, activations, casts",
    "loss": "Loss over the vocabulary",
    "dequantization": "Dequantization (4/8-bit)",
    "recompute": "Recomputation",
    "host_launch": "Kernel launches (host)",
    "activation_compression": "int8 activation packing",
    "activation_offload": "Activation offload (PCIe)",
    "tp_comm": "TP all-reduces",
    "pp_p2p": "PP sends",
    "ep_all_to_all": "Expert all-to-all",
    "zero3_comm": "ZeRO-3 gathers + scatter",
    "grad_reduce": "Gradient reduction",
    "param_allgather": "Parameter all-gather",
    "offload_transfers": "Host transfers (PCIe)",
    "nvme_reads": "NVMe parameter reads",
    "offload_overlap": "Offload under compute",
    "pipeline_bubble": "Pipeline bubble",
    "optimizer_step": "Optimizer step (GPU)",
    "cpu_optimizer": "Optimizer step (CPU)",
    "nvme_swap": "NVMe swap",
    "generation": "Generation (RL)",
    "scoring": "Scoring forwards (RL)",
    "value_update": "Value model update",
}


@dataclass(frozen=True)
class StepTime:
    """The time model's result. Numbers first; formulas and sources on demand (`explain`)."""

    plan: Plan
    flops_per_step: int  # model FLOPs of one optimizer step, all GPUs (what MFU counts)
    hardware_flops_per_step: int  # with recomputation
    tokens_per_step: int  # global batch in tokens
    step_seconds: float
    terms: tuple[TimeTerm, ...]  # every modelled term; sum of `exposed` == step_seconds
    gpus: int
    peak_flops: float  # per GPU, FLOP/s, of the regime's compute dtype
    mfu_setting: float | None  # the plan's training.mfu: the matmuls' fraction of peak it sets (None: modelled)
    price_per_gpu_hour: float | None
    anchor: str = ""  # whether a measured step time anchors this one (`core.time.anchor.anchor_note`)
    rl: RLTime | None = field(default=None, compare=False)  # DPO/GRPO/PPO: the phases (`core.time.rl_time`)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_second / self.gpus

    @property
    def mfu(self) -> float:
        """Achieved model FLOPs utilization: model FLOPs / (step time x GPUs x dense peak)."""
        return self.flops_per_step / (self.step_seconds * self.gpus * self.peak_flops)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilization: what the GPUs execute, recomputation included, over the same time."""
        return self.hardware_flops_per_step / (self.step_seconds * self.gpus * self.peak_flops)

    def by_category(self) -> dict[str, float]:
        out = dict.fromkeys(CATEGORIES, 0.0)
        for t in self.terms:
            out[t.category] += t.exposed
        return out

    @property
    def bottleneck(self) -> str:
        """The category the step spends most of its time on."""
        cats = self.by_category()
        return max(CATEGORIES, key=lambda c: cats[c])

    def seconds(self, name: str) -> float:
        """Exposed seconds of one term (0 when the plan has no such term)."""
        return next((t.exposed for t in self.terms if t.name == name), 0.0)

    @property
    def tokens(self) -> int | None:
        """The token budget; a DPO/GRPO/PPO plan with ``rl.prompts`` counts prompts: the tokens its steps train."""
        if self.rl is not None and self.rl.train_steps is not None:
            return self.rl.train_steps * self.tokens_per_step
        return self.plan.training.tokens

    @property
    def train_seconds(self) -> float | None:
        return None if self.tokens is None else self.tokens / self.tokens_per_second

    @property
    def train_hours(self) -> float | None:
        return None if self.train_seconds is None else self.train_seconds / 3600

    @property
    def train_steps(self) -> int | None:
        return None if self.tokens is None else -(-self.tokens // self.tokens_per_step)

    @property
    def gpu_hours(self) -> float | None:
        return None if self.train_hours is None else self.train_hours * self.gpus

    @property
    def cost(self) -> float | None:
        if self.gpu_hours is None or self.price_per_gpu_hour is None:
            return None
        return self.gpu_hours * self.price_per_gpu_hour

    def explain(self) -> dict[str, tuple[str, str]]:
        """name -> (formula with this plan's numbers, source), for ``step``, ``mfu`` and each term."""
        if "explain" not in self._cache:
            out = {name: (formula, source) for name, formula, source in self._step_texts()}
            out |= {t.name: (t.formula, t.source) for t in self.terms}
            self._cache["explain"] = out
        explained: dict[str, tuple[str, str]] = self._cache["explain"]
        return explained

    def _step_texts(self) -> list[tuple[str, str, str]]:
        by = self.by_category()
        parts = " + ".join(f"{c} {fmt_seconds(v)}" for c, v in by.items() if v > 0)
        return [
            (
                "step",
                f"{parts} = {fmt_seconds(self.step_seconds)} (exposed seconds of every term)",
                "the terms below, each on its own resource; what runs under compute is not counted twice",
            ),
            (
                "mfu",
                f"model FLOPs {self.flops_per_step:.3g} per step / ({fmt_seconds(self.step_seconds)} x {self.gpus} "
                f"GPUs x {self.peak_flops / 1e12:g} TFLOP/s) = {self.mfu:.1%}",
                "MFU as defined by PaLM (Chowdhery et al. 2022) App. B: model FLOPs, recomputation not counted",
            ),
        ]

    @property
    def expected_error(self) -> ExpectedError:
        """The step time's error on the published timings nearest to this plan (`core.time.accuracy`); loaded on
        first use."""
        from vramplan.core.time.accuracy import plan_expected_error

        return plan_expected_error(self.plan, self.plan.model.arch().total_params)

    def error_text(self) -> str:
        """``± 29% on 14 similar published runs (worst 45% too fast)``."""
        return self.expected_error.text("too fast")

    @property
    def assumed_figures(self) -> str:
        """Why the step time is a guess (a detected GPU without a preset: placeholder figures), or ""."""
        reg = presets.registry()
        gpu_id = self.plan.hardware.gpu
        if reg.origin.get(f"hardware/{gpu_id}") != "detected":
            return ""
        g = presets.gpu(gpu_id)
        return (
            f"assumed: {g.name} has no preset, so its {g.bf16_tflops:g} TFLOP/s and {g.memory_bandwidth_gbs:g} GB/s "
            f"are placeholders and the step time is a guess; add {presets.user_config_dir()}/hardware/{gpu_id}.toml "
            "(the schema of presets/hardware/*.toml) to time it"
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "assumed_figures": self.assumed_figures or None,
            "flops_per_step": self.flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "tokens_per_step": self.tokens_per_step,
            "step_seconds": self.step_seconds,
            "expected_error": self.expected_error.to_json(),
            "anchor": self.anchor or None,
            "tokens_per_second": self.tokens_per_second,
            "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu,
            "mfu": self.mfu,
            "mfu_setting": self.mfu_setting,
            "hfu": self.hfu,
            "peak_tflops": self.peak_flops / 1e12,
            "bottleneck": self.bottleneck,
            "by_category": self.by_category(),
            "terms": {
                t.name: {"seconds": t.seconds, "exposed_seconds": t.exposed, "category": t.category} for t in self.terms
            },
            "explain": {k: {"formula": f, "source": s} for k, (f, s) in self.explain().items()},
        }
        if self.rl is not None:
            out["rl"] = self.rl.to_json()
        if self.tokens is not None:
            out |= {
                "tokens": self.tokens,
                "train_steps": self.train_steps,
                "train_hours": self.train_hours,
                "gpu_hours": self.gpu_hours,
            }
            if self.price_per_gpu_hour is not None:
                out |= {"price_per_gpu_hour": self.price_per_gpu_hour, "cost": self.cost}
        return out
