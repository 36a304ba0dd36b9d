"""The time model term by term, with worked numbers (core/time/flops.py, core/time/comm.py, core/time/step.py)."""

from __future__ import annotations

import math

import pytest

from vramplan.core.plan.architecture.arch import build_arch
from vramplan.core.plan.catalogue.presets import gpu
from vramplan.core.plan.schema.plan import default_plan, plan_from_dict
from vramplan.core.plan.schema.precision import quantized_bytes
from vramplan.core.time.attention_time import flash, flash_fraction
from vramplan.core.time.chip import MEMORY_EFFICIENCY, chip
from vramplan.core.time.comm import (
    LINK_EFFICIENCY,
    Link,
    all_gather_seconds,
    all_reduce_seconds,
    links,
    reduce_scatter_seconds,
)
from vramplan.core.time.flops import (
    attention_forward_flops,
    forward_matmul_flops,
    lora_forward_flops,
    optimizer_bytes_per_element,
    token_flops,
)
from vramplan.core.time.kernels import matmul, split_k, wave_efficiency
from vramplan.core.time.launch import EAGER_FORWARD_S, ENGINE_S
from vramplan.core.time.offload import HOST_MEMORY_GBS_PER_NODE
from vramplan.core.time.record import CATEGORIES
from vramplan.core.time.step import step_time

LLAMA_7B = build_arch("llama", 32000, 4096, 11008, 32, 32, 32, False)
# matmul weights: 32 layers x (4 x 4096² attention + 3 x 4096 x 11008 MLP) + 32000 x 4096 lm_head
#   = 32 x (67,108,864 + 135,266,304) + 131,072,000 = 6,476,005,376 + 131,072,000 = 6,607,077,376
N_7B = 6_607_077_376


def test_forward_matmul_flops_is_2n() -> None:
    assert LLAMA_7B.matmul_weight_params == N_7B
    assert forward_matmul_flops(LLAMA_7B) == 2 * N_7B == 13_214_154_752


def test_attention_flops_palm_term() -> None:
    # 4·L·s·h_q = 4 x 32 x 2048 x 4096 = 1,073,741,824 forward; PaLM's 12·L·H·Q·T is 3x that
    att = attention_forward_flops(LLAMA_7B, 2048)
    assert att == 1_073_741_824
    assert 3 * att == 12 * 32 * 4096 * 2048


def test_full_training_is_6n_plus_attention_and_8n_with_recompute() -> None:
    none = token_flops(LLAMA_7B, 2048, full=True, roles=(), rank=8, checkpointing="none")
    assert none.model == none.hardware == 6 * N_7B + 12 * 32 * 2048 * 4096 == 42_863_689_728
    full = token_flops(LLAMA_7B, 2048, full=True, roles=(), rank=8, checkpointing="full")
    assert full.model == none.model
    # 8N: the blocks' forward runs twice; the lm_head (2·V·h = 2 x 32000 x 4096) sits outside the checkpointed
    # blocks and is not re-run
    assert full.hardware == 8 * N_7B - 2 * 32000 * 4096 + 16 * 32 * 2048 * 4096
    sel = token_flops(LLAMA_7B, 2048, full=True, roles=(), rank=8, checkpointing="selective")
    assert sel.hardware - sel.model == 4 * 32 * 2048 * 4096  # only the attention core again


def test_lora_skips_weight_gradients() -> None:
    # q and v adapters, r = 8: 2 x 8 x (4096 + 4096) = 131,072 weights per layer -> 2 x 32 x 131,072 FLOPs/token
    assert lora_forward_flops(LLAMA_7B, ("q", "v"), 8) == 8_388_608
    lora = token_flops(LLAMA_7B, 2048, full=False, roles=("q", "v"), rank=8, checkpointing="none")
    # 4N + 12·L·s·h + 6 x adapters
    assert lora.model == 4 * N_7B + 12 * 32 * 2048 * 4096 + 6 * 4_194_304
    full = token_flops(LLAMA_7B, 2048, full=True, roles=(), rank=8, checkpointing="none")
    assert 0.66 < lora.model / full.model < 0.70  # ~2/3 of full training


def test_optimizer_bytes_per_element() -> None:
    # AdamW, fp32 everything: read w, g, m, v (16 B), write w, m, v (12 B)
    assert optimizer_bytes_per_element("adamw", 4, 4, 4, 0) == 28
    # bf16 + fp32 master: r/w master 8, write bf16 copy 2, read bf16 grad 2, r/w m and v 16
    assert optimizer_bytes_per_element("adamw", 2, 2, 4, 4) == 28
    assert optimizer_bytes_per_element("adamw", 2, 4, 4, 4) == 30  # CPU Adam (ZeRO-Offload Algorithm 1)
    assert optimizer_bytes_per_element("sgd", 4, 4, 4, 0) == 12


def test_collectives() -> None:
    link = Link("test", 100.0)  # 100 GB/s per direction, 80 GB/s usable
    assert link.bytes_per_second == 100e9 * LINK_EFFICIENCY
    # ring all-reduce of 1 GB over 8: 2 x 7/8 x 1e9 / 80e9 = 21.875 ms
    assert all_reduce_seconds(1e9, 8, link) == pytest.approx(0.021875)
    assert reduce_scatter_seconds(1e9, 8, link) == all_gather_seconds(1e9, 8, link) == pytest.approx(0.0109375)
    assert all_reduce_seconds(1e9, 1, link) == 0.0


def test_links_intra_and_inter_node() -> None:
    a100 = gpu("a100-80gb")
    one = links(a100, 8, 1, 2, 4)
    assert one.tp.gbs == one.dp.gbs == 300.0  # NVLink 3, 300 GB/s per direction
    two = links(a100, 8, 2, 8, 2)
    assert two.tp.gbs == 300.0  # TP 8 stays in a node
    assert two.dp.gbs == 25.0 and two.pp.gbs == 25.0  # DP (one rank per node) spans the nodes: 200 Gb/s HDR per GPU
    # DP 16 with TP 1 on two nodes: 8 ranks per node, one NCCL channel per NIC crosses the boundary in parallel
    assert links(a100, 8, 2, 1, 16).dp.gbs == 200.0
    assert links(a100, 8, 2, 16, 1).tp.gbs == 25.0  # a TP group larger than a node crosses the network


def test_matmul_roofline_tiles_and_waves() -> None:
    """A matmul runs at the GPU's measured best fraction of its peak times what its shape keeps of it (tiles of
    256x128, 128x256 or 128x128, in waves of one tile per SM), or at the memory's speed, whichever is slower."""
    a100 = chip(gpu("a100-80gb"), "bf16")  # 312 TFLOP/s, 0.869 measured best, 108 SMs, 2039 GB/s x 0.9
    assert (a100.flops, a100.matmul_efficiency, a100.sms) == (312e12, 0.869, 108)
    assert a100.hbm == pytest.approx(2039e9 * MEMORY_EFFICIENCY)
    # 2048 x 4096 output: 256 tiles of 256x128 or 128x256 run in 3 waves of 108 (324 slots: 79% useful); 512 tiles
    # of 128x128 in 5 waves (540 slots): 512 / 540 = 94.8% useful, the least wasteful
    assert wave_efficiency(2048, 4096, 108) == pytest.approx(512 / 540)
    w = matmul(2048, 4096, 4096, a100, 2)
    flops = 2 * 2048 * 4096 * 4096
    assert w.flops == flops
    assert w.seconds == pytest.approx(flops / (312e12 * 0.869 * wave_efficiency(2048, 4096, 108)) + 2e-6)
    # a skinny matmul (rank 16): 16 output tiles for 108 SMs, so k is split 6 ways (96 blocks, one wave); it is
    # then bound by its bytes (the operands and the fp32 partial sums written and read back), not its math
    assert split_k(2048, 16, 4096, 108) == 6 and split_k(2048, 4096, 4096, 108) == 1
    lora = matmul(2048, 16, 4096, a100, 2)
    moved = (2048 * 4096 + 4096 * 16 + 2048 * 16) * 2 + 2 * 2048 * 16 * 4 * 6
    assert lora.seconds == pytest.approx(moved / a100.hbm + 2e-6)
    assert 2 * 2048 * 16 * 4096 / (312e12 * 0.869 * wave_efficiency(2048, 16, 108, splits=6)) < moved / a100.hbm
    # training.mfu replaces the measured fraction and the shape's
    assert matmul(2048, 4096, 4096, a100, 2, efficiency=0.5).seconds == pytest.approx(flops / (0.5 * 312e12) + 2e-6)


def test_flash_attention_from_the_published_tables() -> None:
    """FlashAttention-2's forward + backward TFLOP/s (Dao 2023 Fig. 4: A100, causal, head dim 128: 155 at 2k)
    as a fraction of the A100's peak; causal FLOPs are half the full square's."""
    a100 = chip(gpu("a100-80gb"), "bf16")
    assert flash_fraction(a100, 2048, 128, True) == pytest.approx(155 / 312)
    assert flash_fraction(a100, 2896, 128, True) == pytest.approx((155 + (173 - 155) * 0.5) / 312, rel=1e-3)
    fwd, bwd = flash(1, 2048, 32, 128, a100)
    assert fwd.flops == 4 * 2048**2 * 128 * 32 / 2 and bwd.flops == 2.5 * fwd.flops
    assert fwd.seconds + bwd.seconds == pytest.approx(3.5 * fwd.flops / (155e12) + 3 * 2e-6)
    # Hopper reads H100's table: 294 TFLOP/s at 4k, causal, head dim 128
    h100 = chip(gpu("h100-80gb"), "bf16")
    assert flash_fraction(h100, 4096, 128, True) * h100.flops == pytest.approx(294e12 * 989 / 989.4, rel=1e-3)


def test_default_plan_terms() -> None:
    """LLaMA-7B, 8 x A100, micro-batch 1 x 2048, full checkpointing, ZeRO-3: compute-bound; the matmuls' FLOPs are
    the model's 6N less what the frozen-nothing embedding skips; ZeRO-3 on NVLink hides behind compute."""
    plan = default_plan()
    st = step_time(plan)
    assert plan.model.arch().matmul_weight_params == N_7B
    matmuls = next(t for t in st.terms if t.name == "matmuls")
    assert "8.12e+13 FLOP at 312 TFLOP/s x 0.869 x tile and wave efficiency (108 SMs)" in matmuls.formula
    # 2048 tokens x 6N (the lm_head included): the linears' forward and backward
    assert pytest.approx(8.12e13, rel=1e-3) == 2048 * 6 * N_7B
    # at the A100's measured 87% of peak the linears could not take less than this; tiles and waves cost more
    assert matmuls.seconds > 2048 * 6 * N_7B / (312e12 * 0.869)
    assert st.flops_per_step == 8 * 2048 * (6 * N_7B + 12 * 32 * 2048 * 4096)
    assert st.tokens_per_step == 8 * 2048
    assert st.bottleneck == "compute" and st.mfu_setting is None
    assert st.hfu == pytest.approx(st.mfu * st.hardware_flops_per_step / st.flops_per_step)
    z3 = next(t for t in st.terms if t.name == "zero3_comm")
    assert z3.seconds > 0 and z3.exposed == 0
    assert {"matmuls", "attention", "memory_ops", "loss", "recompute", "optimizer_step"} <= {t.name for t in st.terms}


def test_mfu_setting_scales_the_matmuls_only() -> None:
    base = step_time(default_plan())
    a = step_time(default_plan().with_changes({"training.mfu": 0.4}))
    b = step_time(default_plan().with_changes({"training.mfu": 0.2}))
    assert b.seconds("matmuls") == pytest.approx(2 * a.seconds("matmuls"), rel=2e-3)  # but kernel overheads
    assert a.seconds("memory_ops") == b.seconds("memory_ops") == base.seconds("memory_ops")
    assert a.mfu_setting == 0.4 and base.mfu_setting is None


def test_mfu_is_model_flops_utilisation() -> None:
    """issue 13: training.mfu = 0.5 with full recomputation reports an MFU below 0.5: the step also runs
    attention, memory-bound ops and recomputation, which the MFU's model FLOPs do not count as its matmuls."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-2-7b"},
            "hardware": {"gpu": "a100-80gb", "gpus_per_node": 1},
            "training": {"micro_batch_size": 8, "seq_len": 4096, "mfu": 0.5, "optimizer": "sgd"},
            "strategy": {"gradient_checkpointing": "full"},
        }
    )
    st = step_time(plan)
    assert st.mfu == pytest.approx(st.flops_per_step / (st.step_seconds * st.peak_flops))
    assert 0.25 < st.mfu < 0.5
    assert st.hfu == pytest.approx(st.mfu * st.hardware_flops_per_step / st.flops_per_step)


def test_small_models_wait_for_the_host() -> None:
    """Qwen2.5-0.5B at micro-batch 1 x 512 in eager PyTorch: the GPU finishes each kernel before the host issues the
    next, so the step is the host's (24.5 us per forward kernel, 4 us per backward kernel); compiled, less."""
    plan = default_plan().with_changes(
        {"model.preset": "qwen2.5-0.5b", "training.seq_len": 512, "strategy.gradient_checkpointing": "none",
         "strategy.zero_stage": 0, "hardware.gpus_per_node": 1}
    )  # fmt: skip
    st = step_time(plan)
    assert st.seconds("host_launch") > st.seconds("matmuls") > 0  # the host adds more than the math takes
    compiled = step_time(plan.with_changes({"strategy.compile": True}))
    assert compiled.step_seconds < st.step_seconds
    assert pytest.approx(19.5e-3 / 795) == EAGER_FORWARD_S and ENGINE_S == 4e-6
    # a 7B at 2k keeps the GPU busier than the host issues its kernels
    assert step_time(default_plan()).seconds("host_launch") == 0


def test_tensor_parallel_all_reduces() -> None:
    plan = default_plan().with_changes({"strategy.tensor_parallel": 2, "strategy.gradient_checkpointing": "none"})
    st = step_time(plan)
    # 4 all-reduces per layer x 32 layers of 2048 x 4096 x 2 B = 16,777,216 B over 2 ranks on NVLink 3:
    # 2 x 1/2 x 16,777,216 / (300e9 x 0.8) = 69.9 us each -> 128 x 69.9 us = 8.95 ms
    each = 16_777_216 / (300e9 * LINK_EFFICIENCY)
    assert st.seconds("tp_comm") == pytest.approx(128 * each)
    assert st.seconds("tp_comm") == pytest.approx(0.00895, rel=1e-3)


def test_pipeline_bubble_is_p_minus_1_over_m() -> None:
    plan = default_plan().with_changes(
        {"strategy.zero_stage": 1, "strategy.pipeline_parallel": 4, "training.grad_accum_steps": 8}
    )
    st = step_time(plan)
    bubble = st.seconds("pipeline_bubble")
    # step = (m + p - 1) x micro-batch + once-per-step terms; the bubble is (p - 1) micro-batches
    per_mb = bubble / 3
    once = sum(t.exposed for t in st.terms if t.name in ("grad_reduce", "param_allgather", "optimizer_step"))
    assert st.step_seconds == pytest.approx((8 + 3) * per_mb + once)


def test_data_parallel_all_reduce_exposed_beyond_the_backward() -> None:
    # DDP over 2 nodes of 8 T4s, 128-token micro-batches: the fp32 all-reduce of 1.1B gradients cannot hide
    plan = default_plan().with_changes(
        {
            "model.preset": "tinyllama-1.1b",
            "hardware.gpu": "t4",
            "hardware.nodes": 2,
            "strategy.zero_stage": 0,
            "strategy.gradient_checkpointing": "none",
            "training.seq_len": 128,
        }
    )
    st = step_time(plan)
    reduce = next(t for t in st.terms if t.name == "grad_reduce")
    arch = plan.model.arch()
    # fp32 gradients (autocast): 4 B x params over 16 ranks, 8 per node: 8 NCCL channels cross the nodes on 8 NICs
    # of 3.1 GB/s x 0.8 (capped by the PCIe link between the GPUs)
    link = min(gpu("t4").gpu_link_gbs, 8 * 3.1)
    expected = 2 * 15 / 16 * arch.total_params * 4 / (link * 1e9 * LINK_EFFICIENCY)
    assert reduce.seconds == pytest.approx(expected)
    assert 0 < reduce.exposed < reduce.seconds
    assert st.bottleneck == "communication"


def test_cpu_offload_step() -> None:
    plan = default_plan().with_changes(
        {"strategy.zero_stage": 2, "strategy.offload_optimizer": "cpu", "training.precision": "bf16-master"}
    )
    st = step_time(plan)
    arch = plan.model.arch()
    part = arch.total_params / 8
    # CPU Adam: 30 B per element over the rank's share of host memory bandwidth (100 GB/s / 8 ranks)
    cpu = part * 30 / (HOST_MEMORY_GBS_PER_NODE * 1e9 / 8)
    assert st.seconds("cpu_optimizer") == pytest.approx(cpu)
    assert st.seconds("optimizer_step") == 0
    no_offload = step_time(plan.with_changes({"strategy.offload_optimizer": "none"}))
    assert st.step_seconds > no_offload.step_seconds


def test_qlora_dequantization() -> None:
    plan = default_plan().with_changes({"training.method": "qlora", "strategy.zero_stage": 0})
    st = step_time(plan)
    arch = plan.model.arch()
    # NF4 with double quantization per block: 4 bits per weight + 8-bit absmax per 64 + fp32 per 256 blocks
    q_layer = sum(quantized_bytes(lin.d_in, lin.d_out, "nf4", True) for lin in arch.linears)
    assert q_layer == pytest.approx(arch.layer_weight_params * (0.5 + 1 / 64), rel=1e-3)
    # forward, backward's input gradient and the checkpointed recompute each read the 4-bit weights and write
    # bf16 copies; the recompute's is in the recompute term
    per_pass = 32 * (q_layer + 2 * arch.layer_weight_params)
    hbm = 2039e9 * MEMORY_EFFICIENCY
    assert st.seconds("dequantization") == pytest.approx(2 * per_pass / hbm + 2 * 32 * 7 * 2 * 2e-6)  # 2 kernels each
    lora = step_time(plan.with_changes({"training.method": "lora"}))
    assert lora.seconds("dequantization") == 0
    assert "nf4 base" in st.explain()["dequantization"][0] and "MatMul4Bit" in st.explain()["dequantization"][1]


def test_int8_activation_compression_traffic() -> None:
    plan = default_plan().with_changes({"strategy.activation_compression": "int8"})  # full checkpointing
    st = step_time(plan)
    # the checkpoint of each block is compressed: 2048 tokens x 4096 x 4 B (fp32 residual under autocast)
    saved = 2048 * 4096 * 4  # 33,554,432 B
    packed = 2048 * 4096 + 4 * (2048 * 4096 // 64)  # 1 B per value + an fp32 scale per 64: 8,912,896 B
    traffic = 32 * 2 * (saved + packed)  # quantized when saved, dequantized in the backward, 32 layers
    assert st.seconds("activation_compression") == pytest.approx(traffic / (2039e9 * MEMORY_EFFICIENCY))
    plain = step_time(default_plan())
    assert st.step_seconds == pytest.approx(plain.step_seconds + st.seconds("activation_compression"))


def test_eager_attention_is_slower_than_flash() -> None:
    plan = default_plan().with_changes({"strategy.attention": "eager", "strategy.gradient_checkpointing": "none"})
    st = step_time(plan)
    flash_st = step_time(plan.with_changes({"strategy.attention": "flash"}))
    assert st.seconds("attention") > 2 * flash_st.seconds("attention")
    assert st.step_seconds > flash_st.step_seconds
    # its s x s scores: 12 passes over b·a·s² x 2 B per layer at least
    assert st.seconds("attention") > 32 * 12 * 32 * 2048**2 * 2 / (2039e9 * MEMORY_EFFICIENCY)


def test_token_budget_hours_and_cost() -> None:
    plan = default_plan().with_changes({"training.tokens": 1_000_000_000, "hardware.price_per_gpu_hour": 2.0})
    st = step_time(plan)
    assert st.train_seconds == pytest.approx(1e9 / st.tokens_per_second)
    assert st.train_hours == pytest.approx(st.train_seconds / 3600)
    assert st.gpu_hours == pytest.approx(st.train_hours * 8)
    assert st.cost == pytest.approx(st.gpu_hours * 2.0)
    assert st.train_steps == math.ceil(1e9 / (8 * 2048))
    data = st.to_json()
    assert data["cost"] == st.cost and data["gpu_hours"] == st.gpu_hours
    bare = step_time(default_plan())
    assert bare.train_hours is None and bare.cost is None
    assert "train_hours" not in bare.to_json()


def test_terms_add_up_and_explain_each() -> None:
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-2-13b"},
            "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 4},
            "training": {"micro_batch_size": 2, "grad_accum_steps": 4, "method": "qlora", "mfu": 0.4},
            "strategy": {
                "zero_stage": 1,
                "tensor_parallel": 2,
                "pipeline_parallel": 2,
                "attention": "eager",
                "gradient_checkpointing": "full",
            },
        }
    )
    st = step_time(plan)
    assert sum(t.exposed for t in st.terms) == pytest.approx(st.step_seconds)
    assert all(0 <= t.exposed <= t.seconds + 1e-12 and t.category in CATEGORIES for t in st.terms)
    explained = st.explain()
    for t in st.terms:
        formula, source = explained[t.name]
        assert formula and source
    assert "TP 2" in explained["tp_comm"][0]
    assert st.mfu < 0.4


def test_zero3_parameter_offload_on_one_gpu() -> None:
    plan = default_plan().with_changes(
        {
            "hardware.gpus_per_node": 1,
            "training.precision": "bf16-master",
            "strategy.offload_optimizer": "cpu",
            "strategy.offload_parameters": "cpu",
        }
    )
    st = step_time(plan)
    n = plan.model.arch().total_params  # 6,738,415,616
    pcie = 32e9 * LINK_EFFICIENCY  # PCIe Gen4 x16, 32 GB/s per direction
    # bf16 parameters fetched for the forward and again for the backward, bf16 gradients sent back
    busy = 2 * (2 * n / pcie) + 2 * n / pcie
    transfers = next(t for t in st.terms if t.name == "offload_transfers")
    assert transfers.seconds == pytest.approx(busy)
    assert 0 < transfers.exposed < transfers.seconds  # partly hidden behind forward and backward
    assert st.seconds("zero3_comm") == 0  # nobody to gather from
    assert st.bottleneck == "offload"
