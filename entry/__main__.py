"""``vramplan``: the planner app, or a headless command (estimate, presets, ...)."""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Sequence

# typing.TYPE_CHECKING without importing typing (10-20 ms): until `main` runs, a Ctrl-C is Python's traceback, so
# this module imports nothing that is not loaded already (mypy reads a name TYPE_CHECKING as typing's)
TYPE_CHECKING = False

if TYPE_CHECKING:
    from vramplan.core.files.calibration import Calibration


INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    """Run vramplan: a command (`vramplan.cli.parser.run`) or the planner. Ctrl-C, wherever it lands (an import, the
    estimate, the fit advisor's sweep, an export's write), is one line and exit code 130: the one handler of
    interrupts for every command. A command prints nothing of what it had computed, an export leaves no file
    (`core.files.safewrite` removes its temporary file); `measure` stops after its phase on the first Ctrl-C (its
    own handler, around the measured steps) and comes here on the second."""
    try:
        code = _main(argv)
    except BaseException as exc:
        from vramplan.cli import is_interrupt  # light, and loaded by `_main`'s first lines

        if not is_interrupt(exc):  # a Ctrl-C, or one that an import wrapped in a RuntimeError
            raise
        if argv is None:  # this process is vramplan's: a second Ctrl-C while it exits is no traceback either
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("vramplan: interrupted", file=sys.stderr)
        if argv is None:
            # out at once, with the code a shell expects: an interrupt caught here may still be counted as
            # unhandled by the interpreter (seen once in ~100 interrupted runs: it then ended itself by SIGINT
            # at exit), and an interrupted command has nothing left to finalise (a temporary file is gone)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(INTERRUPTED)
        return INTERRUPTED
    if argv is None:  # done: a Ctrl-C while the interpreter exits has nothing left to stop ("Exception ignored")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    closed = _closed_streams()
    skip_plugin_discovery()
    from vramplan.cli import COMMANDS  # the names only: the planner's start imports no command

    if "output" in closed:  # `vramplan estimate >&-`: nothing can be shown; say so where possible
        print("vramplan: standard output is closed: nothing can be written", file=sys.stderr)
        return 2
    if args and (args[0] in COMMANDS or args[0] in ("-h", "--help", "--version")):
        if args[0] == "--version":
            from vramplan import __version__

            print(f"vramplan {__version__}")
            return 0
        from vramplan.cli.parser import run

        paused = pause_collector(args[0])
        try:
            return run(args)
        finally:
            # this process is the command's (`vramplan ...`, `python -m vramplan ...`): nothing to free at exit
            # (see `pause_collector`); `measure` leaves torch's objects (process groups and their threads) to be
            # finalised at exit, as a training run does
            if argv is None and args[0] not in COLLECTED:
                gc.freeze()
            if paused:
                gc.enable()
    return run_app(args)


def skip_plugin_discovery() -> None:
    """No pydantic plugin discovery in vramplan's own process (``PYDANTIC_DISABLE_PLUGINS``, unless the user set
    it). pydantic looks for plugins when its first model class is made, by reading the entry points of every
    installed distribution: 3 ms in a bare venv of 19 packages, 4-11 ms in one of 50, more in a training
    environment; the plugins (validation observers) have nothing to observe in a planner. Not done on import:
    a program that imports vramplan as a library keeps its plugins."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


# the commands run with the collector on: `vramplan measure` runs a training step, whose tensors held in reference
# cycles must be freed as a training run frees them, or the measured peak would count them
COLLECTED = frozenset({"measure"})


def pause_collector(command: str) -> bool:
    """No garbage collection while a headless command runs (except `COLLECTED`); True when this paused it (the
    caller turns it back on). Nearly everything a command makes lives to its end (modules, the plan's model classes,
    the plan): the collector only walks it again and again, some 60 young and 6 older collections in a cold
    ``vramplan estimate``, 10-15 ms of its 250; left uncollected at its end, some 800 objects (cycles its imports
    leave). The longest commands, ``vramplan fit`` and ``gpus``, peak at the same memory either way (40 MB, within
    0.5 MB).

    In the command's own process (`main` reading ``sys.argv``) what is alive is then frozen (`gc.freeze`), so the
    interpreter's exit neither walks it in its last collections nor frees it piece by piece (the modules' classes,
    pydantic's validators: the system takes the memory back at once): exit took 40-75 ms after a cold ``vramplan
    estimate``, 8-12 ms frozen. A caller's `main(argv)` (the tests run hundreds in one process) freezes nothing."""
    if command in COLLECTED or not gc.isenabled():
        return False
    gc.disable()
    return True


def _closed_streams() -> list[str]:
    """Which of stdout/stderr were closed when vramplan started (Python sets them to None). Their file
    descriptors are then taken by /dev/null, so no file vramplan opens later gets descriptor 1 or 2 (where a
    stray print would land in it); a closed stderr is /dev/null from then on."""
    closed = []
    for name, fd in (("output", 1), ("error", 2)):
        if getattr(sys, "std" + ("out" if fd == 1 else "err")) is None:
            closed.append(name)
            try:
                os.fstat(fd)
            except OSError:
                os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the rest of the process
    return closed


# difflib's similarity ratio from which a bare word is read as a command: `estmate`, `preset`, `gpu`, `checks`,
# `hepl` are; `test`, `fix`, `plan` are not (plan names, which open the planner)
MISTYPED = 0.7


def _bare_word(arg: str) -> bool:
    """No directory and no extension: where a command goes, not a plan file's path (``plan.toml``, ``plans/x``)."""
    return not (os.sep in arg or (os.altsep and os.altsep in arg) or "." in arg)


def mistyped_command(arg: str) -> str:
    """``; did you mean estimate?`` when ``arg``, given where a command or a plan file goes, names no file and reads
    as a mistyped command: a bare word (no directory, no extension) close to a command's name (`vramplan estmate`,
    `vramplan Presets`, `vramplan hepl`), else empty. A bare word that names no file is an error either way
    (`run_app`); a plan path that does not exist still opens the planner, which says so."""
    if not _bare_word(arg) or os.path.lexists(arg):
        return ""
    from vramplan.cli import COMMANDS
    from vramplan.core.plan.helpers.errors import suggest

    return suggest(arg.lower(), (*COMMANDS, "--help", "--version"), cutoff=MISTYPED)


def _calibration_arg(args: list[str]) -> tuple[list[str], Calibration | str | None]:
    """The arguments without ``--calibration FILE`` (or ``--calibration=FILE``), and that file's calibration,
    checked against the default plan; a problem is returned as its one line (a str); None without the option."""
    rest: list[str] = []
    path: str | None = None
    it = iter(args)
    for a in it:
        if a == "--calibration":
            path = next(it, "")
        elif a.startswith("--calibration="):
            path = a.partition("=")[2]
        else:
            rest.append(a)
    if path is None:
        return rest, None
    from vramplan.core.files.calibration import apply_calibration, read_calibration
    from vramplan.core.plan.helpers.errors import PlanError
    from vramplan.core.plan.schema.plan import default_plan

    try:
        if not path.strip():
            raise PlanError("expected a calibration file", "--calibration")
        cal = read_calibration(path)
        apply_calibration(default_plan(), cal)  # its values within the [overhead] table's bounds
    except PlanError as exc:
        return rest, exc.line()
    return rest, cal


def run_app(args: list[str]) -> int:
    """Open the planner on a plan file (or the default plan). Errors in the file are shown, not raised; a bad
    ``--calibration FILE`` is one line and exit 2 before the app starts."""
    args, calibration = _calibration_arg(args)
    if isinstance(calibration, str):
        print(f"vramplan: {calibration}", file=sys.stderr)
        return 2
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(f"vramplan: unknown command or option {args[0]!r} (see vramplan --help)", file=sys.stderr)
        return 2
    if args and _bare_word(args[0]) and not os.path.lexists(args[0]):  # `vramplan bogus` opened the planner
        hint = mistyped_command(args[0])
        print(
            f"vramplan: no command or plan file {args[0]!r}{hint} (vramplan --help lists the commands)", file=sys.stderr
        )
        return 2
    from vramplan.tui.startup import long_lived

    with long_lived():  # no garbage collection while the app's modules load (see `vramplan.tui.startup`)
        if not args:  # nvidia-smi runs in a thread while Textual is imported (never delaying the first frame)
            from vramplan.tui import detection

            detection.begin()
        from vramplan.tui.app import VramplanApp

    app = VramplanApp(plan_path=args[0] if args else None, freeze=True, calibration=calibration)  # the only app
    refused = app.run()  # 2 without a terminal (said on stderr); else the app's return code
    return app.return_code or (refused if isinstance(refused, int) else 0)


if __name__ == "__main__":
    sys.exit(main())
