"""A prepared set of plans measured through `vramplan measure`'s own path (`vramplan.measure.measure_plan`) on one
GPU, in under 8 minutes, beside vramplan's estimate of each; one JSON file with the machine, the versions and the
date, meant for ``tests/data/`` once run on a GPU.

    python bench/measure/gpu_measure.py OUT.json [--gpu h100-80gb] [--only NAME ...] [--budget-s 450]
    python bench/measure/gpu_measure.py OUT.json --device cpu      # tiny models: the script end to end, no GPU

The GPU set (single GPU, nothing downloaded, random weights): Llama-3.2-1B full fine-tuning (bf16 autocast, AdamW)
without and with activation checkpointing, Llama-3.2-3B full in pure bf16 with checkpointing, Llama-3.2-3B LoRA
(rank 16, all linear layers) without and with checkpointing, Llama-3.2-3B QLoRA (when bitsandbytes imports),
Qwen2.5-0.5B full. ``--gpu`` is the plan's GPU preset (the estimate's capacity and time; the memory figures do not
depend on it). A case that would start past the budget is skipped and listed as such. Each case's entry holds the
plan, the report (`MeasureReport.to_json`), and the comparison rows (`vramplan.measure.comparison`).

Written for issue 29 (2026-12-03) with torch 2.13, transformers 5.24, peft 0.21; the CPU mode is what the suite runs
(tests/bench/test_gpu_measure.py); no GPU was at hand when it was written, so no GPU figures are committed yet.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

Case = tuple[str, dict[str, Any], float]  # name, plan data, seconds expected on an H100/H200 (build + steps)

ONE_GPU = {"gpus_per_node": 1, "nodes": 1}
TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
TINY_GPT2 = {
    "model_type": "gpt2",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


def _plan(model: dict[str, Any], training: dict[str, Any], strategy: dict[str, Any], gpu: str) -> dict[str, Any]:
    return {
        "model": model,
        "hardware": {**ONE_GPU, "gpu": gpu},
        "training": {"optimizer": "adamw", "grad_accum_steps": 1, **training},
        "strategy": {"zero_stage": 0, "attention": "flash", **strategy},
    }


def gpu_cases(gpu: str) -> list[Case]:
    """The single-GPU set: about 3-4 minutes on an H100 (build with random init, 1 warm-up + 3 steps each)."""
    full = {"method": "full", "precision": "bf16-autocast"}
    lora = {"method": "lora", "lora_rank": 16, "lora_targets": ["q", "k", "v", "o", "gate", "up", "down"]}
    l1, l3, q05 = {"preset": "llama-3.2-1b"}, {"preset": "llama-3.2-3b"}, {"preset": "qwen2.5-0.5b"}
    batch = {"micro_batch_size": 4, "seq_len": 1024}
    cases: list[Case] = [
        ("llama-1b-full-nockpt", _plan(l1, {**full, **batch}, {"gradient_checkpointing": "none"}, gpu), 30),
        ("llama-1b-full-ckpt", _plan(l1, {**full, **batch}, {"gradient_checkpointing": "full"}, gpu), 30),
        (
            "llama-3b-full-bf16-ckpt",
            _plan(l3, {"method": "full", "precision": "bf16-pure", **batch}, {"gradient_checkpointing": "full"}, gpu),
            60,
        ),
        ("llama-3b-lora-nockpt", _plan(l3, {**lora, **batch}, {"gradient_checkpointing": "none"}, gpu), 45),
        ("llama-3b-lora-ckpt", _plan(l3, {**lora, **batch}, {"gradient_checkpointing": "full"}, gpu), 45),
        ("qwen-0.5b-full", _plan(q05, {**full, "micro_batch_size": 8, "seq_len": 512}, {}, gpu), 25),
    ]
    if importlib.util.find_spec("bitsandbytes") is not None:
        qlora = {**lora, "method": "qlora", "quantization": "nf4"}
        cases.append(
            ("llama-3b-qlora-ckpt", _plan(l3, {**qlora, **batch}, {"gradient_checkpointing": "full"}, gpu), 60)
        )
    return cases


def cpu_cases(gpu: str) -> list[Case]:
    """Tiny models (a few seconds each on the CPU): the script end to end without a GPU."""
    small = {"micro_batch_size": 1, "seq_len": 32, "precision": "fp32"}
    eager = {"gradient_checkpointing": "none", "attention": "eager"}
    return [
        ("tiny-llama-full", _plan(TINY_LLAMA, {"method": "full", **small}, eager, gpu), 10),
        ("tiny-llama-lora", _plan(TINY_LLAMA, {"method": "lora", "lora_rank": 4, **small}, eager, gpu), 10),
        (
            "tiny-gpt2-full-ckpt",
            _plan(TINY_GPT2, {"method": "full", **small}, {**eager, "gradient_checkpointing": "full"}, gpu),
            10,
        ),
    ]


def measure_case(name: str, data: dict[str, Any], device: str, steps: int, warmup: int) -> dict[str, Any]:
    """One case: the plan, its estimate's comparison with what `measure_plan` measured, and the seconds it took."""
    from vramplan.core.memory.peak import estimate
    from vramplan.core.plan.schema.plan import plan_from_dict
    from vramplan.core.time.step import step_time
    from vramplan.measure.comparison import comparison_rows
    from vramplan.measure.cuda import local_gpus
    from vramplan.measure.limitations import limitations
    from vramplan.measure.records import MeasureOptions
    from vramplan.measure.run import measure_plan

    plan = plan_from_dict(data)
    t0 = time.perf_counter()
    report = measure_plan(plan, MeasureOptions(device=device, steps=steps, warmup=warmup))  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    limits = limitations(plan, device, local_gpus())
    est = estimate(plan, cpu=device == "cpu")
    rows = comparison_rows(est, step_time(plan), report, limits)
    return {
        "name": name,
        "plan": plan.dump(),
        "seconds": round(seconds, 2),
        "report": report.to_json(),
        "comparison": [r.to_json() for r in rows],
    }


def versions() -> dict[str, str]:
    """vramplan's version and the stack's (`vramplan.measure.run.versions`; bitsandbytes where it is installed)."""
    from vramplan import __version__
    from vramplan.measure.run import STACK
    from vramplan.measure.run import versions as stack_versions

    extra = ("bitsandbytes",) if importlib.util.find_spec("bitsandbytes") is not None else ()
    out = stack_versions(STACK + extra)
    return {"vramplan": __version__, "python": out.pop("python"), **out}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vramplan.core.files.planfile import utc_now

    cases = cpu_cases(args.gpu) if args.device == "cpu" else gpu_cases(args.gpu)
    if args.only:
        unknown = sorted(set(args.only) - {c[0] for c in cases})
        if unknown:
            raise SystemExit(f"gpu_measure: no such case: {', '.join(unknown)}")
        cases = [c for c in cases if c[0] in args.only]
    started = time.perf_counter()
    done: list[dict[str, Any]] = []
    skipped: list[str] = []
    for name, data, expect_s in cases:
        left = args.budget_s - (time.perf_counter() - started)
        if expect_s > left:
            skipped.append(name)
            continue
        print(f"gpu_measure: {name} ({left:.0f} s left)", file=sys.stderr, flush=True)
        done.append(measure_case(name, data, args.device, args.steps, args.warmup))
    machine = done[0]["report"]["machine"] if done else ""
    return {
        "created": utc_now(),
        "command": "python bench/measure/gpu_measure.py " + " ".join(sys.argv[1:]),
        "device": args.device,
        "machine": machine,
        "versions": versions(),
        "total_s": round(time.perf_counter() - started, 1),
        "cases": done,
        "skipped": skipped,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="the JSON file to write (refused if it exists, unless --force)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--gpu", default="h100-80gb", help="the plans' GPU preset (default h100-80gb)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these cases")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=450.0, help="skip cases that would start past it (default 450)")
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    from vramplan.core.files.safewrite import write_atomic
    from vramplan.core.plan.helpers.errors import PlanError

    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"gpu_measure: {out}: already exists, not overwritten (use --force)", file=sys.stderr)
        return 2
    result = run(args)
    try:
        write_atomic(out, json.dumps(result, indent=1) + "\n", overwrite=args.force)
    except PlanError as exc:
        print(f"gpu_measure: {exc}", file=sys.stderr)
        return 2
    print(f"gpu_measure: wrote {out}: {len(result['cases'])} cases in {result['total_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
