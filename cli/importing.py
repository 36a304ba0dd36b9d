"""``--from FILE`` of ``vramplan estimate|check|fit|export``: a DeepSpeed, accelerate, torchtune, axolotl,
LLaMA-Factory, TRL (DPO/GRPO) or verl config read into the plan (`vramplan.core.files.importers`); each setting
read or ignored is one line on stderr, and ``--json`` output carries them under ``"import"``."""

from __future__ import annotations

import argparse
import warnings
from typing import TYPE_CHECKING, Any

from vramplan.core.plan.helpers.errors import PlanNotice

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

FROM_HELP = (
    "read the training settings of a DeepSpeed JSON, accelerate, torchtune, axolotl, LLaMA-Factory, TRL DPO/GRPO "
    "or verl config into the plan (--model/--hf-config, --gpu/--gpus/--nodes and --set win over the file)"
)


def add_from_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_file", metavar="FILE", help=FROM_HELP)


def import_over(args: argparse.Namespace, base: Plan) -> Plan:
    """``base`` with ``--from FILE``'s settings and the command line's overrides; the lines of what was read and
    ignored are emitted as notices (stderr)."""
    from vramplan.core.files.importers.apply import import_config

    imported = import_config(args.from_file, base, args.model, args.gpu, args.sets, args.hf_config)
    for line in imported.lines():
        warnings.warn(line, PlanNotice, stacklevel=2)
    args.imported = imported
    return imported.plan


def resolve(args: argparse.Namespace) -> Plan:
    """The plan of a headless command: PLAN.toml or the starting plan, ``--from FILE`` over it, then the command
    line."""
    from vramplan.core.files.planio import load_plan, resolve_plan
    from vramplan.machine.nvidia_smi import starting_plan

    if not getattr(args, "from_file", None):
        plan = resolve_plan(args.plan, args.model, args.gpu, args.sets, args.hf_config, start=starting_plan)
    else:
        plan = import_over(args, load_plan(args.plan) if args.plan else starting_plan())
    plan = calibrated(args, plan)
    if not hasattr(args, "stack_from"):  # a command without --stack-from (vramplan gpus)
        return plan
    from vramplan.cli.stackfrom import stack_over

    return stack_over(args, plan)  # last: only the stack versions the plan leaves unset


def calibrated(args: argparse.Namespace, plan: Plan) -> Plan:
    """``plan`` with ``--calibration FILE``'s ``[overhead]`` terms (over the plan file's and --set's), said in one
    notice line; the plan as it is without the flag."""
    path = getattr(args, "calibration", None)
    if path is None:
        return plan
    from vramplan.core.files.calibration import apply_calibration, read_calibration

    cal = read_calibration(path)
    out = apply_calibration(plan, cal)
    warnings.warn(f"calibrated from {cal.provenance()}: {'; '.join(cal.lines())}", PlanNotice, stacklevel=2)
    return out


def with_import(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """A command's JSON object, with ``"import"`` (file, format, read, ignored) when ``--from`` was given, and
    ``"stack_from"`` (path, versions, warning) when an environment's versions were read."""
    from vramplan.cli.stackfrom import stack_json

    imported = getattr(args, "imported", None)
    if imported is not None:
        data["import"] = imported.to_json()
    stack = stack_json(args)
    if stack is not None:
        data["stack_from"] = stack
    return data
