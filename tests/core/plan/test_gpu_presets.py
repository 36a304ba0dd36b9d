"""The GPUs people rent (issue 14): each preset is found from the name and memory nvidia-smi prints, and cites a
source for its figures."""

from __future__ import annotations

import pytest

from vramplan.core.plan.catalogue import gpu_match, presets

# (nvidia-smi / rocm-smi name, memory.total MiB as the driver reports it) -> preset id
SMI = [
    ("NVIDIA A10G", 23028, "a10g"),
    ("NVIDIA L4", 23034, "l4"),
    ("NVIDIA L40", 46068, "l40"),
    ("NVIDIA L40S", 46068, "l40s"),
    ("NVIDIA RTX A5000", 24564, "rtx-a5000"),
    ("NVIDIA RTX A6000", 49140, "rtx-a6000"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "rtx-6000-ada"),
    ("NVIDIA H100 NVL", 95830, "h100-nvl"),
    ("NVIDIA H20", 97871, "h20"),
    ("NVIDIA GH200 480GB", 97871, "gh200"),
    ("NVIDIA GH200 144G HBM3e", 146831, "gh200-144gb"),
    ("NVIDIA B300 SXM6 AC", 275040, "b300"),
    ("AMD Instinct MI300X", 196592, "mi300x"),
    ("AMD Instinct MI325X", 262128, "mi325x"),
    ("AMD Instinct MI355X", 294896, "mi355x"),
]


@pytest.mark.parametrize(("name", "mib", "gpu"), SMI)
def test_the_driver_name_finds_the_preset(name: str, mib: int, gpu: str) -> None:
    assert gpu_match.match_preset(name, mib) == gpu
    spec = presets.gpu(gpu)
    assert spec.memory_mib == mib
    assert spec.source and spec.bf16_tflops > 0 and spec.internode_gbs > 0


def test_fp8_only_where_the_hardware_has_it() -> None:
    """Ampere parts (A10G, RTX A5000/A6000) have no FP8 tensor cores; Ada, Hopper, Blackwell and CDNA3/4 do."""
    for gpu in ("a10g", "rtx-a5000", "rtx-a6000"):
        assert presets.gpu(gpu).fp8_tflops is None
    for gpu in ("l4", "l40", "rtx-6000-ada", "h100-nvl", "h20", "gh200", "b300", "mi325x", "mi355x"):
        fp8 = presets.gpu(gpu).fp8_tflops
        assert fp8 is not None and fp8 >= presets.gpu(gpu).bf16_tflops


def test_every_preset_names_its_memory_type_and_reports_say_it() -> None:
    """Issue 40.7: the RTX A6000 was described as HBM; it is GDDR6 (its datasheet, as the preset's source says).
    The type is read from each preset's source, so every built-in preset has one."""
    from vramplan.cli.listing import hardware_listing

    reg = presets.registry()
    kinds = {g.id: g.memory_type for g in reg.sorted_gpus()}
    assert all(kinds.values()), [k for k, v in kinds.items() if not v]
    assert (kinds["rtx-a6000"], kinds["rtx-4090"], kinds["l40s"]) == ("GDDR6", "GDDR6X", "GDDR6")
    assert (kinds["h100-80gb"], kinds["a100-80gb"], kinds["mi325x"], kinds["v100-32gb"]) == (
        "HBM3",
        "HBM2e",
        "HBM3e",
        "HBM2",
    )
    listing = hardware_listing(reg)
    assert "HBM GB/s" not in listing
    (row,) = [line for line in listing.splitlines() if line.split()[:1] == ["rtx-a6000"]]
    assert "GDDR6 768" in row
    plain = presets.gpu("rtx-a6000").model_copy(update={"source": "a user's own figures"})
    assert (plain.memory_type, plain.memory_label) == ("", "device memory")


def test_the_step_times_formulas_name_the_gpus_memory() -> None:
    """Issue 40.7: the step time's memory-bound terms divide by the GPU's own memory (GDDR6 on an RTX A6000, HBM3
    on an H100), and a GRPO plan's generation source says memory bandwidth, not HBM."""
    from vramplan.core.plan.schema.plan import default_plan
    from vramplan.core.time.step import step_time

    for gpu, kind in (("rtx-a6000", "GDDR6"), ("h100-80gb", "HBM3")):
        plan = default_plan().with_changes({"hardware.gpu": gpu, "training.optimizer": "adamw"})
        terms = {t.name: t for t in step_time(plan).terms}
        assert f"/ {kind} " in terms["memory_ops"].formula and f"/ {kind} " in terms["optimizer_step"].formula
        assert all("HBM " not in t.formula for t in terms.values()) or kind.startswith("HBM")
    grpo = default_plan().with_changes({"hardware.gpu": "rtx-a6000", "training.objective": "grpo"})
    (generation,) = [t for t in step_time(grpo).terms if t.name == "generation"]
    assert "usable memory bandwidth" in generation.source and "HBM +" not in generation.source
