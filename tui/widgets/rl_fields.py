"""The objective (SFT, DPO, GRPO, PPO) and its ``[rl]`` keys at the foot of the Training pane (`core.plan.schema.rl`):
only the keys of the plan's objective show (the vLLM ones only with a vLLM engine), with the memory of each phase
and the time of each part of the step under them. An SFT plan shows the objective alone."""

from __future__ import annotations

from collections.abc import Iterator

from textual.widget import Widget
from textual.widgets import Label, Static

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.units import gib_text
from vramplan.core.plan.schema.rl import APPLIES, VLLM_KEYS
from vramplan.core.time.record import StepTime
from vramplan.tui.choices import Choice
from vramplan.tui.widgets.fields import ChoiceField, IntField, NumberField, TextField, field_id
from vramplan.tui.widgets.text import show_text

GENERATION = (
    Choice(None, "hf", "rl: generation by model.generate (TRL use_vllm = False)"),
    Choice("vllm-colocate", "vLLM colocate", "rl: a vLLM engine on each training GPU"),
    Choice("vllm-server", "vLLM server", "rl: vLLM on separate GPUs"),
)
REFERENCE = (
    Choice(None, "auto", "rl: reference as TRL chooses (none at beta 0, adapter under LoRA, else copy)"),
    Choice("copy", "copy", "rl: a frozen copy of the policy"),
    Choice("adapter", "adapter", "rl: the base with LoRA's adapters disabled"),
    Choice("precomputed", "precomputed", "rl: reference log-probs precomputed (DPO)"),
    Choice("none", "none", "rl: no reference"),
)
SLEEP = (Choice(None, "off", "rl: vLLM stays resident"), Choice(True, "on", "rl: vLLM sleeps outside generation"))
PADDING = (
    Choice(None, "padded", "rl: a padded batch: SDPA saves each layer's [b, 1, s, s] mask"),
    Choice(True, "free", "rl: no padding (TRL padding_free, flattened sequences)"),
)
SHARDING = (
    Choice(None, "auto", "rl: frozen models sharded under ZeRO-3, else a copy per GPU (TRL prepare_deepspeed)"),
    Choice("sharded", "sharded", "rl: frozen models sharded over the data-parallel GPUs"),
    Choice("replicated", "replicated", "rl: a full copy of each frozen model per GPU"),
)
FROZEN_OFFLOAD = (
    Choice(None, "none", "rl: frozen weights on the GPU"),
    Choice("cpu", "cpu", "rl: frozen weights on the host, streamed per block (verl param_offload)"),
)


def _count(key: str, label: str, placeholder: str, tooltip: str) -> IntField:
    """An optional whole number (empty: unset, TRL's default)."""
    return IntField(key, label, optional=True, placeholder=placeholder, tooltip=tooltip)


def rl_rows() -> Iterator[Widget]:
    """The objective and its keys (the Training pane's last section)."""
    yield Label("post-training (DPO, GRPO, PPO: TRL's arguments)", classes="section")
    yield ChoiceField("training.objective", "objective", tooltip="sft: next-token loss; dpo/grpo/ppo: [rl] keys")
    yield _count("rl.max_length", "max_length", "1024 (DPOConfig)", "DPO: prompt + longest response, tokens")
    yield _count("rl.max_prompt_length", "prompt tokens", "512", "GRPO/PPO: max_prompt_length")
    yield _count("rl.max_completion_length", "completion tokens", "GRPO 512, PPO 53", "max_completion_length")
    yield _count("rl.num_generations", "generations", "8 (GRPOConfig)", "GRPO: completions per prompt (>= 2)")
    yield _count("rl.num_iterations", "iterations (mu)", "1 (GRPOConfig)", "GRPO: updates per generated batch")
    yield NumberField("rl.beta", "beta", placeholder="DPO 0.1, GRPO 0, PPO 0.05", tooltip="KL coefficient")
    yield ChoiceField("rl.reference", "reference", REFERENCE, tooltip="the reference model's log-probs")
    yield ChoiceField("rl.generation", "generation", GENERATION, tooltip="TRL use_vllm + vllm_mode")
    yield NumberField(
        "rl.vllm_gpu_memory_utilization", "vLLM share", placeholder="0.3 colocate, 0.9 server", tooltip="(0, 1]"
    )
    yield _count("rl.vllm_tensor_parallel_size", "vLLM TP", "1", "GPUs per vLLM engine")
    yield ChoiceField("rl.vllm_enable_sleep_mode", "vLLM sleep", SLEEP, tooltip="free vLLM outside generation")
    yield ChoiceField("rl.padding_free", "padding", PADDING, tooltip="TRL padding_free: the update batch")
    yield ChoiceField("rl.frozen_sharding", "frozen sharding", SHARDING, tooltip="reference and reward weights")
    yield ChoiceField("rl.frozen_offload", "frozen offload", FROZEN_OFFLOAD, tooltip="reference and reward weights")
    yield TextField("rl.reward_model", "reward model", placeholder="the policy's", tooltip="PPO: a model preset")
    yield TextField("rl.value_model", "value model", placeholder="the policy's", tooltip="PPO: a model preset")
    yield _count("rl.prompts", "prompts", "unset (the token budget)", "prompts to train on, for the time to train")
    yield Static(id="rl-details", classes="details")


def rl_visible(objective: str, generation: str | None) -> dict[str, bool]:
    """Which ``[rl]`` rows show for a plan's objective and generation engine."""
    vllm = (generation or "hf").startswith("vllm")
    out = {}
    for key, objectives in APPLIES.items():
        out[f"rl.{key}"] = objective in objectives and (vllm or key not in VLLM_KEYS)
    if generation == "vllm-server":
        out["rl.vllm_enable_sleep_mode"] = False
    return out


def show_rl(pane: Widget, est: Estimate, st: StepTime) -> None:
    """Show the rows of the plan's objective, and its memory and time by phase."""
    plan = est.plan
    for key, shown in rl_visible(plan.training.objective, plan.rl.generation).items():
        pane.query_one(f"#{field_id(key)}").display = shown
    details = pane.query_one("#rl-details", Static)
    rl, tt = est.rl, st.rl
    details.display = rl is not None
    if rl is None or tt is None:
        return
    memory = " · ".join(f"{p.name} {gib_text(p.total, 1)}" for p in rl.phases)
    text = f"GiB per GPU: {memory}; peak: [b]{rl.peak_phase}[/b]\n{' · '.join(tt.phase_texts())}"
    if rl.server_gpus:
        text += f"\nvLLM server: {rl.server_gpus} more GPU(s), {gib_text(rl.server_gpu_bytes, 1)} GiB each"
    if rl.engine_short:
        text += "\n[b]vLLM cannot start[/b]: its weights and one sequence's KV cache exceed its share"
    show_text(details, text)
