"""vramplan.core's public face: the names of `__all__`, each the object its module defines, loaded on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import vramplan.core as core


def test_every_public_name_is_its_modules_object() -> None:
    assert sorted(core.__all__) == sorted(core._HOME)
    for name in core.__all__:
        assert getattr(core, name) is getattr(importlib.import_module(core._HOME[name]), name), name
        assert name in dir(core)


def test_the_public_face_estimates_a_plan() -> None:
    from vramplan.core import default_plan, estimate, step_time

    plan = default_plan()
    assert estimate(plan).total > 0 and step_time(plan).step_seconds > 0


def test_importing_core_imports_no_module_of_it() -> None:
    code = "import sys, vramplan.core\nprint(sorted(m for m in sys.modules if m.startswith('vramplan.core.')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
