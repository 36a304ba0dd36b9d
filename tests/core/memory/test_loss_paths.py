"""The unfused loss's paths (``strategy.loss_path``, issue 43) against what PyTorch's CPU allocator measured of each
transformers version's loss lines (tests/data/stacks/loss_paths.json, bench/data/loss_paths.py), the stack rows that
pick them, and what each does to a whole step.

Units of the measurement: TV = T·V elements, T = b·s = 512, V = 4,096, so one fp32 [T, V] tensor is 8 MiB. The
shifted paths hold [T - b, V] tensors where the estimate counts [T, V] (b·V·4 = 32 KiB less each, at most three at
once); the loss's labels and scalars are the 8 KiB of `LOSS_SLACK`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import DATA
from vramplan.core.memory.activations.context import plan_ctx
from vramplan.core.memory.activations.loss import LossBytes, loss_bytes
from vramplan.core.memory.activations.stage import plan_layout
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict

PATHS = json.loads((DATA / "stacks" / "loss_paths.json").read_text())
C = PATHS["config"]
TV4 = PATHS["units"]["TV_fp32"]
LOSS_SLACK = 8 * 1024 + 20
SHIFT_ROWS = 3 * PATHS["units"]["bV_fp32"]
PRECISION = {"bfloat16": "bf16-pure", "float32": "fp32"}


def loss_plan(path: str, dtype: str, **changes: Any) -> Plan:
    """The measured head (b=2, s=256, h=256, V=4096, untied) as a full fine-tuning plan."""
    data: dict[str, Any] = {
        "model": {
            "model_type": "llama",
            "vocab_size": C["V"],
            "hidden_size": C["h"],
            "intermediate_size": 768,
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "tie_word_embeddings": False,
        },
        "hardware": {"gpu": "h200", "gpus_per_node": 1},
        "training": {"micro_batch_size": C["b"], "seq_len": C["s"], "precision": PRECISION[dtype], "method": "full"},
        "strategy": {"loss_path": path},
    }
    for key, value in changes.items():
        table, name = key.split(".")
        data.setdefault(table, {})[name] = value
    return plan_from_dict(data)


def path_loss(path: str, dtype: str) -> LossBytes:
    plan = loss_plan(path, dtype)
    return loss_bytes(plan_ctx(plan, True), plan_layout(plan))


@pytest.mark.parametrize("run", PATHS["runs"], ids=lambda r: f"{r['variant']}-{r['dtype']}")
def test_each_path_saves_and_holds_what_the_cpu_measured(run: dict[str, Any]) -> None:
    """After the loss: the saved log-softmax (+ the logits a loop keeps); its forward peak; the backward's start."""
    lb = path_loss(run["variant"], run["dtype"])
    slack = LOSS_SLACK + SHIFT_ROWS
    assert abs(run["saved_after_loss"] - (lb.saved + lb.kept)) <= slack
    assert abs(run["fwd_peak"] - (lb.saved + lb.fwd)) <= slack
    assert abs(run["bwd_peak"] - (lb.saved + lb.bwd + lb.kept)) <= slack
    assert run["allocator_consistent"]


def test_the_paths_in_words() -> None:
    """bf16 logits, in fp32 [T, V] units: forward 2.5 / 3.5 / 3 / 3 / 1, backward start 3 / 3 / 3 / 4 / 1.5 (the
    measured figures, to the shift rows)."""
    fwd = {p: (path_loss(p, "bfloat16").saved + path_loss(p, "bfloat16").fwd) / TV4 for p in _paths()}
    assert fwd == {
        "upcast": 2.5,
        "upcast-shifted": 3.5,
        "model-upcast": 3.0,
        "model-upcast-kept": 3.0,
        "model-dtype": 1.0,
    }
    kept = path_loss("model-upcast-kept", "bfloat16")
    assert (kept.saved + kept.bwd + kept.kept) / TV4 == 4.0 and kept.kept == TV4
    # fp32 logits: the upcast is no copy, model-dtype is the upcast path
    assert path_loss("model-dtype", "float32")[:3] == path_loss("upcast", "float32")[:3]
    assert path_loss("upcast", "float32").fwd == TV4


def _paths() -> tuple[str, ...]:
    return tuple(dict.fromkeys(r["variant"] for r in PATHS["runs"]))


def test_the_kept_logits_stay_through_backward_and_free_no_block() -> None:
    """The kept fp32 logits are in every backward moment; 16-bit logits freed before backward strand their block
    (freed_logits) on every upcast path, not when the loss runs in their own dtype (its gradients reuse it)."""
    est = estimate(loss_plan("model-upcast-kept", "bfloat16"), cpu=True)
    backward = [p for p in est.phases if p.name == "backward"]
    assert all(p.live["logits"] >= TV4 for p in backward)
    assert path_loss("model-upcast", "bfloat16").freed == TV4 // 2
    assert path_loss("model-dtype", "bfloat16").freed == 0
    assert path_loss("upcast", "float32").freed == 0


def test_stack_rows_pick_the_path_of_the_transformers_version() -> None:
    def chosen(**stack: str) -> str | None:
        return default_plan().with_changes({f"stack.{k}": v for k, v in stack.items()}).strategy.loss_path

    assert chosen() == "upcast"
    assert chosen(framework="hf-trainer", transformers="4.40.2") == "model-upcast"
    assert chosen(framework="llamafactory", transformers="4.46.1") == "upcast-shifted"
    assert chosen(framework="trl", transformers="4.49.0") == "upcast"
    assert chosen(framework="custom", transformers="4.38") == "model-upcast"
    # Unsloth patches the causal-LM forward with its own loss; torchtitan and torchtune have their own loops
    assert chosen(framework="unsloth", transformers="4.40.2") == "upcast"
    assert chosen(framework="torchtitan") == "upcast"
    explicit = default_plan().with_changes({"stack.transformers": "4.40.2", "strategy.loss_path": "model-dtype"})
    assert explicit.strategy.loss_path == "model-dtype"


def test_a_fused_or_chunked_loss_ignores_the_path() -> None:
    for key, value in (("strategy.fused_cross_entropy", True), ("strategy.loss_chunks", 8)):
        a, b = (
            estimate(loss_plan(p, "bfloat16", **{key: value}), cpu=True).largest["logits"]
            for p in ("upcast", "model-upcast-kept")
        )
        assert a == b


def test_a_7b_qlora_step_holds_one_fp32_logits_more_when_the_loop_keeps_its_output() -> None:
    """Answer.AI's fsdp_qlora train.py keeps ``output`` (transformers 4.38: fp32 logits) through ``loss.backward()``:
    at 10 x 2048 tokens on Llama-2-7B that is 4 B x 20,480 x 32,000 = 2.44 GiB more at the start of backward."""
    base = default_plan().with_changes(
        {
            "model.preset": "llama-2-7b",
            "training.method": "qlora",
            "training.micro_batch_size": 10,
            "training.seq_len": 2048,
            "strategy.gradient_checkpointing": "full",
        }
    )
    up, kept = (estimate(base.with_changes({"strategy.loss_path": p})) for p in ("model-upcast", "model-upcast-kept"))
    assert kept.peak.live["logits"] - up.peak.live["logits"] == 4 * 20_480 * 32_000
    assert kept.allocated - up.allocated == 4 * 20_480 * 32_000
