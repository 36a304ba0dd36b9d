"""How long the GPU guide takes (`vramplan gpus`, `core.advice.gpuguide`), against floors run in the same loop (the
bounds tests/core/advice/test_gpuguide.py and tests/cli/test_gpus_diff_cli.py used to hold; they check the rows now).

- in process, Llama-3.1-70B full fine-tuning (the plan the test timed): `gpu_guide(plan)` with the advisor (each
  GPU's change, within `ADVISOR_PLANS` candidate plans) against `gpu_guide(plan, advise=False)` (the plain
  estimates only, the floor), memo caches cleared before each call (cold) and not (warm), interleaved;
- cold process: ``vramplan gpus --json`` against ``vramplan estimate --json``, interleaved.

Usage: python -m bench.bench_gpus [ROUNDS]   (default 7; vramplan installed in this interpreter)
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from bench.cold_process import interleaved_cold
from vramplan.core.advice.gpuguide import ADVISOR_PLANS, gpu_guide
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
    budget = f"the advisor's budget {ADVISOR_PLANS:,} plans"
    print(f"gpu_guide(Llama-3.1-70B) in process, median of {rounds} interleaved rounds ({budget})")
    floor = statistics.median(next(iter(times.values())))
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<36} {med:8.1f} ms  {med / floor:5.2f}x")

    commands = {
        "vramplan estimate --json (the floor)": ["estimate", "--json"],
        "vramplan gpus --json": ["gpus", "--json"],
    }
    interleaved_cold(commands, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
