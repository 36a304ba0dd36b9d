"""`vramplan trace` on CPU kernels against the CPU oracle: every case of tests/data's CPU truth files (oracle,
extra, families, moe) as a plan, traced on fake tensors, its peak against the oracle's steady peak (the second step's,
the CPU allocator's counter of every live tensor). tests/measure/test_trace_cli.py runs a few of them.

Usage: python -m bench.measure.trace_oracle [CASE ...]   (needs the measure extra; about a second per case)
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
TRUTH_FILES = ("oracle_truth", "extra_truth", "families_truth", "moe_truth")
PRECISION = {"fp32": "fp32", "bf16-mixed": "bf16-autocast", "bf16": "bf16-pure"}


def case_model(c: dict[str, Any]) -> dict[str, Any]:
    """The case's model as a config.json: its hf_config keys, or the oracle's size keys."""
    if "hf_config" in c:
        return {"model_type": c["family"], **c["hf_config"]}
    return {
        "model_type": c["family"],
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": c.get("intermediate_size") or 4 * c["hidden_size"],
        "num_hidden_layers": c["num_layers"],
        "num_attention_heads": c["num_heads"],
        "num_key_value_heads": c.get("num_kv_heads") or c["num_heads"],
        "tie_word_embeddings": c.get("tie_embeddings", c["family"] == "bloom"),
    }


def case_args(c: dict[str, Any], config: Path) -> list[str]:
    """A measured case as plan arguments of the CLI (writes its config.json to `config`): the mapping of
    bench/data/measured_cases.py (bf16-mixed -> bf16-autocast, sdpa -> flash, qv -> q and v, BLOOM's qkv)."""
    config.write_text(json.dumps(case_model(c)))
    sets: dict[str, Any] = {
        "training.seq_len": c["seq_len"],
        "training.micro_batch_size": c["micro_batch_size"],
        "training.grad_accum_steps": c.get("grad_accum_steps", 1),
        "training.precision": f'"{PRECISION[c["precision"]]}"',
        "training.optimizer": f'"{c["optimizer"]}"',
        "training.optimizer_impl": f'"{c.get("optimizer_impl", "foreach")}"',
        "training.method": f'"{c["method"]}"',
        "strategy.gradient_checkpointing": '"full"' if c["gradient_checkpointing"] else '"none"',
        "strategy.attention": '"eager"' if c["attention"] == "eager" else '"flash"',
    }
    experts = {"grouped_mm": "grouped", "eager": "loop", "batched_mm": "batched"}.get(c.get("experts_implementation"))
    if experts:
        sets["strategy.experts"] = f'"{experts}"'
    if c["method"] == "lora":
        t = c.get("lora_targets", "qv")
        fused = c["family"] in ("bloom", "gpt2", "gpt_neox", "falcon", "phi3")
        targets = ('["qkv"]' if fused else '["q", "v"]') if t == "qv" else f'["{t}"]'
        sets |= {"training.lora_rank": c["lora_rank"], "training.lora_targets": targets}
    args = ["--hf-config", str(config), "--gpus", "1"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


def trace_case(c: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``vramplan trace --kernels cpu --json`` of the case, in this process."""
    from vramplan.cli.parser import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["trace", *case_args(c, folder / "config.json"), "--kernels", "cpu", "--json"])
    if code:
        return {"error": (err.getvalue().strip().splitlines() or ["?"])[-1]}
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def main(argv: list[str]) -> int:
    only = set(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in TRUTH_FILES:
            for case_id, t in json.loads((DATA / f"{name}.json").read_text()).items():
                if case_id.startswith("_") or (only and case_id not in only):
                    continue
                r = trace_case(t["resolved_case"], Path(tmp))
                want = t["figures"]["steady_peak_bytes"]
                if "error" in r:
                    print(f"{name:15s} {case_id:32s} {r['error'][:90]}")
                    continue
                got = r["traced"]["peak_allocated_bytes"]
                rows.append((got - want) / want)
                print(f"{name:15s} {case_id:32s} traced {got:>12,} oracle {want:>12,} {100 * rows[-1]:+8.3f}%")
    small = sum(abs(e) <= 0.0005 for e in rows)
    within = sum(abs(e) <= 0.01 for e in rows)
    print(f"{len(rows)} cases traced: {small} within 0.05%, {within} within 1% of the oracle's steady peak")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
