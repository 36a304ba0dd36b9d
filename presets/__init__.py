"""Built-in presets: data, not code. One TOML file per model (``models/``) and per GPU (``hardware/``), each
citing its source. ``core.plan.catalogue.presets`` validates and loads them."""

from pathlib import Path

DATA_DIR = Path(__file__).parent
