"""The caching allocator model (core/memory/caching_allocator.py) and `vramplan trace` against PyTorch's own allocator:
a prepared GPU script (issue 41.2). Not run yet: no GPU has been lent; `--device cpu` and `--snapshot` run without one
(tests/bench/test_trace_snapshot.py).

For each plan, on the GPU (`--device cuda`, the default):

1. the plan's real step (`vramplan.measure.build` on the GPU, two optimizer steps of the plan's micro-batches) under
   ``torch.cuda.memory._record_memory_history()``; then ``torch.cuda.memory._snapshot()`` and
   ``max_memory_allocated`` / ``max_memory_reserved``;
2. the snapshot's own event trace (``device_traces``: each ``alloc`` with the bytes asked, each ``free_completed``,
   their streams) replayed through the allocator model: its reserved bytes after each event against the real ones
   (the running sum of ``segment_alloc`` / ``segment_map`` less ``segment_free`` / ``segment_unmap``) - the model
   alone, on PyTorch's real order of requests;
3. ``vramplan trace`` of the same plan (CUDA kernels, its own fake-tensor events) against the real peaks - the
   tracer and the model together.

`--snapshot FILE` replays a snapshot saved earlier (``torch.cuda.memory._dump_snapshot``: a pickle) through the
model and prints step 2 only; `--device cpu` runs step 1 with `vramplan measure`'s CPU method and step 3 with
``--kernels cpu`` (no allocator on the CPU: allocated only).

Usage (from the repository root, vramplan importable):
    python -m bench.measure.trace_snapshot [--device cuda|cpu] [--plans tiny|full] [-o results.json]
    python -m bench.measure.trace_snapshot --snapshot snap.pickle [--alloc-conf CONF]

On a lent GPU machine (its image has torch, transformers and peft, no network): here `bash bench/measure/
gpu_wheels.sh` (pydantic and tomli-w wheels into .whl/), then one device call carrying ``.whl``, which lays this
checkout out as the install maps it (pyproject.toml's package-dir) and runs both sets (about 3 minutes on an H100: the
real steps take seconds, each trace 10-20 s of CPU):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site
    .whl/*.whl && mkdir -p /tmp/pkg/vramplan && ln -s $PWD/entry/*.py /tmp/pkg/vramplan/ && for d in core cli tui
    presets machine measure docs; do ln -s $PWD/$d /tmp/pkg/vramplan/$d; done && export PYTHONUNBUFFERED=1
    PYTHONPATH=/tmp/site:/tmp/pkg:$PWD && python3 -m bench.measure.trace_snapshot --plans tiny -o $OUT/tiny.json
    && python3 -m bench.measure.trace_snapshot --plans full -o $OUT/full.json
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path
from typing import Any

from vramplan.core.memory.alloc_conf import AllocatorConfig, parse_alloc_conf
from vramplan.core.memory.caching_allocator import ALLOC, EMPTY_CACHE, FREE, replay

# The plans, as `vramplan trace` / `vramplan measure` arguments: tiny ones for a first check, full-size ones for a
# GPU with 80 GB (each fits an H100 with room: LoRA, checkpointed, 4k tokens).
PLANS: dict[str, dict[str, list[str]]] = {
    "tiny": {
        "qwen2.5-0.5b-lora-1k": ["--model", "qwen2.5-0.5b", "--gpus", "1", "--set", "training.method=lora",
                                 "--set", "training.seq_len=1024", "--set", "strategy.zero_stage=0"],
        "qwen2.5-0.5b-full-1k": ["--model", "qwen2.5-0.5b", "--gpus", "1", "--set", "training.method=full",
                                 "--set", "training.seq_len=1024", "--set", "strategy.zero_stage=0",
                                 "--set", "training.precision=bf16-pure"],
    },
    "full": {
        "llama-3.1-8b-lora-4k": ["--model", "llama-3.1-8b", "--gpus", "1", "--set", "training.method=lora",
                                 "--set", "training.seq_len=4096", "--set", "strategy.zero_stage=0"],
        "llama-3.2-3b-full-4k": ["--model", "llama-3.2-3b", "--gpus", "1", "--set", "training.method=full",
                                 "--set", "training.seq_len=4096", "--set", "strategy.zero_stage=0",
                                 "--set", "training.precision=bf16-pure"],
        "qwen3-8b-lora-16k-expandable": ["--model", "qwen3-8b", "--gpus", "1", "--set", "training.method=lora",
                                         "--set", "training.seq_len=16384", "--set", "strategy.zero_stage=0",
                                         "--set", "overhead.expandable_segments=true"],
    },
}  # fmt: skip


def snapshot_events(snapshot: dict[str, Any], device: int = 0) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """The allocator events of a snapshot's device trace as replay events (ids by address), and the real reserved
    bytes after each of them (segments allocated or mapped, less those freed or unmapped). A run of segments freed
    outside an allocation is ``torch.cuda.empty_cache()`` (vramplan measure empties the cache before it builds and
    when it stops): one EMPTY_CACHE event, which the model answers by releasing every unsplit cached segment too."""
    traces = snapshot.get("device_traces") or [[]]
    events: list[tuple[int, int, int, int]] = []
    reserved: list[int] = []
    live: dict[int, int] = {}  # address -> allocation id
    total, next_id, releasing = 0, 0, False
    for e in traces[device] if device < len(traces) else []:
        action, addr, size = e.get("action"), int(e.get("addr", 0)), int(e.get("size", 0))
        stream = int(e.get("stream", 0))
        if action in ("segment_free", "segment_unmap"):
            total -= size
            releasing = True
            continue
        if releasing:
            events.append((EMPTY_CACHE, 0, 0, 0))
            reserved.append(total)
            releasing = False
        if action in ("segment_alloc", "segment_map"):
            total += size
            continue
        if action == "alloc":
            live[addr], next_id = next_id, next_id + 1
            events.append((ALLOC, live[addr], size, stream))
        elif action == "free_completed" and addr in live:
            events.append((FREE, live.pop(addr), 0, 0))
        else:
            continue
        reserved.append(total)
    if releasing:
        events.append((EMPTY_CACHE, 0, 0, 0))
        reserved.append(total)
    return events, reserved


def compare_snapshot(snapshot: dict[str, Any], conf: AllocatorConfig) -> dict[str, Any]:
    """The model's reserved bytes on the snapshot's events against the real ones (step 2)."""
    events, real = snapshot_events(snapshot)
    if not events:
        return {"events": 0}
    r = replay(events, conf)
    diffs = [abs(m - t) for m, t in zip(r.reserved, real, strict=True)]
    peak_real = max(real)
    return {
        "events": len(events),
        "model_peak_reserved_bytes": r.peak_reserved,
        "real_peak_reserved_bytes": peak_real,
        "peak_error": (r.peak_reserved - peak_real) / peak_real if peak_real else None,
        "events_where_reserved_agree": sum(d == 0 for d in diffs) / len(diffs),
        "largest_reserved_difference_bytes": max(diffs),
        "model_peak_allocated_bytes": r.peak_allocated,
    }


def real_step(args: list[str], device: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Step 1: the plan's real step on `device` (`vramplan measure`'s path), and the CUDA snapshot of it."""
    from vramplan.cli.importing import resolve
    from vramplan.cli.parser import build_parser
    from vramplan.measure.records import MeasureOptions
    from vramplan.measure.run import measure_plan

    plan = resolve(build_parser("measure").parse_args(["measure", *args]))
    snapshot = None
    if device == "cuda":
        import torch

        torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    report = measure_plan(plan, MeasureOptions(device=device, steps=1, warmup=1))  # type: ignore[arg-type]
    if device == "cuda":
        import torch

        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    rank = report.ranks[0]
    return {"max_allocated_bytes": rank.max_allocated_bytes, "max_reserved_bytes": rank.max_reserved_bytes}, snapshot


def traced(args: list[str], kernels: str) -> dict[str, Any]:
    """Step 3: `vramplan trace --json` of the plan, in this process."""
    import contextlib
    import io

    from vramplan.cli.parser import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = run(["trace", *args, "--kernels", kernels, "--json"])
    if code not in (0, 1):
        return {"error": f"vramplan trace exit code {code}"}
    t = json.loads(out.getvalue())["traced"]
    return {"peak_allocated_bytes": t["peak_allocated_bytes"], "peak_reserved_bytes": t["peak_reserved_bytes"]}


def run_plans(plan_set: str, device: str, conf_text: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, args in PLANS[plan_set].items():
        real, snapshot = real_step(args, device)
        row: dict[str, Any] = {"real": real, "trace": traced(args, device)}
        if snapshot is not None:
            expandable = "expandable_segments=true" in " ".join(args)
            text = ",".join(x for x in (conf_text, "expandable_segments:True" if expandable else "") if x)
            row["model_on_real_events"] = compare_snapshot(snapshot, parse_alloc_conf(text))
        t, m = row["trace"].get("peak_allocated_bytes"), real.get("max_allocated_bytes")
        row["trace_allocated_error"] = (t - m) / m if t and m else None
        results[name] = row
        print(name, json.dumps(row), flush=True)
    return results


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="the caching allocator model and vramplan trace against PyTorch's")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--plans", choices=tuple(PLANS), default="full")
    ap.add_argument("--snapshot", type=Path, help="replay a saved snapshot (torch.cuda.memory._dump_snapshot)")
    ap.add_argument("--alloc-conf", default="", help="the PYTORCH_CUDA_ALLOC_CONF the snapshot ran with")
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args(argv)
    if args.snapshot is not None:
        with args.snapshot.open("rb") as f:
            snapshot = pickle.load(f)  # a file the user made with torch: trusted input
        result: dict[str, Any] = compare_snapshot(snapshot, parse_alloc_conf(args.alloc_conf))
        print(json.dumps(result))
    else:
        result = run_plans(args.plans, args.device, args.alloc_conf)
    if args.output is not None:
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
