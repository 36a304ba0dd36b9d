"""What activation checkpointing costs in step time: the recomputed ops timed as the forward's own kernels (issue
28 point 6, issue 38's check).

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", Tables 4-5) measure
+30-40% step time for full recomputation against none on the same model and GPUs: a sanity check here, not a
constant the model is fitted to (it follows from one extra forward: the forward is about a third of the work).
"""

from __future__ import annotations

import pytest

from vramplan.core.plan.architecture.arch import build_arch
from vramplan.core.plan.schema.plan import Plan, default_plan
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
    assert plan.training.mfu is None  # the matmuls' efficiency is modelled
    return plan


def _seconds(**strategy: object) -> float:
    return step_time(_dense_7b_4k(**strategy)).step_seconds


def test_full_recompute_costs_about_one_forward() -> None:
    """Issue 38: full / none for a dense 7B at 4k on 8 x A100 stays within 1.25-1.45."""
    none = _seconds(gradient_checkpointing="none")
    full = _seconds(gradient_checkpointing="full")
    assert 1.25 <= full / none <= 1.45


def test_partial_recomputation_lies_between() -> None:
    none = _seconds(gradient_checkpointing="none")
    full = _seconds(gradient_checkpointing="full")
    for strategy in ({"gradient_checkpointing": "op"}, {"gradient_checkpointing": "full", "checkpoint_every": 2}):
        assert none < _seconds(**strategy) < full, strategy
    # every second block re-runs half of full's recomputation (the rest of the step is the same)
    half = _seconds(gradient_checkpointing="full", checkpoint_every=2)
    assert half - none == pytest.approx((full - none) / 2, rel=0.02)


def test_selective_recomputation_is_free_with_flash_attention_only() -> None:
    """Selective re-runs the attention core; FlashAttention's backward recomputes the scores itself (its backward
    time counts that), so with flash there is nothing more to re-run; eager attention re-runs its QKᵀ, softmax and
    AV."""
    assert _seconds(gradient_checkpointing="selective") == _seconds(gradient_checkpointing="none")
    eager_none = _seconds(gradient_checkpointing="none", attention="eager")
    eager_sel = step_time(_dense_7b_4k(gradient_checkpointing="selective", attention="eager"))
    assert eager_sel.step_seconds > eager_none
    assert eager_sel.seconds("recompute") == pytest.approx(eager_sel.step_seconds - eager_none, rel=1e-9)


def test_recomputation_is_its_own_term_the_rest_unchanged() -> None:
    """The model's kernels take the same time in every mode; recomputation adds its own term and the host its
    launches (none here: a 7B at 4k keeps the GPU busier than the host)."""
    base = step_time(_dense_7b_4k(gradient_checkpointing="none"))
    assert "recompute" not in {t.name for t in base.terms}
    for mode in ("op", "full"):
        st = step_time(_dense_7b_4k(gradient_checkpointing=mode))
        for name in ("matmuls", "attention", "memory_ops", "loss"):
            assert st.seconds(name) == pytest.approx(base.seconds(name)), (mode, name)
        assert st.seconds("recompute") > 0
        assert st.hardware_flops_per_step > st.flops_per_step == base.flops_per_step
    full = step_time(_dense_7b_4k(gradient_checkpointing="full"))
    fwd = full.seconds("matmuls") + full.seconds("attention") + full.seconds("memory_ops")
    # one forward of the blocks: about a third of their forward + backward (less the lm_head's, not re-run)
    assert 0.25 < full.seconds("recompute") / fwd < 0.40


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
    assert "full checkpointing re-runs" in formula and "FLOP" in formula
    assert "Korthikanti" in source and "Tables 4-5" in source and "checkpoint_every = k" in source
