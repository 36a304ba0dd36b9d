#!/usr/bin/env python3
"""The GPU measurement kit: real training steps of LLaMA / Qwen2 / Mistral-shaped models on one GPU (or, with tiny
configs, on the CPU), each measured next to vramplan's estimate of the same plan.

    python bench/measure/gpu_kit.py --plan-set default --out $OUT/gpu_truth.json --budget-s 420      # one GPU
    python bench/measure/gpu_kit.py --device cpu --plan-set tiny --out /tmp/kit.json                   # a CPU

For each case (gpu_plans.py; small to large by vramplan's estimate) it checks the time left against the case's
expected seconds, builds the model directly on the device with random weights, runs a warm-up step and the
measured steps (gpu_train.py), records the allocator's peaks, the process's GPU memory, the step time and
tokens/s (gpu_results.py says what each figure is), frees everything, and writes the results so far. An
out-of-memory error is a result ("oom": did not fit, with where and how far it got), any other error is recorded and
the next case runs. At the end it prints a table of measurement against estimate.
Exit codes: 0 when the run finished (whatever the cases' status), 2 for a usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gpu_plans
import gpu_results


class UsageError(Exception):
    """One line on stderr, exit code 2."""


class KitParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def parser() -> KitParser:
    p = KitParser(prog="gpu_kit.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan-set", default="default", choices=sorted(gpu_plans.PLAN_SETS), help="which cases")
    p.add_argument("--only", nargs="+", metavar="ID", help="only the cases whose id starts with one of these")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--out", metavar="PATH", help="the results file (JSON, written after every case)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting cases after this many seconds")
    p.add_argument("--gpu", default="h200", help="vramplan hardware preset of the estimate (default h200)")
    p.add_argument("--no-estimate", action="store_true", help="measure only (no vramplan estimate)")
    p.add_argument("--list", action="store_true", help="print the cases and exit (needs no torch)")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[dict[str, Any]]]:
    """The arguments and the resolved, selected cases; `UsageError` for anything wrong."""
    args = parser().parse_args(argv)
    if args.budget_s <= 0:
        raise UsageError("gpu_kit.py: --budget-s must be positive")
    try:
        cases = gpu_plans.select(gpu_plans.resolve_all(gpu_plans.PLAN_SETS[args.plan_set]()), args.only)
    except gpu_plans.CaseError as exc:
        raise UsageError(f"gpu_kit.py: {exc}") from None
    if not args.list:
        if not args.out:
            raise UsageError("gpu_kit.py: --out PATH is required (or --list)")
        out = Path(args.out)
        if out.exists() and not out.is_file():
            raise UsageError(f"gpu_kit.py: {out} exists and is not a regular file")
        if out.exists() and not args.force:
            raise UsageError(f"gpu_kit.py: {out} exists; --force replaces it")
    return args, cases


def _smi(query: str) -> str | None:
    """One figure of GPU 0 from ``nvidia-smi --query-gpu`` (`vramplan.measure.cuda.nvidia_smi`), or None."""
    from vramplan.measure.cuda import nvidia_smi

    out = (nvidia_smi(f"--query-gpu={query}", "-i", "0") or "").strip().splitlines()
    return out[0].strip() if out else None


def _version(name: str) -> str | None:
    try:
        mod = __import__(name)
        return str(mod.__version__)
    except Exception:  # a package that is missing, or fails to load its native library
        return None


def environment(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "device_memory_bytes": torch.cuda.get_device_properties(0).total_memory if device == "cuda" else None,
        "driver": _smi("driver_version") if device == "cuda" else None,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for name in ("transformers", "peft", "bitsandbytes", "accelerate"):
        env[name] = _version(name)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    env["git_commit"] = commit or None
    return env


def estimates(cases: list[dict[str, Any]], gpu: str, enabled: bool) -> tuple[dict[str, Any], str | None]:
    """vramplan's estimate of each case (id -> estimate or {"error": ...}), and why there are none if so."""
    if not enabled:
        return {}, "--no-estimate"
    import gpu_estimate

    why = gpu_estimate.load()
    if why:
        return {}, why
    out: dict[str, Any] = {}
    for c in cases:
        try:
            out[c["id"]] = gpu_estimate.estimate(c, gpu)
        except Exception as exc:  # a plan vramplan refuses: recorded, the case still runs
            out[c["id"]] = {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return out, None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class CaseTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout("the run's time budget ran out during this case")


def run(args: argparse.Namespace, cases: list[dict[str, Any]]) -> dict[str, Any]:
    t_start = time.monotonic()
    import gpu_estimate

    why = gpu_estimate.importable()  # the kit measures through vramplan.measure
    if why:
        raise UsageError(f"gpu_kit.py: {why}")
    used_before = None
    if args.device == "cuda":
        smi_used = _smi("memory.used")
        used_before = int(smi_used) * 2**20 if smi_used and smi_used.isdigit() else None
    import gpu_train
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("gpu_kit.py: torch sees no CUDA device; --device cpu runs the tiny cases on the CPU")
    meter = gpu_train.CudaMeter(used_before) if args.device == "cuda" else gpu_train.CpuMeter()
    env = environment(args.device)
    est, no_est = estimates(cases, args.gpu, not args.no_estimate)
    if est and all("total" in est.get(c["id"], {}) for c in cases):
        cases = sorted(cases, key=lambda c: est[c["id"]]["total"])  # small to large (stable)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    doc = gpu_results.new_document(" ".join(["python", *sys.argv]), args.device, env, args.budget_s, started)
    doc["gpu_preset"] = args.gpu
    if no_est:
        doc["estimate_missing"] = no_est
    gpu_results.write(doc, args.out)
    where = f"{env['device_name']} (torch {env['torch']})"
    print(f"{len(cases)} cases on {where}; budget {args.budget_s:.0f} s", flush=True)
    if no_est:
        print(f"no vramplan estimate: {no_est}", flush=True)
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for c in cases:
            row = run_one(c, args, meter, est.get(c["id"]), env, t_start)
            doc["cases"].append(row)
            doc["elapsed_s"] = round(time.monotonic() - t_start, 1)
            gpu_results.write(doc, args.out)
            m = row.get("measured") or {}
            peak = m.get("peak_allocated_bytes")
            peak_s = f"peak allocated {peak / 2**20:,.1f} MiB " if peak else ""
            print(f"[{doc['elapsed_s']:6.1f} s] {c['id']}: {row['status']} {peak_s}{row.get('reason', '')}", flush=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    doc["complete"] = True
    doc["elapsed_s"] = round(time.monotonic() - t_start, 1)
    gpu_results.write(doc, args.out)
    return doc


def run_one(c, args, meter, est, env, t_start) -> dict[str, Any]:
    import gpu_train

    from vramplan.measure import cuda

    row: dict[str, Any] = {"id": c["id"], "status": "skipped", "seconds": 0.0, "case": c, "measured": None}
    row["estimate"] = est if est and "error" not in est else None
    if est and "error" in est:
        row["estimate_error"] = est["error"]
    left = args.budget_s - (time.monotonic() - t_start)
    if left < c["expect_s"]:
        row["reason"] = f"no time left: {left:.0f} s of the budget, the case expects {c['expect_s']} s"
        return row
    if c["method"] == "qlora" and env.get("bitsandbytes") is None:
        row["reason"] = "QLoRA skipped: bitsandbytes is not importable here (bring its wheel: docs/benchmarks.md)"
        return row
    phase = gpu_train.Phase()
    t0 = time.monotonic()
    signal.alarm(max(1, int(left)))
    try:
        row["measured"] = gpu_train.run_case(c, meter, phase)
        row["status"] = "ok"
    except Exception as exc:  # recorded; the next case runs
        if cuda.is_out_of_memory(exc):
            row |= {"status": "oom", "reason": f"did not fit ({phase.name}): {_one_line(exc)}"}
            row["measured"] = {"phase": phase.name, **meter.at_failure()}
        else:
            row |= {"status": "error", "reason": f"{phase.name}: {_one_line(exc)}"}
            row["measured"] = None
    finally:
        signal.alarm(0)
    row["seconds"] = round(time.monotonic() - t0, 2)
    gc.collect()
    if args.device == "cuda":
        cuda.empty_cache()
        row["leftover_allocated_bytes"] = meter.meter.allocated_bytes()
    return row


def main(argv: list[str] | None = None) -> int:
    try:
        args, cases = parse(sys.argv[1:] if argv is None else argv)
        if args.list:
            for c in cases:
                print(f"{c['id']:<44} ~{c['expect_s']:>3} s  {c['note']}")
            return 0
        doc = run(args, cases)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"gpu_kit.py: {exc} (the kit needs torch and transformers; peft for LoRA)", file=sys.stderr)
        return 2
    except gpu_results.ResultsError as exc:
        print(f"gpu_kit.py: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. --list | head
        return 0
    print()
    print(gpu_results.summary_table(doc))
    print(f"\nwritten: {args.out} ({doc['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
