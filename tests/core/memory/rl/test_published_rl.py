"""The published RL runs (tests/data/published_rl.json, written by ``python -m bench.data.published_rl --write``):
none that trained is predicted not to fit, and the run reported out of memory is not predicted to fit (issue 30,
"Done when")."""

from __future__ import annotations

import json

import pytest

from bench.data.published_rl import CASES, estimate_case
from tests.conftest import DATA

PUBLISHED = json.loads((DATA / "published_rl.json").read_text())


def test_the_data_file_is_the_scripts_cases() -> None:
    assert PUBLISHED["cases"] == json.loads(json.dumps(CASES))
    assert all(c["source"].startswith("https://") for c in PUBLISHED["cases"] + PUBLISHED["excluded"])


@pytest.mark.parametrize("case", PUBLISHED["cases"], ids=[c["id"] for c in PUBLISHED["cases"]])
def test_the_fit_verdict_agrees_with_the_run(case: dict) -> None:
    assert estimate_case(case)["fits"] == case["fits"]
