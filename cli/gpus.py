"""``vramplan gpus [PLAN]``: the GPU selection guide (`core.advice.gpuguide`) as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from vramplan.core.plan.helpers.errors import PlanError, PlanNotice
from vramplan.core.plan.helpers.units import fmt_count, parse_number

if TYPE_CHECKING:  # imported when the command runs: `vramplan --help` stays fast
    from vramplan.core.advice.gpuguide import GpuRow, Guide

SORTS = ("time", "cost")  # core.advice.gpuguide.SORTS (which checks it again)


def add_parser(sub: argparse._SubParsersAction, plan_args: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "gpus",
        help="GPU selection guide: every GPU preset with the fewest GPUs that fit, step time, time and cost",
        description="For the plan's model, method and strategies: every GPU preset with the fewest GPUs that fit "
        "(1, 2, 4, 8 on one node, then nodes of 8), the step time, tokens/s and, with --tokens and --price, the time "
        "and cost to train. The plan's GPU and GPU count are what the guide varies (--gpu only says whose "
        "hardware.price_per_gpu_hour the plan's price is).",
        epilog="example: vramplan gpus --model llama-3.1-70b --tokens 2T --price 2.5",
    )
    plan_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--sort", choices=SORTS, default="time", help="time per token (default) or cost to train")
    p.add_argument("--tokens", metavar="N", help="token budget for time and cost to train, e.g. 2T, 300B")
    p.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="[GPU=]USD",
        help="price per GPU-hour of one GPU preset (GPU=USD), or of every GPU without one (USD); repeatable",
    )
    p.add_argument("--no-advice", action="store_true", help="skip the fit advisor's change for fewer GPUs")
    p.set_defaults(handler=cmd_gpus)


def parse_prices(items: list[str]) -> dict[str, float]:
    """``--price h100-80gb=2.5 --price 1.8`` -> ``{"h100-80gb": 2.5, "*": 1.8}``."""
    out: dict[str, float] = {}
    for item in items:
        gpu, sep, text = item.rpartition("=")
        try:
            value = parse_number(text)
        except ValueError:
            value = None
        if value is None or value < 0:
            raise PlanError(f"expected [GPU=]USD per GPU-hour, got {item!r}", "--price")
        out[gpu.strip() if sep else "*"] = float(value)
    return out


def cmd_gpus(args: argparse.Namespace) -> int:
    from vramplan.cli.importing import resolve
    from vramplan.core.advice.gpuguide import gpu_guide

    if args.tokens is not None:
        args.sets = [f"training.tokens={args.tokens}", *args.sets]  # an explicit --set of the same key wins
    plan = resolve(args)  # PLAN.toml or the starting plan, --from FILE over it, then the command line
    from vramplan.core.plan.catalogue.presets import resolve_gpu_id

    prices = {k if k == "*" else resolve_gpu_id(k)[0]: v for k, v in parse_prices(args.price).items()}
    guide = gpu_guide(plan, sort=args.sort, prices=prices, advise=not args.no_advice)
    from vramplan.core.plan.catalogue.presets import registry

    for problem in registry().problems:  # a broken user preset is not in the guide: say so
        warnings.warn(f"skipped user preset: {problem}", PlanNotice, stacklevel=1)
    if args.json:
        sys.stdout.write(json.dumps(guide.to_json(), allow_nan=False) + "\n")
    else:
        sys.stdout.write(guide_text(guide))
    return 0


HEADER = ("GPU", "GiB", "GPUs", "GiB/GPU", "step", "tokens/s", "train", "cost USD")
WIDTHS = (19, 4, 5, 7, 8, 8, 11, 10)  # with one space between: 79 columns


def change_line(row: GpuRow) -> str:
    """``1 GPU with optimizer offload to CPU (step 1.02 s)``, or ""."""
    return row.change.text() if row.change else ""


def guide_title(guide: Guide) -> list[str]:
    from vramplan.core.plan.describe import method_label, model_name

    p = guide.plan
    t = p.training
    lines = [
        f"GPU guide: {model_name(p.model)} {method_label(t)}, {t.regime}",
        f"{_strategies(guide)}; micro-batch {t.micro_batch_size} x {t.seq_len:,} tokens, accumulation "
        f"{t.grad_accum_steps}",
    ]
    if t.tokens:
        lines.append(f"{fmt_count(t.tokens)} tokens to train")
    return [w for line in lines for w in textwrap.wrap(line, 80, subsequent_indent="  ")]


def _strategies(guide: Guide) -> str:
    from vramplan.core.plan.describe import parallel_summary  # lazy: `vramplan --help` loads no pydantic

    summary = parallel_summary(guide.plan, offload=True, data_parallel=False)
    checkpointing = f"checkpointing {guide.plan.strategy.gradient_checkpointing}"
    return f"{summary}, {checkpointing}" if summary else checkpointing


def wrapped(text: str) -> list[str]:
    """An item line within 80 columns: two spaces in, continuation lines four."""
    return textwrap.wrap(text, 78, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)


def guide_text(guide: Guide) -> str:
    """The guide within 80 columns: a table of the GPUs that fit, those that do not and why, the changes."""
    from vramplan.core.advice.gpuguide import MAX_GPUS
    from vramplan.core.plan.describe import short_gpu_name

    lines = guide_title(guide)
    lines.append(f"fewest GPUs that fit as planned (1, 2, 4, 8, nodes of 8 to {MAX_GPUS}); sorted by {guide.sort}")
    fmt = " ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(WIDTHS))
    lines.append(fmt.format(*HEADER).rstrip())
    fitting = [r for r in guide.rows if r.fits]
    for r in fitting:
        cells = list(r.cells())
        if len(cells[0]) > WIDTHS[0]:
            cells[0] = cells[0][: WIDTHS[0] - 1] + "…"
        lines.append(fmt.format(*cells).rstrip())
    if fitting:
        lines += wrapped(f"step, train and cost: {guide.time_error.text('too fast')}")
    missing = [r for r in guide.rows if not r.fits]
    if missing:
        lines.append("does not fit:")
        for r in missing:
            lines += wrapped(f"{short_gpu_name(r.name)}: {r.why}")
    changes = [(r, change_line(r)) for r in guide.rows if r.change is not None]
    if changes:
        lines.append("fewer GPUs with one change (the fit advisor's cheapest):")
        for r, text in changes:
            lines += wrapped(f"{short_gpu_name(r.name)}: {text}")
    skipped = [r for r in guide.rows if r.change_note.startswith("not searched")]
    if skipped:
        lines.append(f"  (advisor not asked for {len(skipped)} GPUs: time budget)")
    if guide.plan.training.tokens is None:
        lines.append("time and cost to train: give a token budget (--tokens 2T) and prices (--price GPU=USD)")
    elif not any(r.cost is not None for r in guide.rows):
        lines.append("cost: no GPU has a price; give --price GPU=USD per GPU-hour (or --price USD for all)")
    return "\n".join(lines) + "\n"
