"""Per-block saved bytes, tensor by tensor, against the per-layer measurements of the oracle."""

from __future__ import annotations

import pytest

from tests.conftest import case_ctx, load_truth
from vramplan.core.memory.activations.block import checkpointed_layer, embed_saved, head_saved, layer_saved, once_bytes
from vramplan.core.memory.activations.context import ActCtx

TRUTH = {
    **load_truth("oracle_truth.json"),
    **load_truth("extra_truth.json"),
    **load_truth("random_truth.json"),
    **load_truth("random2_truth.json"),
}
WITH_LAYERS = sorted(cid for cid, r in TRUTH.items() if r.get("activations", {}).get("per_layer"))


def cpu_layernorm_adjust(c: ActCtx) -> int:
    """PyTorch's CPU layer_norm keeps mean/rstd in the input dtype (bf16 for a bf16 model), CUDA in fp32
    (aten/src/ATen/native/cuda/layer_norm_kernel.cu: ``at::toAccumulateType(..., /*is_cuda=*/true)``). vramplan
    models CUDA; the CPU measurement is 4 bytes per token smaller per LayerNorm of a bf16 model."""
    if c.arch.fam.norm == "layer" and c.reg.name == "bf16-pure":
        return 4 * c.T
    return 0


@pytest.mark.parametrize("cid", WITH_LAYERS)
def test_per_layer_saved_bytes_exact(cid: str) -> None:
    rec = TRUTH[cid]
    c = case_ctx(rec["resolved_case"])
    measured = rec["activations"]["per_layer"]
    if c.gc:
        predicted = [checkpointed_layer(c)] * c.arch.L
    else:
        first = layer_saved(c, c.full)
        rest = layer_saved(c, True)
        adjust = 2 * cpu_layernorm_adjust(c)  # two LayerNorms per block
        # RoPE cos/sin are saved once; the oracle books them on block 0
        predicted = [first.rep + first.split + once_bytes(c) - adjust] + [rest.rep + rest.split - adjust] * (
            c.arch.L - 1
        )
    assert predicted == measured


@pytest.mark.parametrize("cid", WITH_LAYERS)
def test_regions_exact(cid: str) -> None:
    rec = TRUTH[cid]
    c = case_ctx(rec["resolved_case"])
    regions = rec["activations"]["by_region"]
    adjust = cpu_layernorm_adjust(c)
    embed = embed_saved(c, c.full or c.gc).rep
    assert embed - (adjust if embed and c.arch.fam.embed_norm else 0) == regions.get("embedding", 0)
    head = head_saved(c)
    measured_head = regions["final_norm"] + regions["head_and_loss"] - rec["figures"]["logits_like_bytes"]
    # the loss keeps one or a few 4-byte scalars (total_weight, the count of tokens): allow 16 bytes of them
    assert 0 <= measured_head - (head.rep - adjust) <= 16
    assert rec["figures"]["logits_like_bytes"] == 4 * c.T * c.arch.V


def test_worked_example_llama_block() -> None:
    """LLaMA block, fp32, SDPA, b=2 s=128 h=256 f=688, 8 heads (oracle llama_base, layer 1):
    norms 2 x (fp32 input 4*T*h + rsqrt 4*T + normed 4*T*h) = 2 x 525,312
    attention: q/k/v input 4*T*h + q, k, v 3 x 4*T*h + output 4*T*h + fp32 LSE 4*b*a*s = 1,318,912
    MLP: input 4*T*h + gate, SiLU out, up, product 4 x 4*T*f = 3,080,192   (T = 256)
    total 5,449,728 bytes."""
    case = TRUTH["llama_base"]["resolved_case"]
    c = case_ctx(case)
    T, h, f = 256, 256, 688
    expected = 2 * (8 * T * h + 4 * T) + (5 * 4 * T * h + 4 * 2 * 8 * 128) + (4 * T * h + 4 * 4 * T * f)
    assert expected == 5_449_728
    saved = layer_saved(c, True)
    assert saved.rep + saved.split == expected
