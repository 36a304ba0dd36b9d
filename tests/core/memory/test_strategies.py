"""Worked numbers for the strategies the CPU measurements cannot exercise (ZeRO, TP, PP, offload, QLoRA, fused
cross-entropy, int8 activations), each derived by hand from the frameworks' accounting."""

from __future__ import annotations

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.plan.schema.precision import quantized_bytes

P7 = 6_738_415_616  # LLaMA-7B
V, H, L, F = 32000, 4096, 32, 11008
LAYER = 4 * H * H + 3 * H * F + 2 * H  # 202,383,360


def plan(**changes: object) -> Plan:
    return default_plan().with_changes({k.replace("__", "."): v for k, v in changes.items()})


def test_bf16_master_zero1_model_states() -> None:
    # 2 B bf16 weights + 2 B bf16 grads on every rank; 12 B (fp32 master + m + v) sharded over 8 ranks
    g = estimate(plan(training__precision="bf16-master", strategy__zero_stage=1)).per_gpu()
    assert g["parameters"] == 2 * P7
    assert g["gradients"] == 2 * P7
    assert g["optimizer_states"] == 12 * P7 // 8


def test_zero2_shards_gradients_zero3_parameters() -> None:
    z2 = estimate(plan(training__precision="bf16-master", strategy__zero_stage=2)).per_gpu()
    z3 = estimate(plan(training__precision="bf16-master", strategy__zero_stage=3)).per_gpu()
    assert z2["gradients"] == 2 * P7 // 8 and z2["parameters"] == 2 * P7
    assert z3["parameters"] == 2 * P7 // 8
    # ZeRO-3 gathers the module in use (the largest: a block of 202M or the 131M vocabulary) + the next block,
    # in 16 bit: (202,383,360 + 202,383,360) x 2 B
    assert z3["gathered_parameters"] == 2 * LAYER * 2


def test_tensor_parallel_splits_linears_and_vocab_not_norms() -> None:
    # TP 2 x DP 4: block linears and the (vocab-parallel) embedding and lm_head are halved, norms replicated
    g = estimate(plan(strategy__tensor_parallel=2, strategy__zero_stage=0)).per_gpu()
    local = 2 * (V * H // 2) + L * ((LAYER - 2 * H) // 2 + 2 * H) + H
    assert g["parameters"] == 4 * local  # fp32 weights under autocast


def test_pipeline_first_stage_holds_p_micro_batches() -> None:
    # PP 4, 8 micro-batches: stage 0 has the embedding + 8 blocks and 4 micro-batches in flight (1F1B);
    # the last stage has 8 blocks, the head and 1 micro-batch
    two = estimate(
        plan(
            strategy__pipeline_parallel=4,
            strategy__zero_stage=1,
            training__grad_accum_steps=2,
            strategy__gradient_checkpointing="none",
        )
    )
    four = estimate(
        plan(
            strategy__pipeline_parallel=4,
            strategy__zero_stage=1,
            training__grad_accum_steps=8,
            strategy__gradient_checkpointing="none",
        )
    )
    assert two.stage == four.stage == "first"
    assert four.per_gpu()["parameters"] == 4 * (V * H + 8 * LAYER)
    # min(p, micro-batches) in flight: 2 with 2 micro-batches, 4 (= p) with 8
    assert four.largest["activations"] == 2 * two.largest["activations"]


def test_cpu_offload_moves_optimizer_and_fp32_gradients_to_the_host() -> None:
    est = estimate(plan(training__precision="bf16-master", strategy__zero_stage=2, strategy__offload_optimizer="cpu"))
    g = est.per_gpu()
    assert g["optimizer_states"] == 0 and g["gradients"] == 0
    # host: fp32 master 4 + AdamW 8 + fp32 gradient 4 bytes per parameter of each rank's partition, 8 ranks
    assert est.cpu_per_node == 16 * (P7 // 8) * 8


def test_qlora_nf4_double_quantization_bytes() -> None:
    # QLoRA §3: 4 bits + an 8-bit absmax per 64 values + an fp32 constant per 256 absmax blocks; each QuantState
    # adds its 16-entry fp32 code (64 B), the nested one its 256-entry code and offset (1,028 B)
    n = 4096 * 11008
    blocks = n // 64
    assert quantized_bytes(4096, 11008, "nf4", True) == n // 2 + blocks + 4 * -(-blocks // 256) + 64 + 1028
    assert quantized_bytes(4096, 11008, "nf4", False) == n // 2 + 4 * blocks + 64
    est = estimate(
        plan(
            training__method="qlora", training__precision="bf16-pure", strategy__zero_stage=0, hardware__gpus_per_node=1
        )
    )
    lin = L * sum(quantized_bytes(i, o, "nf4", True) for i, o in [(H, H)] * 4 + [(H, F)] * 2 + [(F, H)])
    lora = L * 2 * 8 * (H + H)  # q and v, rank 8, fp32 adapters (peft keeps adapters fp32)
    frozen_16bit = 2 * (2 * V * H + L * 2 * H + H)  # embeddings, lm_head, norms in bf16
    assert est.per_gpu()["parameters"] == lin + frozen_16bit + 4 * lora
    assert est.params_trainable == lora


def test_fused_cross_entropy_drops_the_vocab_sized_tensors() -> None:
    plain = estimate(plan(strategy__zero_stage=3))
    fused = estimate(plan(strategy__zero_stage=3, strategy__fused_cross_entropy=True))
    assert plain.largest["logits"] == 3 * 4 * 2048 * V  # saved fp32 log-softmax + its two gradients
    assert fused.largest["logits"] < plain.largest["logits"] / 5


def test_int8_activations_compress_saved_tensors() -> None:
    base = estimate(
        plan(strategy__gradient_checkpointing="none", strategy__zero_stage=3, training__precision="bf16-pure")
    )
    int8 = estimate(
        plan(
            strategy__gradient_checkpointing="none",
            strategy__zero_stage=3,
            training__precision="bf16-pure",
            strategy__activation_compression="int8",
        )
    )
    # bf16 activations (2 B, plus fp32 norm inputs) become 1 B + a 4 B scale per 64 values: at least 45% less
    assert int8.largest["activations"] < 0.55 * base.largest["activations"]


@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_flash_and_selective_remove_the_s2_term(attention: str) -> None:
    def acts(seq: int, ckpt: str) -> int:
        return estimate(
            plan(
                strategy__attention=attention,
                strategy__gradient_checkpointing=ckpt,
                training__seq_len=seq,
                strategy__zero_stage=3,
            )
        ).largest["activations"]

    # flash attention and selective recompute keep memory linear in the sequence length
    assert acts(4096, "selective") == pytest.approx(2 * acts(2048, "selective"), rel=0.01)
    if attention == "flash":
        assert acts(4096, "none") == pytest.approx(2 * acts(2048, "none"), rel=0.01)
        assert acts(2048, "none") == acts(2048, "selective")  # flash already removes what selective saves
    else:
        assert acts(4096, "none") > 2.5 * acts(2048, "none")  # eager saves [b, heads, s, s] per block


def test_gradient_accumulation_keeps_gradients_during_forward() -> None:
    # oracle llama_ga2: from micro-batch 2 on, every gradient is allocated during forward and backward
    one = estimate(
        plan(
            strategy__zero_stage=0,
            hardware__gpus_per_node=1,
            training__precision="bf16-pure",
            training__optimizer="sgd",
            strategy__gradient_checkpointing="none",
        )
    )
    two = estimate(
        plan(
            strategy__zero_stage=0,
            hardware__gpus_per_node=1,
            training__precision="bf16-pure",
            training__optimizer="sgd",
            strategy__gradient_checkpointing="none",
            training__grad_accum_steps=2,
        )
    )
    fwd1 = next(p for p in one.phases if p.name == "forward")
    fwd2 = next(p for p in two.phases if p.name == "forward")
    assert fwd1.live["gradients"] == 0
    assert fwd2.live["gradients"] == 2 * P7
