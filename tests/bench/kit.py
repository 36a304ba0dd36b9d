"""Imports of the GPU measurement kit (bench/measure/gpu_*.py, plain scripts beside each other) for the tests."""

from __future__ import annotations

import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2] / "bench" / "measure"
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

import gpu_estimate  # noqa: E402
import gpu_kit  # noqa: E402
import gpu_plans  # noqa: E402
import gpu_results  # noqa: E402

__all__ = ["KIT", "gpu_estimate", "gpu_kit", "gpu_plans", "gpu_results"]
