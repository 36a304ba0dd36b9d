"""The forms of input the CLI takes: it takes what the planner shows: enum values in any case (`LoRA`), lists as `q,v`,
`--gpus N` and `--nodes N`, `--gpu h100` (the SXM part, said on stderr) or an nvidia-smi name; `vramplan keys` lists
every settable key; `vramplan presets --json`. Checked on the CLI's real output (a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.hostile import strict_json
from vramplan.core.plan.schema.plan import Plan

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vramplan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)


def plan_of(*args: str) -> dict:
    got = cli("estimate", *args, "--json")
    assert got.returncode == 0, got.stderr
    return strict_json(got.stdout)["plan"]


def test_enums_in_any_case_and_lists_as_the_planner_takes_them() -> None:
    plan = plan_of(
        "--set", "training.method=LoRA", "--set", "training.lora_targets=q,v,O", "--set",
        "strategy.gradient_checkpointing=Full", "--set", "training.optimizer=AdamW-8bit",
    )  # fmt: skip
    assert plan["training"]["method"] == "lora" and plan["training"]["lora_targets"] == ["q", "v", "o"]
    assert plan["strategy"]["gradient_checkpointing"] == "full" and plan["training"]["optimizer"] == "adamw-8bit"
    bad = cli("estimate", "--set", "training.method=lorax")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "training.method" in bad.stderr


def test_gpus_nodes_and_gpu_names() -> None:
    plan = plan_of("--gpus", "4", "--nodes", "2")
    assert plan["hardware"]["gpus_per_node"] == 4 and plan["hardware"]["nodes"] == 2
    assert plan_of("--gpus", "4", "--set", "hardware.gpus_per_node=2")["hardware"]["gpus_per_node"] == 2
    got = cli("estimate", "--gpu", "h100", "--json")
    assert got.returncode == 0 and strict_json(got.stdout)["plan"]["hardware"]["gpu"] == "h100-80gb"
    assert "--gpu h100: taken as h100-80gb (NVIDIA H100 80GB SXM5); h100-pcie" in got.stderr
    assert plan_of("--gpu", "NVIDIA H100 80GB HBM3")["hardware"]["gpu"] == "h100-80gb"  # as nvidia-smi names it
    assert plan_of("--gpu", "H100-PCIe")["hardware"]["gpu"] == "h100-pcie"
    ambiguous = cli("estimate", "--gpu", "a100")  # 40 or 80 GB: no obvious one, the error names both
    assert ambiguous.returncode == 2 and "a100-80gb" in ambiguous.stderr and "a100-40gb" in ambiguous.stderr


def test_keys_lists_every_settable_key() -> None:
    got = cli("keys")
    assert got.returncode == 0
    every = [f"{t}.{k}" for t, f in Plan.model_fields.items() for k in f.annotation.model_fields]  # type: ignore[union-attr]
    for key in every:
        assert f"  {key} " in got.stdout, key
    lines = [" ".join(line.split()) for line in got.stdout.splitlines()]
    assert "strategy.zero_stage int (default 3)" in lines
    assert "training.method full|lora|qlora (default full)" in lines
    data = strict_json(cli("keys", "--json").stdout)
    assert [k["key"] for k in data] == every
    seq = next(k for k in data if k["key"] == "training.seq_len")
    assert seq["type"] == "int" and seq["default"] == "2048" and seq["meaning"]


def test_presets_json() -> None:
    got = cli("presets", "--json")
    assert got.returncode == 0
    data = strict_json(got.stdout)
    llama = next(m for m in data["models"] if m["id"] == "llama-7b")
    assert llama["params"] == 6_738_415_616 and llama["model_type"] == "llama"
    h100 = next(g for g in data["hardware"] if g["id"] == "h100-80gb")
    assert h100["memory_mib"] == 81559 and "NVIDIA H100 80GB HBM3" in h100["nvidia_smi_names"]
    assert set(strict_json(cli("presets", "hardware", "--json").stdout)) == {"hardware", "problems"}
