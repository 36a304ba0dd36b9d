"""Benchmark the core: estimate latency, validate+estimate throughput, and cold-process CLI time.

Run: python bench/bench_core.py   (not a timed test). ``python -m bench.bench_core --docs`` also writes the figures
as the summary table of docs/benchmarks.md (its ``bench-core`` block), with the date and the Python version.

- warm: the same plan again (what a redraw costs: every memoised sub-result hits)
- keystroke: a new plan each call, one field changed from the last (what an edit in the TUI costs)
- cold: every memo cache cleared before each call (a plan never seen before, new model included)
"""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers import memo
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict
from vramplan.core.time.step import step_time

ROOT = Path(__file__).resolve().parent.parent


def per_call_us(fn: Callable[[], object], calls: int = 500, repeats: int = 7) -> tuple[float, float]:
    """(median, min) over `repeats` of the mean time per call, after a warm-up (CPython specialises hot code)."""
    for _ in range(calls):
        fn()
    means = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(means), min(means)


def keystrokes(plan: Plan, fn: Callable[[Plan], object] = estimate) -> Callable[[], object]:
    """A cycle of one-field edits; each call estimates a plan that differs in one field from the previous one."""
    edits = (
        [("training.micro_batch_size", v) for v in range(1, 9)]
        + [("strategy.zero_stage", z) for z in (0, 1, 2, 3)]
        + [("training.seq_len", s) for s in (512, 1024, 2048, 4096, 8192)]
        + [("strategy.gradient_checkpointing", g) for g in ("none", "selective", "full")]
    )
    plans = []
    current = plan
    for key, value in edits * 3:
        try:
            current = current.with_changes({key: value})
        except PlanError:  # e.g. ZeRO-2/3 with pipeline parallelism
            continue
        plans.append(current)
    it = itertools.cycle(plans)

    def step() -> object:
        return fn(next(it))

    return step


def cold(plan: Plan, fn: Callable[[Plan], object] = estimate) -> Callable[[], object]:
    def step() -> object:
        memo.clear()
        return fn(plan)

    return step


def process_ms(cmd: list[str], runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def docs_table(estimates: dict[str, dict[str, float]], steps: dict[str, float], per_s: float, cli_ratio: float) -> str:
    """The figures as docs/benchmarks.md's summary table (medians, microseconds)."""
    import datetime
    import platform

    out = [
        f"Measured {datetime.date.today().isoformat()} on Python {platform.python_version()}, "
        f"{platform.machine()}; medians of 7 runs, microseconds per call.\n\n"
        "| plan | estimate warm | estimate keystroke | estimate cold | step time warm |\n|---|---|---|---|---|\n"
    ]
    for name, row in estimates.items():
        out.append(f"| {name} | {row['warm']:.0f} | {row['keystroke']:.0f} | {row['cold']:.0f} | {steps[name]:.0f} |\n")
    out.append(
        f"\nValidate + estimate, a new plan each time: {per_s:,.0f} plans/s. A cold `vramplan estimate --json` "
        f"process: {cli_ratio:.2f}x a bare `python -c 'import pydantic, tomli_w'`.\n"
    )
    return "".join(out)


def main() -> None:
    plans = {
        "default plan (LLaMA-7B, ZeRO-3, full checkpointing)": default_plan(),
        "Qwen2.5-72B LoRA, TP 8 x PP 2, int8 activations": default_plan().with_changes(
            {
                "model.preset": "qwen2.5-72b",
                "hardware.nodes": 2,
                "training.method": "lora",
                "strategy.tensor_parallel": 8,
                "strategy.pipeline_parallel": 2,
                "strategy.zero_stage": 1,
                "strategy.activation_compression": "int8",
                "training.grad_accum_steps": 8,
            }
        ),
    }
    estimates: dict[str, dict[str, float]] = {}
    steps: dict[str, float] = {}
    print("core.memory.peak, microseconds per call (median / best of 7 runs)")
    for name, plan in plans.items():
        estimate(plan)
        rows = {
            "warm": per_call_us(lambda p=plan: estimate(p)),
            "keystroke": per_call_us(keystrokes(plan)),
            "cold": per_call_us(cold(plan), calls=200),
        }
        estimates[name] = {k: m for k, (m, _) in rows.items()}
        print(f"  {name}: " + ", ".join(f"{k} {m:.0f} / {b:.0f}" for k, (m, b) in rows.items()))
    print("core.time.step.step_time, microseconds per call (median / best of 7 runs)")
    for name, plan in plans.items():
        rows = {
            "warm": per_call_us(lambda p=plan: step_time(p)),
            "keystroke": per_call_us(keystrokes(plan, step_time)),
            "cold": per_call_us(cold(plan, step_time), calls=200),
        }
        steps[name] = rows["warm"][0]
        print(f"  {name}: " + ", ".join(f"{k} {m:.0f} / {b:.0f}" for k, (m, b) in rows.items()))
    data = default_plan().dump()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        data["training"]["micro_batch_size"] = 1 + n % 64
        data["training"]["seq_len"] = 256 * (1 + n % 32)
        estimate(plan_from_dict(data))
        n += 1
    per_s = n / (time.perf_counter() - t0)
    print(f"validate + estimate (a new plan each time): {per_s:,.0f} plans/s")
    py = sys.executable
    base = process_ms([py, "-c", "import pydantic, tomli_w"])
    model = process_ms([py, "-c", "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)"])
    cli = process_ms([py, "-m", "vramplan", "estimate", "--json"])
    print(
        f"cold process, median of 15: python -c 'import pydantic, tomli_w' {base:.0f} ms; "
        f"a one-field pydantic model {model:.0f} ms ({model / base:.2f}x); "
        f"vramplan estimate --json {cli:.0f} ms ({cli / base:.2f}x)"
    )
    if "--docs" in sys.argv[1:]:
        from bench.docs import write_block

        table = docs_table(estimates, steps, per_s, cli / base)
        write_block("docs/benchmarks.md", "bench-core", table, "python -m bench.bench_core --docs")
        print("wrote the bench-core block of docs/benchmarks.md")


if __name__ == "__main__":
    main()
