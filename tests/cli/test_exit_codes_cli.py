"""`vramplan estimate` for scripts (issue 32): exit 1 when the plan does not fit, `--brief`'s one line, and
`--json` exiting 0 on any valid plan (the shared validation scripts read a non-zero exit as "no estimate")."""

from __future__ import annotations

import json
import re

import pytest

from vramplan.cli.parser import run
from vramplan.core.files.planio import resolve_plan
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB

OVER = ["--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--gpus", "1"]  # 70B full fine-tuning on one GPU
HOST_OVER = ["--set", "strategy.zero_stage=2", "--set", "strategy.offload_optimizer=cpu"]
HOST_OVER += ["--set", "hardware.host_memory_gib=16"]  # LLaMA-7B: the optimizer's ~100 GiB in 16 GiB of RAM
BRIEF = re.compile(r"fits: (\d+\.\d) / (\d+\.\d) GiB, \d+(\.\d+)? (ms|s) per step")


def test_fitting_plan_exits_0_and_brief_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--gpu", "h100-80gb", "--brief"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    m = BRIEF.fullmatch(out.strip())
    assert m, out
    est = estimate(resolve_plan(None, gpu="h100-80gb"))
    assert est.fits
    assert float(m[1]) == round(est.on_gpu / GiB, 1) and float(m[2]) == round(est.gpu_capacity / GiB, 1)


def test_plan_over_the_gpu_exits_1_table_and_brief(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", *OVER]) == 1
    assert "DOES NOT FIT by" in capsys.readouterr().out
    assert run(["estimate", *OVER, "--brief"]) == 1
    out = capsys.readouterr().out.strip()
    est = estimate(resolve_plan(None, model="llama-3.1-70b", gpu="a100-80gb", sets=["hardware.gpus_per_node=1"]))
    over, need, have = -est.headroom / GiB, est.on_gpu / GiB, est.gpu_capacity / GiB
    assert out.startswith(f"does not fit by {over:.1f} GiB ({need:.1f} / {have:.1f} GiB), ")
    assert out.endswith(" per step") and "\n" not in out


def test_json_exits_0_on_a_plan_that_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", *OVER, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["fits"] is False


def test_brief_names_the_host_memory_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", *HOST_OVER, "--brief"]) == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith("does not fit in host memory per node by ")
    assert "/ 16.0 GiB); GPU " in out  # the GPU's own figures follow: they fit
    assert run(["estimate", *HOST_OVER, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["exceeded"] == ["host_memory"]


def test_bad_input_stays_exit_2_and_brief_excludes_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--brief", "--set", "training.seq_len=0"]) == 2
    assert run(["estimate", "--brief", "--json"]) == 2
    assert "not allowed with" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["estimate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "1 when it does not" in text and "--json always exits 0 on a valid plan: read memory.fits" in text
