"""Dropout in training (issue 43) against real PyTorch: GPT-2 with its config's dropouts on.

tests/data/dropout_truth.json: 5 training steps measured by bench/measure/measure_step.py (torch 2.13 CPU,
transformers 5.25, peft 0.21) on bench/measure/dropout_cases.json: attn_pdrop / resid_pdrop / embd_pdrop 0.1, eager
attention in fp32 and bf16 autocast, residual + embedding dropout under SDPA, LoRA, checkpointing. The estimate is
taken with ``cpu=True``: on the CPU a dropout mask is ``noise`` in the input's dtype (aten Dropout.cpp
``_dropout_impl``), on CUDA a bool (``native_dropout``); `test_cuda_masks_are_bool` pins that difference.
"""

from __future__ import annotations

import pytest

from tests.conftest import assert_issue_bounds, case_ctx, case_plan_data, load_truth, rel
from vramplan.core.memory.activations.block import (
    checkpointed_layer,
    embed_saved,
    layer_saved,
    once_bytes,
)
from vramplan.core.memory.activations.context import ActCtx
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

TRUTH = load_truth("dropout_truth.json")
CASES = sorted(TRUTH)


def test_measured_with_dropout_on() -> None:
    assert len(TRUTH) == 5
    for rec in TRUTH.values():
        c = case_ctx(rec["resolved_case"], cpu=True)
        assert c.resid_dropout and c.embed_dropout


@pytest.mark.parametrize("cid", CASES)
def test_case_within_bounds(cid: str) -> None:
    rec = TRUTH[cid]
    f = rec["figures"]
    est = estimate(plan_from_dict(case_plan_data(rec["resolved_case"])), cpu=True)
    peak = assert_issue_bounds(est, f)
    assert abs(peak) <= 0.01, peak
    assert est.peak_phase == f["steady_peak_phase"]
    act = f["activation_bytes"] - f["logits_like_bytes"] + f["saved_weight_copy_bytes"]
    assert abs(rel(est.per_gpu()["activations"], act)) <= 0.001, (est.per_gpu()["activations"], act)


@pytest.mark.parametrize("cid", CASES)
def test_masks_to_the_byte(cid: str) -> None:
    """Every block's saved bytes, and the embedding's mask (the measurement books ``transformer.drop`` under
    model_other)."""
    rec = TRUTH[cid]
    c = case_ctx(rec["resolved_case"], cpu=True)
    regions = rec["activations"]["by_region"]
    if c.gc:
        predicted = [checkpointed_layer(c)] * c.arch.L
    else:
        first, rest = layer_saved(c, c.full), layer_saved(c, True)
        predicted = [first.rep + first.split + once_bytes(c)] + [rest.rep + rest.split] * (c.arch.L - 1)
    assert predicted == rec["activations"]["per_layer"]
    measured = regions.get("embedding", 0) + regions.get("model_other", 0)
    assert embed_saved(c, c.full or c.gc).rep == measured


def test_what_each_dropout_adds() -> None:
    """Against the same case with its dropouts at 0 (T = 256 tokens, h = 192, b·a·s·s = 196,608), per block, fp32 on
    the CPU: two residual masks 2 x 4 x T x h, the attention mask and the dropped probabilities 2 x 4 x b·a·s·s;
    under autocast the dropped bf16 probabilities replace the bf16 copy: only the bf16 mask, 2 x b·a·s·s."""
    rec = TRUTH["gpt2_dropout_eager"]["resolved_case"]
    on = case_ctx(rec, cpu=True)
    off = on._replace(attn_dropout=False, resid_dropout=False, embed_dropout=False)
    T, h, p2 = 256, 192, 2 * 6 * 128 * 128

    def block(c: ActCtx) -> int:
        saved = layer_saved(c, True)
        return saved.rep + saved.split

    assert block(on) - block(off) == 2 * 4 * T * h + 2 * 4 * p2
    auto = case_ctx(TRUTH["gpt2_dropout_eager_bf16mixed"]["resolved_case"], cpu=True)
    assert block(auto) - block(auto._replace(attn_dropout=False, resid_dropout=False)) == 2 * 2 * T * h + 2 * p2
    assert embed_saved(on, True).rep - embed_saved(off, True).rep == 4 * T * h


def test_cuda_masks_are_bool() -> None:
    """On CUDA every mask is 1 byte an element; under SDPA's fused kernels attention dropout keeps only the
    Philox seed and offset (nothing [s, s])."""
    rec = TRUTH["gpt2_dropout_eager"]["resolved_case"]
    cuda = case_ctx(rec, cpu=False)
    off = cuda._replace(attn_dropout=False, resid_dropout=False, embed_dropout=False)
    T, h, p2 = 256, 192, 2 * 6 * 128 * 128
    on_b, off_b = layer_saved(cuda, True), layer_saved(off, True)
    assert (on_b.rep + on_b.split) - (off_b.rep + off_b.split) == 2 * T * h + p2 + 4 * p2
    flash = case_ctx(TRUTH["gpt2_dropout_resid_sdpa"]["resolved_case"], cpu=False)._replace(attn_dropout=True)
    flash_off = flash._replace(attn_dropout=False, resid_dropout=False)
    on_f, off_f = layer_saved(flash, True), layer_saved(flash_off, True)
    assert (on_f.rep + on_f.split) - (off_f.rep + off_f.split) == 2 * T * h


def test_plans_without_dropout_do_not_change() -> None:
    """The same GPT-2 with its dropouts at 0 estimates exactly as before the mechanism (the families case)."""
    fam = load_truth("families_truth.json")["gpt2_base"]["resolved_case"]
    c = case_ctx(fam, cpu=True)
    assert not (c.attn_dropout or c.resid_dropout or c.embed_dropout)
    assert layer_saved(c, True) == layer_saved(c._replace(attn_dropout=False), True)
