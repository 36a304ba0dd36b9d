"""The planner: the Textual app (``app``), its screens, widgets, commands table and ``app.tcss``.

Importing this package imports nothing heavy; ``vramplan.tui.app`` imports Textual."""
