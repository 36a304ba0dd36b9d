"""The bodies of the headless commands (``vramplan estimate|check|fit|keys|presets|export``): each takes the parsed
arguments and returns the exit code; `vramplan.cli.parser` builds the parser that routes to them and runs them
(one line and exit code 2 for every user error). Never imports Textual."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import TYPE_CHECKING

from vramplan.cli.importing import resolve, with_import
from vramplan.core.plan.helpers.errors import PlanError, PlanNotice

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


def cmd_estimate(args: argparse.Namespace) -> int:
    from vramplan.cli.report import brief_line, estimate_document, estimate_table, time_table
    from vramplan.core.memory.peak import estimate
    from vramplan.core.time.step import step_time

    _broken_presets()

    plan = resolve(args)
    est = estimate(plan)
    st = step_time(plan)
    _past_context(plan, est.rl.update_seq_len if est.rl is not None else plan.training.seq_len)
    if args.json:  # always exit 0 on a valid plan: scripts read memory.fits (and treat non-zero as no estimate)
        sys.stdout.write(json.dumps(with_import(args, estimate_document(plan))) + "\n")
        return 0
    if args.brief:
        sys.stdout.write(brief_line(est, st) + "\n")
    else:
        sys.stdout.write(
            estimate_table(est, hardware_note=_detected_note(args, plan.hardware.gpu)) + "\n" + time_table(st)
        )
    return 0 if est.fits else 1


def _past_context(plan: Plan, seq: int) -> None:
    """One line when the trained sequence (an RL plan's own: `sequence_search`) is longer than the model's trained
    context (`trained_context`): the estimate holds for that length, but the model has no trained positions there."""
    from vramplan.core.advice.fit_limits import sequence_search, trained_context
    from vramplan.core.plan.describe import model_name

    context = trained_context(plan)
    if context is None or seq <= context:
        return
    key, prompt = sequence_search(plan)
    what = f"{key} {seq:,}" if not prompt else f"prompt {prompt:,} + {key} {seq - prompt:,} = {seq:,} tokens"
    warnings.warn(
        f"{what} is past {model_name(plan.model)}'s trained context of {context:,} tokens: the estimate is for "
        "that length, which the model was not trained on (extend its context first, e.g. RoPE scaling)",
        PlanNotice,
        stacklevel=2,
    )


def _broken_presets() -> None:
    """A broken user preset file is said, as ``vramplan presets`` says it: one that has a built-in's id would
    otherwise be replaced by the built-in without a word."""
    from vramplan.core.plan.catalogue.presets import registry

    for line in registry().problem_lines():
        warnings.warn(line, PlanNotice, stacklevel=2)


def _detected_note(args: argparse.Namespace, gpu_id: str) -> str:
    """``detected: 8 x H100 80GB HBM3`` when the hardware came from nvidia-smi (no plan file, no --gpu)."""
    if args.plan or args.gpu:
        return ""
    from vramplan.machine.nvidia_smi import detected_gpus

    det = detected_gpus()  # cached: resolve_plan already asked
    return det.label if det is not None and det.gpu_id == gpu_id else ""


def cmd_check(args: argparse.Namespace) -> int:
    """The troubleshooting checklist; exit code 1 when an item fails (to gate a review), 0 otherwise."""
    from vramplan.cli.report import checklist_text
    from vramplan.core.advice.checklist import checklist
    from vramplan.core.plan.describe import plan_title

    _broken_presets()

    plan = resolve(args)
    cl = checklist(plan, framework=args.framework)
    if args.json:
        sys.stdout.write(json.dumps(with_import(args, cl.to_json())) + "\n")
    else:
        sys.stdout.write(checklist_text(cl, plan_title(plan)))
    return cl.exit_code


def cmd_fit(args: argparse.Namespace) -> int:
    from vramplan.cli.report import advice_text
    from vramplan.core.advice.advisor import advise
    from vramplan.core.plan.describe import plan_title

    _broken_presets()

    plan = resolve(args)
    advice = advise(plan, limit=args.limit, framework=args.framework)
    if args.json:
        sys.stdout.write(json.dumps(with_import(args, advice.to_json())) + "\n")
    else:
        sys.stdout.write(advice_text(advice, plan_title(plan)))
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    """Every settable key with its type, default and meaning."""
    from vramplan.cli.listing import keys_json, keys_text
    from vramplan.core.plan.keyref import settable_keys

    keys = settable_keys()
    sys.stdout.write(json.dumps(keys_json(keys)) + "\n" if args.json else keys_text(keys))
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    from vramplan.cli.listing import hardware_listing, model_listing
    from vramplan.core.plan.catalogue.presets import registry

    reg = registry()
    if args.json:
        from vramplan.cli.listing import presets_json

        sys.stdout.write(json.dumps(presets_json(reg, args.kind)) + "\n")
        return 0
    parts = []
    if args.kind in (None, "models"):
        parts.append(model_listing(reg))
    if args.kind in (None, "hardware"):
        parts.append(hardware_listing(reg))
    sys.stdout.write("\n".join(parts))
    for line in reg.problem_lines():  # broken user presets: reported, the others still listed
        print(f"vramplan: {line}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from vramplan.cli.importing import calibrated, import_over
    from vramplan.core.files.export import default_file_name, export_plan, output_format, render
    from vramplan.core.files.planio import load_plan_file
    from vramplan.core.files.safewrite import OverwriteRefused
    from vramplan.core.plan.keys import apply_overrides
    from vramplan.machine.nvidia_smi import starting_plan

    _broken_presets()

    meta = None
    if args.plan:
        pf = load_plan_file(args.plan)
        for line in pf.notices:
            warnings.warn(line, PlanNotice, stacklevel=1)
        plan, meta = pf.plan, pf.meta
    else:
        plan = starting_plan()
    if args.from_file:
        plan = import_over(args, plan)
    else:
        plan = apply_overrides(plan, args.model, args.gpu, args.sets, args.hf_config)
    plan = calibrated(args, plan)
    out = args.output
    fmt = args.format or (output_format(out) if out and out != "-" else "toml")
    title = args.title if args.title is not None else (meta.title if meta else None)
    note = args.note if args.note is not None else (meta.note if meta else None)
    if out is not None and not out.strip():
        raise PlanError("empty path; give a file name, or - for stdout", "-o")
    if out == "-":
        rendered = render(fmt, plan, title=title or None, note=note or None)
        _say_warnings(rendered.warnings)
        sys.stdout.write(rendered.text)
        return 0
    path = out or default_file_name(plan, fmt)
    try:  # the one export writer (the app's too): the path checked, then rendered, then written atomically
        rendered = export_plan(
            path,
            fmt,
            plan,
            overwrite=args.force,
            format_given=args.format is not None,
            title=title or None,
            note=note or None,
        )
    except OverwriteRefused as exc:
        raise PlanError(f"{exc.message} (use --force to replace it)", exc.where) from None
    _say_warnings(rendered.warnings)
    written = rendered.written  # a symlink's target, where it differs
    sys.stdout.write(f"wrote {path}" + ("" if str(written) == path else f" (-> {written})") + "\n")
    return 0


def _say_warnings(lines: tuple[str, ...]) -> None:
    """What a DeepSpeed or accelerate config cannot express, one notice each."""
    for line in lines:
        warnings.warn(line, PlanNotice, stacklevel=2)
