"""The headless commands (``vramplan estimate|export|check|fit|presets``): argparse over `vramplan.core`, plain
text or JSON on stdout. Never imports Textual or Rich; importing this package imports nothing heavy."""
