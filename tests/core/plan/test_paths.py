"""Typed paths: ``~`` expansion that never raises, NUL named as a user error (not a ValueError traceback)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vramplan.core.files.planio import load_plan_file
from vramplan.core.files.safewrite import WriteError, write_atomic
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.paths import user_path
from vramplan.core.plan.schema.plan import default_plan


def test_home_is_expanded_and_an_unknown_user_is_kept_as_written() -> None:
    assert user_path("~/plan.toml") == Path(os.path.expanduser("~")) / "plan.toml"
    with pytest.raises(RuntimeError):  # what pathlib does, and why user_path exists
        Path("~no-such-user-here/plan.toml").expanduser()
    assert user_path("~no-such-user-here/plan.toml") == Path("~no-such-user-here/plan.toml")


def test_nul_is_a_plan_error_everywhere_a_path_is_typed(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="NUL character"):
        user_path("plan\0.toml")
    with pytest.raises(WriteError, match="NUL character"):
        write_atomic(tmp_path / "plan\0.toml", "x")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(PlanError, match="NUL character"):
        load_plan_file(tmp_path / "plan\0.toml")
    with pytest.raises(PlanError, match="NUL character"):
        default_plan().with_changes({"model.hf_config": "config\0.json"})
    with pytest.raises(PlanError, match="no such file or directory"):
        default_plan().with_changes({"model.hf_config": "~no-such-user-here/config.json"})
