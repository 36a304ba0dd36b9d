"""Offload time from bandwidths (`core.time.offload`): the bytes parameter, gradient and optimizer-state offload
move per step at the node's PCIe and NVMe bandwidths, CPU Adam at a measured rate, the overlap shown."""

from __future__ import annotations

import json

import pytest

from vramplan.cli.parser import run
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.time.comm import LINK_EFFICIENCY
from vramplan.core.time.offload import CPU_ADAM_PARAMS_PER_CORE_S, exposed_shares
from vramplan.core.time.step import step_time

# Llama-3.1-70B LoRA on one RTX A6000 (the plan): PCIe Gen4 x16 host link, no preset node figures
A6000_70B = {
    "model.preset": "llama-3.1-70b",
    "hardware.gpu": "rtx-a6000",
    "hardware.gpus_per_node": 1,
    "training.method": "lora",
    "training.seq_len": 4096,
}


def offloaded(device: str, extra: dict[str, object] | None = None) -> Plan:
    changes = {**A6000_70B, "strategy.offload_optimizer": device, "strategy.offload_parameters": device}
    return default_plan().with_changes(changes | (extra or {}))


def term(plan: Plan, name: str) -> tuple[float, float]:
    t = next(t for t in step_time(plan).terms if t.name == name)
    return t.seconds, t.exposed


def test_nvme_parameter_offload_pays_its_bytes_at_the_nvme_bandwidth() -> None:
    plan = offloaded("nvme")
    arch = plan.model.arch()
    # LoRA: the frozen base is bf16, every parameter 2 B: 70.55e9 x 2 B = 141 GB fetched for the forward and again
    # for the backward; one PCIe Gen4 drive (7 GB/s rated) x 0.8 serves the node's one GPU
    per_pass = arch.total_params * 2
    reads, exposed = term(plan, "nvme_reads")
    assert reads == pytest.approx(2 * per_pass / (7.0e9 * LINK_EFFICIENCY))
    assert reads > 40  # ~50 s of reads against ~28 s of compute: no longer a few milliseconds
    # what the compute cannot cover is exposed, and the overlap row shows the rest
    overlap, overlap_exposed = term(plan, "offload_overlap")
    assert overlap_exposed == 0 and overlap > 0 and exposed > 0
    # the NVMe reads are the longest transfer of each pass: what runs under compute, what the PCIe transfers
    # already expose, and their own exposed rest make them up
    assert overlap + exposed + term(plan, "offload_transfers")[1] == pytest.approx(reads)
    st = step_time(plan)
    plain = step_time(default_plan().with_changes(A6000_70B))
    assert st.step_seconds >= plain.step_seconds + exposed - 1e-9
    assert st.step_seconds / plain.step_seconds > 1.5


def test_parameter_fetch_also_crosses_pcie() -> None:
    plan = offloaded("nvme")
    per_pass = plan.model.arch().total_params * 2
    busy, _ = term(plan, "offload_transfers")
    # the parameters through pinned host memory over PCIe Gen4 x16 (32 GB/s x 0.8), plus the LoRA gradients
    assert busy >= 2 * per_pass / (32.0e9 * LINK_EFFICIENCY)
    assert busy < 1.01 * 2 * per_pass / (32.0e9 * LINK_EFFICIENCY)


def test_bandwidth_keys_override_the_preset_and_are_used_as_measured() -> None:
    per_pass = offloaded("nvme").model.arch().total_params * 2
    slow = offloaded("nvme", {"hardware.nvme_gbs": 2.0})
    assert term(slow, "nvme_reads")[0] == pytest.approx(2 * per_pass / 2.0e9)  # as is: no efficiency on top
    assert step_time(slow).step_seconds > step_time(offloaded("nvme")).step_seconds
    # two GPUs per node share the node's drives
    shared = offloaded("nvme", {"hardware.nvme_gbs": 2.0, "hardware.gpus_per_node": 2})
    assert term(shared, "nvme_reads")[0] == pytest.approx(2 * per_pass / 2 / 1.0e9)  # ZeRO-3 partition over 2
    cpu10 = term(offloaded("cpu", {"hardware.pcie_gbs": 10.0}), "offload_transfers")[0]
    cpu20 = term(offloaded("cpu", {"hardware.pcie_gbs": 20.0}), "offload_transfers")[0]
    assert cpu10 == pytest.approx(2 * cpu20)


def test_cpu_offload_is_faster_than_nvme_offload() -> None:
    cpu, nvme = step_time(offloaded("cpu")), step_time(offloaded("nvme"))
    assert cpu.step_seconds < nvme.step_seconds
    assert cpu.seconds("nvme_reads") == 0 and cpu.seconds("nvme_swap") == 0


def test_cpu_adam_runs_at_its_measured_rate_per_core_and_scales_with_parameters() -> None:
    base = {"strategy.zero_stage": 2, "strategy.offload_optimizer": "cpu", "training.precision": "bf16-master"}
    # 8 cores for 8 GPUs: one core per rank, so the rate (2.9e7 parameters/s per core), not memory, sets the pace
    plans = {
        m: default_plan().with_changes(base | {"model.preset": m, "hardware.cpu_cores": 8})
        for m in ("llama-7b", "tinyllama-1.1b")
    }
    for plan in plans.values():
        part = plan.model.arch().total_params / 8  # ZeRO-2 partition of the 8 ranks
        assert step_time(plan).seconds("cpu_optimizer") == pytest.approx(part / CPU_ADAM_PARAMS_PER_CORE_S)
    big, small = (step_time(p).seconds("cpu_optimizer") for p in plans.values())
    ratio = plans["llama-7b"].model.arch().total_params / plans["tinyllama-1.1b"].model.arch().total_params
    assert big / small == pytest.approx(ratio)
    doubled = plans["llama-7b"].with_changes({"hardware.cpu_cores": 16})
    assert step_time(doubled).seconds("cpu_optimizer") == pytest.approx(big / 2)


@pytest.mark.parametrize("device", ["cpu", "nvme"])
@pytest.mark.parametrize("model", ["llama-7b", "llama-3.1-70b"])
def test_exposed_never_negative_and_the_overlap_is_shown(device: str, model: str) -> None:
    plan = offloaded(device, {"model.preset": model})
    st = step_time(plan)
    assert all(t.exposed >= 0 and t.seconds >= t.exposed - 1e-12 for t in st.terms)
    assert sum(t.exposed for t in st.terms) == pytest.approx(st.step_seconds)
    assert "offload_overlap" in st.explain() and st.seconds("offload_overlap") == 0
    assert any(t.name == "offload_overlap" and t.seconds > 0 for t in st.terms)


def test_exposed_shares_split_only_the_excess() -> None:
    # 3 s of network, 5 s of PCIe, 9 s of NVMe under 4 s of compute: 5 s exposed, 0 + 1 + 4
    assert exposed_shares(4.0, 3.0, 5.0, 9.0) == pytest.approx((0.0, 1.0, 4.0))
    assert exposed_shares(10.0, 3.0, 5.0, 9.0) == (0.0, 0.0, 0.0)


def test_fit_no_longer_ranks_nvme_parameter_offload_at_the_plain_step_time(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "--model", "llama-3.1-70b", "--gpu", "rtx-a6000", "--gpus", "1", "--set", "training.method=lora"]
    argv += ["--set", "training.seq_len=4096", "--set", "hardware.nvme_gib=2000", "--json", "--limit", "40"]
    run(argv)
    got = json.loads(capsys.readouterr().out)
    nvme = [s for s in got["suggestions"] if s["changes"].get("strategy.offload_parameters") == "nvme"]
    assert nvme, "the NVMe offload plan fits and must be suggested"
    lora = next(s for s in nvme if "training.method" not in s["changes"])
    # the ranking reads the step time of core.time: the NVMe reads of the 70B's 141 GB twice per step show in it
    plan = default_plan().with_changes(A6000_70B | {"hardware.nvme_gib": 2000} | lora["changes"])
    assert lora["step_seconds"] == pytest.approx(step_time(plan).step_seconds)
    assert lora["relative_step_time"] > 1.5


def test_activation_offload_costs_its_pcie_bytes_less_what_compute_hides() -> None:
    """Issue 38: activation offload moves the saved activations to the host in the forward and back in the
    backward (torchtune's OffloadActivations, each on its own stream); the step is slower by the traffic the
    compute of each pass cannot hide (docs/time.md, 'What overlaps')."""
    from vramplan.core.time.transfers import activation_offload_bytes

    base = default_plan().with_changes({"strategy.gradient_checkpointing": "none", "training.seq_len": 4096})
    plan = base.with_changes({"strategy.activation_offload": "cpu"})
    moved = activation_offload_bytes(plan)
    assert moved > 20e9  # LLaMA-7B at 4k without checkpointing saves tens of GB per micro-batch
    busy, exposed = term(plan, "activation_offload")
    # out and back over PCIe Gen4 x16 (the A100 preset's host link) at 32 GB/s x 0.8
    assert busy == pytest.approx(2 * moved / (32e9 * LINK_EFFICIENCY))
    slower = step_time(plan).step_seconds - step_time(base).step_seconds
    assert slower == pytest.approx(exposed) and slower > 0
    # what compute hides is at most the forward and backward windows it runs under
    plain = step_time(base)
    compute = sum(t.exposed for t in plain.terms if t.category in ("compute", "memory", "host"))
    assert busy - exposed <= compute * (1 + 1e-9)
    # with nothing to hide under (a plan whose compute is short), it is slower by the whole transfer less that
    assert slower >= busy - compute
