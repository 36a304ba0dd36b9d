#!/usr/bin/env python3
"""Write tests/data/behaviour_digest.json: what `vramplan estimate --json` prints for seeded random valid plans,
as digests, so a change that must not move any figure (a restructuring) can show it moved none.

Usage, from the repository root:

    python -m bench.data.behaviour_digest --reason "why the estimate's output changed"   # rewrite the file
    python -m bench.data.behaviour_digest --check                                         # compare, write nothing

The plans come from `random.Random(SEED)` over value lists written out below (not read from the schema, so
that moving or renaming code cannot change which plans are drawn); a draw the plan model refuses is skipped, until
`PLANS` valid plans are drawn. Each plan's document is the one `vramplan estimate --json` writes
(`vramplan.cli.report.estimate_document`), serialised as the CLI serialises it, with no user presets and no GPU
detection. The file keeps, per plan, a short digest of the memory part (everything but ``time``) and of the
``time`` part, the digest of the whole, and the reasons the file was rewritten (newest last):
tests/core/test_behaviour_digest.py fails while the checkout's output differs from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
TARGET = ROOT / "tests" / "data" / "behaviour_digest.json"
SEED = 20261206
PLANS = 1200
SHORT = 16  # hex digits kept per plan and part: enough to name the plans that moved

MODELS = (
    "llama-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-8b",
    "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b", "tinyllama-1.1b",
    "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b", "qwen1.5-72b",
    "qwen1.5-moe-a2.7b", "qwen3-0.6b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b",
    "qwen3-235b-a22b", "gemma-2-9b", "gemma-2-27b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b",
    "phi-1.5", "phi-2", "phi-3.5-mini", "phi-4", "bloom-560m", "bloom-7b1", "olmo-2-7b", "olmo-2-13b",
    "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b",
)  # fmt: skip
GPUS = (
    "a100-80gb", "a100-40gb", "h100-80gb", "h100-pcie", "h100-nvl", "h200", "gh200", "b200", "b300", "l40s", "l4",
    "a10g", "rtx-4090", "rtx-3090", "rtx-a6000", "v100-32gb", "t4", "mi300x", "mi250x", "h20",
)  # fmt: skip
FRAMEWORKS = (
    "custom", "hf-trainer", "trl", "accelerate", "axolotl", "llamafactory", "torchtune", "torchtitan", "litgpt",
    "deepspeed", "megatron", "unsloth",
)  # fmt: skip
PRECISIONS = (None, "fp32", "bf16-autocast", "fp16-autocast", "bf16-master", "fp16-master", "bf16-pure", "bf16-fsdp")
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion")


def _pick(r: random.Random, values: tuple[Any, ...], weights: tuple[float, ...] | None = None) -> Any:
    return r.choices(values, weights=weights)[0]


def draw(r: random.Random) -> dict[str, Any]:
    """One random set of plan changes (dotted keys); most keys keep their default most of the time."""
    c: dict[str, Any] = {"model.preset": _pick(r, MODELS), "hardware.gpu": _pick(r, GPUS)}
    c["hardware.gpus_per_node"] = _pick(r, (1, 2, 4, 8), (3, 1, 2, 4))
    c["hardware.nodes"] = _pick(r, (1, 2, 4, 16), (8, 2, 1, 1))
    if r.random() < 0.2:
        c["hardware.price_per_gpu_hour"] = _pick(r, (0.5, 2.0, 3.25))
    if r.random() < 0.1:
        c["hardware.host_memory_gib"] = _pick(r, (64.0, 512.0, 2048.0))
    method = _pick(r, ("full", "lora", "qlora"), (4, 3, 2))
    c["training.method"] = method
    c["training.micro_batch_size"] = _pick(r, (1, 2, 4, 8, 16), (5, 3, 3, 2, 1))
    c["training.seq_len"] = _pick(r, (256, 512, 1024, 2048, 4096, 8192, 16384, 32768), (1, 2, 2, 4, 4, 3, 1, 1))
    c["training.grad_accum_steps"] = _pick(r, (1, 2, 4, 8, 32), (5, 2, 2, 1, 1))
    c["training.precision"] = _pick(r, PRECISIONS, (4, 1, 2, 1, 1, 1, 1, 1))
    c["training.optimizer"] = _pick(r, OPTIMIZERS, (8, 1, 1, 1, 1, 1, 1, 1))
    c["training.optimizer_impl"] = _pick(r, ("auto", "foreach", "for-loop", "fused"), (5, 1, 1, 1))
    if method != "full":
        c["training.lora_rank"] = _pick(r, (4, 8, 16, 64, 256))
        c["training.lora_targets"] = _pick(r, (("q", "v"), ("q", "k", "v", "o"), ("all",), ("gate", "up", "down")))
        if r.random() < 0.3:
            c["training.lora_dtype"] = _pick(r, ("fp32", "bf16"))
        if r.random() < 0.2:
            c["training.lora_dropout"] = _pick(r, (0.0, 0.05, 0.1))
        if method == "qlora" or r.random() < 0.1:
            c["training.quantization"] = _pick(r, (None, "nf4", "fp4", "int8", "none"))
            c["training.double_quantization"] = r.random() < 0.7
            if r.random() < 0.3:
                c["training.quantized_modules"] = _pick(r, ("block-linears", "all-linears", "adapted"))
            if r.random() < 0.2:
                c["training.bnb_generation"] = _pick(r, ("current", "legacy"))
            if r.random() < 0.2:
                c["training.kbit_prepare"] = True
            if r.random() < 0.2:
                c["training.quant_compute_dtype"] = _pick(r, ("bf16", "fp16", "fp32"))
    if r.random() < 0.15:
        c["training.mfu"] = _pick(r, (0.2, 0.35, 0.5))
    if r.random() < 0.3:
        c["training.tokens"] = _pick(r, (10**8, 10**9, 2 * 10**10))
    if r.random() < 0.1:
        c["training.learning_rate"] = _pick(r, (1e-6, 2e-5, 3e-4))
    c["strategy.gradient_checkpointing"] = _pick(r, ("none", "selective", "op", "full"), (3, 1, 1, 4))
    if r.random() < 0.2:
        c["strategy.checkpoint_impl"] = _pick(r, ("reentrant", "non-reentrant"))
    if r.random() < 0.1:
        c["strategy.checkpoint_every"] = _pick(r, (2, 3))
    c["strategy.compile"] = r.random() < 0.1
    c["strategy.optimizer_in_backward"] = r.random() < 0.05
    c["strategy.activation_offload"] = _pick(r, ("none", "cpu"), (9, 1))
    c["strategy.loss_chunks"] = _pick(r, (1, 8, 16), (8, 1, 1))
    c["strategy.float8"] = r.random() < 0.05
    c["strategy.attention"] = _pick(r, ("flash", "eager"), (5, 1))
    c["strategy.activation_compression"] = _pick(r, ("none", "int8"), (9, 1))
    c["strategy.fused_cross_entropy"] = r.random() < 0.15
    c["strategy.zero_stage"] = _pick(r, (0, 1, 2, 3), (2, 1, 2, 4))
    c["strategy.offload_optimizer"] = _pick(r, ("none", "cpu", "nvme"), (8, 2, 1))
    c["strategy.offload_parameters"] = _pick(r, ("none", "cpu", "nvme"), (9, 1, 1))
    c["strategy.tensor_parallel"] = _pick(r, (1, 2, 4, 8), (8, 1, 1, 1))
    c["strategy.pipeline_parallel"] = _pick(r, (1, 2, 4), (8, 1, 1))
    c["strategy.sequence_parallel"] = r.random() < 0.1
    if r.random() < 0.2:
        c["strategy.experts"] = _pick(r, ("grouped", "loop", "batched"))
    if r.random() < 0.1:
        c["strategy.expert_parallel"] = _pick(r, (2, 4, 8))
    if r.random() < 0.2:
        c["strategy.fsdp_version"] = _pick(r, (1, 2))
    if r.random() < 0.1:
        c["strategy.fsdp_adapter_wrap"] = _pick(r, ("block", "own"))
    if r.random() < 0.1:
        c["strategy.fsdp_grad_sync"] = _pick(r, ("each", "last"))
    c["stack.framework"] = _pick(r, FRAMEWORKS)
    if r.random() < 0.2:
        key = _pick(r, ("stack.transformers", "stack.peft", "stack.bitsandbytes", "stack.trl", "stack.torchtune"))
        c[key] = _pick(r, ("0.10.0", "0.26.1", "0.43.1", "4.40.0", "5.0.0"))
    if r.random() < 0.15:
        c["overhead.allocator_reserve_percent"] = _pick(r, (0.0, 5.0, 12.5))
    c["overhead.expandable_segments"] = r.random() < 0.2
    if r.random() < 0.1:
        c["overhead.ddp_gradient_as_bucket_view"] = True
    if r.random() < 0.2:
        _rl(r, c)
    return c


def _rl(r: random.Random, c: dict[str, Any]) -> None:
    """A DPO, GRPO or PPO plan: the objective and some of its ``[rl]`` keys."""
    objective = _pick(r, ("dpo", "grpo", "ppo"))
    c["training.objective"] = objective
    if objective == "dpo":
        if r.random() < 0.5:
            c["rl.max_length"] = _pick(r, (512, 1024, 2048))
        c["rl.reference"] = _pick(r, (None, "copy", "adapter", "precomputed", "none"))
    else:
        c["rl.max_prompt_length"] = _pick(r, (None, 256, 512))
        c["rl.max_completion_length"] = _pick(r, (None, 256, 1024))
        c["rl.generation"] = _pick(r, (None, "hf", "vllm-colocate", "vllm-server"))
        if r.random() < 0.3:
            c["rl.vllm_enable_sleep_mode"] = True
        if objective == "grpo":
            c["rl.num_generations"] = _pick(r, (None, 4, 8, 16))
            if r.random() < 0.3:
                c["rl.num_iterations"] = 2
        c["rl.reference"] = _pick(r, (None, "copy", "adapter", "none"))
    if r.random() < 0.5:
        c["rl.beta"] = _pick(r, (0.0, 0.04, 0.1))
    if r.random() < 0.3:
        c["rl.frozen_sharding"] = _pick(r, ("auto", "sharded", "replicated"))
    if r.random() < 0.2:
        c["rl.frozen_offload"] = "cpu"
    if r.random() < 0.3:
        c["rl.padding_free"] = r.random() < 0.5
    if r.random() < 0.2:
        c["rl.prompts"] = 10_000


def documents(n: int = PLANS, seed: int = SEED) -> list[tuple[dict[str, Any], str]]:
    """``n`` valid plans' changes and their `estimate --json` text, without user presets or GPU detection."""
    with tempfile.TemporaryDirectory() as empty:
        os.environ["VRAMPLAN_CONFIG_DIR"] = empty
        os.environ["VRAMPLAN_DETECT"] = "0"
        from vramplan.cli.report import estimate_document
        from vramplan.core.plan.catalogue import presets
        from vramplan.core.plan.helpers.errors import PlanError
        from vramplan.core.plan.schema.plan import default_plan

        presets.reload()
        r = random.Random(seed)
        out: list[tuple[dict[str, Any], str]] = []
        base = default_plan()
        while len(out) < n:
            changes = {k: v for k, v in draw(r).items() if v is not None}
            try:
                plan = base.with_changes(changes)
            except PlanError:
                continue
            out.append((changes, json.dumps(estimate_document(plan))))
        return out


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digests(docs: list[tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """The file's figures: per plan the memory and time parts' short digests, and the whole set's digest."""
    memory, time, whole = [], [], hashlib.sha256()
    for _, text in docs:
        data = json.loads(text)
        t = data.pop("time")
        memory.append(_h(json.dumps(data))[:SHORT])
        time.append(_h(json.dumps(t))[:SHORT])
        whole.update(text.encode() + b"\n")
    return {"plans": len(docs), "seed": SEED, "digest": whole.hexdigest(), "memory": memory, "time": time}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--reason", help="why the estimate's output changed (kept in the file)")
    group.add_argument("--check", action="store_true", help="compare with the committed file; write nothing")
    args = ap.parse_args(argv)
    now = digests(documents())
    old = json.loads(TARGET.read_text()) if TARGET.exists() else {}
    moved = [i for i, (a, b) in enumerate(zip(old.get("memory", []), now["memory"], strict=False)) if a != b]
    timed = [i for i, (a, b) in enumerate(zip(old.get("time", []), now["time"], strict=False)) if a != b]
    print(f"{now['plans']} plans: memory differs in {len(moved)}, time in {len(timed)}; digest {now['digest'][:16]}")
    if args.check:
        return 0 if old.get("digest") == now["digest"] else 1
    reasons = [*old.get("reasons", []), args.reason]
    TARGET.write_text(json.dumps({**now, "reasons": reasons}, indent=0) + "\n")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
