"""Calibration files (issue 29, point 5): round trip, hostile files, and the estimate changing by exactly the
calibrated [overhead] terms."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vramplan.cli.parser import run
from vramplan.core.files.calibration import (
    Calibration,
    apply_calibration,
    calibration_from_data,
    calibration_toml,
    read_calibration,
    write_calibration,
)
from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.planio import load_plan
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import MiB
from vramplan.core.plan.schema.plan import plan_from_dict

CAL = Calibration(
    cuda_context_bytes=300 * MiB,  # 314,572,800 B
    allocator_gap_bytes=1 << 30,
    allocated_peak_bytes=20 << 30,  # gap / peak = 1/20 = 5%
    nccl_bytes_per_group=600 * MiB,
    gpu="NVIDIA H100 80GB HBM3",
    machine="node-1",
    torch_version="2.8.0+cu128",
    created="2026-12-03T14:00:00Z",
    vramplan_version="0.1.0",
    plan="Llama-3.2-1B full",
)
PLAN = {
    "model": {"preset": "llama-3.2-1b"},
    "hardware": {"gpu": "h100-80gb", "gpus_per_node": 2},
    "training": {"micro_batch_size": 1, "seq_len": 1024},
    "strategy": {"zero_stage": 3},
}


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cal.toml"
    write_calibration(path, CAL)
    back = read_calibration(path)
    assert back == Calibration(**{**CAL.__dict__, "source": str(path)})
    assert calibration_toml(back) == calibration_toml(CAL)  # source is not written


def test_no_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "cal.toml"
    path.write_text("keep")
    with pytest.raises(PlanError, match="--force"):
        write_calibration(path, CAL)
    assert path.read_text() == "keep"
    write_calibration(path, CAL, overwrite=True)
    assert read_calibration(path).cuda_context_bytes == 300 * MiB


def test_estimate_changes_by_exactly_the_calibrated_terms() -> None:
    plan = plan_from_dict(PLAN)
    before = estimate(plan)
    after = estimate(apply_calibration(plan, CAL))
    b, a = before.overhead_bytes, after.overhead_bytes
    assert b["cuda_context"] == 512 * MiB and a["cuda_context"] == 300 * MiB
    # one process group (dp 2) x 600 MiB, where the default is 768 MiB
    assert b["nccl"] == 768 * MiB and a["nccl"] == 600 * MiB
    # the allocator's rules replaced by 5% of the tensor peak (the peak's tensors are the same plan's)
    assert after.peak == before.peak
    assert a["allocator_reserve"] == int(before.peak.total * 5.0 / 100)
    changed = ("cuda_context", "nccl", "allocator_reserve")
    assert {k: v for k, v in a.items() if k not in changed} == {k: v for k, v in b.items() if k not in changed}
    assert after.total - before.total == sum(a[k] - b[k] for k in changed)


def test_estimate_says_it_is_calibrated_and_from_where() -> None:
    est = estimate(apply_calibration(plan_from_dict(PLAN), CAL))
    prov = est.plan.overhead.calibrated_from
    assert prov == "a calibration (NVIDIA H100 80GB HBM3 on node-1, torch 2.8.0+cu128, 2026-12-03)"
    assert est.to_json("x")["memory"]["calibrated_from"] == prov
    assert prov in est.components["overhead"].formula
    context = next(t for t in est.overhead_terms if t.name == "cuda_context")
    assert "calibrated" in context.formula
    assert estimate(plan_from_dict(PLAN)).to_json("x")["memory"]["calibrated_from"] is None


def test_a_calibrated_plan_exports_and_loads_back(tmp_path: Path) -> None:
    plan = apply_calibration(plan_from_dict(PLAN), CAL)
    path = tmp_path / "plan.toml"
    path.write_text(plan_toml(plan))
    assert load_plan(path) == plan


def test_without_nccl_or_gap_the_defaults_stay() -> None:
    cal = Calibration(cuda_context_bytes=400 * MiB + 1)
    plan = apply_calibration(plan_from_dict(PLAN), cal)
    assert plan.overhead.cuda_context_mib == 401  # rounded up to whole MiB
    assert plan.overhead.nccl_mib_per_group == 768 and plan.overhead.allocator_reserve_percent is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[terms\n", "not valid TOML"),
        ("[terms]\ncuda_context_bytes = inf\n", "whole number of bytes"),
        ("[terms]\ncuda_context_bytes = nan\n", "whole number of bytes"),
        ("[terms]\ncuda_context_bytes = 1.5\n", "whole number of bytes"),
        ("[terms]\ncuda_context_bytes = true\n", "whole number of bytes"),
        ("[terms]\ncuda_context_bytes = -1\n", "from 0 to"),
        (f"[terms]\ncuda_context_bytes = {'9' * 30}\n", "from 0 to"),
        (f"[terms]\ncuda_context_bytes = {'9' * 5000}\n", "4,300 digits"),
        ("[terms]\nallocator_gap_bytes = 1\n", "cuda_context_bytes: missing"),
        ("[terms]\ncuda_context_bytes = 1\nallocator_gap_bytes = 1\n", "come together"),
        ("[terms]\ncuda_context_bytes = 1\nsurprise = 1\n", "unknown key"),
        ("terms = 3\n", "must be a table"),
        ("format_version = 99\n[terms]\ncuda_context_bytes = 1\n", "upgrade vramplan"),
        ("[terms]\ncuda_context_bytes = 1\n[measured_on]\ngpu = 3\n", "must be a string"),
        (f"[terms]\ncuda_context_bytes = 1\n[measured_on]\ngpu = '{'x' * 400}'\n", "longer than"),
    ],
)
def test_bad_calibration_files_are_one_plan_error(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PlanError, match=said) as info:
        read_calibration(path)
    assert str(path) in str(info.value)


def hostile_files(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a file too large to read, a dangling symlink, a symlink loop, a directory, bad TOML, infinity."""
    out = {name: tmp_path / name for name in ("fifo", "huge", "dangling", "loop", "folder", "bad", "inf")}
    os.mkfifo(out["fifo"])
    with open(out["huge"], "wb") as f:
        f.truncate(5 * 1024 * 1024)  # sparse: past the 4 MiB read limit
    out["dangling"].symlink_to(tmp_path / "nowhere")
    out["loop"].symlink_to(out["loop"])
    out["folder"].mkdir()
    out["bad"].write_text("[terms\n")
    out["inf"].write_text("[terms]\ncuda_context_bytes = -inf\n")
    return out


def test_hostile_calibration_files_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, path in hostile_files(tmp_path).items():
        for command in ("estimate", "check", "fit"):
            code = run([command, "--model", "llama-3.2-1b", "--gpu", "h100-80gb", "--calibration", str(path)])
            captured = capsys.readouterr()
            assert code == 2, (name, command, captured)
            lines = captured.err.strip().splitlines()
            assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in captured.err, (name, lines)
            assert captured.out == ""


def test_cli_applies_a_calibration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cal.toml"
    write_calibration(path, CAL)
    base = ["estimate", "--model", "llama-3.2-1b", "--gpu", "h100-80gb", "--gpus", "1"]
    assert run([*base, "--calibration", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"overhead calibrated from {path} (NVIDIA H100 80GB HBM3 on node-1" in captured.out
    assert f"calibrated from {path}" in captured.err  # the notice, one line, names what it applied
    assert "CUDA context and kernels 300 MiB" in captured.err


def test_from_data_checks_without_a_file() -> None:
    cal = calibration_from_data({"terms": {"cuda_context_bytes": 5}}, "x")
    assert cal.cuda_context_bytes == 5 and cal.source == "x"
