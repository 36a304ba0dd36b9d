"""`build_parser(only)`: the command being run gets its options, the others only their summary line (a cold
`vramplan estimate` neither builds nor imports the other commands), and both parsers agree."""

from __future__ import annotations

import argparse
import subprocess
import sys

from vramplan.cli import COMMANDS
from vramplan.cli.parser import SUMMARIES, build_parser


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_each_commands_help_line_is_its_summary() -> None:
    sub = _subcommands(build_parser())
    assert {a.dest: a.help for a in sub._choices_actions} == SUMMARIES
    assert list(SUMMARIES) == list(COMMANDS)


def test_the_top_level_help_is_the_same_with_one_command_built() -> None:
    full = build_parser().format_help()
    assert all(build_parser(name).format_help() == full for name in COMMANDS)


def test_the_command_run_parses_as_with_every_command_built() -> None:
    argv = ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--json"]
    assert vars(build_parser("estimate").parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_a_cold_estimate_imports_no_other_commands_module() -> None:
    code = (
        "import contextlib, io, os, sys\n"
        "os.environ['VRAMPLAN_DETECT'] = '0'\n"
        "from vramplan.cli.parser import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    run(['estimate', '--json'])\n"
        "others = ('gpus', 'diff', 'helptopics', 'measuring')\n"
        "print([m for m in others if 'vramplan.cli.' + m in sys.modules])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_parser_framework_choices_are_the_advisor_frameworks() -> None:
    from vramplan.cli.parser import FRAMEWORK_CHOICES
    from vramplan.core.advice.frameworks import FRAMEWORKS

    assert tuple(FRAMEWORKS) == FRAMEWORK_CHOICES
