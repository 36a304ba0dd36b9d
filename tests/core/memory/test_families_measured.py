"""The families added in issue 7 (GPT-2, GPT-NeoX, Falcon, Gemma, Phi-3) against real PyTorch measurements.

tests/data/families_truth.json: 30 training steps measured by bench/measure/measure_step.py (torch 2.13 CPU,
transformers 5.24, peft 0.21) on the cases of bench/measure/families_cases.json, each model built from its HF
config keys: fp32, bf16 autocast, pure bf16, SDPA and eager attention, checkpointing, LoRA (Conv1D and fused
projections included). Same bounds as tests/core/memory/test_measured_accuracy.py (activations within 5%, peak between
-5% and +15%), and tighter: the per-block saved bytes and the embedding/head regions to the byte, the peak to 1%
and in the same phase.

The measurements ran on PyTorch's CPU kernels, so the estimate is taken with ``cpu=True``: it differs from the
CUDA prediction only by `core.memory.activations.context.CPU_DIFFERENCES` (LayerNorm statistics dtype, the CPU flash
output layout, autocast's pow), which `test_cuda_prediction_differs_only_by_the_documented_cpu_kernels` pins down.
"""

from __future__ import annotations

import pytest

from tests.conftest import assert_issue_bounds, case_ctx, case_plan_data, load_truth, rel
from vramplan.core.memory.activations.block import checkpointed_layer, embed_saved, head_saved, layer_saved, once_bytes
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

TRUTH = load_truth("families_truth.json")
CASES = sorted(TRUTH)


def test_every_new_family_measured() -> None:
    assert len(TRUTH) == 30
    assert {r["resolved_case"]["family"] for r in TRUTH.values()} == {"gpt2", "gpt_neox", "falcon", "gemma", "phi3"}


@pytest.mark.parametrize("cid", CASES)
def test_case_within_bounds(cid: str) -> None:
    rec = TRUTH[cid]
    f = rec["figures"]
    est = estimate(plan_from_dict(case_plan_data(rec["resolved_case"])), cpu=True)
    peak = assert_issue_bounds(est, f)
    g = est.per_gpu()
    act = f["activation_bytes"] - f["logits_like_bytes"] + f["saved_weight_copy_bytes"]
    # tighter: the mechanisms, not a margin
    assert abs(peak) <= 0.01, peak
    assert est.peak_phase == f["steady_peak_phase"]
    assert abs(rel(g["activations"], act)) <= 0.001, (g["activations"], act)


@pytest.mark.parametrize("cid", CASES)
def test_per_layer_saved_bytes_exact(cid: str) -> None:
    rec = TRUTH[cid]
    c = case_ctx(rec["resolved_case"], cpu=True)
    if c.gc:
        predicted = [checkpointed_layer(c)] * c.arch.L
    else:
        first, rest = layer_saved(c, c.full), layer_saved(c, True)
        # RoPE cos/sin (Falcon-RW: the ALiBi mask) are saved once; the measurement books them on block 0
        predicted = [first.rep + first.split + once_bytes(c)] + [rest.rep + rest.split] * (c.arch.L - 1)
    assert predicted == rec["activations"]["per_layer"]


@pytest.mark.parametrize("cid", CASES)
def test_regions_exact(cid: str) -> None:
    rec = TRUTH[cid]
    c = case_ctx(rec["resolved_case"], cpu=True)
    regions, f = rec["activations"]["by_region"], rec["figures"]
    assert embed_saved(c, c.full or c.gc).rep == regions.get("embedding", 0)
    measured_head = regions.get("final_norm", 0) + regions["head_and_loss"] - f["logits_like_bytes"]
    assert head_saved(c).rep == measured_head
    assert f["logits_like_bytes"] == 4 * c.T * c.arch.V


def test_cuda_prediction_differs_only_by_the_documented_cpu_kernels() -> None:
    """CUDA - CPU per block, from the three mechanisms (T = 256 tokens):
    GPT-2 bf16 autocast, gelu_new (f = 768): CUDA saves fp32 pow input, tanh, 1 + tanh (3 x 4 B), bf16 x/2 and a
    bf16 copy of the fp32 product for c_proj: 16 B per element; the CPU 5 bf16 tensors: 10 B -> 6 x T x f.
    GPT-NeoX/Phi-3 fp32 SDPA: no transposed copy of the attention output on CUDA -> -4 x T x h_q.
    GPT-2 pure bf16: two LayerNorms keep fp32 mean and rstd on CUDA -> 2 x 2 x 2 B x T."""
    T = 256

    def block(cid: str, cpu: bool) -> int:
        saved = layer_saved(case_ctx(TRUTH[cid]["resolved_case"], cpu), True)
        return saved.rep + saved.split

    assert block("gpt2_bf16mixed", False) - block("gpt2_bf16mixed", True) == 6 * T * 768
    assert block("neox_base", False) - block("neox_base", True) == -4 * T * 256
    assert block("phi3_base", False) - block("phi3_base", True) == -4 * T * 256
    assert block("gpt2_bf16", False) - block("gpt2_bf16", True) == 2 * 2 * 2 * T
    for cid in ("gemma_base", "falcon_new_bf16mixed", "falcon_mq_base", "gpt2_base"):
        assert block(cid, False) == block(cid, True), cid


def test_worked_example_gpt2_block() -> None:
    """GPT-2 block, fp32, SDPA, T = b*s = 256, h = 192, f = 768, 6 heads (gpt2_base):
    ln_1 and ln_2: input 4*T*h + mean/rstd 8*T each;  c_attn input 4*T*h;  q, k, v are views of the c_attn output
    4*T*3h;  SDPA output 4*T*h and fp32 log-sum-exp 4*b*a*s;  c_fc input 4*T*h;  gelu_new: input, tanh, 1 + tanh,
    x/2 4 x 4*T*f;  c_proj input 4*T*f  -> 5,515,264 bytes."""
    T, h, f, b, a, s = 256, 192, 768, 2, 6, 128
    norms = 2 * (4 * T * h + 8 * T)
    attention = 4 * T * h + 4 * T * 3 * h + 4 * T * h + 4 * b * a * s
    expected = norms + attention + 4 * T * h + 5 * 4 * T * f
    assert expected == 5_515_264
    saved = layer_saved(case_ctx(TRUTH["gpt2_base"]["resolved_case"], cpu=True), True)
    assert saved.rep + saved.split == expected


def test_worked_example_falcon_shared_layernorm() -> None:
    """Falcon-7B-style block (falcon_mq_base), fp32: one LayerNorm feeds both branches, so its output is saved once
    (by query_key_value; dense_h_to_4h reads the same tensor). Multi-query SDPA runs the math path: q, k and v
    expanded to 8 heads 3 x 4*T*h, probabilities 4*b*a*s^2, the dense input copy 4*T*h, two int64 indices (16 B):
    4*T*h + 8*T (norm) + 4*T*h (norm output) + 5 x 4*T*h + 4*b*a*s*s + 16 + 2 x 4*T*f (MLP) = 4,720,656."""
    T, h, f, b, a, s = 256, 256, 1024, 2, 8, 128
    expected = 4 * T * h + 8 * T + 4 * T * h + 4 * 4 * T * h + 4 * b * a * s * s + 16 + 2 * 4 * T * f
    assert expected == 4_720_656
    saved = layer_saved(case_ctx(TRUTH["falcon_mq_base"]["resolved_case"], cpu=True), True)
    assert saved.rep + saved.split == expected
