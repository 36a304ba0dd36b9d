"""The headless commands (``vramplan estimate|export|check|fit|presets``): argparse over `vramplan.core`, plain
text or JSON on stdout. Never imports Textual or Rich; importing this package imports nothing heavy."""

# The subcommands, by name: `vramplan.__main__` tells a command from a plan file with them, without importing
# the commands (argparse and the commands' modules: 9M instructions of the planner's start). `build_parser` adds
# each; a test checks that the two agree.
COMMANDS = ("estimate", "export", "check", "fit", "presets", "keys", "gpus", "diff", "help", "measure", "trace")
