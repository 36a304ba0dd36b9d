"""Issue 28.3 through the CLI: ``--stack-from ENV_DIR`` (and, by default, ``VIRTUAL_ENV``/``CONDA_PREFIX``) fills
the stack versions a plan leaves unset; an explicit key wins; hostile environment folders end, exit 0, with at most
one warning line (bench/bench_environment.py times them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import strict_json
from tests.machine.fake_envs import HOSTILE, SITE, make_env, metadata
from tests.waiting import HANG_S
from vramplan.cli.parser import run

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = {"torch": "2.3.1+cu121", "peft": "0.10.0", "bitsandbytes": "0.42.0", "numpy": "1.26.4"}
QLORA = ("--set", "training.method=qlora", "--set", "training.quantization=nf4")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vramplan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=HANG_S, env=env)


def estimate_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict, str]:
    assert run(["estimate", *args, "--json"]) == 0
    out = capsys.readouterr()
    return strict_json(out.out), out.err


def test_the_versions_found_fill_the_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = make_env(tmp_path / "venv", VERSIONS)
    data, err = estimate_json(capsys, "--stack-from", str(env), *QLORA)
    assert err == ""
    assert data["plan"]["stack"] == {
        "framework": "custom",
        "torch": "2.3.1+cu121",
        "peft": "0.10.0",
        "bitsandbytes": "0.42.0",
    }
    assert data["stack_from"] == {
        "path": str(env),
        "versions": {"torch": "2.3.1+cu121", "peft": "0.10.0", "bitsandbytes": "0.42.0"},
        "warning": "",
    }
    # the stack's defaults follow the versions read: bitsandbytes 0.42 kept each 4-bit linear's input
    # (legacy), PEFT 0.10 predates the fp32 adapter upcast (bf16 adapters)
    chose = data["stack"]["chose"]
    assert chose["training.bnb_generation"]["value"] == "legacy"
    assert chose["training.lora_dtype"]["value"] == "bf16"
    bare, _ = estimate_json(capsys, *QLORA)
    assert "stack_from" not in bare and bare["stack"]["chose"]["training.bnb_generation"]["value"] == "current"
    assert data["memory"] != bare["memory"]


def test_an_explicit_key_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = make_env(tmp_path / "venv", VERSIONS)
    data, _ = estimate_json(capsys, "--stack-from", str(env), "--set", "stack.peft=0.13.2")
    assert (data["plan"]["stack"]["peft"], data["plan"]["stack"]["torch"]) == ("0.13.2", "2.3.1+cu121")
    plan = tmp_path / "plan.toml"
    plan.write_text('[model]\npreset = "llama-7b"\n[stack]\nframework = "trl"\nbitsandbytes = "0.45.0"\n')
    data, _ = estimate_json(capsys, str(plan), "--stack-from", str(env))
    assert data["plan"]["stack"] == {
        "framework": "trl",
        "torch": "2.3.1+cu121",
        "peft": "0.10.0",
        "bitsandbytes": "0.45.0",
    }


def test_check_and_fit_read_it_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = make_env(tmp_path / "venv", VERSIONS)
    for command in ("check", "fit"):
        assert run([command, "--stack-from", str(env), "--json"]) in (0, 1)
        data = strict_json(capsys.readouterr().out)
        assert data["stack_from"]["versions"]["peft"] == "0.10.0", command


def test_an_import_sets_the_framework_and_the_environment_the_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = make_env(tmp_path / "venv", VERSIONS)
    config = ROOT / "tests" / "data" / "import" / "axolotl_llama2_qlora_fsdp.yml"
    data, err = estimate_json(capsys, "--from", str(config), "--stack-from", str(env))
    assert data["plan"]["stack"]["framework"] == "axolotl" and data["plan"]["stack"]["peft"] == "0.10.0"
    assert data["plan"]["strategy"]["checkpoint_impl"] == "reentrant"  # the file's use_reentrant: true
    assert "(axolotl config) -> stack.framework=axolotl" in err


def test_the_running_environment_is_read_by_default(tmp_path: Path) -> None:
    venv = make_env(tmp_path / "venv", VERSIONS)
    conda = make_env(tmp_path / "conda", {"torch": "2.1.0"})
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    base["PATH"] = str(tmp_path)  # no nvidia-smi: VRAMPLAN_DETECT=1 detects no GPU
    on = {**base, "VRAMPLAN_DETECT": "1", "VIRTUAL_ENV": str(venv), "CONDA_PREFIX": str(conda)}

    def stack(env: dict[str, str], *args: str) -> dict:
        r = cli("estimate", "--json", *args, env=env)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        return json.loads(r.stdout)["plan"]["stack"]

    assert stack(on)["torch"] == "2.3.1+cu121"  # VIRTUAL_ENV over CONDA_PREFIX
    assert stack({**on, "VIRTUAL_ENV": ""})["torch"] == "2.1.0"
    assert stack({**on, "VRAMPLAN_DETECT": "0"}) == {"framework": "custom"}
    assert stack({**on, "VRAMPLAN_DETECT": "0"}, "--stack-from", str(conda))["torch"] == "2.1.0"  # asked for
    assert stack({**on, "VRAMPLAN_DETECT": "1"}, "--set", "stack.torch=2.6.0")["torch"] == "2.6.0"


def hostile_dirs(tmp_path: Path) -> dict[str, Path]:
    """ENV_DIRs a user (or a broken machine) can hand over, each with a good torch where there is a venv."""
    out: dict[str, Path] = {}
    for name, (make, _) in HOSTILE.items():
        env = make_env(tmp_path / name.partition("/")[0], {"torch": "2.5.1"})
        make(env / SITE)
        out[name] = env
    loop = make_env(tmp_path / "lib-loop", {})
    (loop / "lib" / "python3.9").symlink_to("python3.9")
    out["symlink loop as python3.X"] = loop
    (tmp_path / "env-loop").symlink_to("env-loop")
    out["symlink loop as ENV_DIR"] = tmp_path / "env-loop"
    big = make_env(tmp_path / "big", {"peft": "0.13.2"})
    with open(big / SITE / "peft-0.13.2.dist-info" / "METADATA", "a") as f:
        f.truncate(50 * 2**20)
    out["50 MB METADATA"] = big
    many = make_env(tmp_path / "many", {"torch": "2.5.1"})
    for i in range(5000):
        (many / SITE / f"pkg{i}-1.0.dist-info").mkdir()
    out["5,000 dist-info folders"] = many
    os.mkfifo(tmp_path / "fifo-env")
    out["FIFO as ENV_DIR"] = tmp_path / "fifo-env"
    (tmp_path / "file-env").write_text(metadata("torch", "2.5.1"))
    out["file as ENV_DIR"] = tmp_path / "file-env"
    out["missing ENV_DIR"] = tmp_path / "nothing-here"
    return out


def test_hostile_environments_end_with_one_line_at_most(tmp_path: Path) -> None:
    """Each ends (a hang would be stopped at `HANG_S`); how fast, against `vramplan estimate --json` alone, is
    bench/bench_environment.py's."""
    for case, path in hostile_dirs(tmp_path).items():
        r = cli("estimate", "--stack-from", str(path), "--json")
        assert r.returncode == 0, (case, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) <= 1 and "Traceback" not in r.stderr, (case, r.stderr)
        data = json.loads(r.stdout)
        found = data["stack_from"]
        assert bool(lines) == bool(found["warning"]), case
        if lines:
            assert lines[0] == f"vramplan: {found['warning']}", case
        assert data["plan"]["stack"].get("torch") == found["versions"].get("torch"), case
        if case in HOSTILE or case == "5,000 dist-info folders":
            assert found["versions"]["torch"] == "2.5.1", case
    assert found["warning"].endswith("no such folder; no versions read")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file; the EACCES path is tested in-process")
def test_unreadable_metadata_through_the_cli(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"torch": "2.5.1", "peft": "0.13.2"})
    path = env / SITE / "peft-0.13.2.dist-info" / "METADATA"
    path.chmod(0)
    r = cli("estimate", "--stack-from", str(env), "--json")
    assert r.returncode == 0
    (line,) = r.stderr.splitlines()
    assert "peft-0.13.2.dist-info/METADATA (Permission denied)" in line
    assert json.loads(r.stdout)["plan"]["stack"]["torch"] == "2.5.1"


def test_the_flag_is_in_each_commands_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("estimate", "check", "fit"):
        with pytest.raises(SystemExit):
            run([command, "--help"])
        assert "--stack-from ENV_DIR" in capsys.readouterr().out, command
    assert run(["estimate", "--stack-from", " "]) == 2
    assert "--stack-from: must not be empty" in capsys.readouterr().err
