#!/usr/bin/env python3
"""Published GPU memory figures of preference/RL post-training runs, and vramplan's estimate of each.

Usage, from the repository root:
  python -m bench.data.published_rl           print each case: the published figure, the estimate, the error
  python -m bench.data.published_rl --write   (re)write tests/data/published_rl.json from CASES below

CASES were collected on 2026-12-03 by searching public issue threads and pages (TRL, verl, OpenRLHF, Unsloth,
LLaMA-Factory) for MEASURED memory of a DPO/GRPO/PPO step with its configuration. Each case names its source URL,
the configuration as stated, the figure's kind (nvidia-smi = the driver's per-process or per-GPU use, which
includes the CUDA context and the caching allocator's reserve; "fits" = a run that trained, no figure), what the
source does not state (and the value assumed for the plan, with why), and caveats. Figures that were computed
rather than measured are listed in EXCLUDED with the reason, not compared. The estimate is ``estimate(plan)``
(vramplan's per-GPU total, including its overhead terms); the error is (estimate - figure) / figure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path("tests/data/published_rl.json")
MIB = 2**20

CASES: list[dict[str, Any]] = [
    {
        "id": "trl3456_qwen3_0.6b_grpo_a100",
        "source": "https://github.com/huggingface/trl/issues/3456",
        "framework": "TRL GRPOTrainer (version of May 2025, 0.17-0.18 per the thread)",
        "stated": "Qwen3-0.6B, one A100 80GB, batch-size 4, max_prompt_length 2048, max_completion_length 1024: "
        "49273MiB / 81920MiB",
        "figure_bytes": 49273 * MIB,
        "kind": "nvidia-smi",
        "fits": True,
        "not_stated": {
            "num_generations": "4 assumed: TRL requires it to divide the global batch (4 on one GPU)",
            "precision": "bf16-autocast assumed (TRL's bf16 default over fp32 weights)",
            "gradient_checkpointing": "off assumed (TRL's default then)",
            "beta": "0.04 assumed (GRPOConfig's default then): a reference copy",
            "generation": "hf assumed (a later commenter runs without vLLM; the reporter does not say)",
        },
        "caveats": "TRL of that time materialised [b, completion, V] logits (selective_log_softmax), not the "
        "fused head of TRL 1.16 that vramplan models; nvidia-smi includes reserved and context memory.",
        "plan": {
            "model": {"preset": "qwen3-0.6b"},
            "hardware": {"gpu": "a100-80gb", "gpus_per_node": 1, "nodes": 1},
            "training": {"objective": "grpo", "micro_batch_size": 4, "precision": "bf16-autocast"},
            "strategy": {"gradient_checkpointing": "none", "attention": "flash"},
            "rl": {
                "num_generations": 4,
                "max_prompt_length": 2048,
                "max_completion_length": 1024,
                "beta": 0.04,
                "generation": "hf",
            },
        },
    },
    {
        "id": "trl3456_qwen3_4b_grpo_a100_oom",
        "source": "https://github.com/huggingface/trl/issues/3456",
        "framework": "TRL GRPOTrainer (as above)",
        "stated": "same config as the 0.6B run: 'it's not weird out of memory for Qwen3 4B' (OOM on the A100 80GB)",
        "figure_bytes": None,
        "kind": "oom",
        "fits": False,
        "not_stated": {"everything else": "as trl3456_qwen3_0.6b_grpo_a100"},
        "caveats": "an OOM: the check is only that vramplan does not call it a fit by a wide margin",
        "plan": {
            "model": {"preset": "qwen3-4b"},
            "hardware": {"gpu": "a100-80gb", "gpus_per_node": 1, "nodes": 1},
            "training": {"objective": "grpo", "micro_batch_size": 4, "precision": "bf16-autocast"},
            "strategy": {"gradient_checkpointing": "none", "attention": "flash"},
            "rl": {
                "num_generations": 4,
                "max_prompt_length": 2048,
                "max_completion_length": 1024,
                "beta": 0.04,
                "generation": "hf",
            },
        },
    },
    {
        "id": "llamafactory3716_llama3_8b_lora_dpo_a10",
        "source": "https://github.com/hiyouga/LlamaFactory/issues/3716",
        "framework": "LLaMA-Factory stage dpo (its CustomDPOTrainer subclasses TRL's DPOTrainer), 2024-05",
        "stated": "Meta-Llama-3-8B-Instruct (SFT'd), LoRA q_proj,v_proj, per_device_train_batch_size 4, "
        "gradient_accumulation_steps 8, cutoff_len 1024, fp16, trained on 'an NVIDIA A10 ... 24G'",
        "figure_bytes": None,
        "kind": "fits",
        "fits": True,
        "not_stated": {
            "lora_rank": "8 assumed (LLaMA-Factory's default)",
            "gradient_checkpointing": "full assumed (LLaMA-Factory enables it by default)",
            "max_length": "1024 (cutoff_len) as the padded pair length: real pairs may be shorter",
        },
        "caveats": "only that it fits on 24 GB; LoRA: the reference is the adapter-disabled base",
        "plan": {
            "model": {"preset": "llama-3-8b"},
            "hardware": {"gpu": "a10", "gpus_per_node": 1, "nodes": 1},
            "training": {
                "objective": "dpo",
                "method": "lora",
                "lora_rank": 8,
                "lora_targets": ["q", "v"],
                "micro_batch_size": 4,
                "grad_accum_steps": 8,
                "precision": "bf16-pure",
            },
            "strategy": {"gradient_checkpointing": "full", "attention": "flash"},
            "rl": {"max_length": 1024},
        },
    },
    {
        "id": "trl5200_qwen2.5_0.5b_qlora_dpo",
        "source": "https://github.com/huggingface/trl/issues/5200",
        "framework": "TRL DPOTrainer 0.12.0",
        "stated": "Qwen2.5-0.5B, 4-bit nf4 (double quant, fp16 compute), LoRA r=64 on q,k,v,o,gate,up,down, "
        "flash_attention_2, a ~1000-token prompt ('you are person' x 500) with 1-token responses: 17GB",
        "figure_bytes": 17 * 10**9,
        "kind": "not stated (GB as written; likely nvidia-smi)",
        "fits": True,
        "not_stated": {
            "gpu": "not stated: an A100 80GB assumed (the figure, not the fit, is compared)",
            "micro_batch_size": "8 assumed (HF TrainingArguments' default per_device_train_batch_size)",
            "max_length": "1024 assumed ('1000 seq length' in the title)",
            "gradient_checkpointing": "full assumed (prepare_model_for_kbit_training enables it)",
        },
        "caveats": "TRL 0.12 computed full [2b, s, V] logits (V = 151,936) in the concatenated forward, not the "
        "fused head of TRL 1.16; the batch size is an assumption, so the error is indicative only.",
        "plan": {
            "model": {"preset": "qwen2.5-0.5b"},
            "hardware": {"gpu": "a100-80gb", "gpus_per_node": 1, "nodes": 1},
            "training": {
                "objective": "dpo",
                "method": "qlora",
                "quantization": "nf4",
                "lora_rank": 64,
                "lora_targets": ["q", "k", "v", "o", "gate", "up", "down"],
                "micro_batch_size": 8,
                "precision": "bf16-pure",
            },
            "strategy": {"gradient_checkpointing": "full", "attention": "flash"},
            "rl": {"max_length": 1024},
        },
    },
]

EXCLUDED: list[dict[str, str]] = [
    {
        "source": "https://unsloth.ai/blog/grpo",
        "what": "Llama 3.1 8B GRPO at 20K context, num_generations 8: TRL + FA2 510.8 GB, Unsloth 54.3 GB",
        "why": "a computed breakdown (training, GRPO loss, inference, KV cache), not a measurement: 510.8 GB "
        "exceeds any one GPU",
    },
    {
        "source": "https://docs.unsloth.ai/basics/memory-efficient-rl",
        "what": "Qwen3-32B LoRA 16-bit GRPO reaches 6,144 context on 1 x H100 80GB (Unsloth Standby)",
        "why": "Unsloth shares one memory pool between vLLM and training (Standby) and offloads checkpoints: "
        "num_generations and batch are not stated; not expressible as a plan",
    },
    {
        "source": "https://github.com/huggingface/trl/issues/2972",
        "what": "Qwen 7B GRPO on 4 x H20 96GB: 40 GB per GPU in the first step, OOM in the second",
        "why": "the sharding (DeepSpeed or not) and the model's loading are not stated: a 7B full fine-tune "
        "cannot fit 96 GB unsharded, so the setup is unknown",
    },
    {
        "source": "https://github.com/lsdefine/simple_GRPO/issues/21",
        "what": "Qwen2.5-7B GRPO on 2 x H20: about 90 and 80 GB",
        "why": "simple_GRPO is its own trainer (not TRL, verl, OpenRLHF or Unsloth); defaults not stated",
    },
]


def estimate_case(case: dict[str, Any]) -> dict[str, Any]:
    """vramplan's estimate of one case: per-GPU total, whether it fits, the peak phase, the error."""
    from vramplan.core.memory.peak import estimate
    from vramplan.core.plan.schema.plan import plan_from_dict

    est = estimate(plan_from_dict(case["plan"]))
    g = est.per_gpu()
    fig = case["figure_bytes"]
    return {
        "estimate_bytes": g["total"],
        "peak_phase": est.peak_phase,
        "fits": est.fits,
        "error": (g["total"] - fig) / fig if fig else None,
    }


def main() -> None:
    if "--write" in sys.argv[1:]:
        OUT.write_text(json.dumps({"cases": CASES, "excluded": EXCLUDED}, indent=1) + "\n")
        print(f"wrote {OUT} ({len(CASES)} cases, {len(EXCLUDED)} excluded)")
        return
    print("| case | kind | published | estimate | error | fits: run / estimate | peak phase |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        r = estimate_case(case)
        fig = case["figure_bytes"]
        pub = f"{fig / 2**30:.1f} GiB" if fig else case["kind"]
        err = f"{r['error']:+.0%}" if r["error"] is not None else "-"
        print(
            f"| {case['id']} | {case['kind']} | {pub} | {r['estimate_bytes'] / 2**30:.1f} GiB | {err} | "
            f"{'yes' if case['fits'] else 'no'} / {'yes' if r['fits'] else 'no'} | {r['peak_phase']} |"
        )


if __name__ == "__main__":
    main()
