"""`vramplan estimate|check|fit|export --from FILE` (issue 17.1): the real CLI's output, the lines of what was read
and ignored on stderr, ``"import"`` in ``--json``, and one line with exit code 2 for a file it cannot read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.files.importers.apply import import_config
from vramplan.core.plan.schema.plan import default_plan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "import"
SEED = str(DATA / "seed_13b_zero3.json")


def test_the_seed_config_estimate_says_it_fits_and_what_it_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--from", SEED, "--model", "llama-2-13b", "--gpu", "a100-80gb", "--gpus", "4"]) == 0
    out, err = capsys.readouterr()
    assert "Llama-2-13B on 4 x NVIDIA A100 80GB" in out
    assert "fp16-master, adamw; micro-batch 2 x 2048 tokens, accumulation 4" in out
    assert "DP 4, ZeRO-3, optimizer->cpu; checkpointing full" in out
    assert "of 80.0 GiB per GPU: fits" in out
    (line,) = err.splitlines()  # one summary line by default (issue 40.1)
    assert line.startswith("vramplan: imported seed_13b_zero3.json (DeepSpeed JSON): 11 settings read, 2 ignored; ")
    assert "sharding ZeRO-3" in line and line.endswith("(-v lists each)")
    assert run(["estimate", "-v", "--from", SEED, "--model", "llama-2-13b", "--gpu", "a100-80gb", "--gpus", "4"]) == 0
    err = capsys.readouterr().err
    assert (
        "vramplan: read from seed_13b_zero3.json: train_batch_size=32 -> training.micro_batch_size=2 "
        "(32 / (accumulation 4 x 4 data-parallel GPUs))"
    ) in err.splitlines()
    assert "vramplan: seed_13b_zero3.json: ignored fp16.loss_scale_window=100: " in err
    assert len(err.splitlines()) == 13  # 11 read + 2 ignored


def test_json_carries_the_import(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--from", SEED, "--model", "llama-2-13b", "--gpus", "4", "--json"]
    assert run(["estimate", *args]) == 0
    data = strict_json(capsys.readouterr().out)
    assert data["memory"]["fits"] is True
    assert data["plan"]["training"]["micro_batch_size"] == 2
    imp = data["import"]
    assert imp["format"] == "deepspeed" and imp["file"] == SEED
    assert {"key": "zero_optimization.stage", "value": 3, "plan_key": "strategy.zero_stage", "plan_value": 3} in imp[
        "read"
    ]
    assert {i["key"] for i in imp["ignored"]} == {
        "fp16.loss_scale_window",
        "activation_checkpointing.contiguous_memory_optimization",
    }
    for command in ("check", "fit"):
        run([command, *args])
        assert strict_json(capsys.readouterr().out)["import"]["format"] == "deepspeed"


def test_export_converts_an_imported_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.toml"
    assert run(["export", "--from", str(DATA / "axolotl_llama2_qlora_fsdp.yml"), "--gpus", "2", "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert run(["estimate", str(out), "--json"]) == 0
    plan = strict_json(capsys.readouterr().out)["plan"]
    assert plan["model"]["preset"] == "llama-2-7b" and plan["training"]["method"] == "qlora"
    assert plan["hardware"]["gpus_per_node"] == 2 and plan["strategy"]["offload_parameters"] == "cpu"


def test_a_plan_file_under_the_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text('[model]\npreset = "llama-2-13b"\n[hardware]\ngpus_per_node = 4\n[training]\nseq_len = 4096\n')
    assert run(["estimate", str(plan), "--from", SEED, "--json"]) == 0
    t = strict_json(capsys.readouterr().out)["plan"]["training"]
    assert (t["seq_len"], t["micro_batch_size"], t["precision"]) == (4096, 2, "fp16-master")  # the file's seq_len stays


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
         "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n", "bomb.yaml", "alias bomb"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "deep.yaml", "nested deeper than 32 levels"),
        ("epochs: 3\n", "other.yaml", "not a config vramplan can import"),
        ('{"train_batch_size": 30, "gradient_accumulation_steps": 4}', "ds.json", "not a multiple of accumulation 4"),
    ],
)  # fmt: skip
def test_bad_files_are_one_line_and_exit_2(tmp_path: Path, content: str, name: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "estimate", "--from", str(path), "--gpus", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"vramplan: {path}") and message in lines[0]


def test_one_summary_line_by_default_and_each_setting_with_v(capsys: pytest.CaptureFixture[str]) -> None:
    """An axolotl import printed 40 stderr lines (issue 40.7): now one, and -v lists each."""
    path = str(DATA / "axolotl_llama2_qlora_fsdp.yml")
    assert run(["estimate", "--from", path, "--gpus", "2", "--brief"]) in (0, 1)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("vramplan: imported axolotl_llama2_qlora_fsdp.yml (axolotl config): ")
    assert run(["estimate", "-v", "--from", path, "--gpus", "2", "--brief"]) in (0, 1)
    lines = capsys.readouterr().err.splitlines()
    im = import_config(path, default_plan(), sets=["hardware.gpus_per_node=2"])
    assert len(lines) == len(im.reads) + len(im.ignored) > 30
