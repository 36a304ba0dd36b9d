"""The GPU measurement kit's results file (tests/data/gpu_truth.json): its shape, an atomic writer, a validator,
the figures compared with vramplan's estimate, and the summary table. No torch or vramplan at import.

The file is one JSON object:

  schema 1, kit (the script), command (as run), device "cuda" | "cpu", environment (GPU, driver, CUDA and library
  versions), budget_s, started, elapsed_s, complete (false while the run is under way or was cut short),
  cases: one row per case, in the order run, each {id, status, seconds, case, measured, estimate, reason}.

status: "ok" (measured), "oom" (did not fit: the phase and the allocator's figures at that moment are in
`measured`), "error" (any other failure, its message in `reason`), "skipped" (not run: no time left, or QLoRA without
bitsandbytes; `reason` says which).

`measured` (bytes, seconds): params_total, params_trainable, param_bytes, quant_state_bytes, grad_bytes,
optimizer_state_bytes, build_peak_allocated_bytes, first_step_peak_allocated_bytes (the warm-up step),
steady_peak_allocated_bytes (the largest of the measured steps), peak_allocated_bytes (the whole run after the
build: what torch.cuda.max_memory_allocated() reports at its end), peak_reserved_bytes (max_memory_reserved()),
process_bytes (the process's GPU memory after the steps, from nvidia-smi, else from torch.cuda.mem_get_info) and
process_source, context_bytes, alloc_retries, step_seconds (median of the measured steps), tokens_per_second,
steps (each step's seconds, start/peak/end allocated and peak reserved). On the CPU the allocated figures come from
the profiler's allocator total and the reserved/process ones are null.

`estimate`: vramplan's estimate of the case's plan (bench/measure/gpu_estimate.py): allocated / reserved / total
bytes per GPU (`compared`), fits, peak_phase, step_seconds, tokens_per_second_per_gpu, the future keys accepted.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = 1
STATUSES = ("ok", "oom", "error", "skipped")
DEVICES = ("cuda", "cpu")
MEASURED_OK = (
    "params_total",
    "params_trainable",
    "param_bytes",
    "grad_bytes",
    "optimizer_state_bytes",
    "first_step_peak_allocated_bytes",
    "steady_peak_allocated_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "process_bytes",
    "step_seconds",
    "tokens_per_second",
    "steps",
)
CUDA_ONLY = ("peak_reserved_bytes",)  # null on the CPU (process_bytes may be null on a GPU too: no nvidia-smi)
ENVIRONMENT = ("device_name", "torch", "transformers", "peft", "bitsandbytes", "python")
ESTIMATE = ("allocated", "reserved", "total", "fits", "gpu_capacity", "tokens_per_second_per_gpu")
GiB = 2**30


class ResultsError(ValueError):
    """A results file that is not what the kit writes: one line saying where."""


def compared(per_gpu: dict[str, int], overhead_terms: dict[str, int]) -> dict[str, Any]:
    """The estimate's allocated / reserved / total bytes, as ../shared/published/check.py compares them: the
    estimate's own `allocated` and `reserved` when it reports them, else `total` minus the overhead terms that
    torch's allocator does not see (allocated: the CUDA context, the allocator's reserve and NCCL; reserved: the
    context and NCCL)."""
    ctx, nccl = overhead_terms.get("cuda_context", 0), overhead_terms.get("nccl", 0)
    total = per_gpu["total"]
    if "allocated" in per_gpu:
        allocated, a_src = per_gpu["allocated"], "allocated"
    else:
        allocated, a_src = total - ctx - overhead_terms.get("allocator_reserve", 0) - nccl, "total - overhead"
    if "reserved" in per_gpu:
        reserved, r_src = per_gpu["reserved"], "reserved"
    else:
        reserved, r_src = total - ctx - nccl, "total - overhead"
    return {"allocated": allocated, "reserved": reserved, "total": total, "sources": [a_src, r_src]}


def new_document(command: str, device: str, environment: dict[str, Any], budget_s: float, started: str) -> dict:
    return {
        "schema": SCHEMA,
        "kit": "bench/measure/gpu_kit.py",
        "command": command,
        "device": device,
        "environment": environment,
        "budget_s": budget_s,
        "started": started,
        "elapsed_s": 0.0,
        "complete": False,
        "cases": [],
    }


def write(doc: dict[str, Any], path: str | Path) -> None:
    """Validate and write atomically (a temporary file in the same folder, then a rename); never replaces
    something that is not a regular file."""
    validate(doc)
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ResultsError(f"{path}: exists and is not a regular file")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        mode = path.stat().st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # as open() would create it (mkstemp's file is 0600)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a results file (`ResultsError` with one line when it is not one)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: {exc}") from None
    validate(doc)
    return doc


def validate(doc: Any) -> None:
    """Raise `ResultsError` naming the first thing that is not as the kit writes it."""
    if not isinstance(doc, dict):
        raise ResultsError("the results are not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise ResultsError(f"schema {doc.get('schema')!r}, expected {SCHEMA}")
    if doc.get("device") not in DEVICES:
        raise ResultsError(f"device {doc.get('device')!r}, expected one of {', '.join(DEVICES)}")
    env = doc.get("environment")
    if not isinstance(env, dict) or any(k not in env for k in ENVIRONMENT):
        raise ResultsError(f"environment must name {', '.join(ENVIRONMENT)}")
    if not isinstance(doc.get("complete"), bool):
        raise ResultsError("complete must be true or false")
    cases = doc.get("cases")
    if not isinstance(cases, list):
        raise ResultsError("cases must be a list")
    seen: set[str] = set()
    for i, row in enumerate(cases):
        _validate_row(row, i, doc["device"])
        if row["id"] in seen:
            raise ResultsError(f"cases[{i}]: duplicate id {row['id']!r}")
        seen.add(row["id"])


def _validate_row(row: Any, i: int, device: str) -> None:
    where = f"cases[{i}]"
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        raise ResultsError(f"{where}: a row needs an id")
    where = f"{where} ({row['id']})"
    if row.get("status") not in STATUSES:
        raise ResultsError(f"{where}: status {row.get('status')!r}, expected one of {', '.join(STATUSES)}")
    if not isinstance(row.get("case"), dict):
        raise ResultsError(f"{where}: the resolved case is missing")
    if row["status"] != "ok":
        if not isinstance(row.get("reason"), str) or not row["reason"]:
            raise ResultsError(f"{where}: a {row['status']} row says why (reason)")
        return
    m = row.get("measured")
    if not isinstance(m, dict):
        raise ResultsError(f"{where}: an ok row has its measurements")
    for key in MEASURED_OK:
        if key not in m:
            raise ResultsError(f"{where}: measured.{key} is missing")
        if key in CUDA_ONLY and device == "cpu":
            continue
        if key in ("steps", "process_bytes"):
            continue
        v = m[key]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ResultsError(f"{where}: measured.{key} = {v!r} is not a non-negative number")
    if not isinstance(m["steps"], list) or not m["steps"]:
        raise ResultsError(f"{where}: measured.steps lists the steps run")
    if m["steady_peak_allocated_bytes"] > m["peak_allocated_bytes"]:
        raise ResultsError(f"{where}: the steady peak is above the run's peak")
    est = row.get("estimate")
    if est is not None and (not isinstance(est, dict) or any(k not in est for k in ESTIMATE)):
        raise ResultsError(f"{where}: estimate must name {', '.join(ESTIMATE)}")


def gpu_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows measured on a GPU (none when the file was written on the CPU)."""
    return [r for r in doc["cases"] if doc["device"] == "cuda" and r["status"] in ("ok", "oom")]


def rel(est: float | None, meas: float | None) -> float | None:
    """The estimate's relative error against the measurement (None when either is missing)."""
    if est is None or not meas:
        return None
    return est / meas - 1


def errors(row: dict[str, Any]) -> dict[str, float | None]:
    """allocated / reserved / process (vs total) / tokens_per_second relative errors of one ok row."""
    m, e = row.get("measured") or {}, row.get("estimate") or {}
    return {
        "allocated": rel(e.get("allocated"), m.get("peak_allocated_bytes")),
        "reserved": rel(e.get("reserved"), m.get("peak_reserved_bytes")),
        "process": rel(e.get("total"), m.get("process_bytes")),
        "tokens_per_second": rel(e.get("tokens_per_second_per_gpu"), m.get("tokens_per_second")),
    }


def _size(v: Any, unit: int) -> str:
    return f"{v / unit:7.2f}" if isinstance(v, (int, float)) else "      -"


def _pct(v: float | None) -> str:
    return f"{v:+6.1%}" if v is not None else "     -"


def summary_table(doc: dict[str, Any]) -> str:
    """One line per case: measured vs estimated peak allocated, reserved, process memory (GiB on a GPU, MiB on
    the CPU) and tokens/s (compared on a GPU only: the estimate is a GPU's step time)."""
    cuda = doc["device"] == "cuda"
    unit, uname = (GiB, "GiB") if cuda else (2**20, "MiB")
    head = (
        f"{'case':<40} {'status':<7} {'alloc':>7} {'est':>7} {'err':>6}  {'resvd':>7} {'est':>7} {'err':>6}  "
        f"{'proc':>7} {'total':>7} {'err':>6}  {'tok/s':>8} {'est':>8} {'err':>6}"
    )
    lines = [f"memory in {uname}; err = estimate / measured - 1", head, "-" * len(head)]
    for row in doc["cases"]:
        m, e = row.get("measured") or {}, row.get("estimate") or {}
        if row["status"] != "ok":
            fit = ""
            if row["status"] == "oom" and e:
                verdict = "fits" if e.get("fits") else "does not fit"
                fit = f" (vramplan: {verdict}, total {_size(e.get('total'), unit).strip()})"
            lines.append(f"{row['id'][:40]:<40} {row['status']:<7} {row.get('reason', '')[:80]}{fit}")
            continue
        err = errors(row)
        tps, etps = m.get("tokens_per_second"), e.get("tokens_per_second_per_gpu") if cuda else None
        if not cuda:
            err["tokens_per_second"] = None
        cells = [f"{row['id'][:40]:<40} {'ok':<7}"]
        for meas, est, kind in (
            ("peak_allocated_bytes", "allocated", "allocated"),
            ("peak_reserved_bytes", "reserved", "reserved"),
            ("process_bytes", "total", "process"),
        ):
            cells.append(f"{_size(m.get(meas), unit)} {_size(e.get(est), unit)} {_pct(err[kind])}")
        rate = [f"{v:8.0f}" if isinstance(v, (int, float)) else f"{'-':>8}" for v in (tps, etps)]
        cells.append(f"{rate[0]} {rate[1]} {_pct(err['tokens_per_second'])}")
        lines.append(cells[0] + " " + "  ".join(cells[1:]))
    meds = []
    for kind in ("allocated", "reserved", "process", "tokens_per_second"):
        if kind == "tokens_per_second" and not cuda:
            continue
        xs = [abs(v) for r in doc["cases"] if r["status"] == "ok" and (v := errors(r)[kind]) is not None]
        if xs:
            meds.append(f"{kind} {statistics.median(xs):.1%} (n={len(xs)}, worst {max(xs):.1%})")
    lines.append("median |error|: " + ("; ".join(meds) if meds else "-"))
    return "\n".join(lines)
