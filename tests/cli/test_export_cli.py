"""`vramplan export`: formats, stdout, reloading, the stale-estimate notice, and never losing a file."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import strict_json
from vramplan.cli.parser import run
from vramplan.core.files import safewrite as safewrite_module
from vramplan.core.files.planio import load_plan_file
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import default_plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = b"# my notes, not to be lost\n[model]\npreset = 'llama-7b'\n"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "vramplan", *args], capture_output=True, text=True, cwd=cwd, timeout=60, env=env
    )


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_export_then_estimate_gives_the_same_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "review.toml"
    sets = ["--model", "mistral-7b", "--set", "strategy.zero_stage=2", "--set", "training.micro_batch_size=4"]
    assert run(["export", *sets, "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert run(["estimate", *sets, "--json"]) == 0
    direct = strict_json(capsys.readouterr().out)
    assert run(["estimate", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert strict_json(captured.out) == direct
    assert captured.err == ""  # unchanged estimate: no notice


@pytest.mark.parametrize("fmt", ["toml", "deepspeed", "markdown"])
def test_dash_writes_to_stdout(fmt: str, tmp_path: Path) -> None:
    r = cli("export", "--format", fmt, "-o", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == []
    if fmt == "toml":
        assert tomllib.loads(r.stdout)["model"]["preset"] == "llama-7b"
    elif fmt == "deepspeed":
        assert strict_json(r.stdout)["train_batch_size"] == 8
    else:
        assert r.stdout.startswith("# LLaMA-7B on 8 x ")


def test_default_file_name_and_format_from_extension(tmp_path: Path) -> None:
    r = cli("export", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "wrote llama-7b-8xa100-80gb-full-zero3.toml\n"
    assert load_plan_file(tmp_path / "llama-7b-8xa100-80gb-full-zero3.toml").plan == default_plan()
    r = cli("export", "-o", "ds.json", cwd=tmp_path)
    assert r.returncode == 0 and "zero_optimization" in strict_json((tmp_path / "ds.json").read_text())
    r = cli("export", "-o", "review.md", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "review.md").read_text().startswith("# ")


def test_title_and_note_carry_over_from_the_plan_file(tmp_path: Path, capsys) -> None:
    first = tmp_path / "a.toml"
    assert run(["export", "--title", "Run 12", "--note", "for Ana", "-o", str(first)]) == 0
    capsys.readouterr()
    assert run(["export", str(first), "-o", "-"]) == 0
    meta = tomllib.loads(capsys.readouterr().out)["meta"]
    assert (meta["title"], meta["note"]) == ("Run 12", "for Ana")
    assert run(["export", str(first), "--title", "Run 13", "--format", "markdown", "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("# Run 13\n\n> for Ana\n")


def test_deepspeed_export_warns_about_what_it_cannot_express(tmp_path: Path) -> None:
    r = cli(
        "export",
        "--set",
        "strategy.pipeline_parallel=2",
        "--set",
        "strategy.zero_stage=1",
        "-o",
        "ds.json",
        cwd=tmp_path,
    )
    assert r.returncode == 0
    line = one_line(r.stderr)
    assert line.startswith("vramplan: the DeepSpeed config cannot express: strategy.pipeline_parallel = 2")
    assert strict_json((tmp_path / "ds.json").read_text())["_vramplan"]["not_expressed"]


def stale_copy(tmp_path: Path) -> Path:
    path = tmp_path / "old.toml"
    assert run(["export", "-o", str(path)]) == 0
    text = path.read_text()
    text = re.sub(r'^vramplan_version = ".*"$', 'vramplan_version = "0.0.5"', text, count=1, flags=re.M)
    text = re.sub(r"^total_bytes = \d+$", "total_bytes = 1073741824", text, count=1, flags=re.M)
    path.write_text(text)
    return path


def test_changed_estimate_is_one_line_on_stderr_and_does_not_change_the_exit_code(tmp_path: Path) -> None:
    path = stale_copy(tmp_path)
    total = estimate(default_plan()).total
    fresh = cli("estimate", "--json")
    r = cli("estimate", str(path), "--json")
    assert r.returncode == 0
    assert r.stdout == fresh.stdout  # the stored figures are not used
    assert one_line(r.stderr) == (
        f"vramplan: {path}: estimate changed since this plan was exported with vramplan 0.0.5: "
        f"peak 1.00 -> {total / 2**30:.2f} GiB per GPU (recomputed)"
    )
    r = cli("export", str(path), "-o", "-")
    assert r.returncode == 0 and "estimate changed" in one_line(r.stderr)
    assert tomllib.loads(r.stdout)["estimate"]["total_bytes"] == total


def test_existing_file_is_not_overwritten_without_force(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_bytes(ORIGINAL)
    r = cli("export", "-o", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert one_line(r.stderr) == f"vramplan: {path}: already exists, not overwritten (use --force to replace it)"
    assert path.read_bytes() == ORIGINAL
    r = cli("export", "-o", str(path), "--force")
    assert r.returncode == 0
    assert load_plan_file(path).plan == default_plan()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("missing/plan.toml", "directory does not exist"),
        (".", "is a directory; give a file name"),
    ],
)
def test_bad_output_paths_give_one_line_and_exit_2(where: str, expected: str, tmp_path: Path) -> None:
    r = cli("export", "-o", str(tmp_path / where))
    assert r.returncode == 2 and r.stdout == ""
    assert expected in one_line(r.stderr)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("call", "err", "expected"),
    [
        ("open", errno.EACCES, "cannot write: permission denied"),
        ("write", errno.ENOSPC, "cannot write: no space left on device"),
        ("fsync", errno.ENOSPC, "cannot write: no space left on device"),
    ],
)
def test_os_failures_keep_the_original_and_leave_no_temporary_file(
    call: str, err: int, expected: str, tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.toml"
    path.write_bytes(ORIGINAL)
    real = getattr(os, call)

    def failing(*args, **kwargs):
        if call == "open" and not str(args[0]).startswith(str(tmp_path)):  # reading presets: not the failure
            return real(*args, **kwargs)
        if call == "write":  # half of the file reaches the disk first
            real(args[0], bytes(args[1][: len(args[1]) // 2]))
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(safewrite_module.os, call, failing)
    assert run(["export", "-o", str(path), "--force"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err) == f"vramplan: {path}: {expected}"
    assert path.read_bytes() == ORIGINAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]


def test_bad_input_gives_one_line(tmp_path: Path) -> None:
    r = cli("export", "--format", "yaml")
    assert r.returncode == 2 and "invalid choice" in one_line(r.stderr)
    r = cli("export", "nope.toml", "-o", str(tmp_path / "x.toml"))
    assert r.returncode == 2 and "nope.toml: no such file" in one_line(r.stderr)
    assert list(tmp_path.iterdir()) == []


def test_export_never_imports_textual() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from vramplan.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    for fmt in ('toml', 'deepspeed', 'markdown'):\n"
        "        assert main(['export', '--format', fmt, '-o', '-']) == 0\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr


def test_an_extension_that_names_no_format_is_an_error(tmp_path: Path) -> None:
    """Issue 16.8: `-o ds_config.yaml` wrote TOML under that name; now one line naming the formats, exit 2,
    nothing written. --format still decides when given; no extension is a TOML plan."""
    got = cli("export", "-o", "ds_config.yaml", cwd=tmp_path)
    assert got.returncode == 2
    assert one_line(got.stderr).endswith(
        ".yaml is not an export format: .toml (plan), .json (DeepSpeed config), .md (Markdown report), "
        ".accelerate.yaml (accelerate config); or give --format toml|deepspeed|accelerate|markdown"
    )
    assert list(tmp_path.iterdir()) == []
    assert cli("export", "-o", "ds_config.yaml", "--format", "deepspeed", cwd=tmp_path).returncode == 0
    assert strict_json((tmp_path / "ds_config.yaml").read_text())["zero_optimization"]["stage"] == 3
    assert cli("export", "-o", "plan", cwd=tmp_path).returncode == 0
    assert load_plan_file(tmp_path / "plan").plan == default_plan()


def test_the_markdown_report_is_written_for_people(tmp_path: Path) -> None:
    """Issue 16.18: the step-time table says MFU as 50.3%, FLOPs and FLOP/s with units, no "Mfu setting" or raw
    keys, and no empty figure (`None`)."""
    got = cli("export", "-o", "-", "--format", "markdown", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    section = got.stdout.split("## Step time", 1)[1].split("\n## ", 1)[0]
    assert "Mfu" not in section and "Hfu" not in section and "tflops" not in section and "None" not in section
    assert re.search(r"\| Model FLOPs utilization \(MFU\) \| \d+\.\d% \|", section), section
    assert re.search(r"\| Model FLOPs per step \| [\d.,]+ TFLOP \|", section)
    assert "| GPU peak (dense) | 312 TFLOP/s |" in section
