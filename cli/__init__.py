"""The headless commands (``vramplan estimate|export|check|fit|presets``): argparse over `vramplan.core`, plain
text or JSON on stdout. Never imports Textual or Rich; importing this package imports nothing heavy."""

# The subcommands, by name: `vramplan.__main__` tells a command from a plan file with them, without importing
# the commands (argparse and the commands' modules: 9M instructions of the planner's start). `build_parser` adds
# each; a test checks that the two agree.
COMMANDS = ("estimate", "export", "check", "fit", "presets", "keys", "gpus", "diff", "help", "measure", "trace")


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C, raised as it is or wrapped: CPython 3.11 re-raises what a descriptor's
    ``__set_name__`` raised (a class body, run by an import: ``platform.uname_result``) as a RuntimeError caused by
    it, so a Ctrl-C landing there was a traceback and exit 1. Only an explicit cause counts (``raise ... from``): an
    error raised while handling an interrupt is an error of its own."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause of a cause, not an endless chain
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__
    return False
