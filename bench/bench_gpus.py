"""How long the GPU guide takes (`vramplan gpus`, `core.advice.gpuguide`), against floors run in the same loop (the
bounds tests/core/advice/test_gpuguide.py and tests/cli/test_gpus_diff_cli.py used to hold; they check the rows now).

- in process, Llama-3.1-70B full fine-tuning (the plan the test timed): `gpu_guide(plan)` with the advisor (each
  GPU's change, within `ADVISOR_SECONDS`) against `gpu_guide(plan, advise=False)` (the plain estimates only, the
  floor), memo caches cleared before each call (cold) and not (warm), interleaved;
- cold process: ``vramplan gpus --json`` against ``vramplan estimate --json``, interleaved.

Usage: python -m bench.bench_gpus [ROUNDS]   (default 7; vramplan installed in this interpreter)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from vramplan.core.advice.gpuguide import ADVISOR_SECONDS, gpu_guide
from vramplan.core.plan.helpers import memo
from vramplan.core.plan.schema.plan import default_plan


def timed_ms(fn: Callable[[], object], times: list[float], clear: bool = False) -> None:
    if clear:
        memo.clear()
    t0 = time.perf_counter()
    fn()
    times.append((time.perf_counter() - t0) * 1000)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    plan = default_plan().with_changes({"model.preset": "llama-3.1-70b"})
    calls = {  # name -> (call, memo caches cleared first)
        "plain estimates, cold (the floor)": (lambda: gpu_guide(plan, advise=False), True),
        "with the advisor, cold": (lambda: gpu_guide(plan), True),
        "plain estimates, warm": (lambda: gpu_guide(plan, advise=False), False),
        "with the advisor, warm": (lambda: gpu_guide(plan), False),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (fn, clear) in calls.items():
            timed_ms(fn, times[name], clear)
    budget = f"the advisor's budget {ADVISOR_SECONDS:g} s"
    print(f"gpu_guide(Llama-3.1-70B) in process, median of {rounds} interleaved rounds ({budget})")
    floor = statistics.median(next(iter(times.values())))
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<36} {med:8.1f} ms  {med / floor:5.2f}x")

    commands = {
        "vramplan estimate --json (the floor)": ["estimate", "--json"],
        "vramplan gpus --json": ["gpus", "--json"],
    }
    cold: dict[str, list[float]] = {name: [] for name in commands}
    env = {**os.environ, "VRAMPLAN_DETECT": "0"}
    for _ in range(rounds):
        for name, argv in commands.items():
            cmd = [sys.executable, "-m", "vramplan", *argv]
            timed_ms(lambda c=cmd: subprocess.run(c, capture_output=True, check=True, env=env), cold[name])
    print(f"cold process, median of {rounds} interleaved rounds")
    floor = statistics.median(next(iter(cold.values())))
    for name, ts in cold.items():
        med = statistics.median(ts)
        print(f"  {name:<36} {med:8.1f} ms  {med / floor:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
