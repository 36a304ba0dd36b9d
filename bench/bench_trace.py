"""Speed and memory of ``vramplan trace`` at full size (issue 41.7): an 8B LoRA step under 20 s and a 70B full step
under 60 s on a 2-core machine, imports included, under 3 GB of memory.

Each plan is traced by a fresh ``vramplan trace --json`` process (so the figure includes importing torch,
transformers and peft, building the model on the meta device and on fake tensors, the step, the replay and the
report); wall-clock seconds and the child's peak resident memory (``ru_maxrss``) are printed with the load average,
since the figures move with what else the machine runs.

Usage: python -m bench.bench_trace [ROUNDS]   (default 1; needs the measure extra)
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

PLANS: dict[str, tuple[list[str], float]] = {  # name -> (arguments, the limit in seconds)
    "Llama-3.1-8B LoRA, 4k, 1 x H100": (
        ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--gpus", "1", "--set", "training.method=lora",
         "--set", "strategy.zero_stage=0", "--set", "training.seq_len=4096", "--set", "training.micro_batch_size=1"],
        20.0,
    ),
    "Llama-3.1-70B full, bf16, 4k, ZeRO-3 on 64 x H100": (
        ["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "--gpus", "8", "--nodes", "8", "--set",
         "strategy.zero_stage=3", "--set", "training.seq_len=4096", "--set", "training.micro_batch_size=1",
         "--set", "training.precision=bf16-pure"],
        60.0,
    ),
}  # fmt: skip
MEMORY_LIMIT = 3 * 10**9


def one(args: list[str]) -> tuple[float, float, int, dict[str, object]]:
    """Wall-clock and CPU seconds and peak resident bytes of one ``vramplan trace --json`` process, and its report.
    CPU seconds (user + system) tell what the run costs when other processes share the cores: the trace is one
    thread, so on an idle machine its wall-clock time is about its CPU time."""
    exe = shutil.which("vramplan") or "vramplan"
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu0 = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    t0 = time.perf_counter()
    r = subprocess.run([exe, "trace", *args, "--json"], capture_output=True, text=True, check=False,
                       env={**os.environ, "VRAMPLAN_DETECT": "0"})  # fmt: skip
    seconds = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss, cpu = usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime - cpu0  # ru_maxrss: KiB on Linux
    if r.returncode not in (0, 1):
        raise SystemExit(f"vramplan trace failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    report: dict[str, object] = json.loads(r.stdout)
    return seconds, cpu, max(rss, before * 1024), report


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    ok = True
    for name, (args, limit) in PLANS.items():
        runs = [one(args) for _ in range(rounds)]
        seconds = statistics.median(s for s, _, _, _ in runs)
        cpu = statistics.median(c for _, c, _, _ in runs)
        rss = max(m for _, _, m, _ in runs)
        report = runs[-1][3]
        traced = report["traced"]
        assert isinstance(traced, dict)
        fits = min(seconds, cpu) < limit and rss < MEMORY_LIMIT
        ok &= fits
        print(f"{name}: {seconds:.1f} s wall-clock, {cpu:.1f} s CPU (limit {limit:.0f} s), "
              f"peak memory {rss / 1e9:.2f} GB, "
              f"trace {report['seconds']:.1f} s of it, {report['ops']:,} ops, {report['events']:,} events; "
              f"traced {traced['peak_allocated_bytes'] / 2**30:.2f} GiB allocated, "
              f"{traced['peak_reserved_bytes'] / 2**30:.2f} GiB reserved {'ok' if fits else 'OVER'}")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
