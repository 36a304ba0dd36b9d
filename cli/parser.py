"""Headless commands: ``vramplan estimate|export|check|fit|presets|keys``: their parser and `run`, which routes to
their bodies (`vramplan.cli.handlers`). Never imports Textual.

Every user error is one line on stderr and exit code 2 (`PlanError`, argparse usage errors, OS errors).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO, cast

from vramplan.cli import COMMANDS, is_interrupt
from vramplan.cli.handlers import cmd_check, cmd_estimate, cmd_export, cmd_fit, cmd_keys, cmd_presets
from vramplan.cli.importing import add_from_arg
from vramplan.cli.stackfrom import add_stack_arg
from vramplan.core.plan.helpers.errors import PlanError, PlanNotice, printable, shown

# `fit --framework` and `check --framework`: core.advice.frameworks.FRAMEWORKS' keys, named here so that building
# the parser does not import the plan model (tests/cli/test_lazy_parser.py checks they agree)
FRAMEWORK_CHOICES = ("all", "hf-deepspeed", "fsdp", "megatron")

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A usage error: one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``vramplan estimate: unrecognized arguments: --x``)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)")


HEADROOM_HELP = (
    "GPU memory every suggestion leaves free, in percent (same as --set advice.headroom_percent=PERCENT; default: "
    "the estimate's worst under-prediction on similar published runs, at least 10%%)"
)


def _positive(text: str) -> int:
    """``--limit N``: a whole number of at least 1 (argparse turns the ValueError into a usage line)."""
    try:
        value = int(text.strip()) if len(text) < 20 else -1
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {shown(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {shown(text)}")
    return value


def _named(text: str) -> str:
    """``--model``, ``--gpu``, ``--hf-config``: never empty (an empty value is a mistake, not "unset")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _text(text: str) -> str:
    """``--title``, ``--note``: text a file will hold, so UTF-8. Python hands bytes of another encoding in the
    arguments over as lone surrogates (``caf\\udce9`` for latin-1's ``café``), which no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(text[exc.start]) - 0xDC00 if 0xDC80 <= ord(text[exc.start]) <= 0xDCFF else None
        what = f"byte 0x{byte:02x}" if byte is not None else f"character {exc.start + 1}"
        raise argparse.ArgumentTypeError(
            f"not UTF-8 text ({what} at {exc.start + 1}): set the terminal to UTF-8, or write it in a plan file"
        ) from None
    return text


def _plan_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    if required:
        p.add_argument("plan", metavar="PLAN.toml", help="plan file")
    else:
        p.add_argument("plan", nargs="?", metavar="PLAN.toml", help="plan file (default: the built-in default plan)")
    p.add_argument(
        "--model",
        type=_named,
        metavar="ID",
        help="model preset id (vramplan presets models), or a Hugging Face id ORG/NAME: its config.json from the "
        "local Hub cache (offline), else the preset that stands for it",
    )
    p.add_argument(
        "--hf-config",
        type=_named,
        metavar="PATH",
        help="the model of a local Hugging Face config.json, or of a checkpoint directory holding one",
    )
    p.add_argument(
        "--gpu",
        type=_named,
        metavar="ID",
        help="hardware preset id (vramplan presets hardware), or its nvidia-smi name; h100: the SXM part",
    )
    p.add_argument("--gpus", metavar="N", help="GPUs per node (same as --set hardware.gpus_per_node=N)")
    p.add_argument("--nodes", metavar="N", help="nodes (same as --set hardware.nodes=N)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override a plan key; VALUE is a TOML literal, a bare word is a string (repeatable)",
    )
    add_from_arg(p)
    p.add_argument(
        "--calibration",
        metavar="FILE",
        help="apply this machine's overheads measured by vramplan measure --save-calibration (CUDA context, "
        "allocator gap, NCCL) to the plan's [overhead] terms",
    )


# Each command's one line in `vramplan --help`, which its parser also uses as its help (a test checks that they
# agree): `build_parser(only)` gives the commands not run just this line, so a command builds only its own options
# and imports only its own modules.
SUMMARIES = {
    "estimate": "per-GPU memory and step time of a plan (table or --json)",
    "export": "write a plan as TOML (reloadable), a DeepSpeed or accelerate config or a Markdown report",
    "check": "troubleshooting checklist: OOM, NaN loss, slow training (exit 1 when an item fails)",
    "fit": "the smallest sets of changes that make a plan fit, fastest first",
    "presets": "list model and hardware presets",
    "keys": "every settable key (--set TABLE.KEY=VALUE) with its type, default and meaning",
    "gpus": "GPU selection guide: every GPU preset with the fewest GPUs that fit, step time, time and cost",
    "diff": "the keys two plan files differ in, and what each does to memory per GPU and step time",
    "help": "the documentation in the terminal: the topics, or one page",
    "measure": "run the plan's training step here (random weights) and show measured against predicted memory",
    "trace": "run the plan's step at full size on fake tensors and replay its allocations through PyTorch's allocator",
}


def build_parser(only: str | None = None) -> OneLineParser:
    """The parser of every command; with ``only`` (the command about to run), the others are their summary line
    (`SUMMARIES`) in the top-level help and no parser: ``vramplan estimate`` neither builds nor imports the other
    commands' (only ``only`` parses; the others are not run)."""
    parser = OneLineParser(
        prog="vramplan",
        description="Plan the GPU memory of LLM training before you launch it. "
        "Run without a command (optionally with a PLAN.toml) to open the planner.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, add in _PARSERS.items():
        if only is None or name == only:
            add(sub)
        else:  # only the line of --help that add_parser(name, help=...) makes: no parser (2 ms for the nine)
            sub._choices_actions.append(sub._ChoicesPseudoAction(name, (), SUMMARIES[name]))
    return parser


if TYPE_CHECKING:
    Sub = argparse._SubParsersAction[OneLineParser]  # what add_subparsers returns


def _estimate_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "estimate",
        help=SUMMARIES["estimate"],
        description="The memory per GPU at the step's peak, by kind, and the step time of a plan. Exit code: 0 "
        "when the plan fits, 1 when it does not (GPU, host memory or NVMe per node), 2 on bad input; --json always "
        "exits 0 on a valid plan: read memory.fits.",
        epilog="example: vramplan estimate --model llama-3.1-8b --gpu h100 --gpus 1 --brief",
    )
    _plan_args(p)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object on stdout (exit 0 even if it does not fit)")
    out.add_argument(
        "--brief", action="store_true", help="one line: fits: 17.8 / 80.0 GiB, 559.8 ms per step (or does not fit)"
    )
    add_stack_arg(p)
    p.set_defaults(handler=cmd_estimate)


def _export_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "export",
        help=SUMMARIES["export"],
        description="Write the plan as a TOML plan file (it loads back to the same plan, its estimate alongside), "
        "a DeepSpeed JSON or accelerate YAML config, or a Markdown report for review.",
        epilog="example: vramplan export --model llama-3.1-8b --gpu h100 -o plan.toml",
    )
    _plan_args(p)
    p.add_argument(
        "--format",
        choices=("toml", "deepspeed", "accelerate", "markdown"),
        help="default: from -o's extension (.toml, .json, .accelerate.yaml, .md), else toml",
    )
    p.add_argument("-o", "--output", metavar="PATH", help="file to write, - for stdout (default: a name from the plan)")
    p.add_argument("--force", action="store_true", help="replace PATH if it exists")
    p.add_argument("--title", type=_text, help="[meta] title / report heading (default: the plan file's)")
    p.add_argument("--note", type=_text, help="[meta] note / report preface (default: the plan file's)")
    p.set_defaults(handler=cmd_export)


def _check_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "check",
        help=SUMMARIES["check"],
        description="The troubleshooting checklist of a plan: out of memory, NaN loss, slow training, each item "
        "passing, warning or failing with its fix. Exit code 1 when an item fails, 2 on bad input.",
        epilog="example: vramplan check plan.toml --framework fsdp",
    )
    _plan_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument(
        "--framework",
        choices=FRAMEWORK_CHOICES,
        default="all",
        help="a memory fix this framework runs, as `fit --framework` (default: all)",
    )
    p.add_argument("--headroom", metavar="PERCENT", help=HEADROOM_HELP)
    add_stack_arg(p)
    p.set_defaults(handler=cmd_check)


def _fit_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "fit",
        help=SUMMARIES["fit"],
        description="The fit advisor: the smallest sets of changes (strategy, batch, precision, offload, GPUs) "
        "that make the plan fit, fastest step first.",
        epilog="example: vramplan fit --model llama-3.1-70b --gpu a100-80gb --gpus 8 --limit 5",
    )
    _plan_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--limit", type=_positive, default=10, metavar="N", help="at most N suggestions (default 10)")
    p.add_argument(
        "--framework",
        choices=FRAMEWORK_CHOICES,
        default="all",
        help="suggest only plans this framework runs (default: all)",
    )
    p.add_argument("--headroom", metavar="PERCENT", help=HEADROOM_HELP)
    add_stack_arg(p)
    p.set_defaults(handler=cmd_fit)


def _presets_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "presets",
        help=SUMMARIES["presets"],
        description="The model presets (parameters, layers) and GPU presets (memory, peak FLOP/s), built-in and "
        "your own; the ids are what --model and --gpu take.",
        epilog="example: vramplan presets hardware",
    )
    p.add_argument("kind", nargs="?", choices=("models", "hardware"))
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=cmd_presets)


def _keys_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "keys",
        help=SUMMARIES["keys"],
        description="Every key a plan file or --set TABLE.KEY=VALUE takes, with its type, default and meaning.",
        epilog="example: vramplan keys | grep -A1 zero_stage",
    )
    p.add_argument("--json", action="store_true", help="one JSON array on stdout")
    p.set_defaults(handler=cmd_keys)


def _gpus_parser(sub: Sub) -> None:
    from vramplan.cli import gpus  # the GPU guide (issue 17): its own module

    gpus.add_parser(sub, _plan_args)


def _diff_parser(sub: Sub) -> None:
    from vramplan.cli import diff

    diff.add_parser(sub)


def _help_parser(sub: Sub) -> None:
    from vramplan.cli import helptopics

    helptopics.add_parser(sub)


def _measure_parser(sub: Sub) -> None:
    from vramplan.cli import measuring  # vramplan measure (issue 29): torch only when it runs

    measuring.add_parser(sub, _plan_args)


def _trace_parser(sub: Sub) -> None:
    from vramplan.cli import tracing  # vramplan trace (issue 41): torch only when it runs

    tracing.add_parser(sub, _plan_args)


_PARSERS: dict[str, Callable[[Sub], None]] = {
    "estimate": _estimate_parser,
    "export": _export_parser,
    "check": _check_parser,
    "fit": _fit_parser,
    "presets": _presets_parser,
    "keys": _keys_parser,
    "gpus": _gpus_parser,
    "diff": _diff_parser,
    "help": _help_parser,
    "measure": _measure_parser,
    "trace": _trace_parser,
}


def _print_notices(caught: list[warnings.WarningMessage]) -> None:
    """`PlanNotice`s as one line each on stderr (exit code unchanged); other warnings shown as usual."""
    seen: set[str] = set()
    for w in caught:
        if issubclass(w.category, PlanNotice):
            line = str(w.message)
            if line not in seen:
                seen.add(line)
                print(f"vramplan: {line}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _note_this_machine() -> None:
    """This machine's host memory (/proc/meminfo), registered for its detected GPU (`core.plan.node`). Only for a
    command without a plan file, which detects the GPUs anyway (a plan file never runs nvidia-smi: it may describe
    another machine; hardware.host_memory_gib says its node's); ``VRAMPLAN_DETECT=0`` turns both readings off."""
    from vramplan.machine.host import note_this_machine
    from vramplan.machine.nvidia_smi import detected_gpus

    note_this_machine(detected_gpus())


def _silence_stdout() -> None:
    """After a broken pipe: stdout goes to /dev/null, so the flush at exit raises nothing ("Exception ignored")."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class TerminalText(io.TextIOBase):
    """A text stream that passes what is written to ``stream`` through `printable` (the one sanitiser of text that
    reaches a terminal), keeping newlines and tabs: an escape sequence in a preset's name or a plan's title is
    shown as ``\\x1b``, never run by the terminal."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text, keep="\n\t"))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()


def run(argv: Sequence[str]) -> int:
    """Run a headless command; user errors become one line on stderr and exit code 2. What the command prints, on
    stdout and stderr, goes through `printable` (`TerminalText`)."""
    with contextlib.redirect_stderr(cast(TextIO, TerminalText(sys.stderr))):
        return _run(argv)


def _run(argv: Sequence[str]) -> int:
    try:
        command = argv[0] if argv and argv[0] in COMMANDS else None  # the others: their summary line only
        args = build_parser(command).parse_args(list(argv))
        shortcuts = [
            f"{key}={value}"
            for key, value in (
                ("hardware.gpus_per_node", getattr(args, "gpus", None)),
                ("hardware.nodes", getattr(args, "nodes", None)),
                ("advice.headroom_percent", getattr(args, "headroom", None)),
            )
            if value is not None
        ]
        if shortcuts:  # --gpus/--nodes/--headroom first: an explicit --set of the same key wins
            args.sets = [*shortcuts, *args.sets]
        handler: Handler = args.handler
        output = io.StringIO()  # the command's stdout, held so its notices print before it (--gpu h100: taken as)
        try:
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(output):
                warnings.simplefilter("always", PlanNotice)
                if hasattr(args, "plan") and not args.plan:  # the starting plan, on this machine: its host memory
                    _note_this_machine()
                code = handler(args)
            _print_notices(caught)
        except BaseException as exc:
            if not is_interrupt(exc):  # an interrupt drops what the command had printed (__main__: "interrupted")
                sys.stdout.write(printable(output.getvalue(), keep="\n\t"))
            raise
        sys.stdout.write(printable(output.getvalue(), keep="\n\t"))
        return code
    except CliError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except PlanError as exc:  # a plan file's every bad key, in one line
        print(f"vramplan: {exc.full_line()}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `vramplan presets | head -1`: the reader has what it wanted
        _silence_stdout()
        return 0
    except OSError as exc:
        print(f"vramplan: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
