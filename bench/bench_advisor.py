"""Benchmark the fit advisor and the checklist: the whole advice must stay interactive (< 1 s on 2 cores).

Run: python bench/bench_advisor.py   (docs/benchmarks.md describes it; not a timed test)

For each plan: `advise(plan)` (suggestions of up to 3 changes, the largest micro-batch, the fewest GPUs) with the
estimator's memo caches cleared first (a plan never seen before) and warm (the TUI re-advising after an edit), how
many candidate plans it estimated, and `checklist(plan)`. Then the same search widened to 4 changes per set, to
show what thousands of candidate plans cost, and a cold `vramplan fit --json` process.

The floor, measured in the same loop (interleaved with each cold advice, so that a busy machine slows both alike):
the plan validated, estimated and timed once from cold caches (`floor`), what one candidate plan of a search costs
at most. Each cold advice is printed as a ratio to it: a figure the machine's load moves far less than its
milliseconds, to compare across runs and branches (issue 40.8's goal, every plan under 1 s, is in milliseconds on a
quiet 2-core machine: there, the floor's milliseconds times this ratio).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from vramplan.core.advice.advisor import advise
from vramplan.core.advice.checklist import checklist
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers import memo
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict
from vramplan.core.time.step import step_time

ROOT = Path(__file__).resolve().parent.parent


def ms(fn: Callable[[], object], runs: int = 5, clear: bool = False) -> tuple[float, float]:
    """(median, best) milliseconds of `runs` calls."""
    times = []
    for _ in range(runs):
        if clear:
            memo.clear()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), min(times)


def floor(plan: Plan) -> None:
    """One candidate plan from cold caches: validated, estimated, timed."""
    fresh = plan_from_dict(plan.model_dump(mode="json", exclude_none=True))
    estimate(fresh)
    step_time(fresh)


def cold_with_floor(plan: Plan, runs: int = 5) -> tuple[float, float, float]:
    """(median ms of a cold `advise`, median ms of the floor, ratio of the medians), interleaved."""
    adv, flo = [], []
    for _ in range(runs):
        adv.append(ms(lambda: advise(plan), runs=1, clear=True)[0])
        flo.append(statistics.median(ms(lambda: floor(plan), runs=1, clear=True)[0] for _ in range(9)))
    a, f = statistics.median(adv), statistics.median(flo)
    return a, f, a / f


def plans() -> dict[str, Plan]:
    d = default_plan()
    return {
        "LLaMA-7B DDP, no checkpointing, micro-batch 4 (over by 100 GiB)": d.with_changes(
            {"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none", "training.micro_batch_size": 4}
        ),
        "Llama-2-70B full, ZeRO-3 on 8 x A100 (over by 90 GiB)": d.with_changes({"model.preset": "llama-2-70b"}),
        "Llama-2-13B fp32, eager, DDP, b 8 x 4096 on 64 x A100-40GB": d.with_changes(
            {
                "model.preset": "llama-2-13b",
                "hardware.gpu": "a100-40gb",
                "hardware.nodes": 8,
                "training.precision": "fp32",
                "training.micro_batch_size": 8,
                "training.seq_len": 4096,
                "strategy.attention": "eager",
                "strategy.gradient_checkpointing": "none",
                "strategy.zero_stage": 0,
            }
        ),
        "Qwen2.5-72B full, ZeRO-1, b 4 x 8192 on 8 x H100": d.with_changes(
            {
                "model.preset": "qwen2.5-72b",
                "hardware.gpu": "h100-80gb",
                "training.micro_batch_size": 4,
                "training.seq_len": 8192,
                "strategy.gradient_checkpointing": "none",
                "strategy.zero_stage": 1,
            }
        ),
    }


def main() -> None:
    print("advise(plan): milliseconds, median / best of 5 (cold: memo caches cleared first); plans estimated")
    for name, plan in plans().items():
        cold = ms(lambda p=plan: advise(p), clear=True)
        ratio = cold_with_floor(plan)
        warm = ms(lambda p=plan: advise(p))
        wide = ms(lambda p=plan: advise(p, max_moves=4), runs=3)
        a, a4 = advise(plan), advise(plan, max_moves=4)
        check = ms(lambda p=plan: checklist(p), runs=20)
        print(f"  {name}")
        print(
            f"    advise cold {cold[0]:.0f} / {cold[1]:.0f}, warm {warm[0]:.0f} / {warm[1]:.0f} ms, "
            f"{a.searched:,} plans, {len(a.suggestions)} suggestions; "
            f"up to 4 changes: {wide[0]:.0f} ms, {a4.searched:,} plans; checklist {check[0]:.1f} ms"
        )
        print(f"    RATIO cold advise {ratio[0]:.0f} ms / floor {ratio[1]:.2f} ms = {ratio[2]:.0f} floors")
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "vramplan", "fit", "--json"], check=True, capture_output=True, cwd=ROOT)
        runs.append((time.perf_counter() - t0) * 1000)
    print(f"cold process: vramplan fit --json (default plan), median of 7: {statistics.median(runs):.0f} ms")


if __name__ == "__main__":
    main()
