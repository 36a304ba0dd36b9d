"""What activation checkpointing costs in step time: the recomputed FLOPs at the one math MFU (issue 28 point 6).

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", Tables 4-5) measure
+30-40% step time for full recomputation against none on the same model and GPUs: a sanity check here, not a
constant the model is fitted to (it follows from one extra forward: (2N + 4N + 2N) / 6N = 4/3 of the math).
"""

from __future__ import annotations

import pytest

from vramplan.core.plan.architecture.arch import build_arch
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.plan.schema.training import TrainingConfig
from vramplan.core.time.assumptions import MATH_MFU
from vramplan.core.time.flops import (
    attention_forward_flops,
    forward_matmul_flops,
    lora_forward_flops,
    op_recompute_flops,
    token_flops,
)
from vramplan.core.time.step import step_time

LLAMA_7B = build_arch("llama", 32000, 4096, 11008, 32, 32, 32, False)


def _dense_7b_4k(**strategy: object) -> Plan:
    """LLaMA-7B on 8 x A100-80GB, one 4096-token micro-batch per GPU, ZeRO-3 (the default plan's model and node)."""
    changes: dict[str, object] = {"training.seq_len": 4096, "strategy.zero_stage": 3}
    changes |= {f"strategy.{k}": v for k, v in strategy.items()}
    plan = default_plan().with_changes(changes)
    assert plan.model.preset == "llama-7b" and plan.hardware.gpu == "a100-80gb" and plan.hardware.total_gpus == 8
    assert plan.training.mfu is None  # the default MFU
    return plan


def _seconds(**strategy: object) -> float:
    return step_time(_dense_7b_4k(**strategy)).step_seconds


def test_full_recompute_costs_about_one_forward() -> None:
    none = _seconds(gradient_checkpointing="none")
    full = _seconds(gradient_checkpointing="full")
    # recompute = 2N - 2·V·h + 4·L·s·h_q of 6N + 12·L·s·h_q: 1.33 of the math; Korthikanti Tables 4-5: +30-40%
    assert 1.25 <= full / none <= 1.45


def test_partial_recomputation_lies_between() -> None:
    none = _seconds(gradient_checkpointing="none")
    full = _seconds(gradient_checkpointing="full")
    for strategy in (
        {"gradient_checkpointing": "selective"},
        {"gradient_checkpointing": "op"},
        {"gradient_checkpointing": "full", "checkpoint_every": 2},
    ):
        assert none < _seconds(**strategy) < full, strategy
    # every second block re-runs half of full's recomputation (the rest of the step is the same)
    half = _seconds(gradient_checkpointing="full", checkpoint_every=2)
    assert half - none == pytest.approx((full - none) / 2, rel=0.02)


def test_one_math_mfu_whatever_is_recomputed() -> None:
    """The model FLOPs take the same time in every mode; the recomputation is its FLOPs at that same rate."""
    base = step_time(_dense_7b_4k(gradient_checkpointing="none"))
    for mode in ("selective", "op", "full"):
        st = step_time(_dense_7b_4k(gradient_checkpointing=mode))
        assert st.seconds("compute") == pytest.approx(base.seconds("compute"))
        extra = (st.hardware_flops_per_step - st.flops_per_step) / st.flops_per_step
        assert st.seconds("recompute") == pytest.approx(base.seconds("compute") * extra)
        assert st.mfu_setting == pytest.approx(base.mfu_setting * st.flops_per_step / st.hardware_flops_per_step)
    assert base.seconds("recompute") == 0 and "recompute" not in {t.name for t in base.terms}


def test_recompute_flops_are_the_recomputed_blocks_forward() -> None:
    s, L = 4096, 32
    mm, att, head = forward_matmul_flops(LLAMA_7B), attention_forward_flops(LLAMA_7B, s), 2 * 32000 * 4096
    # one block's forward: 2 x (4 x 4096² + 3 x 4096 x 11008) + 4 x 4096 x 4096 = 404,750,336 + 67,108,864
    block = 2 * LLAMA_7B.layer_weight_params + 4 * s * LLAMA_7B.h_q
    assert block == 471_859_200 and L * block == mm - head + att

    def recompute(mode: str, every: int = 1, full: bool = True, roles: tuple[str, ...] = ()) -> int:
        tok = token_flops(LLAMA_7B, s, full=full, roles=roles, rank=16, checkpointing=mode, checkpoint_every=every)
        assert tok.hardware == tok.model + tok.recompute
        return tok.recompute

    assert recompute("none") == 0
    assert (
        recompute("full")
        == L * block
        == token_flops(LLAMA_7B, s, full=True, roles=(), rank=16, checkpointing="none").forward - head
    )  # the embedding and the lm_head are not re-run
    assert recompute("full", every=2) == 16 * block  # blocks 2, 4, ..., 32
    assert recompute("full", every=3) == 10 * block  # blocks 3, 6, ..., 30
    assert recompute("selective") == att == 4 * L * s * 4096  # QKᵀ and AV of every block
    assert recompute("op") == op_recompute_flops(LLAMA_7B, (), 16)
    assert recompute("op", every=2) == op_recompute_flops(LLAMA_7B, (), 16) // 2
    # LoRA: the frozen base's forward is re-run with the adapters'
    lora = recompute("full", full=False, roles=("q", "v"))
    assert lora == L * block + lora_forward_flops(LLAMA_7B, ("q", "v"), 16)


def test_explain_shows_the_recompute_term() -> None:
    st = step_time(_dense_7b_4k(gradient_checkpointing="full", checkpoint_every=2))
    formula, source = st.explain()["recompute"]
    assert "16 blocks" in formula and "checkpoint_every = 2" in formula and "math MFU" in formula
    assert "Korthikanti" in source and "Tables 4-5" in source
    assert "math MFU" in st.explain()["compute"][0]


def test_the_mfu_key_documents_the_default() -> None:
    """issue 32 point 6: `vramplan keys` shows how the auto MFU is chosen, with the figures the code uses."""
    doc = TrainingConfig.model_fields["mfu"].description or ""
    assert f"A100 {MATH_MFU['ampere'].m0:g}" in doc and f"H100-class {MATH_MFU['hopper'].m0:g}" in doc
    assert "model / hardware FLOPs" in doc
