"""ZeRO paper §5 (Rajbhandari et al. 2020): 7.5B parameters on 64 GPUs, mixed-precision Adam (2 + 2 + 12 bytes):
model states per GPU 120 GB baseline, 31.4 GB ZeRO-1 (4 + 12/64 B), 16.6 GB ZeRO-2 (2 + 14/64 B),
1.9 GB ZeRO-3 (16/64 B)."""

from __future__ import annotations

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

# A LLaMA-shaped model of 7.5B parameters: h 4096, f 11008, 36 blocks, vocab 32000, untied:
# 36 x 202,383,360 + 2 x 131,072,000 + 4,096 = 7,547,949,056
MODEL = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "tie_word_embeddings": False,
}


def model_states_gb(zero: int) -> float:
    plan = plan_from_dict(
        {
            "model": MODEL,
            "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 8},
            "training": {"precision": "bf16-master", "optimizer": "adamw"},
            "strategy": {"zero_stage": zero},
        }
    )
    est = estimate(plan)
    assert est.params_total == 7_547_949_056
    g = est.per_gpu()
    states = g["parameters"] + g["gradients"] + g["optimizer_states"]
    return states / est.params_total * 7.5e9 / 1e9  # scaled to the paper's 7.5B


@pytest.mark.parametrize(("zero", "paper_gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_section5(zero: int, paper_gb: float) -> None:
    assert model_states_gb(zero) == pytest.approx(paper_gb, abs=0.05)
