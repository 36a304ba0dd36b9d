"""Packaging: one installed name (`vramplan`) holding every source and preset; README and CI run the same test
command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import vramplan

ROOT = Path(__file__).resolve().parent.parent
TEST_COMMAND = "python3 -m pip install torch==2.13.0 -e '.[test,measure]' && python3 -m pytest -q"


def test_readme_and_ci_run_the_same_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert TEST_COMMAND in readme.split("\n\n", 3)[1] + readme  # the README opens with it
    assert TEST_COMMAND in ci


def test_the_readme_first_commands_install_into_a_venv(tmp_path: Path) -> None:
    """Issue 16.19: `python3 -m pip install .` with Debian/Ubuntu's system Python stops with
    "externally-managed-environment" (PEP 668). Each set-up command makes and activates a venv before any pip
    install, and that prefix, run as written, does put pip inside a venv (where PEP 668 does not apply)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert len(commands) == 2
    for command in commands:
        before, pip, _ = command.partition("python3 -m pip install")
        assert pip, command
        assert before == "python3 -m venv .venv && . .venv/bin/activate && ", command
    probe = "python3 -c 'import sys; print(sys.prefix != sys.base_prefix, sys.prefix)'"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "venv" not in p)
    prefix = commands[0].partition("python3 -m pip install")[0]
    r = subprocess.run(
        ["bash", "-c", prefix.replace("python3 -m venv", "python3 -m venv --without-pip") + probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", str(tmp_path / ".venv")]


# the repository's top-level folders, installed as vramplan.<folder>
FOLDERS = ("core", "cli", "tui", "presets", "machine", "measure")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources (an in-tree build would reuse a stale ``build/`` folder)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("entry", "docs", *FOLDERS):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (built,) = out.glob("vramplan-*.whl")
    return built


def test_the_wheel_holds_one_package_with_every_source_and_preset(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {"vramplan", f"vramplan-{vramplan.__version__}.dist-info"}, tops
    for required in (
        "vramplan/__init__.py",
        "vramplan/__main__.py",
        "vramplan/py.typed",  # PEP 561: type checkers read the package's hints
        "vramplan/presets/models/llama-7b.toml",
        "vramplan/presets/hardware/a100-80gb.toml",
        "vramplan/core/memory/peak.py",
        "vramplan/core/memory/accuracy.json",  # every estimate's expected error reads it
        "vramplan/cli/parser.py",
        "vramplan/tui/app.py",
        "vramplan/tui/app.tcss",
        "vramplan/docs/keys.md",  # vramplan help and the planner's help screen read the pages
    ):
        assert required in names
    files = {
        "vramplan/" + p.relative_to(ROOT).as_posix()
        for d in FOLDERS
        for p in (ROOT / d).rglob("*")
        if p.suffix in (".py", ".toml", ".tcss") and "__pycache__" not in p.parts
    }
    assert files <= names, sorted(files - names)  # sub-packages too (core/advice/checks)
    pages = {f"vramplan/docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= names, sorted(pages - names)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip install``-ed into a folder of its own (dependencies taken from this environment)."""
    target = tmp_path_factory.mktemp("install") / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return target


def test_installed_it_puts_only_vramplan_in_site_packages_and_runs(installed: Path, tmp_path: Path) -> None:
    """``pip install`` of the wheel: one package, its dist-info and the ``vramplan`` script; ``python -m vramplan``
    and the script work from anywhere, not only from a checkout."""
    target = installed
    assert {p.name for p in target.iterdir()} == {"vramplan", f"vramplan-{vramplan.__version__}.dist-info", "bin"}
    assert [p.name for p in (target / "bin").iterdir()] == ["vramplan"]
    env = {**os.environ, "PYTHONPATH": str(target), "VRAMPLAN_DETECT": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "estimate", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == vramplan.__version__
    r = subprocess.run(
        [sys.executable, "-m", "vramplan", "help", "keys"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == (ROOT / "docs" / "keys.md").read_text().split("-->\n\n", 1)[1]  # the shipped page
    code = "import vramplan.core.memory.peak as m; print(m.__file__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert r.stdout.strip().startswith(str(target)), r.stdout


def test_from_the_repository_root_the_installed_package_is_imported(installed: Path) -> None:
    """Issue 31.4: from the repository's root, with a non-editable install, ``python -m vramplan --version``,
    ``import vramplan.core`` and ``vramplan estimate`` work and use the installed package: no folder there shadows
    it (a ``vramplan/`` folder holding only ``__init__`` and ``__main__`` once did, and ``vramplan.core`` failed)."""
    assert not (ROOT / "vramplan").exists()
    target = installed
    env = {**os.environ, "PYTHONPATH": str(target), "VRAMPLAN_DETECT": "0"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)

    r = run(sys.executable, "-m", "vramplan", "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"vramplan {vramplan.__version__}"
    code = "import vramplan, vramplan.core.memory.peak as m; print(vramplan.__file__, m.__file__)"
    r = run(sys.executable, "-c", code)
    assert r.returncode == 0, r.stderr
    assert all(path.startswith(str(target)) for path in r.stdout.split()), r.stdout
    r = run(sys.executable, str(target / "bin" / "vramplan"), "estimate", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == vramplan.__version__
