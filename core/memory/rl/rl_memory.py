"""The RL part of an estimate: memory per phase (generation, scoring, the update), which phase is the peak and
why, and each RL term with its formula and source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from vramplan.core.plan.helpers.units import fmt_gib

PHASES = ("generation", "scoring", "update")
PHASE_MEANING = {
    "generation": "the policy generates the completions (its KV cache, or a vLLM engine's share of the GPU)",
    "scoring": "forwards without gradients: old-policy / reference log-probs (PPO: values and rewards)",
    "update": "the policy's forward, backward and optimizer step on the trained sequences",
}


class RLTerm(NamedTuple):
    """One RL quantity: its bytes per training GPU (``server``: per vLLM-server GPU), formula and source."""

    name: str
    bytes: int
    formula: str
    source: str


class PhaseMemory(NamedTuple):
    """The largest moment of one phase: its tensor bytes by kind."""

    name: str
    total: int
    live: dict[str, int]
    moment: str


@dataclass(frozen=True)
class RLMemory:
    """Memory per GPU by phase of a DPO/GRPO/PPO step, the peak phase, and the terms behind it."""

    objective: str
    phases: tuple[PhaseMemory, ...]  # in step order; phases that do not run are absent
    peak_phase: str
    terms: tuple[RLTerm, ...]
    update_sequences: int  # sequences per micro-batch the update trains on (DPO: chosen + rejected)
    update_seq_len: int
    generation_sequences: int  # sequences generated per GPU per step (0: DPO)
    server_gpus: int  # GPUs of a separate vLLM server (0: none)
    server_gpu_bytes: int  # what the server's engine takes of each of them
    engine_short: bool  # a vLLM engine's weights and one sequence's KV cache exceed its utilisation share

    @property
    def why(self) -> str:
        """The peak phase and its largest kinds, in words."""
        top = next(p for p in self.phases if p.name == self.peak_phase)
        kinds = sorted(((v, k) for k, v in top.live.items() if v), reverse=True)[:3]
        parts = ", ".join(f"{k.replace('_', ' ')} {fmt_gib(v, 1)}" for v, k in kinds)
        return f"{self.peak_phase} is the largest phase ({PHASE_MEANING[self.peak_phase]}): {parts}"

    def phase_totals(self) -> dict[str, int]:
        return {p.name: p.total for p in self.phases}

    def to_json(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "peak_phase": self.peak_phase,
            "why": self.why,
            "phases": {
                p.name: {"total": p.total, "moment": p.moment, "live": {k: v for k, v in p.live.items() if v}}
                for p in self.phases
            },
            "update_sequences": self.update_sequences,
            "update_seq_len": self.update_seq_len,
            "generation_sequences": self.generation_sequences,
            "vllm_server_gpus": self.server_gpus,
            "vllm_server_gpu_bytes": self.server_gpu_bytes,
            "vllm_engine_short": self.engine_short,
            "terms": {t.name: {"bytes": t.bytes, "formula": t.formula, "source": t.source} for t in self.terms},
        }
