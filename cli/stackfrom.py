"""``--stack-from ENV_DIR`` of ``vramplan estimate|check|fit``: the package versions installed in a Python environment
(`vramplan.machine.environment`) fill the plan's ``stack.<package>`` keys that the plan file, ``--from`` and ``--set``
leave unset. Without the flag, the environment vramplan runs under (``VIRTUAL_ENV``, else ``CONDA_PREFIX``) is read,
unless ``VRAMPLAN_DETECT=0``. What was skipped is one line on stderr; the exit code is unchanged."""

from __future__ import annotations

import argparse
import warnings
from typing import TYPE_CHECKING, Any

from vramplan.core.plan.helpers.errors import PlanError, PlanNotice

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

STACK_FROM_HELP = (
    "fill the unset stack.<package> versions from this Python environment's dist-info (a venv or conda prefix; "
    "default: $VIRTUAL_ENV or $CONDA_PREFIX unless VRAMPLAN_DETECT=0)"
)


def _env_dir(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def add_stack_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack-from", dest="stack_from", type=_env_dir, metavar="ENV_DIR", help=STACK_FROM_HELP)


def stack_over(args: argparse.Namespace, plan: Plan) -> Plan:
    """``plan`` with the versions found in ``--stack-from`` (or the running environment) in the ``stack`` keys it
    leaves unset: the plan's own keys (its file, ``--from``, ``--set``) always win. The reader's warning becomes a
    notice (stderr); ``args.stack_found`` keeps what was read, for ``--json``."""
    from vramplan.machine.environment import default_environment, read_environment

    env = args.stack_from if args.stack_from is not None else default_environment()
    if env is None:
        return plan
    found = read_environment(env)
    args.stack_found = found
    if found.warning:
        warnings.warn(found.warning, PlanNotice, stacklevel=2)
    changes = {f"stack.{name}": v for name, v in found.versions.items() if getattr(plan.stack, name) is None}
    if not changes:
        return plan
    try:
        return plan.with_changes(changes)
    except PlanError as exc:  # the versions are valid; a combination they make invalid is said, not fatal
        warnings.warn(f"stack from {env}: versions not used ({exc.line()})", PlanNotice, stacklevel=2)
        return plan


def stack_json(args: argparse.Namespace) -> dict[str, Any] | None:
    """``{"path", "versions", "warning"}`` of the environment read, or None when none was."""
    found = getattr(args, "stack_found", None)
    if found is None:
        return None
    return {"path": found.path, "versions": dict(found.versions), "warning": found.warning}
