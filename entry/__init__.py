"""vramplan: plan the GPU memory and time of LLM training before you launch it.

Installed, everything lives under this one name: ``vramplan.core`` (the pure domain: plan, memory, time, advice,
files), ``vramplan.presets`` (TOML data), ``vramplan.cli`` (the headless commands) and ``vramplan.tui`` (the
Textual app). Importing this package imports nothing else, so ``vramplan --help`` and ``--version`` start fast.
"""

__version__ = "0.1.0"
