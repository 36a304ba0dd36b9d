"""The README's five tasks, run: each block of README.md named ``task-N`` is the real output of its commands, made by
running them in process (`vramplan.cli.parser.run`) in a scratch folder, with GPU detection and the reading of
this environment's packages off and no user presets, as ``VRAMPLAN_DETECT=0`` on a fresh machine gives them.

``python -m bench.docs`` writes them with the other generated parts; ``tests/core/files/test_docpages.py`` fails when
the README's output is no longer what the commands print.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from vramplan.cli.parser import run
from vramplan.core.plan.catalogue import presets

Lines = list[str]


class Step(NamedTuple):
    """One command of a task: its arguments after ``vramplan``, and which of its output lines the README shows."""

    argv: tuple[str, ...]
    shown: Callable[[Lines, Lines], Lines]  # (stdout lines, stderr lines) -> the lines shown


def _all(out: Lines, err: Lines) -> Lines:
    return out


def _both(out: Lines, err: Lines) -> Lines:
    return [*err, *out]


def _head(n: int) -> Callable[[Lines, Lines], Lines]:
    return lambda out, err: [*out[:n], "..."]


def _read_lines(out: Lines, err: Lines) -> Lines:
    """What --from read, three lines of it, then the one-line verdict."""
    wanted = ("torch_autocast.enabled", "zero_optimization.stage=", "ignored zero_optimization.overlap_comm")
    return [line for line in err if any(w in line for w in wanted)] + ["...", *out]


def _failing_item(out: Lines, err: Lines) -> Lines:
    """The summary line and the failing item with its fix."""
    i = next(n for n, line in enumerate(out) if line.lstrip().startswith("FAIL"))
    return [out[0], "...", *out[i : i + 6], "..."]


def _step(command: str, shown: Callable[[Lines, Lines], Lines] = _all) -> Step:
    return Step(tuple(shlex.split(command)), shown)


TASKS: dict[str, tuple[Step, ...]] = {
    "task-1": (_step("estimate --model llama-3.1-8b --gpu h100-80gb --gpus 8"),),
    "task-2": (_step("fit --model llama-3.1-8b --gpu a100-40gb --gpus 1 --limit 3"),),
    "task-3": (
        _step(
            "gpus --model llama-3.1-8b --set training.method=lora --tokens 1B --price h100=2.5 "
            "--price a100-80gb=1.8 --sort cost --no-advice",
            _head(11),
        ),
    ),
    "task-4": (
        _step(
            "export --model llama-3.1-8b --gpu h100-80gb --gpus 4 --set strategy.zero_stage=2 -o ds_config.json", _both
        ),
        _step("estimate --from ds_config.json --model llama-3.1-8b --gpu h100-80gb --gpus 4 --brief", _read_lines),
    ),
    "task-5": (
        _step(
            "check --model llama-2-13b --set training.precision=fp16-autocast --set training.loss_scaling=none",
            _failing_item,
        ),
    ),
}


@contextlib.contextmanager
def fresh_machine() -> Iterator[Path]:
    """A scratch working folder, no GPU detection, no user presets; the caller's environment back afterwards."""
    saved = {k: os.environ.get(k) for k in ("VRAMPLAN_DETECT", "VRAMPLAN_CONFIG_DIR")}
    cwd = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["VRAMPLAN_DETECT"] = "0"
        os.environ["VRAMPLAN_CONFIG_DIR"] = str(Path(tmp) / "config")
        os.chdir(tmp)
        presets.reload()
        try:
            yield Path(tmp)
        finally:
            os.chdir(cwd)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            presets.reload()


def _command(argv: tuple[str, ...]) -> str:
    """``$ vramplan ...``, wrapped with a backslash before an option once a line passes 90 characters."""
    words = ["$", "vramplan", *(shlex.quote(a) for a in argv)]
    lines, line = [], ""
    for word in words:
        if len(line) > 90 and word.startswith("--"):
            lines.append(line + " \\")
            line = "   "
        line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def task_block(name: str) -> str:
    """The README's fenced block of task ``name``: each command and the output lines it shows."""
    out: list[str] = []
    with fresh_machine():
        for step in TASKS[name]:
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                run(list(step.argv))
            out += [_command(step.argv), *step.shown(stdout.getvalue().splitlines(), stderr.getvalue().splitlines())]
    return "```text\n" + "\n".join(out) + "\n```\n"
