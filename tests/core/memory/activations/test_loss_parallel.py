"""DTensor's loss_parallel (torchtitan with tensor parallelism): the decomposed log-softmax and the fused
nll_loss + log_softmax backward of torch/distributed/tensor/parallel/loss.py hold one fp32 [T, V / tp] more than
ATen's kernels, in forward and at the start of backward (identities; no GPU measurement here)."""

from __future__ import annotations

from typing import Any

from vramplan.core.memory.activations.context import plan_ctx
from vramplan.core.memory.activations.loss import gathered_head_input, loss_parallel, loss_parallel_on
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.schema.plan import Plan, plan_from_dict

T, TP = 2 * 2048, 4


def _plan(framework: str, **changes: Any) -> Plan:
    data: dict[str, dict[str, Any]] = {
        "model": {"preset": "llama-3-8b"},
        "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 1},
        "training": {"micro_batch_size": 2, "seq_len": 2048, "precision": "bf16-fsdp", "method": "full"},
        "strategy": {
            "gradient_checkpointing": "full",
            "attention": "flash",
            "zero_stage": 3,
            "tensor_parallel": TP,
            "sequence_parallel": True,
        },
        "stack": {"framework": framework},
    }
    for key, value in changes.items():
        table, name = key.split(".")
        data[table][name] = value
    return plan_from_dict(data)


def _logits(e: Estimate, moment: int) -> int:
    return e.phases[moment].live["logits"]


def test_the_transients_on_small_numbers() -> None:
    # forward: 16-bit logits + upcast (fwd) and one more fp32 [T, V/tp] (shifted beside exp); backward: three
    assert loss_parallel(30, 40) == (70, 120)
    assert loss_parallel_on(8, "torchtitan") and not loss_parallel_on(1, "torchtitan")
    assert not loss_parallel_on(8, "custom") and not loss_parallel_on(8, "megatron")


def test_torchtitan_tp_holds_one_fp32_logits_more() -> None:
    titan, plain = estimate(_plan("torchtitan")), estimate(_plan("custom"))
    V = titan.plan.model.arch().V
    f = 4 * T * V // TP  # one fp32 [T, V / tp]
    # moment 0: end of forward (saved log-softmax + bf16 logits + upcast + shifted); 1: the loss's backward
    assert _logits(titan, 0) == f + 2 * T * V // TP + f + f
    assert _logits(titan, 1) == 4 * f
    assert _logits(titan, 1) - _logits(plain, 1) == f
    assert _logits(titan, 0) - _logits(plain, 0) == f
    assert titan.peak.total >= plain.peak.total  # (the peak may be another moment)
    assert "loss_parallel" in titan.components["logits"].formula


def test_no_tensor_parallelism_no_loss_parallel() -> None:
    one = {"strategy.tensor_parallel": 1, "strategy.sequence_parallel": False}
    titan, plain = estimate(_plan("torchtitan", **one)), estimate(_plan("custom", **one))
    assert _logits(titan, 1) == _logits(plain, 1)


def test_the_lm_head_saves_its_all_gathered_input() -> None:
    titan, plain = estimate(_plan("torchtitan")), estimate(_plan("custom"))
    h = titan.plan.model.arch().h
    full = 2 * T * h  # the final norm's bf16 [T, h] output, gathered over the sequence by ColwiseParallel
    assert gathered_head_input(plan_ctx(titan.plan), TP) == full - full // TP
    saved = titan.phases[1].live["activations"] - plain.phases[1].live["activations"]
    assert saved == full - full // TP
    # no sequence sharding, nothing gathered: the input was whole already
    nosp = {"strategy.sequence_parallel": False}
    assert (
        estimate(_plan("torchtitan", **nosp)).phases[1].live["activations"]
        == (estimate(_plan("custom", **nosp)).phases[1].live["activations"])
    )
