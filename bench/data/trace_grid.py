"""The full-size oracle: `vramplan trace` of a grid of plans at full size (dense and MoE, 1B to 72B, full and LoRA,
bf16 / autocast / fsdp / fp32 regimes, no checkpointing and HF's two implementations of it, 2k to 32k tokens, one GPU,
one rank of FSDP2 and DDP in a fake process group and one rank of DeepSpeed's ZeRO-1/2) into
tests/data/trace_truth.json; tests/core/memory/test_trace_grid.py holds the formula
estimator to it.

Each plan is traced on CUDA kernels for two steps (one traced, repeated), its allocations replayed through the
caching allocator model without the GPU's capacity (``unlimited_memory``: a plan larger than its GPU still has a
peak to compare). A plan's record keeps its plan (as its file would), the traced peaks (allocated, reserved, the
tensors' own bytes), the rows of the comparison as traced then, what was taken from the estimate and what was not
traced. The file is rewritten after each plan, so a stopped run keeps what it traced.

Usage: python -m bench.data.trace_grid [--only ID ...] [-o tests/data/trace_truth.json]   (needs the measure extra;
about 20 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "trace_truth.json"
H100 = "h100-80gb"

DENSE = ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "qwen3-8b", "gemma-2-9b",
         "llama-2-13b")  # fmt: skip
MOE = ("qwen1.5-moe-a2.7b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b")


def _p(model: str, method: str, precision: str, gc: str, seq: int, **more: Any) -> tuple[str, dict[str, Any]]:
    """A grid plan: its id and its keys over the default plan (one GPU, ZeRO off unless `more` says)."""
    keys: dict[str, Any] = {
        "training.method": method,
        "training.precision": precision,
        "training.seq_len": seq,
        "training.micro_batch_size": 1,
        "strategy.gradient_checkpointing": "none" if gc == "none" else "full",
        "hardware.gpus_per_node": 1,
        "strategy.zero_stage": 0,
    }
    if gc == "reentrant":
        keys["strategy.checkpoint_impl"] = "reentrant"
    elif gc == "full":
        keys["strategy.checkpoint_impl"] = "non-reentrant"
    keys |= more
    tag = "".join(f"-{k.split('.')[-1]}{'+'.join(v) if isinstance(v, list) else v}" for k, v in more.items())
    return f"{model}-{method}-{precision}-gc{gc}-{seq // 1024}k{tag}", {"model": model, "keys": keys}


def grid() -> dict[str, dict[str, Any]]:
    """The plans, by id (69)."""
    out = [_p(m, "full", "bf16-pure", "full", 4096) for m in DENSE]
    out += [_p(m, "lora", "bf16-pure", "none", 2048) for m in DENSE]
    out += [_p(m, "full", "bf16-autocast", "full", 8192) for m in DENSE[:3]]
    out += [_p(m, "full", "fp32", "none", 2048) for m in DENSE[:2]]
    out += [_p(m, "lora", "bf16-pure", "reentrant", 8192) for m in ("llama-3.2-1b", "llama-3.1-8b", "mistral-7b")]
    out += [_p(m, "lora", "bf16-pure", "full", 32768) for m in ("llama-3.2-1b", "llama-3.1-8b", "qwen3-8b")]
    out += [_p(m, "full", "bf16-pure", "full", 16384) for m in ("llama-3.2-3b", "llama-3.1-8b")]
    out += [
        _p("llama-3.1-8b", "lora", "bf16-pure", "full", 2048, **{"training.micro_batch_size": 4}),
        _p("llama-3.1-8b", "lora", "bf16-pure", "full", 4096, **{"training.grad_accum_steps": 4}),
    ]
    out += [_p(m, "lora", "bf16-pure", "full", 4096) for m in MOE]
    out += [_p(m, "full", "bf16-pure", "full", 4096) for m in ("qwen1.5-moe-a2.7b", "gpt-oss-20b")]
    out += [_p(m, "lora", "bf16-pure", "none", 2048) for m in ("qwen1.5-moe-a2.7b", "qwen3-30b-a3b")]
    out += [_p(m, "lora", "bf16-pure", "full", 16384) for m in ("mixtral-8x7b", "qwen3-30b-a3b")]
    out += [_p("llama-3.1-70b", "lora", "bf16-pure", "full", s) for s in (4096, 16384, 32768)]
    out += [_p("qwen2.5-72b", "lora", "bf16-pure", "full", 4096)]
    zero3 = {"hardware.gpus_per_node": 8, "strategy.zero_stage": 3}
    zero2 = {"hardware.gpus_per_node": 8, "strategy.zero_stage": 2}
    zero1 = {"hardware.gpus_per_node": 8, "strategy.zero_stage": 1}
    out += [
        _p("llama-3.1-70b", "full", "bf16-pure", "full", 4096, **zero3, **{"hardware.nodes": 8}),
        _p("llama-3.1-70b", "full", "bf16-pure", "full", 8192, **zero3, **{"hardware.nodes": 2}),
        _p("llama-3.1-8b", "full", "bf16-pure", "full", 4096, **zero3),
        _p("llama-3.1-8b", "full", "bf16-pure", "full", 4096, **zero2),
        _p("llama-3.1-8b", "full", "bf16-pure", "full", 4096, **zero1),
        _p("qwen3-8b", "full", "bf16-pure", "full", 16384, **zero3),
        _p("llama-3.1-8b", "full", "bf16-fsdp", "full", 4096, **zero3),
        _p("llama-3.1-70b", "lora", "bf16-pure", "full", 4096, **zero3),
        _p("qwen1.5-moe-a2.7b", "full", "bf16-pure", "full", 2048, **zero3),
        _p("llama-3.1-8b", "lora", "bf16-pure", "full", 4096, **{"hardware.gpus_per_node": 8}),
        _p("llama-3.2-3b", "full", "bf16-pure", "full", 4096, **{"hardware.gpus_per_node": 4}),
    ]  # fmt: skip
    out += [
        _p("llama-3.1-8b", "full", "bf16-autocast", "none", 2048),
        _p("qwen2.5-7b", "lora", "bf16-autocast", "full", 4096),
        _p("phi-3.5-mini", "lora", "bf16-pure", "full", 4096, **{"training.lora_targets": ["qkv", "o"]}),
        _p("phi-3.5-mini", "full", "bf16-pure", "full", 4096),
        _p("gemma-3-4b", "lora", "bf16-pure", "full", 4096),
        _p("olmo-2-7b", "full", "bf16-pure", "full", 4096),
        _p("qwen3-4b", "full", "bf16-pure", "full", 8192),
        _p("llama-3.2-1b", "lora", "bf16-pure", "none", 2048, **{"strategy.attention": "eager"}),
        _p("llama-3.2-3b", "full", "bf16-pure", "full", 4096, **{"training.optimizer_impl": "for-loop"}),
        _p("llama-3.2-3b", "lora", "bf16-pure", "none", 8192),
        _p("qwen2.5-7b", "full", "bf16-pure", "full", 8192),
        _p("gpt-oss-20b", "lora", "bf16-pure", "full", 16384),
        _p("mixtral-8x7b", "lora", "bf16-pure", "none", 2048),
    ]
    return dict(out)


def plan_of(spec: dict[str, Any]) -> Any:
    from vramplan.core.files.planio import resolve_plan

    sets = [f"{k}={json.dumps(v)}" for k, v in spec["keys"].items()]
    return resolve_plan(model=spec["model"], gpu=H100, sets=sets)


def record(plan: Any, report: Any) -> dict[str, Any]:
    """What the file keeps of one traced plan."""
    return {
        "plan": plan.dump(),
        "traced": {
            "peak_allocated_bytes": report.peak_allocated,
            "peak_reserved_bytes": report.peak_reserved,
            "tensor_peak_bytes": report.tensor_peak,
            "peak_phase": report.peak_phase,
            "fragmentation": round(report.fragmentation, 4),
            "adjustments_bytes": dict(report.adjustments),
        },
        "rows": [d.to_json() for d in report.differences],
        "saved_by_op": [{"module": m, "op": o, "bytes": n} for m, o, n in report.saved_by_op[:8]],
        "not_traced": list(report.not_traced),
        "seconds": round(report.seconds, 1),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, metavar="ID")
    ap.add_argument("--missing", action="store_true", help="trace only the plans the file does not have")
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from vramplan.core.files.safewrite import write_atomic
    from vramplan.measure.run import versions
    from vramplan.measure.trace_records import TraceOptions
    from vramplan.measure.trace_run import trace_plan

    plans = grid()
    data: dict[str, Any] = json.loads(args.output.read_text()) if args.output.exists() else {}
    data["_provenance"] = {
        "script": "bench/data/trace_grid.py",
        "command": "python -m bench.data.trace_grid",
        "what": "vramplan trace of each plan at full size on fake tensors (CUDA kernels, caching allocator model "
        "replayed without the GPU's capacity), 2 steps",
        "versions": versions(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "date": datetime.date.today().isoformat(),
    }
    options = TraceOptions(steps=2, unlimited_memory=True)
    for n, (pid, spec) in enumerate(plans.items(), start=1):
        if (args.only is not None and pid not in args.only) or (args.missing and pid in data):
            continue
        t0 = time.perf_counter()
        try:
            plan = plan_of(spec)
            data[pid] = record(plan, trace_plan(plan, options))
        except Exception as exc:  # a plan the trace cannot run is reported, the grid goes on
            print(f"{n:3d}/{len(plans)} {pid}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        write_atomic(args.output, json.dumps(data, indent=1, sort_keys=True) + "\n", overwrite=True)
        t = data[pid]["traced"]
        gib = f"{t['peak_allocated_bytes'] / 2**30:.2f} GiB allocated, {t['peak_reserved_bytes'] / 2**30:.2f} reserved"
        print(f"{n:3d}/{len(plans)} {pid}: {gib} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
