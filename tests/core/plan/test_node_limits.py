"""The node's host memory and NVMe as limits like the GPU's memory (issue 28.7, `core.plan.node`): a plan that
offloads more than its node holds does not fit, and the fit advisor never proposes one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramplan.cli.parser import run
from vramplan.core.advice.advisor import advise
from vramplan.core.advice.checklist import checklist
from vramplan.core.files.export import export_plan
from vramplan.core.files.planio import load_plan
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.node import HOST_PER_GPU_MEMORY, host_limit, nvme_limit
from vramplan.core.plan.schema.plan import Plan, default_plan

OFFLOAD = {"strategy.zero_stage": 3, "strategy.offload_optimizer": "cpu", "strategy.offload_parameters": "cpu"}
ARGS_70B = ["--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--gpus", "1"]


def plan_70b(**changes: object) -> Plan:
    base = {"model.preset": "llama-3.1-70b", "hardware.gpu": "a100-80gb", "hardware.gpus_per_node": 1}
    return default_plan().with_changes({**base, **changes})


def test_70b_offloaded_on_one_a100_does_not_fit_its_node() -> None:
    est = estimate(plan_70b(**OFFLOAD))
    # the preset's typical node: DGX A100 640GB, 2 TiB for 8 GPUs; one GPU's share = 2048 GiB x 1 / 8 = 256 GiB
    assert est.node.host.bytes == 256 * GiB and "DGX A100" in est.node.host.source
    assert est.cpu_per_node > 1300 * GiB  # about 1,314 GiB: fp32 master, Adam states and gradients of 70.6 B
    assert est.gpu_fits and not est.host_fits and not est.fits
    assert est.exceeded == ("host_memory",)
    memory = est.to_json("test")["memory"]
    assert memory["host_limit_per_node"] == 256 * GiB and memory["exceeded"] == ["host_memory"]
    assert memory["fits"] is False and memory["gpu_fits"] is True
    item = checklist(plan_70b(**OFFLOAD)).item("oom.host_memory")
    assert item.status == "fail" and "over by" in item.detail


def test_raising_the_limit_makes_it_fit() -> None:
    est = estimate(plan_70b(**OFFLOAD, **{"hardware.host_memory_gib": 4096}))
    assert est.fits and est.node.host == (4096 * GiB, "hardware.host_memory_gib", True)
    assert checklist(est.plan).item("oom.host_memory").status == "ok"


def test_fit_never_offers_offload_past_the_node() -> None:
    """Without the limit the advisor's first fix was CPU offload of the optimizer and parameters (1,314 GiB of
    host memory per node); on the DGX share (256 GiB) no suggestion may exceed host memory or NVMe."""
    advice = advise(plan_70b())
    assert advice.suggestions
    for s in advice.suggestions:
        est = estimate(s.effect.plan)
        assert est.host_fits and est.nvme_fits, s.title
        if s.same_model:  # full fine-tuning's CPU offload needs 1,314 GiB (LoRA's adapters a few: that fits)
            assert s.changes.get("strategy.offload_optimizer") != "cpu", s.title
    assert any(s.same_model for s in advice.suggestions)
    raised = advise(plan_70b(**{"hardware.host_memory_gib": 4096}))
    assert raised.suggestions[0].changes.get("strategy.offload_optimizer") == "cpu"  # within the user's limit


def test_nvme_is_a_limit_when_nvme_offload_is_used() -> None:
    plan = plan_70b(**{**OFFLOAD, "strategy.offload_optimizer": "nvme", "strategy.offload_parameters": "nvme"})
    est = estimate(plan)
    # 8 x 3.84 TB = 30.72e12 B = 28,610.2 GiB for 8 GPUs; one GPU's share is 3,576 GiB: the 1,314 GiB fit
    assert est.nvme_fits and est.fits and est.node.nvme.bytes == int(28610.2 * GiB) // 8
    small = estimate(plan.with_changes({"hardware.nvme_gib": 500}))
    assert small.exceeded == ("nvme",) and not small.fits


def test_unknown_node_uses_the_conservative_rule() -> None:
    plan = default_plan().with_changes({"hardware.gpu": "rtx-4090", "hardware.gpus_per_node": 2})
    gpu = presets.gpu("rtx-4090")
    assert gpu.node_host_memory_gib is None  # no sourced node for a GeForce card
    assert host_limit(plan).bytes == HOST_PER_GPU_MEMORY * 2 * gpu.memory_bytes
    assert host_limit(plan).source.startswith("rule:") and nvme_limit(plan).source.startswith("rule:")


def test_this_machine_counts_only_for_its_gpu() -> None:
    presets.register_machine_host("a100-80gb", 512 * GiB)
    assert host_limit(plan_70b()).bytes == 512 * GiB  # this machine: all of MemTotal, whatever the GPU count
    assert "this machine" in host_limit(plan_70b()).source
    assert host_limit(plan_70b(**{"hardware.gpu": "h100-80gb"})).bytes == 2048 * GiB // 8  # not this machine's
    assert host_limit(plan_70b(**{"hardware.host_memory_gib": 100})).bytes == 100 * GiB  # the key always wins


def test_keys_round_trip_through_the_toml_export(tmp_path: Path) -> None:
    plan = plan_70b(**{"hardware.host_memory_gib": 1536.5, "hardware.nvme_gib": 7000})
    path = tmp_path / "plan.toml"
    export_plan(path, "toml", plan)
    assert "host_memory_gib = 1536.5" in path.read_text() and "nvme_gib = 7000" in path.read_text()
    assert load_plan(path) == plan
    assert "host_memory_gib" not in default_plan().dump()["hardware"]  # unset by default


@pytest.mark.parametrize("bad", ["0", "-1", "1e30", '"lots"'])
def test_bad_limits_are_one_line(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--set", f"hardware.host_memory_gib={bad}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hardware.host_memory_gib" in err[0]


def test_estimate_and_fit_say_which_limit(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [a for k, v in OFFLOAD.items() for a in ("--set", f"{k}={v}")]
    assert run(["estimate", *ARGS_70B, *sets]) == 1  # does not fit: over the host memory
    out = capsys.readouterr().out
    assert "DOES NOT FIT in host memory per node" in out
    assert "host RAM per node 1314.2 GiB of 256.0 GiB: DOES NOT FIT by 1058.2 GiB" in out
    assert run(["estimate", *ARGS_70B, *sets, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["exceeded"] == ["host_memory"] and memory["host_limit_per_node"] == 256 * GiB
    assert run(["fit", *ARGS_70B, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["suggestions"][0]
    assert first["changes"].get("strategy.offload_optimizer") != "cpu"
    assert run(["fit", *ARGS_70B, "--set", "hardware.host_memory_gib=4096"]) == 0
    out = capsys.readouterr().out
    assert "offload within 4096.0 GiB per node (hardware.host_memory_gib, as set)" in out


def test_the_cli_uses_this_machines_memory_on_its_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No plan file: the GPUs are detected (a fake nvidia-smi) and /proc/meminfo (a fake one) gives the node's
    host memory; VRAMPLAN_DETECT=0 reads neither, and the preset's typical node is the limit."""
    from tests.cli.test_machine_cli import install_smi
    from vramplan.machine import host

    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       1056964608 kB\n")  # 1,056,964,608 kB x 1024 = 1008 GiB
    monkeypatch.setattr(host, "MEMINFO", fake)
    install_smi(tmp_path, monkeypatch, "NVIDIA A100-SXM4-80GB, 81920\n" * 8)
    assert run(["estimate", "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["host_limit_per_node"] == 1008 * GiB and "this machine" in memory["host_limit_source"]
    assert run(["estimate", "--json", "--gpu", "h100-80gb"]) == 0  # not this machine's GPU: its typical node
    assert json.loads(capsys.readouterr().out)["memory"]["host_limit_per_node"] == 2048 * GiB
    monkeypatch.setenv("VRAMPLAN_DETECT", "0")
    presets.reload()
    assert run(["estimate", "--json", "--gpu", "a100-80gb"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["host_limit_per_node"] == 2048 * GiB
