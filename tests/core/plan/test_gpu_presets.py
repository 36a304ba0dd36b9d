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
