#!/usr/bin/env python3
"""The RL estimate against the measured TRL steps: one markdown row per case of tests/data/rl_truth.json.

Usage, from the repository root:  python -m bench.measure.rl_compare [TRUTH.json]
Columns: activations (measured activation_bytes - logits_like_bytes + saved_weight_copy_bytes, the SFT oracle's
figure) and the steady peak (steady_peak_bytes) against ``estimate(plan, cpu=True)`` (activations; total - overhead),
the measured phase of the peak and the estimate's, and each measured phase's peak above the step's baseline. The
plan of a case is bench/data/rl_cases.py's ``rl_plan_data`` (as tests/core/memory/rl/test_rl_measured.py builds it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.data.rl_cases import rl_plan_data
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import plan_from_dict

ROOT = Path(__file__).resolve().parents[2]


def rel(a: int, b: int) -> float:
    return (a - b) / b if b else float(a != 0)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "rl_truth.json"
    truth = json.loads(path.read_text())
    print("| case | act meas | act est | err | peak meas | peak est | err | phase meas / est | phases meas |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cid, rec in sorted(truth.items()):
        f = rec["figures"]
        est = estimate(plan_from_dict(rl_plan_data(rec["resolved_case"])), cpu=True)
        g = est.per_gpu()
        act = f["activation_bytes"] - f["logits_like_bytes"] + f["saved_weight_copy_bytes"]
        peak = g["total"] - g["overhead"]
        step = rec["per_step"][-1]
        phases = ", ".join(
            f"{k} {v['peak'] - step['baseline_bytes']:,}" for k, v in sorted(step["phases"].items()) if k != "other"
        )
        print(
            f"| {cid} | {act:,} | {g['activations']:,} | {rel(g['activations'], act):+.1%} | "
            f"{f['steady_peak_bytes']:,} | {peak:,} | {rel(peak, f['steady_peak_bytes']):+.1%} | "
            f"{f['steady_peak_phase']} / {est.peak_phase} | {phases} |"
        )


if __name__ == "__main__":
    main()
