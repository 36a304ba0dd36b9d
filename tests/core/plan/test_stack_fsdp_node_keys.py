"""The stack keys (`stack.framework` and each package's version), `strategy.checkpoint_impl`, the FSDP keys
(`strategy.fsdp_version`, `fsdp_adapter_wrap`, `fsdp_grad_sync`) and the node's limits (`hardware.host_memory_gib`,
`nvme_gib`), each everywhere a key is: listed by `vramplan keys`, settable by --set, and round-tripping through the
TOML export (explicit values written; what the stack chose left to the stack). They came in issue 28."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vramplan.core.files.export import export_plan
from vramplan.core.files.planio import load_plan
from vramplan.core.plan.keyref import settable_keys
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.plan.stack.config import PACKAGES

NEW = {
    "stack.framework": "torchtune",
    **{f"stack.{p}": "0.4.1" for p in PACKAGES},
    "strategy.checkpoint_impl": "reentrant",
    "strategy.fsdp_version": 1,
    "strategy.fsdp_adapter_wrap": "block",
    "strategy.fsdp_grad_sync": "last",
    "hardware.host_memory_gib": 1024,
    "hardware.nvme_gib": 4096,
}
BASE = {"training.method": "lora", "training.lora_dropout": 0.05}


def test_every_new_key_is_listed_by_vramplan_keys() -> None:
    listed = {k.key for k in settable_keys()}
    assert set(NEW) <= listed


@pytest.mark.parametrize("key", sorted(NEW))
def test_every_new_key_is_settable_and_round_trips_through_the_toml_export(key: str, tmp_path: Path) -> None:
    plan = default_plan().with_changes({**BASE, key: NEW[key]})
    table, _, field = key.partition(".")
    assert getattr(getattr(plan, table), field) == NEW[key]
    assert key not in plan.stack_chosen
    path = tmp_path / "plan.toml"
    export_plan(path, "toml", plan)
    assert load_plan(path) == plan
    assert field in path.read_text()


def test_set_takes_them_on_the_command_line() -> None:
    sets = [a for k, v in NEW.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "estimate", *sets, "--json"],
        capture_output=True,
        text=True,
        env={"VRAMPLAN_DETECT": "0", "PATH": ""},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert plan["stack"]["framework"] == "torchtune" and plan["stack"]["bitsandbytes"] == "0.4.1"
    assert plan["strategy"]["fsdp_version"] == 1 and plan["hardware"]["nvme_gib"] == 4096
