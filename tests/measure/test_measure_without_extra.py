"""Without the measure extra, `vramplan measure` says which extra to install in one line and exits 2; the planner's
commands never import torch (whether or not it is installed). Runs without torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "peft", "bitsandbytes", "accelerate")


@pytest.mark.parametrize("blocked", ["torch", "transformers", "peft"])
def test_measure_without_the_extra_is_one_line_and_exit_2(blocked: str) -> None:
    code = (
        f"import sys\nsys.modules[{blocked!r}] = None\n"
        "from vramplan.__main__ import main\n"
        "sys.exit(main(['measure', '--gpus', '1', '--device', 'cpu']))\n"
    )
    env = {**os.environ, "VRAMPLAN_DETECT": "0"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert "pip install 'vramplan[measure]'" in r.stderr and blocked in r.stderr


def test_estimate_and_the_parser_never_import_torch() -> None:
    code = (
        "import sys\n"
        "from vramplan.__main__ import main\n"
        "from vramplan.cli.parser import build_parser\n"
        "build_parser().parse_args(['measure', '--device', 'cpu'])\n"
        "code = main(['estimate', '--model', 'llama-3.2-1b', '--gpu', 'h100-80gb', '--gpus', '1', '--brief'])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'peft')]\n"
        "assert not heavy, heavy\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "VRAMPLAN_DETECT": "0"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode in (0, 1), r.stderr
    assert "per step" in r.stdout


def test_importing_the_measure_package_imports_nothing_heavy() -> None:
    code = (
        "import sys\nimport vramplan.measure, vramplan.measure.records, vramplan.measure.limitations\n"
        "import vramplan.measure.comparison, vramplan.measure.recipe\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'peft')]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_only_the_measure_package_imports_torch_transformers_or_peft() -> None:
    """The sources, read with ast (imports inside functions too): torch and its stack belong to measure/."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    wrong = []
    for folder in ("entry", "core", "cli", "tui", "machine", "presets"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
                wrong += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] in HEAVY]
    assert not wrong, wrong


def test_a_library_of_the_extra_that_fails_to_load_is_one_line_and_exit_2() -> None:
    """peft raises ImportError at get_peft_model when an installed torchao is too old: one line, exit 2 (--force:
    the default plan, never built here, is past this machine's memory)."""
    pytest.importorskip("torch")
    code = (
        "import sys\n"
        "import vramplan.measure.run as run\n"
        "def refuse(*a, **k):\n"
        "    raise ImportError('Found an incompatible version of torchao.\\nsecond line')\n"
        "run.measure_plan = refuse\n"
        "from vramplan.__main__ import main\n"
        "sys.exit(main(['measure', '--gpus', '1', '--device', 'cpu', '--steps', '1', '--force']))\n"
    )
    env = {**os.environ, "VRAMPLAN_DETECT": "0"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last == "vramplan: a library the measurement needs does not load: Found an incompatible version of torchao."
