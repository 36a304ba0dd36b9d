"""``vramplan diff A.toml B.toml``: the keys two plans differ in and what each does (`core.advice.plandiff`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from vramplan.core.plan.helpers.units import fmt_seconds, gib_text

if TYPE_CHECKING:  # imported when the command runs: `vramplan --help` stays fast
    from vramplan.core.advice.plandiff import PlanDiff


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "diff",
        help="the keys two plan files differ in, and what each does to memory per GPU and step time",
        description="The keys plan B differs from plan A in (after defaults), the memory per GPU by kind and the "
        "step time of each (per step and per token), and each changed key applied to A alone.",
        epilog="example: vramplan diff lora.toml qlora.toml",
    )
    p.add_argument("a", metavar="A.toml", help="plan file A (the one changes are measured from)")
    p.add_argument("b", metavar="B.toml", help="plan file B")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    from vramplan.core.advice.plandiff import plan_diff
    from vramplan.core.files.planio import load_plan

    d = plan_diff(load_plan(args.a), load_plan(args.b))
    if args.json:
        out = {"a_path": args.a, "b_path": args.b, **d.to_json()}
        sys.stdout.write(json.dumps(out, allow_nan=False) + "\n")
    else:
        sys.stdout.write(diff_text(d, args.a, args.b))
    return 0


def diff_text(d: PlanDiff, a_name: str = "A", b_name: str = "B") -> str:
    """The diff within 80 columns: the keys, the memory table by kind, the step time, each key alone."""
    from vramplan.cli.gpus import wrapped
    from vramplan.core.advice.plandiff import relative_text, signed_gib, value_text
    from vramplan.core.memory.kinds import ALL_KINDS, KIND_LABELS
    from vramplan.core.plan.describe import plan_title

    fa, fb = d.fa, d.fb
    lines = [f"A: {a_name}: {plan_title(d.a)}", f"B: {b_name}: {plan_title(d.b)}"]
    if d.same:
        lines.append("the plans are the same (after defaults)")
    else:
        lines.append(
            f"{len(d.keys)} key{'s' if len(d.keys) > 1 else ''} differ{'' if len(d.keys) > 1 else 's'} (A -> B):"
        )
        width = max(len(k.key) for k in d.keys)
        lines += [f"  {k.key:<{width}}  {value_text(k.a)} -> {value_text(k.b)}" for k in d.keys]
    lines.append("")
    lines.append(f"{'memory per GPU at the peak, GiB':<34}{'A':>10}{'B':>10}{'B - A':>10}")
    for kind in ALL_KINDS:  # an RL plan's kinds where either plan has them (`core.advice.plandiff.Figures`)
        va, vb = fa.memory.get(kind, 0), fb.memory.get(kind, 0)
        if va or vb:
            lines.append(f"  {KIND_LABELS[kind]:<32}{gib_text(va):>10}{gib_text(vb):>10}{signed_gib(vb - va):>10}")
    total = signed_gib(fb.total - fa.total)
    lines.append(f"  {'Total':<32}{gib_text(fa.total):>10}{gib_text(fb.total):>10}{total:>10}")
    lines.append(f"  {'GPU memory':<32}{gib_text(fa.gpu_capacity):>10}{gib_text(fb.gpu_capacity):>10}")
    fit = {True: "fits", False: "over"}
    lines.append(f"  {'Verdict':<32}{fit[fa.fits]:>10}{fit[fb.fits]:>10}")
    lines.append(f"  {'Peak moment':<32}{fa.peak_phase:>10}{fb.peak_phase:>10}")
    step_delta = fb.step_seconds - fa.step_seconds
    sign = "+" if step_delta >= 0 else "-"
    rel = relative_text(fb.step_seconds / fa.step_seconds).removesuffix(" step time")
    lines.append(
        f"{'step time':<34}{fmt_seconds(fa.step_seconds):>10}{fmt_seconds(fb.step_seconds):>10}"
        f"{sign + fmt_seconds(abs(step_delta)):>10} ({rel})"
    )
    lines.append(per_token_line(fa.tokens_per_second, fb.tokens_per_second))
    lines.append(f"{'tokens/s':<34}{fa.tokens_per_second:>10,.0f}{fb.tokens_per_second:>10,.0f}")
    if d.keys:
        lines.append("")
        lines.append("each change alone, applied to A:")
        for k in d.keys:
            head = f"{k.key} {value_text(k.a)} -> {value_text(k.b)}: "
            lines += wrapped(head + (k.alone.text() if k.alone else k.error))
    return "\n".join(lines) + "\n"


def per_token_line(tps_a: float, tps_b: float) -> str:
    """``step time per token, us`` of A and B, the change and its percentage: the step time over the tokens of the
    step (1 / tokens/s), fair between plans of different batches where the time per step is not."""
    from vramplan.core.advice.plandiff import relative_text

    us_a, us_b = 1e6 / tps_a, 1e6 / tps_b
    rel = relative_text(us_b / us_a).removesuffix(" step time")
    return f"{'step time per token, us':<34}{us_a:>10,.2f}{us_b:>10,.2f}{us_b - us_a:>+10,.2f} ({rel})"
