"""Headless commands: ``vramplan estimate|presets`` (and the others as they land). Never imports Textual.

Every user error is one line on stderr and exit code 2 (`PlanError`, argparse usage errors, OS errors).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from core.errors import PlanError

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A usage error: one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``vramplan estimate: unrecognized arguments: --x``)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)")


def _plan_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    if required:
        p.add_argument("plan", metavar="PLAN.toml", help="plan file")
    else:
        p.add_argument("plan", nargs="?", metavar="PLAN.toml", help="plan file (default: the built-in default plan)")
    p.add_argument("--model", metavar="ID", help="model preset id (vramplan presets models)")
    p.add_argument(
        "--hf-config",
        metavar="PATH",
        help="the model of a local Hugging Face config.json, or of a checkpoint directory holding one",
    )
    p.add_argument("--gpu", metavar="ID", help="hardware preset id (vramplan presets hardware)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override a plan key; VALUE is a TOML literal, a bare word is a string (repeatable)",
    )


def cmd_estimate(args: argparse.Namespace) -> int:
    from core import __version__
    from core.estimate import estimate
    from core.planio import resolve_plan
    from tui.report import estimate_table

    plan = resolve_plan(args.plan, args.model, args.gpu, args.sets, args.hf_config)
    est = estimate(plan)
    if args.json:
        sys.stdout.write(json.dumps(est.to_json(__version__)) + "\n")
    else:
        sys.stdout.write(estimate_table(est, hardware_note=_detected_note(args, plan.hardware.gpu)))
    return 0


def _detected_note(args: argparse.Namespace, gpu_id: str) -> str:
    """``detected: 8 x H100 80GB HBM3`` when the hardware came from nvidia-smi (no plan file, no --gpu)."""
    if args.plan or args.gpu:
        return ""
    from core.detect import detected_gpus

    det = detected_gpus()  # cached: resolve_plan already asked
    return det.label if det is not None and det.gpu_id == gpu_id else ""


def cmd_presets(args: argparse.Namespace) -> int:
    from core.presets import registry
    from tui.report import hardware_listing, model_listing

    reg = registry()
    parts = []
    if args.kind in (None, "models"):
        parts.append(model_listing(reg))
    if args.kind in (None, "hardware"):
        parts.append(hardware_listing(reg))
    sys.stdout.write("\n".join(parts))
    for problem in reg.problems:  # broken user presets: reported, the others still listed
        print(f"vramplan: skipped user preset: {problem}", file=sys.stderr)
    return 0


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="vramplan",
        description="Plan the GPU memory of LLM training before you launch it. "
        "Run without a command (optionally with a PLAN.toml) to open the planner.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    p = sub.add_parser("estimate", help="per-GPU memory of a plan (table or --json)")
    _plan_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=cmd_estimate)

    p = sub.add_parser("presets", help="list model and hardware presets")
    p.add_argument("kind", nargs="?", choices=("models", "hardware"))
    p.set_defaults(handler=cmd_presets)
    return parser


COMMANDS = ("estimate", "presets")


def run(argv: Sequence[str]) -> int:
    """Run a headless command; user errors become one line on stderr and exit code 2."""
    try:
        args = build_parser().parse_args(list(argv))
        handler: Handler = args.handler
        return handler(args)
    except CliError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except PlanError as exc:
        print(f"vramplan: {exc.line()}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. `vramplan presets | head`
        return 0
    except OSError as exc:
        print(f"vramplan: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
