#!/usr/bin/env python3
"""Published throughput and step-time figures of LLM training runs: the evaluation set of the step-time model.

Usage, from the repository root:
  python -m bench.data.published_time             each figure, vramplan's prediction and the error (Markdown)
  python -m bench.data.published_time --write     (re)write tests/data/published_time.json from the entries below;
                                                  the figures taken by reference from ../shared/published/cases.json
                                                  are checked against that file when it is there (--cases PATH)

Collected on 2026-12-06 (issue 38) from the sources themselves (each entry names the repository, file and commit,
or the page, and the table): torchtitan's benchmarks/*.md, MosaicML llm-foundry's scripts/train/benchmarking
README, Megatron-LM's README model table (Megatron-Core r0.8.0), NVIDIA NeMo's performance summary (24.07),
Megatron-Bridge's performance summary archive, NeMo RL's performance summary (GRPO step times), karpathy/llm.c's
run scripts and README, Dao-AILab/flash-attention's training/README.md, litgpt's extensions/thunder/README.md,
fms-fsdp's README, LLaMA-Factory's wiki 'Performance comparison', and the 19 throughput figures of
../shared/published/cases.json by their case ids (`from_case`). Every number was read in its source; where the
source gives a time per step or TFLOP/s instead of tokens/s/GPU, `derivation` says how tokens/s/GPU follows.

Each entry records the configuration as published, what the source leaves unstated (`not_stated`, with the value
the plan assumes), the closest vramplan plan as `vramplan estimate` arguments (`vramplan_args`, built-in presets
only) and what that plan cannot say (`not_expressible`). A published GRPO "step" (NeMo RL) is several optimizer
steps: `plan_steps_per_figure` says how many vramplan steps make one published step. FlashAttention's kernel
TFLOP/s are kept apart (`KERNELS`): they time one attention forward + backward, not a training step. Figures that
were found but cannot be compared are listed in `EXCLUDED` with the reason.

A data module: its length is its entries (one builder per source), not logic.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OUT = Path("tests/data/published_time.json")
SHARED_CASES = Path("../shared/published/cases.json")
COLLECTED = "2026-12-06"

Entry = dict[str, Any]
Sets = dict[str, Any]


# --------------------------------------------------------------------------------------------------------------
# helpers: TOML literals for --set, the argument list, one entry


def toml(v: Any) -> str:
    """A TOML literal as `vramplan estimate --set` reads it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list | tuple):
        return "[" + ",".join(toml(x) for x in v) + "]"
    return str(v)


def plan_args(model: str | None, gpu: str, gpus_per_node: int, nodes: int, sets: Sets) -> list[str]:
    """`vramplan estimate` arguments: a model preset (or None: the `model.*` keys in ``sets`` describe it)."""
    argv = ["estimate", *(["--model", model] if model else []), "--gpu", gpu]
    argv += ["--gpus", str(gpus_per_node), "--nodes", str(nodes)]
    for k, v in sets.items():
        argv += ["--set", f"{k}={toml(v)}"]
    return [*argv, "--json"]


def train(mb: int, seq: int, accum: int = 1, **more: Any) -> Sets:
    """The `training.*` / `strategy.*` / `stack.*` keys of a plan: micro-batch, sequence, accumulation, then the
    rest as ``table__key=value`` (double underscore for the dot)."""
    sets: Sets = {"training.micro_batch_size": mb, "training.seq_len": seq, "training.grad_accum_steps": accum}
    sets.update({k.replace("__", "."): v for k, v in more.items()})
    return sets


def gpt2_model(hidden: int, layers: int, heads: int, vocab: int, positions: int, act: str = "gelu") -> Sets:
    """A GPT-2-family model by its sizes (learned positions, LayerNorm, 4h plain MLP, fused qkv, tied head)."""
    return {
        "model.model_type": "gpt2",
        "model.vocab_size": vocab,
        "model.hidden_size": hidden,
        "model.intermediate_size": 4 * hidden,
        "model.num_hidden_layers": layers,
        "model.num_attention_heads": heads,
        "model.num_key_value_heads": heads,
        "model.max_position_embeddings": positions,
        "model.tie_word_embeddings": True,
        "model.hidden_act": act,
    }


def rows_of(text: str) -> list[list[str]]:
    """A table typed as text, one row a line, fields split on whitespace (numbers parsed by the caller)."""
    return [line.split() for line in text.strip().splitlines()]


ALL7 = ["q", "k", "v", "o", "gate", "up", "down"]  # every linear of a llama block

REQUIRED = (
    "id", "source", "model", "model_preset", "params", "gpu", "gpu_preset", "gpus", "nodes", "stack", "precision",
    "micro_batch", "global_batch", "seq_len", "parallelism", "activation_checkpointing", "compile", "fused_kernels",
    "objective", "method", "timed", "raw", "tokens_per_s_per_gpu", "derivation", "step_seconds", "mfu",
    "vramplan_args", "plan_steps_per_figure", "compare", "not_stated", "not_expressible", "caveats", "from_case",
    "source_in_mfu_default",
)  # fmt: skip


def fig(**kw: Any) -> Entry:
    """One published figure with its defaults filled; every field of `REQUIRED` is present."""
    e: Entry = {
        "kind": "step",
        "model_preset": None,
        "params": None,
        "compile": None,
        "fused_kernels": "not stated",
        "objective": "pretrain",
        "method": "full",
        "derivation": None,
        "step_seconds": None,
        "mfu": None,
        "plan_steps_per_figure": 1,
        "compare": "tokens_per_s_per_gpu",
        "not_stated": {},
        "not_expressible": [],
        "caveats": "",
        "from_case": None,
        "source_in_mfu_default": False,
    }
    e = {"id": kw.get("id"), "kind": "step", "source": kw.get("source"), **e, **kw}
    missing = [k for k in REQUIRED if k not in e]
    assert not missing, (e.get("id"), missing)
    return e


# --------------------------------------------------------------------------------------------------------------
# torchtitan benchmarks/*.md (new figures; the 7 torchtitan figures already in cases.json are `REFERENCED`)

TT_DEC24 = {
    "where": "github.com/pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md",
    "commit": "820504e20d1149fbf0b98c567af24c4b0433b22d (file's last change; runs at torch 1963fc8, torchao "
    "eab345c, torchtitan 9dec370, 2024-12-26)",
    "date": "2024-12",
}
TT_GT = "H100 96GB HBM2e, 2.4 TB/s, 500 W (Grand Teton), 400 Gb/s RDMA per GPU"
TT_PRESET = "h100-96gb-gt"
TT_GPU_NOTE = (
    "GPU: Grand Teton's H100 96GB HBM2e at a 500 W power limit: the h100-96gb-gt preset has its 2.4 TB/s but the "
    "700 W SXM's peaks and matmul efficiency (its clocks at 500 W are not published); torchtitan says its true "
    "peak is between SXM and NVL"
)
TT_COMMON = {
    "stack": "torchtitan 9dec370, torch 1963fc8 (2024-12-23), torchao eab345c",
    "precision": "bf16 (FSDP2 MixedPrecisionPolicy param bf16, reduce fp32)",
    "fused_kernels": "SDPA flash attention; Float8 linears where stated (torchao, tensorwise)",
    "gpu": TT_GT,
    "gpu_preset": TT_PRESET,
    "timed": "TPS/GPU (tokens/s per GPU) logged every 10 iterations, read at the 90th",
}
FSDP_PP = (
    "FSDP (ZeRO-3) with pipeline parallelism: vramplan refuses ZeRO-2/3 with PP (DeepSpeed's rule), so the plan "
    "shards only the optimizer states (ZeRO-1, bf16-master) over the 8 data-parallel ranks"
)
ZERO1_PP: Sets = {"strategy.zero_stage": 1, "training.precision": "bf16-master"}
TT_SETS: Sets = {"training.precision": "bf16-fsdp", "stack.framework": "torchtitan", "strategy.attention": "flash"}


def torchtitan_entries() -> list[Entry]:
    out: list[Entry] = []
    s8 = {**TT_SETS, "strategy.zero_stage": 3}

    def tt(id_: str, table: str, **kw: Any) -> None:
        out.append(fig(id=id_, source={**TT_DEC24, "table": table}, **TT_COMMON, **kw))

    tt(
        "torchtitan-8b-fsdp-compile-float8-8xh100",
        "Table 1 row 'FSDP + torch.compile + Float8'",
        model="Llama 3.1 8B", model_preset="llama-3.1-8b", gpus=8, nodes=1,
        micro_batch=2, global_batch=16, seq_len=8192, parallelism={"fsdp": 8},
        activation_checkpointing="selective (per-op: every other matmul output and SDPA outputs saved)",
        compile=True, raw={"value": 8532, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=8532,
        vramplan_args=plan_args("llama-3.1-8b", TT_PRESET, 8, 1, {
            **train(2, 8192), **s8, "strategy.gradient_checkpointing": "op", "strategy.compile": True,
            "strategy.float8": True}),
        not_expressible=[TT_GPU_NOTE, "Float8 scaling recipe (tensorwise) and fp8 FSDP all-gather not modelled "
                         "apart from the fp8 matmul rate"],
    )  # fmt: skip
    tt(
        "torchtitan-8b-fsdp-compile-float8-128xh100",
        "Table 3 row 'FSDP + torch.compile + Float8'",
        model="Llama 3.1 8B", model_preset="llama-3.1-8b", gpus=128, nodes=16,
        micro_batch=2, global_batch=256, seq_len=8192, parallelism={"fsdp": 128},
        activation_checkpointing="selective (per-op)", compile=True,
        raw={"value": 8380, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=8380,
        vramplan_args=plan_args("llama-3.1-8b", TT_PRESET, 8, 16, {
            **train(2, 8192), **s8, "strategy.gradient_checkpointing": "op", "strategy.compile": True,
            "strategy.float8": True}),
        not_expressible=[TT_GPU_NOTE, "Float8 scaling recipe (tensorwise) and fp8 FSDP all-gather"],
    )  # fmt: skip
    # Table 2: Llama 3.1 8B, 8 GPUs, FSDP + CP + compile + Float8, local batch 1, full AC
    for seq, cp, tps, mem in ((32768, 1, 3890, 83.9), (65536, 2, 2540, 84.2), (131072, 4, 1071, 84.0),
                              (262144, 8, 548, 84.5)):  # fmt: skip
        cp_note = (
            []
            if cp == 1
            else [
                f"context parallelism {cp} (ring attention over {cp} GPUs, each holding {seq // cp} tokens of the "
                f"sequence): the plan runs the whole {seq}-token sequence on each of 8 data-parallel GPUs, the same "
                "work per token without the ring's communication"
            ]
        )
        tt(
            f"torchtitan-8b-cp{cp}-{seq // 1024}k-8xh100",
            f"Table 2 row 'FSDP {8 // cp}, CP {cp}' (sequence {seq}, {mem} GiB)",
            model="Llama 3.1 8B", model_preset="llama-3.1-8b", gpus=8, nodes=1,
            micro_batch=1, global_batch=8 // cp, seq_len=seq, parallelism={"fsdp": 8 // cp, "cp": cp},
            activation_checkpointing="full", compile=True, raw={"value": tps, "unit": "tokens/s/GPU"},
            tokens_per_s_per_gpu=tps,
            vramplan_args=plan_args("llama-3.1-8b", TT_PRESET, 8, 1, {
                **train(1, seq), **s8, "strategy.gradient_checkpointing": "full", "strategy.compile": True,
                "strategy.float8": True}),
            not_expressible=[TT_GPU_NOTE, *cp_note],
        )  # fmt: skip
    tt(
        "torchtitan-70b-2d-asynctp-256xh100",
        "Table 4 row '2D + AsyncTP'",
        model="Llama 3.1 70B", model_preset="llama-3.1-70b", gpus=256, nodes=32,
        micro_batch=16, global_batch=512, seq_len=8192, parallelism={"fsdp": 32, "tp": 8},
        activation_checkpointing="full", compile=True, raw={"value": 876, "unit": "tokens/s/GPU"},
        tokens_per_s_per_gpu=876,
        vramplan_args=plan_args("llama-3.1-70b", TT_PRESET, 8, 32, {
            **train(16, 8192), **s8, "strategy.tensor_parallel": 8, "strategy.sequence_parallel": True,
            "strategy.gradient_checkpointing": "full", "strategy.compile": True, "strategy.float8": True}),
        not_expressible=[TT_GPU_NOTE, "async TP (all-gather / reduce-scatter overlapped with the TP matmuls)"],
    )  # fmt: skip
    for sched, tps, mem in (("1F1B", 100, 82.5), ("Interleaved 1F1B", 128, 72.7)):
        tag = "1f1b" if sched == "1F1B" else "interleaved"
        tt(
            f"torchtitan-405b-3d-{tag}-512xh100",
            f"Table 5 row '{sched}' ({mem} GiB)",
            model="Llama 3.1 405B", model_preset="llama-3.1-405b", gpus=512, nodes=64,
            micro_batch=4, global_batch=256, seq_len=8192, parallelism={"fsdp": 8, "tp": 8, "pp": 8},
            activation_checkpointing="full", compile=True, raw={"value": tps, "unit": "tokens/s/GPU"},
            tokens_per_s_per_gpu=tps,
            not_stated={"pipeline microbatches": "8 (torchtitan's default: one per stage): local batch 32 = "
                        "8 microbatches of 4"},
            vramplan_args=plan_args("llama-3.1-405b", TT_PRESET, 8, 64, {
                **train(4, 8192, 8), **s8, **ZERO1_PP, "strategy.tensor_parallel": 8,
                "strategy.sequence_parallel": True,
                "strategy.pipeline_parallel": 8, "strategy.gradient_checkpointing": "full",
                "strategy.compile": True, "strategy.float8": True}),
            not_expressible=[TT_GPU_NOTE, "async TP", FSDP_PP, *(["interleaved (virtual-stage) pipeline schedule: a "
                             "smaller bubble than 1F1B"] if tag == "interleaved" else [])],
        )  # fmt: skip
    tt(
        "torchtitan-405b-4d-32k-512xh100",
        "Table 6 row 'FSDP 8, CP 1' (sequence 32768, 75.3 GiB)",
        model="Llama 3.1 405B", model_preset="llama-3.1-405b", gpus=512, nodes=64,
        micro_batch=1, global_batch=64, seq_len=32768, parallelism={"fsdp": 8, "tp": 8, "pp": 8, "cp": 1},
        activation_checkpointing="full", compile=True, raw={"value": 76, "unit": "tokens/s/GPU"},
        tokens_per_s_per_gpu=76,
        not_stated={"pipeline microbatches": "8 (torchtitan's default): local batch 8 = 8 microbatches of 1"},
        vramplan_args=plan_args("llama-3.1-405b", TT_PRESET, 8, 64, {
            **train(1, 32768, 8), **s8, **ZERO1_PP, "strategy.tensor_parallel": 8,
            "strategy.sequence_parallel": True,
            "strategy.pipeline_parallel": 8, "strategy.gradient_checkpointing": "full", "strategy.compile": True,
            "strategy.float8": True}),
        not_expressible=[TT_GPU_NOTE, "async TP", FSDP_PP],
    )  # fmt: skip

    # benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: bf16 rows, vanilla TP
    atp = {
        "where": "github.com/pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md",
        "commit": "2887250bbd9103d0bc997ea2efb3a525b5e5dbc0 (runs at torch 38410cf9, torchtitan 820504e)",
        "date": "2025-06",
    }
    atp_common = {**TT_COMMON, "stack": "torchtitan 820504e, torch 38410cf9 (2025-06-14)"}
    out.append(fig(
        id="torchtitan-70b-2d-bf16-256xh100", source={**atp, "table": "Llama3 70b, row 'None (bfloat16)', "
        "vanilla TP"}, **atp_common,
        model="Llama 3.1 70B", model_preset="llama-3.1-70b", gpus=256, nodes=32,
        micro_batch=16, global_batch=512, seq_len=8192, parallelism={"fsdp": 32, "tp": 8},
        activation_checkpointing="full", compile=True, raw={"value": 597.3, "unit": "tokens/s (per GPU, as the "
        "other torchtitan tables)"}, tokens_per_s_per_gpu=597.3,
        not_stated={"seq_len": "8192 (llama3_70b.toml at 820504e)", "unit": "'tokens/sec' without per-GPU: read as "
                    "per GPU (the scale matches Table 4's 829 tokens/s/GPU with Float8)"},
        vramplan_args=plan_args("llama-3.1-70b", TT_PRESET, 8, 32, {
            **train(16, 8192), **s8, "strategy.tensor_parallel": 8, "strategy.sequence_parallel": True,
            "strategy.gradient_checkpointing": "full", "strategy.compile": True}),
        not_expressible=[TT_GPU_NOTE],
    ))  # fmt: skip
    out.append(fig(
        id="torchtitan-8b-fsdp8-tp8-bf16-64xh100", source={**atp, "table": "Llama3 8b, row 'None (bfloat16)', "
        "vanilla TP"}, **atp_common,
        model="Llama 3.1 8B", model_preset="llama-3.1-8b", gpus=64, nodes=8,
        micro_batch=12, global_batch=96, seq_len=8192, parallelism={"fsdp": 8, "tp": 8},
        activation_checkpointing="selective (per-op)", compile=True,
        raw={"value": 4378, "unit": "tokens/s (per GPU, as the other torchtitan tables)"}, tokens_per_s_per_gpu=4378,
        not_stated={"seq_len": "8192 (llama3_8b.toml at 820504e)", "unit": "read as per GPU"},
        vramplan_args=plan_args("llama-3.1-8b", TT_PRESET, 8, 8, {
            **train(12, 8192), **s8, "strategy.tensor_parallel": 8, "strategy.sequence_parallel": True,
            "strategy.gradient_checkpointing": "op", "strategy.compile": True}),
        not_expressible=[TT_GPU_NOTE],
    ))  # fmt: skip

    # benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md
    wf = {
        "where": "github.com/pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md",
        "commit": "4a61bd87d3c7e92bcfeb5d5464d9e6bd13ef440a (runs at torchtitan e7c0cae, torch 2.8.0a0+5228986c39, "
        "torchao 0afa4c1, 2025-06)",
        "date": "2025-06",
    }
    for nodes, tps, mem in ((4, 10938, 47.96), (8, 10753, 46.97)):
        out.append(fig(
            id=f"torchtitan-8b-fsdp-float8-{8 * nodes}xh200", source={**wf, "table": f"NUM_NODES {nodes} "
            f"({mem} GiB)"},
            stack="torchtitan e7c0cae (Trainy on WhiteFiber)", precision="bf16 + Float8 linears (fp8 FSDP "
            "all-gather, precomputed dynamic scales, fp8 weight recomputed in backward)",
            fused_kernels="SDPA flash attention", gpu="H200 (8 per host, NVLink), 400 Gb/s CX-7 per GPU",
            gpu_preset="h200", timed="TPS/GPU sampled at the 100th iteration",
            model="Llama 3.1 8B", model_preset="llama-3.1-8b", gpus=8 * nodes, nodes=nodes,
            micro_batch=2, global_batch=16 * nodes, seq_len=8192, parallelism={"fsdp": 8 * nodes},
            activation_checkpointing="selective (per-op; llama3_8b.toml at e7c0cae)", compile=True,
            raw={"value": tps, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=tps,
            vramplan_args=plan_args("llama-3.1-8b", "h200", 8, nodes, {
                **train(2, 8192), **s8, "strategy.gradient_checkpointing": "op", "strategy.compile": True,
                "strategy.float8": True}),
            not_expressible=["fp8 FSDP all-gather and precomputed scales"],
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# MosaicML llm-foundry scripts/train/benchmarking/README.md (MPT 125M-70B, Composer FSDP)

LLMF = {
    "where": "github.com/mosaicml/llm-foundry scripts/train/benchmarking/README.md",
    "commit": "495218376830947dce625efabc4d86be7c47cc45 (file's last change, 2024-04-22; tables from b2a43a1 "
    "2023-10-19, the >= 128-GPU H100 table from 5e85bd6 2024-01-06)",
}
MPT = {  # scripts/train/yamls/pretrain/mpt-*.yaml at 5e85bd6: d_model, n_layers, n_heads (vocab 50368, ratio 4)
    "125m": (768, 12, 12), "350m": (1024, 24, 16), "760m": (1536, 24, 12), "1b": (2048, 24, 16),
    "3b": (2560, 32, 20), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 48, 56),
    "70b": (8192, 80, 64),
}  # fmt: skip
GPU_NAMES = {"h100-80gb": "H100 80GB", "a100-80gb": "A100 80GB (1600 Gbps RoCE between nodes)",
             "a100-40gb": "A100 40GB (1600 Gbps RoCE between nodes)"}  # fmt: skip
MPT_NOTE = (
    "MPT (no biases, low-precision LayerNorm, learned positions, tied head, GELU 4h MLP) as the GPT-2 family of the "
    "same sizes: GPT-2's biases add ~0.01% FLOPs; the parameter count equals the table's NumParams"
)


def llm_foundry_entries() -> list[Entry]:
    # table key, model, seq, GPUs, MFU %, micro, accum, global, T/s/GPU, precision, MP mode, sharding, AC, NumParams
    rows = rows_of("""
        h100 760m 32768 8 31.84 1 2 16 16291 amp_bf16 DEFAULT FULL_SHARD False 807656448
        h100 1b 65536 8 26.34 1 2 16 5506 amp_bf16 DEFAULT FULL_SHARD True 1445974016
        h100 3b 8192 8 40.31 3 6 144 16578 amp_bf16 DEFAULT FULL_SHARD False 2667566080
        h100 7b 2048 8 46.44 6 1 48 10643 amp_bf16 DEFAULT FULL_SHARD False 6658859008
        h100 7b 8192 8 37.14 8 2 128 6935 amp_bf16 DEFAULT FULL_SHARD True 6684024832
        h100 7b 32768 8 30.94 2 2 32 3318 amp_bf16 DEFAULT FULL_SHARD True 6784688128
        h100 7b 65536 8 28.59 1 2 16 1956 amp_bf16 DEFAULT FULL_SHARD True 6918905856
        h100 13b 32768 8 31.68 1 3 24 1976 amp_bf16 DEFAULT FULL_SHARD True 13011240960
        h100 30b 2048 8 38.11 3 21 504 2002 amp_bf16 DEFAULT FULL_SHARD True 29975214080
        h100 70b 2048 64 42.57 8 4 2048 1039 amp_bf16 DEFAULT FULL_SHARD True 64862437376
        h100large 70b 2048 512 41.25 8 1 4096 1007 amp_bf16 DEFAULT FULL_SHARD True 64862437376
        h100large 3b 2048 512 39.24 8 1 4096 21664 amp_bf16 DEFAULT SHARD_GRAD_OP False 2651837440
        h100fp8 3b 2048 8 27.7 10 6 480 30586 amp_fp8 DEFAULT FULL_SHARD False 2651837440
        a100 125m 2048 8 44.79 40 2 640 142830 amp_bf16 DEFAULT FULL_SHARD False 125311488
        a100 125m 32768 8 52.71 2 2 32 36407 amp_bf16 DEFAULT FULL_SHARD False 148904448
        a100 350m 8192 8 53.8 8 2 128 36569 amp_bf16 DEFAULT FULL_SHARD False 362276864
        a100 7b 2048 8 64.23 6 2 96 4641 amp_bf16 DEFAULT FULL_SHARD False 6658859008
        a100 30b 2048 8 55.3 3 21 504 916 amp_bf16 DEFAULT FULL_SHARD True 29975214080
        a100 70b 2048 64 53.33 8 4 2048 410 bf16 PURE FULL_SHARD True 64862437376
        a100-40 125m 2048 128 38.86 26 1 3328 123936 bf16 PURE FULL_SHARD False 125311488
    """)
    tables = {
        "h100": ("H100 80GB BF16", "h100-80gb"),
        "h100large": ("H100 80GB BF16 (Large Scale, >= 128 GPUs)", "h100-80gb"),
        "h100fp8": ("H100 80GB FP8", "h100-80gb"),
        "a100": ("A100 80GB with 1600 Gbps node-node interconnect (RoCE)", "a100-80gb"),
        "a100-40": ("A100 40GB with 1600 Gbps node-node interconnect (RoCE)", "a100-40gb"),
    }
    out = []
    for key, size, *nums, prec, mp, shard, ac_text, n_text in rows:
        table, gpu = tables[key]
        seq, gpus, mb, ga, gb, tps = (int(nums[i]) for i in (0, 1, 3, 4, 5, 6))
        mfu, ac, n = float(nums[2]), ac_text == "True", int(n_text)
        d, layers, heads = MPT[size]
        nodes = max(1, gpus // 8)
        fp8 = prec == "amp_fp8"
        date = "2024-01-06" if "Large Scale" in table else "2023-10-19"
        sets = {
            **gpt2_model(d, layers, heads, 50368, seq),
            **train(mb, seq, ga),
            "training.precision": "bf16-fsdp" if shard == "FULL_SHARD" else "bf16-master",
            "strategy.zero_stage": 3 if shard == "FULL_SHARD" else 2,
            "strategy.fsdp_version": 1,
            "strategy.gradient_checkpointing": "full" if ac else "none",
            "strategy.attention": "flash",
            **({"strategy.float8": True} if fp8 else {}),
        }
        out.append(fig(
            id=f"llmfoundry-mpt{size}-{seq // 1024}k-{gpus}x{gpu.split('-')[0]}{'-fp8' if fp8 else ''}",
            source={**LLMF, "date": date, "table": f"'{table}', row {size} / {seq} / {gpus} GPUs"},
            model=f"MPT-{size}", params=n, gpu=GPU_NAMES[gpu],
            gpu_preset=gpu, gpus=gpus, nodes=nodes,
            stack="Composer FSDP (FSDP1) on the MosaicML platform; image not stated (submit_benchmarks.py default "
            "mosaicml/pytorch:1.13.1_cu117, H100 runs need a newer one)",
            precision=f"{prec}, FSDP mixed_precision {mp}",
            micro_batch=mb, global_batch=gb, seq_len=seq, parallelism={shard.lower(): gpus},
            activation_checkpointing="full (every block)" if ac else "none", compile=False,
            fused_kernels="attn_impl triton (submit_benchmarks.py default; flash-attention kernels), "
            "low_precision_layernorm" + (", TransformerEngine fp8 linears" if fp8 else ""),
            timed="Throughput (T/s/GPU) from Composer's speed monitor, runs of ~12 steps (collect_results.py)",
            raw={"value": tps, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=tps, mfu=mfu / 100,
            vramplan_args=plan_args(None, gpu, min(gpus, 8), nodes, sets),
            not_expressible=[MPT_NOTE, f"FSDP mixed_precision {mp} (Composer): mapped to "
                             + ("bf16-fsdp (bf16 compute, fp32 sharded params)" if shard == "FULL_SHARD" else
                                "bf16-master (bf16-fsdp needs ZeRO-3)")
                             + (", with bf16 gradient reduction" if mp == "PURE" else "")],
            caveats="llm-foundry's MFU counts attention as 12·L·s·d (no causal halving); the HFU column assumes "
            "recomputation of the forward when AC is on",
            source_in_mfu_default=True,
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# Megatron-LM README model table (images/model_table.png, Megatron-Core r0.8.0, H100, seq 4096, vocab 131072)

MEGATRON = {
    "where": "github.com/NVIDIA/Megatron-LM README.md 'Performance Benchmarking', images/model_table.png",
    "commit": "f2e5db402c (image added 2024-07-15, 'New scaling figures on H100 GPUs'); README at d98e8a64ddf3",
    "date": "2024-07",
}


def megatron_flops_per_token(h: int, layers: int, seq: int, vocab: int) -> float:
    """Megatron-LM's num_floating_point_operations (megatron/training/training.py at f2e5db402c) per token, for
    MHA, a 4h non-gated MLP and no MoE: 12·L·h²·((1 + 1 + s/h) + 4 + V/(2·L·h))."""
    return 12 * layers * h * h * (6 + seq / h) + 6 * vocab * h


def megatron_entries() -> list[Entry]:
    # size, heads, hidden, layers, TP, PP, DP, GPUs, batch, TFLOP/s per GPU, MFU
    rows = (
        ("1.7B", 16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 0.41),
        ("7.1B", 32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 0.47),
        ("70B", 64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 0.42),
        ("177B", 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 0.44),
        ("462B", 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 0.47),
    )
    out = []
    for size, heads, h, layers, tp, pp, dp, gpus, batch, tflops, mfu in rows:
        per_token = megatron_flops_per_token(h, layers, 4096, 131072)
        tps = tflops * 1e12 / per_token
        accum = batch // dp
        sets = {
            "model.model_type": "gpt_neox", "model.vocab_size": 131072, "model.hidden_size": h,
            "model.intermediate_size": 4 * h, "model.num_hidden_layers": layers, "model.num_attention_heads": heads,
            "model.num_key_value_heads": heads, "model.tie_word_embeddings": False,
            "model.use_parallel_residual": False, "model.partial_rotary_factor": 1.0, "model.hidden_act": "gelu",
            **train(1, 4096, accum), "training.precision": "bf16-master", "strategy.zero_stage": 1,
            "strategy.tensor_parallel": tp, "strategy.pipeline_parallel": pp,
            "strategy.sequence_parallel": tp > 1, "strategy.gradient_checkpointing": "selective",
            "strategy.attention": "flash", "stack.framework": "megatron",
        }  # fmt: skip
        out.append(fig(
            id=f"megatron-gpt-{size.lower()}-{gpus}xh100", source={**MEGATRON, "table": f"model table row {size}"},
            model=f"GPT {size} (Megatron-Core, {layers} layers, hidden {h}, {heads} heads)", params=None,
            gpu="H100 (DGX H100 assumed: 80 GB SXM, 8 per node, InfiniBand)", gpu_preset="h100-80gb", gpus=gpus,
            nodes=gpus // 8, stack="Megatron-Core r0.8.0 (Megatron-LM)", precision="bf16 (MFU against 989 TFLOP/s)",
            micro_batch=1, global_batch=batch, seq_len=4096, parallelism={"dp": dp, "tp": tp, "pp": pp},
            activation_checkpointing="not stated", compile=False,
            fused_kernels="Megatron-Core with TransformerEngine (not stated); DP/TP/PP communication overlap "
            "(--overlap-grad-reduce, --overlap-param-gather, --tp-comm-overlap)",
            timed="per-GPU teraFLOP/s (Megatron's model FLOPs) and MFU, end to end (data loading, optimizer, "
            "communication, logging)",
            raw={"value": tflops, "unit": "TFLOP/s per GPU"}, mfu=mfu, tokens_per_s_per_gpu=round(tps, 1),
            derivation=f"{tflops} TFLOP/s / {per_token:.4g} FLOP/token (Megatron's formula: 12·L·h²·(6 + s/h) + "
            "6·V·h for a 4h GELU MLP, MHA, seq 4096, vocab 131072)",
            not_stated={"micro_batch": "1 assumed (batch / DP sequences per DP rank as accumulation)",
                        "activation recomputation": "selective assumed (Megatron's attention-core recompute; with "
                        "flash attention nothing is re-run)", "architecture": "GELU 4h MLP, RoPE, untied "
                        "embeddings assumed: the parameter counts (1.745B, 7.115B, 69.8B, 177.2B, 461.5B) match "
                        "the table's sizes", "optimizer": "distributed optimizer (ZeRO-1) assumed"},
            vramplan_args=plan_args(None, "h100-80gb", 8, gpus // 8, sets),
            not_expressible=["interleaved pipeline schedule and TP communication overlap, if used",
                             "Megatron GPT (LayerNorm, fused QKV) as the GPT-NeoX family with a sequential block"],
            caveats="the table's figures are read from an image (README images/model_table.png)",
            source_in_mfu_default=True,
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# karpathy/llm.c: scripts/run_gpt2_*.sh headers and the README's GPT-2 124M step logs

LLMC = {"where": "github.com/karpathy/llm.c", "date": "2024"}


def llmc_entries() -> list[Entry]:
    out = []
    # size, hidden, layers, heads, GPU preset, micro-batch, tokens per step, ms per step, script's last commit
    rows = rows_of("""
        124M 768 12 12 a100-80gb 64 524288 300 a0d5dbb(2024-05-30)
        350M 1024 24 16 a100-80gb 64 524288 820 a0d5dbb(2024-05-30)
        774M 1280 36 20 a100-80gb 32 524288 1700 42dff87(2024-06-12)
        1558M 1600 48 25 h100-80gb 16 1048576 2800 c6efd90(2024-07-02)
    """)
    for size, *nums, gpu, mb_text, tokens_text, ms_text, commit in rows:
        h, layers, heads = (int(x) for x in nums)
        mb, tokens, ms = int(mb_text), int(tokens_text), int(ms_text)
        gpu_name = "8X A100 80GB SXM" if gpu == "a100-80gb" else "8X H100 80GB SXM"
        script = f"scripts/run_gpt2_{size}.sh"
        accum = tokens // (mb * 1024 * 8)
        tps = tokens / (ms / 1000) / 8
        sets = {
            **gpt2_model(h, layers, heads, 50304, 1024, "gelu_new"),
            **train(mb, 1024, accum), "training.precision": "bf16-master", "strategy.zero_stage": 1,
            "strategy.gradient_checkpointing": "none", "strategy.attention": "flash",
            "strategy.fused_cross_entropy": True, "stack.framework": "custom",
        }  # fmt: skip
        out.append(fig(
            id=f"llmc-gpt2-{size.lower()}-8x{gpu.split('-')[0]}",
            source={**LLMC, "where": f"github.com/karpathy/llm.c {script} (header comment)",
                    "commit": commit.replace("(", " ("),
                    "table": f"'on {gpu_name} steps in ~{ms}ms/iter'" if ms < 1000 else
                    f"'on {gpu_name} steps in ~{ms / 1000:g}s/iter'"},
            model=f"GPT-2 {size}", params=None, gpu=gpu_name, gpu_preset=gpu, gpus=8, nodes=1,
            stack="llm.c train_gpt2cu (C/CUDA, cuBLAS, cuDNN flash attention: make USE_CUDNN=1), mpirun -np 8",
            precision="bf16 with fp32 master weights (llm.c default use_master_weights=1)", micro_batch=mb,
            global_batch=tokens // 1024, seq_len=1024, parallelism={"dp": 8, "zero": 1},
            activation_checkpointing="none (-r 0)", compile=False,
            fused_kernels="llm.c's fused CUDA kernels (fused classifier / cross-entropy, layernorm+residual)"
            + (", -ge 1 GELU fusion into the matmul" if size == "1558M" else ""),
            timed="time per optimizer step, as the script's header states it (approximate: '~')",
            raw={"value": ms, "unit": "ms per step (~)"}, step_seconds=ms / 1000, tokens_per_s_per_gpu=round(tps, 1),
            derivation=f"{tokens} tokens per step / {ms / 1000:g} s / 8 GPUs",
            vramplan_args=plan_args(None, gpu, 8, 1, sets),
            not_expressible=["llm.c's hand-written CUDA kernels (not PyTorch's)", "vocab padded to 50304 "
                             "(llm.c's padded_vocab_size) and the GPT-2 biases kept, as the model has them"],
            caveats="a rounded figure ('~') from a comment: precision about ±5%",
        ))  # fmt: skip
    # README (05be4f6, 2024-05-22): GPT-2 124M fine-tuning on tiny_shakespeare, B=4, T=1024, one A100
    readme = {"where": "github.com/karpathy/llm.c README.md", "commit": "05be4f6 (2024-05-22)", "date": "2024-05"}
    sets = {
        **gpt2_model(768, 12, 12, 50257, 1024, "gelu_new"), **train(4, 1024), "training.precision": "fp32",
        "strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none", "strategy.attention": "eager",
        "stack.framework": "custom",
    }  # fmt: skip
    tf32 = "fp32 weights with TF32 tensor-core matmuls: the plan's fp32 uses the GPU's fp32 rate, not TF32's"
    out.append(fig(
        id="llmc-gpt2-124m-fp32cuda-1xa100", source={**readme, "table": "train_gpt2fp32cu log, 'step 74/74: ... "
        "(78.009975 ms)'; steps 2-74 at 77-79 ms"},
        model="GPT-2 124M", gpu="'my A100' (model not stated)", gpu_preset="a100-40gb",
        gpus=1, nodes=1, stack="llm.c train_gpt2fp32cu (fp32 CUDA, cuBLAS)", precision="fp32 (TF32 matmuls)",
        micro_batch=4, global_batch=4, seq_len=1024, parallelism={}, activation_checkpointing="none",
        compile=False, fused_kernels="llm.c fp32 CUDA kernels, no flash attention",
        timed="ms per step printed by the training loop (AdamW step included)",
        raw={"value": 78.0, "unit": "ms per step"}, step_seconds=0.078, tokens_per_s_per_gpu=round(4096 / 0.078, 1),
        derivation="4 x 1024 tokens / 0.078 s", objective="sft",
        not_stated={"gpu": "A100 40GB assumed (the A100 model is not named)"},
        vramplan_args=plan_args(None, "a100-40gb", 1, 1, sets),
        not_expressible=[tf32, "llm.c's CUDA kernels"],
    ))  # fmt: skip
    out.append(fig(
        id="llmc-gpt2-124m-pytorch-compile-tf32-1xa100", source={**readme, "table": "'python train_gpt2.py ... "
        "--batch_size 4 --compile 1 --tensorcores 1': 'on my A100 this currently runs at ~80ms/iteration'"},
        model="GPT-2 124M", gpu="'my A100' (model not stated)", gpu_preset="a100-40gb",
        gpus=1, nodes=1, stack="PyTorch train_gpt2.py (nanoGPT-like), torch.compile", precision="fp32 with TF32 "
        "tensor cores (--tensorcores 1)", micro_batch=4, global_batch=4, seq_len=1024, parallelism={},
        activation_checkpointing="none", compile=True, fused_kernels="torch.compile (inductor)",
        timed="ms per iteration after compilation (~)", raw={"value": 80, "unit": "ms per iteration (~)"},
        step_seconds=0.080, tokens_per_s_per_gpu=round(4096 / 0.080, 1), derivation="4 x 1024 tokens / 0.080 s",
        objective="sft", not_stated={"gpu": "A100 40GB assumed", "attention": "eager (manual attention in "
                                     "train_gpt2.py then) assumed"},
        vramplan_args=plan_args(None, "a100-40gb", 1, 1, {**sets, "strategy.compile": True}),
        not_expressible=[tf32],
    ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# Dao-AILab/flash-attention training/README.md 'Training speed' (GPT3 on The Pile, 8 x A100 80GB)


def flash_attention_training_entries() -> list[Entry]:
    src = {
        "where": "github.com/Dao-AILab/flash-attention training/README.md 'Training speed'",
        "commit": "4a6eaa9f (table added 2022-11-29); configs training/configs/experiment/pile/gpt3*-flash.yaml "
        "at that commit",
        "date": "2022-11",
    }
    # (name, hidden, layers, heads, tokens/s for 8 GPUs, micro, global sequences, ZeRO-1)
    rows = (
        ("GPT3-125M", 768, 12, 12, 1_310_000, 32, 256, False),
        ("GPT3-355M", 1024, 24, 16, 503_000, 32, 256, False),
        ("GPT3-760M", 1536, 24, 16, 245_000, 16, 256, True),
        ("GPT3-1.3B", 2048, 24, 16, 169_000, 8, 512, True),
        ("GPT3-2.7B", 2560, 32, 20, 85_000, 4, 512, True),
    )
    out = []
    for name, h, layers, heads, total, mb, gb, zero1 in rows:
        accum = gb // (8 * mb)
        sets = {
            **gpt2_model(h, layers, heads, 50264, 2048, "gelu_new"), **train(mb, 2048, accum),
            "training.precision": "bf16-autocast", "strategy.zero_stage": 1 if zero1 else 0,
            "strategy.gradient_checkpointing": "none", "strategy.attention": "flash",
            "strategy.fused_cross_entropy": True, "training.optimizer_impl": "fused", "stack.framework": "custom",
        }  # fmt: skip
        out.append(fig(
            id=f"flashattn-{name.lower()}-8xa100", source={**src, "table": f"row {name}"}, model=name, params=None,
            gpu="A100 80GB SXM4 (400 W), NVLink", gpu_preset="a100-80gb", gpus=8, nodes=1,
            stack="flash-attention's training scripts (PyTorch Lightning, flash_attn.models.gpt), 2022-11",
            precision="bf16 (Lightning precision bf16: autocast)", micro_batch=mb, global_batch=gb, seq_len=2048,
            parallelism={"dp": 8, **({"zero": 1} if zero1 else {})}, activation_checkpointing="none",
            compile=False, fused_kernels="FlashAttention, fused MLP, fused dropout+add+LayerNorm, fused bias "
            "dense, fused cross-entropy, apex FusedAdam",
            timed="wall-clock training throughput, tokens/s for the node (8 GPUs)",
            raw={"value": total, "unit": "tokens/s (8 GPUs)"}, tokens_per_s_per_gpu=total / 8,
            derivation=f"{total} tokens/s / 8 GPUs",
            not_stated={"micro_batch": f"{mb} (the config's choice for >= 80 GB: nvidia-smi memory.total / 1000 "
                        "rounds to 82)"},
            vramplan_args=plan_args(None, "a100-80gb", 8, 1, sets),
            not_expressible=["residual stream in fp32 (residual_in_fp32)", "vocab padded to 50264 (multiple of 8)"],
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# litgpt extensions/thunder/README.md: TinyLlama 1.1B pre-training, A100-SXM4-40GB, ms/iter at step 10


def litgpt_entries() -> list[Entry]:
    src = {
        "where": "github.com/Lightning-AI/litgpt extensions/thunder/README.md 'Examples and benchmarks'",
        "commit": "62a491ca (2024-05-13; table unchanged at HEAD 26857050); pretrain script "
        "extensions/thunder/pretrain.py at that commit",
        "date": "2024-05",
    }
    # (setting, devices, ms/iter, global batch, strategy)
    rows = (
        ("Fully-sharded ZeRO 3 / Eager", 8, 456.57, 32, "fsdp"),
        ("Replicated / Eager", 8, 569.46, 512, "ddp"),
        ("- / Eager", 1, 447.65, 512, "single"),
    )
    out = []
    for setting, dev, ms, gb, strat in rows:
        accum = gb // (dev * 4)
        sets = {
            **train(4, 2048, accum), "training.precision": "bf16-pure", "strategy.zero_stage": 3 if strat == "fsdp"
            else 0, "strategy.fsdp_version": 1, "strategy.gradient_checkpointing": "none",
            "strategy.attention": "flash", "stack.framework": "litgpt",
        }  # fmt: skip
        out.append(fig(
            id=f"litgpt-tinyllama-{strat}-eager-{dev}xa100-40gb", source={**src, "table": f"row '{setting}', "
            f"{dev} devices"}, model="TinyLlama 1.1B", model_preset="tinyllama-1.1b",
            gpu="NVIDIA A100-SXM4-40GB", gpu_preset="a100-40gb", gpus=dev, nodes=1,
            stack="litgpt pretrain (Lightning Fabric 2.3.0.dev20240328), torch 2.4.0.dev20240427+cu121",
            precision="bf16-true (Fabric)", micro_batch=4, global_batch=gb, seq_len=2048,
            parallelism={"fsdp": 8} if strat == "fsdp" else ({"dp": 8} if strat == "ddp" else {}),
            activation_checkpointing="none", compile=False, fused_kernels="SDPA (litgpt default)",
            timed="ms per iteration (one micro-batch forward/backward; the optimizer step on the last of each "
            "accumulation) at step 10",
            raw={"value": ms, "unit": "ms/iter"}, tokens_per_s_per_gpu=round(4 * 2048 / (ms / 1000), 1),
            derivation=f"4 x 2048 tokens per iteration per GPU / {ms / 1000:g} s",
            not_stated={"global batch": f"{gb} ("
                        + ("--train.global_batch_size 32" if gb == 32 else "the script default 512")
                        + f"): {accum} micro-batches per optimizer step"},
            vramplan_args=plan_args("tinyllama-1.1b", "a100-40gb", dev, 1, sets),
            not_expressible=["one iteration at step 10, not an average: early-step noise"],
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# fms-fsdp README (May 2024: torch.compile, 128 A100 and 96 H100); its Feb 2024 A100 figures are `REFERENCED`


# fms-fsdp's llama "34b" variant (fms_fsdp/utils/config_utils.py at ed74fd5: emb_dim 8192, 64 heads, 8 kv heads,
# 48 layers, hidden_grow_factor 22016 / 8192; vocab 32000 from fms_fsdp/config/training.py)
LLAMA2_34B: Sets = {
    "model.model_type": "llama", "model.vocab_size": 32000, "model.hidden_size": 8192,
    "model.intermediate_size": 22016, "model.num_hidden_layers": 48, "model.num_attention_heads": 64,
    "model.num_key_value_heads": 8, "model.tie_word_embeddings": False,
}  # fmt: skip


def fms_fsdp_entries() -> list[Entry]:
    src = {
        "where": "github.com/foundation-model-stack/fms-fsdp README.md",
        "commit": "ed74fd5ddec00e309eac20f478de883464c86526 (2024-05-09, 'update numbers with compile')",
        "date": "2024-05",
    }
    # (size, sharding, AC, H100 tokens/s/GPU, H100 MFU, A100 tokens/s/GPU)
    rows = (("7b", "HSDP", False, 9600, 0.46), ("13b", "FSDP", True, 4850, 0.43), ("34b", "FSDP", True, 1830, 0.38),
            ("70b", "FSDP", True, 890, 0.38))  # fmt: skip
    presets = {"7b": "llama-2-7b", "13b": "llama-2-13b", "34b": None, "70b": "llama-2-70b"}
    out = []
    for size, shard, ac, tps, mfu in rows:
        sets = {
            **(LLAMA2_34B if size == "34b" else {}), **train(2, 4096), "training.precision": "bf16-fsdp",
            "strategy.zero_stage": 3, "strategy.fsdp_version": 1,
            "strategy.gradient_checkpointing": "full" if ac else "none", "strategy.compile": True,
            "strategy.attention": "flash", "stack.framework": "custom",
        }  # fmt: skip
        out.append(fig(
            id=f"fms-fsdp-{size}-compile-96xh100", source={**src, "table": f"throughput table, row {size}, column "
            "'H100 96 GPUs with 800 Gbps'"}, model=f"Llama 2 architecture {size}", model_preset=presets[size],
            params=None, gpu="H100 80G (MFU table), 800 Gbps interconnect", gpu_preset="h100-80gb", gpus=96,
            nodes=12, stack="fms-fsdp (PyTorch FSDP1, ibm-fms), PyTorch nightly (May 2024)",
            precision="bf16 FSDP MixedPrecision", micro_batch=2, global_batch=192, seq_len=4096,
            parallelism={shard.lower(): 96}, activation_checkpointing="selective (a fraction of blocks)" if ac else
            "none", compile=True, fused_kernels="SDPA flash v2", timed="training throughput, tokens/sec/GPU",
            raw={"value": tps, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=tps, mfu=mfu,
            not_stated={"seq_len": "4096 (fms_fsdp/config/training.py default)", "AC fraction": "full checkpointing "
                        "of every block assumed for 'Selective AC' (selective_checkpointing's fraction not stated)"}
            if ac else {"seq_len": "4096 (fms_fsdp/config/training.py default)"},
            vramplan_args=plan_args(presets[size], "h100-80gb", 8, 12, sets),
            not_expressible=(["HSDP (shard within a node, replicate across nodes): mapped to ZeRO-3 over all ranks"]
                             if shard == "HSDP" else []) + (["selective AC over a fraction of blocks"] if ac else []),
            source_in_mfu_default=True,
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# NVIDIA NeMo docs/source/performance/performance_summary.md (24.07 container, DGX-H100, FP8)


def nemo_entries() -> list[Entry]:
    src = {
        "where": "github.com/NVIDIA/NeMo docs/source/performance/performance_summary.md",
        "commit": "8e3d65dcfe (2024-09-09, '24.07 perf numbers')",
        "date": "2024-09",
    }
    # table, model, preset, task, GPUs, GBS, MBS, seq, TP, PP, CP, VP, tokens/s/GPU, model TFLOP/s/GPU
    rows = rows_of("""
        Pretraining LLAMA3-8B llama-3-8b pretrain 8 128 1 8192 1 1 2 1 12036 697
        Pretraining LLAMA2-70B llama-2-70b pretrain 64 128 1 4096 4 4 1 20 1707 759
        Finetuning LLAMA2-7B llama-2-7b sft 8 32 1 4096 1 1 1 1 17120 682
        Finetuning LLAMA2-7B llama-2-7b lora 8 32 1 4096 1 1 1 1 25206 673
        Finetuning LLAMA2-70B llama-2-70b lora 8 32 1 4096 2 4 1 20 2557 705
    """)
    out = []
    for table, name, preset, task, *nums in rows:
        gpus, gbs, mbs, seq, tp, pp, cp, vp, tps, tflops = (int(x) for x in nums)
        id_ = f"{name.lower()}-{task}-{gpus}xh100"
        dp = gpus // (tp * pp * cp)
        lora = task == "lora"
        # CP 2 has no key: the plan's data parallelism takes the CP ranks (the same tokens per GPU per step)
        accum = gbs // (mbs * gpus // (tp * pp))
        sets = {
            **train(mbs, seq, accum), "training.precision": "bf16-pure" if lora else "bf16-master",
            "training.method": "lora" if lora else "full", "strategy.zero_stage": 0 if lora else 1,
            "strategy.tensor_parallel": tp, "strategy.pipeline_parallel": pp, "strategy.sequence_parallel": tp > 1,
            **({} if lora else {"strategy.float8": True}), "strategy.gradient_checkpointing": "none",
            "strategy.attention": "flash", "stack.framework": "megatron",
            **({"training.lora_rank": 32, "training.lora_targets": ALL7}
               if lora else {}),
        }  # fmt: skip
        nodes = max(1, gpus // 8)
        out.append(fig(
            id=f"nemo2407-{id_}", source={**src, "table": f"{table}, row {name}" + (f" {task.upper()}" if table ==
            "Finetuning" else "")}, model=name, model_preset=preset, params=None, gpu="DGX-H100 (H100 80GB SXM)",
            gpu_preset="h100-80gb", gpus=gpus, nodes=nodes, stack="NeMo 24.07 container (Megatron-Core, "
            "TransformerEngine)", precision="FP8 (TransformerEngine) with bf16", micro_batch=mbs,
            global_batch=gbs, seq_len=seq, parallelism={"dp": dp, "tp": tp, "pp": pp, "cp": cp, "vp": vp},
            activation_checkpointing="not stated", compile=False, objective="pretrain" if task == "pretrain" else
            "sft", method="lora" if lora else "full", fused_kernels="TransformerEngine fused attention and fp8 GEMMs",
            timed="Tokens / sec / GPU (and Model TFLOP / sec / GPU)", raw={"value": tps, "unit": "tokens/s/GPU"},
            tokens_per_s_per_gpu=tps,
            not_stated={"recompute": "none assumed", "optimizer": "Megatron distributed optimizer (ZeRO-1) assumed "
                        "for full training", **({"LoRA": "rank 32 on every linear assumed (NeMo 2.0's LoRA default "
                        "at 2024-09: linear_qkv, linear_proj, linear_fc1, linear_fc2, dim 32; NeMo 1's default "
                        "adapts attention_qkv only)"} if lora else {}),
                        **({"packing": "SQuAD inputs packed to 4096 tokens (the doc)"} if table == "Finetuning"
                           else {})},
            vramplan_args=plan_args(preset, "h100-80gb", min(gpus, 8), nodes, sets),
            not_expressible=[*(["context parallelism 2: the plan puts the CP ranks into data parallelism"]
                               if cp > 1 else []), *(["virtual pipeline stages (interleaved schedule)"] if vp > 1
                                                     else []), "fp8 recipe (delayed scaling) beyond the fp8 rate",
                             *(["fp8 GEMMs of the frozen LoRA base (TransformerEngine): vramplan's Float8 converts "
                                "trained linears only, so the plan runs the base in bf16"] if lora else [])],
            caveats=f"Model TFLOP/s/GPU {tflops} is published beside it",
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# Megatron-Bridge docs/performance-summary-archive.md


def megatron_bridge_entries() -> list[Entry]:
    src = {"where": "github.com/NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md"}
    c2511 = "97ad8cc6f (2025-12-04, 'Added 25.11 starter pack'); archive at 067f987df"
    c2604 = "17a381f95 (2026-05-16, '2604_patch_perf_summary'); archive at 067f987df"
    out = [
        fig(
            id="mbridge2511-llama3-8b-fp8-fsdp-8xh100",
            source={**src, "commit": c2511, "date": "2025-12", "table": "25.11 NeMo Container, DGX-H100, LLAMA3_8B"},
            model="LLAMA3_8B", model_preset="llama-3-8b", params=None, gpu="DGX-H100", gpu_preset="h100-80gb",
            gpus=8, nodes=1, stack="NeMo 25.11 container (Megatron-Bridge, Megatron-Core, Megatron FSDP)",
            precision="FP8-CS (current scaling)", micro_batch=1, global_batch=128, seq_len=8192,
            parallelism={"fsdp": 8, "ga": 16}, activation_checkpointing="not stated", compile=False,
            fused_kernels="TransformerEngine", timed="Tokens / sec / GPU",
            raw={"value": 14451, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=14451,
            not_stated={"recompute": "none assumed"},
            vramplan_args=plan_args("llama-3-8b", "h100-80gb", 8, 1, {
                **train(1, 8192, 16), "training.precision": "bf16-fsdp", "strategy.zero_stage": 3,
                "strategy.float8": True, "strategy.gradient_checkpointing": "none", "strategy.attention": "flash",
                "stack.framework": "megatron"}),
            not_expressible=["Megatron FSDP (its own buffers and overlap)", "fp8 current scaling"],
            caveats="Model TFLOP/s/GPU 744",
        ),
        fig(
            id="mbridge2511-llama3.1-405b-fp8-1024xh100",
            source={**src, "commit": c2511, "date": "2025-12", "table": "25.11 NeMo Container, DGX-H100, "
                    "LLAMA3.1_405B"},
            model="LLAMA3.1_405B", model_preset="llama-3.1-405b", params=None, gpu="DGX-H100", gpu_preset="h100-80gb",
            gpus=1024, nodes=128, stack="NeMo 25.11 container (Megatron-Bridge, Megatron-Core)",
            precision="FP8-CS", micro_batch=1, global_batch=512, seq_len=8192,
            parallelism={"dp": 8, "tp": 8, "pp": 8, "cp": 2, "vp": 8, "ga": 64},
            activation_checkpointing="not stated", compile=False, fused_kernels="TransformerEngine",
            timed="Tokens / sec / GPU", raw={"value": 292, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=292,
            not_stated={"recompute": "none assumed", "optimizer": "distributed optimizer (ZeRO-1) assumed"},
            vramplan_args=plan_args("llama-3.1-405b", "h100-80gb", 8, 128, {
                **train(1, 8192, 32), "training.precision": "bf16-master", "strategy.zero_stage": 1,
                "strategy.tensor_parallel": 8, "strategy.pipeline_parallel": 8, "strategy.sequence_parallel": True,
                "strategy.float8": True, "strategy.gradient_checkpointing": "none", "strategy.attention": "flash",
                "stack.framework": "megatron"}),
            not_expressible=["context parallelism 2: the plan puts the CP ranks into data parallelism (DP 16, 32 "
                             "micro-batches per step for the same 512 sequences)", "virtual pipeline stages (VP 8)"],
            caveats="Model TFLOP/s/GPU 737",
        ),
        fig(
            id="mbridge2604-gpt-oss-120b-bf16-64xh100",
            source={**src, "commit": c2604, "date": "2026-05", "table": "26.04.01 NeMo Container, Pre-Training, "
                    "GPT OSS 120B, DGX-H100"},
            model="gpt-oss-120b", model_preset="gpt-oss-120b", params=None, gpu="DGX-H100", gpu_preset="h100-80gb",
            gpus=64, nodes=8, stack="NeMo 26.04.01 container (Megatron-Bridge)", precision="BF16", micro_batch=1,
            global_batch=1280, seq_len=4096, parallelism={"dp": 16, "pp": 4, "ep": 8},
            activation_checkpointing="not stated", compile=False, fused_kernels="TransformerEngine, grouped GEMM "
            "(not stated)", timed="Tokens / sec / GPU", raw={"value": 5824, "unit": "tokens/s/GPU"},
            tokens_per_s_per_gpu=5824, objective="pretrain",
            not_stated={"recompute": "none assumed", "optimizer": "distributed optimizer (ZeRO-1) assumed"},
            vramplan_args=plan_args("gpt-oss-120b", "h100-80gb", 8, 8, {
                **train(1, 4096, 80), "training.precision": "bf16-master", "strategy.zero_stage": 1,
                "strategy.pipeline_parallel": 4, "strategy.expert_parallel": 8,
                "strategy.gradient_checkpointing": "none", "strategy.attention": "flash",
                "stack.framework": "megatron"}),
            not_expressible=["MoE token routing forced balanced (the doc: force-balanced, token-dropless)"],
            caveats="Model TFLOP/s/GPU 158",
        ),
        fig(
            id="mbridge2604-gpt-oss-120b-bf16-64xb200",
            source={**src, "commit": c2604, "date": "2026-05", "table": "26.04.01 NeMo Container, Pre-Training, "
                    "GPT OSS 120B, DGX-B200"},
            model="gpt-oss-120b", model_preset="gpt-oss-120b", params=None, gpu="DGX-B200", gpu_preset="b200",
            gpus=64, nodes=8, stack="NeMo 26.04.01 container (Megatron-Bridge)", precision="BF16", micro_batch=4,
            global_batch=1280, seq_len=4096, parallelism={"dp": 64, "ep": 8},
            activation_checkpointing="not stated", compile=False, fused_kernels="TransformerEngine",
            timed="Tokens / sec / GPU", raw={"value": 13568, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=13568,
            not_stated={"recompute": "none assumed", "optimizer": "distributed optimizer (ZeRO-1) assumed"},
            vramplan_args=plan_args("gpt-oss-120b", "b200", 8, 8, {
                **train(4, 4096, 5), "training.precision": "bf16-master", "strategy.zero_stage": 1,
                "strategy.expert_parallel": 8, "strategy.gradient_checkpointing": "none",
                "strategy.attention": "flash", "stack.framework": "megatron"}),
            not_expressible=["MoE token routing forced balanced"],
            caveats="Model TFLOP/s/GPU 369",
        ),
    ]  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# NeMo RL docs/about/performance-summary.md, v0.5 section, H100 BF16: GRPO on OpenMathInstruct-2


def nemo_rl_entries() -> list[Entry]:
    src = {
        "where": "github.com/NVIDIA-NeMo/RL docs/about/performance-summary.md, 'Nemo RL v0.5', H100 BF16",
        "commit": "108bffdab (2026-01-20, 'v0.5 performance results update'); recipes at tag v0.5.0 (6c708930)",
        "date": "2026-01",
    }
    # model, preset, GPUs, G-Average Seq len, TP, PP, EP, vLLM TP, AC, tokens/s/GPU, step s, recipe file
    rows = rows_of("""
        LLAMA3.1_8B llama-3.1-8b 16 1019 1 2 1 1 True 1581 92.8 grpo-llama3.1-8b-instruct-2n8g.yaml
        Qwen3-32B qwen3-32b 32 3251 4 4 1 4 False 571 376.0 grpo-qwen3-32b-4n8g.yaml
        Qwen3-30B3A qwen3-30b-a3b 32 3196 1 1 8 2 False 1066 198.0 grpo-qwen3-30ba3b-4n8g.yaml
    """)
    prompt = 128
    out = []
    for name, preset, *nums, ac_text, tps_text, step_text, recipe in rows:
        gpus, avg, tp, pp, ep, vtp = (int(x) for x in nums)
        ac, tps, step, id_ = ac_text == "True", int(tps_text), float(step_text), preset
        dp = gpus // (tp * pp)
        accum = 512 // dp
        sets = {
            "training.objective": "grpo", **train(1, prompt + (avg - prompt), accum),
            "training.precision": "bf16-master", "strategy.zero_stage": 1, "strategy.tensor_parallel": tp,
            "strategy.pipeline_parallel": pp, "strategy.sequence_parallel": tp > 1,
            **({"strategy.expert_parallel": ep} if ep > 1 else {}),
            "strategy.gradient_checkpointing": "full" if ac else "none", "strategy.attention": "flash",
            "stack.framework": "megatron", "rl.num_generations": 32, "rl.max_prompt_length": prompt,
            "rl.max_completion_length": avg - prompt, "rl.generation": "vllm-colocate",
            "rl.vllm_gpu_memory_utilization": 0.6, "rl.vllm_tensor_parallel_size": vtp, "rl.beta": 0.01,
            "rl.padding_free": True,
        }  # fmt: skip
        out.append(fig(
            id=f"nemorl-v0.5-grpo-{id_}-{gpus}xh100", source={**src, "table": f"GRPO row {name}, On policy, "
            f"{gpus} GPUs", "recipe": f"examples/configs/recipes/llm/performance/{recipe} (defaults "
            "examples/configs/grpo_math_1B.yaml)"},
            model=name, model_preset=preset, params=None, gpu="DGX-H100", gpu_preset="h100-80gb", gpus=gpus,
            nodes=gpus // 8, stack="NeMo RL v0.5 (Megatron-Core training backend, vLLM generation, colocated)",
            precision="BF16 training and generation", micro_batch=1, global_batch=512, seq_len=4096,
            parallelism={"dp": dp, "tp": tp, "pp": pp, "ep": ep, "vllm_tp": vtp},
            activation_checkpointing="full" if ac else "none", compile=False, objective="grpo",
            fused_kernels="sequence packing, RoPE and bias-activation fusion (grpo_math_1B.yaml)",
            timed="Total step time (generation, policy and reference log-probs, training, refit), mean of 5 steps; "
            "Tokens / sec / GPU = tokens trained per step / step time / GPUs",
            raw={"value": step, "unit": "s per GRPO step (2,048 rollouts: 64 prompts x 32 generations)"},
            step_seconds=step, tokens_per_s_per_gpu=tps, plan_steps_per_figure=2048 // 512, compare="step_seconds",
            not_stated={"prompt length": f"{prompt} tokens assumed (OpenMathInstruct-2 problems are short); the "
                        f"plan's completion = G-Average Seq len {avg} - {prompt}", "reference": "KL penalty 0.01 "
                        "(grpo_math_1B.yaml): a reference forward per step"},
            vramplan_args=plan_args(preset, "h100-80gb", 8, gpus // 8, sets),
            not_expressible=[
                "one published step = 2,048 rollouts generated at once, then 4 optimizer steps of 512 (T-GBS): the "
                "plan generates 512 per optimizer step (plan_steps_per_figure = 4)",
                "variable completion lengths (mean G-Average Seq len); vramplan takes every completion at "
                "max_completion_length",
                "refit (weights pushed from Megatron to vLLM each step) and the optimizer offload around generation",
                *(["importance-sampling correction (an old-policy log-prob forward)"] if id_ == "llama-3.1-8b" else []),
            ],
            caveats="the published tokens/s/GPU and step time are means of 5 steps; the doc says they do not "
            "exactly satisfy tokens = step time x rate",
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# LLaMA-Factory wiki 'Performance comparison': QLoRA TGS by context length, 1 x A100 40GB


def llamafactory_entries() -> list[Entry]:
    src = {
        "where": "github.com/hiyouga/LLaMA-Factory/wiki/Performance-comparison",
        "commit": "wiki page as edited 2024-04-15 (5 revisions)",
        "date": "2024-04",
    }
    out = []
    for seq, tgs in ((4096, 2926), (16384, 3542), (32768, 2216)):
        sets = {
            **train(1, seq, 4), "training.precision": "bf16-pure", "training.method": "qlora",
            "training.quantization": "nf4", "training.double_quantization": True, "training.lora_rank": 8,
            "training.lora_targets": ["all-linear"], "strategy.zero_stage": 0,
            "strategy.gradient_checkpointing": "full", "strategy.attention": "flash", "stack.framework": "llamafactory",
        }  # fmt: skip
        out.append(fig(
            id=f"llamafactory-llama2-7b-qlora-fa2-{seq // 1024}k-1xa100-40gb",
            source={**src, "table": f"TGS by context length, row FlashAttention2, column {seq:,}"},
            model="LLaMA2-7B", model_preset="llama-2-7b", gpu="NVIDIA A100 40GB * 1",
            gpu_preset="a100-40gb", gpus=1, nodes=1, stack="LLaMA-Factory (Hugging Face Trainer + PEFT + "
            "bitsandbytes), April 2024", precision="4-bit base, bf16 compute", micro_batch=1, global_batch=4,
            seq_len=seq, parallelism={}, activation_checkpointing="on (LLaMA-Factory default)", compile=False,
            objective="sft", method="qlora", fused_kernels="FlashAttention-2", timed="TGS: tokens per GPU per second",
            raw={"value": tgs, "unit": "tokens/s/GPU"}, tokens_per_s_per_gpu=tgs,
            not_stated={"quantization": "bitsandbytes NF4 with double quantization assumed (LLaMA-Factory's 4-bit "
                        "default)", "sequence": f"every sequence at {seq} tokens assumed (the column's length)"},
            vramplan_args=plan_args("llama-2-7b", "a100-40gb", 1, 1, sets),
            not_expressible=["bitsandbytes <= 0.43.1 (April 2024) kept each 4-bit linear's input for backward"],
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# Figures already in ../shared/published/cases.json (field published_tokens_per_s_per_gpu), by case id. The
# arguments are the case's `vramplan_args` with its `future_sets` applied, in today's keys, on built-in presets.

SHARED = "../shared/published/cases.json (figure as the case records it; source in the case)"


def referenced_entries() -> list[Entry]:
    def ref(case: str, tps: float, src: str, **kw: Any) -> Entry:
        return fig(
            id=f"ref-{case}",
            from_case=case,
            source={"where": src, "via": SHARED},
            tokens_per_s_per_gpu=tps,
            raw={"value": tps, "unit": "tokens/s/GPU"},
            derivation=None,
            **kw,
        )

    out: list[Entry] = []
    tt_src = "github.com/pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, 2024-12)"
    tt = {
        "stack": "torchtitan 9dec370",
        "precision": "bf16 (FSDP2 param bf16, reduce fp32)",
        "gpu": TT_GT,
        "gpu_preset": TT_PRESET,
        "fused_kernels": "SDPA flash",
        "timed": "TPS/GPU at the 90th iteration",
    }
    base = {**TT_SETS, "strategy.zero_stage": 3}
    for case, tps, nodes, compile_ in (("torchtitan-8b-fsdp-8xh100", 5762, 1, False),
                                       ("torchtitan-8b-fsdp-128xh100", 5605, 16, False),
                                       ("torchtitan-8b-fsdp-compile-8xh100", 6667, 1, True)):  # fmt: skip
        out.append(ref(
            case, tps, tt_src, **tt, model="Llama 3.1 8B", model_preset="llama-3.1-8b", source_in_mfu_default=True,
            gpus=8 * nodes, nodes=nodes, micro_batch=2, global_batch=16 * nodes, seq_len=8192,
            parallelism={"fsdp": 8 * nodes}, activation_checkpointing="selective (per-op)", compile=compile_,
            vramplan_args=plan_args("llama-3.1-8b", TT_PRESET, 8, nodes, {
                **train(2, 8192), **base, "strategy.gradient_checkpointing": "op",
                **({"strategy.compile": True} if compile_ else {})}),
            not_expressible=[TT_GPU_NOTE],
        ))  # fmt: skip
    out.append(ref(
        "torchtitan-70b-2d-256xh100", 829, tt_src, **tt, model="Llama 3.1 70B", model_preset="llama-3.1-70b",
        gpus=256, nodes=32, micro_batch=16, global_batch=512, seq_len=8192,
        parallelism={"fsdp": 32, "tp": 8}, activation_checkpointing="full", compile=True,
        vramplan_args=plan_args("llama-3.1-70b", TT_PRESET, 8, 32, {
            **train(16, 8192), **base, "strategy.tensor_parallel": 8, "strategy.sequence_parallel": True,
            "strategy.gradient_checkpointing": "full", "strategy.compile": True, "strategy.float8": True}),
        not_expressible=[TT_GPU_NOTE],
    ))  # fmt: skip
    a100 = {**tt, "gpu": "A100 80GB", "gpu_preset": "a100-80gb", "stack": "torchtitan (2024, commit 0413364)"}
    perf = "github.com/pytorch/torchtitan docs/performance.md (2024 version, commit 0413364), 64 A100 80GB"
    for case, tps, preset, name, mb, seq, ac in (
        ("torchtitan-a100-8b-sac-op-64gpu", 2973, "llama-3-8b", "Llama 3 8B", 1, 8192, "op"),
        ("torchtitan-a100-70b-full-64gpu", 331, "llama-3-70b", "Llama 3 70B", 1, 8192, "full"),
        ("torchtitan-a100-llama2-13b-noac-64gpu", 2162, "llama-2-13b", "Llama 2 13B", 2, 4096, "none"),
    ):
        out.append(ref(
            case, tps, perf, **a100, model=name, model_preset=preset, params=None, gpus=64, nodes=8,
            micro_batch=mb, global_batch=64 * mb, seq_len=seq, parallelism={"fsdp": 64},
            activation_checkpointing=ac, compile=False,
            vramplan_args=plan_args(preset, "a100-80gb", 8, 8, {
                **train(mb, seq), **base, "strategy.gradient_checkpointing": ac}),
        ))  # fmt: skip

    tune_src = "github.com/pytorch/torchtune README.md 'Memory and training speed' (commit 30b8519, 2024-09)"
    tune = {"stack": "torchtune (2024-09), torch.compile", "precision": "bf16", "compile": True, "seq_len": 2048,
            "micro_batch": 2, "timed": "tokens/s measured over one full training epoch (per GPU or total: not "
            "stated for the 8-GPU rows)", "fused_kernels": "torch.compile, chunked cross-entropy",
            "objective": "sft"}  # fmt: skip
    ts = {"training.precision": "bf16-pure", "strategy.compile": True, "strategy.attention": "flash",
          "stack.framework": "torchtune"}  # fmt: skip
    single = [
        ("torchtune-8b-full-4090", 1650, "rtx-4090", "full", "full", "RTX 4090"),
        ("torchtune-8b-full-a6000", 2579, "rtx-a6000", "full", "none", "RTX A6000"),
        ("torchtune-8b-lora-4090", 3083, "rtx-4090", "lora", "full", "RTX 4090"),
        ("torchtune-8b-lora-a6000", 4699, "rtx-a6000", "lora", "none", "RTX A6000"),
        ("torchtune-8b-qlora-4090", 2413, "rtx-4090", "qlora", "full", "RTX 4090"),
    ]
    for case, tps, gpu, method, ac, gpu_name in single:
        extra: Sets = {
            "full": {"training.optimizer": "paged-adamw-8bit", "strategy.optimizer_in_backward": True},
            "lora": {"training.method": "lora", "training.lora_rank": 8, "training.lora_targets": ["q", "v"],
                     "training.lora_dtype": "bf16", "training.optimizer_impl": "fused"},
            "qlora": {"training.method": "qlora", "training.quantization": "nf4", "training.lora_rank": 8,
                      "training.lora_targets": ALL7, "training.lora_dtype": "bf16",
                      "training.quantized_modules": "adapted", "training.optimizer_impl": "fused"},
        }[method]  # fmt: skip
        out.append(ref(
            case, tps, tune_src, **tune, model="Llama 3.1 8B", model_preset="llama-3.1-8b",
            gpu=gpu_name, gpu_preset=gpu, gpus=1, nodes=1, global_batch=2, parallelism={}, method=method,
            activation_checkpointing=ac + (" (assumed: the row does not say)" if gpu == "rtx-a6000" else ""),
            vramplan_args=plan_args("llama-3.1-8b", gpu, 1, 1, {
                **train(2, 2048), **ts, "strategy.zero_stage": 0, "strategy.gradient_checkpointing": ac,
                "strategy.loss_chunks": 8, **extra}),
            not_expressible=["torchao NF4 (torchtune) vs bitsandbytes"] if method == "qlora" else [],
        ))  # fmt: skip
    multi = [
        ("torchtune-70b-full-8xa100", 1568, "llama-3.1-70b", "Llama 3.1 70B", "full"),
        ("torchtune-70b-lora-8xa100", 3497, "llama-3.1-70b", "Llama 3.1 70B", "lora"),
        ("torchtune-405b-qlora-8xa100", 653, "llama-3.1-405b", "Llama 3.1 405B", "qlora"),
    ]
    for case, tps, preset, name, method in multi:
        extra = {
            "full": {"strategy.offload_optimizer": "cpu", "strategy.offload_parameters": "cpu",
                     "strategy.loss_chunks": 8},
            "lora": {"training.method": "lora", "training.lora_rank": 16, "training.lora_targets": ["q", "k", "v"],
                     "training.lora_dtype": "bf16", "training.optimizer_impl": "fused", "strategy.loss_chunks": 8},
            "qlora": {"training.method": "qlora", "training.quantization": "nf4", "training.lora_rank": 16,
                      "training.lora_targets": ALL7, "training.lora_dtype": "bf16",
                      "training.quantized_modules": "adapted", "training.optimizer_impl": "fused"},
        }[method]  # fmt: skip
        out.append(ref(
            case, tps, tune_src, **tune, model=name, model_preset=preset, params=None, gpu="A100 80GB (8x)",
            gpu_preset="a100-80gb", gpus=8, nodes=1, global_batch=16, parallelism={"fsdp": 8}, method=method,
            activation_checkpointing="full",
            vramplan_args=plan_args(preset, "a100-80gb", 8, 1, {
                **train(2, 2048), **ts, "strategy.zero_stage": 3, "strategy.gradient_checkpointing": "full",
                **extra}),
            not_expressible=["whether 'Tokens/sec' is per GPU or for the 8 GPUs is not stated (compared per GPU)",
                             *(["FSDP CPU offload of parameters, gradients and the optimizer step"]
                               if method == "full" else [])],
        ))  # fmt: skip

    fms_src = "github.com/foundation-model-stack/fms-fsdp README.md (Feb 2024 table, commit cf6e42c)"
    fms = {"stack": "fms-fsdp (PyTorch FSDP1)", "precision": "bf16 FSDP MixedPrecision", "gpu": "A100 80GB, 400 "
           "Gbps", "gpu_preset": "a100-80gb", "gpus": 128, "nodes": 16, "seq_len": 4096, "compile": False,
           "fused_kernels": "SDPA flash", "timed": "training throughput, token/gpu/sec",
           "source_in_mfu_default": True}  # fmt: skip
    for case, tps, fms_preset, size, mb, ac, shard in (
        ("fms-fsdp-7b-128xa100", 3760, "llama-2-7b", "7b", 2, "none", "hsdp"),
        ("fms-fsdp-13b-128xa100", 1700, "llama-2-13b", "13b", 1, "none", "hsdp"),
        ("fms-fsdp-34b-128xa100", 772, None, "34b", 8, "full", "fsdp"),
        ("fms-fsdp-70b-128xa100", 380, "llama-2-70b", "70b", 6, "full", "fsdp"),
    ):
        out.append(ref(
            case, tps, fms_src, **fms, model=f"Llama 2 architecture {size}", model_preset=fms_preset, params=None,
            micro_batch=mb, global_batch=128 * mb, parallelism={shard: 128}, activation_checkpointing=ac,
            vramplan_args=plan_args(fms_preset, "a100-80gb", 8, 16, {
                **(LLAMA2_34B if fms_preset is None else {}), **train(mb, 4096), "training.precision": "bf16-fsdp",
                "strategy.zero_stage": 3, "strategy.fsdp_version": 1, "strategy.gradient_checkpointing": ac,
                "strategy.attention": "flash", "stack.framework": "custom"}),
            not_expressible=["HSDP mapped to ZeRO-3 over all ranks"] if shard == "hsdp" else [],
        ))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------------------
# kernel figures: FlashAttention-2 README benchmark plots (attention forward + backward TFLOP/s)

FA_SRC = {
    "where": "github.com/Dao-AILab/flash-attention README.md 'Performance', assets/flash2_{a100,h100}_fwd_bwd_"
    "benchmark.png",
    "commit": "4f285b35 (2023-07-17, 'FlashAttention-2 release'); parameters and FLOP count from "
    "benchmarks/benchmark_flash_attention.py at 60499abc (2023-07-28)",
    "date": "2023-07",
}
FA_FLOPS = "4 x batch x seqlen^2 x heads x head_dim / 2 (causal) x 3.5 (forward + backward = 1 + 2.5 forwards)"


def kernel_entries() -> list[Entry]:
    out = []
    figures = {
        ("a100-80gb", "A100 80GB SXM4", "FlashAttention-2"): (99, 133, 155, 173, 182, 189),
        ("a100-80gb", "A100 80GB SXM4", "PyTorch"): (23, 28, 32, 32, 34, None),
        ("h100-80gb", "H100 80GB SXM5", "FlashAttention-2"): (163, 221, 265, 294, 308, 328),
        ("h100-80gb", "H100 80GB SXM5", "PyTorch"): (40, 50, 57, 61, 63, None),
    }
    for (preset, gpu, impl), values in figures.items():
        for seq, tflops in zip((512, 1024, 2048, 4096, 8192, 16384), values, strict=True):
            if tflops is None:
                continue  # OOM in the plot
            out.append({
                "id": f"fa2-kernel-{'fa2' if impl != 'PyTorch' else 'torch'}-causal-hd128-{seq}-{preset}",
                "kind": "kernel", "source": {**FA_SRC, "table": "panel (d) 'With causal mask, head dimension "
                f"128', bar {impl}, sequence {seq}"}, "gpu": gpu, "gpu_preset": preset,
                "kernel": f"{impl} attention forward + backward"
                + (" (flash_attn_func)" if impl != "PyTorch" else " (standard attention in PyTorch ops)"),
                "dtype": "fp16/bf16", "causal": True, "head_dim": 128, "hidden": 2048, "heads": 16,
                "batch": 16384 // seq, "seq_len": seq, "tflops": tflops, "flops_formula": FA_FLOPS,
                "caveats": "values read from the bar labels of a plot; dropout 0",
            })  # fmt: skip
    return out


EXCLUDED: list[dict[str, str]] = [
    {
        "source": "Touvron et al. 2023 (LLaMA §2.4; Llama 2 Table 2)",
        "what": "LLaMA-65B 'around 380 tokens/sec/GPU on 2048 A100'; Llama 2 7B 184,320 and 70B 1,720,320 "
        "A100-80GB GPU-hours for 2T tokens",
        "why": "averages over whole pretraining runs (restarts, evaluation, checkpointing included) with "
        "unpublished strategies: a bound on the step (tests/core/time/test_published_throughput.py), not a step "
        "timing",
    },
    {
        "source": "github.com/karpathy/nanoGPT README.md (efficiency notes, Dec 2022)",
        "what": "torch.compile 'cutting down iteration time from ~250ms / iter to 135ms / iter'",
        "why": "neither the GPU nor the configuration of that iteration is stated ('e.g.')",
    },
    {
        "source": "github.com/karpathy/nanoGPT README.md and config/train_gpt2.py",
        "what": "GPT-2 124M on 8 x A100 40GB 'in about 4 days' (README) / '~5 days' (config comment), 600,000 "
        "iterations of 491,520 tokens",
        "why": "a rounded duration the two files disagree on (4 vs 5 days: 25%), including evaluation",
    },
    {
        "source": "github.com/Lightning-AI/litgpt config_hub/finetune/README.md",
        "what": "'Training runtime' of LoRA/QLoRA/full configs on 1 and 4 x A10G (Alpaca2k, max seq 512)",
        "why": "whole-run wall time over variable-length samples (token count not stated) including validation; "
        "the 4 x A10G rows equal the 1 x A10G rows, so the GPU count is doubtful",
    },
    {
        "source": "github.com/OpenRLHF/OpenRLHF README.md 'Performance' (2024-05, 391e1de4)",
        "what": "PPO, 1024 prompts, 1 epoch, A800: 7B 471.11 s (16 GPUs) ... 70B 4488.53 s (32 GPUs)",
        "why": "prompt and generation lengths, batch sizes and the placement of actor/critic/reward/reference/vLLM "
        "are not stated; the README itself says the data is outdated",
    },
    {
        "source": "github.com/deepspeedai/DeepSpeedExamples applications/DeepSpeed-Chat README.md Table 1",
        "what": "RLHF step 3 (PPO) durations, e.g. OPT-13B on 8 x A100 80GB in 9 hrs for 135M tokens",
        "why": "the per-cell batch and ZeRO/LoRA settings are not stated (the scripts use 4 prompts per GPU, the "
        "text 'up to 1024 pairs per step'); OPT and the 350M critic have no preset",
    },
    {
        "source": "github.com/deepspeedai/DeepSpeed blogs/deepspeed-ulysses/README.md",
        "what": "'sustained throughput of over 175 TFlops/GPU' and per-sequence-length TFLOP/s plots (7B, 30B GPT)",
        "why": "plots only, batch size chosen per point, and Ulysses sequence parallelism has no plan key",
    },
    {
        "source": "github.com/NVIDIA/Megatron-LM images/strong_scaling.png, weak_scaling.png",
        "what": "GPT-3 175B strong scaling 96 -> 4,608 H100 (MFU 47% -> 42%)",
        "why": "log-scale plots without value labels (the model table's figures are taken instead)",
    },
    {
        "source": "huggingface.co/blog/vllm-colocate (2025-06-03)",
        "what": "GRPO colocated vs server vLLM throughput (1.5B, 7B, 72B)",
        "why": "relative speedups and unlabeled plots only",
    },
    {
        "source": "github.com/hiyouga/LLaMA-Factory/wiki/Performance-comparison, first two tables",
        "what": "LLaMA2-7B LoRA TGS, batch 4, accumulation 2, length 1024: HF 2,392 / HF+FA2 2,954 ...",
        "why": "the GPU of these two tables is not stated (the third table's A100 40GB is taken)",
    },
    {
        "source": "github.com/Dao-AILab/flash-attention training/configs/experiment/owt/base.yaml comment",
        "what": "GPT2-small 376 -> 368 ms per global step (batch 512) on 8 A100s with apex FusedAdam",
        "why": "which model implementation and A100 memory size the comment refers to is not stated",
    },
    {
        "source": "unsloth.ai benchmarks; huggingface.co/blog/unsloth-trl",
        "what": "Unsloth vs Hugging Face speedups (1.87x-2.74x on 1 x A100 40GB)",
        "why": "relative figures only",
    },
]


# --------------------------------------------------------------------------------------------------------------
# assembling, checking against the shared file, predicting


SOURCES = (
    ("torchtitan", torchtitan_entries),
    ("llm-foundry", llm_foundry_entries),
    ("megatron-lm", megatron_entries),
    ("llm.c", llmc_entries),
    ("flash-attention", flash_attention_training_entries),
    ("litgpt", litgpt_entries),
    ("fms-fsdp", fms_fsdp_entries),
    ("nemo", nemo_entries),
    ("megatron-bridge", megatron_bridge_entries),
    ("nemo-rl", nemo_rl_entries),
    ("llama-factory", llamafactory_entries),
    ("cases.json", referenced_entries),
)


def entries() -> list[Entry]:
    """Every figure, each with its `group` (the source it was read from; `cases.json` for the referenced ones)."""
    return [{"id": e["id"], "group": group, **e} for group, build in SOURCES for e in build()]


def check_references(figs: list[Entry], cases_path: Path) -> list[str]:
    """Each `from_case` figure against the shared file's `published_tokens_per_s_per_gpu`: the mismatches."""
    cases = {c["id"]: c for c in json.loads(cases_path.read_text())}
    bad = []
    for e in figs:
        if e["from_case"] is None:
            continue
        case = cases.get(e["from_case"])
        if case is None or case.get("published_tokens_per_s_per_gpu") != e["tokens_per_s_per_gpu"]:
            bad.append(
                f"{e['id']}: {e['tokens_per_s_per_gpu']} vs {case and case.get('published_tokens_per_s_per_gpu')}"
            )
    return bad


@contextmanager
def no_user_presets() -> Iterator[None]:
    """Built-in presets only (an empty VRAMPLAN_CONFIG_DIR) and no GPU detection, restored on exit."""
    from bench.data.published_rows import presets_from

    with tempfile.TemporaryDirectory() as empty, presets_from(empty):
        yield


def predict(e: Entry) -> dict[str, Any]:
    """vramplan's prediction for one entry's arguments, parsed and resolved as the CLI does: tokens/s/GPU, the
    seconds of one published step (plan steps x `plan_steps_per_figure`), the error on the compared figure
    (``error``, on tokens/s where that is compared) and the step time's (``time_error``), and the plan's method,
    framework, step kind and model parameters (what `core.time.accuracy` selects by)."""
    from vramplan.cli.parser import build_parser
    from vramplan.core.files.planio import resolve_plan
    from vramplan.core.memory.peak import estimate
    from vramplan.core.time.accuracy import plan_kind
    from vramplan.core.time.step import step_time

    a = build_parser("estimate").parse_args(e["vramplan_args"])
    assert a.json and a.plan is None, e["id"]
    # --gpus and --nodes come first, as cli.parser.run puts them: an explicit --set of the same key wins
    sets = [f"hardware.gpus_per_node={a.gpus}", f"hardware.nodes={a.nodes}", *a.sets]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PlanNotices: the CLI prints them on stderr
        plan = resolve_plan(None, a.model, a.gpu, sets, a.hf_config)
        st = step_time(plan)
        params = estimate(plan).params_total
    step = st.step_seconds * e["plan_steps_per_figure"]
    if e["compare"] == "step_seconds":
        err = time_err = step / e["step_seconds"] - 1
    else:
        err = st.tokens_per_second_per_gpu / e["tokens_per_s_per_gpu"] - 1
        time_err = e["tokens_per_s_per_gpu"] / st.tokens_per_second_per_gpu - 1
    return {
        "tokens_per_s_per_gpu": st.tokens_per_second_per_gpu,
        "step_seconds": step,
        "error": err,
        "time_error": time_err,
        "params": params,
        "arch_params": plan.model.arch().total_params,
        "method": plan.training.method,
        "framework": plan.stack.framework,
        "step_kind": plan_kind(plan),
    }


def table(figs: list[Entry]) -> str:
    """Each figure with vramplan's prediction (Markdown); the median |error| per source and overall at the end."""
    lines = [
        "| id | model | params | GPU x n | stack | seq | method | figure | tokens/s/GPU: published / vramplan | "
        "error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {}
    with no_user_presets():
        for e in figs:
            p = predict(e)
            errs.setdefault(e["group"], []).append(abs(p["error"]))
            n = e["params"] or p["params"]
            figure = f"{e['raw']['value']:g} {e['raw']['unit']}"
            if e["compare"] == "step_seconds":
                figure += f" (vramplan {p['step_seconds']:.1f} s)"
            lines.append(
                f"| {e['id']} | {e['model']} | {n / 1e9:.3g}B | {e['gpu_preset']} x {e['gpus']} | "
                f"{e['stack'].split(' (')[0].split(',')[0]} | {e['seq_len']} | {e['objective']}/{e['method']} | "
                f"{figure} | {e['tokens_per_s_per_gpu']:g} / {p['tokens_per_s_per_gpu']:.0f} | {p['error']:+.0%} |"
            )
    lines += ["", "| source | figures | median abs error |", "|---|---|---|"]
    lines += [f"| {g} | {len(v)} | {statistics.median(v):.0%} |" for g, v in errs.items()]
    every = [x for v in errs.values() for x in v]
    lines.append(f"| all | {len(every)} | {statistics.median(every):.0%} |")
    return "\n".join(lines)


def with_params(figs: list[Entry]) -> list[Entry]:
    """The figures with `params` filled where the source gives none: vramplan's count of the plan's model
    (`params_source` says which)."""
    out = []
    with no_user_presets():
        for e in figs:
            if e["params"] is None:
                out.append(
                    {**e, "params": predict(e)["params"], "params_source": "vramplan's count of the plan's model"}
                )
            else:
                out.append({**e, "params_source": "published"})
    return out


def main() -> None:
    argv = sys.argv[1:]
    figs = entries()
    ids = [e["id"] for e in figs]
    assert len(ids) == len(set(ids)), "duplicate ids"
    if "--write" in argv:
        cases = Path(argv[argv.index("--cases") + 1]) if "--cases" in argv else SHARED_CASES
        if cases.exists():
            bad = check_references(figs, cases)
            if bad:
                sys.exit("figures differ from " + str(cases) + ": " + "; ".join(bad))
            print(f"checked {sum(e['from_case'] is not None for e in figs)} referenced figures against {cases}")
        else:
            print(f"{cases} not found: referenced figures not checked")
        data = {
            "_meta": {
                "collected": COLLECTED,
                "script": "bench/data/published_time.py",
                "fields": "see the script's docstring and `fig`; tokens_per_s_per_gpu is the published figure or "
                "derived from it (`derivation`); compare names the figure vramplan is compared on",
            },
            "figures": with_params(figs),
            "kernels": kernel_entries(),
            "excluded": EXCLUDED,
        }
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        sources = {e["group"] for e in figs}
        print(f"wrote {OUT} ({len(figs)} figures from {len(sources)} sources, {len(data['kernels'])} kernel "
              f"figures, {len(EXCLUDED)} excluded)")  # fmt: skip
        return
    print(table(figs))


if __name__ == "__main__":
    main()
