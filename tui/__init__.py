"""vramplan's front ends: the Textual app (``tui.app``) and the headless CLI (``tui.cli``).

Importing this package imports nothing heavy: the CLI loads Textual only when the app starts."""
