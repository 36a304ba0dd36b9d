"""Pieces of the Python scripts that tests run in a fresh process (`python -c`)."""

# The app's `run` replaced as its module loads (`vramplan.__main__` imports it): no terminal in a test, and what is
# checked is what `vramplan` does before the app runs.
APP_RUN_REPLACED = (
    "import builtins\n"
    "real = builtins.__import__\n"
    "def hooked(name, *args, **kw):\n"
    "    module = real(name, *args, **kw)\n"
    "    if name == 'vramplan.tui.app':\n"
    "        module.VramplanApp.run = lambda self: None\n"
    "    return module\n"
    "builtins.__import__ = hooked\n"
)
